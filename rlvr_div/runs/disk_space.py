"""Free space on the device a command writes to: checked before anything loads, and a write that runs out of it
ends in one line (issue 60).

- :func:`check_free_space`: one-line :class:`ConfigError` when the file system holding a directory (or, where it
  does not exist yet, its nearest existing parent) has less free space than a command needs: at least
  :data:`MIN_FREE_BYTES` (a lock, a record, a report), and for ``rlvr-div train`` about one checkpoint
  (:func:`checkpoint_bytes`).
- :func:`out_of_space`: whether an exception raised while writing came from a full device: an ``OSError`` with
  ``ENOSPC`` or ``EDQUOT`` anywhere in its chain, a message that says so (safetensors), or torch's serializer failing
  (``inline_container.cc``, whose message names no cause) on a device that is now nearly full.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from rlvr_div.errors import ConfigError

MIN_FREE_BYTES = 16 * 2**20  # what any writing command needs at least: locks, records, reports
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# Adam's two moments in float32 beside the weights: a full fine-tuning checkpoint holds about three copies
FULL_CHECKPOINT_COPIES = 3
_FULL = (errno.ENOSPC, errno.EDQUOT)
_TORCH_WRITE_FAILED = ("inline_container.cc", "PytorchStreamWriter failed", "file write failed")


def nearest_existing(directory: str | os.PathLike) -> Path:
    """``directory``, or its nearest existing parent where it is not made yet."""
    target = Path(directory).expanduser().resolve()
    while not target.exists() and target.parent != target:
        target = target.parent
    return target


def free_bytes(directory: str | os.PathLike) -> int:
    """Free bytes, for an unprivileged writer, on the file system that holds ``directory`` (or would)."""
    return shutil.disk_usage(nearest_existing(directory)).free


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def check_free_space(directory: str | os.PathLike, flag: str, need: int = 0, what: str = "") -> None:
    """One-line ConfigError when the device of ``directory`` (chosen by option ``flag``) has less than
    max(``need``, :data:`MIN_FREE_BYTES`) free; ``what`` says what ``need`` is for."""
    required = max(need, MIN_FREE_BYTES)
    free = free_bytes(directory)
    if free >= required:
        return
    why = f"{what} needs about {_mb(need)}" if need > MIN_FREE_BYTES and what else f"it needs at least {_mb(required)}"
    raise ConfigError(f"{flag} {Path(directory).resolve()} is on a device with {_mb(free)} free; {why}; free space "
                      f"or choose another {flag}")  # fmt: skip


def checkpoint_bytes(model_dir: str | os.PathLike | None, peft: bool) -> int:
    """About the size of one training checkpoint of the model in local directory ``model_dir``: its weight files ×
    :data:`FULL_CHECKPOINT_COPIES` (the weights and Adam's two moments) for full fine-tuning; 0 (only the minimum)
    with LoRA, whose adapter and optimizer state are a small part of the weights, or where the weights are not on
    disk yet (a hub id not downloaded, a tiny base not built)."""
    if peft or model_dir is None or not Path(model_dir).is_dir():
        return 0
    weights = sum(p.stat().st_size for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    return FULL_CHECKPOINT_COPIES * weights


def _chain(e: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return seen


def out_of_space(e: BaseException, directory: str | os.PathLike | None = None) -> bool:
    """Whether ``e`` (raised while writing into ``directory``) comes from a full device: ``ENOSPC``/``EDQUOT`` in its
    chain or "No space left on device" in a message; torch's serializer failure counts when ``directory``'s device
    has less than :data:`MIN_FREE_BYTES` free now (its message gives no cause)."""
    chain = _chain(e)
    if any(isinstance(x, OSError) and x.errno in _FULL for x in chain):
        return True
    messages = " ".join(str(x) for x in chain)
    if "No space left on device" in messages or "Disk quota exceeded" in messages:
        return True
    if directory is not None and any(s in messages for s in _TORCH_WRITE_FAILED):
        try:
            return free_bytes(directory) < MIN_FREE_BYTES
        except OSError:
            return False
    return False


def written_file(e: BaseException) -> str | None:
    """The file an ``OSError`` in ``e``'s chain was writing, if it says."""
    return next((str(x.filename) for x in _chain(e) if isinstance(x, OSError) and x.filename), None)
