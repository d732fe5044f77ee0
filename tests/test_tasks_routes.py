"""The `routes` task (the diversity-pays-off study): its splits, its verifier against its enumerated valid set, and
the corpus properties the study rests on (a dominant strategy that fails systematically on the held-out class, a
minority strategy that works on both)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task, get_task_spec
from rlvr_div.tasks.routes import (
    COLUMN,
    DIRECT,
    LONG,
    ROUTES_COLUMN_SKILL,
    ROUTES_DIRECT_NOISE,
    ROUTES_MINORITY,
    SHORT,
    routes_valid,
    strategy_of,
)


def _operands(prompt: str) -> tuple[int, int]:
    a, b = prompt[:-1].split("+")
    return int(a), int(b)


def test_splits_hold_the_classes_the_study_needs():
    rows = {split: list(get_task("routes", split=split)) for split in ("train", "validation", "test")}
    assert len(rows["train"]) == 128 and {r["route_class"] for r in rows["train"]} == {SHORT}
    for split in ("validation", "test"):
        assert Counter(r["route_class"] for r in rows[split]) == {SHORT: 150, LONG: 150}
    prompts = {split: {r["prompt"] for r in rs} for split, rs in rows.items()}
    assert not prompts["train"] & prompts["validation"] and not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    for r in rows["test"]:
        a, b = _operands(r["prompt"])
        assert int(r["answer"]) == a + b and (r["route_class"] == LONG) == (a + b >= 100)
    # the seed orders the rows, never changes which prompts a split holds
    assert {r["prompt"] for r in get_task("routes", split="test", seed=7)} == prompts["test"]
    with pytest.raises(ConfigError, match="splits"):
        get_task("routes", split="dev")


def test_the_verifier_accepts_exactly_the_enumerated_valid_set():
    reward = get_reward("route_answer")
    row = {"answer": "123"}
    valid = routes_valid(row)
    assert len(valid) == 11 and len(set(valid)) == 11
    assert reward.score(valid, [row["answer"]] * 11) == [1.0] * 11
    # every completion of the same alphabet up to the valid length that is not listed is refused
    near = ["123", "d0123", "d122", "c;123", "c10;123", "c1123", "c1;0123", "x1;123", "d123 ", "c1;12", "e123", "dd123"]
    assert reward.score(near, [row["answer"]] * len(near)) == [0.0] * len(near)
    assert [strategy_of(v) for v in valid] == [DIRECT] + [COLUMN] * 10
    assert get_task_spec("routes").minority_strategy == COLUMN


def test_corpus_has_a_dominant_strategy_that_fails_on_the_held_out_class():
    spec = get_task_spec("routes")
    reward = get_reward(spec.reward)
    rng = random.Random(0)
    counts: Counter = Counter()
    for _ in range(60_000):
        prompt, completion = spec.corpus(rng)
        a, b = _operands(prompt)
        cls = LONG if a + b >= 100 else SHORT
        ok = reward.score([completion], [str(a + b)])[0]
        counts[(cls, strategy_of(completion), ok)] += 1

    def rate(cls: str, strategy: str) -> float:
        return counts[(cls, strategy, 1.0)] / (counts[(cls, strategy, 1.0)] + counts[(cls, strategy, 0.0)])

    def share(cls: str) -> float:
        n = {s: counts[(cls, s, 1.0)] + counts[(cls, s, 0.0)] for s in (DIRECT, COLUMN)}
        return n[COLUMN] / sum(n.values())

    for cls in (SHORT, LONG):
        assert share(cls) == pytest.approx(ROUTES_MINORITY, abs=0.015)  # the minority on every class
        assert rate(cls, COLUMN) == pytest.approx(ROUTES_COLUMN_SKILL, abs=0.03)  # column works on both
    assert rate(SHORT, DIRECT) == pytest.approx(1 - ROUTES_DIRECT_NOISE, abs=0.01)  # direct is better on short
    assert rate(LONG, DIRECT) == 0.0  # and fails systematically on long: only column solves it
    assert set(counts) <= {(c, s, ok) for c in (SHORT, LONG) for s in (DIRECT, COLUMN) for ok in (0.0, 1.0)}
