"""Training rollouts through the project's decoding loop (``rollout_sampler: rlvr_div``) in place of TRL's call to
transformers' ``generate``.

GRPO's rollouts come in groups of G completions of one prompt. ``generate`` reads every prompt once per row and
keeps every row in the batch until the longest completion ends. :func:`rlvr_div.sampling.decode` (the loop that
``rlvr-div eval`` samples with) reads each distinct prompt once, copies its key/value cache to its rows, and drops
rows that have ended. A group of G completions of a P-token prompt then reads P prompt tokens instead of G·P.

Distribution. Each token is drawn from softmax(logits / T) restricted to the top-p nucleus, TRL's ``temperature``
and ``top_p``: the distribution TRL's ``generate`` call samples when ``top_k`` is 0, ``min_p`` unset,
``repetition_penalty`` 1 and ``generation_kwargs`` unset, which :func:`check_rollout_sampler` requires (a setting
that would not act is refused, not dropped). A completion ends at the first of TRL's ``eos_token_ids`` (a task's stop
text included), which stays in it, or after ``max_completion_length`` tokens, as in TRL. The model runs as TRL runs it
for generation (unwrapped, activation checkpointing off, its training mode untouched): while a dropout draws masks
(LoRA's ``lora_dropout`` > 0) every row reads its own prompt, so that each row has its own masks as in ``generate``.

Randomness. The uniforms that drive a call's tokens come from a generator seeded by one draw from torch's global CPU
generator, which the Trainer seeds per process and restores on resume; so a rerun with the same seed, or a resumed
run, draws the same rollouts (the floats of a batched forward aside), and processes draw different ones.

It applies to causal LMs whose cache indexing by rows copies whole (:func:`rlvr_div.trainers.common.rows_copyable`),
without peft prompt learning, outside FSDP, and without vLLM or transformers' continuous batching (which sample
themselves); :func:`check_model` refuses the others in one line when the trainer is built.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.sampling import decode
from rlvr_div.trainers.common import has_active_dropout, rows_copyable

ROLLOUT_SAMPLERS = ("trl", "rlvr_div")

log = logging.getLogger(__name__)


def check_rollout_sampler(args: Any) -> None:
    """One-line ConfigError for an unknown ``rollout_sampler``, or for ``rlvr_div`` beside a setting it would not
    honour: vLLM or continuous batching (they sample themselves), or a ``generate`` option beyond T and top-p."""
    choice = args.rollout_sampler
    if choice not in ROLLOUT_SAMPLERS:
        raise ConfigError(f"unknown rollout_sampler {choice!r}; known: {', '.join(ROLLOUT_SAMPLERS)}")
    if choice == "trl":
        return
    beside = [
        ("use_vllm", args.use_vllm, "vLLM samples the rollouts itself"),
        ("use_transformers_paged", getattr(args, "use_transformers_paged", False), "it samples the rollouts itself"),
        ("top_k", args.top_k not in (None, 0), "the loop samples with temperature and top_p only"),
        ("min_p", args.min_p is not None, "the loop samples with temperature and top_p only"),
        ("repetition_penalty", args.repetition_penalty != 1.0, "the loop samples with temperature and top_p only"),
        ("generation_kwargs", args.generation_kwargs is not None, "they are options of transformers' generate"),
        ("cache_implementation", args.cache_implementation is not None, "it is an option of transformers' generate"),
    ]
    for key, set_, why in beside:
        if set_:
            raise ConfigError(f"rollout_sampler: rlvr_div does not act with {key}={getattr(args, key)!r} ({why}); "
                              "drop one")  # fmt: skip


def check_model(trainer: Any) -> None:
    """One-line ConfigError when the trainer's model or setup cannot sample through :func:`rlvr_div.sampling.decode`
    (called once the model is built, before training)."""
    if trainer.is_fsdp_enabled:
        raise ConfigError("rollout_sampler: rlvr_div does not run under FSDP (its shards are gathered only for TRL's "
                          "generate); use rollout_sampler: trl")  # fmt: skip
    from transformers import ProcessorMixin
    from transformers.cache_utils import DynamicCache

    if isinstance(trainer.processing_class, ProcessorMixin):
        raise ConfigError("rollout_sampler: rlvr_div samples text prompts only (this model takes a processor); use "
                          "rollout_sampler: trl")  # fmt: skip
    model = trainer.accelerator.unwrap_model(trainer.model)
    if getattr(getattr(model, "active_peft_config", None), "is_prompt_learning", False):
        raise ConfigError("rollout_sampler: rlvr_div does not run peft prompt learning (its virtual tokens come with "
                          "generate); use rollout_sampler: trl")  # fmt: skip
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is None or not rows_copyable(DynamicCache(config=text)):
        raise ConfigError("rollout_sampler: rlvr_div needs a model whose key/value cache is copied by rows (not a "
                          "linear-attention or state-space layer); use rollout_sampler: trl")  # fmt: skip


class Rollouts:
    """Samples a trainer's rollouts with :func:`rlvr_div.sampling.decode` (module docstring)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        pad = trainer.processing_class.pad_token_id
        self.pad_id = int(pad) if pad is not None else int(trainer.eos_token_ids[0])
        self.said: set[bool] = set()  # which prompt reading (shared or per row) was announced

    def generate(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        """The completion token ids of each row of ``prompt_ids`` (a row: its prompt's token ids), each up to and
        including its first end token, at most ``max_completion_length``."""
        from trl.models import unwrap_model_for_generation

        trainer = self.trainer
        keys = [tuple(p) for p in prompt_ids]
        seed = int(torch.randint(0, 2**62, (1,)).item())  # the global CPU generator: per process, restored on resume
        uniforms = torch.rand((len(keys), trainer.max_completion_length),
                              generator=torch.Generator().manual_seed(seed))  # fmt: skip
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            share = not has_active_dropout(model)
            if share not in self.said:
                self.said.add(share)
                log.info("rollouts: rlvr_div's decoding loop, %s", "each distinct prompt read once" if share else
                         "each row's prompt read (a dropout draws masks per row)")  # fmt: skip
            if share:
                distinct = list(dict.fromkeys(keys))
                index = {k: i for i, k in enumerate(distinct)}
                prompts, rows = [list(k) for k in distinct], [index[k] for k in keys]
            else:
                prompts, rows = [list(k) for k in keys], list(range(len(keys)))
            ids, _ = decode(model, prompts, rows, uniforms, trainer.temperature, trainer.top_p,
                            list(trainer.eos_token_ids), self.pad_id)  # fmt: skip
        return ids
