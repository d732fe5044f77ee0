"""Spider hardness (:mod:`rlvr_div.tasks.sql_hardness`) and the ``spider`` task's ``hardness`` option.

Hand-written queries pin each count and level, the official counting's quirks included; on the shared Spider dev
data (skipped when ``../shared/data`` is absent) the levels of the original 1,034 questions are the published
distribution, and those of the 972 in ``dev.json`` are pinned.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.tasks import check_task, get_task
from rlvr_div.tasks.data import find_data
from rlvr_div.tasks.sql_hardness import LEVELS, hardness_level, spider_counts, spider_hardness
from rlvr_div.tasks.synth_sql import build_synthetic_db

# (query, (component1, component2, others), level)
QUERIES = [
    ("SELECT count(*) FROM singer", (0, 0, 0), "easy"),
    ("SELECT name FROM singer WHERE age > 20", (1, 0, 0), "easy"),
    ("SELECT DISTINCT country FROM singer ORDER BY country", (1, 0, 0), "easy"),
    ("SELECT 2", (0, 0, 0), "easy"),  # no FROM
    ("SELECT name , age FROM singer ORDER BY age DESC", (1, 0, 1), "medium"),
    ("SELECT name FROM singer WHERE age > 20 AND country = 'France'", (1, 0, 1), "medium"),
    ("SELECT name FROM singer WHERE name LIKE '%a%'", (2, 0, 0), "medium"),  # WHERE + LIKE
    ("SELECT name FROM singer WHERE age BETWEEN 20 AND 30", (1, 0, 0), "easy"),  # BETWEEN's AND joins no condition
    (
        "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id WHERE T1.year = 2014",
        (2, 0, 0),
        "medium",
    ),
    ("SELECT country , count(*) FROM singer GROUP BY country", (1, 0, 1), "medium"),
    ("SELECT max(age) , min(age) , avg(age) FROM singer", (0, 0, 2), "medium"),
    ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", (1, 1, 0), "hard"),
    ("SELECT name FROM singer WHERE age > 20 GROUP BY country ORDER BY name LIMIT 3", (4, 0, 0), "extra"),
    ("SELECT name FROM singer WHERE age > 20 GROUP BY country ORDER BY name", (3, 0, 0), "hard"),
    ("SELECT a , b , count(*) FROM t WHERE x = 1 AND y = 2 GROUP BY a , b", (2, 0, 3), "hard"),
    ("SELECT name FROM a WHERE x = 1 INTERSECT SELECT name FROM a WHERE y = 2", (1, 1, 0), "hard"),
    ("SELECT name FROM a JOIN b ON a.id = b.id WHERE x = 1 EXCEPT SELECT name FROM a", (2, 1, 0), "extra"),
    ("SELECT name FROM a WHERE x IN (SELECT x FROM b) AND y IN (SELECT y FROM c)", (1, 2, 1), "extra"),
    ("SELECT name FROM a WHERE x = 1 OR y = 2 OR z = 3", (3, 0, 1), "hard"),
    ("SELECT t.a FROM (SELECT a FROM b WHERE c = 1) AS t", (0, 0, 0), "easy"),  # a FROM subquery: one table
    ("SELECT a FROM t1 , t2", (1, 0, 0), "easy"),  # a comma join is a join
    # the official quirks: a negated WHERE condition and each connective between HAVING conditions count as one
    # aggregation; ORDER BY count(*) is one
    ("SELECT count(*) FROM t WHERE id NOT IN (SELECT id FROM u)", (1, 1, 1), "extra"),
    ("SELECT count(*) FROM t GROUP BY a HAVING count(*) > 1 AND sum(b) > 2", (1, 0, 1), "medium"),
    ("SELECT count(*) FROM t GROUP BY a HAVING count(*) > 1", (1, 0, 0), "easy"),
    ("SELECT a FROM t GROUP BY a ORDER BY count(*) DESC LIMIT 1", (3, 0, 0), "hard"),
    ("SELECT count(*) FROM t GROUP BY a ORDER BY count(*) DESC", (2, 0, 1), "medium"),
    # a column on the right of a condition reads up to the next AND: the OR after it is not counted
    ("SELECT a FROM t1 JOIN t2 ON t1.id = t2.id WHERE t1.x = t2.y OR t1.z = 5", (2, 0, 0), "medium"),
    ("SELECT a FROM t1 JOIN t2 ON t1.id = t2.id WHERE t1.z = 5 OR t1.x = t2.y", (3, 0, 1), "hard"),
]


@pytest.mark.parametrize(("sql", "counts", "level"), QUERIES, ids=[q[0][:60] for q in QUERIES])
def test_counts_and_level_of_hand_written_queries(sql: str, counts: tuple[int, int, int], level: str) -> None:
    assert spider_counts(sql) == counts
    assert spider_hardness(sql) == level
    assert spider_hardness(sql.lower().replace(" , ", ", ") + " ;") == level  # case, spacing, a final semicolon


def test_every_level_is_reached_and_the_rules_are_spiders() -> None:
    assert {level for _, _, level in QUERIES} == set(LEVELS)
    assert hardness_level(1, 0, 0) == "easy" and hardness_level(2, 0, 0) == "medium"
    assert (
        hardness_level(1, 0, 2) == "medium" and hardness_level(2, 0, 2) == "extra" and hardness_level(2, 0, 3) == "hard"
    )
    assert (
        hardness_level(0, 1, 0) == "hard" and hardness_level(0, 2, 0) == "extra" and hardness_level(0, 1, 1) == "extra"
    )
    assert (
        hardness_level(3, 0, 2) == "hard" and hardness_level(3, 0, 3) == "extra" and hardness_level(4, 0, 0) == "extra"
    )


@pytest.mark.parametrize("text", ["", "DELETE FROM t", "PRAGMA table_info(t)", "WITH x AS (SELECT 1) SELECT * FROM x"])
def test_text_that_is_not_a_select_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        spider_hardness(text)


def _shared(name: str) -> list[dict]:
    root = find_data("sql/spider_dev")
    if root is None or not (root / name).is_file():
        pytest.skip("shared benchmark data (../shared/data/sql/spider_dev) is absent")
    return json.loads((root / name).read_text(encoding="utf-8"))


def test_spider_dev_1034_has_the_official_distribution() -> None:
    levels = Counter(spider_hardness(q["query"]) for q in _shared("dev_original_1034.json"))
    assert levels == {"easy": 248, "medium": 446, "hard": 174, "extra": 166}  # Spider's published dev counts


def test_spider_dev_972_levels_and_the_task_column() -> None:
    questions = _shared("dev.json")
    assert Counter(spider_hardness(q["query"]) for q in questions) == {
        "easy": 232,
        "medium": 416,
        "hard": 160,
        "extra": 164,
    }
    ds = get_task("spider", split="dev", hardness=["easy", "medium"])
    assert len(ds) == 648 and Counter(ds["hardness"]) == {"easy": 232, "medium": 416}
    assert [spider_hardness(g) for g in ds["gold_sql"]] == ds["hardness"]


# --------------------------------------------------------------------------------------------- the task option


def _spider_dir(root: Path, db_file: Path) -> Path:
    (root / "database" / "company").mkdir(parents=True)
    (root / "database" / "company" / "company.sqlite").write_bytes(db_file.read_bytes())
    queries = [
        "SELECT count(*) FROM employees",  # easy
        "SELECT name , salary FROM employees ORDER BY salary DESC",  # medium
        "SELECT name FROM employees WHERE salary > (SELECT avg(salary) FROM employees)",  # hard
        "SELECT name FROM employees WHERE salary > 1 GROUP BY dept_id ORDER BY name LIMIT 3",  # extra
        "SELECT name FROM employees WHERE hire_year > 2010",  # easy
    ]
    questions = [{"db_id": "company", "question": f"Q{i}", "query": q} for i, q in enumerate(queries)]
    (root / "dev.json").write_text(json.dumps(questions))
    return root


@pytest.fixture(scope="module")
def spider_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("spider")
    return _spider_dir(tmp / "spider", build_synthetic_db(tmp / "src.sqlite", seed=3))


def test_rows_record_their_hardness_and_the_option_keeps_levels(spider_root: Path) -> None:
    path = str(spider_root)
    assert get_task("spider", path=path)["hardness"] == ["easy", "medium", "hard", "extra", "easy"]
    easy = get_task("spider", path=path, hardness="easy")
    assert easy["question"] == ["Q0", "Q4"] and easy["hardness"] == ["easy", "easy"]
    both = get_task("spider", path=path, hardness=["medium", "extra"])
    assert both["question"] == ["Q1", "Q3"]
    assert get_task("spider", path=path, hardness=list(LEVELS))["question"] == [f"Q{i}" for i in range(5)]
    assert get_task("spider", path=path, hardness=["easy", "medium"], size=2)["question"] == ["Q0", "Q1"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("hardest", "unknown hardness 'hardest'; the levels are easy, medium, hard, extra"),
        (["easy", "Medium"], "unknown hardness 'Medium'"),
        ("easy,medium", """extra (several levels are a list: --task-arg hardness='["easy","medium"]')"""),
        ([], "hardness must be a level or a list of levels"),
        (3, "hardness must be a level or a list of levels"),
    ],
)
def test_unknown_levels_are_refused_in_one_line(spider_root: Path, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_task("spider", path=str(spider_root), hardness=value)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_level_without_questions_is_one_line(tmp_path: Path) -> None:
    root = _spider_dir(tmp_path / "spider", build_synthetic_db(tmp_path / "src.sqlite", seed=3))
    questions = json.loads((root / "dev.json").read_text())
    (root / "dev.json").write_text(json.dumps(questions[:2]))
    with pytest.raises(ConfigError, match="no question of split 'dev' has hardness hard or extra"):
        get_task("spider", path=str(root), hardness=["hard", "extra"])


def test_eval_refuses_an_unknown_level_before_any_model_loads(tmp_path, capsys, spider_root, no_model_loads) -> None:
    args = ["--model", "base=tiny", "--task", "spider", "--task-arg", f"path={spider_root}"]
    rc = cli_main(["eval", *args, "--task-arg", "hardness=hardest", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "unknown hardness 'hardest'" in err[0]
    assert not (tmp_path / "out").exists()
