"""Every accelerate config in launch/ loads with accelerate's own loader and says what its name says."""

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
EXPECTED = {
    "single_gpu": (DistributedType.NO, None),
    "ddp": (DistributedType.MULTI_GPU, None),
    "zero2": (DistributedType.DEEPSPEED, 2),
    "zero3": (DistributedType.DEEPSPEED, 3),
    "fsdp2": (DistributedType.FSDP, 2),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_config_loads(name):
    cfg = load_config_from_file(str(LAUNCH / f"{name}.yaml"))
    kind, level = EXPECTED[name]
    assert cfg.distributed_type == kind
    if kind == DistributedType.DEEPSPEED:
        assert cfg.deepspeed_config["zero_stage"] == level
    if kind == DistributedType.FSDP:
        assert cfg.fsdp_config["fsdp_version"] == level


def test_no_stray_configs():
    assert {p.stem for p in LAUNCH.glob("*.yaml")} == set(EXPECTED)
