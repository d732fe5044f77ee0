"""The ``wordmath`` task (SVAMP + ASDiv, held-out splits by problem family), the math tasks' ``format: fewshot``
prompt and ``math_accuracy``'s ``extract="answer_is"``.

Tests on the shared data skip when ``../shared/data`` (or ``$RLVR_DIV_DATA``) lacks the SVAMP and ASDiv files; no
test loads a model.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.rewards.math import MathAccuracy, answer_is
from rlvr_div.tasks import check_task, data_source, get_task, list_tasks, task_reward_settings
from rlvr_div.tasks import wordmath as wm
from rlvr_div.tasks.data import DATA_ENV, find_data
from rlvr_div.tasks.math import FEWSHOT_EXAMPLES, fewshot_prompt, make_prompt, math_reward_settings, math_stop_text

SIZES = {"train": 2496, "validation": 150, "test": 437}  # of the shared data (docs/rewards.md gives the command)
DIGESTS = {"train": "0284e2322b91669a", "validation": "9ec24bd5f7d94a25", "test": "648e334b72bfe7ba"}  # of the texts
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def masked(text: str) -> str:
    """The issue's template key, written out apart from the module's: lower case, whitespace collapsed, numbers as #."""
    return _NUMBER.sub("#", " ".join(text.lower().split()))


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def _shared_files() -> dict[str, Path]:
    if any(find_data(rel) is None for rel in wm.FILES.values()):
        pytest.skip("shared benchmark data (../shared/data/math/svamp and math/asdiv) is absent")
    return wm.data_files()


@pytest.fixture(scope="module")
def problems() -> list[wm.Problem]:
    return wm.load_problems(_shared_files())


@pytest.fixture(scope="module")
def splits(problems: list[wm.Problem]) -> dict[str, list[wm.Problem]]:
    return {name: [p for p, _ in items] for name, items in wm.split_problems(problems).items()}


# --------------------------------------------------------------------------------------------- the split


def test_splits_cover_the_pool_and_have_their_sizes(problems: list, splits: dict) -> None:
    assert {name: len(items) for name, items in splits.items()} == SIZES
    assert len(splits["test"]) >= 300 and sum(SIZES.values()) == len(problems)
    assert {p.source for p in splits["test"]} == {"svamp", "asdiv"}
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", p.answer) for p in problems)  # plain numbers only


def test_no_text_and_no_template_is_in_two_splits(splits: dict) -> None:
    for a, b in itertools.combinations(splits, 2):
        assert not {normalised(p.question) for p in splits[a]} & {normalised(p.question) for p in splits[b]}, (a, b)
        assert not {masked(p.question) for p in splits[a]} & {masked(p.question) for p in splits[b]}, (a, b)
        assert not {wm.template(p.question) for p in splits[a]} & {wm.template(p.question) for p in splits[b]}
        assert not {wm.template(p.body) for p in splits[a]} & {wm.template(p.body) for p in splits[b]}, (a, b)


def test_no_test_problem_is_similar_to_a_training_problem(splits: dict) -> None:
    """Brute force over every (test, train) pair: no masked word sets with Jaccard similarity >= SIMILARITY (sets as
    bit masks over the vocabulary)."""
    words: dict[str, int] = {}

    def bits(problem: wm.Problem) -> int:
        return sum(1 << words.setdefault(w, len(words)) for w in set(wm.template(problem.question).split()))

    test = [bits(p) for p in splits["test"]]
    train = [bits(p) for p in splits["train"] + splits["validation"]]
    num, den = wm.SIMILARITY.numerator, wm.SIMILARITY.denominator
    close = [(a, b) for a in test for b in train if den * (a & b).bit_count() >= num * (a | b).bit_count()]
    assert not close


def test_the_split_is_deterministic_and_independent_of_row_order(problems: list, splits: dict) -> None:
    """The same split in every process (pinned digests: no dependence on hash seeds or machines) and for any order of
    the records; two builds of the task are equal."""
    digests = {
        name: hashlib.sha256("\n".join(p.question for p in items).encode()).hexdigest()[:16]
        for name, items in splits.items()
    }
    assert digests == DIGESTS
    shuffled = list(problems)
    random.Random(1).shuffle(shuffled)
    assert {name: [p for p, _ in items] for name, items in wm.split_problems(shuffled).items()} == splits
    assert get_task("wordmath", split="test").to_list() == get_task("wordmath", split="test").to_list()


def test_similar_pairs_is_exact() -> None:
    rng = random.Random(0)
    sets = [frozenset(rng.sample("abcdefghij", rng.randint(1, 7))) for _ in range(150)]
    for threshold in (Fraction(3, 5), Fraction(1, 2), Fraction(4, 5)):
        brute = {
            (i, j)
            for i, j in itertools.combinations(range(len(sets)), 2)
            if len(sets[i] & sets[j]) >= threshold * len(sets[i] | sets[j])
        }
        assert set(wm.similar_pairs(sets, threshold)) == brute


def test_templates_mask_digits_and_number_words() -> None:
    assert wm.template("Tom has 1,200 apples and  seven pears; he ate 2.5.") == "tom has # apples and # pears he ate #"
    assert wm.normal_text("Edward spent $ 6 to buy") == wm.normal_text("Edward spent $6 to buy.")


# --------------------------------------------------------------------------------------------- the task


def test_wordmath_rows_and_options(splits: dict) -> None:
    rows = get_task("wordmath", split="test").to_list()
    assert [r["question"] for r in rows] == [p.question for p in splits["test"]]
    assert {"prompt", "question", "answer", "source", "family"} <= set(rows[0])
    assert all(isinstance(r["prompt"], str) and r["prompt"].endswith(f"Q: {r['question']}\nA:") for r in rows)
    assert len(get_task("wordmath", split="train", size=5)) == 5
    shuffled = get_task("wordmath", split="validation", shuffle=True, seed=3)
    assert sorted(shuffled["question"]) == sorted(p.question for p in splits["validation"])
    boxed = get_task("wordmath", split="test", format="boxed", size=1)[0]["prompt"]
    assert boxed[-1]["role"] == "user" and boxed[-1]["content"].startswith(rows[0]["question"])
    with pytest.raises(ConfigError, match="has splits test, validation, train"):
        get_task("wordmath", split="dev")
    assert get_task("wordmath").to_list()[:3] == get_task("wordmath", split="train", size=3).to_list()


def test_wordmath_is_listed_with_its_reward() -> None:
    spec = {s.name: s for s in list_tasks()}["wordmath"]  # what `rlvr-div list` prints
    assert spec.reward == "math_accuracy" and "SVAMP" in spec.description


def test_wordmath_reads_a_data_root_and_says_where_data_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="math/svamp/test.jsonl") as e:
        check_task("wordmath")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="data root"):
        check_task("wordmath", path=str(tmp_path))
    svamp = [
        {"Body": "Ann has 3 red pens.", "Question": "How many pens?", "Answer": 3.0},
        {"Body": "Ann has 3 red pens!", "Question": "How many pens?", "Answer": 3.0},  # the same text: dropped
        {"Body": "Ann has 4 red pens.", "Question": "How many pens?", "Answer": 4.0},  # the same template
    ]
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    asdiv = [{"body": w, "question": f"{w}{w}?", "answer": f"{i} (cats)"} for i, w in enumerate(words)]
    asdiv.append({"body": "Is it red?", "question": "Say.", "answer": "Yes"})  # not a number: left out
    for rel, rows in zip(wm.FILES.values(), (svamp, asdiv)):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = wm.load_problems(wm.data_files(str(tmp_path)))
    assert len(problems) == 2 + 8 and len(set(wm.families(problems))) == 1 + 8
    built = [list(get_task("wordmath", split=s, path=str(tmp_path))["question"]) for s in wm.SPLITS]
    assert sorted(sum(built, [])) == sorted(p.question for p in problems) and all(built)
    sources = {s: data_source("wordmath", s, path=str(tmp_path)) for s in ("train", "validation", "test")}
    assert len(set(sources.values())) == 3 and all(str(tmp_path.resolve()) in v for v in sources.values())


# --------------------------------------------------------------------------------------------- the prompt


def test_fewshot_prompt_shape() -> None:
    prompt = fewshot_prompt("Ben has 3 cups. How many cups?")
    assert isinstance(prompt, str) and prompt.endswith("\n\nQ: Ben has 3 cups. How many cups?\nA:")
    blocks = prompt.split("\n\n")
    assert len(blocks) == 3 and all(b.startswith("Q: ") for b in blocks)
    for block, (question, _) in zip(blocks[:2], FEWSHOT_EXAMPLES):
        q, a = block.split("\n")
        assert q == f"Q: {question}" and re.fullmatch(r"A: .+ = (\d+)\. The answer is \1\.", a)
    assert prompt.count("The answer is") == 2


def test_fewshot8_prompt_holds_eight_worked_examples_that_are_right() -> None:
    prompt = make_prompt("Ben has 3 cups. How many cups?", "fewshot8")
    blocks = prompt.split("\n\n")
    assert len(blocks) == 9 and prompt.count("The answer is") == 8 and blocks[-1].endswith("\nA:")
    assert prompt.endswith(fewshot_prompt("Ben has 3 cups. How many cups?", 0))
    assert fewshot_prompt("Q?") == "\n\n".join(fewshot_prompt("Q?", 8).split("\n\n")[:2] + ["Q: Q?\nA:"])
    for block, (question, answer) in zip(blocks[:8], FEWSHOT_EXAMPLES, strict=True):
        assert block == f"Q: {question}\nA: {answer}"
        expression, value = re.fullmatch(r"(.+) = (\d+)\. The answer is \2\.", answer).groups()
        assert re.fullmatch(r"[\d +\-*/]+", expression) and eval(expression) == int(value)  # noqa: S307 (digits)
    assert len({q for q, _ in FEWSHOT_EXAMPLES}) == 8
    answer_line = {"math_accuracy": {"extract": "answer_is"}}
    assert math_reward_settings("fewshot8") == math_reward_settings("fewshot") == answer_line
    assert math_stop_text("fewshot8") == "\n"
    with pytest.raises(ConfigError, match="format fewshot8 is a plain-text prompt"):
        check_task("wordmath", format="fewshot8", chat=True)


def test_fewshot_examples_come_from_no_data_file() -> None:
    shared = [find_data(f"math/{name}/test.jsonl") for name in ("svamp", "asdiv", "gsm8k")]
    if any(p is None for p in shared):
        pytest.skip("shared benchmark data (../shared/data/math) is absent")
    text = "\n".join(p.read_text(encoding="utf-8").lower() for p in shared)
    for question, _ in FEWSHOT_EXAMPLES:
        assert not any(s.strip().lower() in text for s in question.split(". ")), question
        assert wm.template(question) not in {wm.template(p.question) for p in wm.load_problems(wm.data_files())}


def test_gsm8k_takes_the_fewshot_format() -> None:
    if find_data("math/gsm8k/test.jsonl") is None:
        pytest.skip("shared benchmark data (../shared/data/math/gsm8k) is absent")
    rows = get_task("gsm8k", format="fewshot", size=2).to_list()
    assert all(r["prompt"] == fewshot_prompt(r["question"]) for r in rows)
    with pytest.raises(ConfigError, match="plain-text"):
        check_task("gsm8k", format="fewshot", chat=True)
    with pytest.raises(ConfigError, match="format must be one of boxed, fewshot"):
        check_task("gsm8k", format="cot")


# --------------------------------------------------------------------------------------------- the reward


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 1,200.", "1200"),
        ("The answer is 6.5", "6.5"),
        ("The answer is 6.", "6"),
        (" 24 / 4 = 6. the answer is: $6 per box.", "6"),
        ("The answer is -3.", "-3"),
        (" 3 + 4 = 7. The answer is 7.\n\nQ: Tom has 5 pens.\nA: 5 + 4 = 9. The answer is 9.", "7"),
        ("The answer is seven.", None),
        ("3 + 4 = 7.", None),
    ],
)
def test_answer_is_extraction(text: str, expected: str | None) -> None:
    assert answer_is(text) == expected
    assert MathAccuracy(extract="answer_is").extract(text) == expected


def test_answer_is_scores_the_first_answer_only() -> None:
    reward = get_reward("math_accuracy", extract="answer_is", workers=1)
    try:
        completion = (
            " 3 + 4 = 7. The answer is 7.\n\nQ: Tom has 5 apples and gets 4 more.\nA: 5 + 4 = 9. The answer is 9."
        )
        assert reward.score([completion, completion], answer=["7", "9"]) == [1.0, 0.0]
        assert reward.score(
            ["The answer is 1,200.", "The answer is 6.5", "\\boxed{7}"], answer=["1200", "6.5", "7"]
        ) == [
            1.0,
            1.0,
            0.0,
        ]
    finally:
        reward.close()


def test_extract_setting_and_defaults() -> None:
    assert get_reward("math_accuracy").extract(" 3 + 4 = 7. The answer is 7.") is None  # default: boxed, unchanged
    assert "extract" not in get_reward("math_accuracy").settings()
    assert get_reward("math_accuracy", extract="answer_is").settings()["extract"] == "answer_is"
    with pytest.raises(ConfigError, match="extract must be one of boxed, answer_is"):
        get_reward("math_accuracy", extract="last_line")
    fallback = get_reward("math_accuracy", extract="answer_is", fallback="last_number")
    assert fallback.extract("so 3 + 4 = 7") == "7"


def test_the_task_format_selects_the_extraction() -> None:
    assert task_reward_settings("wordmath", "math_accuracy") == {"extract": "answer_is"}
    assert task_reward_settings("wordmath", "math_accuracy", format="boxed") == {}
    assert task_reward_settings("gsm8k", "math_accuracy") == {}
    assert task_reward_settings("gsm8k", "math_accuracy", format="fewshot") == {"extract": "answer_is"}
    given = {"extract": "boxed", "deadline": 2.0}
    assert task_reward_settings("wordmath", "math_accuracy", given) == given  # the user's settings win
    assert task_reward_settings("wordmath", "math_format") == {}
    assert task_reward_settings("between", "number_between") == {}


def test_gold_answers_written_as_fewshot_completions_score_one(splits: dict) -> None:
    rows = [p for items in splits.values() for p in items]
    sample = random.Random(0).sample(rows, 60) + [p for p in rows if "." in p.answer][:20]
    reward = get_reward("math_accuracy", **task_reward_settings("wordmath", "math_accuracy"), workers=1)
    try:
        completions = [
            f" x = {p.answer}. The answer is {p.answer}.\n\nQ: Next.\nA: 1 = 1. The answer is 1." for p in sample
        ]
        assert reward.score(completions, answer=[p.answer for p in sample]) == [1.0] * len(sample)
    finally:
        reward.close()


# --------------------------------------------------------------------------------------------- the stop text


def test_a_fewshot_completion_ends_with_its_line_in_eval_and_training(tmp_path, splits: dict) -> None:
    """The task's stop text reaches eval's sampling settings (and only when set, its resume key); --stop-text none
    turns it off; the boxed format has none; training with use_vllm is refused before any model loads."""
    from eval.runner import prepare
    from rlvr_div.tasks import task_stop_text

    assert task_stop_text("wordmath") == "\n" and task_stop_text("wordmath", format="boxed") is None
    assert task_stop_text("gsm8k") is None and task_stop_text("gsm8k", format="fewshot") == "\n"
    job = prepare(["base=tiny"], "wordmath", tmp_path / "a", limit=2, n=2, max_new_tokens=4)
    settings = job.settings["base"]
    assert settings.sampling().stop_text == "\n" and settings.sample_key()["stop_text"] == "\n"
    off = prepare(["base=tiny"], "wordmath", tmp_path / "b", limit=2, n=2, stop_text="none").settings["base"]
    assert off.sampling().stop_text is None and "stop_text" not in off.sample_key()


def test_training_a_stop_text_task_with_vllm_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys) -> None:
    from rlvr_div.cli import main as cli_main

    monkeypatch.setattr("rlvr_div.models.tiny_base.tiny_model_path", lambda *a, **k: pytest.fail("model loaded"))
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml"
    argv = ["train", "--config", str(recipe), "--task", "wordmath", "--use_vllm", "true", "--output_dir", str(tmp_path)]
    rc = cli_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "ends completions at '\\n'" in err[0], err


def test_end_completions_at_extends_the_trainers_end_tokens_in_place() -> None:
    from types import SimpleNamespace

    from rlvr_div.trainers.trl_seam import end_completions_at

    ids = [2]
    trainer = SimpleNamespace(eos_token_ids=ids, generation_config=SimpleNamespace(eos_token_id=[2]))
    end_completions_at(trainer, [7, 2, 9, 7])
    assert trainer.eos_token_ids is ids and ids == [2, 7, 9] and trainer.generation_config.eos_token_id == [2, 7, 9]
