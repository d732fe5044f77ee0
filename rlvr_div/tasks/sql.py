"""What the text-to-SQL tasks share: the prompt (:func:`sql_prompt`: the database schema as its ``CREATE TABLE``
statements, the question, and an instruction to give the final query in a ```sql block), :func:`schema_text`, and
the rows of question files over database files (:func:`database_rows`, :func:`drop_failing_golds`).

The tasks: ``spider`` (:mod:`rlvr_div.tasks.spider`), ``bird`` (:mod:`rlvr_div.tasks.bird`) and ``synth_sql``
(:mod:`rlvr_div.tasks.synth_sql`), all verified by execution. Each row has ``prompt`` (chat messages by default; plain
text with ``chat=False``), ``question``, ``db_path`` (absolute path of the SQLite file), ``gold_sql`` and ``db_id``.

The prompt ``format`` of ``spider`` and ``synth_sql`` (:data:`SQL_FORMATS`): ``instruct`` (the default) is the prompt
above; ``fewshot`` is a short plain completion-style text for small base models, no chat template
(:func:`fewshot_sql_prompt`): two worked examples over a made-up two-table database that no task uses, then the
question's database as ``table(column, …)`` lines (:func:`compact_schema`), ``Q: <question>`` and ``SQL:``. Its query
is the rest of that line: the task sets ``sql_execution``'s ``block="line"`` (:func:`sql_reward_settings`) and the
stop text ``"\n"`` (:func:`sql_stop_text`).
"""

from __future__ import annotations

import logging
import re
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


SQL_FORMATS = ("instruct", "fewshot")
# the few-shot prompt's worked examples: written for it, over a made-up database that no task uses (no Spider dev or
# synth_sql database has these tables), one query a line
FEWSHOT_SCHEMA = "author(author_id, name, country)\nbook(book_id, title, author_id, year)"
FEWSHOT_EXAMPLES = (
    ("What are the titles of the books published after 2000?", "SELECT title FROM book WHERE year > 2000"),
    (
        "Which books were written by authors from France? Give their titles.",
        "SELECT book.title FROM book JOIN author ON book.author_id = author.author_id WHERE author.country = 'France'",
    ),
)
FEWSHOT_STOP = "\n"  # a few-shot query is one line; after it the model would write the next "Schema:"
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fewshot_sql_prompt(schema: str, question: str) -> str:
    """The plain two-shot prompt: for each worked example ``Schema:``, the made-up database's ``table(column, …)``
    lines, ``Q: <question>``, ``SQL: <query>`` and a blank line; then the same for ``schema`` and ``question``, up to
    ``SQL:``."""
    shots = "".join(f"Schema:\n{FEWSHOT_SCHEMA}\nQ: {q}\nSQL: {sql}\n\n" for q, sql in FEWSHOT_EXAMPLES)
    return f"{shots}Schema:\n{schema}\nQ: {question}\nSQL:"


def check_sql_format(task: str, format: str = "instruct", chat: bool | None = None, system: str | None = None) -> None:
    """One-line ConfigError for an unknown ``format``, or chat options (``chat=True``, a ``system`` message other
    than the default) on the plain ``fewshot`` prompt."""
    if format not in SQL_FORMATS:
        raise ConfigError(f"task {task!r}: format must be one of {', '.join(SQL_FORMATS)}, got {format!r}")
    if format == "fewshot" and (chat or system not in (None, SYSTEM_PROMPT)):
        raise ConfigError(f"task {task!r}: format fewshot is a plain-text prompt; it takes no chat=True or system")


def task_prompt(
    db_path: str, question: str, format: str = "instruct", chat: bool | None = None, system: str | None = SYSTEM_PROMPT
) -> Any:
    """The prompt of one question on the database at ``db_path`` in ``format`` (:data:`SQL_FORMATS`; ``chat`` None:
    chat messages for ``instruct``)."""
    if format == "fewshot":
        return fewshot_sql_prompt(compact_schema(db_path), question)
    return sql_prompt(schema_text(db_path), question, True if chat is None else chat, system)


def sql_reward_settings(format: str = "instruct", **_: Any) -> dict[str, dict[str, Any]]:
    """The reward settings a SQL task's ``format`` needs: a ``fewshot`` query is the completion's first line."""
    if format != "fewshot":
        return {}
    return {"sql_execution": {"block": "line"}, "bird_execution": {"block": "line"}}


def sql_stop_text(format: str = "instruct", **_: Any) -> str | None:
    """The text that ends a completion in ``format``: a newline for ``fewshot`` (one-line queries), none for
    ``instruct``."""
    return FEWSHOT_STOP if format == "fewshot" else None


@lru_cache(maxsize=256)
def compact_schema(db_path: str) -> str:
    """The tables of a SQLite database (read-only) as ``table(column, column, …)`` lines, in creation order; a name
    that is not a plain identifier is double-quoted."""
    uri = f"file:{Path(db_path).resolve().as_posix()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
        columns = {t: [r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (t,))] for t in tables}
    finally:
        conn.close()

    def name(n: str) -> str:
        return n if _PLAIN_NAME.fullmatch(n) else '"' + n.replace('"', '""') + '"'

    return "\n".join(f"{name(t)}({', '.join(map(name, columns[t]))})" for t in tables)


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
