"""Rough edges a user sees (issue 60, item 4): ``rlvr-div list`` names the methods, the tiny bases named in the help
come from their registry, and math-verify's timeout lines are short and silent under ``eval --quiet``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_div.cli import _commands, _usage, build_tiny_main, list_main
from rlvr_div.models.tiny_base import TINY_BASES
from rlvr_div.rewards import math as math_rewards

ROOT = Path(__file__).resolve().parents[1]


def test_list_shows_each_method_and_how_a_recipe_selects_it(capsys) -> None:
    from rlvr_div.trainers.plugin import plugin_classes

    assert list_main([]) == 0
    out = capsys.readouterr().out
    assert "methods" in out
    methods = out[out.index("methods") :].splitlines()[1:]
    rows = {line.split()[0]: line.split(None, 1)[1] for line in methods}
    assert set(rows) == {cls.name for cls in plugin_classes()}
    assert rows["simko"] == "simko: true" and rows["mara"] == "reward_shaping: mara"
    assert rows["divergence"].startswith("keys: ")


def test_help_names_every_tiny_base_from_the_registry(capsys) -> None:
    line = next(s for s in _usage(_commands()).splitlines() if s.strip().startswith("build-tiny"))
    with pytest.raises(SystemExit):
        build_tiny_main(["--help"])
    usage = capsys.readouterr().out
    for name in TINY_BASES:
        assert name in line.replace(",", " ").replace("(", " ").replace(")", " ").split(), (name, line)
        assert name in usage


def test_every_command_has_its_help_line_and_every_help_line_a_command() -> None:
    """The hand-kept one-line helps of ``rlvr-div``'s usage cannot drift from the entry points that make the commands
    (pyproject.toml's ``rlvr_div.commands`` group, as installed)."""
    import tomllib

    from rlvr_div.cli import _HELP

    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    commands = set(declared["project"]["entry-points"]["rlvr_div.commands"])
    assert set(_HELP) == commands == set(_commands())
    assert all(_HELP[name].strip() for name in commands)


PROBE = """
import sys, time
import math_verify.parser as parser
from rlvr_div.rewards import math as m

real = parser.extract_target_from_pred


def slow(pred, *args, **kwargs):  # a hostile input that math-verify's own alarm stops
    if len(pred) > 100:
        time.sleep(5)
    return real(pred, *args, **kwargs)


parser.extract_target_from_pred = slow
print("score", m._verify_item(1, ("1", "9" * 5000), quiet=sys.argv[1] == "quiet"))
"""


@pytest.mark.parametrize("mode", ["loud", "quiet"])
def test_math_verify_timeout_line_is_short_and_silent_when_quiet(mode: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "score 0.0" in done.stdout
    if mode == "quiet":
        assert "Timeout" not in done.stderr
        return
    lines = [s for s in done.stderr.splitlines() if "Timeout during parsing" in s]
    assert len(lines) == 1, done.stderr
    assert "9" * (math_rewards.MAX_LOGGED_CHARS + 1) not in done.stderr
    assert len(lines[0]) < 200 and "(5008 characters)" in lines[0]  # "\boxed{" + 5000 + "}"


def test_eval_quiet_mutes_math_verify_in_the_workers_it_starts(monkeypatch, tmp_path) -> None:
    import eval.runner
    from eval.cli import _evaluate

    seen: list[bool] = []
    reward = math_rewards.MathAccuracy(workers=1)

    def run(job, progress=True, lm_eval_log=False):
        seen.append(reward.pool.func.keywords["quiet"])  # a pool started now carries the setting to its workers
        return {}

    monkeypatch.setattr(eval.runner, "run", run)
    job = argparse.Namespace(output_dir=tmp_path, models=[], settings={})
    for quiet in (True, False):
        assert _evaluate(argparse.Namespace(quiet=quiet, lm_eval_log=False, dtype="auto"), job) == 0
    reward.close()
    assert seen == [True, False]
    assert math_rewards._quiet is False  # restored after the command
