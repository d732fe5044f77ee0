"""The report does not over-read noise: a base ahead by a sliver of an expected problem is not said to overtake,
two models that solve nothing are said to say nothing, and the gap that is called an overtake is material."""

from __future__ import annotations

from eval.metrics import MATERIAL_PROBLEMS, compare_to_base
from eval.report import overtake_sentence


def _recs(cs: list[int], n: int = 8) -> list[dict]:
    return [{"index": i, "n": n, "c": c} for i, c in enumerate(cs)]


def test_a_gap_of_a_sliver_of_a_problem_is_not_an_overtake():
    # 15 problems; the base solves one problem 8/8 where the model solves it 7/8: at k = 1 the base is ahead by
    # 1/8 of a problem (pass@1 gap 1/120), from k = 2 on both are 1 on that problem
    base, model = _recs([8] + [4] * 14), _recs([7] + [4] * 14)
    vs = compare_to_base(base, model, "base")
    assert vs["first_ahead_k"] == 1 and vs["first_ahead_gap_problems"] < MATERIAL_PROBLEMS
    assert vs["overtake_k"] is None and not vs["both_zero"]
    line = overtake_sentence("rl", "base", vs, 8)
    assert line.startswith("- `base` does not overtake `rl` at any k ≤ 8") and "which is noise" in line


def test_a_material_gap_is_an_overtake():
    base, model = _recs([2] * 10), _recs([8] * 5 + [0] * 5)  # the model lost half the problems
    vs = compare_to_base(base, model, "base")
    assert vs["overtake_k"] is not None and vs["lost"] == 5
    k = vs["overtake_k"]
    assert (vs["overtake_base_pass"] - vs["overtake_model_pass"]) * 10 >= MATERIAL_PROBLEMS
    assert f"`base` overtakes `rl` at k = {k}" in overtake_sentence("rl", "base", vs, 8)


def test_two_models_at_zero_say_nothing():
    vs = compare_to_base(_recs([0] * 6), _recs([0] * 6), "base")
    assert vs["both_zero"] and vs["overtake_k"] is None
    line = overtake_sentence("rl", "base", vs, 8)
    assert "Neither `base` nor `rl` solves any of the 6 common problems" in line and "does not overtake" not in line
