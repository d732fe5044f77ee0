"""Resuming an evaluation: an output directory's samples are kept only when they were made with the same
sample-determining settings (``config.json``) and from a model whose files have the same content fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

from eval.records import RESULTS_FILE, SAMPLES_FILE
from eval.settings import SAMPLE_KEYS, EvalSettings, ModelRef
from rlvr_div.errors import ConfigError

CONFIG_FILE = "config.json"
FILE_HASHES = "file_hashes.json"  # in the output directory: per-file sha256 cache of model_fingerprint
FINGERPRINT_KEY = "model_fingerprint"
START_OVER = "rerun with --fresh to resample it, or use another --output-dir"


def check_resume(out_dir: Path, settings: EvalSettings) -> None:
    """Fail in one line when ``out_dir`` holds samples made with other sample-determining settings (or samples
    without the ``config.json`` that says how they were made)."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        if (out_dir / SAMPLES_FILE).is_file() and (out_dir / SAMPLES_FILE).stat().st_size:
            raise ConfigError(f"{out_dir / SAMPLES_FILE} has no {CONFIG_FILE} beside it; {START_OVER}")
        return
    saved = json.loads(path.read_text())
    want = json.loads(json.dumps(settings.sample_key()))
    for key in SAMPLE_KEYS:
        if saved.get(key) != want[key]:
            raise ConfigError(
                f"{path} was written with {key}={saved.get(key)!r} but this run has {key}={want[key]!r}; {START_OVER}"
            )


def recorded_dtype(out_dir: Path) -> str | None:
    """The dtype the samples in ``out_dir`` were drawn in (its ``config.json``), or None where none were."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("dtype")
    except (json.JSONDecodeError, AttributeError):
        return None  # check_resume reports an unreadable config


def resumed_dtype(out_dirs: list[Path]) -> str | None:
    """The one dtype the samples already in these models' directories were drawn in (None: none were sampled), for
    ``--dtype auto``: one line when they were drawn in different dtypes (their comparison would carry the dtype's
    effect)."""
    found = {d.name: recorded_dtype(d) for d in out_dirs}
    kinds = sorted({v for v in found.values() if v is not None})
    if len(kinds) > 1:
        which = ", ".join(f"{name} in {v}" for name, v in found.items() if v is not None)
        raise ConfigError(
            f"the models in {out_dirs[0].parent} were sampled in different dtypes ({which}); pass --dtype to choose "
            "one (--fresh samples a model again in it)"
        )
    return kinds[0] if kinds else None


def check_not_sampled(out_dir: Path, name: str) -> None:
    """Fail in one line when ``out_dir`` holds samples a model made there (its ``config.json``): scoring
    ``--samples NAME=...`` into it would replace them (the reverse of :func:`check_resume` refusing to sample into a
    scored directory)."""
    if (out_dir / CONFIG_FILE).is_file():
        raise ConfigError(
            f"{out_dir} holds samples drawn from a model (its {CONFIG_FILE}); scoring --samples {name} there would "
            "replace them: rerun with --fresh to replace them, or use another --output-dir"
        )


def fingerprint(ref: ModelRef, output_dir: Path) -> str:
    """The content fingerprint of a model reference (``rlvr_div.models.fingerprint.model_fingerprint`` of its model and
    adapter), with the per-file hash cache in ``output_dir``."""
    from rlvr_div.models.fingerprint import model_fingerprint

    return model_fingerprint(
        ref.model, ref.adapter, revision=ref.revision or "main", cache_path=output_dir / FILE_HASHES
    )


def check_model_unchanged(out_dir: Path, current: str) -> None:
    """Fail in one line when ``out_dir``'s samples were made from a model whose files differ from ``current``."""
    from rlvr_div.models.fingerprint import check_fingerprint

    path = out_dir / CONFIG_FILE
    if path.is_file():
        recorded = json.loads(path.read_text()).get(FINGERPRINT_KEY)
        check_fingerprint(recorded, current, what=str(out_dir / SAMPLES_FILE), remedy=START_OVER)


def start_over(out_dir: Path) -> None:
    """``--fresh``: delete the files a model's evaluation wrote in ``out_dir`` (nothing else)."""
    for name in (SAMPLES_FILE, CONFIG_FILE, RESULTS_FILE):
        (out_dir / name).unlink(missing_ok=True)
