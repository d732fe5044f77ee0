"""A time budget per batch of math verification (issue 36): each answer has a hard deadline, but a batch of many
hostile answers (`\\boxed{a^{a^{a^{a}}}}`) used to cost one deadline each (80 of them: 122 s); now the answers still
unverified when the batch's budget runs out are unscored (None, not judged wrong), with one warning counting them,
and are not cached; an evaluation records them in ``unjudged_samples``."""

from __future__ import annotations

import logging
import time

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.rewards.math import BATCH_BUDGET_S, MathAccuracy
from rlvr_div.rewards.workers import DeadlinePool


def test_the_pool_stops_a_batch_at_its_budget() -> None:
    with DeadlinePool(eval, workers=2, deadline=5.0, memory_mb=1024) as pool:
        pool.run(["0"])  # workers started outside the timed part
        slow = "__import__('time').sleep(2.0) or 1"
        t0 = time.monotonic()
        out = pool.run(["2", slow, slow, slow, slow, slow, slow], budget=1.0)
        elapsed = time.monotonic() - t0
        # 6 × 2 s on 2 workers would take 6 s; the margin over the 1 s budget absorbs a loaded machine's kill/restart
        assert elapsed < 5.0, elapsed
        assert out[0] == ("ok", 2) and out.count(("budget", None)) >= 3
        assert all(o in (("ok", 1), ("budget", None)) for o in out[1:])
        assert pool.stats["over_budget"] == out.count(("budget", None))
        assert pool.run(["6 * 7"]) == [("ok", 42)]  # the killed workers were replaced
        assert pool.run(["1"] * 3, budget=None) == [("ok", 1)] * 3
        with pytest.raises(ValueError, match="budget must be > 0"):
            pool.run(["1"], budget=0)


def test_hostile_answers_cost_one_budget_and_are_counted_in_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    towers = [f"\\boxed{{{a}^{{{a}^{{{a}^{{{a}}}}}}}}}" for a in range(3, 11)]  # 8 answers, each overruns a deadline
    reward = MathAccuracy(deadline=1.0, workers=1, batch_budget=2.5)
    try:
        reward.score(["\\boxed{1}"], answer=["1"])  # the worker starts outside the timed part
        completions = [*towers, "\\boxed{18}"]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlvr_div.rewards.math"):
            t0 = time.monotonic()
            scores = reward.score(completions, answer=["18"] * len(completions))
            elapsed = time.monotonic() - t0
        assert elapsed < 7.0, elapsed  # one deadline per tower would be 8 s (the margin: a loaded machine)
        assert scores[-1] is None  # the correct answer was queued behind the towers: not judged, not judged wrong
        assert all(s in (0.0, None) for s in scores)  # a tower that ran into its deadline scores 0
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "batch budget of 2.5 s" in warnings[0], warnings
        stopped = reward.stats["over_budget"]
        assert 1 <= stopped == scores.count(None) and warnings[0].startswith(f"math_accuracy: {stopped} of 9 ")
        assert reward.score(["\\boxed{18}"], answer=["18"]) == [1.0]  # not cached as 0: verified now
    finally:
        reward.close()


def test_the_budget_is_a_setting() -> None:
    assert get_reward("math_accuracy").batch_budget == BATCH_BUDGET_S
    assert "batch_budget" not in get_reward("math_accuracy").settings()  # the default: earlier evaluations resume
    assert get_reward("math_accuracy", batch_budget=30).settings()["batch_budget"] == 30.0
    assert get_reward("math_accuracy", batch_budget=None).settings()["batch_budget"] is None
    for bad in (0, -1, float("inf"), float("nan"), "10", True):
        with pytest.raises(ConfigError, match="batch_budget must be a number of seconds > 0"):
            get_reward("math_accuracy", batch_budget=bad)
