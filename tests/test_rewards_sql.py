"""``sql_execution``: extraction, result semantics, caching, the read-only sandbox against hostile SQL, Spider golds.

The sandbox tests run on a temporary copy of the synthetic database; Spider tests read ``../shared/data`` (or
``$RLVR_DIV_DATA``) and skip when it is absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import time
from pathlib import Path

import pytest
from hostile_sql import HOSTILE_SQL

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.rewards.sql import SqlExecution, extract_sql, has_order_by, result_overlap, results_match
from rlvr_div.tasks.data import find_data
from rlvr_div.tasks.sql import build_synthetic_db

DEADLINE = 1.0
GOLD = "SELECT name FROM employees WHERE salary > 100000"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_synthetic_db(tmp_path_factory.mktemp("sqldb") / "company.sqlite", seed=0))


@pytest.fixture(scope="module")
def reward(db: str) -> SqlExecution:
    r = get_reward("sql_execution", deadline=DEADLINE, workers=2)
    assert r.score([_fenced(GOLD)], db_path=[db], gold_sql=[GOLD]) == [1.0]  # start the workers
    yield r
    r.close()


def _fenced(sql: str) -> str:
    return f"The query:\n```sql\n{sql}\n```\nDone."


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------- extraction


def test_extract_sql_blocks() -> None:
    text = "```sql\nSELECT 1\n```\nbetter:\n```SQL\nSELECT 2;\n```"
    assert extract_sql(text) == "SELECT 2"
    assert extract_sql("```sql\nSELECT 3 FROM t") == "SELECT 3 FROM t"  # unclosed final block
    assert extract_sql("SELECT 4") is None
    assert extract_sql("```python\nx = 1\n```") is None
    assert extract_sql("```\nSELECT 5\n```", block="any") == "SELECT 5"
    assert extract_sql("```sql\nSELECT 6\n```\n```\nSELECT 7", block="any") == "SELECT 7"
    assert extract_sql("  SELECT 8 ;; ", block="none") == "SELECT 8"
    assert extract_sql("```sql\n   \n```") is None
    assert extract_sql("```sql\nSELECT '" + "x" * 30_000 + "'\n```") is None  # longer than max_sql_chars


def test_result_semantics() -> None:
    a, b = [(1,), (2,), (2,)], [(2,), (1,), (2,)]
    assert results_match(a, b, ordered=False) and not results_match(a, b, ordered=True)
    assert not results_match([(1,), (2,)], a, ordered=False)  # multiset: duplicates count
    assert results_match([(1,), (2,)], a, ordered=False, semantics="bird")  # set
    assert results_match([(3,)], [(3.0,)], ordered=True)
    assert result_overlap([(1,), (2,)], [(1,), (3,), (4,), (5,)]) == 0.25
    assert result_overlap([], []) == 1.0
    assert has_order_by("select a from t ORDER  BY a") and not has_order_by("SELECT border_by FROM t")


# --------------------------------------------------------------------------------------------- scoring


def test_equivalent_queries_score_one(reward: SqlExecution, db: str) -> None:
    from rlvr_div.tasks.sql import synthetic_questions

    questions = synthetic_questions(db)
    completions, dbs, golds = [], [], []
    for _, queries in questions:
        for q in queries:
            completions.append(_fenced(q))
            dbs.append(db)
            golds.append(queries[0])
    assert reward.score(completions, db_path=dbs, gold_sql=golds) == [1.0] * len(completions)


def test_wrong_results_and_order(reward: SqlExecution, db: str) -> None:
    gold_ordered = "SELECT name FROM employees ORDER BY salary DESC LIMIT 5"
    cases = [
        (GOLD.replace("100000", "90000"), GOLD, 0.0),  # more rows
        ("SELECT name, salary FROM employees WHERE salary > 100000", GOLD, 0.0),  # extra column
        ("SELECT name FROM employees WHERE salary > 100000 ORDER BY name", GOLD, 1.0),  # order free without ORDER BY
        ("SELECT name FROM employees ORDER BY salary ASC LIMIT 5", gold_ordered, 0.0),
        ("SELECT name FROM (SELECT name, salary FROM employees ORDER BY salary DESC LIMIT 5) ORDER BY salary",
         gold_ordered, 0.0),  # right rows, wrong order
        ("SELECT nme FROM employees", GOLD, 0.0),  # error
        ("no query here", GOLD, 0.0),
    ]  # fmt: skip
    scores = reward.score(
        [c if c == "no query here" else _fenced(c) for c, _, _ in cases], db_path=[db] * len(cases),
        gold_sql=[g for _, g, _ in cases],
    )  # fmt: skip
    assert scores == [e for _, _, e in cases]


def test_bird_semantics_and_partial_credit(db: str) -> None:
    gold = "SELECT name FROM employees ORDER BY salary DESC LIMIT 4"
    misordered = "SELECT name FROM (SELECT name, salary FROM employees ORDER BY salary DESC LIMIT 4) ORDER BY salary"
    half = "SELECT name FROM employees ORDER BY salary DESC LIMIT 2"
    bird = SqlExecution(semantics="bird", workers=1)
    partial = SqlExecution(partial_credit=0.5, workers=1)
    try:
        assert bird.score([_fenced(misordered), _fenced(half)], db_path=[db] * 2, gold_sql=[gold] * 2) == [1.0, 0.0]
        assert partial.score([_fenced(misordered), _fenced(half)], db_path=[db] * 2, gold_sql=[gold] * 2) == [
            0.5,  # same rows, wrong order: w * 1
            0.25,  # half the rows: w * 2/4
        ]
    finally:
        bird.close()
        partial.close()


def test_gold_failures_give_none(reward: SqlExecution, db: str, tmp_path: Path) -> None:
    scores = reward.score(
        [_fenced("SELECT 1")] * 3,
        db_path=[db, db, str(tmp_path / "missing.sqlite")],
        gold_sql=["SELECT nothing FROM nowhere", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x FROM c) "
                  "SELECT x FROM c", "SELECT 1"],
    )  # fmt: skip
    assert scores == [None, None, None]
    assert not (tmp_path / "missing.sqlite").exists()  # read-only opening never creates a database


def test_gold_results_and_duplicates_are_cached(reward: SqlExecution, db: str) -> None:
    before = dict(reward.stats)
    preds = [f"SELECT name FROM employees WHERE salary > {100001 + i % 5}" for i in range(50)]
    scores = reward(prompts=None, completions=[_fenced(p) for p in preds], db_path=[db] * 50, gold_sql=[GOLD] * 50)
    assert scores == [1.0] * 50  # salaries are multiples of 50
    assert reward.stats["gold_executed"] == before["gold_executed"]  # GOLD ran when the fixture started
    assert reward.stats["executed"] - before["executed"] == 5


def test_settings_are_validated(db: str) -> None:
    with pytest.raises(ConfigError, match="semantics"):
        get_reward("sql_execution", semantics="exact")
    with pytest.raises(ConfigError, match="partial_credit"):
        get_reward("sql_execution", partial_credit=1.0)
    with pytest.raises(ConfigError, match="block"):
        get_reward("sql_execution", block="python")
    r = get_reward("sql_execution", block="none", workers=1)
    clone = pickle.loads(pickle.dumps(r))
    assert clone.block == "none" and clone._pool is None
    try:
        assert clone.score([GOLD], db_path=[db], gold_sql=[GOLD]) == [1.0]
    finally:
        clone.close()


# --------------------------------------------------------------------------------------------- hostile SQL


def test_hostile_corpus_is_large_enough() -> None:
    assert len(HOSTILE_SQL) >= 30
    assert len({name for name, _ in HOSTILE_SQL}) == len(HOSTILE_SQL)


def _listing(directory: str) -> set[str]:
    return set(os.listdir(directory))


@pytest.mark.parametrize("index", range(len(HOSTILE_SQL)), ids=[name for name, _ in HOSTILE_SQL])
def test_hostile_sql_scores_zero_and_changes_nothing(reward: SqlExecution, db: str, index: int) -> None:
    name, template = HOSTILE_SQL[index]
    directory, cwd = os.path.dirname(db), os.getcwd()
    worker_cwds = {os.readlink(f"/proc/{pid}/cwd") for pid in reward.pool.pids() if os.path.exists(f"/proc/{pid}")}
    watched = {d: _listing(d) for d in {directory, cwd, *worker_cwds}}
    digest = _sha(db)
    sql = template.replace("{dir}", directory).replace("{cwd}", cwd)

    t0 = time.monotonic()
    assert reward.score([_fenced(sql)], db_path=[db], gold_sql=[GOLD]) == [0.0], name
    assert time.monotonic() - t0 < DEADLINE + 1.0, name

    assert _sha(db) == digest
    assert _listing(directory) == watched[directory], name  # nothing next to the database
    for d, names in watched.items():  # the working directories are shared: look for what this corpus would create
        new = {n for n in _listing(d) - names if "hostile" in n or n.startswith(Path(db).name)}
        assert not new, f"{name} created {new} in {d}"
    # the pool then scores a normal (never cached) query correctly
    normal = f"SELECT name FROM employees WHERE salary > {100000 + index + 1}"
    assert reward.score([_fenced(normal)], db_path=[db], gold_sql=[GOLD]) == [1.0]


def test_database_directory_is_untouched_after_the_corpus(reward: SqlExecution, db: str) -> None:
    assert sorted(os.listdir(os.path.dirname(db))) == [Path(db).name]


# --------------------------------------------------------------------------------------------- Spider


def _spider() -> tuple[Path, list[dict]]:
    root = find_data("sql/spider_dev")
    if root is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    return root, json.loads((root / "dev.json").read_text())


def _spider_self_check(r: SqlExecution, root: Path, rows: list[dict]) -> list[tuple[str, str, float | None]]:
    dbs = [str(root / "database" / x["db_id"] / f"{x['db_id']}.sqlite") for x in rows]
    golds = [x["query"] for x in rows]
    scores = r.score([_fenced(g) for g in golds], db_path=dbs, gold_sql=golds)
    return [(x["db_id"], x["query"], s) for x, s in zip(rows, scores) if s != 1.0]


def test_spider_gold_queries_match_themselves_on_a_sample(reward: SqlExecution) -> None:
    root, rows = _spider()
    assert _spider_self_check(reward, root, random.Random(0).sample(rows, 50)) == []


@pytest.mark.slow
def test_spider_dev_gold_queries_match_themselves() -> None:
    """Done-when: >= 99% of Spider dev gold queries score 1 against themselves (the exceptions are printed)."""
    root, rows = _spider()
    r = SqlExecution(workers=2)
    try:
        bad = _spider_self_check(r, root, rows)
    finally:
        r.close()
    print(f"Spider dev: {len(rows) - len(bad)}/{len(rows)} score 1; exceptions: {bad}")
    assert len(bad) <= 0.01 * len(rows), bad
