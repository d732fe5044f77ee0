"""The SQL pilot (issue 62, item 5; ``bench/results/sql_pilot/``): its committed summary recomputed from the cells'
samples (the task rows built again, the verifier run again), and what docs/study/real_math.md says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PILOT = ROOT / "bench" / "results" / "sql_pilot"
DOCS = ROOT / "docs" / "study" / "real_math.md"
CELLS = ("gemma_spider", "gemma_synth_sql", "smollm2_spider", "smollm2_synth_sql")  # T 1, top-p 1, as the study
YUE = ("smollm2_spider_t0.6", "smollm2_synth_sql_t0.6")  # T 0.6, top-p 0.95: Yue et al.'s evaluation sampling


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
    assert sorted(committed["cells"]) == sorted(CELLS + YUE) and committed["unfinished"] == []
    for name, cell in committed["cells"].items():
        config = json.loads((PILOT / name / "base" / "config.json").read_text())
        sampling = (0.6, 0.95) if name in YUE else (1.0, 1.0)
        assert (config["n"], config["temperature"], config["top_p"], config["max_new_tokens"]) == (64, *sampling, 96)
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
    recomputed, committed = summarize(PILOT), json.loads(json.dumps(committed))  # a copy: the fixture is shared
    for cell in (*recomputed["cells"].values(), *committed["cells"].values()):
        cell.pop("timing")  # of the sampling run, not of the samples
    assert _rounded(recomputed) == _rounded(committed)
    assert all(c["gold_scores_one"] and c["rescored_as_recorded"] for c in committed["cells"].values())


def _words(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_what_the_docs_say_of_the_pilot(committed: dict) -> None:
    from collapse_bench.stats import clopper_pearson_upper

    cells = {name: committed["cells"][name] for name in CELLS}
    words = _words(DOCS)
    labels = {
        "smollm2": "SmolLM2",
        "gemma": "Gemma-3-270M",
        "spider": "Spider dev easy+medium",
        "synth_sql": "`synth_sql` test",
    }
    for c in cells.values():
        share = [100 * c[key] / c["samples"] for key in ("starts_with_select", "executable", "unknown_table_or_column")]
        row = (f"| {labels[c['model']]}, {labels[c['dataset']]} | 0 | 0 | 0/16 (≤ {c['solved_upper95']:.2f}) | "
               + " | ".join(f"{x:.1f}%" for x in share) + f" | {c['cut_at_cap']} of 1,024 |")  # fmt: skip
        assert c["pass_at_k"]["1"] == c["pass_at_k"]["64"] == 0.0 and row in words, row
    # "No sample of the 4,096 is correct, and the gate is met nowhere"; "0 of 32 … at most 0.089"
    assert sum(c["samples"] for c in cells.values()) == 4096 and not any(c["correct_samples"] for c in cells.values())
    assert not any(c["passes_gate"] for c in cells.values())
    assert f"its pass@64 is at most {clopper_pearson_upper(0, 32):.3f} (one-sided 95%)" in words
    spans = {}
    for key in ("starts_with_select", "executable", "unknown_table_or_column"):
        shares = [100 * c[key] / c["samples"] for c in cells.values()]
        spans[key] = (min(shares), max(shares))
    assert "83–89% of their completions are queries that start with `SELECT`" in words
    assert (round(spans["starts_with_select"][0]), round(spans["starts_with_select"][1])) == (83, 89)
    assert "only 1.1–3.3% execute at all; 40–52% fail on a table or column" in words
    assert tuple(round(x, 1) for x in spans["executable"]) == (1.1, 3.3)
    assert tuple(round(x) for x in spans["unknown_table_or_column"]) == (40, 52)
    seconds = {name: round(c["timing"]["sampling_seconds"]) for name, c in cells.items()}
    assert seconds == {"smollm2_synth_sql": 491, "smollm2_spider": 643, "gemma_synth_sql": 914, "gemma_spider": 1302}
    assert cells["smollm2_spider"]["timing"]["problems_sampled"] == 12  # "its last 12 problems, after a restart"
    readme = _words(ROOT / "README.md")
    assert "On SQL neither model wrote one correct query in 4,096 samples" in readme
    assert "neither model wrote one correct query in 4,096 samples of Spider dev and `synth_sql`" in words


def test_what_the_docs_say_of_the_cooler_sampling(committed: dict) -> None:
    cells = {name: committed["cells"][name] for name in YUE}
    assert sum(c["samples"] for c in cells.values()) == 2048 and not any(c["correct_samples"] for c in cells.values())
    spider, synth = cells["smollm2_spider_t0.6"], cells["smollm2_synth_sql_t0.6"]
    pct = {k: [round(100 * c[k] / c["samples"], 1) for c in (spider, synth)] for k in spider if k in (
        "starts_with_select", "executable", "unknown_table_or_column")}  # fmt: skip
    assert pct["starts_with_select"] == [99.0, 100.0] and pct["executable"] == [9.9, 14.2]
    assert [round(x) for x in pct["unknown_table_or_column"]] == [81, 83]
    # more execute than at T 1, on each dataset
    assert all(
        c["executable"] > committed["cells"][name.removesuffix("_t0.6")]["executable"] for name, c in cells.items()
    )
    words = _words(DOCS)
    assert (
        "(99.0% and 100.0% start with `SELECT`) and more of them execute (9.9% on Spider, 14.2% on `synth_sql`)"
        in words
    )
    assert (
        "but 81–83% name a table or column the database lacks, and again none of the 2,048 samples is correct" in words
    )
