"""Math and SQL tasks: data location, gold extraction per benchmark, prompts, the synthetic SQL task, errors.

Tests on the shared benchmark data skip when ``../shared/data`` is absent; everything else builds its own data.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.sql import has_order_by, results_match
from rlvr_div.tasks import check_task, data_source, get_task, get_task_spec
from rlvr_div.tasks.data import DATA_ENV, find_data
from rlvr_div.tasks.math import INSTRUCTION, SOURCES
from rlvr_div.tasks.synth_sql import build_synthetic_db, synthetic_questions

# name -> (rows, first gold, last gold) in ../shared/data/math/<name>/test.jsonl
SHARED_MATH = {
    "gsm8k": (1319, "18", "14"),
    "math500": (500, "\\left( 3, \\frac{\\pi}{2} \\right)", "106^\\circ"),
    "aime24": (30, "204", "902"),
    "amc23": (40, "27", "8"),
    "minerva_math": (272, "1.6", "10.1"),
    "svamp": (1000, "145", "91"),
    "asdiv": (2215, "9", "40"),
    "olympiadbench": (675, "2", "11"),
}


@pytest.fixture
def no_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the data root at an empty directory."""
    root = tmp_path / "empty_data"
    root.mkdir()
    monkeypatch.setenv(DATA_ENV, str(root))
    return root


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GSM_ROWS = [
    {"question": "Ann has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "A car costs 1,200 dollars; two cars?", "answer": "2 * 1200 = 2400\n#### 2,400"},
    {"question": "Broken row", "answer": ""},
]


# --------------------------------------------------------------------------------------------- math


@pytest.mark.parametrize("name", sorted(SHARED_MATH))
def test_shared_math_sets_load_with_their_gold_answers(name: str) -> None:
    if find_data(f"math/{name}") is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    rows, first, last = SHARED_MATH[name]
    ds = get_task(name, split="test")
    assert len(ds) == rows
    assert ds[0]["answer"] == first and ds[-1]["answer"] == last
    assert ds[0]["prompt"][-1]["role"] == "user" and ds[0]["prompt"][-1]["content"].endswith(INSTRUCTION)
    assert get_task_spec(name).reward == "math_accuracy"


def test_math_task_from_a_local_file_directory_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _write_jsonl(tmp_path / "mine.jsonl", GSM_ROWS)
    ds = get_task("gsm8k", split="train", path=str(f))  # a file is the data, whatever the split
    assert ds["answer"] == ["7", "2400"]  # the row without a gold answer is dropped
    assert ds["question"][0] == GSM_ROWS[0]["question"]
    with pytest.raises(ConfigError, match="bad options"):
        get_task("gsm8k", path=str(f), colour="red")

    d = tmp_path / "dir"
    _write_jsonl(d / "train.jsonl", GSM_ROWS[:1])
    assert get_task("gsm8k", split="train", path=str(d))["answer"] == ["7"]
    with pytest.raises(ConfigError, match="no 'test' split") as e:
        get_task("gsm8k", split="test", path=str(d))
    assert "\n" not in str(e.value)

    root = tmp_path / "data_root"
    _write_jsonl(root / "math" / "gsm8k" / "test.jsonl", GSM_ROWS[1:2])
    monkeypatch.setenv(DATA_ENV, str(root))
    assert get_task("gsm8k", split="test")["answer"] == ["2400"]


def test_math_prompt_forms(tmp_path: Path) -> None:
    f = str(_write_jsonl(tmp_path / "g.jsonl", GSM_ROWS[:1]))
    text = get_task("gsm8k", path=f, chat=False)[0]["prompt"]
    assert text == f"{GSM_ROWS[0]['question']}\n{INSTRUCTION}"
    chat = get_task("gsm8k", path=f, system="Be brief.")[0]["prompt"]
    assert [m["role"] for m in chat] == ["system", "user"] and chat[1]["content"] == text


def test_gold_extraction_per_benchmark() -> None:
    assert SOURCES["asdiv"].gold({"answer": "9 (apples)"}) == "9"
    assert SOURCES["asdiv"].gold({"answer": "3:30 p.m."}) == "3:30 p.m."
    assert SOURCES["amc23"].gold({"answer": 27.0}) == "27"
    assert SOURCES["svamp"].gold({"Answer": 2.5}) == "2.5"
    assert SOURCES["svamp"].question({"Body": "Tom has 3.", "Question": "How many?"}) == "Tom has 3. How many?"
    assert SOURCES["minerva_math"].gold({"solution": "so $\\boxed{1}$ no, \\boxed{\\frac{1}{2}}"}) == "\\frac{1}{2}"
    assert SOURCES["olympiadbench"].gold({"final_answer": ["$69$,$84$"]}) == "69,84"
    assert SOURCES["olympiadbench"].gold({"final_answer": ["$x=1$", "$y=2$"]}) == "x=1, y=2"


def test_missing_math_data_says_where_it_looked_and_what_to_pass(no_shared_data: Path) -> None:
    with pytest.raises(ConfigError) as e:
        check_task("math500")
    msg = str(e.value)
    assert "\n" not in msg and str(no_shared_data / "math" / "math500") in msg
    assert "path=" in msg and DATA_ENV in msg
    with pytest.raises(ConfigError, match="does not exist"):
        check_task("gsm8k", path="./nowhere/gsm8k.jsonl")


def test_hub_ids_pass_the_check_and_fail_clearly_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    check_task("gsm8k", path="openai/gsm8k")  # cannot be checked offline: accepted
    with pytest.raises(ConfigError, match="cannot load hub dataset 'rlvr-div-tests/no-such-set'"):
        get_task("gsm8k", split="test", path="rlvr-div-tests/no-such-set")


def test_hub_id_and_split_reach_the_hub_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr_div.tasks import math as math_tasks

    asked = []

    def load_hub(hub_id: str, split: str, config: str | None = None) -> list[dict]:
        asked.append((hub_id, split, config))
        return GSM_ROWS[:2] if hub_id == "openai/gsm8k" else [{"problem": "1+1?", "solution": "It is $\\boxed{2}$."}]

    monkeypatch.setattr(math_tasks, "load_hub", load_hub)
    assert get_task("gsm8k", split="train", path="openai/gsm8k")["answer"] == ["7", "2400"]
    get_task("gsm8k", split="train", path="openai/gsm8k", config="socratic")
    assert get_task("math", split="train", path="DigitalLearningGmbH/MATH-lighteval")["answer"] == ["2"]
    assert asked == [
        ("openai/gsm8k", "train", "main"),  # the config GSM8K needs, by default
        ("openai/gsm8k", "train", "socratic"),
        ("DigitalLearningGmbH/MATH-lighteval", "train", None),
    ]
    assert data_source("gsm8k", "train", path="openai/gsm8k") == "hub:openai/gsm8k:main:train"
    assert data_source("math", "train", path="DigitalLearningGmbH/MATH-lighteval").endswith(":train")


def test_training_on_the_shared_math_data_points_to_the_hub_train_split() -> None:
    if find_data("math/gsm8k") is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    with pytest.raises(ConfigError, match="holds evaluation splits only, not 'train'; pass path=openai/gsm8k") as e:
        get_task("gsm8k", split="train")
    assert "\n" not in str(e.value)
    assert data_source("gsm8k") == f"file:{(find_data('math/gsm8k') / 'test.jsonl').resolve()}"


# --------------------------------------------------------------------------------------------- spider


def _spider_dir(root: Path, db_file: Path, questions: list[dict] | None = None) -> Path:
    """A minimal dev-only Spider-format directory around the synthetic database (no tables.json: it is not read)."""
    (root / "database" / "company").mkdir(parents=True)
    (root / "database" / "company" / "company.sqlite").write_bytes(db_file.read_bytes())
    questions = questions or [
        {"db_id": "company", "question": "How many employees?", "query": "SELECT count(*) FROM employees"},
        {"db_id": "gone", "question": "Lost?", "query": "SELECT 1"},
    ]
    (root / "dev.json").write_text(json.dumps(questions))
    return root


def test_spider_format_directory(tmp_path: Path) -> None:
    db = build_synthetic_db(tmp_path / "src.sqlite", seed=3)
    root = _spider_dir(tmp_path / "spider", db)
    check_task("spider", path=str(root))
    ds = get_task("spider", path=str(root))  # a dev-only directory: the default split is dev
    assert len(ds) == 1  # the question on the missing database is dropped
    row = ds[0]
    assert row["gold_sql"] == "SELECT count(*) FROM employees" and row["db_id"] == "company"
    assert Path(row["db_path"]).is_absolute() and Path(row["db_path"]).is_file()
    user = row["prompt"][-1]["content"]
    assert "CREATE TABLE employees" in user and "How many employees?" in user and "```sql" in user
    assert get_task("spider", split="dev", path=str(root))["gold_sql"] == ds["gold_sql"]
    assert get_task("spider", split="test", path=str(root))["gold_sql"] == ds["gold_sql"]  # dev serves as test
    with pytest.raises(ConfigError, match="no train_spider.json or train.json for split 'train'; it has split 'dev'"):
        get_task("spider", split="train", path=str(root))
    (root / "train_spider.json").write_text(json.dumps([{"db_id": "company", "question": "Q", "query": "SELECT 2"}]))
    assert get_task("spider", split="train", path=str(root))["gold_sql"] == ["SELECT 2"]
    with pytest.raises(ConfigError, match="not a directory"):
        check_task("spider", path=str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="lacks database/"):
        check_task("spider", path=str(tmp_path))


def test_spider_drops_failing_gold_queries_at_build_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = build_synthetic_db(tmp_path / "src.sqlite", seed=3)
    good = [f"SELECT name FROM employees WHERE salary > {30_000 + 100 * i}" for i in range(990)]
    bad = ["SELECT nme FROM employees", "DELETE FROM employees", "SELECT * FROM employees AS a, employees AS b"]
    bad += ["PRAGMA table_info(employees)", "SELECT 1; SELECT 2"]  # not a query / two statements
    queries = good + bad * 2  # 1000 questions, 10 of them with a failing gold (5 distinct)
    questions = [{"db_id": "company", "question": f"Q{i}", "query": q} for i, q in enumerate(queries)]
    root = _spider_dir(tmp_path / "spider", db, questions)
    with caplog.at_level(logging.WARNING, logger="rlvr_div.tasks.sql"):
        t0 = time.perf_counter()
        ds = get_task("spider", path=str(root))
        elapsed = time.perf_counter() - t0
    lines = [r.getMessage() for r in caplog.records if "gold query fails" in r.getMessage()]
    assert len(lines) == 1 and "dropped 10 of 1000 questions" in lines[0] and "check_gold=False" in lines[0]
    assert ds["gold_sql"] == good
    assert elapsed < 1.0, elapsed  # 1,000 golds built and checked (14,400-row cross join included)
    assert len(get_task("spider", path=str(root), check_gold=False)) == 1000
    with pytest.raises(ConfigError, match="a gold query that runs"):
        get_task("spider", path=str(_spider_dir(tmp_path / "bad", db, questions[-5:])))


def test_missing_spider_data_says_where_it_looked(no_shared_data: Path) -> None:
    with pytest.raises(ConfigError) as e:
        check_task("spider")
    assert str(no_shared_data / "sql" / "spider_dev") in str(e.value) and "\n" not in str(e.value)


def test_shared_spider_dev_loads() -> None:
    if find_data("sql/spider_dev") is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    ds = get_task("spider", split="dev")
    assert len(ds) == 972 and set(ds.column_names) >= {"prompt", "db_path", "gold_sql", "db_id", "question"}
    assert ds[0]["gold_sql"] == "SELECT count(*) FROM singer" and "CREATE TABLE" in ds[0]["prompt"][-1]["content"]


# --------------------------------------------------------------------------------------------- synthetic SQL


def test_synthetic_sql_is_deterministic_and_needs_no_data(tmp_path: Path, no_shared_data: Path) -> None:
    a = get_task("synth_sql", split="train", seed=1, db_dir=str(tmp_path / "a"))
    b = get_task("synth_sql", split="train", seed=1, db_dir=str(tmp_path / "b"))
    test = get_task("synth_sql", split="test", seed=1, db_dir=str(tmp_path / "a"))
    other = get_task("synth_sql", split="train", seed=2, db_dir=str(tmp_path / "a"))
    strip = lambda ds: [{k: v for k, v in r.items() if k != "db_path"} for r in ds]  # noqa: E731
    assert strip(a) == strip(b)
    assert strip(a) != strip(other)
    assert not set(a["question"]) & set(test["question"])
    assert len(a) >= 100 and len(test) == 60
    assert all(len(set(v)) >= 2 and v[0] == g for v, g in zip(a["valid_sql"], a["gold_sql"]))
    dump = lambda p: list(sqlite3.connect(p).iterdump())  # noqa: E731
    assert dump(a[0]["db_path"]) == dump(b[0]["db_path"])
    assert get_task_spec("synth_sql").reward == "sql_execution"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_valid_queries_agree(tmp_path: Path, seed: int) -> None:
    db = build_synthetic_db(tmp_path / "s.sqlite", seed=seed)
    conn = sqlite3.connect(db)
    questions = synthetic_questions(db)
    nonempty = 0
    for question, queries in questions:
        results = [conn.execute(q).fetchall() for q in queries]
        for q, res in zip(queries[1:], results[1:]):
            assert results_match(res, results[0], has_order_by(queries[0])), (question, q)
        nonempty += results[0] not in ([], [(None,)], [(0,)])
    assert nonempty >= 0.9 * len(questions)  # most questions have a non-trivial answer
