"""Math benchmark tasks, verified by ``math_accuracy``: GSM8K, MATH (its train set for training), MATH-500, AIME 2024,
AMC 2023, Minerva Math, SVAMP, ASDiv and OlympiadBench.

Each row has ``prompt``, ``question`` (the problem) and ``answer`` (the gold final answer as text, extracted from each
dataset's own field; see ``../shared/data/MANIFEST.md``). The prompt's ``format``: ``boxed`` (default) is the problem
followed by an instruction to reason step by step and put the final answer in ``\\boxed{}`` (chat messages by
default, plain text with ``chat=False``); ``fewshot`` is a plain completion-style text, two worked examples and then
``Q: <problem>\nA:`` (:func:`fewshot_prompt`), whose answer is the number after the first "The answer is": the task
then sets ``math_accuracy``'s ``extract="answer_is"`` by default (:func:`math_reward_settings`); ``fewshot8`` is the
same with eight worked examples (the two first), for base models that keep the format less often.

Data comes from ``path``: a ``.jsonl``/``.json``/``.parquet`` file (then the split is ignored: the file is the data),
a directory holding ``<split>.jsonl``, or a hub id whose ``split`` is loaded (``openai/gsm8k`` gets its config
``main`` unless ``config`` says otherwise). Without ``path`` the shared data is used (``math/<name>/<split>.jsonl``
under ``$RLVR_DIV_DATA`` or ``../shared/data``; it holds the ``test`` split only, so training takes a hub id:
``openai/gsm8k`` split ``train`` for GSM8K, ``DigitalLearningGmbH/MATH-lighteval`` split ``train`` for MATH, whose
test subset MATH-500 stays held out). Rows without a usable gold answer are dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.math import extract_boxed, gold_text, gsm8k_answer
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import (
    LOCAL_SUFFIXES,
    data_location,
    load_hub,
    looks_local,
    read_records,
    require_data,
    split_file,
    take_rows,
)

logger = logging.getLogger(__name__)

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
FORMATS = ("boxed", "fewshot", "fewshot8")
# the plain completion-style formats, by their number of worked examples
FEWSHOT_SHOTS = {"fewshot": 2, "fewshot8": 8}
# the worked examples of the few-shot prompts (``fewshot`` takes the first two): written for them, taken from no
# benchmark (tests/test_wordmath.py)
FEWSHOT_EXAMPLES = (
    (
        "A baker puts 24 muffins into 4 boxes, with the same number of muffins in each box. "
        "How many muffins are in each box?",
        "24 / 4 = 6. The answer is 6.",
    ),
    (
        "Nina has 15 stickers. Her brother gives her 8 more stickers. How many stickers does Nina have now?",
        "15 + 8 = 23. The answer is 23.",
    ),
    (
        "There were 42 sparrows on a fence. Then 17 of them flew away. How many sparrows are still on the fence?",
        "42 - 17 = 25. The answer is 25.",
    ),
    (
        "Each crate holds 6 melons. A truck carries 7 full crates. How many melons does the truck carry?",
        "6 * 7 = 42. The answer is 42.",
    ),
    (
        "A farmer picked 35 pears. He sold 12 pears at the market and gave 9 pears to a neighbour. "
        "How many pears does the farmer have left?",
        "35 - 12 - 9 = 14. The answer is 14.",
    ),
    (
        "Omar gave 14 of his seashells to his cousin. Now he has 31 seashells. "
        "How many seashells did Omar have before?",
        "31 + 14 = 45. The answer is 45.",
    ),
    (
        "A kiosk sold 125 newspapers on Saturday and 97 newspapers on Sunday. "
        "How many more newspapers did it sell on Saturday than on Sunday?",
        "125 - 97 = 28. The answer is 28.",
    ),
    (
        "A ribbon is 9 metres long. Lena buys 5 such ribbons and uses 12 metres of them for a banner. "
        "How many metres of ribbon does she have left?",
        "9 * 5 - 12 = 33. The answer is 33.",
    ),
)
_UNIT_SUFFIX = re.compile(r"\s*\([^()]*\)\s*$")


def _first(row: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if row.get(k) not in (None, ""):
            return row[k]
    return None


def _question(row: dict[str, Any]) -> str | None:
    q = _first(row, "problem", "question", "Problem", "Question")
    return str(q).strip() if q is not None else None


def _body_question(row: dict[str, Any]) -> str | None:
    body, q = _first(row, "Body", "body"), _first(row, "Question", "question")
    if body is None or q is None:
        return None
    return f"{str(body).strip()} {str(q).strip()}"


def _gsm8k_gold(row: dict[str, Any]) -> str | None:
    a = row.get("answer")
    return gsm8k_answer(str(a)) if a is not None else None


def _plain_gold(row: dict[str, Any]) -> str | None:
    a = _first(row, "answer", "Answer")
    return gold_text(a) if a is not None else None


def _boxed_solution_gold(row: dict[str, Any]) -> str | None:
    if row.get("answer") not in (None, ""):
        return gold_text(row["answer"])
    return extract_boxed(str(row.get("solution", "")), max_chars=10_000)


def _asdiv_gold(row: dict[str, Any]) -> str | None:
    a = row.get("answer")
    return _UNIT_SUFFIX.sub("", str(a)).strip() if a is not None else None  # "9 (apples)" -> "9"


def _olympiad_gold(row: dict[str, Any]) -> str | None:
    a = _first(row, "final_answer", "answer")
    if a is None:
        return None
    parts = a if isinstance(a, list) else [a]
    return ", ".join(str(p).replace("$", "").strip() for p in parts) or None


@dataclass(frozen=True)
class MathSource:
    """One math benchmark: where its data lives and how to read a row's problem and gold answer."""

    name: str
    local_dir: str
    question: Callable[[dict[str, Any]], str | None]
    gold: Callable[[dict[str, Any]], str | None]
    description: str
    hub_example: str
    hub_config: str | None = None  # the config ``hub_example`` needs


SOURCES = {
    s.name: s
    for s in (
        MathSource(
            "gsm8k", "math/gsm8k", _question, _gsm8k_gold, "GSM8K grade-school word problems", "openai/gsm8k", "main"
        ),
        MathSource(
            "math",
            "math/math",
            _question,
            _boxed_solution_gold,
            "MATH competition problems (train and test splits; MATH-500 is a subset of test)",
            "DigitalLearningGmbH/MATH-lighteval",
        ),
        MathSource(
            "math500", "math/math500", _question, _plain_gold, "MATH-500 competition problems", "HuggingFaceH4/MATH-500"
        ),
        MathSource(
            "aime24", "math/aime24", _question, _plain_gold, "AIME 2024 (30 problems)", "HuggingFaceH4/aime_2024"
        ),
        MathSource("amc23", "math/amc23", _question, _plain_gold, "AMC 2023 (40 problems)", "math-ai/amc23"),
        MathSource(
            "minerva_math",
            "math/minerva_math",
            _question,
            _boxed_solution_gold,
            "Minerva Math (OCW)",
            "math-ai/minervamath",
        ),
        MathSource(
            "svamp", "math/svamp", _body_question, _plain_gold, "SVAMP arithmetic word problems", "ChilleD/SVAMP"
        ),
        MathSource("asdiv", "math/asdiv", _body_question, _asdiv_gold, "ASDiv word problems", "EleutherAI/asdiv"),
        MathSource(
            "olympiadbench",
            "math/olympiadbench",
            _question,
            _olympiad_gold,
            "OlympiadBench (English, text-only)",
            "Hothan/OlympiadBench",
        ),
    )
}


def math_prompt(question: str, chat: bool = True, system: str | None = None) -> Any:
    """The problem and the ``\\boxed{}`` instruction, as chat messages (``chat``) or plain text."""
    text = f"{question}\n{INSTRUCTION}"
    if not chat:
        return text
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": text}]


def fewshot_prompt(question: str, shots: int = 2) -> str:
    """The plain few-shot prompt: ``Q: <example>\\nA: <equation> = <n>. The answer is <n>.`` for each of the first
    ``shots`` worked examples, each followed by a blank line, then ``Q: <question>\\nA:``."""
    examples = "".join(f"Q: {q}\nA: {a}\n\n" for q, a in FEWSHOT_EXAMPLES[:shots])
    return f"{examples}Q: {question}\nA:"


def check_format(task: str, format: str = "boxed", chat: bool | None = None, system: str | None = None) -> None:
    """One-line ConfigError for an unknown ``format``, or chat options on a plain few-shot prompt."""
    if format not in FORMATS:
        raise ConfigError(f"task {task!r}: format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format in FEWSHOT_SHOTS and (chat or system):
        raise ConfigError(f"task {task!r}: format {format} is a plain-text prompt; it takes no chat=True or system")


def make_prompt(question: str, format: str = "boxed", chat: bool | None = None, system: str | None = None) -> Any:
    """The prompt of one problem in ``format`` (:data:`FORMATS`; ``chat`` None: chat messages for ``boxed``)."""
    if format in FEWSHOT_SHOTS:
        return fewshot_prompt(question, FEWSHOT_SHOTS[format])
    return math_prompt(question, True if chat is None else chat, system)


def math_reward_settings(format: str = "boxed", **_: Any) -> dict[str, dict[str, Any]]:
    """The reward settings a math task's ``format`` needs: few-shot answers are read after "The answer is"."""
    return {"math_accuracy": {"extract": "answer_is"}} if format in FEWSHOT_SHOTS else {}


# A few-shot completion ends with its line: each example's answer is one line, and after it the model writes the next
# "Q:" (tokens that cost sampling time and carry no answer). A newline, not a blank line: tokenizers such as
# SmolLM2's emit a blank line after text as two newline tokens, which no single stop token covers.
FEWSHOT_STOP = "\n"


def math_stop_text(format: str = "boxed", **_: Any) -> str | None:
    """The text that ends a completion in ``format``: a newline for the few-shot formats (one-line answers), none
    for ``boxed``."""
    return FEWSHOT_STOP if format in FEWSHOT_SHOTS else None


def _resolve(source: MathSource, path: str | None) -> tuple[str, Path | str]:
    """("file" | "dir" | "hub", location) of a task's data; raises a one-line ConfigError when absent."""
    if path is None:
        what = f"jsonl file, directory or hub id such as {source.hub_example}"
        return "dir", require_data(source.name, source.local_dir, what)
    if looks_local(path):
        p = Path(path).expanduser()
        if not p.exists():
            raise ConfigError(
                f"task {source.name!r}: data path {path!r} does not exist; pass a jsonl file, a directory or a hub id"
            )
        return ("file" if p.is_file() else "dir"), p
    return "hub", path


def load_math_records(
    name: str, split: str = "test", path: str | None = None, config: str | None = None
) -> list[dict[str, Any]]:
    """Raw records of math benchmark ``name`` (see the module docstring for ``path``)."""
    source = SOURCES[name]
    kind, where = _resolve(source, path)
    if kind == "file":
        return read_records(Path(where))
    if kind == "dir":
        if path is None and not any((Path(where) / f"{split}{s}").is_file() for s in LOCAL_SUFFIXES):
            raise ConfigError(
                f"task {name!r}: the shared data {where} holds evaluation splits only, not {split!r}; pass "
                f"path={source.hub_example} (data_path in a recipe) for the hub's {split!r} split"
            )
        return read_records(split_file(Path(where), split))
    return load_hub(str(where), split, _hub_config(source, str(where), config))


def _hub_config(source: MathSource, hub_id: str, config: str | None) -> str | None:
    """``config``, else the config a known hub id needs (``main`` for ``openai/gsm8k``)."""
    return config if config is not None or hub_id != source.hub_example else source.hub_config


def math_source(name: str, split: str = "test", path: str | None = None, config: str | None = None, **_: Any) -> str:
    """What :func:`load_math_records` reads, without reading it: ``file:<path>`` or ``hub:<id>:<config>:<split>``."""
    source = SOURCES[name]
    if path is not None and not looks_local(path):
        return f"hub:{path}:{_hub_config(source, path, config) or ''}:{split}"
    where = data_location(source.local_dir, path)
    if where.is_file() or where.suffix in LOCAL_SUFFIXES:
        return f"file:{where.resolve()}"
    found = [where / f"{split}{s}" for s in LOCAL_SUFFIXES if (where / f"{split}{s}").is_file()]
    return f"file:{(found[0] if found else where / f'{split}.jsonl').resolve()}"


def build_math(
    name: str,
    split: str = "test",
    seed: int = 0,
    path: str | None = None,
    size: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
    shuffle: bool = False,
    config: str | None = None,
    format: str = "boxed",
) -> datasets.Dataset:
    """Rows ``{prompt, question, answer}`` of benchmark ``name`` in file order (shuffled by ``seed`` if
    ``shuffle``), the first ``size`` of them if given; prompts in ``format`` (:func:`make_prompt`)."""
    check_format(name, format, chat, system)
    source = SOURCES[name]
    rows = []
    dropped = 0
    for rec in load_math_records(name, split, path, config):
        q, gold = source.question(rec), source.gold(rec)
        if not q or not gold:
            dropped += 1
            continue
        rows.append({"prompt": make_prompt(q, format, chat, system), "question": q, "answer": gold})
    if dropped:
        logger.warning("task %s: dropped %d rows without a problem or gold answer", name, dropped)
    if not rows:
        raise ConfigError(f"task {name!r}: no usable rows in its data (split {split!r}, path {path!r})")
    return take_rows(rows, size, shuffle, seed)


def _check(name: str) -> Callable[..., None]:
    def check(
        path: str | None = None, format: str = "boxed", chat: bool | None = None, system: str | None = None, **_: Any
    ) -> None:
        check_format(name, format, chat, system)
        _resolve(SOURCES[name], path)

    return check


def _builder(name: str) -> Callable[..., datasets.Dataset]:
    def build(split: str = "test", seed: int = 0, **options: Any) -> datasets.Dataset:
        return build_math(name, split=split, seed=seed, **options)

    build.__doc__ = f"Build the {name} task (see :func:`build_math`)."
    return build


for _name, _source in SOURCES.items():
    TASKS.add(
        _name,
        TaskSpec(
            _name,
            _builder(_name),
            reward="math_accuracy",
            description=f"{_source.description}; final answer in \\boxed{{}} (or format=fewshot)",
            check=_check(_name),
            source=partial(math_source, _name),
            reward_settings=math_reward_settings,
            stop_text=math_stop_text,
        ),
    )
