"""The model card of a training run (``README.md`` in its ``output_dir``) names the base model as the recipe gave it.

TRL drafts the card at every checkpoint from ``model.config._name_or_path`` and leaves the base out when that is a
local directory, which it always is for the built-in tiny bases, a GGUF checkpoint (its dequantised cache) and any
local model: "This model is a fine-tuned version of [None](https://huggingface.co/None)", with ``model="None"`` in its
quick start. :func:`name_base_in_model_card` makes the trainer rewrite that line after TRL writes the card: a hub id
links to its hub page (and stays the card's ``base_model``), anything else is named as given (``tiny``: with the
name an adapter records, :func:`rlvr_div.models.portable_model_name`); the quick start loads the run's own
``output_dir``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

CARD_FILE = "README.md"
_BASE_LINE = re.compile(r"fine-tuned version of \[[^\]\n]*\]\([^)\n]*\)")


def base_description(reference: str, gguf_file: str | None = None) -> str:
    """The base as the card's sentence names it (markdown): a hub id as a link, ``tiny`` with what an adapter records
    for it, anything else as given; a GGUF file after its directory or repository."""
    from rlvr_div.models import is_hub_id, portable_model_name
    from rlvr_div.models.tiny_base import tiny_spec

    gguf = f" (GGUF file `{gguf_file}`)" if gguf_file else ""
    if is_hub_id(reference):
        return f"[{reference}](https://huggingface.co/{reference}){gguf}"
    if tiny_spec(reference) is not None:
        return f"`{reference}`, rlvr-div's built-in tiny base (`{portable_model_name(reference)}`)"
    return f"`{reference}`{gguf}"


def rewrite_card(path: str | Path, reference: str, gguf_file: str | None = None, model_dir: str | None = None) -> None:
    """Name the base ``reference`` in the card at ``path`` (TRL's draft), and ``model_dir`` in its quick start where
    TRL wrote ``model="None"``; the card's metadata keeps ``base_model`` for a hub id only (the hub validates it)."""
    from huggingface_hub import ModelCard

    from rlvr_div.models import is_hub_id

    card = ModelCard.load(path)
    card.data.base_model = reference if is_hub_id(reference) and not gguf_file else None
    text = _BASE_LINE.sub(lambda _: "fine-tuned version of " + base_description(reference, gguf_file), card.text)
    if model_dir is not None:
        text = text.replace('model="None"', f'model="{model_dir}"')
    card.text = text
    card.save(path)


def name_base_in_model_card(trainer: Any, reference: str, gguf_file: str | None = None) -> None:
    """Make ``trainer`` (a TRL trainer) name the base ``reference`` (the recipe's ``model_name_or_path``) in every
    model card it writes, by :func:`rewrite_card` after its own ``create_model_card``."""
    create: Callable[..., Any] = trainer.create_model_card

    def create_model_card(*args: Any, **kwargs: Any) -> Any:
        out = create(*args, **kwargs)
        path = Path(trainer.args.output_dir) / CARD_FILE
        if trainer.is_world_process_zero() and path.is_file():
            rewrite_card(path, reference, gguf_file, trainer.args.output_dir)
        return out

    trainer.create_model_card = create_model_card
