"""`rlvr-div demo`: a small end-to-end run writes the report (the stock baseline beside the remedies, exact p* columns,
the full benchmark's findings), a rerun skips every run, bad arguments fail in one line before anything runs (the
full-size demo is a slow test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collapse_bench.demo import findings
from rlvr_div.cli import main as cli_main

# the machinery on the base every test builds (bench/demo.yaml trains tiny2, built only by the slow full demo)
DEMO_TINY = Path(__file__).resolve().parent / "fixtures" / "demo_tiny.yaml"
SMALL = ["--config", str(DEMO_TINY), "--steps", "2", "--seeds", "1", "--quiet"]


def _demo(out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlvr_div.cli", "demo", "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_small_demo_writes_the_report_and_a_rerun_skips_every_run(tmp_path, tiny_path):
    out = tmp_path / "demo"
    res = _demo(out, *SMALL)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text()
    for label in ("GRPO, TRL stock (β = 0)", "GRPO + forward KL", "outcome-based exploration", "α-DPG"):
        assert f"| {label} |" in report
    assert "## What the full benchmark found" in report and "KL(p*‖π_v)" in report and "eff. answers" in report
    assert "](pareto_pairsum.png)" in report and (out / "pareto_pairsum.png").is_file()
    results = sorted((out / "runs").rglob("result.json"))
    assert len(results) == 5
    steps = json.loads(results[0].read_text())["train"]["steps"]
    assert steps == 2
    mtimes = [p.stat().st_mtime for p in results]
    again = _demo(out, *SMALL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [p.stat().st_mtime for p in results] == mtimes  # nothing retrained


def test_findings_block_is_read_from_the_docs(tmp_path):
    doc = tmp_path / "collapse.md"
    doc.write_text("# x\n<!-- findings -->\n- stock GRPO collapses\n<!-- /findings -->\nrest\n")
    assert findings(doc) == ["- stock GRPO collapses"]
    assert findings(tmp_path / "missing.md") == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--seeds", "a"], "--seeds 'a' must be comma-separated integers"),
        (["--config", "nope.yaml"], "benchmark config file 'nope.yaml' does not exist"),
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
    assert "pass@128" in report and "| α-DPG, α = 0.25 |" in report and "KL(p*‖π_v)" in report
    assert "Against the untrained base at every k" in report and "](pareto_carry.png)" in report
