"""``wordmath``: the SVAMP and ASDiv word problems pooled, with train / validation / test splits that are held out by
problem family, built deterministically from the shared test files (``math/svamp/test.jsonl``,
``math/asdiv/test.jsonl``).

The pool: every problem (``Body`` + " " + ``Question``) whose gold answer is a plain number (ASDiv's units removed;
its names, times, ratios and fractions are left out), deduplicated by normalised text (lower case, runs of anything
but letters and digits as one space; a problem whose copies disagree on the gold is dropped). Its *template* is that
text with every number masked as ``#``: digits (``12``, ``1,200``, ``2.5``) and number words (``seven``, ``twenty``).

Problems fall into *families*, the connected groups of three links: the same template, the same masked body (SVAMP's
variations of one story asking other questions), or masked word sets whose Jaccard similarity is at least
:data:`SIMILARITY` (the same story retold with other numbers or an extra clause; the join is exact). A family goes
whole to one split, by the sha256 of its first template in sorted order: below :data:`SPLITS`' bounds on
``[0, 1)`` it is ``test``, then ``validation``, the rest ``train``. So no problem text and no template occurs in two
splits, nor a pair of problems that similar. Rows are in a fixed order (by the sha256 of the normalised text) that
mixes both sources, so the first ``size`` are a fair sample.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import data_location, read_records, require_data, take_rows
from rlvr_div.tasks.math import SOURCES, check_format, make_prompt, math_reward_settings, math_stop_text

logger = logging.getLogger(__name__)

NAME = "wordmath"
FILES = {"svamp": "math/svamp/test.jsonl", "asdiv": "math/asdiv/test.jsonl"}  # under a data root
SPLITS = {"test": (0.0, 0.11), "validation": (0.11, 0.16), "train": (0.16, 1.0)}  # a family's hash bucket in [0, 1)
SIMILARITY = Fraction(3, 5)  # Jaccard similarity of masked word sets that puts two problems in one family

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_NUMBER_WORDS = re.compile(
    r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
    r"|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million)\b"
)
_NON_WORD = re.compile(r"[^a-z0-9#]+")
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def normal_text(text: str) -> str:
    """Lower case, every run of characters other than letters, digits and ``#`` as one space, stripped."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def template(text: str) -> str:
    """:func:`normal_text` with every number, in digits or in words, masked as ``#``."""
    return normal_text(_NUMBER_WORDS.sub("#", _NUMBER.sub("#", text.lower())))


@dataclass(frozen=True)
class Problem:
    """One pooled word problem: its source set, text (body and question), body and gold answer."""

    source: str
    question: str
    body: str
    answer: str


def data_files(path: str | None = None) -> dict[str, Path]:
    """The SVAMP and ASDiv files under data root ``path`` (default: the shared data); a one-line ConfigError when one
    is absent."""
    if path is None:
        what = "a data root holding math/svamp/test.jsonl and math/asdiv/test.jsonl"
        return {name: require_data(NAME, rel, what) for name, rel in FILES.items()}
    files = {name: Path(path).expanduser() / rel for name, rel in FILES.items()}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise ConfigError(f"task {NAME!r}: no {', '.join(missing)}; path must be a data root holding both files")
    return files


def load_problems(files: dict[str, Path]) -> list[Problem]:
    """The pool: the problems of ``files`` (source name -> file) with a plain-number gold, deduplicated by
    :func:`normal_text` (first copy kept; dropped when copies disagree on the gold)."""
    kept: dict[str, Problem] = {}
    conflicting: set[str] = set()
    for name, file in files.items():
        source = SOURCES[name]
        for rec in read_records(file):
            question, gold = source.question(rec), source.gold(rec)
            if not question or not gold or not _PLAIN_NUMBER.fullmatch(gold):
                continue
            key = normal_text(question)
            if key in kept:
                conflicting.update([key] if kept[key].answer != gold else [])
                continue
            body = str(rec.get("Body", rec.get("body", ""))).strip()
            kept[key] = Problem(name, question, body, gold)
    if conflicting:
        logger.warning("task %s: dropped %d problems whose copies disagree on the gold answer", NAME, len(conflicting))
    return [p for k, p in kept.items() if k not in conflicting]


def similar_pairs(sets: Sequence[frozenset[str]], threshold: Fraction) -> Iterator[tuple[int, int]]:
    """Every pair ``(i, j)``, ``i < j``, of ``sets`` with Jaccard similarity at least ``threshold``; exact, by prefix
    filtering: taken smallest first, two such sets share an element among the rarest ``n - ceil(threshold * n) + 1``
    of each, and the smaller has at least ``threshold`` times the larger's size."""
    counts = Counter(t for s in sets for t in s)
    index: dict[str, list[int]] = defaultdict(list)
    num, den = threshold.numerator, threshold.denominator
    for j in sorted(range(len(sets)), key=lambda k: len(sets[k])):
        tokens = sets[j]
        ordered = sorted(tokens, key=lambda t: (counts[t], t))
        prefix = ordered[: len(ordered) - math.ceil(Fraction(num * len(ordered), den)) + 1]
        seen: set[int] = set()
        for t in prefix:
            for i in index[t]:
                if i in seen or den * len(sets[i]) < num * len(tokens):  # too small to be similar enough
                    continue
                seen.add(i)
                common = len(sets[i] & tokens)
                if den * common >= num * (len(sets[i]) + len(tokens) - common):
                    yield min(i, j), max(i, j)
            index[t].append(j)


def families(problems: Sequence[Problem], threshold: Fraction = SIMILARITY) -> list[str]:
    """Each problem's family, named by its first template in sorted order (see the module docstring)."""
    parent = list(range(len(problems)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        parent[root(i)] = root(j)

    templates = [template(p.question) for p in problems]
    first: dict[str, int] = {}  # template or masked body -> the first problem that has it
    for i, p in enumerate(problems):
        for key in (templates[i], f"body: {template(p.body)}" if p.body else None):  # (no template holds ":")
            if key is not None:
                join(i, first.setdefault(key, i))
    for i, j in similar_pairs([frozenset(t.split()) for t in templates], threshold):
        join(i, j)
    names: dict[int, str] = {}
    for i, key in enumerate(templates):
        r = root(i)
        names[r] = min(names.get(r, key), key)
    return [names[root(i)] for i in range(len(problems))]


def bucket(family: str) -> float:
    """Where a family falls in ``[0, 1)``: the first 8 bytes of the sha256 of its name."""
    return int.from_bytes(hashlib.sha256(family.encode()).digest()[:8], "big") / 2**64


def split_of(family: str) -> str:
    """The split of a family (:data:`SPLITS`)."""
    b = bucket(family)
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= b < hi)


def split_problems(problems: Sequence[Problem]) -> dict[str, list[tuple[Problem, str]]]:
    """``{split: [(problem, family), ...]}``, each split in the order of the sha256 of the problems' normal text."""
    out: dict[str, list[tuple[Problem, str]]] = {name: [] for name in SPLITS}
    for problem, family in zip(problems, families(problems)):
        out[split_of(family)].append((problem, family))
    for items in out.values():
        items.sort(key=lambda item: hashlib.sha256(normal_text(item[0].question).encode()).hexdigest())
    return out


@lru_cache(maxsize=4)
def _cached_splits(files: tuple[tuple[str, str, int, int], ...]) -> dict[str, tuple[tuple[Problem, str], ...]]:
    """:func:`split_problems` of the files ``(source, path, mtime_ns, size)``: built once per version of them."""
    splits = split_problems(load_problems({name: Path(path) for name, path, _, _ in files}))
    return {name: tuple(items) for name, items in splits.items()}


def wordmath_splits(path: str | None = None) -> dict[str, tuple[tuple[Problem, str], ...]]:
    """``{split: ((problem, family), ...)}`` of the data under ``path`` (default: the shared data); cached while the
    files are unchanged."""
    versions = []
    for name, file in data_files(path).items():
        stat = file.stat()
        versions.append((name, str(file.resolve()), stat.st_mtime_ns, stat.st_size))
    return _cached_splits(tuple(versions))


def build_wordmath(
    split: str = "train",
    seed: int = 0,
    path: str | None = None,
    size: int | None = None,
    shuffle: bool = False,
    format: str = "fewshot",
    chat: bool | None = None,
    system: str | None = None,
    indices: Sequence[int] | None = None,
) -> datasets.Dataset:
    """Rows ``{prompt, question, answer, source, family}`` of ``split`` (``train``, ``validation`` or ``test``):
    prompts in ``format`` (``fewshot`` by default, ``fewshot8``, or ``boxed``, which takes ``chat`` and ``system``),
    only the rows at positions ``indices`` of the split's fixed order if given (a filtered training pool, kept in that
    order), then shuffled by ``seed`` if ``shuffle``, the first ``size`` if given. ``path``: a data root holding the
    SVAMP and ASDiv files."""
    if split not in SPLITS:
        raise ConfigError(f"task {NAME!r} has splits {', '.join(SPLITS)}, not {split!r}")
    check_format(NAME, format, chat, system)
    check_indices(indices)
    items = wordmath_splits(path)[split]
    if not items:
        raise ConfigError(f"task {NAME!r}: no problems in split {split!r} (path {path!r})")
    if indices is not None:
        outside = [i for i in indices if i >= len(items)]
        if outside:
            raise ConfigError(f"task {NAME!r}: index {outside[0]} is outside split {split!r} ({len(items)} problems)")
        items = tuple(items[i] for i in indices)
    rows = [
        {
            "prompt": make_prompt(p.question, format, chat, system),
            "question": p.question,
            "answer": p.answer,
            "source": p.source,
            "family": hashlib.sha256(family.encode()).hexdigest()[:12],
        }
        for p, family in items
    ]
    return take_rows(rows, size, shuffle, seed)


def check_indices(indices: Any) -> None:
    """One-line ConfigError unless ``indices`` is None or a non-empty list of distinct integers >= 0."""
    if indices is None:
        return
    if (
        not isinstance(indices, list | tuple)
        or not indices
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
    ):
        raise ConfigError(f"task {NAME!r}: indices must be a non-empty list of row positions (integers >= 0)")
    if len(set(indices)) != len(indices):
        raise ConfigError(f"task {NAME!r}: indices repeat a position")


def _check(
    path: str | None = None,
    format: str = "fewshot",
    chat: bool | None = None,
    system: str | None = None,
    indices: Any = None,
    **_: Any,
) -> None:
    check_format(NAME, format, chat, system)
    check_indices(indices)
    data_files(path)


def _source(split: str, path: str | None = None, **_: Any) -> str:
    """``wordmath:<split>:<svamp file>+<asdiv file>``: one name per split, since each split is a part of both files."""
    files = [
        (data_location(rel, None) if path is None else Path(path).expanduser() / rel).resolve()
        for rel in FILES.values()
    ]
    return f"{NAME}:{split}:{'+'.join(map(str, files))}"


def _reward_settings(format: str = "fewshot", **_: Any) -> dict[str, dict[str, Any]]:
    return math_reward_settings(format)


def _stop_text(format: str = "fewshot", **_: Any) -> str | None:
    return math_stop_text(format)


TASKS.add(
    NAME,
    TaskSpec(
        NAME,
        build_wordmath,
        reward="math_accuracy",
        description="SVAMP + ASDiv word problems, train/validation/test held out by problem family; 2-shot prompt",
        check=_check,
        source=_source,
        reward_settings=_reward_settings,
        stop_text=_stop_text,
    ),
)
