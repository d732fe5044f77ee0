"""The study engine (collapse_bench.engine): state files, results read at their identity, and the worker pool's
scheduling (ready runs start once, a failed run never stops the others, ``max_runs`` stops early)."""

import json
import os
from pathlib import Path

import pytest

from collapse_bench.engine import RESULT, log_path, logged, open_state, read_result, record_run, run_dir, run_pool
from rlvr_div.errors import ConfigError


def _write(out: str, key: str, fail: bool) -> str:
    """A stand-in run (in a worker): writes its result, or fails with a two-line message."""
    if fail:
        raise ValueError(f"{key} broke\nsecond line")
    directory = Path(out) / "runs" / key
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RESULT).write_text(json.dumps({"identity": key.upper(), "pid": os.getpid()}))
    return key


def test_the_pool_starts_each_ready_run_once_and_goes_on_after_a_failure(tmp_path):
    order: list[tuple[str, str | None]] = []
    chain = {"b": "a", "c": "b"}  # c waits for b, b for a; "bad" fails

    def ready() -> list[str]:
        finished = {run for run, failure in order if failure is None}
        return [r for r in ("a", "b", "c", "bad") if chain.get(r) is None or chain[r] in finished]

    def task(run: str):
        return _write, (str(tmp_path), run, run == "bad")

    started = run_pool(1, 1, task, ready, lambda run, failure: order.append((run, failure)))
    assert started == 4
    assert [run for run, _ in order] == ["a", "b", "c", "bad"]  # first listed first once ready, each once
    assert dict(order)["bad"] == "bad broke"  # the failure's first line; the runs after it still ran
    assert read_result(tmp_path, "c", "C")["identity"] == "C"
    assert read_result(tmp_path, "c", "other") is None and read_result(tmp_path, "missing") is None
    order.clear()
    assert run_pool(1, 1, task, lambda: ["a", "b"], lambda run, f: order.append((run, f)), max_runs=1) == 1
    assert order == [("a", None)]


def test_state_refuses_another_fingerprint_and_keeps_failures_until_a_run_succeeds(tmp_path, monkeypatch):
    monkeypatch.setattr("collapse_bench.engine.code_commit", lambda: "abc")
    state = open_state(tmp_path, "s.json", {"x": 1}, fresh=False, fingerprint="f1", what="grid")
    assert state["commits"] == ["abc"] and state["invocations"] == [0.0]
    with pytest.raises(ConfigError, match=r"holds a grid with other settings or base model; pass --fresh"):
        open_state(tmp_path, "s.json", {"x": 2}, fresh=False, fingerprint="f2", what="grid")
    again = open_state(tmp_path, "s.json", {"x": 2}, fresh=False, fingerprint="f1")
    assert again["config"] == {"x": 1} and again["invocations"] == [0.0, 0.0]  # a fingerprinted config is kept
    record_run(tmp_path, "s.json", "r1", "r1: broke", 0.0)
    assert json.loads((tmp_path / "s.json").read_text())["failures"] == {"r1": "r1: broke"}
    record_run(tmp_path, "s.json", "r1", None, 0.0)
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["failures"] == {} and saved["invocations"][-1] > 0
    plain = open_state(tmp_path / "p", "s.json", {"x": 1}, fresh=False)
    assert "fingerprint" not in plain and open_state(tmp_path / "p", "s.json", {"x": 3}, False)["config"] == {"x": 3}
    assert open_state(tmp_path, "s.json", {"x": 4}, fresh=True, fingerprint="f9")["config"] == {"x": 4}


def test_a_run_logs_its_output_and_fails_in_one_line_naming_its_log(tmp_path):
    def noisy() -> int:
        print("progress")
        return 7

    assert logged(tmp_path, "t/m/seed1", noisy) == 7
    assert log_path(tmp_path, "t/m/seed1").read_text() == "progress\n"
    assert run_dir(tmp_path, "t/m/seed1") == tmp_path / "runs" / "t" / "m" / "seed1"

    def broken() -> None:
        raise KeyError("k")

    with pytest.raises(RuntimeError, match=r"^t/x: KeyError: 'k' \(log: .*t/x\.log\)$"):
        logged(tmp_path, "t/x", broken)
    assert "Traceback" in log_path(tmp_path, "t/x").read_text()
