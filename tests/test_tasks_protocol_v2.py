"""The protocol-v2 tasks of the tiny base ``tiny2`` (``carry``, ``skewsum``): splits, verifiers, and the corpus
properties they were built for (a shared skill with a systematic error mode; a skewed filtered model)."""

import math
import random
from collections import Counter

import numpy as np
import pytest

from collapse_bench.base_profile import near_perfect_share, pstar_skew
from rlvr_div.errors import ConfigError
from rlvr_div.models import portable_model_name, resolve_model
from rlvr_div.models.tiny_base import TINY_BASES, TinySpec, build_tiny_model, tiny_by_name
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task, get_task_spec
from rlvr_div.tasks.carry import carry_skill, has_carry
from rlvr_div.tasks.skewsum import SKEW_RATIO, SKEWSUM_EASY, skewsum_error_rate


def test_carry_splits_are_fixed_disjoint_and_answered():
    splits = {s: get_task("carry", split=s) for s in ("train", "validation", "test")}
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [128, 300, 300]
    prompts = {s: set(d["prompt"]) for s, d in splits.items()}
    assert not (prompts["train"] & prompts["test"] or prompts["train"] & prompts["validation"])
    assert not prompts["validation"] & prompts["test"]
    assert set(get_task("carry", split="train", seed=5)["prompt"]) == prompts["train"]  # seed only orders the rows
    assert get_task("carry", split="train", seed=5)["prompt"] != splits["train"]["prompt"]
    r = get_reward(get_task_spec("carry").reward)
    for row in splits["test"]:
        a, b = (int(x) for x in row["prompt"][:-1].split("+"))
        assert row["answer"] == str(a + b) and row["carry"] == has_carry(a, b)
        assert r.score([str(a + b), str(a + b - 10)], answer=[row["answer"]] * 2) == [1.0, 0.0]
    with pytest.raises(ConfigError, match="splits"):
        get_task("carry", split="dev")


def test_carry_corpus_drops_the_carry_and_is_near_perfect_without_one():
    corpus = get_task_spec("carry").corpus
    rng = random.Random(0)
    right, dropped, total = Counter(), Counter(), Counter()
    for _ in range(60_000):
        prompt, completion = corpus(rng)
        a, b = (int(x) for x in prompt[:-1].split("+"))
        kind = "carry" if has_carry(a, b) else "none"
        total[kind] += 1
        right[kind] += int(completion) == a + b
        dropped[kind] += int(completion) == a + b - 10
    assert right["none"] / total["none"] > 0.97
    assert 0.3 < right["carry"] / total["carry"] < 0.6  # the skill, averaged over the tens digits
    assert dropped["carry"] / (total["carry"] - right["carry"]) > 0.85  # the error is systematic, not noise
    assert carry_skill(0, 9) > carry_skill(19, 29) > carry_skill(39, 39)


def test_skewsum_prefers_small_first_parts_and_errs_only_above_the_easy_range():
    corpus = get_task_spec("skewsum").corpus
    rng = random.Random(1)
    firsts: dict[int, Counter] = {}
    errors = Counter()
    for _ in range(80_000):
        prompt, completion = corpus(rng)
        n = int(prompt[4:-1])
        a, b = (int(x) for x in completion.split("+"))
        firsts.setdefault(n, Counter())[a] += 1
        errors[n] += a + b != n
        assert abs(a + b - n) <= 1
    assert all(errors[n] == 0 for n in range(2, SKEWSUM_EASY + 1))
    assert skewsum_error_rate(SKEWSUM_EASY) == 0 < skewsum_error_rate(40) < skewsum_error_rate(61)
    counts = firsts[40]
    assert counts[1] / counts[0] == pytest.approx(SKEW_RATIO, rel=0.1)
    # the corpus's p* is far from uniform over the valid set: KL(p*‖u) ≥ 1 nat averaged over the training targets
    train = get_task("skewsum", split="train")
    kls = []
    for n in train["target"]:
        w = [SKEW_RATIO**a for a in range(n + 1)]
        z = sum(w)
        kls.append(math.log(n + 1) + sum(x / z * math.log(x / z) for x in w))
    assert sum(kls) / len(kls) > 1.0
    assert sorted(train["target"]) == [n for n in range(2, 62) if n % 4 in (0, 1)]
    assert get_task_spec("skewsum").valid_completions({"target": 3}) == ["0+3", "1+2", "2+1", "3+0"]


def test_base_profile_arithmetic():
    assert near_perfect_share([1.0, 0.0], k=8, threshold=8) == pytest.approx(0.5)
    assert near_perfect_share([0.9], k=8, threshold=8) == pytest.approx(0.9**8)
    assert near_perfect_share([0.5], k=2, threshold=1) == pytest.approx(0.75)
    kl, eff = pstar_skew(math.log(0.3) + np.log([0.25] * 4))  # uniform valid mass, any total
    assert kl == pytest.approx(0.0, abs=1e-12) and eff == pytest.approx(4.0)
    kl, eff = pstar_skew(np.log([0.5, 0.25, 0.25]))
    assert kl == pytest.approx(math.log(3) - 1.5 * math.log(2)) and eff == pytest.approx(2**1.5)


def test_named_tiny_bases_resolve_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path))
    assert resolve_model("tiny2", build=False) == "tiny2"
    key = TINY_BASES["tiny2"].key()
    assert key != TINY_BASES["tiny"].key()
    assert portable_model_name("tiny2") == f"rlvr_div/tiny_bases/tiny-{key}"  # shipped: its package-relative directory
    assert tiny_by_name(f"tiny-{key}", f"tiny-{key}", build=False) == "tiny2"
    with pytest.raises(ConfigError, match="tiny2 = "):
        tiny_by_name("tiny-000000000000", "tiny-000000000000", build=False)


def test_a_tiny_base_needs_tasks_with_a_corpus(tmp_path):
    with pytest.raises(ConfigError, match="task 'between' has no pretraining corpus"):
        build_tiny_model(tmp_path / "x", TinySpec(tasks=("between",), steps=1, batch_size=2), progress=False)
    out = build_tiny_model(tmp_path / "y", TinySpec(tasks=("carry", "skewsum"), steps=2, batch_size=4), progress=False)
    assert (out / "config.json").is_file()
