"""Estimators: pass@k against exact rational arithmetic, cover@τ, maj@k against full enumeration, bootstrap SEs,
and the diversity numbers."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest

from eval.diversity import entropy, lost_vs_base, normalize_completion, problem_diversity
from eval.estimators import bootstrap_se, cover_at, maj_at_k, pass_at_k, report_ks


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_matches_fractions_on_random_triples():
    rng = random.Random(0)
    triples = [(n, c, k) for n in (1, 2, 7, 1024) for c in (0, 1, n // 2, n - 1, n) for k in (1, n) if c >= 0]
    for _ in range(300):
        n = rng.choice([rng.randint(1, 64), rng.randint(1, 1024)])
        triples.append((n, rng.randint(0, n), rng.randint(1, n)))
    for n, c, k in triples:
        got = pass_at_k([n], [c], [k])[0, 0]
        want = exact_pass_at_k(n, c, k)
        assert abs(got - float(want)) <= 1e-12, (n, c, k, got, float(want))


def test_pass_at_k_vectorised_over_problems_and_k():
    rng = random.Random(1)
    n = [1024] * 50 + [rng.randint(600, 1024) for _ in range(50)]
    c = [rng.randint(0, x) for x in n]
    ks = [1, 2, 4, 8, 16, 64, 256, 512]
    got = pass_at_k(n, c, ks)
    assert got.shape == (100, len(ks))
    want = np.array([[float(exact_pass_at_k(a, b, k)) for k in ks] for a, b in zip(n, c)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # monotone in k, in [0, 1], and exactly 1 when fewer than k samples are wrong
    assert np.all(np.diff(got, axis=1) >= -1e-15) and np.all((got >= 0) & (got <= 1))
    assert pass_at_k([10], [7], [4])[0, 0] == 1.0 and pass_at_k([10], [0], [10])[0, 0] == 0.0


def test_pass_at_1_is_the_accuracy():
    n, c = np.array([8, 8, 5, 3]), np.array([0, 3, 5, 1])
    np.testing.assert_allclose(pass_at_k(n, c, [1])[:, 0], c / n, atol=1e-15)


@pytest.mark.parametrize("bad", [dict(n=[4], c=[5], ks=[1]), dict(n=[4], c=[2], ks=[5]), dict(n=[4], c=[1], ks=[0])])
def test_pass_at_k_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        pass_at_k(bad["n"], bad["c"], bad["ks"])


def test_report_ks():
    assert report_ks(1) == [1]
    assert report_ks(64) == [1, 2, 4, 8, 16, 32, 64]
    assert report_ks(100) == [1, 2, 4, 8, 16, 32, 64, 100]


def test_cover_at():
    got = cover_at([10, 10, 4], [1, 9, 4], [0.1, 0.5, 0.9, 1.0])
    np.testing.assert_array_equal(got, [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])


def brute_force_maj(answers, correct, k) -> float:
    """Mean over every k-subset of the majority vote's expected accuracy (uniform tie-breaking)."""
    ok = {a for a, c in zip(answers, correct) if c and a is not None}
    total, count = 0.0, 0
    for subset in combinations(range(len(answers)), k):
        votes = [answers[i] for i in subset if answers[i] is not None]
        count += 1
        if not votes:
            continue
        freq = {a: votes.count(a) for a in set(votes)}
        top = max(freq.values())
        tied = [a for a, f in freq.items() if f == top]
        total += sum(a in ok for a in tied) / len(tied)
    return total / count


def test_maj_at_k_exact_small_cases():
    answers = [["a", "a", "b"], [None, None, "x"], ["1", "2", "3", "2"]]
    correct = [[True, True, False], [False, False, True], [False, True, False, True]]
    got = maj_at_k(answers, correct, [1, 2, 3], seeds=[0, 1, 2])
    assert got[0].tolist() == pytest.approx([2 / 3, 2 / 3, 1.0])
    assert got[1].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    for p in range(3):
        for j, k in enumerate([1, 2, 3]):
            assert got[p, j] == pytest.approx(brute_force_maj(answers[p], correct[p], k))


def test_maj_at_k_monte_carlo_is_close_to_enumeration():
    rng = random.Random(3)
    answers = [[rng.choice(["7", "8", "9", None]) for _ in range(14)] for _ in range(3)]
    correct = [[a == "7" for a in row] for row in answers]
    ks = [5, 7]
    mc = maj_at_k(answers, correct, ks, seeds=[11, 12, 13], subsets=400)  # C(14, 5) = 2002 > 400: sampled
    exact = maj_at_k(answers, correct, ks, seeds=[11, 12, 13], subsets=10**6)  # enumerated
    for p in range(3):
        for j, k in enumerate(ks):
            assert exact[p, j] == pytest.approx(brute_force_maj(answers[p], correct[p], k))
    np.testing.assert_allclose(mc, exact, atol=0.06)
    # seeded: the same seeds give the same estimate
    np.testing.assert_array_equal(mc, maj_at_k(answers, correct, ks, seeds=[11, 12, 13], subsets=400))


def test_maj_at_1_equals_pass_at_1_when_every_correct_sample_has_an_answer():
    rng = random.Random(4)
    answers = [[str(rng.randint(0, 3)) for _ in range(9)] for _ in range(20)]
    correct = [[a == "0" for a in row] for row in answers]
    got = maj_at_k(answers, correct, [1], seeds=list(range(20)))[:, 0]
    np.testing.assert_allclose(got, [sum(r) / 9 for r in correct])


def test_bootstrap_se_matches_the_analytic_standard_error():
    rng = np.random.default_rng(0)
    values = rng.random((400, 2))
    values[:, 1] = values[:, 1] > 0.7
    se = bootstrap_se(values, resamples=4000, seed=1)
    analytic = values.std(axis=0, ddof=1) / np.sqrt(len(values))
    np.testing.assert_allclose(se, analytic, rtol=0.08)
    np.testing.assert_array_equal(se, bootstrap_se(values, resamples=4000, seed=1))
    assert bootstrap_se(np.ones((50, 3))).tolist() == [0.0, 0.0, 0.0]
    assert bootstrap_se(np.ones((1, 2))).tolist() == [0.0, 0.0]


def test_problem_diversity():
    completions = ["3+4", " 3+4 ", "4+3", "3 +4", "0+7", "9"]
    answers = ["3+4", "3+4", "4+3", None, "0+7", None]
    correct = [True, True, True, False, True, False]
    d = problem_diversity(completions, answers, correct)
    assert d["distinct_correct_answers"] == 3
    assert d["distinct_correct_completions"] == 3  # "3+4" and " 3+4 " normalise to one
    assert d["correct_answer_entropy"] == pytest.approx(entropy([2, 1, 1]))
    assert d["answer_entropy"] == pytest.approx(entropy([2, 1, 2, 1]))  # None counts as one outcome
    assert problem_diversity(["1"] * 3, ["1"] * 3, [False] * 3)["distinct_correct_answers"] == 0
    assert entropy([5]) == 0.0 and math.copysign(1, entropy([5])) == 1.0
    assert entropy([1, 1]) == pytest.approx(math.log(2))
    assert normalize_completion("  a \n\t b ") == "a b"


def test_lost_vs_base():
    out = lost_vs_base({0: 3, 1: 0, 2: 5, 3: 1, 9: 2}, {0: 0, 1: 2, 2: 5, 3: 0})
    assert out["common_problems"] == 4 and out["base_solved"] == 3
    assert out["lost_indices"] == [0, 3] and out["lost_fraction"] == pytest.approx(2 / 3)
    assert out["gained_indices"] == [1]
