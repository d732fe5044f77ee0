"""A method is added by its own module alone and removed by deleting it: `rlvr_div.trainers.plugin.plugin_modules`
finds every module of the package that assigns PLUGINS, in ORDER (issue 34). The test writes a plug-in module into
the package, checks in a fresh interpreter that its key is a recipe key of `trainer: divergence` and that its hook
runs in ORDER, then deletes the file and checks that nothing of it is left."""

from __future__ import annotations

import json
import os
import shutil
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
from rlvr_div.trainers.plugin import GRPOPlugin


@dataclass
class ProbeArgs:
    probe_coef: float = field(default=0.0, metadata={"help": "the probe's coefficient"})


class Probe(GRPOPlugin):
    name = "probe"
    Args = ProbeArgs
    ranges = {"probe_coef": NON_NEGATIVE}

    @classmethod
    def active(cls, args):
        return args.probe_coef > 0


ORDER = 205
PLUGINS = (Probe,)
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
    assert not before["has_key"] and before["modules"][0] == "rlvr_div.trainers.distributional"
    (PACKAGE / f"{NAME}.py").write_text(MODULE)
    try:
        added = _probe()
    finally:
        _remove()
    assert added["has_key"] and added["plugins"][-1] == "probe"  # ORDER 205: after sequence_kl (200)
    assert added["modules"] == before["modules"] + [f"rlvr_div.trainers.{NAME}"]
    assert added["error"] == "probe_coef must be a finite number >= 0, got -1.0"  # its declared range, enforced
    assert _probe() == before


def test_a_plug_in_module_without_an_order_is_refused(monkeypatch, tmp_path):
    import rlvr_div.trainers.plugin as plugin

    package = tmp_path / "probe_pkg"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / f"{NAME}.py").write_text(MODULE.replace("ORDER = 205\n", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, "PLUGIN_PACKAGE", "probe_pkg")
    plugin.plugin_modules.cache_clear()
    try:
        with pytest.raises(TypeError, match=f"probe_pkg.{NAME} defines PLUGINS but no integer ORDER"):
            plugin.plugin_modules()
        (package / f"{NAME}.py").write_text(MODULE.replace("ORDER = 205", "ORDER = 200"))
        del sys.modules[f"probe_pkg.{NAME}"]  # imported once without its ORDER: read the file again
        with pytest.raises(TypeError, match=f"probe_pkg.sequence_kl and probe_pkg.{NAME} share ORDER = 200"):
            plugin.plugin_modules()
    finally:
        plugin.plugin_modules.cache_clear()
        for mod in [m for m in sys.modules if m == "probe_pkg" or m.startswith("probe_pkg.")]:
            del sys.modules[mod]
