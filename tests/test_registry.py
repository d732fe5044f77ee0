"""rlvr_div.registry: one mechanism for tasks, rewards, divergences, trainers, methods and sample formats. A registry
with a package finds its registering modules by their registration line, so an entry is added by its module alone;
names are unique; an unknown name is one line listing the known ones."""

from __future__ import annotations

import sys

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.registry import Registry, registering_modules
from rlvr_div.rewards import REWARDS
from rlvr_div.tasks import TASKS
from rlvr_div.trainers.plugin import PLUGINS


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``zz_registry_probe`` with two registering modules (one indented, one a sub-package) and one that
    only mentions the registry in a docstring."""
    root = tmp_path / "zz_registry_probe"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(
        "from rlvr_div.registry import Registry\n"
        "THINGS = Registry('thing', package='zz_registry_probe', marker='THINGS.add(')\n"
    )
    (root / "alpha.py").write_text("from zz_registry_probe import THINGS\nTHINGS.add('a', 1)\n")
    (root / "beta.py").write_text("from zz_registry_probe import THINGS\nfor n in ('b', 'c'):\n    THINGS.add(n, 2)\n")
    (root / "sub" / "__init__.py").write_text("from zz_registry_probe import THINGS\nTHINGS.add('d', 3)\n")
    (root / "gamma.py").write_text('"""Not registering: THINGS.add( appears in text.\n\n  x THINGS.add(\n"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "zz_registry_probe"
    for name in [m for m in sys.modules if m.startswith("zz_registry_probe")]:
        del sys.modules[name]
    registering_modules.cache_clear()


def test_a_registry_finds_its_modules_by_their_registration_line(package):
    module = __import__(package)
    things = module.THINGS
    assert things.modules() == (f"{package}.alpha", f"{package}.beta", f"{package}.sub")
    assert f"{package}.alpha" not in sys.modules  # found, not imported, until the first lookup
    assert things.names() == ["a", "b", "c", "d"]
    assert things.get("c") == 2
    with pytest.raises(ConfigError, match=r"^unknown thing 'e'; known: a, b, c, d$"):
        things.get("e")


def test_a_name_is_registered_once():
    reg: Registry[int] = Registry("thing")
    reg.add("a", 1)
    with pytest.raises(ValueError, match="thing 'a' is registered twice"):
        reg.add("a", 2)
    assert reg.add("a", 3, replace=True) == 3 and reg.get("a") == 3


def test_the_toolkits_registries_find_the_modules_they_listed_by_hand():
    """Tasks and rewards listed their modules by hand before; the found modules are those (the plug-ins' are checked
    by tests/test_plugin_discovery.py)."""
    assert TASKS.modules() == tuple(f"rlvr_div.tasks.{m}" for m in (
        "between", "bird", "carry", "countries", "math", "routes", "routes_controls", "skewsum", "spider", "synth_sql",
        "synthetic", "wordmath"))  # fmt: skip
    assert REWARDS.modules() == tuple(f"rlvr_div.rewards.{m}" for m in (
        "country_prefix", "math", "number_between", "sql", "synthetic"))  # fmt: skip
    assert "dph_rehearsal" in PLUGINS and PLUGINS.get("divergence").phase == "loss_term"
