"""One writer per output directory: a training run, an evaluation (or a benchmark) holds ``.<name>.lock`` beside its
directory while it writes there, so a second copy on the same directory stops in one line naming the first's PID
instead of duplicating its ``metrics.jsonl`` lines or ``samples.jsonl`` records.

The lock is an OS-level lock (:class:`filelock.FileLock`, ``flock`` on POSIX): the kernel releases it when its process
ends, however it ends, so a lock left by a killed process is simply taken. The lock file lies outside the directory
(starting over cannot delete it); ``.<name>.pid.lock`` beside it names the holder (PID, host, what it is) while the
lock is held. Where the directory's parent is not writable and the directory exists, both files go inside it instead
(``.rlvr-div.lock``). Re-entrant within a thread of one process.

The holder removes its lock file when it lets go, while it still holds the lock, and only when the file at the lock's
path is the one it holds (a ``flock`` lock, not filelock's fallback for file systems without one); a writer that
opened the file just before it was removed finds, once it has the lock, that the path no longer names its file and
takes the lock again on the new one. A process that is killed leaves its file, which the next writer takes.

Before the lock is taken, the directory must be writable (:func:`check_writable`): a file given as the directory,
or a directory (or, not made yet, its nearest existing parent) where a probe file cannot be written or whose device
has less than :data:`rlvr_div.runs.disk_space.MIN_FREE_BYTES` free, is one line before anything is created or loaded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.runs.disk_space import check_free_space, nearest_existing

_LOCKS: dict[str, Any] = {}  # one FileLock per lock path in this process: flock is per open file, not per process
_INSIDE = ".rlvr-div"  # the lock's stem inside the directory when its parent is not writable
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def lock_paths(directory: str | os.PathLike, inside: bool = False) -> tuple[Path, Path]:
    """(lock file, holder file) of ``directory``: beside it, or (``inside``) in it."""
    out = Path(directory).resolve()
    base = out / _INSIDE if inside else out.parent / f".{out.name}"
    return Path(f"{base}.lock"), Path(f"{base}.pid.lock")


def holder(directory: str | os.PathLike, wait: float = 1.0) -> dict[str, Any] | None:
    """What the live holder of ``directory``'s lock wrote about itself (``pid``, ``host``, ``what``), or None. A
    holder writes it just after taking the lock, so a missing or stale entry (a dead PID on this host: a holder that was
    killed) is read again for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        for inside in (False, True):
            entry = _read(lock_paths(directory, inside)[1])
            if entry is not None and _running(entry):
                return entry
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("pid"), int) else None


def _running(entry: dict[str, Any]) -> bool:
    if entry.get("host") != socket.gethostname() or os.name != "posix":
        return True  # cannot tell: another machine's process (or no os.kill(pid, 0) here)
    try:
        os.kill(entry["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    return True


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, what: str, flag: str) -> Iterator[Path]:
    """Hold ``directory``'s lock while the block runs (yields the lock file). ``what`` names this writer ("training
    run", "evaluation"), ``flag`` the option that chose the directory: a second writer gets a one-line
    :class:`ConfigError` naming the holder's PID and what it is; a lock that cannot be created is one line too."""
    from filelock import Timeout

    out = Path(directory).resolve()
    check_writable(out, flag)
    path, pid_path = lock_paths(out)
    try:  # filelock's Timeout is an OSError: caught first
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _acquire(path)
    except Timeout:
        raise ConfigError(_refusal(out, path, what, flag)) from None
    except OSError as e:
        if e.errno not in _UNWRITABLE or not out.is_dir() or path.exists():
            raise ConfigError(f"cannot create the lock {path} beside {flag} {out} ({e.strerror or e}); choose a "
                              f"{flag} whose parent directory is writable") from None  # fmt: skip
        path, pid_path = lock_paths(out, inside=True)  # e.g. a mounted volume under a read-only root
        try:
            lock = _acquire(path)
        except Timeout:
            raise ConfigError(_refusal(out, path, what, flag)) from None
        except OSError as e2:
            raise ConfigError(f"cannot create the lock {path} in {flag} {out} ({e2.strerror or e2})") from None
    try:
        if lock.lock_counter == 1:
            me = {"pid": os.getpid(), "host": socket.gethostname(), "what": what}
            try:
                pid_path.write_text(json.dumps(me) + "\n")
            except OSError as e:
                pid_path.unlink(missing_ok=True)
                fix = "free space or choose another" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "choose another"
                raise ConfigError(f"cannot write {pid_path} beside {flag} {out} ({e.strerror or e}); {fix} "
                                  f"{flag}") from None  # fmt: skip
        yield path
    finally:
        if lock.lock_counter == 1:
            pid_path.unlink(missing_ok=True)  # while still holding it: a next holder's entry is never deleted
            if _same_file(lock, path):  # likewise the lock file: only ours, removed before we let go
                path.unlink(missing_ok=True)
        lock.release()


def check_writable(directory: str | os.PathLike, flag: str) -> None:
    """One-line :class:`ConfigError` when ``directory`` (chosen by option ``flag``) cannot be written: it is a file,
    or it (or, where it does not exist yet, its nearest existing parent) refuses a probe file. A file on the way to a
    directory that does not exist is left to the lock's own line."""
    out = Path(directory).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{flag} {out} is a file, not a directory; choose a directory (it is made if missing)")
    target = nearest_existing(out)
    if not target.is_dir():
        return
    problem = _unwritable(target)
    if problem is not None:
        where = f"{flag} {out}" if target == out else f"{target}, where {flag} {out} would be made,"
        raise ConfigError(f"{where} is not writable ({problem}); choose a writable {flag}")
    check_free_space(out, flag)


def _unwritable(directory: Path) -> str | None:
    """Why a file cannot be written in ``directory`` (None: it can): a probe file created and removed (permissions, a
    read-only file system, a full disk's inode table, an ACL, root on a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".rlvr-div-write-probe-", dir=directory)
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    Path(probe).unlink(missing_ok=True)  # a holder's --fresh may have cleared it already
    return None


def _same_file(lock: Any, path: Path) -> bool | None:
    """Whether ``lock`` holds, by ``flock``, the very file that ``path`` names now; None where that cannot be told
    (no descriptor to compare in this filelock, filelock's soft fallback, not POSIX)."""
    context = getattr(lock, "_context", None)
    fd = getattr(context, "lock_file_fd", None)
    if os.name != "posix" or not isinstance(fd, int) or getattr(context, "soft_fallback", False):
        return None
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False
    except OSError:
        return None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def clear_directory(directory: str | os.PathLike) -> None:
    """Start ``directory`` over (``--fresh``): delete everything in it but the lock files a holder may keep inside
    it (where its parent is not writable), so that starting over never deletes a held lock and lets a second writer
    in."""
    import shutil

    out = Path(directory)
    if not out.is_dir():
        return
    keep = {p.name for p in lock_paths(out, inside=True)}
    for entry in out.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)  # a writer's probe file (check_writable) may be gone already


def _acquire(path: Path) -> Any:
    """Take the lock file ``path`` now or raise :class:`filelock.Timeout` (re-entrant in this process)."""
    from filelock import FileLock, Timeout

    if str(path) not in _LOCKS:
        _LOCKS[str(path)] = FileLock(str(path), timeout=0)
    lock = _LOCKS[str(path)]
    for _ in range(_RETAKES):
        before = _identity(path)
        try:
            lock.acquire()
        except Timeout:
            if before is not None and _identity(path) == before:
                raise
            continue  # the holder removed its file (and let go) meanwhile: try the file there now
        if lock.lock_counter > 1 or _same_file(lock, path) is not False:
            return lock
        lock.release()  # a holder removed the file we opened before it let go: take the lock on the new one
    raise Timeout(str(path))


_RETAKES = 5  # tries when holders come and go while we take the lock


def _refusal(out: Path, path: Path, what: str, flag: str) -> str:
    entry = holder(out) or {}
    if isinstance(entry.get("pid"), int):
        by = f"PID {entry['pid']}"
        if entry.get("host") not in (None, socket.gethostname()):
            by += f" on {entry['host']}"
    else:
        by = "a process that has not recorded its PID"
    return (
        f"{out} is being written by another {entry.get('what') or what} (lock: {path}) held by {by}; wait for it to "
        f"finish or choose another {flag}"
    )
