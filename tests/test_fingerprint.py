"""`rlvr_div.models.fingerprint`: which files count, the per-file hash cache, adapters, GGUF, hub snapshots, the tiny
base."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.models.fingerprint import UNHASHED, check_fingerprint, model_fingerprint


@pytest.fixture
def model_dir(tiny_path, tmp_path) -> Path:
    path = tmp_path / "model"
    shutil.copytree(tiny_path, path)
    return path


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_weights_and_tokenizer_count_trainer_state_does_not(model_dir):
    fp = model_fingerprint(str(model_dir))
    assert fp.startswith("sha256:") and model_fingerprint(str(model_dir)) == fp
    (model_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (model_dir / "training_args.bin").write_bytes(b"args")
    (model_dir / "checkpoint-1").mkdir()
    (model_dir / "checkpoint-1" / "model.safetensors").write_bytes(b"other")
    assert model_fingerprint(str(model_dir)) == fp
    _flip_last_byte(model_dir / "model.safetensors")
    weights_changed = model_fingerprint(str(model_dir))
    assert weights_changed != fp
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 63}))
    assert model_fingerprint(str(model_dir)) not in (fp, weights_changed)


def test_tiny_by_name_is_its_cache_directory(tiny_path):
    assert model_fingerprint("tiny") == model_fingerprint(tiny_path)


def test_a_directory_without_weights_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds no model weights"):
        model_fingerprint(str(tmp_path))


def test_cache_rehashes_only_changed_files(model_dir, tmp_path, monkeypatch):
    reads: list[str] = []
    real = hashlib.file_digest

    def counting(f, digest):
        reads.append(os.path.basename(f.name))
        return real(f, digest)

    monkeypatch.setattr(hashlib, "file_digest", counting)
    cache = tmp_path / "out" / "file_hashes.json"
    fp = model_fingerprint(str(model_dir), cache_path=cache)
    assert "model.safetensors" in reads and cache.is_file()
    reads.clear()
    assert model_fingerprint(str(model_dir), cache_path=cache) == fp and reads == []
    _flip_last_byte(model_dir / "model.safetensors")  # a rewrite in place: new mtime (and ctime)
    assert model_fingerprint(str(model_dir), cache_path=cache) != fp and reads == ["model.safetensors"]
    assert model_fingerprint(str(model_dir)) == model_fingerprint(str(model_dir), cache_path=cache)


def test_adapter_files_count(tiny_path, tmp_path):
    from peft import get_peft_model

    from rlvr_div.models import load_model, lora_config

    adapter = tmp_path / "adapter"
    get_peft_model(load_model(tiny_path), lora_config(r=4, alpha=8)).save_pretrained(adapter)
    fp = model_fingerprint(tiny_path, str(adapter))
    assert fp != model_fingerprint(tiny_path)
    assert model_fingerprint(str(adapter)) == fp  # an adapter directory alone brings its base in
    _flip_last_byte(adapter / "adapter_model.safetensors")
    assert model_fingerprint(tiny_path, str(adapter)) != fp


def test_gguf_file_counts_alone(tmp_path):
    (tmp_path / "q4.gguf").write_bytes(b"GGUF q4")
    (tmp_path / "q8.gguf").write_bytes(b"GGUF q8")
    fp = model_fingerprint(str(tmp_path), gguf_file="q4.gguf")
    (tmp_path / "q8.gguf").write_bytes(b"GGUF q8, requantised")
    assert model_fingerprint(str(tmp_path), gguf_file="q4.gguf") == fp
    assert model_fingerprint(str(tmp_path / "q4.gguf")) == fp  # the file itself
    (tmp_path / "q4.gguf").write_bytes(b"GGUF q4, requantised")
    assert model_fingerprint(str(tmp_path), gguf_file="q4.gguf") != fp
    with pytest.raises(ConfigError, match="gguf_file 'q2.gguf' not found"):
        model_fingerprint(str(tmp_path), gguf_file="q2.gguf")


def test_hub_id_reads_its_local_snapshot(model_dir, tmp_path, monkeypatch, caplog):
    """A hub id is hashed from its snapshot in the HF cache (files are symlinks to blobs there), which gives the
    fingerprint of the same files in a plain directory; without a snapshot it is the id and revision, with a
    warning."""
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    repo = hub / "models--org--tiny-copy"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in model_dir.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))

    assert model_fingerprint("org/tiny-copy") == model_fingerprint(str(model_dir))
    assert model_fingerprint("org/tiny-copy", revision=commit) == model_fingerprint(str(model_dir))
    with caplog.at_level(logging.WARNING, logger="rlvr_div.models.fingerprint"):
        assert model_fingerprint("org/tiny-copy", revision="v2") == f"{UNHASHED}org/tiny-copy@v2"
        assert model_fingerprint("org/absent") == f"{UNHASHED}org/absent@main"
    assert "no local snapshot" in caplog.text


def test_check_fingerprint_is_one_line():
    check_fingerprint("sha256:ab", "sha256:ab", what="x", remedy="y")
    with pytest.raises(ConfigError, match=r"^the model changed since out/s.jsonl was written .*; use --fresh$"):
        check_fingerprint("sha256:" + "a" * 64, "sha256:" + "b" * 64, what="out/s.jsonl", remedy="use --fresh")
    with pytest.raises(ConfigError, match="records no model fingerprint"):
        check_fingerprint(None, "sha256:b", what="out/s.jsonl", remedy="use --fresh")
