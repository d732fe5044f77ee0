"""The `between` task (a real LM's enumerable task) and its verifier `number_between`."""

from __future__ import annotations

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task, get_task_spec
from rlvr_div.tasks.between import EXAMPLES, between_valid


def test_splits_are_disjoint_cover_every_range_and_exclude_the_worked_examples():
    splits = {s: get_task("between", split=s) for s in ("train", "validation", "test")}
    ranges = {s: {(r["low"], r["high"]) for r in d} for s, d in splits.items()}
    assert not ranges["train"] & ranges["validation"] and not ranges["train"] & ranges["test"]
    assert not ranges["validation"] & ranges["test"]
    assert sum(len(r) for r in ranges.values()) == 61 * 4 - len(EXAMPLES)
    assert not {(int(a), int(b)) for a, b, _ in EXAMPLES} & set().union(*ranges.values())
    lows = {s: {lo for lo, _ in r} for s, r in ranges.items()}
    assert not lows["train"] & lows["test"]  # held-out prompts have lower bounds training never shows
    row = splits["train"][0]
    assert row["prompt"].endswith(f"A number between {row['low']} and {row['high']}:")
    assert [r["low"] for r in get_task("between", seed=1)] != [r["low"] for r in splits["train"]]
    with pytest.raises(ConfigError, match="splits train, validation, test"):
        get_task("between", split="dev")


def test_the_verifier_accepts_exactly_the_enumerated_valid_set():
    reward = get_reward(get_task_spec("between").reward)
    row = {"low": 23, "high": 33}
    valid = between_valid(row)
    assert valid == [f" {x}\n" for x in range(24, 33)]
    candidates = [
        f"{sp}{x}{end}" for x in range(0, 120) for sp in ("", " ", "  ") for end in ("\n", "\nmore", "", ".\n")
    ]
    candidates += [" 025\n", " +25\n", " 25 \n", " 2 5\n"]
    scores = reward.score(candidates, low=[23] * len(candidates), high=[33] * len(candidates))
    accepted = {c for c, s in zip(candidates, scores) if s == 1.0}
    assert accepted == {c for c in candidates if any(c.startswith(v) for v in valid)}
    assert reward.extract(" 25\nA number") == "25" and reward.extract(" 25") is None  # an unfinished line
    assert get_task_spec("between").ends_with_eos is False
