"""The study engine: what every study of this package shares (the collapse grid of :mod:`collapse_bench.runs`, the β
and real-LM studies of :mod:`collapse_bench.beta_study`).

- **State.** A study directory's state file holds its configuration, the code commit of each invocation, the wall
  time of each invocation and the runs that failed (until they succeed); a directory holding another configuration
  is refused in one line.
- **Results.** A run lives in ``runs/<key>/``; its ``result.json`` is written last and read back only while the
  identity it records is the run's current identity (a run whose settings changed is trained again).
- **Workers.** Runs train in spawned processes with a fixed torch thread count; a worker records the code it
  imported and exits when its study dies; each run's console output goes to ``logs/<key>.log``.
- **Scheduling.** A run starts as soon as it is ready and a worker is free; a failed run is reported in one line
  naming its log and the others go on. A study holds its directory's lock while it writes there.
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
from collections.abc import Callable, Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from eval.records import write_json
from rlvr_div.errors import ConfigError
from rlvr_div.runs.run_lock import clear_directory, directory_lock

RESULT = "result.json"

# what a run's outcome depends on in a checkout; bench/results/ is excluded because the studies write into it (it is
# committed, so writing there must not mark the code dirty)
CODE_PATHS = ("rlvr_div", "eval", "collapse_bench", "recipes", "bench", ":(exclude)bench/results", "pyproject.toml")

R = TypeVar("R", bound=Hashable)


# --------------------------------------------------------------------------------------------- code and state


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


def open_state(out: Path, name: str, config: dict[str, Any], fresh: bool, fingerprint: str | None = None,
               what: str = "study") -> dict[str, Any]:  # fmt: skip
    """Start or resume the study in ``out`` (cleared first when ``fresh``): its state file ``name`` records this
    invocation's code commit and starts its wall-time entry. With ``fingerprint``, a directory holding another
    fingerprint is refused in one line and the first configuration is kept; without one, ``config`` replaces the
    recorded configuration."""
    if fresh:
        clear_directory(out)
    path = out / name
    commit = code_commit()
    if path.is_file():
        state = json.loads(path.read_text())
        if fingerprint is not None and state.get("fingerprint") != fingerprint:
            raise ConfigError(f"{out} holds a {what} with other settings or base model; pass --fresh or another --out")
        if fingerprint is None:
            state["config"] = config
    else:
        state = {"config": config, "commits": []}
        if fingerprint is not None:
            state = {"fingerprint": fingerprint, **state}
    if commit not in state["commits"]:
        state["commits"].append(commit)
    state.setdefault("invocations", []).append(0.0)
    out.mkdir(parents=True, exist_ok=True)
    write_json(path, state)
    return state


def record_run(out: Path, name: str, key: str, failure: str | None, t_start: float) -> None:
    """After each finished run: this invocation's wall time so far, and the run's failure (or its clearing) in the
    state file ``name`` (a failure stays recorded until the run succeeds)."""
    path = out / name
    state = json.loads(path.read_text())
    state["invocations"][-1] = time.time() - t_start
    failed = state.get("failures")
    if not isinstance(failed, dict):  # state files of older versions held the last invocation's failures as a list
        failed = {}
    if failure is None:
        failed.pop(key, None)
    else:
        failed[key] = failure
    state["failures"] = failed
    write_json(path, state)


def run_and_report(out: Path, what: str, state: str, report_only: bool, run: Callable[[], object],
                   report: Callable[[], Path]) -> int:  # fmt: skip
    """A study command's body: under ``out``'s lock (:func:`rlvr_div.runs.run_lock.directory_lock`: one writer per
    directory, a second fails in one line naming the holder's PID), ``run`` the study (not with ``report_only``,
    which needs a study there: its ``state`` file), then write and name its ``report``."""
    if report_only and not (out / state).is_file():
        raise ConfigError(f"{out} holds no {what} to report on")
    with directory_lock(out, what, "--out"):
        if not report_only:
            run()
        path = report()
    print(f"report: {path}")
    return 0


# --------------------------------------------------------------------------------------------- results and logs


def run_dir(out: Path, key: str) -> Path:
    """A run's directory, ``runs/<key>``."""
    return out / "runs" / key


def fresh_run_dir(out: Path, key: str) -> Path:
    """A run's directory, emptied: an unfinished run starts over (a run is the unit of resumption)."""
    directory = run_dir(out, key)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    return directory


def train_or_raise(argv: list[str], callbacks: list[Any], key: str) -> None:
    """``rlvr-div train`` with ``argv`` and the trainer ``callbacks``; a non-zero exit raised as one line."""
    from rlvr_div.train import main as train

    code = train(argv, callbacks=callbacks)
    if code:
        raise RuntimeError(f"training {key} exited with code {code}")


def read_result(out: Path, key: str, identity: str | None = None) -> dict[str, Any] | None:
    """The run's ``result.json``; with ``identity``, None also when the result records another identity (the run's
    settings or recipe changed since: it is trained again)."""
    path = run_dir(out, key) / RESULT
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if identity is not None and result.get("identity") != identity:
        return None
    return result


def log_path(out: Path, key: str) -> Path:
    """Where a run's console output goes, ``logs/<key>.log``."""
    return out / "logs" / f"{key}.log"


def logged(out: Path, key: str, fn: Callable[..., Any], *args: Any, append: bool = False) -> Any:
    """``fn(*args)`` with its console output (progress bars, warnings, a traceback) in the run's log (after what it
    holds with ``append``, a resumed run's); a failure is raised again as one line naming the run and its log."""
    log = log_path(out, key)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a" if append else "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            return fn(*args)
        except Exception as e:  # reported by the study, with the run's name and its log
            traceback.print_exc()
            raise RuntimeError(f"{key}: {type(e).__name__}: {e} (log: {log})") from None


# --------------------------------------------------------------------------------------------- workers


_WORKER_CODE = "unknown"


def init_worker(threads: int) -> None:
    """A study's worker process: its threads, the code state it imported (:func:`worker_code`, recorded in each of
    its results: the checkout may move on while a study runs), and a watch that ends it when the process that
    started it is gone (a study killed with SIGTERM or SIGKILL would otherwise leave its worker training beside
    whatever runs next)."""
    import torch

    global _WORKER_CODE
    _WORKER_CODE = code_commit()
    torch.set_num_threads(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def worker_code() -> str:
    """The code state this worker process imported (:func:`init_worker`; "unknown" outside a worker)."""
    return _WORKER_CODE


def _exit_with_parent(parent: int) -> None:
    """End this process as soon as its parent ``parent`` is gone (it is then re-parented; looked at every 2 s)."""
    while os.getppid() == parent:
        time.sleep(2.0)
    os._exit(1)


def run_pool(workers: int, threads: int, task: Callable[[R], tuple[Callable[..., Any], tuple[Any, ...]]],
             ready: Callable[[], list[R]], done: Callable[[R, str | None], None],
             max_runs: int | None = None, max_tasks_per_child: int | None = None) -> int:  # fmt: skip
    """Train runs in ``workers`` spawned processes (:func:`init_worker` with ``threads``) until none is ready.

    ``ready()`` lists the runs that may start now, first first (asked again after every finished run: a finished run
    may make others ready); a run starts once. ``task(run)`` is the picklable ``(function, args)`` a worker calls.
    ``done(run, failure)`` is called in this process after each run (``failure`` its first line, or None); a failure
    never stops the others. ``max_runs`` stops starting runs after that many. Returns how many runs started."""
    started: set[R] = set()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_worker,
                             initargs=(threads,), max_tasks_per_child=max_tasks_per_child) as pool:  # fmt: skip
        running: dict[Future, R] = {}

        def submit() -> None:
            for run in ready():
                if len(running) >= workers or (max_runs is not None and len(started) >= max_runs):
                    return
                if run in started:
                    continue
                fn, args = task(run)
                running[pool.submit(fn, *args)] = run
                started.add(run)

        try:
            submit()
            while running:
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in finished:
                    run = running.pop(fut)
                    try:
                        fut.result()
                        done(run, None)
                    except Exception as e:  # noqa: BLE001 - one line per failed run, the others go on
                        done(run, str(e).splitlines()[0])
                submit()
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return len(started)
