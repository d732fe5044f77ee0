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
    assert r.score(["12", " 12", "12 ", "012", "13", "", "12+0", "x"], answer=["12"] * 8) == [1, 0, 0, 0, 0, 0, 0, 0]
    # TRL API: completions plus dataset columns as keyword lists
    assert r(prompts=["5+7="], completions=["12"], answer=["12"]) == [1.0]
    assert r.extract("007") is None and r.extract("7") == "7"


def test_pairsum_has_many_valid_answers():
    r = get_reward("pair_sum")
    splits = {s: set(get_task("pairsum", split=s)["prompt"]) for s in ("train", "validation", "test")}
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [30, 15, 15]
    assert not (splits["train"] & splits["test"] or splits["train"] & splits["validation"])
    assert not splits["validation"] & splits["test"]
    assert get_task_spec("pairsum").reward == "pair_sum"
    n = 15
    valid = [f"{a}+{n - a}" for a in range(n + 1)]
    assert r.score(valid, target=[n] * len(valid)) == [1.0] * (n + 1)
    assert r.score(["7+9", "15", "7+8+0", "-1+16", "a+b", "07+8", " 7+8"], target=[n] * 7) == [0.0] * 7
    assert r.extract("7+8") == "7+8" and r.extract("07+8") is None


def test_task_size_option():
    assert len(get_task("arith", size=10)) == 10
    with pytest.raises(ConfigError):
        get_task("arith", size=0)


def test_pairsum_window_and_its_checks():
    ds = get_task("pairsum", split="train", min_target=2, max_target=25)
    assert sorted(ds["target"]) == [n for n in range(2, 26) if n % 4 in (0, 1)]
    with pytest.raises(ConfigError, match="max_target=70"):
        get_task("pairsum", max_target=70)
    with pytest.raises(ConfigError, match="too narrow"):
        get_task("pairsum", min_target=10, max_target=11)


@pytest.mark.parametrize(
    ("task", "reward", "row"),
    [
        ("pairsum", "pair_sum", {"target": 13}),
        ("pairsum", "pair_sum", {"target": 0}),
        ("arith", "arith_exact", {"answer": "40"}),
        ("arith", "arith_exact", {"answer": "0"}),
    ],
)
def test_valid_completions_are_exactly_what_the_reward_accepts(task, reward, row):
    """Brute force: every string of up to 5 characters over the digits and '+' (and a space) that the reward accepts
    is in the enumerated valid set, and every enumerated completion is accepted."""
    import itertools

    r = get_reward(reward)
    column, value = next(iter(row.items()))
    enumerated = set(get_task_spec(task).valid_completions(row))
    accepted = set()
    for length in range(1, 6):
        for chars in itertools.product("0123456789+ ", repeat=length):
            text = "".join(chars)
            if r.score([text], **{column: [value]})[0] == 1.0:
                accepted.add(text)
    assert accepted == enumerated


def test_task_options_from_a_recipe_and_the_command_line(tmp_path, no_model_loads):
    from rlvr_div.recipe import parse_recipe, validate

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: tiny\ntask: pairsum\ntask_options: {max_target: 25}\nreport_to: none\nuse_cpu: true\n"
        "bf16: false\n"
    )
    script, training, model = parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path / "o")])
    assert script.task_kwargs == {"max_target": 25}
    validate(script, training, model)
    script, _, _ = parse_recipe(["--config", str(recipe), "--task_options", '{"min_target": 4, "max_target": 9}'])
    assert script.task_kwargs == {"min_target": 4, "max_target": 9}
    with pytest.raises(ConfigError, match="not a JSON object"):  # read while the recipe is parsed
        parse_recipe(["--config", str(recipe), "--task_options", "{max_target: 9"])
    script, training, model = parse_recipe(["--config", str(recipe), "--task_options", '{"top": 3}'])
    with pytest.raises(ConfigError, match="has no option 'top'"):  # checked against the task's builder
        validate(script, training, model)
