"""Sampled and exact validity agree (issue 23, item 8): TRL's rollouts of a fixed policy against the exact μ, and, in
training, the rollouts of step s against the exact μ of the policy that drew them (after s − 1 updates)."""

import math
import statistics

from collapse_bench.sampled_vs_exact import sampled_and_exact


def _stratified_se(mu_per_prompt, per_prompt_draws):
    """Standard error of the mean validity over prompts, each prompt drawn ``per_prompt_draws`` times."""
    n = len(mu_per_prompt)
    return math.sqrt(sum(m * (1 - m) for m in mu_per_prompt) / per_prompt_draws) / n


def test_rollouts_of_a_fixed_policy_have_the_exact_validity(tmp_path, tiny_path):
    """A learning rate of 1e-12 (0 is refused): every step samples the base; 10 steps x 8 rollouts of each of the 12
    prompts."""
    pairs, mu = sampled_and_exact(10, seed=1, out=tmp_path / "run", learning_rate=1e-12)
    assert max(abs(m - pairs[0][2]) for _, _, m in pairs) < 1e-6  # the policy did not move
    sampled = statistics.fmean(r for _, r, _ in pairs)
    assert abs(sampled - statistics.fmean(mu)) < 4 * _stratified_se(mu, 80)


def test_in_training_the_rollouts_match_the_policy_that_drew_them(tmp_path, tiny_path):
    """lr 3e-4: the first update lowers validity (so the rollouts of steps 1-10 lie below the path's points at 0 and
    10), and the rollouts agree with the exact μ of their own sampling policy within sampling error."""
    pairs, mu = sampled_and_exact(10, seed=1, out=tmp_path / "run")
    assert pairs[1][2] < pairs[0][2] - 0.02  # the exact μ after the first update dips below the base's
    diffs = [r - m for _, r, m in pairs]
    se = math.sqrt(sum(m * (1 - m) for _, _, m in pairs) / 96) / len(pairs)  # binomial bound over all rollouts
    assert abs(statistics.fmean(diffs)) < 4 * se
