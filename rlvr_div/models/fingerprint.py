"""Content fingerprints of models, so that resumable outputs (samples, stages) are tied to what was loaded.

A resumable stage that records ``model_fingerprint(...)`` beside its outputs and compares it on a rerun cannot
silently mix samples of a retrained model with those of the model it replaced. The fingerprint is

    sha256( [(section, file name, sha256(file bytes)) for every model file, sorted] )

over the files ``from_pretrained`` reads for a causal LM and its tokenizer: weights (``*.safetensors``, ``*.bin``,
``*.pt``/``*.pth``, one ``*.gguf``, shard indexes), ``config.json``, ``generation_config.json``,
``adapter_config.json`` and the tokenizer files (``tokenizer*``, vocabularies, merges, sentencepiece models, chat
templates); section is ``model`` or ``adapter``. Trainer state (``training_args.bin``, ``optimizer.pt``, …), logs and
sub-directories (checkpoints) are not part of a model. Equal fingerprints mean byte-identical model files.

Where the files are: ``tiny`` (and ``tiny-<spec hash>``) is the built-in base's cache directory; a local directory
or ``.gguf`` file is read as it is; a hub id is read from its snapshot in the local Hugging Face cache
(``$HF_HUB_CACHE``, ``refs/<revision>``). A hub id without a local snapshot cannot be hashed: its fingerprint is
``unhashed:<id>@<revision>`` and a warning says so (it changes once the snapshot is downloaded).

Hashing costs about 2 s per GiB on 2 busy CPU cores (docs/evaluation.md); with ``cache_path`` (a JSON file, e.g.
in the output directory) a file whose (path, size, mtime, ctime, inode) is unchanged is not read again, so a rerun
costs one ``stat`` per file.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
from pathlib import Path

from rlvr_div.errors import ConfigError

logger = logging.getLogger(__name__)

UNHASHED = "unhashed:"
# Files from_pretrained reads for a causal LM and its tokenizer (top level of the model directory only).
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.gguf")
OTHER_PATTERNS = (
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "chat_template*",
)
# Trainer state that sits beside a model in a checkpoint but does not change what the model computes.
NOT_MODEL = ("training_args.bin", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt", "rng_state*.pth")
_COMMIT = re.compile(r"[0-9a-f]{40}")


def model_fingerprint(
    path: str,
    adapter: str | None = None,
    *,
    gguf_file: str | None = None,
    revision: str = "main",
    cache_path: str | os.PathLike | None = None,
) -> str:
    """``sha256:<hex>`` of the model files of ``path`` (``tiny``, a local directory, a ``.gguf`` file or a directory
    with ``gguf_file``, a hub id at ``revision``) and, when given, of the LoRA ``adapter`` directory (its weights,
    config and tokenizer files); ``unhashed:<id>@<revision>`` for a hub id with no local snapshot.

    A LoRA adapter directory given as ``path`` (one holding ``adapter_config.json``) counts as that adapter on its
    ``base_model_name_or_path`` at the revision it records. ``cache_path``: a JSON file of per-file hashes keyed by
    (path, size, mtime, ctime, inode), read and updated."""
    from rlvr_div.models import adapter_base, adapter_revision

    if adapter is None and Path(path).expanduser().is_dir():
        base_name = adapter_base(Path(path).expanduser())
        if base_name is not None:
            path, adapter, revision = base_name, path, adapter_revision(Path(path).expanduser()) or revision
    cache = _HashCache(Path(cache_path) if cache_path is not None else None)
    base = _base_files(path, gguf_file, revision)
    if base is None:
        if adapter is None:
            return f"{UNHASHED}{path}@{revision}"
        base_entries: list[list[str]] = [["model", f"{UNHASHED}{path}@{revision}", ""]]
    else:
        base_entries = [["model", name, cache.sha256(f)] for name, f in base]
    entries = base_entries
    if adapter is not None:
        entries = entries + [["adapter", name, cache.sha256(f)] for name, f in _dir_files(Path(adapter), None)]
    cache.save()
    manifest = json.dumps(sorted(entries), separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def check_fingerprint(recorded: str | None, current: str, *, what: str, remedy: str) -> None:
    """Raise :class:`ConfigError` (one line) unless ``recorded`` equals ``current``.

    ``what`` names the outputs (``"runs/eval/base/samples.jsonl"``); ``remedy`` says how to start over
    (``"rerun with --fresh or use another --output-dir"``). A missing record (None) is a mismatch too: outputs
    written without a fingerprint cannot be tied to a model."""
    if recorded == current:
        return
    if recorded is None:
        raise ConfigError(f"{what} records no model fingerprint, so it cannot be tied to this model; {remedy}")
    raise ConfigError(
        f"the model changed since {what} was written (fingerprint {_short(recorded)}, now {_short(current)}); {remedy}"
    )


def _short(fingerprint: str) -> str:
    return fingerprint[: len("sha256:") + 12] if fingerprint.startswith("sha256:") else fingerprint


# --------------------------------------------------------------------------------------------- which files


def _base_files(path: str, gguf_file: str | None, revision: str) -> list[tuple[str, Path]] | None:
    """(name, file) pairs of a model reference; None for a hub id without a local snapshot."""
    from rlvr_div.models import resolve_model

    local = Path(resolve_model(path, gguf_file)).expanduser()  # tiny (built if missing), a local path, or a hub id
    if local.exists():
        if local.is_file():
            return [(local.name, local)]
        return _dir_files(local, gguf_file)
    snapshot = hub_snapshot(path, revision)
    files = None
    if snapshot is not None:
        try:
            files = _dir_files(snapshot, gguf_file)
        except ConfigError:  # a snapshot without weights (only configs downloaded) is no snapshot of the model
            files = None
    if files is None:
        logger.warning(
            "model %s: no local snapshot of this hub id at revision %s; its fingerprint is the id and revision only "
            "(file contents not verified)",
            path,
            revision,
        )
    return files


def _dir_files(directory: Path, gguf_file: str | None) -> list[tuple[str, Path]]:
    """The model files at the top level of ``directory`` (see the module docstring). With ``gguf_file`` the weights
    are that one file (``from_pretrained(gguf_file=...)`` reads no other). A directory without weights is an error."""
    if not directory.is_dir():
        raise ConfigError(f"{directory} is not a directory")

    def matches(name: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatch(name, pat) for pat in patterns)

    names = sorted(p.name for p in directory.iterdir() if p.is_file() and not matches(p.name, NOT_MODEL))
    others = [(n, directory / n) for n in names if matches(n, OTHER_PATTERNS)]
    if gguf_file is not None:
        gguf = directory / gguf_file if (directory / gguf_file).is_file() else Path(gguf_file).expanduser()
        if not gguf.is_file():
            raise ConfigError(f"gguf_file {gguf_file!r} not found in {str(directory)!r}")
        return [(gguf.name, gguf), *others]
    weights = [(n, directory / n) for n in names if matches(n, WEIGHT_PATTERNS)]
    if all(n.endswith(".json") for n, _ in weights):
        raise ConfigError(f"{directory} holds no model weights (*.safetensors, *.bin, *.pt, *.gguf)")
    return sorted(set(weights) | set(others))


def hub_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The snapshot directory of a hub model at ``revision`` (a branch, tag or commit) in the local Hugging Face
    cache (``$HF_HUB_CACHE``), without any network access; None when it is not cached."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    storage = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = revision if _COMMIT.fullmatch(revision) else None
    ref = storage / "refs" / revision
    if commit is None and ref.is_file():
        commit = ref.read_text().strip()
    if commit is None:
        return None
    snapshot = storage / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


# --------------------------------------------------------------------------------------------- hashing


class _HashCache:
    """sha256 of files, remembered in a JSON file by (real path, size, mtime_ns, ctime_ns, inode)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, dict[str, int | str]] = {}
        self.changed = False
        if path is not None and path.is_file():
            try:
                self.entries = json.loads(path.read_text()).get("files", {})
            except (json.JSONDecodeError, AttributeError):
                self.entries = {}  # a damaged cache only costs a rehash

    def sha256(self, file: Path) -> str:
        real = os.path.realpath(file)
        st = os.stat(real)
        key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}
        hit = self.entries.get(real)
        if hit is not None and all(hit.get(k) == v for k, v in key.items()):
            return str(hit["sha256"])
        with open(real, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        self.entries[real] = {**key, "sha256": digest}
        self.changed = True
        return digest

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        live = {p: e for p, e in self.entries.items() if os.path.exists(p)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps({"files": live}, indent=1) + "\n")
        os.replace(tmp, self.path)
