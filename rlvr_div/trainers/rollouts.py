"""Training rollouts through the project's decoding loop (``rollout_sampler: rlvr_div``) in place of TRL's call to
transformers' ``generate``.

GRPO's rollouts come in groups of G completions of one prompt. ``generate`` reads every prompt once per row and
keeps every row in the batch until the longest completion ends. :func:`rlvr_div.sampling.decode` (the loop that
``rlvr-div eval`` samples with) reads each distinct prompt once, copies its key/value cache to its rows, and drops
rows that have ended. A group of G completions of a P-token prompt then reads P prompt tokens instead of G·P.

Distribution. Each token is drawn from softmax(logits / T) restricted to the top-p nucleus, TRL's ``temperature``
and ``top_p``: the distribution TRL's ``generate`` call samples when nothing else acts in it, which is required (a
setting that would not act is refused, not dropped): :func:`check_rollout_sampler` refuses ``top_k`` but 0,
``min_p``, ``repetition_penalty`` but 1, ``generation_kwargs`` and ``cache_implementation``, and :func:`check_model`
any field of the model's own generation config that transformers would apply where TRL leaves it unset (a
``min_p``, ``no_repeat_ngram_size``, suppressed tokens, …: :func:`generation_overrides`).

A completion ends at the first of TRL's ``eos_token_ids`` (a task's stop text included), which stays in it, or after
``max_completion_length`` tokens, as in TRL. The model runs as TRL runs it for generation (unwrapped, activation
checkpointing off, its training mode untouched, without gradient): while a dropout draws masks (LoRA's
``lora_dropout`` > 0) every row reads its own prompt, so that each row has its own masks as in ``generate``.

Randomness. The uniforms that drive a call's tokens come from a generator seeded by one draw from torch's global CPU
generator, which the Trainer seeds per process and restores on resume; so a rerun with the same seed, or a resumed
run, draws the same rollouts (the floats of a batched forward aside), and processes draw different ones.

It applies to text causal LMs whose cache indexing by rows copies whole (:func:`rlvr_div.trainers.common
.rows_copyable`) and that run alike on shared prompts (:func:`rlvr_div.trainers.common.shares_prompts_exactly`: no
peft prompt learning, no sequence-length-dependent RoPE), outside FSDP and DeepSpeed without gathered weights, and
without vLLM, transformers' continuous batching or a ``rollout_func`` (which sample themselves); :func:`check_model`
refuses the others in one line when the trainer is built.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.sampling import decode
from rlvr_div.trainers.common import has_active_dropout, rows_copyable, shares_prompts_exactly

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
        (
            "use_transformers_continuous_batching",
            getattr(args, "use_transformers_continuous_batching", False),
            "it samples the rollouts itself",
        ),
        ("use_transformers_paged", getattr(args, "use_transformers_paged", False), "it samples the rollouts itself"),
        ("temperature", not args.temperature > 0, "TRL's generate samples at a temperature > 0"),
        ("max_completion_length", args.max_completion_length is None, "the loop needs a length limit"),
        ("top_k", args.top_k != 0, "the loop samples with temperature and top_p only; None is generate's 50"),
        ("min_p", args.min_p is not None, "the loop samples with temperature and top_p only"),
        ("repetition_penalty", args.repetition_penalty != 1.0, "the loop samples with temperature and top_p only"),
        ("generation_kwargs", args.generation_kwargs is not None, "they are options of transformers' generate"),
        ("cache_implementation", args.cache_implementation is not None, "it is an option of transformers' generate"),
    ]
    for key, set_, why in beside:
        if set_:
            raise ConfigError(f"rollout_sampler: rlvr_div does not act with {key}={getattr(args, key)!r} ({why}); "
                              "drop one")  # fmt: skip


# generation-config fields that change what transformers' generate samples (a logits processor, a stopping rule or
# another decoding method), each with whether a value acts; None never does (transformers' defaults are neutral)
_ACTS: dict[str, Any] = {
    **dict.fromkeys(("min_p", "top_h", "forced_bos_token_id", "forced_eos_token_id", "exponential_decay_length_penalty",
                     "watermarking_config", "max_time", "penalty_alpha", "dola_layers"), lambda v: True),
    **dict.fromkeys(("suppress_tokens", "begin_suppress_tokens", "bad_words_ids", "sequence_bias", "stop_strings",
                     "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "min_length", "min_new_tokens"), bool),
    "typical_p": lambda v: v != 1.0,
    "epsilon_cutoff": lambda v: v != 0.0,
    "eta_cutoff": lambda v: v != 0.0,
    "guidance_scale": lambda v: v != 1.0,
    "num_beams": lambda v: v != 1,
    "diversity_penalty": lambda v: v != 0.0,
}  # fmt: skip


def generation_overrides(trl_config: Any, model_config: Any) -> list[str]:
    """The fields (``key=value``) that would make TRL's ``generate`` call sample otherwise than softmax(logits / T)
    within the top-p nucleus: TRL's generation config, where it leaves a field unset the model's own generation
    config, as transformers fills it (:data:`_ACTS`)."""
    found = []
    for key, acts in _ACTS.items():
        value = getattr(trl_config, key, None)
        if value is None:
            value = getattr(model_config, key, None)
        if value is not None and acts(value):
            found.append(f"{key}={value!r}")
    return found


def check_model(trainer: Any) -> None:
    """One-line ConfigError when the trainer's model or setup cannot sample through :func:`rlvr_div.sampling.decode`
    (called once the model is built, before training)."""
    if trainer.is_fsdp_enabled:
        raise ConfigError("rollout_sampler: rlvr_div does not run under FSDP (its shards are gathered only for TRL's "
                          "generate); use rollout_sampler: trl")  # fmt: skip
    if trainer.is_deepspeed_enabled and not trainer.args.ds3_gather_for_generation:
        raise ConfigError("rollout_sampler: rlvr_div needs the weights gathered for generation (each process stops "
                          "when its own rows end); drop ds3_gather_for_generation: false")  # fmt: skip
    if trainer.rollout_func is not None:
        raise ConfigError("rollout_sampler: rlvr_div does not act with a rollout_func (TRL calls it instead); use "
                          "one")  # fmt: skip
    from transformers import ProcessorMixin
    from transformers.cache_utils import DynamicCache

    if isinstance(trainer.processing_class, ProcessorMixin):
        raise ConfigError("rollout_sampler: rlvr_div samples text prompts only (this model takes a processor); use "
                          "rollout_sampler: trl")  # fmt: skip
    model = trainer.accelerator.unwrap_model(trainer.model)
    if getattr(getattr(model, "active_peft_config", None), "is_prompt_learning", False):
        raise ConfigError("rollout_sampler: rlvr_div does not run peft prompt learning (its virtual tokens come with "
                          "generate); use rollout_sampler: trl")  # fmt: skip
    if not shares_prompts_exactly(model):
        raise ConfigError(
            "rollout_sampler: rlvr_div does not run this model as generate does (a sequence-length-"
            "dependent RoPE, or positions from the model's own index); use rollout_sampler: trl"
        )
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    overrides = generation_overrides(trainer.generation_config, getattr(base, "generation_config", None))
    if overrides:
        raise ConfigError(f"rollout_sampler: rlvr_div samples with temperature and top_p only, but the generation "
                          f"config sets {', '.join(overrides)}; use rollout_sampler: trl")  # fmt: skip
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
