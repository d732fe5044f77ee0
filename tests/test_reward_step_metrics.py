"""Rewards lost to ``math_accuracy``'s ``batch_budget`` are counted at every training step (issue 60, item 3): a
correct answer queued behind hostile ones is left unscored (None, which TRL skips), and the step's metrics now say
how many were, as ``rewards/math_accuracy/over_budget`` through TRL's ``log_metric``."""

from __future__ import annotations

import inspect
from typing import Any

from rlvr_div.rewards.math import MathAccuracy

METRIC = "rewards/math_accuracy/over_budget"


class _Pool:
    """A worker pool whose batch budget runs out after the first ``answered`` items (no processes, no timing)."""

    def __init__(self, answered: int) -> None:
        self.answered = answered

    def run(self, todo: list[Any], budget: float | None = None) -> list[tuple[str, Any]]:
        return [("ok", 1.0 if i == 0 else 0.0) if i < self.answered else ("budget", None) for i in range(len(todo))]

    def close(self) -> None:
        pass


def test_each_batch_logs_how_many_rewards_the_budget_cut() -> None:
    reward = MathAccuracy(workers=1, batch_budget=1.0)
    logged: list[tuple[str, float]] = []
    completions = ["\\boxed{18}", "\\boxed{a^{b^{c}}}", "\\boxed{x^{y^{z}}}", "\\boxed{a^{b^{c}}}"]
    reward._pool = _Pool(answered=1)  # type: ignore[assignment]
    scores = reward(
        prompts=["p"] * 4, completions=completions, answer=["18"] * 4, log_metric=lambda k, v: logged.append((k, v))
    )
    assert scores == [1.0, None, None, None]
    assert logged == [(METRIC, 3.0)]  # completions, not distinct answers: the duplicate counts twice
    reward._pool = _Pool(answered=10)  # type: ignore[assignment]
    reward(prompts=["p"] * 2, completions=["\\boxed{7}", "\\boxed{a^{b^{c}}}"], answer=["7"] * 2,
           log_metric=lambda k, v: logged.append((k, v)))  # fmt: skip
    assert logged[-1] == (METRIC, 0.0)  # every step says so, a step with none too
    assert reward(prompts=["p"], completions=["\\boxed{7}"], answer=["7"]) == [1.0]  # without TRL's logger: unchanged


def test_trl_hands_log_metric_to_reward_functions_and_logs_it() -> None:
    """The seam the count travels through: TRL's GRPOTrainer passes ``log_metric`` to every reward function and
    flushes what it collects into the step's metrics (a TRL that stops doing so would drop the count silently)."""
    from trl import GRPOTrainer

    calculate = inspect.getsource(GRPOTrainer._calculate_rewards)
    assert 'reward_kwargs["log_metric"] = self._log_metric' in calculate
    assert "_pending_metrics" in inspect.getsource(GRPOTrainer._log_metric)
    assert "self._pending_metrics" in inspect.getsource(GRPOTrainer._generate_and_score_completions)
