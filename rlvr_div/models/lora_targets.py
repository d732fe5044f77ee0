"""LoRA targets checked against the model before it loads: every name in ``lora_target_modules`` must match a layer
LoRA can wrap (peft's rule), found on a model built on the meta device from its ``config.json``; peft's refusal after
a load, as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError

# Layer types peft's LoRA can wrap (a target naming anything else is refused by peft after the load).
_LORA_LAYERS = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "MultiheadAttention")


def local_config_dir(model_path: str, revision: str | None = None) -> str | None:
    """A directory holding the model's ``config.json`` without a download: the local model directory, or the hub
    cache's snapshot (None when neither has it)."""
    p = Path(model_path).expanduser()
    if (p / "config.json").is_file():
        return str(p)
    if p.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, "config.json", revision=revision)
    except Exception:
        return None
    return str(Path(cached).parent) if isinstance(cached, str) else None


def module_names(config_dir: str) -> dict[str, str] | None:
    """Every module of the model in ``config_dir`` (name -> class name), built on the meta device from its
    ``config.json`` (no weights are read). None when the architecture cannot be built this way (remote code)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(config_dir)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:
        return None
    return {name: type(module).__name__ for name, module in model.named_modules() if name}


def check_lora_targets(model_args: Any, model_path: str) -> None:
    """Each name in ``lora_target_modules`` matches a LoRA-capable layer of the model (peft's rule: a module whose
    name equals the target or ends with ``.<target>``). ``all-linear`` always matches. Skipped when the model's
    config is not on disk (a hub model not yet downloaded): then a mismatch is reported after the load, in one line.
    """
    targets = getattr(model_args, "lora_target_modules", None)
    if not getattr(model_args, "use_peft", False) or not targets:
        return
    targets = [targets] if isinstance(targets, str) else list(targets)
    if targets == ["all-linear"]:
        return
    if "all-linear" in targets:
        raise ConfigError(f"lora_target_modules={targets}: all-linear must be given alone")
    config_dir = local_config_dir(model_path, getattr(model_args, "model_revision", None))
    modules = module_names(config_dir) if config_dir else None
    if modules is None:
        return
    layers = sorted({n.rsplit(".", 1)[-1] for n, cls in modules.items() if cls == "Linear" and n != "lm_head"})
    for target in targets:
        hits = [cls for name, cls in modules.items() if name == target or name.endswith("." + target)]
        if not hits:
            raise ConfigError(
                f"lora_target_modules: {target!r} matches no module of {model_args.model_name_or_path}; its linear "
                f"layers are {', '.join(layers)} (or use all-linear)"
            )
        wrong = sorted({cls for cls in hits if cls not in _LORA_LAYERS})
        if wrong:
            raise ConfigError(
                f"lora_target_modules: {target!r} names {', '.join(wrong)} modules, which LoRA cannot wrap; "
                f"name linear layers instead: {', '.join(layers)} (or all-linear)"
            )


def lora_error_line(e: BaseException, model_args: Any) -> str:
    """peft's error for LoRA targets that match nothing (raised after the load), as one line."""
    targets = getattr(model_args, "lora_target_modules", None)
    if "is not supported" in str(e):  # peft puts the module's multi-line repr in this message
        return (
            f"lora_target_modules={targets}: a target names a module LoRA cannot wrap (only Linear, Embedding, Conv "
            "and MultiheadAttention layers); name linear layers or use all-linear"
        )
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"lora_target_modules={targets}: {first}"


def is_lora_target_error(e: BaseException) -> bool:
    """Whether ``e`` is peft refusing the LoRA targets (no module matched, or a matched module it cannot wrap)."""
    try:
        from peft.utils.error import NoMatchingPeftModuleError
    except ImportError:  # older peft
        NoMatchingPeftModuleError = ()  # type: ignore[assignment]  # noqa: N806
    if NoMatchingPeftModuleError and isinstance(e, NoMatchingPeftModuleError):
        return True
    text = str(e)
    return isinstance(e, ValueError) and ("Target modules" in text or "Target module" in text)
