"""A method is added by its own module alone, with one decorator, and removed by deleting it:
`rlvr_div.trainers.plugin.plugin_modules` finds every module of the package that registers a plug-in (issue 34), and
the plug-ins run in the order their phases and `after` declarations give (issue 59). The test writes a plug-in module
into the package, checks in a fresh interpreter that its key is a recipe key of `trainer: divergence` and that it runs
where it declares, then deletes the file and checks that nothing of it is left; and it checks the order the committed
results were made in where order changes a result or an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlvr_div" / "trainers"
NAME = "zz_added_method_probe"

MODULE = '''"""A method added by this file alone (tests/test_plugin_discovery.py writes and deletes it)."""

from dataclasses import dataclass, field

from rlvr_div.ranges import NON_NEGATIVE
from rlvr_div.trainers.plugin import GRPOPlugin, register_plugin


@dataclass
class ProbeArgs:
    probe_coef: float = field(default=0.0, metadata={"help": "the probe's coefficient"})


@register_plugin("advantages", after=("simko",))
class Probe(GRPOPlugin):
    name = "probe"
    Args = ProbeArgs
    ranges = {"probe_coef": NON_NEGATIVE}

    @classmethod
    def active(cls, args):
        return args.probe_coef > 0
'''

PROBE = """
import dataclasses, json
from rlvr_div.errors import ConfigError
from rlvr_div.trainers.grpo import DivergenceGRPOConfig, PLUGIN_CLASSES
from rlvr_div.trainers.plugin import plugin_modules
keys = [f.name for f in dataclasses.fields(DivergenceGRPOConfig)]
out = {"modules": list(plugin_modules()), "plugins": [c.name for c in PLUGIN_CLASSES], "has_key": "probe_coef" in keys}
if out["has_key"]:
    try:
        DivergenceGRPOConfig(output_dir="/tmp/probe", probe_coef=-1.0, use_cpu=True, report_to=[])
    except ConfigError as e:
        out["error"] = str(e)
print(json.dumps(out))
"""


def _probe() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _remove() -> None:
    (PACKAGE / f"{NAME}.py").unlink(missing_ok=True)
    for cached in (PACKAGE / "__pycache__").glob(f"{NAME}.*"):
        cached.unlink()


def test_a_method_is_added_by_its_module_alone_and_removed_by_deleting_it():
    before = _probe()
    assert not before["has_key"] and before["modules"][0] == "rlvr_div.trainers.covariance_clip"  # by module name
    (PACKAGE / f"{NAME}.py").write_text(MODULE)
    try:
        added = _probe()
    finally:
        _remove()
    assert added["has_key"]
    simko = added["plugins"].index("simko")  # an advantages plug-in, placed as soon as what it comes after is
    assert added["plugins"][simko + 1] == "probe"
    assert [p for p in added["plugins"] if p != "probe"] == before["plugins"]
    assert added["modules"] == before["modules"] + [f"rlvr_div.trainers.{NAME}"]
    assert added["error"] == "probe_coef must be a finite number >= 0, got -1.0"  # its declared range, enforced
    assert _probe() == before


def _plugin(name: str, phase: str, after: tuple[str, ...] = ()) -> type:
    from rlvr_div.trainers.plugin import GRPOPlugin

    return type(name, (GRPOPlugin,), {"name": name, "phase": phase, "after": after, "__module__": f"m.{name}"})


def test_the_order_is_after_then_phase_then_module_name():
    from rlvr_div.trainers.plugin import plugin_order

    a, b = _plugin("a", "callbacks"), _plugin("b", "advantages", after=("c",))
    c, d = _plugin("c", "loss_term"), _plugin("d", "advantages")
    assert [p.name for p in plugin_order([a, b, c, d])] == ["d", "c", "b", "a"]
    with pytest.raises(TypeError, match="plug-in 'b' comes after 'c', which is no plug-in"):
        plugin_order([a, b, d])
    e, f = _plugin("e", "advantages", after=("f",)), _plugin("f", "advantages", after=("e",))
    with pytest.raises(TypeError, match="plug-ins e, f come after one another in a cycle"):
        plugin_order([a, e, f])


def test_register_plugin_refuses_what_a_plug_in_cannot_be():
    import torch

    from rlvr_div.trainers.plugin import GRPOPlugin, plugin_classes, register_plugin

    assert "mara" in [c.name for c in plugin_classes()]  # the package's plug-ins are registered
    with pytest.raises(TypeError, match="unknown plug-in phase 'loss'"):
        register_plugin("loss")

    class Terms(GRPOPlugin):
        name = "terms_probe"

        def loss_term(self, model, inputs):
            return torch.zeros(())

    with pytest.raises(
        TypeError, match="'terms_probe' of phase 'advantages' implements 'loss_term', a hook of another"
    ):
        register_plugin("advantages")(Terms)

    class Twin(GRPOPlugin):
        name = "mara"

    with pytest.raises(TypeError, match=r"plug-ins rlvr_div\.trainers\.mara\.Mara and .*Twin share the name 'mara'"):
        register_plugin("advantages")(Twin)


def test_the_order_where_it_changes_a_result_or_an_error():
    """What depends on the order, declared by `after`: the loss terms are added in the order the committed runs added
    them (divergence, DPH-RL's rehearsal, SimKO); α-DPG takes TRL's beta before the divergence term reads it; every
    plug-in that asks for a KL penalty or a log-prob penalty prepares after the plug-ins that own it; the
    `reward_shaping` key is checked before any shaping (an unknown name is reported as such)."""
    import importlib
    import inspect

    from rlvr_div.trainers.plugin import plugin_classes
    from rlvr_div.trainers.reward_shaping import RewardShaping

    order = [c.name for c in plugin_classes()]
    terms = [c.name for c in plugin_classes() if c.phase == "loss_term" and c.name != "covariance_penalty"]
    assert terms == ["divergence", "dph_rehearsal", "simko"]
    assert order.index("dpg") < order.index("divergence")

    def source(cls: type) -> str:
        return inspect.getsource(importlib.import_module(cls.__module__))

    readers = [c.name for c in plugin_classes() if "kl_penalties(" in source(c)]  # who asks for a KL penalty
    assert set(readers) >= {"mara", "prorl", "sequence_kl", "validity_target"}
    assert all(order.index(r) > order.index("divergence") for r in readers)
    assert order.index("simko") > max(order.index("divergence"), order.index("covariance_penalty"))
    shapings = [c.name for c in plugin_classes() if issubclass(c, RewardShaping)]
    assert len(shapings) >= 11 and all(order.index(s) > order.index("reward_shaping") for s in shapings)


def test_the_how_to_shows_the_real_method():
    """docs/contributing.md's example is rlvr_div/trainers/sequence_kl.py, abridged: every code line of the snippet
    (comments and the help text aside) is a line of the module."""
    import re

    docs = (ROOT / "docs" / "contributing.md").read_text()
    snippet = re.search(r"## Adding a method\n.*?```python\n(.*?)```", docs, re.S).group(1)

    def bare(line: str) -> str:  # a line without its comment; a def by its name (the module's has type hints)
        line = line.split("  #")[0].strip()
        return line.split("(")[0] if line.startswith("def ") else line

    source = {bare(line) for line in (PACKAGE / "sequence_kl.py").read_text().splitlines()}
    code = [bare(line) for line in snippet.splitlines()]
    code = [line for line in code if line and line != "..." and "metadata=" not in line]
    assert len(code) >= 15 and [line for line in code if line not in source] == []
