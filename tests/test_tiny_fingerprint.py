"""The tiny bases' cache cannot go stale silently: the build fingerprint covers the corpus, the build code and the
libraries; a cached base with another fingerprint is rebuilt with one line saying why; builds are bit-reproducible
across torch thread counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_div import tiny_base
from rlvr_div.tiny_base import TinySpec, build_fingerprint, cached_tiny_path, stale_reason, tiny_model_path

# the default architecture and batch (the same kernels as a real build), a few steps
SHORT = TinySpec(steps=3, batch_size=8, warmup=1)


@pytest.fixture(autouse=True)
def _fresh_fingerprints():
    build_fingerprint.cache_clear()
    yield
    build_fingerprint.cache_clear()


def test_fingerprint_follows_the_corpus_samplers(monkeypatch):
    before = build_fingerprint(TinySpec())
    monkeypatch.setattr("rlvr_div.tasks.synthetic.pairsum_error_rate", lambda n: 0.5)  # another corpus, same spec
    build_fingerprint.cache_clear()
    assert build_fingerprint(TinySpec()) != before
    assert build_fingerprint(TinySpec(seed=1)) != build_fingerprint(TinySpec())


def test_fingerprint_follows_the_build_code(monkeypatch):
    before = build_fingerprint(SHORT)
    real = tiny_base.inspect.getsource
    monkeypatch.setattr(
        tiny_base.inspect, "getsource", lambda fn: real(fn) + ("# edited" if fn is tiny_base.build_tiny_model else "")
    )
    build_fingerprint.cache_clear()
    assert build_fingerprint(SHORT) != before


def test_a_stale_cached_base_is_rebuilt_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path))
    path = tiny_model_path(SHORT, progress=False)
    record = json.loads((path / "tiny_spec.json").read_text())
    assert record["fingerprint"] == build_fingerprint(SHORT) and cached_tiny_path(SHORT) == path
    weights = (path / "model.safetensors").read_bytes()

    for stale in ({**record, "fingerprint": "0" * 16}, {k: v for k, v in record.items() if k != "fingerprint"}):
        (path / "tiny_spec.json").write_text(json.dumps(stale))
        assert stale_reason(path, SHORT) is not None and cached_tiny_path(SHORT) is None
        capsys.readouterr()
        assert tiny_model_path(SHORT, progress=False) == path
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"rlvr-div: rebuilding the tiny base {path.name}: "), err
        assert json.loads((path / "tiny_spec.json").read_text())["fingerprint"] == build_fingerprint(SHORT)
        assert (path / "model.safetensors").read_bytes() == weights  # the same code rebuilds the same weights
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [path.name]
    capsys.readouterr()
    tiny_model_path(SHORT, progress=False)  # current: no rebuild, no line
    assert capsys.readouterr().err == ""


def _build_with_threads(spec_kwargs: dict, threads: int, out: Path) -> bytes:
    code = (
        "import sys, torch; torch.set_num_threads(int(sys.argv[1]));"
        "from rlvr_div.tiny_base import TinySpec, build_tiny_model;"
        f"build_tiny_model(sys.argv[2], TinySpec(**{spec_kwargs!r}), progress=False)"
    )
    subprocess.run([sys.executable, "-c", code, str(threads), str(out)], check=True, capture_output=True)
    return (out / "model.safetensors").read_bytes()


def test_a_short_build_is_bit_identical_with_1_and_2_threads(tmp_path):
    kwargs = {"steps": 30, "warmup": 5}
    assert _build_with_threads(kwargs, 1, tmp_path / "t1") == _build_with_threads(kwargs, 2, tmp_path / "t2")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(tiny_base.TINY_BASES))
def test_a_named_base_is_bit_identical_with_1_and_2_threads(name, tmp_path):
    """The whole build of each named base, once per thread count (minutes each)."""
    from dataclasses import asdict

    kwargs = asdict(tiny_base.TINY_BASES[name])
    kwargs["tasks"] = tuple(kwargs["tasks"])
    assert _build_with_threads(kwargs, 1, tmp_path / "t1") == _build_with_threads(kwargs, 2, tmp_path / "t2")
