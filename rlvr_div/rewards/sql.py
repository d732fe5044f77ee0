"""SQL execution reward: run the completion's query on the task's SQLite database and compare with the gold result.

``sql_execution`` (reads columns ``db_path`` and ``gold_sql``). With P the rows of the predicted query and G those of
the gold query on the same database (the comparisons are in :mod:`rlvr_div.rewards.sql_results`):

    spider semantics:  r = 1 if some column permutation σ gives P∘σ = G as multisets (as lists when the gold query
                       has ORDER BY), else 0 — Spider's test-suite evaluator (``eval_exec_match`` with
                       ``--keep_distinct``); ``column_order="strict"`` requires σ = identity
    bird semantics:    r = 1 if set(P) = set(G), else 0 — BIRD's evaluator (columns in order)
    partial credit w:  a mismatch scores w · |P ∩ G| / max(|P|, |G|) (∩ of multisets, or sets for bird; rows as
                       unordered value bags when any column order is allowed), w < 1, so only an exact match is
                       *valid* (r = 1).
    r = None           if the gold query fails, overruns the deadline or returns more than ``max_rows`` rows
                       (an overrun is retried in the next batch).

Floats are compared to 10 significant digits (equivalent queries may sum in a different order; both official
evaluators compare exactly); ``3 = 3.0``.

``bird_execution`` is the same reward with ``semantics="bird"`` by default (the ``bird`` task's reward).

The query is the last fenced ```sql block of the completion (``block="any"``: the last fenced block whatever its
language; ``block="none"``: the whole completion; ``block="line"``: the text before the completion's first newline,
set by the SQL tasks' ``format: fewshot``, whose queries are one line each). It is executed in a worker process of a
:class:`~rlvr_div.rewards.workers.DeadlinePool` on a connection that cannot change anything:

- the database is opened read-only (``file:…?mode=ro`` URI; WAL databases also ``immutable=1`` so no ``-shm`` file
  is created), with ``query_only``, in-memory temporary storage and a heap limit;
- an authorizer allows reading only (SELECT, reading columns, functions except ``load_extension``, recursive CTEs):
  every write, DDL, PRAGMA, ATTACH/DETACH, VACUUM, transaction or savepoint is denied, and
  ``SQLITE_LIMIT_ATTACHED = 0`` forbids attaching anything; one statement per query; a statement that returns no
  result columns is not a query and scores 0;
- a progress handler aborts the query ``deadline`` seconds after it starts (default 5 s), strings and blobs are
  capped (``SQLITE_LIMIT_LENGTH``), and at most ``max_rows`` rows are fetched (``fetchmany``); the pool kills a worker
  that still overruns by ``GRACE_S`` and replaces it, and caps each worker's memory.

Gold results are computed once per (database, gold query) and cached; scores are cached per (database, gold query,
predicted query), so the duplicates of a collapsed policy execute once.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward
from rlvr_div.rewards.sql_results import (
    COLUMN_ORDERS,
    SEMANTICS,
    default_column_order,
    result_overlap,
    results_match,
)
from rlvr_div.rewards.workers import DeadlinePool

logger = logging.getLogger(__name__)

BLOCKS = ("sql", "any", "none", "line")
GRACE_S = 0.25  # the pool's hard deadline is the query deadline plus this (printf("%.*c", 2e9, "x") needs it)
MAX_VALUE_BYTES = 10_000_000  # SQLITE_LIMIT_LENGTH: the largest string or blob a query may build
MAX_SQL_CHARS = 20_000
DEFAULT_DEADLINE = 5.0  # seconds per query
DEFAULT_MAX_ROWS = 10_000
CACHE_SIZE = 200_000
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_FENCE_SQL = re.compile(r"```[ \t]*sql\b[^\n]*\n?", re.IGNORECASE)
_FENCE_ANY = re.compile(r"```[^\n`]*\n?")


def extract_sql(text: str, block: str = "sql", max_chars: int = MAX_SQL_CHARS) -> str | None:
    """The query in ``text``: the content of the last ```sql fence (``block="sql"``), of the last fence of any
    language (``"any"``), the whole text (``"none"``) or the text before its first newline (``"line"``); an unclosed
    final fence runs to the end of the text. Surrounding whitespace and trailing semicolons are removed; None when
    empty or longer than ``max_chars``."""
    if block == "none":
        sql = text
    elif block == "line":
        sql = text.split("\n", 1)[0]
    else:
        if block == "sql":
            openings = list(_FENCE_SQL.finditer(text))
            opening = openings[-1] if openings else None
        else:  # "any": fences alternate open/close; the last opening one is at an even position
            fences = list(_FENCE_ANY.finditer(text))
            opening = fences[-1] if len(fences) % 2 == 1 else (fences[-2] if fences else None)
        if opening is None:
            return None
        close = text.find("```", opening.end())
        sql = text[opening.end() : close if close >= 0 else len(text)]
    sql = sql.strip().rstrip(";").strip()
    return sql if sql and len(sql) <= max_chars else None


def has_order_by(sql: str) -> bool:
    """Whether the gold query orders its result (then the row order must match, as in Spider's evaluation)."""
    return bool(_ORDER_BY.search(sql))


def _normalize_value(v: Any) -> Any:
    return float(f"{v:.10g}") if isinstance(v, float) else v


# --------------------------------------------------------------------------------------------- worker side

_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
_connections: OrderedDict[str, sqlite3.Connection] = OrderedDict()
_stop_at = 0.0


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    """SQLite authorizer: reading only. Every action that is not a read is denied."""
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _past_deadline() -> bool:
    return time.monotonic() > _stop_at


def _is_wal(path: str) -> bool:
    with open(path, "rb") as f:
        header = f.read(20)
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def open_readonly(db_path: str, heap_mb: int | None = None) -> sqlite3.Connection:
    """A connection to ``db_path`` that can only read (see the module docstring for every guard)."""
    path = os.path.abspath(db_path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no SQLite database at {path}")
    uri = f"file:{urllib.parse.quote(path)}?mode=ro" + ("&immutable=1" if _is_wal(path) else "")
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")  # no temporary files anywhere
    if heap_mb:
        conn.execute(f"PRAGMA hard_heap_limit = {int(heap_mb) * 1024 * 1024}")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 4 * MAX_SQL_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)
    conn.set_authorizer(_authorize)
    conn.set_progress_handler(_past_deadline, 1000)
    return conn


def _connection(db_path: str, heap_mb: int | None) -> sqlite3.Connection:
    conn = _connections.get(db_path)
    if conn is None:
        conn = _connections[db_path] = open_readonly(db_path, heap_mb)
        while len(_connections) > 32:
            _connections.popitem(last=False)[1].close()
    _connections.move_to_end(db_path)
    return conn


class QueryRejected(Exception):
    """The query ran but cannot be compared: not a query, or too many rows."""


def execute_query(
    db_path: str,
    sql: str,
    deadline: float = DEFAULT_DEADLINE,
    max_rows: int = DEFAULT_MAX_ROWS,
    heap_mb: int | None = None,
) -> list[tuple]:
    """The rows of ``sql`` on ``db_path`` through a read-only connection, values normalised; raises on any error,
    on a statement that is not a query, past ``deadline`` seconds, or beyond ``max_rows`` rows."""
    global _stop_at
    conn = _connection(db_path, heap_mb)
    _stop_at = time.monotonic() + deadline
    cur = conn.cursor()
    try:
        cur.execute(sql)
        if cur.description is None:
            raise QueryRejected("the statement returns no columns: not a query")
        rows: list[tuple] = []
        while True:
            batch = cur.fetchmany(min(1000, max_rows + 1 - len(rows)))
            if not batch:
                break
            rows.extend(batch)
            if len(rows) > max_rows:
                raise QueryRejected(f"more than {max_rows} rows")
    finally:
        cur.close()
    return [tuple(_normalize_value(v) for v in row) for row in rows]


def _execute_item(deadline: float, max_rows: int, heap_mb: int | None, item: tuple[str, str]) -> list[tuple]:
    return execute_query(item[0], item[1], deadline, max_rows, heap_mb)


# --------------------------------------------------------------------------------------------- reward


@dataclass(frozen=True)
class GoldResult:
    """The cached result of one gold query: its rows (None when it could not be executed) and whether ordered."""

    rows: list[tuple] | None
    ordered: bool
    error: str | None = None
    retry: bool = False  # a timeout or a dead worker may be the machine's fault: try again in the next batch


class SqlExecution(Reward):
    """``sql_execution``: execution match of the completion's query against column ``gold_sql`` on the SQLite
    database at column ``db_path`` (see the module docstring for the semantics and the sandbox).

    Settings: ``semantics`` (``spider`` | ``bird``), ``column_order`` (``any``: any column permutation;
    ``strict``: columns in the gold order; default ``any`` for spider, ``strict`` for bird), ``block`` (``sql`` |
    ``any`` | ``none`` | ``line``), ``deadline`` (seconds per query), ``max_rows``, ``partial_credit`` (w in [0, 1)),
    ``workers`` (processes; default one per core), ``memory_mb`` (per worker), ``max_sql_chars``.
    """

    name = "sql_execution"
    columns = ("db_path", "gold_sql")

    def __init__(
        self,
        semantics: str = "spider",
        column_order: str | None = None,
        block: str = "sql",
        deadline: float = DEFAULT_DEADLINE,
        max_rows: int = DEFAULT_MAX_ROWS,
        partial_credit: float = 0.0,
        workers: int | None = None,
        memory_mb: int | None = 2048,
        max_sql_chars: int = MAX_SQL_CHARS,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        if semantics not in SEMANTICS:
            raise ConfigError(f"sql_execution semantics must be one of {', '.join(SEMANTICS)}, got {semantics!r}")
        column_order = column_order or default_column_order(semantics)
        if column_order not in COLUMN_ORDERS:
            raise ConfigError(
                f"sql_execution column_order must be one of {', '.join(COLUMN_ORDERS)}, got {column_order!r}"
            )
        if block not in BLOCKS:
            raise ConfigError(f"sql_execution block must be one of {', '.join(BLOCKS)}, got {block!r}")
        if deadline <= 0:
            raise ConfigError(f"sql_execution deadline must be > 0 seconds, got {deadline}")
        if max_rows < 1:
            raise ConfigError(f"sql_execution max_rows must be >= 1, got {max_rows}")
        if not 0.0 <= partial_credit < 1.0:
            raise ConfigError(f"sql_execution partial_credit must be in [0, 1), got {partial_credit}")
        if workers is not None and workers < 1:
            raise ConfigError(f"sql_execution workers must be >= 1, got {workers}")
        self.semantics = semantics
        self.column_order = column_order
        self.block = block
        self.deadline = float(deadline)
        self.max_rows = int(max_rows)
        self.partial_credit = float(partial_credit)
        self.workers = workers
        self.memory_mb = memory_mb
        self.max_sql_chars = int(max_sql_chars)
        self.cache_size = int(cache_size)
        self.stats = {"scored": 0, "executed": 0, "gold_executed": 0, "errors": 0, "timeouts": 0}
        self._gold: dict[tuple[str, str], GoldResult] = {}
        self._cache: OrderedDict[tuple[str, str, str], float | None] = OrderedDict()
        self._pool: DeadlinePool | None = None

    def settings(self) -> dict[str, Any]:
        return {
            "semantics": self.semantics,
            "column_order": self.column_order,
            "block": self.block,
            "deadline": self.deadline,
            "max_rows": self.max_rows,
            "partial_credit": self.partial_credit,
        }

    @property
    def pool(self) -> DeadlinePool:
        """The executor pool (started on first use)."""
        if self._pool is None:
            heap_mb = self.memory_mb // 2 if self.memory_mb else None
            func = partial(_execute_item, self.deadline, self.max_rows, heap_mb)
            self._pool = DeadlinePool(
                func, workers=self.workers, deadline=self.deadline + GRACE_S, memory_mb=self.memory_mb
            )
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        if self._pool is not None:
            self._pool.close()

    def extract(self, completion: str) -> str | None:
        return extract_sql(completion, self.block, self.max_sql_chars)

    def gold_result(self, db_path: str, gold_sql: str) -> GoldResult:
        """The cached result of a gold query (executing it on first use)."""
        self._ensure_gold([(str(db_path), str(gold_sql))])
        return self._gold[(str(db_path), str(gold_sql))]

    def _ensure_gold(self, keys: Sequence[tuple[str, str]]) -> None:
        todo = [k for k in dict.fromkeys(keys) if k not in self._gold or self._gold[k].retry]
        if not todo:
            return
        for k, (status, value) in zip(todo, self.pool.run(todo)):
            if status == "ok":
                self._gold[k] = GoldResult(value, has_order_by(k[1]))
            else:
                self._gold[k] = GoldResult(None, False, f"{status}: {value}", retry=status in ("timeout", "died"))
                logger.warning("gold query cannot be executed (%s: %s) on %s: %s", status, value, k[0], k[1][:200])
        self.stats["gold_executed"] += len(todo)

    def _compare(self, pred: list[tuple], gold: GoldResult) -> float:
        assert gold.rows is not None
        if results_match(pred, gold.rows, gold.ordered, self.semantics, self.column_order):
            return 1.0
        if self.partial_credit:
            return self.partial_credit * result_overlap(pred, gold.rows, self.semantics, self.column_order)
        return 0.0

    def score(self, completions: Sequence[str], db_path: Sequence[str], gold_sql: Sequence[str]) -> list[float | None]:
        dbs = [str(d) for d in db_path]
        golds = [str(g) for g in gold_sql]
        keys = [(d, g, self.extract(c)) for c, d, g in zip(completions, dbs, golds)]
        self._ensure_gold(list(zip(dbs, golds)))
        known: dict[tuple[str, str, str | None], float | None] = {}
        todo: list[tuple[str, str, str]] = []
        for k in dict.fromkeys(keys):
            gold = self._gold[(k[0], k[1])]
            if gold.rows is None:
                known[k] = None
            elif k[2] is None:
                known[k] = 0.0
            elif k in self._cache:
                self._cache.move_to_end(k)  # type: ignore[arg-type]
                known[k] = self._cache[k]  # type: ignore[index]
            else:
                todo.append(k)  # type: ignore[arg-type]
        runs = list(dict.fromkeys((d, p) for d, _, p in todo))  # a query shared by several golds runs once
        outcomes = dict(zip(runs, self.pool.run(runs))) if runs else {}
        for d, g, p in todo:
            status, value = outcomes[(d, p)]
            if status != "ok":
                self.stats["timeouts" if status == "timeout" else "errors"] += 1
                logger.debug("predicted query %s: %s", status, value)
            known[(d, g, p)] = self._compare(value, self._gold[(d, g)]) if status == "ok" else 0.0
            self._cache[(d, g, p)] = known[(d, g, p)]
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        self.stats["scored"] += len(keys)
        self.stats["executed"] += len(runs)
        return [known[k] for k in keys]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_cache": OrderedDict(), "_gold": {}}


class BirdExecution(SqlExecution):
    """``bird_execution``: :class:`SqlExecution` with ``semantics="bird"`` by default (BIRD's set equality, columns
    in order), the reward of the ``bird`` task."""

    name = "bird_execution"

    def __init__(self, semantics: str = "bird", **settings: Any) -> None:
        super().__init__(semantics=semantics, **settings)


REWARDS.add("sql_execution", SqlExecution)
REWARDS.add("bird_execution", BirdExecution)
