"""The ``synth_sql`` task: no data needed. A company database (departments, employees, projects, assignments)
generated deterministically from ``seed`` and questions from templates, each with a gold query and several other
valid queries (column ``valid_sql``) that return the same result on every database the generator makes, so a policy
can be right in more than one way. ``train`` and ``test`` hold disjoint questions on the same database. Verified by
``sql_execution``; prompts are the shared SQL prompt (:func:`rlvr_div.tasks.sql.sql_prompt`), or with
``format="fewshot"`` the shared few-shot prompt (:func:`rlvr_div.tasks.sql.fewshot_sql_prompt`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows
from rlvr_div.tasks.sql import SYSTEM_PROMPT, check_sql_format, sql_reward_settings, sql_stop_text, task_prompt

SYNTH_VERSION = 1
SYNTH_TEST_SIZE = 60
_DEPARTMENTS = [
    "Engineering", "Sales", "Marketing", "Finance", "Legal", "Research", "Support", "Operations", "Design", "Security",
]  # fmt: skip
_CITIES = ["Lyon", "Oslo", "Porto", "Quito", "Kyoto", "Perth"]
_FIRST = ["Ada", "Ben", "Chloe", "Dev", "Ema", "Femi", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lea", "Mori", "Nia"]
_LAST = ["Abe", "Banks", "Cruz", "Diaz", "Eze", "Fox", "Gray", "Holm", "Ito", "Jain", "Kahn", "Lund", "Moss", "Noor"]
_PROJECT_WORDS = ["Apollo", "Beacon", "Comet", "Delta", "Ember", "Falcon", "Glacier", "Harbor", "Iris", "Juno"]
_STATUSES = ["active", "done", "paused"]


_SYNTH_SCHEMA = (
    """CREATE TABLE departments (
  dept_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  city TEXT NOT NULL,
  budget INTEGER NOT NULL
)""",
    """CREATE TABLE employees (
  emp_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
  salary INTEGER NOT NULL,
  hire_year INTEGER NOT NULL
)""",
    """CREATE TABLE projects (
  project_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL UNIQUE,
  dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
  budget INTEGER NOT NULL,
  status TEXT NOT NULL
)""",
    """CREATE TABLE assignments (
  emp_id INTEGER NOT NULL REFERENCES employees(emp_id),
  project_id INTEGER NOT NULL REFERENCES projects(project_id),
  hours INTEGER NOT NULL,
  PRIMARY KEY (emp_id, project_id)
)""",
)


def build_synthetic_db(path: str | os.PathLike, seed: int = 0) -> Path:
    """Write the synthetic company database of ``seed`` to ``path`` (atomically) and return the path.

    Tables: departments(dept_id, name, city, budget), employees(emp_id, name, dept_id, salary, hire_year),
    projects(project_id, title, dept_id, budget, status), assignments(emp_id, project_id, hours). Salaries are
    distinct, so "the highest paid" and orderings by salary have no ties."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    depts = [(i + 1, name, rng.choice(_CITIES), rng.randrange(100, 1000) * 1000) for i, name in enumerate(_DEPARTMENTS)]
    names = [f"{f} {last}" for f in _FIRST for last in _LAST]
    rng.shuffle(names)
    salaries = rng.sample(range(30_000, 200_000, 50), 120)
    emps = [(i + 1, names[i], rng.randint(1, len(depts)), salaries[i], rng.randint(2005, 2024)) for i in range(120)]
    projects = [
        (i + 1, f"{w} {n}", rng.randint(1, len(depts)), rng.randrange(10, 500) * 1000, rng.choice(_STATUSES))
        for i, (w, n) in enumerate((w, n) for w in _PROJECT_WORDS for n in ("I", "II", "III"))
    ]
    assignments = sorted(
        {(rng.randint(1, len(emps)), rng.randint(1, len(projects))): rng.randint(5, 400) for _ in range(220)}.items()
    )
    fd, tmp = tempfile.mkstemp(suffix=".sqlite", dir=path.parent)
    os.close(fd)
    conn = sqlite3.connect(tmp)
    try:
        for statement in _SYNTH_SCHEMA:
            conn.execute(statement)
        conn.executemany("INSERT INTO departments VALUES (?, ?, ?, ?)", depts)
        conn.executemany("INSERT INTO employees VALUES (?, ?, ?, ?, ?)", emps)
        conn.executemany("INSERT INTO projects VALUES (?, ?, ?, ?, ?)", projects)
        conn.executemany("INSERT INTO assignments VALUES (?, ?, ?)", [(e, p, h) for (e, p), h in assignments])
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, path)
    return path


def synthetic_db_path(seed: int = 0, db_dir: str | os.PathLike | None = None) -> Path:
    """The synthetic database of ``seed`` under ``db_dir`` (default: the rlvr_div cache), built if absent."""
    from rlvr_div.cache import cache_dir

    directory = Path(db_dir) if db_dir is not None else cache_dir() / "synth_sql"
    path = directory / f"synth_sql_v{SYNTH_VERSION}_seed{seed}.sqlite"
    if not path.is_file():
        build_synthetic_db(path, seed)
    return path


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# Each template: parameters drawn from the database -> (question, [gold query, other valid queries...]).
Template = Callable[[sqlite3.Connection], list[tuple[str, list[str]]]]


def _t_count_in_dept(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute("SELECT name FROM departments ORDER BY dept_id"):
        d = _q(name)
        out.append(
            (
                f"How many employees work in the {name} department?",
                [
                    f"SELECT COUNT(*) FROM employees AS e JOIN departments AS d ON e.dept_id = d.dept_id "
                    f"WHERE d.name = {d}",
                    f"SELECT COUNT(*) FROM employees WHERE dept_id = "
                    f"(SELECT dept_id FROM departments WHERE name = {d})",
                    f"SELECT COUNT(emp_id) FROM employees WHERE dept_id IN "
                    f"(SELECT dept_id FROM departments WHERE name = {d})",
                ],
            )
        )
    return out


def _t_names_in_city_above(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    cities = [r[0] for r in conn.execute("SELECT DISTINCT city FROM departments ORDER BY city")]
    for city in cities:
        for threshold in range(50_000, 190_000, 20_000):
            c = _q(city)
            out.append(
                (
                    f"List the names of the employees who earn more than {threshold} and work in a department "
                    f"located in {city}.",
                    [
                        f"SELECT e.name FROM employees AS e JOIN departments AS d ON e.dept_id = d.dept_id "
                        f"WHERE d.city = {c} AND e.salary > {threshold}",
                        f"SELECT name FROM employees WHERE salary > {threshold} AND dept_id IN "
                        f"(SELECT dept_id FROM departments WHERE city = {c})",
                        f"SELECT name FROM employees AS e WHERE e.salary >= {threshold + 1} AND EXISTS "
                        f"(SELECT 1 FROM departments AS d WHERE d.dept_id = e.dept_id AND d.city = {c})",
                    ],
                )
            )
    return out


def _t_count_hired_since(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute("SELECT name FROM departments ORDER BY dept_id"):
        for year in (2010, 2015, 2020):
            d = _q(name)
            out.append(
                (
                    f"How many employees of the {name} department were hired in {year} or later?",
                    [
                        f"SELECT COUNT(*) FROM employees AS e JOIN departments AS d ON e.dept_id = d.dept_id "
                        f"WHERE d.name = {d} AND e.hire_year >= {year}",
                        f"SELECT COUNT(*) FROM employees WHERE hire_year > {year - 1} AND dept_id = "
                        f"(SELECT dept_id FROM departments WHERE name = {d})",
                        f"SELECT SUM(CASE WHEN e.hire_year >= {year} THEN 1 ELSE 0 END) FROM departments AS d "
                        f"JOIN employees AS e ON e.dept_id = d.dept_id WHERE d.name = {d}",
                    ],
                )
            )
    return out


def _t_project_budget(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute(
        "SELECT name FROM departments WHERE dept_id IN (SELECT dept_id FROM projects) ORDER BY dept_id"
    ):
        d = _q(name)
        out.append(
            (
                f"What is the total budget of all projects run by the {name} department?",
                [
                    f"SELECT SUM(p.budget) FROM projects AS p JOIN departments AS d ON p.dept_id = d.dept_id "
                    f"WHERE d.name = {d}",
                    f"SELECT SUM(budget) FROM projects WHERE dept_id = "
                    f"(SELECT dept_id FROM departments WHERE name = {d})",
                    f"SELECT TOTAL(budget) FROM projects WHERE dept_id IN "
                    f"(SELECT dept_id FROM departments WHERE name = {d})",
                ],
            )
        )
    return out


def _t_avg_salary(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute(
        "SELECT name FROM departments WHERE dept_id IN (SELECT dept_id FROM employees) ORDER BY dept_id"
    ):
        d = _q(name)
        sub = f"(SELECT dept_id FROM departments WHERE name = {d})"
        out.append(
            (
                f"What is the average salary in the {name} department, rounded to 2 decimals?",
                [
                    f"SELECT ROUND(AVG(e.salary), 2) FROM employees AS e JOIN departments AS d "
                    f"ON e.dept_id = d.dept_id WHERE d.name = {d}",
                    f"SELECT ROUND(AVG(salary), 2) FROM employees WHERE dept_id = {sub}",
                    f"SELECT ROUND(SUM(salary) * 1.0 / COUNT(*), 2) FROM employees WHERE dept_id = {sub}",
                ],
            )
        )
    return out


def _t_top_paid(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute(
        "SELECT name FROM departments WHERE dept_id IN (SELECT dept_id FROM employees) ORDER BY dept_id"
    ):
        d = _q(name)
        sub = f"(SELECT dept_id FROM departments WHERE name = {d})"
        out.append(
            (
                f"Who is the highest paid employee of the {name} department?",
                [
                    f"SELECT e.name FROM employees AS e JOIN departments AS d ON e.dept_id = d.dept_id "
                    f"WHERE d.name = {d} ORDER BY e.salary DESC LIMIT 1",
                    f"SELECT name FROM employees WHERE dept_id = {sub} AND salary = "
                    f"(SELECT MAX(salary) FROM employees WHERE dept_id = {sub})",
                    f"SELECT name FROM employees WHERE dept_id = {sub} ORDER BY salary DESC LIMIT 1",
                ],
            )
        )
    return out


def _t_hired_after(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for year in range(2005, 2024):
        out.append(
            (
                f"List the names of the employees hired after {year}, from the highest to the lowest salary.",
                [
                    f"SELECT name FROM employees WHERE hire_year > {year} ORDER BY salary DESC",
                    f"SELECT name FROM employees WHERE hire_year >= {year + 1} ORDER BY salary DESC",
                    f"SELECT name FROM (SELECT name, salary FROM employees WHERE hire_year > {year}) "
                    f"ORDER BY salary DESC",
                ],
            )
        )
    return out


def _t_depts_with_projects(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for status in _STATUSES:
        for k in (0, 1, 2):
            s = _q(status)
            out.append(
                (
                    f"Which departments have {'at least one' if k == 0 else f'more than {k}'} {status} "
                    f"project{'' if k == 0 else 's'}? Give their names.",
                    [
                        f"SELECT d.name FROM departments AS d JOIN projects AS p ON p.dept_id = d.dept_id "
                        f"WHERE p.status = {s} GROUP BY d.dept_id HAVING COUNT(*) > {k}",
                        f"SELECT name FROM departments AS d WHERE (SELECT COUNT(*) FROM projects AS p "
                        f"WHERE p.dept_id = d.dept_id AND p.status = {s}) > {k}",
                        f"SELECT name FROM departments WHERE dept_id IN (SELECT dept_id FROM projects "
                        f"WHERE status = {s} GROUP BY dept_id HAVING COUNT(project_id) >= {k + 1})",
                    ],
                )
            )
    return out


def _t_project_hours(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (title,) in conn.execute(
        "SELECT title FROM projects WHERE project_id IN (SELECT project_id FROM assignments) ORDER BY project_id"
    ):
        t = _q(title)
        out.append(
            (
                f"How many hours in total have employees worked on the project {title}?",
                [
                    f"SELECT SUM(a.hours) FROM assignments AS a JOIN projects AS p ON a.project_id = p.project_id "
                    f"WHERE p.title = {t}",
                    f"SELECT SUM(hours) FROM assignments WHERE project_id = "
                    f"(SELECT project_id FROM projects WHERE title = {t})",
                    f"SELECT TOTAL(hours) FROM assignments WHERE project_id IN "
                    f"(SELECT project_id FROM projects WHERE title = {t})",
                ],
            )
        )
    return out


def _t_idle_in_dept(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for (name,) in conn.execute("SELECT name FROM departments ORDER BY dept_id"):
        d = _q(name)
        sub = f"(SELECT dept_id FROM departments WHERE name = {d})"
        out.append(
            (
                f"Which employees of the {name} department are not assigned to any project?",
                [
                    f"SELECT name FROM employees WHERE dept_id = {sub} AND emp_id NOT IN "
                    f"(SELECT emp_id FROM assignments)",
                    f"SELECT e.name FROM employees AS e WHERE e.dept_id = {sub} AND NOT EXISTS "
                    f"(SELECT 1 FROM assignments AS a WHERE a.emp_id = e.emp_id)",
                    f"SELECT e.name FROM employees AS e LEFT JOIN assignments AS a ON a.emp_id = e.emp_id "
                    f"WHERE e.dept_id = {sub} AND a.emp_id IS NULL",
                ],
            )
        )
    return out


def _t_cities_with_budget(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
    out = []
    for budget in range(150_000, 1_000_000, 50_000):
        out.append(
            (
                f"In how many different cities is there a department with a budget above {budget}?",
                [
                    f"SELECT COUNT(DISTINCT city) FROM departments WHERE budget > {budget}",
                    f"SELECT COUNT(*) FROM (SELECT DISTINCT city FROM departments WHERE budget > {budget})",
                    f"SELECT COUNT(*) FROM (SELECT city FROM departments WHERE budget > {budget} GROUP BY city)",
                ],
            )
        )
    return out


TEMPLATES: tuple[Template, ...] = (
    _t_count_in_dept,
    _t_count_hired_since,
    _t_project_budget,
    _t_names_in_city_above,
    _t_avg_salary,
    _t_top_paid,
    _t_hired_after,
    _t_depts_with_projects,
    _t_project_hours,
    _t_idle_in_dept,
    _t_cities_with_budget,
)


def synthetic_questions(db_path: str | os.PathLike) -> list[tuple[str, list[str]]]:
    """Every templated (question, [gold query, other valid queries…]) on the database at ``db_path``."""
    conn = sqlite3.connect(f"file:{Path(db_path).resolve().as_posix()}?mode=ro", uri=True)
    try:
        return [q for template in TEMPLATES for q in template(conn)]
    finally:
        conn.close()


def build_synth_sql(
    split: str = "train",
    seed: int = 0,
    size: int | None = None,
    chat: bool | None = None,
    system: str | None = SYSTEM_PROMPT,
    db_dir: str | None = None,
    format: str = "instruct",
) -> datasets.Dataset:
    """Questions on the synthetic database of ``seed``, shuffled by ``seed``; the last ``SYNTH_TEST_SIZE`` form
    ``test``, the rest ``train``; prompts in ``format`` (``instruct``: chat messages unless ``chat=False``;
    ``fewshot``). Columns: prompt, question, db_path, gold_sql, db_id, valid_sql."""
    if split not in ("train", "test"):
        raise ConfigError(f"task 'synth_sql' has splits train and test, not {split!r}")
    check_sql_format("synth_sql", format, chat, system)
    db_path = synthetic_db_path(seed, db_dir)
    questions = synthetic_questions(db_path)
    random.Random(seed).shuffle(questions)
    questions = questions[:-SYNTH_TEST_SIZE] if split == "train" else questions[-SYNTH_TEST_SIZE:]
    rows = [
        {
            "prompt": task_prompt(str(db_path), q, format, chat, system),
            "question": q,
            "db_path": str(db_path),
            "gold_sql": queries[0],
            "db_id": f"synth_sql_seed{seed}",
            "valid_sql": queries,
        }
        for q, queries in questions
    ]
    return take_rows(rows, size)


def _check(format: str = "instruct", chat: bool | None = None, system: str | None = SYSTEM_PROMPT, **_: Any) -> None:
    check_sql_format("synth_sql", format, chat, system)


TASKS.add(
    "synth_sql",
    TaskSpec(
        "synth_sql",
        build_synth_sql,
        reward="sql_execution",
        description="synthetic company database and templated questions (several valid queries each), from a seed",
        check=_check,
        reward_settings=sql_reward_settings,
        stop_text=sql_stop_text,
    ),
)
