"""What the text-to-SQL tasks share: the prompt (:func:`sql_prompt`: the database schema as its ``CREATE TABLE``
statements, the question, and an instruction to give the final query in a ```sql block), :func:`schema_text`, and
the rows of question files over database files (:func:`database_rows`, :func:`drop_failing_golds`).

The tasks: ``spider`` (:mod:`rlvr_div.tasks.spider`), ``bird`` (:mod:`rlvr_div.tasks.bird`) and ``synth_sql``
(:mod:`rlvr_div.tasks.synth_sql`), all verified by execution. Each row has ``prompt`` (chat messages by default; plain
text with ``chat=False``), ``question``, ``db_path`` (absolute path of the SQLite file), ``gold_sql`` and ``db_id``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.sql import DEFAULT_DEADLINE, DEFAULT_MAX_ROWS, execute_query

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = "You are an expert in SQLite. You answer questions about a database by writing one SQL query."
INSTRUCTION = "Think about the question briefly, then give one SQLite query that answers it in a ```sql code block."


def sql_prompt(
    schema: str, question: str, chat: bool = True, system: str | None = SYSTEM_PROMPT, evidence: str | None = None
) -> Any:
    """The schema, the external knowledge (``evidence``, when given), the question and the instruction, as chat
    messages (``chat``) or plain text."""
    knowledge = f"External knowledge: {evidence}\n\n" if evidence else ""
    text = f"Database schema:\n{schema}\n\n{knowledge}Question: {question}\n\n{INSTRUCTION}"
    if not chat:
        return text
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": text}]


@lru_cache(maxsize=256)
def schema_text(db_path: str) -> str:
    """The ``CREATE TABLE`` statements of a SQLite database (read-only), one per table, in creation order."""
    uri = f"file:{Path(db_path).resolve().as_posix()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL "
            "ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return "\n\n".join(r[0].strip() + ";" for r in rows)


# ------------------------------------------------------------ question files over database files (Spider, BIRD)


def drop_failing_golds(rows: list[dict[str, Any]], task: str, check_gold: bool = True) -> list[dict[str, Any]]:
    """``rows`` without those whose ``gold_sql`` fails on ``db_path``: an error, not a query, more than the reward's
    default ``max_rows`` rows or past its default deadline, each of which would make every score None. Each distinct
    (database, gold query) runs once, in this process, through the reward's read-only connection; one warning line
    gives the count. ``check_gold=False`` returns ``rows`` unchanged."""
    if not check_gold:
        return rows
    failures: dict[tuple[str, str], str] = {}
    for db_path, gold in dict.fromkeys((r["db_path"], r["gold_sql"]) for r in rows):
        try:
            execute_query(db_path, gold, DEFAULT_DEADLINE, DEFAULT_MAX_ROWS)
        except Exception as e:  # any failure of a gold query makes its rows unscorable
            failures[(db_path, gold)] = f"{type(e).__name__}: {e}"
    if not failures:
        return rows
    kept = [r for r in rows if (r["db_path"], r["gold_sql"]) not in failures]
    (db_path, gold), error = next(iter(failures.items()))
    logger.warning(
        "task %s: dropped %d of %d questions whose gold query fails on its database (first: %s on %s: %s); "
        "check_gold=False keeps them",
        task,
        len(rows) - len(kept),
        len(rows),
        error[:200],
        Path(db_path).name,
        gold[:200],
    )
    return kept


def database_rows(
    task: str,
    split: str,
    records: list[dict[str, Any]],
    databases: Path,
    row: Callable[[dict[str, Any], Path], dict[str, Any]],
    check_gold: bool = True,
) -> list[dict[str, Any]]:
    """``row(record, db_path)`` for each question record whose database ``databases/<db_id>/<db_id>.sqlite``
    exists (the others are dropped with one warning line), then :func:`drop_failing_golds`; a one-line ConfigError
    when no row is left. Each row must hold ``db_path`` and ``gold_sql``."""
    rows, missing = [], set()
    for rec in records:
        db_id = rec["db_id"]
        db_path = (databases / db_id / f"{db_id}.sqlite").resolve()
        if not db_path.is_file():
            missing.add(db_id)
            continue
        rows.append(row(rec, db_path))
    if missing:
        logger.warning("task %s: dropped questions on %d missing databases: %s", task, len(missing), sorted(missing))
    rows = drop_failing_golds(rows, task, check_gold)
    if not rows:
        raise ConfigError(
            f"task {task!r}: no question of split {split!r} has its database under {databases} "
            "and a gold query that runs"
        )
    return rows
