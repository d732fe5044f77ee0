"""The real-math study's stages (:mod:`collapse_bench.real_math_runs`): how an ``rlvr-div`` command runs (a child
process, or in this process), the wall time of each stage (``timing.json``), and what a finished evaluation leaves
(the per-problem counts read back from its ``samples.jsonl``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from eval.estimators import pass_at_k
from eval.records import RESULTS_FILE, read_samples, write_json
from rlvr_div.errors import ConfigError
from rlvr_div.run_dir import METRICS

Executor = Callable[[str, list[str], Path], None]


class StageFailed(RuntimeError):
    """An ``rlvr-div`` command exited non-zero (one line naming its log)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the child gets SIGTERM when the driver dies (a killed driver leaves no training behind)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def subprocess_executor(command: str, argv: list[str], log: Path) -> None:
    """``python -m rlvr_div COMMAND ARGV`` in a child process, its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ rlvr-div {command} {' '.join(argv)}\n")
        f.flush()
        code = subprocess.run([sys.executable, "-m", "rlvr_div", command, *argv], stdout=f, stderr=subprocess.STDOUT,
                              preexec_fn=_die_with_parent if os.name == "posix" else None).returncode  # fmt: skip
    if code:
        raise StageFailed(f"rlvr-div {command} exited with code {code} (log: {log})")


def in_process_executor(command: str, argv: list[str], log: Path) -> None:
    """The same command in this process (``rlvr_div.cli.main``; the tests, and ``--in-process``)."""
    from rlvr_div.cli import main

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ rlvr-div {command} {' '.join(argv)}", flush=True)
        code = main([command, *argv])
    if code:
        raise StageFailed(f"rlvr-div {command} exited with code {code} (log: {log})")


# --------------------------------------------------------------------------------------------- wall time


def boot_id() -> str | None:
    """This boot of this machine (Linux's random boot id), or None where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


class Timing:
    """A directory's stage wall times in ``timing.json``: per stage the seconds of finished attempts and their count,
    and the attempts cut short (``interrupted``, with the seconds from their start to the last file they wrote)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"stages": {}}

    def _entry(self, data: dict[str, Any], stage: str) -> dict[str, Any]:
        return data["stages"].setdefault(stage, {"seconds": 0.0, "attempts": 0, "interrupted": 0,
                                                 "interrupted_seconds": 0.0})  # fmt: skip

    def recover(self, watch: Path) -> None:
        """An attempt that was running when its driver died: counted as interrupted, with the time from its start to
        the newest file under ``watch`` (a lower bound of what it ran) while the machine has not restarted since it
        started (same boot id). After a restart, or on another machine (a checkout's files are as new as the
        checkout), file times say nothing of the attempt: it is counted in ``interrupted_unknown`` with no seconds."""
        data = self.read()
        running = data.pop("running", None)
        if running is None:
            return
        entry = self._entry(data, running["stage"])
        entry["interrupted"] += 1
        if running.get("boot") is not None and running.get("boot") == boot_id():
            newest = max((p.stat().st_mtime for p in watch.rglob("*") if p.is_file()), default=running["started"])
            entry["interrupted_seconds"] += max(0.0, newest - running["started"])
        else:
            entry["interrupted_unknown"] = entry.get("interrupted_unknown", 0) + 1
        write_json(self.path, data)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.read()
        data["running"] = {"stage": name, "started": time.time(), "boot": boot_id()}
        write_json(self.path, data)
        t0 = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            data = self.read()
            data.pop("running", None)
            entry = self._entry(data, name)
            if ok:
                entry["seconds"] += time.perf_counter() - t0
                entry["attempts"] += 1
            else:
                entry["interrupted"] += 1
                entry["interrupted_seconds"] += time.perf_counter() - t0
            write_json(self.path, data)


# --------------------------------------------------------------------------------------------- records


def eval_done(out_dir: Path, name: str, expected: dict[str, Any]) -> bool:
    """Whether ``out_dir/name`` holds a finished evaluation (its ``results.json``) made with ``expected``'s
    settings."""
    try:
        config = json.loads((out_dir / name / RESULTS_FILE).read_text())["config"]
    except (OSError, ValueError, KeyError):
        return False
    return all(config.get(k) == v for k, v in expected.items())


def _distinct(record: dict[str, Any], key: str) -> int:
    return int(record.get(key, 0))


def problem_counts(samples: Path) -> dict[str, Any]:
    """Per problem, in index order, from an evaluation's ``samples.jsonl``: correct counts ``c`` (of ``n`` each), the
    distinct correct completions (whitespace-normalised: solution lines) and distinct correct extracted answers; and
    pass@k at every power of two up to n (a summary; the report recomputes from ``c``)."""
    records = read_samples(samples)
    recs = [records[i] for i in sorted(records)]
    ns = {int(r["n"]) for r in recs}
    if len(ns) != 1:
        raise ConfigError(f"{samples} mixes sample counts {sorted(ns)}")
    n = ns.pop()
    c = [int(r["c"]) for r in recs]
    ks = [k for k in (2**i for i in range(n.bit_length())) if k <= n]
    pk = pass_at_k([n] * len(c), c, ks).mean(axis=0)
    tokens = [t for r in recs for t in r.get("num_tokens", [])]
    reasons = [x for r in recs for x in r.get("finish_reasons", [])]
    return {
        "n": n, "problems": len(c), "c": c,
        "pass_at_k": {str(k): float(v) for k, v in zip(ks, pk)},
        "distinct_correct_completions": [_distinct(r, "distinct_correct_completions") for r in recs],
        "distinct_correct_answers": [_distinct(r, "distinct_correct_answers") for r in recs],
        "mean_completion_tokens": float(np.mean(tokens)) if tokens else None,
        "truncated_fraction": float(np.mean([x == "length" for x in reasons])) if reasons else None,
    }  # fmt: skip


def path_point(step: int, counts: dict[str, Any], problems: int | None) -> dict[str, Any]:
    """A held-out path point: the first ``problems`` problems' correct counts (all when None)."""
    c = counts["c"] if problems is None else counts["c"][:problems]
    return {"step": step, "n": counts["n"], "c": c}


def train_rewards(directory: Path) -> list[list[float]]:
    """``[step, mean reward]`` of each logged training step (``metrics.jsonl``)."""
    out = []
    path = directory / METRICS
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "reward" in rec and "step" in rec:
            out.append([int(rec["step"]), float(rec["reward"])])
    return out


def machine() -> dict[str, Any]:
    """Where the study runs: the processor, its cores and the platform."""
    import platform

    return {"processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "platform": platform.platform()}  # fmt: skip
