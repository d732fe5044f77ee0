"""`rlvr-div demo`: a small end-to-end run writes the report, a rerun skips finished stages, other settings and
bad arguments fail in one line before anything runs (the full-size demo is a slow test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main

SMALL = ["--steps", "3", "--n", "4", "--methods", "grpo_reverse_kl,dph_js,alpha_dpg", "--no-toy", "--quiet"]


def _demo(out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlvr_div.cli", "demo", "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_small_demo_writes_the_report_and_a_rerun_skips_every_stage(tmp_path, tiny_path):
    out = tmp_path / "demo"
    res = _demo(out, *SMALL)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text()
    for name in ("grpo_reverse_kl", "dph_js", "alpha_dpg"):
        assert f"| `{name}` |" in report
        results = json.loads((out / "eval" / name / "results.json").read_text())
        assert set(results["metrics"]["pass_at_k"]) == {"1", "2", "4"} and "vs_base" in results["metrics"]
    assert "| `base` | 60 |" in report and "pass@4" in report and "Where the base overtakes" in report
    assert (out / "eval" / "pass_at_k.png").exists() and "](eval/pass_at_k.png)" in report
    state = json.loads((out / "demo_state.json").read_text())
    assert list(state["stages"]) == ["base", "rehearse", "train:grpo_reverse_kl", "train:dph_js", "train:alpha_dpg",
                                     "eval"]  # fmt: skip
    steps = [json.loads(x)["step"] for x in (out / "runs/dph_js/metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 3

    again = _demo(out, *SMALL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("done earlier") == 6

    other = _demo(out, *[x if x != "4" else "8" for x in SMALL])
    err = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(err) == 1 and "other settings (n)" in err[0], other.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--n", "0"], "--n must be >= 1"),
        (["--methods", "grpo_reverse_kl,ppo"], "unknown ['ppo']"),
        (["--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_bad_arguments_fail_in_one_line_before_anything_runs(args, message, tmp_path, capsys, no_model_loads):
    rc = cli_main(["demo", "--out", str(tmp_path / "d"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_full_demo(tmp_path, tiny_path):
    """`make demo` as shipped (defaults), into a temporary directory."""
    out = tmp_path / "demo"
    res = _demo(out, "--quiet")
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert "pass@128" in report and "## Exact toy lab" in report and "| `alpha_dpg` |" in report
