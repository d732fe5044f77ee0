"""The controls of `routes` (rlvr_div/tasks/routes_controls.py): the same prompts, one property changed each; the
original corpus untouched (tiny3's build fingerprint is what the shipped base records)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from collapse_bench.spec import load_benchmark
from rlvr_div.models.tiny_base import TINY_BASES, build_fingerprint, shipped_manifest
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task, get_task_spec
from rlvr_div.tasks.routes import COLUMN, DIRECT

REPO = Path(__file__).resolve().parents[1]


def _column_share(task: str, n: int = 20000) -> float:
    rng, corpus = random.Random(0), get_task_spec(task).corpus
    return sum(corpus(rng)[1].startswith("c") for _ in range(n)) / n


def test_swapped_makes_column_the_majority_and_equal_keeps_the_shares():
    assert _column_share("routes") == pytest.approx(0.2, abs=0.01)
    assert _column_share("routes_swapped") == pytest.approx(0.8, abs=0.01)
    assert _column_share("routes_equal") == pytest.approx(0.2, abs=0.01)
    assert get_task_spec("routes_swapped").minority_strategy == DIRECT
    assert get_task_spec("routes_equal").minority_strategy == COLUMN


def test_equal_writes_direct_at_the_column_length_and_its_verifier_reads_it():
    rng, corpus = random.Random(1), get_task_spec("routes_equal").corpus
    direct = [c for c in (corpus(rng)[1] for _ in range(500)) if c.startswith("d")]
    assert direct and all(c.startswith("dd;") for c in direct)
    reward = get_reward("route_answer_equal")
    assert reward.score(["dd;57", "c1;57", "c0;57", "d57", "dd;58", "dd57"], ["57"] * 6) == [1, 1, 1, 0, 0, 0]
    row = get_task("routes_equal", split="test").to_list()[0]
    valid = get_task_spec("routes_equal").valid_completions(row)
    assert len(valid) == 11 and all(reward.score([v], [row["answer"]]) == [1.0] for v in valid)
    assert {len(v) for v in valid} == {len(valid[1])}  # every valid completion has one length
    original = get_reward("route_answer")
    assert original.score(["dd;57", "d57"], ["57", "57"]) == [0.0, 1.0]  # routes' own verifier is unchanged


def test_controls_share_routes_prompts_and_tiny3_is_unchanged():
    for split in ("train", "test"):
        base = get_task("routes", split=split).to_list()
        for task in ("routes_swapped", "routes_equal"):
            assert get_task(task, split=split).to_list() == base
    assert (
        build_fingerprint(TINY_BASES["tiny3"], libraries=False)
        == shipped_manifest()[f"tiny-{TINY_BASES['tiny3'].key()}"]["recipe"]
    )


@pytest.mark.parametrize("name", ["swapped", "equal"])
def test_the_control_configs_declare_routes_primary_before_their_runs(name):
    bench = load_benchmark(REPO / "bench" / f"collapse_routes_{name}.yaml")
    routes = load_benchmark(REPO / "bench" / "collapse_routes.yaml")
    assert bench.model == f"tiny3-{name}" and bench.seeds == routes.seeds
    assert bench.primary.describe() == {**routes.primary.describe(), "task": f"routes_{name}"}
    assert [m.name for m in bench.methods] == ["grpo", "reverse_kl_1", "mara_01", "alpha_dpg_05",
                                                "dph_forward_kl_05", "unlikeliness", "polychromic"]  # fmt: skip
    text = (REPO / "bench" / f"collapse_routes_{name}.yaml").read_text()
    assert "declared before any run" in text and "collapse_bench.matched_verdicts" in text
