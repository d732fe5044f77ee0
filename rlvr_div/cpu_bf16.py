"""Whether this CPU computes bfloat16 natively, so that a bfloat16 forward pass is faster, not slower, than float32.

Native means AMX tiles (``amx_bf16``) or AVX-512 BF16 (``avx512_bf16``) among the CPU's flags: oneDNN then runs
bfloat16 matrix products at several times the float32 rate. Without them (AVX2 machines, many AMD EPYCs) torch
emulates bfloat16 by converting to float32 and back, which costs more than it saves. The flags are read from
``/proc/cpuinfo`` (Linux); elsewhere, or when it cannot be read, the answer is False (float32, never slower).

The flags are not enough: torch must also run its AVX-512 kernels (``torch.backends.cpu.get_cpu_capability()``
``AVX512``). With ``ATEN_CPU_CAPABILITY=default`` or ``avx2`` on an AMX machine, torch's bfloat16 attention packs
for AMX/AVX-512 all the same and raises ("pack_vnni2 is only supported when avx512 is supported"), so there the
answer is False too.
"""

from __future__ import annotations

import functools
from pathlib import Path

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (default: ``/proc/cpuinfo``; empty when unreadable)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    return _parse(cpuinfo)


def _parse(cpuinfo: str) -> frozenset[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def kernel_capability() -> str:
    """The instruction set torch's CPU kernels run with (``AVX512``, ``AVX2``, ``DEFAULT``, ...): the CPU's best,
    or less when ``ATEN_CPU_CAPABILITY`` says so."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU has AMX or AVX-512 BF16 (:data:`NATIVE_BF16_FLAGS`) and torch runs its AVX-512 kernels."""
    return bool(cpu_flags() & set(NATIVE_BF16_FLAGS)) and kernel_capability() == "AVX512"


def describe() -> str:
    """One line for a run's start: which bfloat16 support this CPU has, and whether torch uses it."""
    found = sorted(cpu_flags() & set(NATIVE_BF16_FLAGS))
    if not found:
        return "CPU without native bfloat16 (no amx_bf16 / avx512_bf16)"
    if kernel_capability() != "AVX512":
        return (f"CPU with native bfloat16 ({', '.join(found)}), unused: torch's kernels run at "
                f"{kernel_capability()} (ATEN_CPU_CAPABILITY), not AVX512")  # fmt: skip
    return f"CPU with native bfloat16 ({', '.join(found)})"


def training_compute(bf16: bool) -> tuple[bool, str]:
    """(whether to warn, one line) for a training run on the CPU: which precision it computes in (the recipe's
    ``bf16``: TRL's bfloat16 autocast) and this CPU's bfloat16 support; a warning where ``bf16: true`` would be
    emulated (slower than float32 there)."""
    if not bf16:
        return False, f"training computes in float32 on the CPU; {describe()}"
    if native_bf16():
        return False, f"training computes in bfloat16 autocast (bf16: true) on the CPU; {describe()}"
    return True, (f"training computes in bfloat16 autocast (bf16: true) on a CPU that only emulates it ({describe()}): "
                  "float32 (bf16: false) is faster here")  # fmt: skip
