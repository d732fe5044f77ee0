"""Worker processes with a hard per-item deadline, shared by the math and SQL verifiers.

Verifying a model's output means running code on hostile input: sympy on ``\\boxed{9^{9^{9^{9}}}}``, SQLite on an
endless recursive CTE. In-process timeouts cannot stop everything (``signal.alarm``, which math-verify uses, never
interrupts a long C call such as a big-integer power, and it only works in the main thread), so verification runs in
worker processes and the parent enforces the deadline: a worker that has not answered an item ``deadline`` seconds
after starting it is killed (SIGKILL) and replaced, the item is reported as ``"timeout"``, and the rest of the batch
goes on. A worker that dies (segfault, out of memory) is replaced the same way and its item reported as ``"died"``.

Workers are forked from a *zygote*: a fresh interpreter, started once per process, that has ``math_verify`` and
``sqlite3`` imported and does nothing but fork. Replacing a killed worker therefore costs milliseconds, and a worker
never inherits the state of a training process (CUDA, threads, a heavy ``__main__``), unlike ``fork`` from the
caller or multiprocessing's ``spawn``/``forkserver``, which re-import the main module in every child. Items are sent
in small chunks and answered one by one, so the deadline holds per item while the pipe round trip is paid per chunk.
A batch may also have an overall time ``budget``: when it runs out, the items still queued or in flight are reported
as ``"budget"`` (the busy workers are killed and replaced), so many hostile items cost one budget, not one deadline
each.
The zygote exits when its parent does (its control socket closes) and, on Linux, takes its workers with it
(``PR_SET_PDEATHSIG``), so no orphan keeps spinning on a hostile input.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

logger = logging.getLogger(__name__)

# Modules the zygote imports once, so that forked workers start warm.
PRELOAD = ("math_verify", "sqlite3", "rlvr_div.rewards.math", "rlvr_div.rewards.sql")
# (module, function) run once in the zygote after preloading, to warm caches that every worker then inherits.
WARMUPS = (("rlvr_div.rewards.math", "warm_up"),)
START_TIMEOUT_S = 120.0
MAX_CHUNK = 32

Outcome = tuple[str, Any]
"""``(status, value)``: status ``"ok"`` (value = the function's result), ``"error"`` (value = the exception as
text), ``"timeout"`` (the worker overran the deadline and was killed), ``"died"`` (the worker process died) or
``"budget"`` (the batch's time budget ran out before the item was answered)."""


def default_workers() -> int:
    """One worker per CPU core this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _limit_resources(memory_mb: int | None) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _worker_main(conn: Connection, func: Callable[[Any], Any], memory_mb: int | None) -> None:
    """Worker loop: receive a chunk of payloads, answer each with one ``(status, value)`` message."""
    _limit_resources(memory_mb)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for payload in chunk:
            try:
                out: Outcome = ("ok", func(payload))
            except BaseException as e:  # noqa: B036 - math-verify's TimeoutException derives from BaseException
                out = ("error", f"{type(e).__name__}: {e}"[:300])
            try:
                conn.send(out)
            except Exception as e:  # an unpicklable result must not kill the worker
                conn.send(("error", f"cannot send result: {type(e).__name__}"))


def _zygote_main(control_fd: int) -> None:
    """The zygote: preload, then fork one worker per request ``(func, memory_mb)`` + a socket fd; reply its pid.

    It exits when the parent closes the control socket (or dies); its workers then die too (``PR_SET_PDEATHSIG``,
    set in each worker, fires on the death of the zygote's only thread)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # dead workers are reaped by the kernel
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    for module, function in WARMUPS:
        try:
            getattr(sys.modules[module], function)()
        except Exception:  # a warm-up is an optimisation only
            pass
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            msg, fds = b"", []
        if not msg or not fds:
            os._exit(0)  # the parent is gone
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _die_with_parent()
                func, memory_mb = pickle.loads(msg)
                _worker_main(Connection(fds[0]), func, memory_mb)
            except BaseException:  # noqa: B036
                code = 1
            os._exit(code)
        os.close(fds[0])
        control.sendall(struct.pack("q", pid))


class _Zygote:
    """Parent-side handle of the zygote process (one per process, started on first use, restarted if it died)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = (
            f"import sys; sys.path[:] = {sys.path!r}; "
            f"from rlvr_div.rewards.workers import _zygote_main; _zygote_main({theirs.fileno()})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, close_fds=True
        )
        theirs.close()
        self.sock = ours

    def fork(self, func: Callable[[Any], Any], memory_mb: int | None) -> tuple[int, Connection]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.sock, [pickle.dumps((func, memory_mb))], [theirs.fileno()])
            reply = self.sock.recv(8)
        finally:
            theirs.close()
        if len(reply) != 8:
            ours.close()
            raise OSError("the verifier zygote process is gone")
        return struct.unpack("q", reply)[0], Connection(ours.detach())

    def alive(self) -> bool:
        return self.proc.poll() is None


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _fork_worker(func: Callable[[Any], Any], memory_mb: int | None) -> tuple[int, Connection]:
    global _zygote
    with _zygote_lock:
        for attempt in range(2):
            if _zygote is None or not _zygote.alive():
                _zygote = _Zygote()
            try:
                return _zygote.fork(func, memory_mb)
            except OSError:
                if attempt:
                    raise
                _zygote = None
    raise AssertionError("unreachable")


class _Worker:
    """One worker process and the parent's view of it: the items it holds and when it started the current one."""

    def __init__(self, func: Callable[[Any], Any], memory_mb: int | None) -> None:
        self.pid, self.conn = _fork_worker(func, memory_mb)
        try:  # a pidfd names this process even after it exits, so a kill can never hit a recycled pid
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.ready = False
        self.started = time.monotonic()
        self.items: deque[int] = deque()  # indices of the items sent and not yet answered, in order
        self.item_start = 0.0

    def close(self) -> None:
        """Close the connection: an idle worker then exits by itself."""
        self.conn.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def kill(self) -> None:
        """SIGKILL the worker (it is busy: overrunning its deadline, or interrupted mid-batch) and close."""
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:  # already gone
            pass
        self.close()

    def stop(self) -> None:
        if self.items:
            self.kill()
        else:
            self.close()


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        w.stop()
    workers.clear()


class DeadlinePool:
    """``run(payloads)`` applies ``func`` to every payload in ``workers`` processes, each item under a hard
    ``deadline`` (seconds from the moment a worker starts it); returns one :data:`Outcome` per payload, in order.

    ``func`` must be picklable (a module-level function or a ``functools.partial`` of one). Workers start on the
    first call and live until :meth:`close` (or garbage collection / interpreter exit). ``memory_mb`` caps each
    worker's address space (``RLIMIT_AS``), so a memory bomb fails inside the worker instead of the machine.
    """

    def __init__(
        self,
        func: Callable[[Any], Any],
        workers: int | None = None,
        deadline: float = 5.0,
        memory_mb: int | None = 2048,
    ) -> None:
        if deadline <= 0:
            raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
        self.func = func
        self.n_workers = workers if workers is not None else default_workers()
        if self.n_workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.n_workers}")
        self.deadline = float(deadline)
        self.memory_mb = memory_mb
        self.stats = {"items": 0, "timeouts": 0, "deaths": 0, "restarts": 0, "over_budget": 0}
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)

    # -- lifecycle
    def _spawn(self) -> _Worker:
        return _Worker(self.func, self.memory_mb)

    def _ensure_started(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())

    def _replace(self, w: _Worker, dead: bool = False) -> None:
        """Put a new worker in ``w``'s place, killing ``w`` unless it is known to be ``dead``."""
        if dead:
            w.close()
        else:
            w.kill()
        self._workers[self._workers.index(w)] = self._spawn()
        self.stats["restarts"] += 1

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [w.pid for w in self._workers]

    def close(self) -> None:
        """Stop all workers; a later :meth:`run` starts new ones."""
        with self._lock:
            _shutdown(self._workers)

    def __enter__(self) -> DeadlinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:  # a pickled pool (e.g. a reward sent to a subprocess) starts afresh
        state = {k: v for k, v in self.__dict__.items() if k not in ("_workers", "_lock", "_finalizer")}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._workers = []
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)

    # -- work
    def run(self, payloads: Sequence[Any], budget: float | None = None) -> list[Outcome]:
        """One outcome per payload; never raises for a bad item (only when workers cannot start at all).
        ``budget``: seconds for the whole batch, after which every unanswered item is ``("budget", None)``."""
        if budget is not None and not budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {budget}")
        n = len(payloads)
        results: list[Outcome | None] = [None] * n
        if n == 0:
            return []
        with self._lock:
            self._ensure_started()
            try:
                self._run(payloads, results, budget)
            except BaseException:  # e.g. KeyboardInterrupt: busy workers hold stale items, so they go
                for w in [w for w in self._workers if w.items]:
                    w.kill()
                    self._workers.remove(w)
                raise
            self.stats["items"] += n
        return results  # type: ignore[return-value]

    def _run(self, payloads: Sequence[Any], results: list[Outcome | None], budget: float | None = None) -> None:
        queue: deque[int] = deque(range(len(payloads)))
        chunk = max(1, min(MAX_CHUNK, len(payloads) // (4 * self.n_workers)))
        end = time.monotonic() + budget if budget is not None else None
        while queue or any(w.items for w in self._workers):
            now = time.monotonic()
            if end is not None and now >= end:
                self._out_of_budget(queue, results)
                return
            for w in self._workers:  # hand work to idle ready workers
                if w.ready and not w.items and queue:
                    take = [queue.popleft() for _ in range(min(chunk, len(queue)))]
                    try:
                        w.conn.send([payloads[i] for i in take])
                    except (OSError, ValueError):  # the worker died while idle: retry on its replacement
                        queue.extendleft(reversed(take))
                        self._replace(w, dead=True)
                        continue
                    w.items.extend(take)
                    w.item_start = now
            waits = [w.item_start + self.deadline - now for w in self._workers if w.items]
            waits += [w.started + START_TIMEOUT_S - now for w in self._workers if not w.ready]
            if end is not None:
                waits.append(end - now)
            timeout = max(0.0, min(waits)) if waits else None
            ready = wait([w.conn for w in self._workers], timeout=timeout)
            now = time.monotonic()
            for w in list(self._workers):
                if w.conn in ready:  # drain everything this worker has sent
                    while self._receive(w, results, queue, now) and w.items and w.conn.poll():
                        pass
            for w in list(self._workers):
                if w.items and now - w.item_start >= self.deadline:
                    results[w.items.popleft()] = ("timeout", None)
                    self.stats["timeouts"] += 1
                    queue.extendleft(reversed(w.items))
                    w.items.clear()
                    self._replace(w)
                elif not w.ready and now - w.started > START_TIMEOUT_S:
                    raise RuntimeError(f"a verifier worker did not start within {START_TIMEOUT_S:.0f} s")

    def _out_of_budget(self, queue: deque[int], results: list[Outcome | None]) -> None:
        """The batch's budget is spent: its queued items and those in flight (their workers are killed and
        replaced) are ``("budget", None)``."""
        stopped = list(queue)
        queue.clear()
        for w in list(self._workers):
            if w.items:
                stopped += w.items
                w.items.clear()
                self._replace(w)
        for i in stopped:
            results[i] = ("budget", None)
        self.stats["over_budget"] += len(stopped)

    def _receive(self, w: _Worker, results: list[Outcome | None], queue: deque[int], now: float) -> bool:
        """Read one message from ``w``; False when the worker turned out dead (and was replaced)."""
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            if not w.ready:
                raise RuntimeError(f"a verifier worker died while starting (pid {w.pid}); see its stderr") from None
            if w.items:
                results[w.items.popleft()] = ("died", None)
                self.stats["deaths"] += 1
                queue.extendleft(reversed(w.items))
                w.items.clear()
            self._replace(w, dead=True)
            return False
        if not w.ready:
            w.ready = True
            return True
        results[w.items.popleft()] = msg
        w.item_start = now
        return True
