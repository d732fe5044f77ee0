"""The ``spider`` task: a Spider-format text-to-SQL directory, verified by ``sql_execution``; rows are built with
the shared SQL prompt and :func:`rlvr_div.tasks.sql.database_rows`.

A Spider-format directory has ``dev.json`` / ``train_spider.json`` with ``question``, ``query``, ``db_id``, and
``database/<db_id>/<db_id>.sqlite`` (``tables.json`` may be there but is not read); by default ``sql/spider_dev`` of
the shared data. Splits: ``dev`` (the default) / ``validation`` -> ``dev.json``; ``test`` -> ``test.json``, else
``dev.json`` (Spider's dev set is its usual test set); ``train`` -> ``train_spider.json`` (Spider's
``train_others.json`` is left out, as in most work). Questions whose database file is missing are dropped, and so are
questions whose gold query fails on its database (checked once at build time, see
:func:`rlvr_div.tasks.sql.drop_failing_golds`; ``check_gold=False`` keeps them).
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
from rlvr_div.tasks.sql import SYSTEM_PROMPT, database_rows, schema_text, sql_prompt

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


def check_spider(path: str | None = None, **_: Any) -> None:
    """Validate the Spider directory cheaply (no database is opened)."""
    _spider_dir(path)


def build_spider(
    split: str = "dev",
    seed: int = 0,
    path: str | None = None,
    size: int | None = None,
    chat: bool = True,
    system: str | None = SYSTEM_PROMPT,
    shuffle: bool = False,
    check_gold: bool = True,
) -> datasets.Dataset:
    """Rows ``{prompt, question, db_path, gold_sql, db_id}`` of a Spider-format split (default ``dev``), in file
    order (shuffled by ``seed`` if ``shuffle``), the first ``size`` of them if given; questions whose database is
    missing or whose gold query fails are dropped (:func:`drop_failing_golds`)."""
    root = _spider_dir(path)
    records = json.loads(_spider_questions(root, split).read_text(encoding="utf-8"))

    def row(rec: dict[str, Any], db_path: Path) -> dict[str, Any]:
        question = str(rec["question"]).strip()
        return {
            "prompt": sql_prompt(schema_text(str(db_path)), question, chat, system),
            "question": question,
            "db_path": str(db_path),
            "gold_sql": str(rec["query"]).strip(),
            "db_id": rec["db_id"],
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
    ),
)
