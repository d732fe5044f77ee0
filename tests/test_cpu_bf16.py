"""Native bfloat16 is read from the CPU's flags (AMX or AVX-512 BF16), never assumed."""

from __future__ import annotations

from rlvr_div.cpu_bf16 import cpu_flags, describe, native_bf16

AVX2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\nprocessor\t: 1\nflags\t\t: fpu\n"
AMX = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_the_flags_of_the_first_cpu_are_read():
    assert cpu_flags(AVX2) == {"fpu", "sse", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags("no flags line") == frozenset()


def test_native_bf16_follows_the_flags(monkeypatch):
    import rlvr_div.cpu_bf16 as mod

    for text, expected in ((AVX2, False), (AMX, True)):
        monkeypatch.setattr(mod, "cpu_flags", lambda cpuinfo=None, t=text: mod._parse(t))
        native_bf16.cache_clear()
        assert native_bf16() is expected
        assert describe().startswith("CPU with native bfloat16" if expected else "CPU without native bfloat16")
    native_bf16.cache_clear()
