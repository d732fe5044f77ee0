"""The rollout and shared-prompt timings in docs/benchmarks*.md and docs/recipes.md, recomputed from the committed
bench result (bench/results/step_breakdown/rollouts_smollm2.json, its command in the file), and the loop's memory at
dropout 0.05 (rollouts_smollm2_memory*.json)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "step_breakdown" / "rollouts_smollm2.json"


def _words(*pages: str) -> str:
    return " ".join(" ".join((ROOT / "docs" / p).read_text().split()) for p in pages)


def test_rollout_and_shared_prompt_timings_as_the_docs_say():
    record = json.loads(RESULT.read_text())
    assert record["command"].startswith("bench/bench_step_breakdown.py --arms alpha_dpg --steps 3 --variant trl:")
    arms = {k.split("@")[1]: v for k, v in record["arms"].items()}
    assert list(arms) == ["trl", "loop", "trl_nodrop", "loop_nodrop"]
    wall = {k: round(v["wall"], 1) for k, v in arms.items()}
    assert wall == {"trl": 82.6, "loop": 71.0, "trl_nodrop": 50.2, "loop_nodrop": 37.0}
    ratio = {k: round(v["wall"] / arms["trl"]["wall"], 2) for k, v in arms.items()}
    assert ratio == {"trl": 1.0, "loop": 0.86, "trl_nodrop": 0.61, "loop_nodrop": 0.45}
    per_token = {k: round(1000 * v["generation"] / v["tokens"]["completion_tokens"], 1) for k, v in arms.items()}
    assert per_token == {"trl": 23.2, "loop": 20.4, "trl_nodrop": 26.1, "loop_nodrop": 12.1}
    assert round(arms["loop"]["generation"] / arms["trl"]["generation"], 2) == 0.70
    assert round(per_token["loop_nodrop"] / per_token["trl"], 2) == 0.52
    shared = {
        p: round(arms["trl_nodrop"][p] / arms["trl"][p], 2) for p in ("forward_grad", "forward_no_grad", "backward")
    }
    assert shared == {"forward_grad": 0.34, "forward_no_grad": 0.43, "backward": 0.51}
    floors = {k: round(v["wall"] / v["floor"]["total"], 1) for k, v in arms.items()}
    assert floors["loop_nodrop"] == 1.2 and floors["trl"] == 2.6
    peaks = {k: round(v["memory"]["peak_rss_mib"]) for k, v in arms.items()}
    assert peaks == {"trl": 6180, "loop": 8069, "trl_nodrop": 4185, "loop_nodrop": 4105}
    words = _words("benchmarks.md", "benchmarks_details.md", "recipes.md")
    for text in (
        "| `loop_nodrop` (both) | the loop | once each, everywhere | **37.0** | **0.45** | 13.83 s | 12.1 ms",
        "0.86× the step (generation 0.70×)",
        "a step took 82.6 s as registered, 71.0 s with the loop, 50.2 s with `lora_dropout: 0`, and 37.0 s with both",
        "The loop at dropout 0.05 peaked at 8,069 MiB",
    ):
        assert text in words, text


def test_the_loops_memory_at_dropout_as_the_page_says():
    """bench/results/step_breakdown/rollouts_smollm2_memory*.json: two runs of the same two variants whose peaks swap
    (docs/benchmarks_details.md, "The loop's memory at dropout 0.05, by phase")."""
    rows = []
    for name in ("rollouts_smollm2_memory_first", "rollouts_smollm2_memory"):
        arms = json.loads((RESULT.parent / f"{name}.json").read_text())["arms"]
        for variant in ("trl", "loop"):
            a = arms[f"alpha_dpg@{variant}"]
            rows.append((round(a["memory"]["peak_rss_mib"]), round(a["raised_mib"]["generation"]),
                         round(a["raised_mib"]["forward_grad"]), a["tokens"]["completion_tokens"]))  # fmt: skip
    assert rows == [(6067, 1222, 4188, 1175.5), (7790, 1113, 6021, 1276.5),
                    (7649, 888, 6099, 1175.5), (6149, 1133, 4359, 1276.5)]  # fmt: skip
    assert rows[0][0] < rows[1][0] and rows[2][0] > rows[3][0]  # the two runs disagree in opposite directions
    words = " ".join((ROOT / "docs" / "benchmarks_details.md").read_text().split())
    assert "| second | `loop` | 6,149 MiB | 1,133 MiB | 4,359 MiB | 80, 80 |" in words
    assert "| first | `loop` | 7,790 MiB | 1,113 MiB | 6,021 MiB | – |" in words
