"""Running the collapse benchmark: the base measurement, the DPH-RL offline stages, and every training run, in a pool
of worker processes; resumable at the granularity of a run.

Output directory layout::

    benchmark.json              the checked configuration, its fingerprint, the code commit of each invocation
    base/<task>.json            the base model measured on every split (its log-probs of every valid answer)
    rehearsal/<task>/           DPH-RL offline stage (``rlvr-div rehearse``) for the task
    runs/<task>/<method>/<value>/seed<s>/
        (the trained model, metrics.jsonl, recipe.yaml)
        result.json             written last: the run's training summary and measurements; a run without it is
                                started over from scratch when the benchmark is rerun
    selection.json              the tuned value chosen per (task, method) on the selection split

A run is deterministic given its seed (CPU, fixed threads), so a killed benchmark that is rerun gives the same
tables as one that was never interrupted.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from collapse_bench.engine import (
    RESULT,
    fresh_run_dir,
    log_path,
    logged,
    open_state,
    read_result,
    record_run,
    run_dir,
    run_pool,
    train_or_raise,
    worker_code,
)
from collapse_bench.measure import (
    cached_base,
    exact_trajectory,
    has_classes,
    logprobs_of,
    measured_split,
    split_rows,
    summarise,
    task_structure,
    training_summary,
    trajectory_point,
)
from collapse_bench.spec import Benchmark, Run, grid_runs, run_argv, run_identity, selection_score
from eval.records import write_json
from rlvr_div.runs.run_lock import directory_lock

STATE = "benchmark.json"
SELECTION = "selection.json"


def result_of(out: Path, bench: Benchmark, run: Run) -> dict[str, Any] | None:
    """A run's current result (:func:`collapse_bench.engine.read_result` at the run's identity)."""
    return read_result(out, run.key, run_identity(bench, run))


# --------------------------------------------------------------------------------------------- stages


def measure_base(bench: Benchmark, out: Path) -> dict[str, Any]:
    """The base model on every split of every task (exact log-probs of every valid completion; cached in
    ``base/<task>.json`` by :func:`collapse_bench.measure.cached_base`)."""
    from rlvr_div.models import resolve_model
    from rlvr_div.models.fingerprint import model_fingerprint

    fingerprint = model_fingerprint(bench.model, cache_path=out / "fingerprints.json")
    temperature = float(bench.common.get("temperature", 1.0))
    bases: dict[str, Any] = {}
    for task in bench.tasks:
        what = {"fingerprint": fingerprint, "task": task.task, "task_options": task.task_options,
                "temperature": temperature}  # fmt: skip
        chosen = {split: split_rows(task.task, split, task.task_options) for split in bench.evaluation.splits}

        def measure(split: str, rows: list[dict[str, Any]], task: Any = task) -> dict[str, Any]:
            return measured_split(resolve_model(bench.model), task.task, rows, temperature, bench.evaluation.ks,
                                  structure=task_structure(task.task, rows))  # fmt: skip

        bases[task.name] = cached_base(out / "base" / f"{task.name}.json", what, chosen, measure)
    return bases


def build_rehearsal_sets(bench: Benchmark, out: Path) -> None:
    """The DPH-RL offline stage for every task that a rehearsal method runs on (resumable: ``rlvr-div rehearse``)."""
    from rlvr_div.rehearse import main as rehearse

    for task in bench.tasks:
        methods = [m for m in bench.methods_of(task) if m.rehearsal]
        if not methods:
            continue
        argv = ["--config", methods[0].recipe, "--model_name_or_path", bench.model, "--task", task.task,
                "--task_options", json.dumps(task.task_options),
                "--rehearsal_path", str(out / "rehearsal" / task.name)]  # fmt: skip
        for key, value in {**bench.common, **task.overrides, **task.rehearsal}.items():
            argv.append(f"--{key}={value}")
        key = f"rehearsal_{task.name}"
        logged(out, key, rehearse, argv)  # a failure: one line naming the log
        print(f"DPH-RL offline stage for {task.name}: {out / 'rehearsal' / task.name} (log: {log_path(out, key)})",
              flush=True)  # fmt: skip


# --------------------------------------------------------------------------------------------- one run


def execute_run(bench: Benchmark, out: str, run: Run, base: dict[str, Any]) -> dict[str, Any]:
    """Train one run from scratch, measure it on every split, write ``result.json`` last (in a worker process)."""
    import logging

    from rlvr_div.models.fingerprint import model_fingerprint

    logging.getLogger().setLevel(logging.WARNING)
    root = Path(out)
    directory = fresh_run_dir(root, run.key)
    t0 = time.perf_counter()
    identity = run_identity(bench, run)
    argv = run_argv(bench, run, directory, root / "rehearsal" / run.task)
    task = bench.task(run.task)
    temperature = float(bench.common.get("temperature", 1.0))
    trajectory: list[dict[str, Any]] = []
    callbacks = []
    every = bench.trajectory_every(run.task)
    held_out: list[dict[str, Any]] = []  # a task with prompt classes: the report split's path too, class by class
    paths = {"train": trajectory}
    if has_classes(task.task):
        paths[bench.evaluation.report_on] = held_out
    for split, sink in paths.items():
        if split not in base.get("splits", {}) or not every:
            continue
        b = base["splits"][split]
        structure = task_structure(task.task, split_rows(task.task, split, task.task_options))
        sink.append({"step": 0, **trajectory_point(b["summary"]["mean"], max(bench.evaluation.ks))})
        callbacks.append(exact_trajectory(b["prompts"], b["valid"], b["logps"], bench.evaluation.ks, every,
                                          temperature, sink, structure=structure))  # fmt: skip
    train_or_raise(argv, callbacks, run.key)
    train_seconds = time.perf_counter() - t0
    measured: dict[str, Any] = {}
    for split in bench.evaluation.splits:
        b = base["splits"][split]
        rows = split_rows(task.task, split, task.task_options)
        if b["prompts"] != [r["prompt"] for r in rows]:
            raise RuntimeError(f"the base measurement of {run.task}/{split} is for other prompts")
        logps = logprobs_of(str(directory), task.task, rows, temperature)
        structure = task_structure(task.task, rows)
        measured[split] = summarise(b["prompts"], b["valid"], logps, b["logps"], bench.evaluation.ks, structure)
    result = {
        "run": asdict(run),
        "identity": identity,
        "commit": worker_code(),  # the code this worker process imported when it started
        "fingerprint": model_fingerprint(str(directory)),
        "train": training_summary(directory / "metrics.jsonl"),
        "trajectory": trajectory,  # the training prompts measured exactly along the run (step 0: the base)
        **({"trajectory_held_out": held_out} if held_out else {}),  # the report split's path, per prompt class
        "train_wall_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - t0,
        "splits": measured,
    }
    write_json(directory / RESULT, result)
    return result


# --------------------------------------------------------------------------------------------- the whole grid


def select(bench: Benchmark, out: Path, task: str, method: str) -> Any:
    """The tuned value with the best :func:`selection_score` on the selection split at ``tune_seed`` (ties: the first
    value of the grid), and every value's score."""
    m = bench.method(method)
    kmax = max(bench.evaluation.ks)
    scores = []
    for value in m.tune[m.tune_key]:
        result = result_of(out, bench, Run(task, method, value, bench.tune_seed))
        if result is None:
            raise RuntimeError(f"{task}/{method}: the tuning run at {value} has not finished")
        scores.append((selection_score(result["splits"][bench.evaluation.select_on]["mean"], kmax), value))
    best = max(scores, key=lambda sv: sv[0])  # max keeps the first of equal scores
    return best[1], scores


def run_benchmark(bench: Benchmark, out: Path, fresh: bool = False, progress: bool = True,
                  max_runs: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Every stage, skipping what is finished, holding the directory's lock. ``max_runs``: stop after starting
    that many runs (for tests of interruption). Returns the selections, the failures, whether it stopped early, and
    the number of runs the grid holds once every selection is made (the progress bar's total)."""
    with directory_lock(out, "collapse benchmark", "--out"):
        return _run_stages(bench, out, fresh, progress, max_runs)


def _run_stages(bench: Benchmark, out: Path, fresh: bool, progress: bool, max_runs: int | None) -> dict[str, Any]:
    from tqdm.auto import tqdm

    open_state(out, STATE, asdict(bench), fresh, bench.fingerprint(), "collapse benchmark")
    t_start = time.time()
    print(f"collapse benchmark in {out}: measuring the base model", flush=True)
    bases = measure_base(bench, out)
    if any(m.rehearsal for m in bench.methods):
        print("DPH-RL offline stage", flush=True)
        build_rehearsal_sets(bench, out)
    fixed, tuning = grid_runs(bench)
    tuned_groups = sorted({(t.name, m.name) for t in bench.tasks for m in bench.methods_of(t) if m.tune_key})
    selections: dict[str, Any] = {}
    total = len(fixed) + len(tuning) + len(bench.seeds) * len(tuned_groups)
    order = {t.name: i for i, t in enumerate(bench.tasks)}

    def priority(run: Run) -> tuple[int, int, int]:
        """Task by task; within a task the runs that complete a table row first: untuned methods, then every
        method's tuning grid (at the tuning seed), then the chosen values' reported seeds, then the rest of the β
        sweep."""
        m = bench.method(run.method)
        if m.tune_key is None:
            phase = 0
        elif run.seed == bench.tune_seed:
            phase = 1
        elif selections.get(f"{run.task}/{run.method}", {}).get("value") == run.value:
            phase = 2
        else:
            phase = 3
        return order[run.task], phase, run.seed

    todo = [r for r in fixed + tuning if result_of(out, bench, r) is None]
    stale = [r for r in todo if (run_dir(out, r.key) / RESULT).is_file()]
    if stale:
        print(f"{len(stale)} finished runs have other settings or recipes now; they are trained again", flush=True)
    bar = tqdm(total=total, initial=total - len(todo) - len(bench.seeds) * len(tuned_groups),
               desc="collapse runs", disable=not progress, mininterval=2.0, dynamic_ncols=True)  # fmt: skip
    failures: list[str] = []

    def followups() -> list[Run]:
        """The reported seeds of every tuned method whose tuning grid has finished (at its chosen value)."""
        new = []
        for task, method in tuned_groups:
            key = f"{task}/{method}"
            if key in selections:
                continue
            m = bench.method(method)
            firsts = [Run(task, method, v, bench.tune_seed) for v in m.tune[m.tune_key]]
            if all(result_of(out, bench, r) is not None for r in firsts):
                value, scores = select(bench, out, task, method)
                selections[key] = {"value": value, "scores": [[v, s] for s, v in scores]}
                write_json(out / SELECTION, selections)
                for seed in bench.seeds:
                    run = Run(task, method, value, seed)
                    if run in fixed:  # a β-sweep run, counted once in the bar's total, not twice
                        bar.total -= 1
                        bar.refresh()
                        continue
                    if result_of(out, bench, run) is None:
                        new.append(run)
                    else:
                        bar.update(1)
        return new

    def ready() -> list[Run]:  # every listed run may start at once; tuned methods' seeds join once selected
        todo.extend(followups())
        return sorted(todo, key=priority)

    def done(run: Run, failure: str | None) -> None:  # the report lists failed runs
        record_run(out, STATE, run.key, failure, t_start)
        if failure is not None:
            failures.append(failure)
            print(f"\nrun failed: {failure}", flush=True)
        bar.update(1)

    def task(run: Run) -> tuple[Any, tuple[Any, ...]]:  # execute_run, its console output in the run's log file
        return logged, (out, run.key, execute_run, bench, str(out), run, bases.get(run.task, {}))

    started = run_pool(bench.workers, bench.threads, task, ready, done, max_runs, max_tasks_per_child=20)
    bar.close()
    return {"selections": selections, "failures": failures, "stopped_early": started < len(todo), "runs": bar.total}
