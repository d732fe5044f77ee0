"""Reward throughput: the pooled, cached ``math_accuracy`` / ``sql_execution`` against a naive serial loop.

Math: 10,000 completions for GSM8K and MATH-500 problems, reasoning text ending in a boxed answer that is right,
right in another form, wrong, or missing; their (gold, answer) pairs are 5,000 distinct ones and 5,000 repeats (the
duplicate answers of a collapsing policy). The naive loop parses the gold and the boxed answer with math-verify and
verifies, one completion at a time, in this process.

SQL: 2,000 completions for Spider dev questions (8 per question, drawn from 4 candidate queries: the gold query, a
query with a changed result, a query of another question on the same database, a broken query). The naive loop
opens the database read-only, executes the gold and the predicted query and compares, one completion at a time.

The pooled rewards start their workers first (not timed: that cost is paid once per run) and begin with an empty
cache. Both sides must agree on every score. Without the shared benchmark data, the synthetic SQL task and
arithmetic golds stand in.

    .venv/bin/python bench/bench_rewards.py [--math 10000] [--sql 2000] [--workers N] [--smoke]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import time
from pathlib import Path

from rlvr_div.rewards.math import MathAccuracy, _configs, extract_boxed
from rlvr_div.rewards.sql import SqlExecution, extract_sql, has_order_by, results_match
from rlvr_div.tasks import get_task
from rlvr_div.tasks.data import find_data

FILLER = (
    "First, let us restate what is given and what is asked. We set up the quantities step by step, "
    "check the units, and combine the intermediate results carefully before simplifying. "
)


# --------------------------------------------------------------------------------------------- math


def math_golds() -> list[str]:
    golds: list[str] = []
    for name in ("gsm8k", "math500"):
        if find_data(f"math/{name}") is not None:
            golds += get_task(name, split="test")["answer"]
    return golds or [str(a * b + c) for a in range(1, 40) for b in range(1, 40) for c in (0, 7)]


def answer_for(gold: str, rng: random.Random, golds: list[str]) -> str | None:
    """A right answer (possibly written differently), a wrong one, or None (no box), with probabilities
    0.3 / 0.15 / 0.45 / 0.1."""
    kind = rng.random()
    if kind < 0.3:
        return gold
    if kind < 0.45:
        forms = [f"{gold}.0", f"{gold}.00", f"\\frac{{{2 * int(gold)}}}{{2}}"] if gold.isdigit() else [f"{{{gold}}}"]
        return rng.choice(forms)
    if kind < 0.9:
        return str(int(gold) + rng.randint(-500, 500) or 1) if gold.isdigit() else rng.choice(golds)
    return None


def math_inputs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` completions whose (gold, answer) pairs are n/2 distinct ones and n/2 repeats of them, shuffled."""
    rng = random.Random(seed)
    golds = math_golds()
    keys: dict[tuple[str, str | None], None] = {}
    while len(keys) < n // 2:
        gold = rng.choice(golds)
        keys[(gold, answer_for(gold, rng, golds))] = None
    unique = list(keys)
    items = unique + [rng.choice(unique) for _ in range(n - len(unique))]
    rng.shuffle(items)
    completions = [
        FILLER * rng.randint(2, 6) + (f"So the final answer is $\\boxed{{{a}}}$." if a else "I am not sure.")
        for _, a in items
    ]
    return completions, [g for g, _ in items]


def naive_math(completions: list[str], golds: list[str]) -> list[float]:
    from math_verify import parse, verify

    out = []
    for completion, gold in zip(completions, golds):
        gold_parsed = parse(f"\\boxed{{{gold}}}", _configs())
        answer = extract_boxed(completion)
        pred = parse(f"\\boxed{{{answer}}}", _configs()) if answer else []
        out.append(float(bool(gold_parsed) and bool(pred) and verify(gold_parsed, pred)))
    return out


# --------------------------------------------------------------------------------------------- sql


def sql_rows() -> list[dict]:
    if find_data("sql/spider_dev") is not None:
        return get_task("spider", split="dev").to_list()
    return get_task("synth_sql", split="train").to_list() + get_task("synth_sql", split="test").to_list()


def sql_inputs(n: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    """``n`` completions, 8 per question, each drawn from 4 candidate queries; their databases and gold queries."""
    rng = random.Random(seed)
    rows = sql_rows()
    by_db: dict[str, list[str]] = {}
    for r in rows:
        by_db.setdefault(r["db_path"], []).append(r["gold_sql"])
    completions, dbs, golds = [], [], []
    for _ in range(-(-n // 8)):
        r = rows[rng.randrange(len(rows))]
        gold = r["gold_sql"]
        candidates = [
            gold,
            f"SELECT * FROM ({gold}) LIMIT 1" if "limit" not in gold.lower() else gold.replace("LIMIT", "LIMIT 100 +"),
            rng.choice(by_db[r["db_path"]]),
            gold.replace("SELECT", "SELEC", 1),
        ]
        for _ in range(8):
            completions.append(f"Let me write the query.\n```sql\n{rng.choice(candidates)}\n```")
            dbs.append(r["db_path"])
            golds.append(gold)
    return completions[:n], dbs[:n], golds[:n]


def naive_sql(completions: list[str], dbs: list[str], golds: list[str]) -> list[float | None]:
    out: list[float | None] = []
    for completion, db, gold in zip(completions, dbs, golds):
        conn = sqlite3.connect(f"file:{Path(db).resolve().as_posix()}?mode=ro", uri=True)
        try:
            try:
                gold_rows = conn.execute(gold).fetchall()
            except sqlite3.Error:
                out.append(None)
                continue
            sql = extract_sql(completion)
            try:
                pred_rows = conn.execute(sql).fetchall() if sql else None
            except (sqlite3.Error, sqlite3.Warning):
                pred_rows = None
            out.append(float(pred_rows is not None and results_match(pred_rows, gold_rows, has_order_by(gold))))
        finally:
            conn.close()
    return out


# --------------------------------------------------------------------------------------------- main


def timed(fn, *args):  # noqa: ANN001, ANN201
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--math", type=int, default=10_000, help="math completions (half duplicates)")
    ap.add_argument("--sql", type=int, default=2_000, help="SQL completions")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="100 math and 50 SQL completions, 1 worker: does it run?")
    args = ap.parse_args(argv)
    if args.smoke:
        args.math, args.sql, args.workers = 100, 50, 1

    completions, golds = math_inputs(args.math, args.seed)
    naive, t_naive = timed(naive_math, completions, golds)
    reward = MathAccuracy(workers=args.workers)
    reward.score(["\\boxed{0}"], answer=["-1"])  # start the workers
    pooled, t_pooled = timed(reward.score, completions, golds)
    reward.close()
    assert [s or 0.0 for s in pooled] == naive, "pooled and naive math scores disagree"
    print(
        f"math: {len(completions)} completions ({reward.stats['verified'] - 1} verified after dedup), "
        f"{reward.pool.n_workers} workers | naive {len(completions) / t_naive:,.0f}/s ({t_naive:.1f} s) | "
        f"pooled {len(completions) / t_pooled:,.0f}/s ({t_pooled:.1f} s) | speed-up x{t_naive / t_pooled:.2f}"
    )

    completions, dbs, sql_golds = sql_inputs(args.sql, args.seed)
    naive_s, t_naive = timed(naive_sql, completions, dbs, sql_golds)
    sql_reward = SqlExecution(workers=args.workers)
    sql_reward.score(["```sql\nSELECT 1\n```"], db_path=[dbs[0]], gold_sql=["SELECT 1"])  # start the workers
    pooled_s, t_pooled = timed(sql_reward.score, completions, dbs, sql_golds)
    sql_reward.close()
    assert pooled_s == naive_s, "pooled and naive SQL scores disagree"
    print(
        f"sql: {len(completions)} completions ({sql_reward.stats['executed'] - 1} executed after dedup), "
        f"{sql_reward.pool.n_workers} workers | naive {len(completions) / t_naive:,.0f}/s ({t_naive:.2f} s) | "
        f"pooled {len(completions) / t_pooled:,.0f}/s ({t_pooled:.2f} s) | speed-up x{t_naive / t_pooled:.2f}"
    )


if __name__ == "__main__":
    main()
