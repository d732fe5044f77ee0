"""The deadline pool behind the math and SQL verifiers: per-item deadlines, dead workers, order of results.

The pool runs the builtin ``eval`` on payload strings, so one pool can succeed, raise, hang and crash on demand.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from rlvr_div.rewards.workers import DeadlinePool

DEADLINE = 1.0


@pytest.fixture(scope="module")
def pool():
    with DeadlinePool(eval, workers=2, deadline=DEADLINE, memory_mb=1024) as p:
        p.run(["0"])  # start the workers outside the timed tests
        yield p


def test_outcomes_are_in_order_and_typed(pool: DeadlinePool) -> None:
    payloads = ["1 + 1", "1 / 0", "__import__('time').sleep(30)", "__import__('os')._exit(3)", "'ok'"]
    t0 = time.monotonic()
    out = pool.run(payloads)
    elapsed = time.monotonic() - t0
    assert [s for s, _ in out] == ["ok", "error", "timeout", "died", "ok"]
    assert out[0][1] == 2 and out[4][1] == "ok"
    assert "ZeroDivisionError" in out[1][1]
    assert elapsed < DEADLINE + 1.5, elapsed  # the hanging item costs one deadline, not 30 s
    assert pool.run(["2 * 21"]) == [("ok", 42)]  # replacements answer


def test_deadline_is_per_item_not_per_chunk() -> None:
    # 32 items of 0.1 s on 2 workers go out in chunks of 4 (0.4 s of work each), above the 0.35 s deadline;
    # every single item is well below it, so none may time out.
    with DeadlinePool(eval, workers=2, deadline=0.35) as p:
        assert p.run(["__import__('time').sleep(0.1) or 7"] * 32) == [("ok", 7)] * 32
        assert p.stats["timeouts"] == 0


def test_many_items_keep_order(pool: DeadlinePool) -> None:
    payloads = [f"{i} * {i}" for i in range(500)]
    assert pool.run(payloads) == [("ok", i * i) for i in range(500)]


def test_worker_killed_from_outside_is_replaced(pool: DeadlinePool) -> None:
    restarts = pool.stats["restarts"]
    os.kill(pool.pids()[0], signal.SIGKILL)
    time.sleep(0.1)
    assert pool.run([f"{i} + 1" for i in range(20)]) == [("ok", i + 1) for i in range(20)]
    assert pool.stats["restarts"] > restarts


def test_interrupted_run_leaves_a_usable_pool(pool: DeadlinePool) -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run(["__import__('time').sleep(0.8) or 1"] * 4)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert pool.run([f"{i}" for i in range(10)]) == [("ok", i) for i in range(10)]  # no stale answers


def test_memory_bomb_fails_inside_the_worker(pool: DeadlinePool) -> None:
    (status, value), after = pool.run(["bytearray(4 * 1024 ** 3)", "3"])
    assert status in ("error", "died") and after == ("ok", 3)


def test_pool_pickles_without_workers_and_restarts_after_close() -> None:
    p = DeadlinePool(eval, workers=1, deadline=2.0)
    assert p.run(["1"]) == [("ok", 1)]
    clone = pickle.loads(pickle.dumps(p))
    assert clone.pids() == [] and clone.deadline == 2.0
    p.close()
    assert p.pids() == []
    assert p.run(["2"]) == [("ok", 2)]
    p.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        DeadlinePool(eval, deadline=0)
    with pytest.raises(ValueError):
        DeadlinePool(eval, workers=0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_no_orphans_when_the_parent_is_killed() -> None:
    """A worker stuck on a hostile item and its zygote die with the process that owns the pool."""
    code = (
        "import sys, threading, rlvr_div.rewards.workers as w\n"
        "p = w.DeadlinePool(eval, workers=1, deadline=1000)\n"
        "p.run(['0'])\n"
        "print(w._zygote.proc.pid, p.pids()[0], flush=True)\n"
        "p.run(['__import__(\"time\").sleep(1000)'])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        zygote, worker = (int(x) for x in proc.stdout.readline().split())
        assert _alive(zygote) and _alive(worker)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while (_alive(zygote) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(zygote) and not _alive(worker)
