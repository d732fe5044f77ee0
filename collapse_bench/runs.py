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

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path
from statistics import mean
from typing import Any

from collapse_bench.measure import (
    exact_trajectory,
    has_classes,
    is_enumerable,
    logprobs_of,
    sampled_summary,
    split_rows,
    summarise,
    task_structure,
    trajectory_point,
    valid_sets,
)
from collapse_bench.spec import Benchmark, Run, grid_runs, run_argv, run_identity, selection_score
from eval.records import write_json
from rlvr_div.errors import ConfigError
from rlvr_div.run_lock import clear_directory

STATE = "benchmark.json"
RESULT = "result.json"
SELECTION = "selection.json"


# what a run's outcome depends on in the checkout: the code, the recipes and the benchmark configs, not the results
# that benchmarks write into it (bench/results/ is committed, so writing there must not mark the code dirty)
CODE_PATHS = ("rlvr_div", "eval", "collapse_bench", "recipes", "bench", ":(exclude)bench/results", "pyproject.toml")


def code_commit(root: Path | None = None) -> str:
    """The git commit of the code in ``root`` (default: this checkout), ``+dirty`` when a tracked file under
    :data:`CODE_PATHS` differs from it; ``unknown`` outside a checkout."""
    root = Path(__file__).resolve().parents[1] if root is None else root
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def run_dir(out: Path, run: Run) -> Path:
    return out / "runs" / run.key


def read_result(out: Path, run: Run, bench: Benchmark | None = None) -> dict[str, Any] | None:
    """A run's ``result.json``; with ``bench``, None also when the run's settings or recipe changed since (it is
    then trained again)."""
    path = run_dir(out, run) / RESULT
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if bench is not None and result.get("identity") != run_identity(bench, run):
        return None
    return result


def _rehearsal(out: Path, run: Run) -> Path:
    return out / "rehearsal" / run.task


def check_state(out: Path, bench: Benchmark, fresh: bool) -> dict[str, Any]:
    """Start or resume: a directory holding another configuration is refused (one line) unless ``fresh``."""
    if fresh:
        clear_directory(out)
    path = out / STATE
    commit = code_commit()
    if path.is_file():
        state = json.loads(path.read_text())
        if state.get("fingerprint") != bench.fingerprint():
            raise ConfigError(
                f"{out} holds a collapse benchmark with other evaluation settings or base model; pass --fresh or "
                "another --out"
            )
        if commit not in state["commits"]:
            state["commits"].append(commit)
    else:
        state = {"fingerprint": bench.fingerprint(), "config": asdict(bench), "commits": [commit]}
    out.mkdir(parents=True, exist_ok=True)
    write_json(path, state)
    return state


# --------------------------------------------------------------------------------------------- stages


def measure_base(bench: Benchmark, out: Path) -> dict[str, Any]:
    """The base model on every split of every task (exact log-probs where the valid set is enumerable)."""
    from rlvr_div.fingerprint import model_fingerprint
    from rlvr_div.models import resolve_model

    fingerprint = model_fingerprint(bench.model, cache_path=out / "fingerprints.json")
    bases: dict[str, Any] = {}
    for task in bench.tasks:
        path = out / "base" / f"{task.name}.json"
        temperature = float(bench.common.get("temperature", 1.0))
        what = {"task": task.task, "task_options": task.task_options, "temperature": temperature}
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("fingerprint") != fingerprint:
                raise ConfigError(f"the base model changed since {path} was written; pass --fresh or another --out")
            if {k: data.get(k) for k in what} != what or set(data["splits"]) != set(bench.evaluation.splits):
                raise ConfigError(f"{path} measured the base on another task, options, temperature or splits; pass "
                                  "--fresh or another --out")  # fmt: skip
            bases[task.name] = data
            continue
        data: dict[str, Any] = {"fingerprint": fingerprint, **what, "splits": {}}
        for split in bench.evaluation.splits:
            rows = split_rows(task.task, split, task.task_options)
            if is_enumerable(task.task):
                logps = logprobs_of(resolve_model(bench.model), task.task, rows, temperature)
                prompts, valid = [r["prompt"] for r in rows], valid_sets(task.task, rows)
                structure = task_structure(task.task, rows)
                data["splits"][split] = {
                    "prompts": prompts,
                    "valid": valid,
                    "logps": logps,
                    "summary": summarise(prompts, valid, logps, logps, bench.evaluation.ks, structure),
                }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, data)
        bases[task.name] = data
    return bases


def _record(out: Path, run: Run, failure: str | None, t_start: float) -> None:
    """After each finished run: this invocation's wall time so far, and the run's failure (or its clearing) in
    ``benchmark.json`` (failures survive into ``--report-only`` until the run succeeds)."""
    state = json.loads((out / STATE).read_text())
    state["invocations"][-1] = time.time() - t_start
    failed = state.setdefault("failures", {})
    if failure is None:
        failed.pop(run.key, None)
    else:
        failed[run.key] = failure
    write_json(out / STATE, state)


def build_rehearsal_sets(bench: Benchmark, out: Path) -> None:
    """The DPH-RL offline stage for every task that a rehearsal method runs on (resumable: ``rlvr-div rehearse``)."""
    from rlvr_div.rehearsal import main as rehearse

    for task in bench.tasks:
        methods = [m for m in bench.methods_of(task) if m.rehearsal]
        if not methods:
            continue
        argv = [
            "--config",
            methods[0].recipe,
            "--model_name_or_path",
            bench.model,
            "--task",
            task.task,
            "--task_options",
            json.dumps(task.task_options),
            "--rehearsal_path",
            str(out / "rehearsal" / task.name),
        ]
        for key, value in {**bench.common, **task.overrides, **task.rehearsal}.items():
            argv.append(f"--{key}={value}")
        log = out / "logs" / f"rehearsal_{task.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            rehearse(argv)
        print(f"DPH-RL offline stage for {task.name}: {out / 'rehearsal' / task.name} (log: {log})", flush=True)


# --------------------------------------------------------------------------------------------- one run


_WORKER_CODE = "unknown"


def init_worker(threads: int) -> None:
    """A study's worker process (the benchmark's and the β study's): its threads, the code state it imported
    (:func:`worker_code`, recorded in each of its results: the checkout may move on while a study runs), and a
    watch that ends it when the process that started it is gone (a study killed with SIGTERM or SIGKILL would
    otherwise leave its worker training beside whatever runs next)."""
    import torch

    global _WORKER_CODE
    _WORKER_CODE = code_commit()
    torch.set_num_threads(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def worker_code() -> str:
    """The code state this worker process imported (:func:`init_worker`; "unknown" outside a worker)."""
    return _WORKER_CODE


def _exit_with_parent(parent: int, every: float = 2.0) -> None:
    """End this process as soon as its parent ``parent`` is gone (it is then re-parented)."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def training_summary(metrics_path: Path, window: int = 10) -> dict[str, Any]:
    """Steps trained, the mean reward (the rollouts' validity) over the first and the last ``window`` logged rewards
    (steps that sampled), and the first step at which their running mean over ``window`` reached 0.9 (None if
    never)."""
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    logged = [r for r in rows if "reward" in r]
    rewards = [r["reward"] for r in logged]
    reached = next(
        (logged[i]["step"] for i in range(window - 1, len(rewards)) if mean(rewards[i - window + 1 : i + 1]) >= 0.9),
        None,
    )
    return {
        "steps": max((r["step"] for r in rows), default=0),  # with num_iterations > 1 not every step samples
        "reward_first": mean(rewards[:window]) if rewards else None,
        "reward_last": mean(rewards[-window:]) if rewards else None,
        "step_reached_0.9": reached,
        "seconds": sum(r.get("step_time", 0.0) for r in rows),
    }


def execute_run(bench: Benchmark, out: str, run: Run, base: dict[str, Any]) -> dict[str, Any]:
    """Train one run from scratch, measure it on every split, write ``result.json`` last (in a worker process)."""
    import logging

    from rlvr_div.fingerprint import model_fingerprint
    from rlvr_div.train import main as train

    logging.getLogger().setLevel(logging.WARNING)
    root = Path(out)
    directory = run_dir(root, run)
    if directory.exists():
        shutil.rmtree(directory)  # an unfinished run: start over (a run is the unit of resumption)
    directory.mkdir(parents=True)
    t0 = time.perf_counter()
    identity = run_identity(bench, run)
    argv = run_argv(bench, run, directory, _rehearsal(root, run))
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
    code = train(argv, callbacks=callbacks)
    if code:
        raise RuntimeError(f"training {run.key} exited with code {code}")
    train_seconds = time.perf_counter() - t0
    measured: dict[str, Any] = {}
    for split in bench.evaluation.splits:
        if is_enumerable(task.task):
            b = base["splits"][split]
            rows = split_rows(task.task, split, task.task_options)
            if b["prompts"] != [r["prompt"] for r in rows]:
                raise RuntimeError(f"the base measurement of {run.task}/{split} is for other prompts")
            logps = logprobs_of(str(directory), task.task, rows, temperature)
            measured[split] = summarise(
                b["prompts"], b["valid"], logps, b["logps"], bench.evaluation.ks, task_structure(task.task, rows)
            )
        else:
            measured[split] = sampled_summary(
                str(directory), bench.model, task.task, split, task.task_options, directory / f"eval_{split}",
                bench.evaluation.n, bench.evaluation.ks, temperature,
                int(bench.common.get("max_completion_length", 256)), run.seed,
            )  # fmt: skip
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


def log_path(out: Path, run: Run) -> Path:
    """Where a run's console output goes (``logs/<task>/<method>/<value>/seed<s>.log``)."""
    return out / "logs" / f"{run.key}.log"


def _execute(bench: Benchmark, out: str, run: Run, base: dict[str, Any]) -> dict[str, Any]:
    """``execute_run`` with its console output (progress bars, warnings) in the run's log file."""
    log = log_path(Path(out), run)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            return execute_run(bench, out, run, base)
        except Exception as e:  # reported by the parent, with the run's name and its log
            traceback.print_exc()
            raise RuntimeError(f"{run.key}: {type(e).__name__}: {e} (log: {log})") from None


# --------------------------------------------------------------------------------------------- the whole grid


def select(bench: Benchmark, out: Path, task: str, method: str) -> Any:
    """The tuned value with the best :func:`selection_score` on the selection split at ``tune_seed`` (ties: the first
    value of the grid), and every value's score."""
    m = bench.method(method)
    kmax = max(bench.evaluation.ks)
    scores = []
    for value in m.tune[m.tune_key]:
        result = read_result(out, Run(task, method, value, bench.tune_seed), bench)
        if result is None:
            raise RuntimeError(f"{task}/{method}: the tuning run at {value} has not finished")
        scores.append((selection_score(result["splits"][bench.evaluation.select_on]["mean"], kmax), value))
    best = max(scores, key=lambda sv: sv[0])  # max keeps the first of equal scores
    return best[1], scores


@contextlib.contextmanager
def benchmark_lock(out: Path, what: str = "collapse benchmark") -> Iterator[None]:
    """Hold ``out``'s directory lock (:func:`rlvr_div.run_lock.directory_lock`: ``.<name>.lock`` beside it, outside
    it so ``--fresh`` cannot delete it) while this process writes a study there: a second one on the same directory
    fails in one line naming the holder's PID instead of interleaving its runs and reports with the first."""
    from rlvr_div.run_lock import directory_lock

    with directory_lock(out, what, "--out"):
        yield


def run_benchmark(bench: Benchmark, out: Path, fresh: bool = False, progress: bool = True,
                  max_runs: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Every stage, skipping what is finished, holding :func:`benchmark_lock`. ``max_runs``: stop after starting
    that many runs (for tests of interruption). Returns the selections, the failures, whether it stopped early, and
    the number of runs the grid holds once every selection is made (the progress bar's total)."""
    with benchmark_lock(out):
        return _run_stages(bench, out, fresh, progress, max_runs)


def _run_stages(bench: Benchmark, out: Path, fresh: bool, progress: bool, max_runs: int | None) -> dict[str, Any]:
    from tqdm.auto import tqdm

    check_state(out, bench, fresh)
    t_start = time.time()
    state = json.loads((out / STATE).read_text())
    state.setdefault("invocations", []).append(0.0)
    write_json(out / STATE, state)
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

    todo = [r for r in fixed + tuning if read_result(out, r, bench) is None]
    stale = [r for r in todo if (run_dir(out, r) / RESULT).is_file()]
    if stale:
        print(f"{len(stale)} finished runs have other settings or recipes now; they are trained again", flush=True)
    bar = tqdm(total=total, initial=total - len(todo) - len(bench.seeds) * len(tuned_groups),
               desc="collapse runs", disable=not progress, mininterval=2.0, dynamic_ncols=True)  # fmt: skip
    started = 0
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
            if all(read_result(out, r, bench) is not None for r in firsts):
                value, scores = select(bench, out, task, method)
                selections[key] = {"value": value, "scores": [[v, s] for s, v in scores]}
                write_json(out / SELECTION, selections)
                for seed in bench.seeds:
                    run = Run(task, method, value, seed)
                    if run in fixed:  # a β-sweep run, counted once in the bar's total, not twice
                        bar.total -= 1
                        bar.refresh()
                        continue
                    if read_result(out, run, bench) is None:
                        new.append(run)
                    else:
                        bar.update(1)
        return new

    todo = sorted(todo + followups(), key=priority)
    ctx = get_context("spawn")
    with ProcessPoolExecutor(bench.workers, mp_context=ctx, initializer=init_worker, initargs=(bench.threads,),
                             max_tasks_per_child=20) as pool:  # fmt: skip
        running: dict[Future, Run] = {}
        try:
            while todo or running:
                while todo and len(running) < bench.workers and (max_runs is None or started < max_runs):
                    run = todo.pop(0)
                    running[pool.submit(_execute, bench, str(out), run, bases.get(run.task, {}))] = run
                    started += 1
                if not running:
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    run = running.pop(fut)
                    try:
                        fut.result()
                        _record(out, run, None, t_start)
                    except Exception as e:  # keep going; the report lists failed runs
                        failures.append(str(e).splitlines()[0])
                        _record(out, run, failures[-1], t_start)
                        print(f"\nrun failed: {e}", flush=True)
                    bar.update(1)
                todo = sorted(todo + followups(), key=priority)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    bar.close()
    return {"selections": selections, "failures": failures, "stopped_early": bool(todo), "runs": bar.total}
