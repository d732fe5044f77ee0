"""The SQL tasks' ``format: fewshot`` (:mod:`rlvr_div.tasks.sql`): the prompt's shape, its worked examples, the
options it refuses, the defaults it leaves alone, and ``sql_execution`` scoring its bare one-line queries."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.rewards.sql import extract_sql
from rlvr_div.tasks import check_task, get_task, task_reward_settings, task_stop_text
from rlvr_div.tasks.data import find_data
from rlvr_div.tasks.sql import (
    FEWSHOT_EXAMPLES,
    FEWSHOT_SCHEMA,
    compact_schema,
    fewshot_sql_prompt,
    schema_text,
    sql_prompt,
)
from rlvr_div.tasks.synth_sql import build_synthetic_db, synthetic_db_path

SYNTH_SCHEMA = (
    "departments(dept_id, name, city, budget)\n"
    "employees(emp_id, name, dept_id, salary, hire_year)\n"
    "projects(project_id, title, dept_id, budget, status)\n"
    "assignments(emp_id, project_id, hours)"
)


@pytest.fixture(scope="module")
def company(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_db(tmp_path_factory.mktemp("company") / "company.sqlite", seed=3)


def test_compact_schema_is_one_line_per_table(company: Path, tmp_path: Path) -> None:
    assert compact_schema(str(company)) == SYNTH_SCHEMA
    odd = tmp_path / "odd.sqlite"
    conn = sqlite3.connect(odd)
    conn.execute('CREATE TABLE "Home Town" (id INTEGER, "Zip Code" TEXT, "say ""hi""" TEXT)')
    conn.close()
    assert compact_schema(str(odd)) == '"Home Town"(id, "Zip Code", "say ""hi""")'


def test_fewshot_prompt_shape() -> None:
    prompt = fewshot_sql_prompt("t(a, b)", "How many rows are there?")
    blocks = prompt.split("\n\n")
    assert len(blocks) == 3 and prompt.endswith("Schema:\nt(a, b)\nQ: How many rows are there?\nSQL:")
    for block, (question, query) in zip(blocks, FEWSHOT_EXAMPLES):
        assert block == f"Schema:\n{FEWSHOT_SCHEMA}\nQ: {question}\nSQL: {query}"
        assert "\n" not in query and not query.endswith(";")  # a query is the rest of its line
    assert "CREATE TABLE" not in prompt and "```" not in prompt


def test_the_worked_examples_run_on_their_schema() -> None:
    conn = sqlite3.connect(":memory:")
    for line in FEWSHOT_SCHEMA.splitlines():
        conn.execute(f"CREATE TABLE {line}")
    conn.executemany("INSERT INTO author VALUES (?, ?, ?)", [(1, "Hugo", "France"), (2, "Woolf", "UK")])
    conn.executemany("INSERT INTO book VALUES (?, ?, ?, ?)", [(1, "Old", 1, 1862), (2, "New", 2, 2001)])
    (_, first), (_, second) = FEWSHOT_EXAMPLES
    assert conn.execute(first).fetchall() == [("New",)]
    assert conn.execute(second).fetchall() == [("Old",)]


def test_the_example_tables_are_in_no_task_database(company: Path) -> None:
    example_tables = {line.split("(")[0] for line in FEWSHOT_SCHEMA.splitlines()}
    schemas = [compact_schema(str(company))]
    root = find_data("sql/spider_dev")
    if root is not None:
        schemas += [compact_schema(str(p)) for p in sorted((root / "database").glob("*/*.sqlite"))]
    for schema in schemas:
        tables = {line.split("(")[0].strip('"').lower() for line in schema.splitlines()}
        assert not tables & example_tables, schema


def test_synth_sql_fewshot_rows(tmp_path: Path) -> None:
    ds = get_task("synth_sql", split="test", db_dir=str(tmp_path), format="fewshot")
    assert len(ds) == 60
    for row in ds:
        prompt = row["prompt"]
        assert isinstance(prompt, str)
        assert prompt.endswith(f"Schema:\n{SYNTH_SCHEMA}\nQ: {row['question']}\nSQL:")
        assert prompt.startswith(fewshot_sql_prompt("", "")[: prompt.index(f"Schema:\n{SYNTH_SCHEMA}")])
    default = get_task("synth_sql", split="test", db_dir=str(tmp_path))
    assert ds["gold_sql"] == default["gold_sql"] and ds["question"] == default["question"]


def test_spider_fewshot_rows(tmp_path: Path, company: Path) -> None:
    (tmp_path / "database" / "company").mkdir(parents=True)
    (tmp_path / "database" / "company" / "company.sqlite").write_bytes(company.read_bytes())
    questions = [{"db_id": "company", "question": "How many employees?", "query": "SELECT count(*) FROM employees"}]
    (tmp_path / "dev.json").write_text(json.dumps(questions))
    row = get_task("spider", path=str(tmp_path), format="fewshot")[0]
    assert row["prompt"].endswith(f"Schema:\n{SYNTH_SCHEMA}\nQ: How many employees?\nSQL:")
    assert row["hardness"] == "easy"


def test_defaults_are_unchanged(tmp_path: Path) -> None:
    ds = get_task("synth_sql", split="test", db_dir=str(tmp_path))
    db = synthetic_db_path(0, tmp_path)
    assert ds[0]["prompt"] == sql_prompt(schema_text(str(db)), ds[0]["question"])  # chat messages, CREATE TABLE
    plain = get_task("synth_sql", split="test", db_dir=str(tmp_path), chat=False, system=None)
    assert plain[0]["prompt"] == sql_prompt(schema_text(str(db)), ds[0]["question"], chat=False)
    for task in ("spider", "synth_sql"):
        assert task_reward_settings(task, "sql_execution", None) == {}
        assert task_stop_text(task) is None
        assert task_stop_text(task, format="instruct") is None
        assert task_reward_settings(task, "sql_execution", None, format="fewshot") == {"block": "line"}
        assert task_reward_settings(task, "sql_execution", {"block": "sql"}, format="fewshot") == {"block": "sql"}
        assert task_stop_text(task, format="fewshot") == "\n"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "zeroshot"}, "format must be one of instruct, fewshot, got 'zeroshot'"),
        ({"format": "fewshot", "chat": True}, "format fewshot is a plain-text prompt"),
        ({"format": "fewshot", "system": "You are terse."}, "format fewshot is a plain-text prompt"),
    ],
)
@pytest.mark.parametrize("task", ["spider", "synth_sql"])
def test_bad_format_options_are_one_line(task: str, options: dict, message: str, tmp_path: Path) -> None:
    if task == "spider":
        (tmp_path / "database").mkdir()
        options = {**options, "path": str(tmp_path)}
    with pytest.raises(ConfigError) as e:
        check_task(task, **options)
    assert message in str(e.value) and "\n" not in str(e.value)
    check_task(task, **{**options, "format": "fewshot", "chat": False, "system": None})  # plain text is fine


def test_extract_line() -> None:
    assert extract_sql(" SELECT a FROM t\n", block="line") == "SELECT a FROM t"
    assert extract_sql(" SELECT a FROM t;\nQ: next", block="line") == "SELECT a FROM t"
    assert extract_sql(" SELECT a FROM t", block="line") == "SELECT a FROM t"  # cut at the token cap: no newline
    assert extract_sql("\nSELECT a FROM t", block="line") is None  # the line is empty
    assert extract_sql(" SELECT a FROM t\n", block="sql") is None  # the default still reads ```sql blocks only


def test_the_reward_scores_bare_queries(company: Path) -> None:
    settings = task_reward_settings("synth_sql", "sql_execution", None, format="fewshot")
    reward = get_reward("sql_execution", workers=1, deadline=2.0, **settings)
    gold = "SELECT count(*) FROM employees WHERE salary > 100000"
    completions = [
        " SELECT count(*) FROM employees WHERE salary > 100000\n",  # right
        " SELECT COUNT(emp_id) FROM employees WHERE 100000 < salary;\n",  # right, another way, semicolon
        " SELECT count(*) FROM employees WHERE salary > 100000\nSchema:\nt(a)",  # right, then the next problem
        " SELECT count(*) FROM employees WHERE salary > 50000\n",  # wrong result
        " SELECT count(*) FROM employees\nWHERE salary > 100000\n",  # the second line is not read
        " SELECT nothing FROM nowhere\n",  # error
        "\n",  # empty
        "```sql\nSELECT count(*) FROM employees WHERE salary > 100000\n```",  # a block is not this format
    ]
    try:
        scores = reward.score(
            completions, db_path=[str(company)] * len(completions), gold_sql=[gold] * len(completions)
        )
    finally:
        reward.close()
    assert scores == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert re.fullmatch(r"SELECT count\(\*\) FROM employees", reward.extract(completions[4]) or "")
