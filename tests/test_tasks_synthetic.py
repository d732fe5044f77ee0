import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward, list_rewards
from rlvr_div.tasks import get_task, get_task_spec, list_tasks


def test_registries_list_builtin_names():
    assert {"arith", "pairsum"} <= {t.name for t in list_tasks()}
    assert {"arith_exact", "pair_sum"} <= set(list_rewards())


def test_unknown_names_raise_one_line():
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        get_task("nope")
    with pytest.raises(ConfigError, match="unknown reward 'nope'"):
        get_reward("nope")


def test_arith_is_deterministic_and_splits_are_disjoint():
    a = get_task("arith", split="train", seed=3)
    b = get_task("arith", split="train", seed=3)
    assert a["prompt"][:50] == b["prompt"][:50]
    assert get_task("arith", split="train", seed=4)["prompt"][:50] != a["prompt"][:50]
    test = get_task("arith", split="test", seed=3)
    assert not set(test["prompt"]) & set(a["prompt"])
    for prompt, answer in zip(test["prompt"][:100], test["answer"][:100]):
        x, op, y = prompt[:-1].partition("+") if "+" in prompt else prompt[:-1].partition("-")
        assert int(answer) == (int(x) + int(y) if op == "+" else int(x) - int(y))


def test_arith_verifier():
    r = get_reward("arith_exact")
    assert r.score(["12", " 12", "12 ", "13", "", "12+0", "x"], answer=["12"] * 7) == [1, 1, 1, 0, 0, 0, 0]
    # TRL API: completions plus dataset columns as keyword lists
    assert r(prompts=["5+7="], completions=["12"], answer=["12"]) == [1.0]
    assert r.extract("007") == "7"


def test_pairsum_has_many_valid_answers():
    r = get_reward("pair_sum")
    ds = get_task("pairsum", split="test")
    assert len(ds) == 60 and get_task_spec("pairsum").reward == "pair_sum"
    n = 15
    valid = [f"{a}+{n - a}" for a in range(n + 1)]
    assert r.score(valid, target=[n] * len(valid)) == [1.0] * (n + 1)
    assert r.score(["7+9", "15", "7+8+0", "-1+16", "a+b"], target=[n] * 5) == [0.0] * 5
    assert r.extract("07+8") == "7+8"


def test_task_size_option():
    assert len(get_task("arith", size=10)) == 10
    with pytest.raises(ConfigError):
        get_task("arith", size=0)
