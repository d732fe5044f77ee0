"""The ``spider`` task: a Spider-format text-to-SQL directory, verified by ``sql_execution``; rows are built with
the shared SQL prompt and :func:`rlvr_div.tasks.sql.database_rows`.

A Spider-format directory has ``dev.json`` / ``train_spider.json`` with ``question``, ``query``, ``db_id``, and
``database/<db_id>/<db_id>.sqlite`` (``tables.json`` may be there but is not read); by default ``sql/spider_dev`` of
the shared data. Splits: ``dev`` (the default) / ``validation`` -> ``dev.json``; ``test`` -> ``test.json``, else
``dev.json`` (Spider's dev set is its usual test set); ``train`` -> ``train_spider.json`` (Spider's
``train_others.json`` is left out, as in most work). Questions whose database file is missing are dropped, and so are
questions whose gold query fails on its database (checked once at build time, see
:func:`rlvr_div.tasks.sql.drop_failing_golds`; ``check_gold=False`` keeps them).

Each row has ``hardness``, Spider's level of its gold query (``easy``, ``medium``, ``hard`` or ``extra``, by the
official evaluation's rules: :func:`rlvr_div.tasks.sql_hardness.spider_hardness`; None for a gold that is not a
SELECT); option ``hardness`` (a level or a list of levels) keeps the questions of those levels only. Option
``format``: ``instruct`` (default) or ``fewshot`` (:mod:`rlvr_div.tasks.sql`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import data_directory, data_location, take_rows
from rlvr_div.tasks.sql import (
    SYSTEM_PROMPT,
    check_sql_format,
    database_rows,
    sql_reward_settings,
    sql_stop_text,
    task_prompt,
)
from rlvr_div.tasks.sql_hardness import LEVELS, spider_hardness

SPIDER_LOCAL = "sql/spider_dev"
SPIDER_SPLITS = {
    "dev": ("dev.json",),
    "validation": ("dev.json",),
    "test": ("test.json", "dev.json"),
    "train": ("train_spider.json", "train.json"),
}


def _spider_dir(path: str | None) -> Path:
    """The Spider-format directory to use; raises a one-line ConfigError when it is absent or has no databases."""
    root = data_directory("spider", path, SPIDER_LOCAL, "directory with dev.json (or train_spider.json) and database/")
    if not (root / "database").is_dir():
        raise ConfigError(f"task 'spider': {root} lacks database/; it must be a Spider-format directory")
    return root


def _spider_questions(root: Path, split: str) -> Path:
    if split not in SPIDER_SPLITS:
        raise ConfigError(f"task 'spider' has splits {', '.join(SPIDER_SPLITS)}, not {split!r}")
    for name in SPIDER_SPLITS[split]:
        if (root / name).is_file():
            return root / name
    have = [s for s in ("dev", "train") if any((root / n).is_file() for n in SPIDER_SPLITS[s])]
    wanted = " or ".join(SPIDER_SPLITS[split])
    hint = f"it has split {' and '.join(repr(h) for h in have)}" if have else "it has no question file"
    if split == "train":
        hint += "; Spider's train_spider.json comes with the full Spider download (see docs/rewards.md)"
    raise ConfigError(f"task 'spider': {root} has no {wanted} for split {split!r}; {hint}")


def spider_source(split: str = "dev", path: str | None = None, **_: Any) -> str:
    """``file:<questions file>`` that split ``split`` of the Spider directory ``path`` is read from (not read)."""
    root = data_location(SPIDER_LOCAL, path)
    names = SPIDER_SPLITS.get(split, (f"{split}.json",))
    found = [root / n for n in names if (root / n).is_file()]
    return f"file:{(found[0] if found else root / names[0]).resolve()}"


def hardness_levels(hardness: Any) -> tuple[str, ...] | None:
    """The levels that option ``hardness`` keeps (None: all): one level or a non-empty list of levels of
    :data:`~rlvr_div.tasks.sql_hardness.LEVELS`; a one-line ConfigError otherwise."""
    if hardness is None:
        return None
    given = [hardness] if isinstance(hardness, str) else hardness
    if not isinstance(given, list | tuple) or not given or not all(isinstance(h, str) for h in given):
        raise ConfigError(f"task 'spider': hardness must be a level or a list of levels ({', '.join(LEVELS)})")
    unknown = [h for h in given if h not in LEVELS]
    if unknown:
        hint = ' (several levels are a list: --task-arg hardness=\'["easy","medium"]\')' if "," in unknown[0] else ""
        raise ConfigError(f"task 'spider': unknown hardness {unknown[0]!r}; the levels are {', '.join(LEVELS)}{hint}")
    return tuple(dict.fromkeys(given))


def gold_hardness(sql: str) -> str | None:
    """:func:`~rlvr_div.tasks.sql_hardness.spider_hardness` of a gold query; None when it is not a SELECT."""
    try:
        return spider_hardness(sql)
    except ValueError:
        return None


def check_spider(
    path: str | None = None,
    format: str = "instruct",
    chat: bool | None = None,
    system: str | None = SYSTEM_PROMPT,
    hardness: Any = None,
    **_: Any,
) -> None:
    """Validate the options and the Spider directory cheaply (no database is opened)."""
    check_sql_format("spider", format, chat, system)
    hardness_levels(hardness)
    _spider_dir(path)


def build_spider(
    split: str = "dev",
    seed: int = 0,
    path: str | None = None,
    size: int | None = None,
    chat: bool | None = None,
    system: str | None = SYSTEM_PROMPT,
    shuffle: bool = False,
    check_gold: bool = True,
    format: str = "instruct",
    hardness: Any = None,
) -> datasets.Dataset:
    """Rows ``{prompt, question, db_path, gold_sql, db_id, hardness}`` of a Spider-format split (default ``dev``), in
    file order, those of the ``hardness`` levels only if given (one level or a list), shuffled by ``seed`` if
    ``shuffle``, the first ``size`` of them if given; prompts in ``format`` (``instruct``: chat messages unless
    ``chat=False``; ``fewshot``); questions whose database is missing or whose gold query fails are dropped
    (:func:`drop_failing_golds`)."""
    check_sql_format("spider", format, chat, system)
    levels = hardness_levels(hardness)
    root = _spider_dir(path)
    records = json.loads(_spider_questions(root, split).read_text(encoding="utf-8"))
    levels_of = {sql: gold_hardness(sql) for sql in dict.fromkeys(str(rec["query"]).strip() for rec in records)}
    if levels is not None:
        records = [rec for rec in records if levels_of[str(rec["query"]).strip()] in levels]
        if not records:
            raise ConfigError(f"task 'spider': no question of split {split!r} has hardness {' or '.join(levels)}")

    def row(rec: dict[str, Any], db_path: Path) -> dict[str, Any]:
        question = str(rec["question"]).strip()
        gold = str(rec["query"]).strip()
        return {
            "prompt": task_prompt(str(db_path), question, format, chat, system),
            "question": question,
            "db_path": str(db_path),
            "gold_sql": gold,
            "db_id": rec["db_id"],
            "hardness": levels_of[gold],
        }

    return take_rows(database_rows("spider", split, records, root / "database", row, check_gold), size, shuffle, seed)


TASKS.add(
    "spider",
    TaskSpec(
        "spider",
        build_spider,
        reward="sql_execution",
        description="Spider-format text-to-SQL directory (default ../shared/data/sql/spider_dev); execution match",
        check=check_spider,
        source=spider_source,
        reward_settings=sql_reward_settings,
        stop_text=sql_stop_text,
    ),
)
