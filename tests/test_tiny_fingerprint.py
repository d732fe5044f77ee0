"""The tiny bases are the same bytes on every machine: the named ones ship with rlvr-div, their files checked against
the sha256 in the manifest (a changed file is refused in one line), built by the recipe the current code holds, and they
are the bases behind the committed results. A built (unnamed) base's cache cannot go stale silently: the build
fingerprint covers the corpus, the build code and the libraries; a cached base with another fingerprint is rebuilt
with one line saying why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.models import tiny_base
from rlvr_div.models.fingerprint import model_fingerprint
from rlvr_div.models.tiny_base import (
    MANIFEST_NAME,
    SHIPPED_DIR,
    TINY_BASES,
    TinySpec,
    build_fingerprint,
    cached_tiny_path,
    compare_with_shipped,
    file_sha256,
    shipped_manifest,
    shipped_tiny_path,
    stale_reason,
    tiny_model_path,
)

ROOT = Path(__file__).resolve().parents[1]

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


# --------------------------------------------------------------------------------------------- shipped bases


@pytest.mark.parametrize("name", sorted(TINY_BASES))
def test_every_named_base_ships_with_the_sha256_of_each_file(name):
    spec = TINY_BASES[name]
    record = shipped_manifest()[f"tiny-{spec.key()}"]
    directory = shipped_tiny_path(spec)
    assert directory == SHIPPED_DIR / f"tiny-{spec.key()}" and record["name"] == name
    on_disk = {p.name for p in directory.iterdir() if p.is_file()}
    assert set(record["files"]) == on_disk >= {"model.safetensors", "config.json", "tokenizer.json", "tiny_spec.json"}
    assert all(file_sha256(directory / f) == h for f, h in record["files"].items())


@pytest.mark.parametrize("name", sorted(TINY_BASES))
def test_the_shipped_bases_hold_the_current_build_recipe(name):
    """A change to the corpus or the build code must re-ship the bases (``rlvr-div build-tiny NAME --ship``)."""
    spec = TINY_BASES[name]
    assert shipped_manifest()[f"tiny-{spec.key()}"]["recipe"] == build_fingerprint(spec, libraries=False), (
        f"the build recipe of {name} changed since it shipped: run rlvr-div build-tiny {name} --ship"
    )


def test_a_named_base_loads_the_shipped_files_and_builds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path))
    monkeypatch.setattr(tiny_base, "build_tiny_model", lambda *a, **k: pytest.fail("a named base was built"))
    for spec in TINY_BASES.values():
        assert tiny_model_path(spec, progress=False) == cached_tiny_path(spec) == SHIPPED_DIR / f"tiny-{spec.key()}"
    assert list(tmp_path.iterdir()) == []


def _copy_shipped(name: str, root: Path) -> Path:
    key = f"tiny-{TINY_BASES[name].key()}"
    shutil.copytree(SHIPPED_DIR / key, root / key)
    (root / MANIFEST_NAME).write_text(json.dumps({key: shipped_manifest()[key]}))
    return root / key


def test_a_changed_or_missing_shipped_file_is_refused_in_one_line(tmp_path):
    copy = _copy_shipped("tiny", tmp_path)
    assert shipped_tiny_path(TINY_BASES["tiny"], tmp_path) == copy
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # the last bit of the last weight
    (copy / "model.safetensors").write_bytes(bytes(weights))
    tiny_base._verified.cache_clear()
    with pytest.raises(ConfigError, match=r"model.safetensors does not match its recorded sha256") as err:
        shipped_tiny_path(TINY_BASES["tiny"], tmp_path)
    assert "\n" not in str(err.value)
    (copy / "model.safetensors").unlink()
    tiny_base._verified.cache_clear()
    with pytest.raises(ConfigError, match=r"lacks model.safetensors; reinstall rlvr-div"):
        shipped_tiny_path(TINY_BASES["tiny"], tmp_path)
    tiny_base._verified.cache_clear()


def test_a_rebuild_is_compared_with_the_shipped_bytes(tmp_path):
    from safetensors.torch import load_file, save_file

    copy = _copy_shipped("tiny", tmp_path)
    assert compare_with_shipped(copy, "tiny") == "the same bytes as the shipped tiny"
    weights = load_file(copy / "model.safetensors")
    first = sorted(weights)[0]
    weights[first][0, 0] += 1e-3
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    said = compare_with_shipped(copy, "tiny")
    assert said.startswith("other bytes than the shipped tiny (largest weight difference 0.001"), said


# The base profiles behind the committed results record the model fingerprint of the base they measured.
COMMITTED_BASES = {
    "tiny2": "bench/results/collapse_new/base/carry.json",
    "tiny3": "bench/results/collapse_routes/base/routes.json",
    "tiny3-seed1": "bench/results/collapse_routes_base_seed1/base/routes.json",
    "tiny3-seed2": "bench/results/collapse_routes_base_seed2/base/routes.json",
}


@pytest.mark.parametrize("name", sorted(COMMITTED_BASES))
def test_the_shipped_bases_are_the_ones_behind_the_committed_results(name):
    recorded = json.loads((ROOT / COMMITTED_BASES[name]).read_text())["fingerprint"]
    assert model_fingerprint(str(shipped_tiny_path(TINY_BASES[name]))) == recorded
