"""Native bfloat16 is read from the CPU's flags (AMX or AVX-512 BF16), never assumed."""

from __future__ import annotations

import os
import subprocess
import sys

from rlvr_div.cpu_bf16 import cpu_flags, describe, native_bf16

AVX2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\nprocessor\t: 1\nflags\t\t: fpu\n"
AMX = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_the_flags_of_the_first_cpu_are_read():
    assert cpu_flags(AVX2) == {"fpu", "sse", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags("no flags line") == frozenset()


def test_native_bf16_follows_the_flags_and_torchs_kernels(monkeypatch):
    """Native only with the flags and torch's AVX-512 kernels: an AMX machine under ``ATEN_CPU_CAPABILITY=default``
    (the second pass of .ci/run) raises in bfloat16 attention, so it is not native there."""
    import rlvr_div.cpu_bf16 as mod

    cases = [(AVX2, "AVX2", False, "CPU without native bfloat16"),
             (AMX, "AVX512", True, "CPU with native bfloat16 ("),
             (AMX, "DEFAULT", False, "unused: torch's kernels run at DEFAULT"),
             (AMX, "AVX2", False, "run at AVX2")]  # fmt: skip
    for text, capability, expected, words in cases:
        monkeypatch.setattr(mod, "cpu_flags", lambda cpuinfo=None, t=text: mod._parse(t))
        monkeypatch.setattr(mod, "kernel_capability", lambda c=capability: c)
        native_bf16.cache_clear()
        assert native_bf16() is expected
        assert words in describe()
    native_bf16.cache_clear()


def test_torchs_default_kernels_are_never_native_whatever_the_cpu():
    """In a process whose torch runs ATEN_CPU_CAPABILITY=default kernels, on any machine: not native."""
    code = "from rlvr_div.cpu_bf16 import kernel_capability, native_bf16; print(kernel_capability(), native_bf16())"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["DEFAULT", "False"]


def test_a_cpu_training_run_says_its_precision_and_warns_where_bfloat16_is_emulated(monkeypatch):
    import rlvr_div.cpu_bf16 as mod
    from rlvr_div.cpu_bf16 import training_compute

    monkeypatch.setattr(mod, "kernel_capability", lambda: "AVX512")
    for text, native in ((AVX2, False), (AMX, True)):
        monkeypatch.setattr(mod, "cpu_flags", lambda cpuinfo=None, t=text: mod._parse(t))
        native_bf16.cache_clear()
        assert training_compute(False) == (False, f"training computes in float32 on the CPU; {describe()}")
        warn, line = training_compute(True)
        assert warn is not native and line.startswith("training computes in bfloat16 autocast (bf16: true)")
        assert ("float32 (bf16: false) is faster here" in line) is not native
    native_bf16.cache_clear()
