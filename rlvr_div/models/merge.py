"""``rlvr-div merge --adapter DIR --out DIR``: fold a LoRA adapter into its base and save the full model.

Every adapted linear layer becomes W' = W + (α/r)·B·A (peft's ``merge_and_unload``), so the saved model computes
the same log-probs as the base with the adapter attached, and loads with ``from_pretrained`` alone: no peft, no
base model at hand. The base is the adapter's ``base_model_name_or_path`` (``rlvr_div/tiny_bases/tiny-<spec hash>``
for a shipped tiny base, ``tiny-<spec hash>`` for another, resolved in the current cache), at the hub revision the
adapter records (peft's ``revision``; training stores ``model_revision`` there). The tokenizer is the adapter
directory's when it holds one (training saves one there), else the base's. The model is written to a temporary
directory beside ``--out`` and renamed, so an interrupted merge leaves no half-written model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from rlvr_div.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def check_merge(adapter: str | os.PathLike, out: str | os.PathLike, dtype: str = "auto") -> str:
    """The pre-load checks of a merge (one-line :class:`ConfigError`); returns the resolved base reference."""
    from rlvr_div.models import adapter_base, resolve_model

    a, o = Path(adapter).expanduser(), Path(out).expanduser()
    if not a.is_dir():
        raise ConfigError(f"--adapter {str(adapter)!r} is not a directory")
    base = adapter_base(a)
    if base is None:
        raise ConfigError(f"--adapter {str(adapter)!r} holds no adapter_config.json (is it a LoRA adapter directory?)")
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if o.resolve() == a.resolve():
        raise ConfigError("--out must differ from --adapter")
    if o.exists() and (not o.is_dir() or any(o.iterdir())):
        raise ConfigError(f"--out {str(out)!r} exists and is not an empty directory; choose another --out")
    return resolve_model(base, build=False)


def merge_adapter(adapter: str | os.PathLike, out: str | os.PathLike, dtype: str = "auto") -> Path:
    """Load the adapter's base in ``dtype`` (``auto``: as stored), attach the adapter, merge it and save model and
    tokenizer to ``out``; returns ``out``."""
    import torch
    from peft import PeftModel

    from rlvr_div.models import adapter_revision, holds_tokenizer, load_model, load_tokenizer

    base = check_merge(adapter, out, dtype)
    a, o = Path(adapter).expanduser(), Path(out).expanduser()
    revision = adapter_revision(a)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = PeftModel.from_pretrained(load_model(base, dtype=torch_dtype, revision=revision), str(a))
    model = model.merge_and_unload()
    tokenizer = load_tokenizer(str(a)) if holds_tokenizer(a) else load_tokenizer(base, revision=revision)
    o.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{o.name}.", dir=o.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if o.exists():
            o.rmdir()  # empty (checked above)
        tmp.rename(o)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return o


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div merge``; ConfigError propagates to the caller (one line, exit 2)."""
    ap = argparse.ArgumentParser(
        prog="rlvr-div merge",
        description="Merge a LoRA adapter into its base model and save a full model (loadable without peft).",
    )
    ap.add_argument("--adapter", required=True, help="a LoRA adapter directory (a training run's output_dir)")
    ap.add_argument("--out", required=True, help="where the merged model goes (must not exist, or be empty)")
    ap.add_argument("--dtype", default="auto", help="auto (as the base is stored), float32, bfloat16, float16")
    args = ap.parse_args(argv)
    out = merge_adapter(args.adapter, args.out, args.dtype)
    print(f"merged model: {out}")
    return 0
