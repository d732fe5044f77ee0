"""GGUF checkpoints as plain ones: a ``.gguf`` file dequantised once into a cached ``from_pretrained`` directory.

transformers loads a GGUF file only when ``gguf_file=`` reaches ``from_pretrained``, and the model it returns keeps
``quantization_config: {quant_method: gguf}``: it cannot be saved, and TRL and peft refuse to train it. Every tool
here takes a model *path* (TRL's ``GRPOTrainer(model=path)``, peft's ``base_model_name_or_path``, merge, eval), so
the file is converted once instead:

    cache/gguf-<sha256 of the file, 16 hex digits>/  config.json (no quantization key), model.safetensors,
                                                     generation_config.json, the tokenizer (with the file's chat
                                                     template), gguf_source.json (which file, its hash)

The weights are the file's dequantised tensors (float32, as transformers dequantises them); the directory is keyed
by the file's content, so two copies of one file share it and a changed file gets a new one. Concurrent processes
wait on a file lock for one conversion; a conversion is written to a temporary directory and renamed.

Which file a ``package:NAME`` reference means is :mod:`rlvr_div.models.gguf_packages`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

SOURCE = "gguf_source.json"
PREFIX = "gguf-"
_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: a process hashes a file once


def file_sha256(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's bytes (memoised per process while its size and mtime are unchanged)."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def plain_checkpoint_dir(gguf: str | os.PathLike, cache_root: str | os.PathLike) -> Path:
    """Where :func:`plain_checkpoint` puts the conversion of ``gguf`` (whether or not it exists yet)."""
    return Path(cache_root).expanduser() / f"{PREFIX}{file_sha256(gguf)[:16]}"


def plain_checkpoint(gguf: str | os.PathLike, cache_root: str | os.PathLike) -> Path:
    """The cached plain checkpoint of the GGUF file ``gguf`` under ``cache_root``, converted on first use."""
    from filelock import FileLock

    src = Path(gguf).expanduser()
    path = plain_checkpoint_dir(src, cache_root)
    if (path / SOURCE).is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not (path / SOURCE).is_file():
            tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
            try:
                convert(src, tmp)
                tmp.rename(path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    return path


def convert(gguf: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise ``gguf`` with transformers and save model, generation config and tokenizer to ``out_dir``, with the
    quantization record removed (a plain float checkpoint), and ``gguf_source.json`` naming the file and its hash."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, out = Path(gguf).expanduser().resolve(), Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)  # the tensors are already dequantised; only the record is left
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {"file": src.name, "sha256": file_sha256(src), "transformers": transformers.__version__}
    (out / SOURCE).write_text(json.dumps(record, indent=1) + "\n")
    return out
