"""A corpus of hostile SQL outputs for the SQL sandbox tests (``tests/test_rewards_sql.py``).

Each entry is ``(name, sql)`` for the synthetic company database (``rlvr_div.tasks.synth_sql.build_synthetic_db``).
``{dir}`` is replaced by the database's directory and ``{cwd}`` by the working directory, so that attempts to create
files aim exactly where the tests look for them. Every entry must score 0 within the deadline plus 1 s and leave the
database and both directories unchanged.
"""

from __future__ import annotations

HOSTILE_SQL: list[tuple[str, str]] = [
    # writes of every kind
    ("insert", "INSERT INTO departments VALUES (99, 'Evil', 'Nowhere', 1)"),
    (
        "insert_select",
        "INSERT INTO employees SELECT emp_id + 1000, name || 'x', dept_id, salary, hire_year FROM employees",
    ),
    ("update", "UPDATE employees SET salary = 0"),
    ("update_from", "UPDATE employees SET salary = d.budget FROM departments AS d WHERE d.dept_id = employees.dept_id"),
    ("delete", "DELETE FROM employees"),
    ("delete_returning", "DELETE FROM employees RETURNING name"),
    ("replace", "REPLACE INTO departments VALUES (1, 'Evil', 'Nowhere', 1)"),
    ("upsert", "INSERT INTO departments VALUES (1, 'X', 'Y', 1) ON CONFLICT(dept_id) DO UPDATE SET budget = 0"),
    ("cte_insert", "WITH x AS (SELECT 1) INSERT INTO departments SELECT 98, 'Evil', 'No', 1 FROM x"),
    # schema changes
    ("drop_table", "DROP TABLE employees"),
    ("drop_if_exists", "DROP TABLE IF EXISTS assignments"),
    ("create_table", "CREATE TABLE hostile_t (a INTEGER)"),
    ("create_table_as", "CREATE TABLE hostile_copy AS SELECT * FROM employees"),
    ("create_temp_table", "CREATE TEMP TABLE hostile_tmp AS SELECT * FROM employees"),
    ("create_index", "CREATE INDEX hostile_idx ON employees(salary)"),
    ("create_view", "CREATE VIEW hostile_v AS SELECT * FROM employees"),
    ("create_trigger", "CREATE TRIGGER hostile_tr AFTER INSERT ON employees BEGIN DELETE FROM employees; END"),
    ("create_virtual", "CREATE VIRTUAL TABLE hostile_fts USING fts5(body)"),
    ("alter_rename", "ALTER TABLE employees RENAME TO hostile_e"),
    ("alter_add_column", "ALTER TABLE employees ADD COLUMN evil TEXT"),
    ("alter_drop_column", "ALTER TABLE employees DROP COLUMN hire_year"),
    # other databases and files
    ("attach_file_dir", "ATTACH DATABASE '{dir}/hostile_attach.db' AS evil"),
    ("attach_file_cwd", "ATTACH DATABASE 'hostile_attach_cwd.db' AS evil"),
    ("attach_memory", "ATTACH DATABASE ':memory:' AS evil"),
    ("attach_uri", "ATTACH DATABASE 'file:{dir}/hostile_uri.db?mode=rwc' AS evil"),
    ("detach_main", "DETACH DATABASE main"),
    ("vacuum", "VACUUM"),
    ("vacuum_into_dir", "VACUUM INTO '{dir}/hostile_vacuum.db'"),
    ("vacuum_into_cwd", "VACUUM INTO 'hostile_vacuum_cwd.db'"),
    ("load_extension", "SELECT load_extension('{cwd}/hostile_ext.so')"),
    ("load_extension_libc", "SELECT load_extension('libc.so.6', 'system')"),
    # pragmas
    ("pragma_writable_schema", "PRAGMA writable_schema = ON"),
    ("pragma_journal_wal", "PRAGMA journal_mode = WAL"),
    ("pragma_journal_delete", "PRAGMA journal_mode = DELETE"),
    ("pragma_user_version", "PRAGMA user_version = 666"),
    ("pragma_query_only_off", "PRAGMA query_only = OFF"),
    ("pragma_table_valued", "SELECT * FROM pragma_table_info('employees')"),
    ("pragma_temp_store_directory", "PRAGMA temp_store_directory = '{cwd}'"),
    # maintenance and transactions
    ("reindex", "REINDEX"),
    ("analyze", "ANALYZE"),
    ("begin_immediate", "BEGIN IMMEDIATE"),
    ("begin_exclusive", "BEGIN EXCLUSIVE"),
    ("savepoint", "SAVEPOINT hostile"),
    ("multi_statement", "SELECT 1; DROP TABLE employees"),
    ("multi_statement_attach", "SELECT name FROM employees; ATTACH '{dir}/hostile_multi.db' AS x"),
    # resource exhaustion
    ("endless_recursive_cte", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"),
    ("endless_recursive_cte_rows", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x FROM c) SELECT x FROM c"),
    (
        "enormous_cross_join",
        "SELECT count(*) FROM employees AS a, employees AS b, employees AS c, employees AS d, employees AS e",
    ),
    ("cross_join_sort", "SELECT a.name FROM employees AS a, employees AS b, employees AS c ORDER BY random()"),
    (
        "millions_of_rows",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000000) SELECT x FROM c",
    ),
    (
        "millions_of_rows_join",
        "SELECT a.emp_id, b.emp_id, c.emp_id FROM employees AS a, employees AS b, employees AS c",
    ),
    ("randomblob_gigabytes", "SELECT randomblob(2000000000)"),
    ("zeroblob_gigabytes", "SELECT zeroblob(2000000000)"),
    ("hex_zeroblob", "SELECT length(hex(zeroblob(1500000000)))"),
    ("printf_gigabytes", "SELECT printf('%.*c', 2000000000, 'x')"),
    ("replace_blowup", "SELECT length(replace(hex(zeroblob(5000000)), '0', 'aaaaaaaaaaaaaaaaaaaa'))"),
    (
        "group_concat_blowup",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3000000) "
        "SELECT length(group_concat(printf('%100d', x))) FROM c",
    ),
    ("like_backtracking", "SELECT printf('%.*c', 9000, 'a') LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b'"),
    ("deep_nesting", "SELECT " + "(" * 5000 + "1" + ")" * 5000),
    ("huge_in_list", "SELECT count(*) FROM employees WHERE emp_id IN (" + ",".join(["1"] * 200000) + ")"),
    # not a query at all
    ("empty_result_noop", "EXPLAIN QUERY PLAN DELETE FROM employees"),
]
