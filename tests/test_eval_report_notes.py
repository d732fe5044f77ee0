"""The eval report's notes on what a sample log did to the numbers: problems with different sample counts cut every k
to the smallest n (and the report says so, with how many problems had fewer samples); a verl file of concatenated
dumps is read at its highest step, not its last in file order (and the report names that step and the others)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.sample_formats import read_sample_file
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError

PROBLEMS = [("1+2=", "3"), ("2+2=", "4"), ("3+4=", "7"), ("5+1=", "6")]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _score(tmp_path: Path, samples: Path) -> tuple[dict, str]:
    out = tmp_path / "out"
    args = ["eval", "--samples", f"m={samples}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)]
    assert cli_main(args) == 0
    return json.loads((out / "m" / "results.json").read_text()), (out / "report.md").read_text()


def test_mixed_n_per_problem_is_reported_with_the_cut_k(tmp_path, no_model_loads):
    counts = [4, 4, 2, 3]  # two problems have fewer than 4 samples, one only 2
    lines = [{"prompt": p, "completions": [a] * n, "answer": a} for (p, a), n in zip(PROBLEMS, counts)]
    results, report = _score(tmp_path, _write(tmp_path / "plain.jsonl", lines))
    metrics = results["metrics"]
    assert metrics["n"] == 2 and list(metrics["pass_at_k"]) == ["1", "2"]  # every k cut to the smallest n
    assert metrics["mixed_n"] == {"min": 2, "max": 4, "below_max": 2, "at_min": 1}
    note = [line for line in report.splitlines() if "Mixed n per problem" in line]
    assert len(note) == 1, report
    assert "the problems have 2 to 4 samples, so k is cut to the smallest n = 2" in note[0]
    assert "2 of its 4 problems have fewer than 4 samples (1 have only 2)" in note[0]


def test_equal_n_per_problem_has_no_note(tmp_path, no_model_loads):
    lines = [{"prompt": p, "completions": [a, "x"], "answer": a} for p, a in PROBLEMS]
    results, report = _score(tmp_path, _write(tmp_path / "plain.jsonl", lines))
    assert "mixed_n" not in results["metrics"] and "Mixed n" not in report


def _verl(step: int, right: bool) -> list[dict]:
    return [
        {"input": p, "output": a if right else "x", "gts": a, "score": float(right), "step": step}
        for p, a in PROBLEMS
        for _ in range(2)
    ]


def test_concatenated_verl_dumps_are_read_at_the_highest_step(tmp_path, no_model_loads):
    # step 30 (the latest, all right) is in the middle; the file ends with step 10 (all wrong)
    path = _write(tmp_path / "verl.jsonl", _verl(20, False) + _verl(30, True) + _verl(10, False))
    read = read_sample_file(str(path))
    assert (read.step, read.steps) == (30, [10, 20, 30])
    assert read.describe()["steps_in_file"] == [10, 20, 30]
    results, report = _score(tmp_path, path)
    assert results["metrics"]["pass_at_k"]["1"] == 1.0 and results["config"]["scored_from"]["step"] == 30
    assert "step 30 (the highest of its 3 steps; also in the file: 10, 20)" in report
    # one step: named as before, without the list
    single = _write(tmp_path / "one.jsonl", _verl(10, True))
    assert read_sample_file(str(single)).describe()["step"] == 10
    assert "steps_in_file" not in read_sample_file(str(single)).describe()


@pytest.mark.parametrize("bad", ["final", None, True])
def test_several_steps_that_are_not_all_numbers_are_one_line(tmp_path, bad):
    lines = _verl(10, True) + [{**x, "step": bad} for x in _verl(20, True)]
    if bad is None:
        for x in lines[len(lines) // 2 :]:
            x.pop("step")
    path = _write(tmp_path / "verl.jsonl", lines)
    with pytest.raises(ConfigError, match="is not a number, but the file holds several steps") as info:
        read_sample_file(str(path))
    assert "\n" not in str(info.value) and f"{path}:9:" in str(info.value)
