"""The SQL pilot (issue 62, item 5; ``bench/results/sql_pilot/``): its committed summary recomputed from the cells'
samples (the task rows built again, the verifier run again), and what docs/study/real_math.md says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PILOT = ROOT / "bench" / "results" / "sql_pilot"
DOCS = ROOT / "docs" / "study" / "real_math.md"
CELLS = ("gemma_spider", "gemma_synth_sql", "smollm2_spider", "smollm2_synth_sql")


@pytest.fixture(scope="module")
def committed() -> dict:
    path = PILOT / "summary.json"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return json.loads(path.read_text())


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _records(cell: str) -> list[dict]:
    return [json.loads(x) for x in (PILOT / cell / "base" / "samples.jsonl").read_text().splitlines() if x.strip()]


def test_the_pilot_sampled_both_models_on_both_datasets_as_said(committed: dict) -> None:
    assert tuple(committed["cells"]) == CELLS and committed["unfinished"] == []
    for name, cell in committed["cells"].items():
        config = json.loads((PILOT / name / "base" / "config.json").read_text())
        assert (config["n"], config["temperature"], config["top_p"], config["max_new_tokens"]) == (64, 1.0, 1.0, 96)
        assert config["task_options"]["format"] == "fewshot" and config["reward"] == "sql_execution", name
        assert config["task_options"] == cell["task_options"] and config["task"] == cell["dataset"], name
        if cell["dataset"] == "spider":
            assert config["task_options"] == {"format": "fewshot", "hardness": ["easy", "medium"], "shuffle": True}
        records = _records(name)
        assert sorted(r["index"] for r in records) == list(range(16)) and {r["n"] for r in records} == {64}, name


def test_pass_at_k_and_the_gate_recomputed_from_the_samples(committed: dict) -> None:
    from rlvr_div.passk import pass_at_k

    for name, cell in committed["cells"].items():
        records = _records(name)
        values = pass_at_k([r["n"] for r in records], [r["c"] for r in records], [1, 8, 64]).mean(axis=0)
        assert [round(v, 9) for v in values] == [round(cell["pass_at_k"][k], 9) for k in ("1", "8", "64")], name
        assert cell["solved"] == sum(r["c"] > 0 for r in records) and cell["passes_gate"] == (values[2] >= 0.2)
        assert cell["correct_samples"] == sum(r["c"] for r in records)
        assert sum(s == 1.0 for r in records for s in r["scores"]) == cell["correct_samples"]  # c counts the 1s


def test_the_summary_is_what_the_samples_and_the_verifier_give(committed: dict) -> None:
    """The whole summary again: task rows rebuilt, every completion scored and executed again (about 3 s)."""
    from collapse_bench.sql_pilot import summarize
    from rlvr_div.tasks.data import find_data

    if find_data("sql/spider_dev") is None:
        pytest.skip("shared benchmark data (../shared/data/sql/spider_dev) is absent")
    recomputed = summarize(PILOT)
    for cell in (*recomputed["cells"].values(), *committed["cells"].values()):
        cell.pop("timing")  # of the sampling run, not of the samples
    assert _rounded(recomputed) == _rounded(committed)
    assert all(c["gold_scores_one"] and c["rescored_as_recorded"] for c in committed["cells"].values())
