"""The plumbing the project's GRPO trainer (``DivergenceGRPOTrainer``) and its plug-ins share: TRL's group advantages
and loss normalisers, gathered sequence log-probs, the per-step diversity metrics, the replacement of TRL's
advantages by shaped ones, and the per-token forward whose LM head runs in chunks (:func:`chunked_token_logps`).

Every function takes the trainer (a ``trl.GRPOTrainer``) as its first argument where it needs one; none keeps state,
except that :func:`log_group_diversity` leaves the batch's gathered texts on the trainer (``gathered_texts``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
from accelerate.utils import gather_object
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd

from rlvr_div.errors import ConfigError
from rlvr_div.logprobs import default_chunk, head_split, head_token_stats, may_split
from rlvr_div.rewards.base import check_validity_reward_index, completion_text
from rlvr_div.trainers import trl_seam


def checked_init_arguments(trainer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``GRPOTrainer.__init__``'s arguments bound by name, after the check that needs no model: the config's
    ``validity_reward_index`` names one of the reward functions (one line, before TRL loads the model)."""
    from trl import GRPOTrainer

    bound = inspect.signature(GRPOTrainer.__init__).bind(trainer, *args, **kwargs).arguments
    config, funcs = bound.get("args"), bound.get("reward_funcs")
    if config is not None and funcs is not None:
        funcs = funcs if isinstance(funcs, list) else [funcs]
        names = [f if isinstance(f, str) else getattr(f, "__name__", type(f).__name__) for f in funcs]
        check_validity_reward_index(getattr(config, "validity_reward_index", 0), names)
    return bound


def distributed_backend(args: Any) -> str | None:
    """``"DeepSpeed"`` or ``"FSDP"`` when the run shards its model that way (a training argument or the
    ``accelerate launch`` config), else None."""
    if getattr(args, "deepspeed", None) or getattr(args, "deepspeed_plugin", None) is not None:
        return "DeepSpeed"
    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true"):
        return "FSDP"
    return None


def group_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    group: int,
    aggregation: str = "sum_then_normalize",
    scale: str = "group",
) -> torch.Tensor:
    """TRL 1.16's GRPO advantages from gathered rewards (N, K) of K reward functions, N in consecutive groups.

    ``sum_then_normalize``: R_i = Σ_k w_k·r_ik (NaN terms skipped), A_i = (R_i − mean_group R) / (std + 1e-4) with
    the std of the group (``scale`` "group"), of the batch ("batch") or no division ("none").
    ``normalize_then_sum`` (GDPO): each reward is standardised within its group first, R_i = Σ_k w_k·z_ik, and
    A_i = (R_i − mean R)/(std R + 1e-4) over the batch. A completion that no function scores (all NaN) is left out of
    every mean and std and gets A_i = 0; means and stds are NaN-aware, stds with Bessel's correction."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        grouped = rewards.view(-1, group)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(group)
        if scale == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        else:
            std = nanstd(grouped, dim=1).repeat_interleave(group) if group > 1 else torch.zeros_like(rewards)
        advantages = rewards - mean
        if scale != "none":
            advantages = advantages / (std + 1e-4)
    elif aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, group, rewards_per_func.size(1))
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if group > 1 else torch.zeros_like(mean_k)
        standardised = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rewards_per_func.size(1))
        rewards = (standardised * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards) if rewards.numel() > 1 else torch.zeros(())
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ConfigError(f"unknown multi_objective_aggregation {aggregation!r}")
    return torch.nan_to_num(advantages, nan=0.0)


def trainer_group_advantages(trainer: Any, rewards_per_func: torch.Tensor, device: torch.device) -> torch.Tensor:
    """:func:`group_advantages` with the trainer's reward weights, group size, aggregation and scaling."""
    return group_advantages(
        rewards_per_func.to(device), trainer.reward_weights.to(device), trainer.num_generations,
        trainer.multi_objective_aggregation, trainer.scale_rewards,
    )  # fmt: skip


def group_diversity(valid: torch.Tensor, texts: list[str], group: int) -> dict[str, float]:
    """Per-group statistics of a batch laid out as consecutive groups of ``group`` completions of one prompt.

    ``pass_at_group``: fraction of groups with ≥ 1 valid completion (pass@G); ``distinct_valid``: mean number of
    distinct valid texts per group; ``valid_rate``: fraction of valid completions.
    """
    if len(texts) != valid.numel() or valid.numel() % group:
        raise ValueError(f"{valid.numel()} completions do not form groups of {group}")
    v = valid.view(-1, group)
    distinct = [len({texts[g * group + i] for i in range(group) if v[g, i]}) for g in range(v.size(0))]
    return {
        "pass_at_group": v.any(dim=1).float().mean().item(),
        "distinct_valid": sum(distinct) / len(distinct),
        "valid_rate": v.float().mean().item(),
    }


def log_group_diversity(trainer: Any, valid: torch.Tensor, completions: list[Any]) -> dict[str, float]:
    """Log ``diversity/*`` (:func:`group_diversity`) of a batch from its gathered validity (N,) and this process's
    completions (their texts are gathered here, once per batch: a prompt's group can span processes, and they are
    kept as ``trainer.gathered_texts`` for the plug-ins); returns the statistics."""
    mode = "train" if trainer.model.training else "eval"
    group = trainer.num_generations if mode == "train" else trainer.num_generations_eval
    texts = gather_object([completion_text(c).strip() for c in completions])
    trainer.gathered_texts = texts  # the last scored batch's stripped texts, over all processes
    stats = group_diversity(valid.cpu(), texts, group)
    for name, value in stats.items():
        trl_seam.metrics(trainer, mode)[f"diversity/{name}"].append(value)
    return stats


def replace_advantages(trainer: Any, advantages: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
    """This process's slice of gathered advantages (N,), which also replace the ones TRL logged last for the batch."""
    logged = trl_seam.logged_advantages(trainer)  # TRL logged the unshaped advantages of this batch last: replace them
    for _ in range(min(advantages.numel(), len(logged))):
        logged.pop()
    logged.extend(advantages.tolist())
    local = out["completion_mask"].size(0)
    start = trainer.accelerator.process_index * local
    return advantages[start : start + local].to(out["advantages"].device, out["advantages"].dtype)


def sequence_logps(trainer: Any, per_token: torch.Tensor, mask: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """Sequence log-probs of the local batch (sum over the completion, or mean per token), gathered over processes."""
    total = (per_token * mask).sum(-1)
    if mean:
        total = total / mask.sum(-1).clamp(min=1.0)
    return trainer.accelerator.gather(total)


def policy_logps_no_grad(trainer: Any, out: dict[str, Any], batch_size: int | None = None) -> torch.Tensor:
    """Per-token log-probs of the current policy on a generated batch (text-only inputs), without gradient: the
    sampling policy π_old when TRL skipped computing it (on-policy steps)."""
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        logps, _, _ = trl_seam.per_token_logps(
            trainer, trainer.model, ids, attention, out["completion_ids"].size(1), batch_size=batch_size
        )
    return logps


def sampling_logps(trainer: Any, out: dict[str, Any]) -> torch.Tensor:
    """log π_old per token: TRL's when it computed them (off-policy steps), else one no-grad forward."""
    old = out.get("old_per_token_logps")
    return policy_logps_no_grad(trainer, out) if old is None else old


def global_masked_mean(trainer: Any, x: torch.Tensor, mask: torch.Tensor) -> float:
    """Σ x·mask / Σ mask over all processes."""
    totals = trainer.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]), reduction="sum")
    return (totals[0] / totals[1].clamp(min=1.0)).item()


def aggregate(trainer: Any, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
    """TRL's normaliser of the policy loss for the trainer's ``loss_type`` (gradient accumulation included), applied
    to a per-token term: an extra term then enters the loss on the policy loss's own scale."""
    training = trainer.model.training
    accum = trainer.current_gradient_accumulation_steps if training else 1.0
    masked = per_token * mask
    lt = trainer.loss_type
    if lt in ("grpo", "sapo"):
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accum
    if lt == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0) / accum
    if lt == "dr_grpo":
        return masked.sum() / (per_token.size(0) * trainer.max_completion_length) / accum
    if lt in ("cispo", "dapo", "vespo"):
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
        if training:
            normalizer = normalizer * trainer.current_gradient_accumulation_steps / trainer.args.steps_per_generation
        return masked.sum() / normalizer
    if lt == "luspo":
        return masked.sum(-1).mean() / accum
    raise ValueError(f"unknown loss_type {lt!r}")


def completion_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """The completion tokens that count: TRL's completion mask, times its tool mask when there is one."""
    mask = inputs["completion_mask"]
    return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask


TRITON_DEVICES = ("cuda", "xpu")
"""Devices where TRL's fused LM head runs its Triton kernel on the scored tokens only, one logits tile in place: the
trainers keep TRL's forward there. Elsewhere TRL folds [4096 tokens × 32768 vocabulary] tiles with torch ops over
every position of the rows, several float32 tiles at a time (measured: about 4 in its forward, 9 in its backward)."""


def chunked_token_logps(
    trainer: Any,
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None = None,
    compute_entropy: bool = False,
    compute_aux_loss: bool = False,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None, None] | None:
    """TRL's per-token forward (``_get_per_token_logps_and_entropies``) with the LM head applied to the scored
    positions only, a chunk of them at a time: (log-probs, entropies or None, None), or None where TRL's own forward
    should run.

    For each of the last K = ``logits_to_keep`` tokens y_t of a row: log p(y_t) and, with ``compute_entropy``,
    H_t = −Σ_v p(v)·log p(v), where p = softmax(logits_{t−1} / T) at the trainer's sampling temperature T; 0 (both)
    where ``attention_mask`` is 0, as TRL gives. One forward per ``batch_size`` rows stops at the hidden states the
    head takes (:func:`rlvr_div.logprobs.head_split`), and :func:`rlvr_div.logprobs.head_token_stats` forms the logits
    of the attended completion tokens :data:`rlvr_div.logprobs.LOGIT_CHUNK_BYTES` at a time, recomputing each chunk in
    backward: memory beyond the backbone's activations is a few chunk × vocabulary tensors, whatever the number of
    rollouts. Rows that repeat a prompt (GRPO's groups) run it once (:func:`shared_prompt_forward`) where the
    trainer's ``share_prompt_forward`` is true (the config's, off while a plug-in reads whole rows). Equal to TRL's
    fused head up to float round-off (``tests/test_training_memory.py``).

    None (TRL's forward runs) for multimodal inputs (``kwargs`` not all None), the MoE auxiliary loss, a model on a
    device where TRL's Triton kernel runs (:data:`TRITON_DEVICES`), a sharded model (DeepSpeed, FSDP) and a model
    whose logits are not its output head plus a known finish (``head_split`` warns once)."""
    if compute_aux_loss or any(v is not None for v in kwargs.values()):
        return None
    if input_ids.device.type in TRITON_DEVICES or distributed_backend(trainer.args) is not None:
        return None
    rows, width = input_ids.shape
    keep_cols = min(logits_to_keep, width - 1)  # TRL's log-probs have width − 1 columns, its last K taken
    size = batch_size or rows
    logps, entropies = [], []
    share = getattr(trainer, "share_prompt_forward", False)  # DivergenceGRPOTrainer's (set in its __init__)
    for start in range(0, rows, size):
        ids, attention = input_ids[start : start + size], attention_mask[start : start + size]
        with trainer.accelerator.autocast():
            shared = shared_prompt_forward(model, ids, attention, keep_cols) if share else None
            split = shared if shared is not None else head_split(model, ids, attention, use_cache=False)
            if split is None:  # a model the probe cannot split (known from its first forward): TRL's, all rows
                return None
            head, finish, hidden, vocab = split
            scored = attention[:, width - keep_cols :].bool()
            # the hidden states that predict the completion's tokens: the last prompt token's and all but the last
            # completion token's (in the shared forward, the first keep_cols of its [last prompt token | completion])
            h = (hidden[:, :keep_cols] if shared is not None else hidden[:, width - 1 - keep_cols : width - 1])[scored]
            targets = ids[:, width - keep_cols :][scored]
            lp, ent = head_token_stats(head, finish, h, targets, trainer.temperature, default_chunk(vocab),
                                       entropy=compute_entropy)  # fmt: skip
        logps.append(lp.new_zeros(scored.shape).masked_scatter(scored, lp))
        if ent is not None:
            entropies.append(ent.new_zeros(scored.shape).masked_scatter(scored, ent))
    return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None


def has_active_dropout(model: Any) -> bool:
    """Whether a forward of ``model`` draws random dropout masks: a dropout module (any ``_DropoutNd``) with p > 0 in
    training mode, or, while the model trains, a config setting of a functional dropout (a number > 0 under a name
    with ``dropout`` or ``pdrop``: ``attention_dropout``, ``hidden_dropout``, ``attn_pdrop``, ...)."""
    for module in model.modules():
        if module.training and isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            return True
    if not model.training:
        return False
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    settings = vars(text) if text is not None else {}
    return any(("dropout" in k or "pdrop" in k) and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
               for k, v in settings.items())  # fmt: skip


# sequence-length-dependent RoPE: its frequencies follow the longest position of each forward, which the prompt's
# forward and the rows' continuation see differently from one forward of whole rows
_LENGTH_DEPENDENT_ROPE = frozenset({"dynamic", "longrope"})


def shares_prompts_exactly(model: Any) -> bool:
    """Whether the shared forward computes what one forward of whole rows does for ``model``: not a peft prompt-learning
    model (prefix or prompt tuning put their own tokens before the prompt), not a sequence-length-dependent RoPE, not
    a model whose positions come from its own index (``get_rope_index``: Qwen-VL)."""
    peft_config = getattr(model, "active_peft_config", None)
    if getattr(peft_config, "is_prompt_learning", False):
        return False
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in ("rope_parameters", "rope_scaling"):
        rope = getattr(text, key, None)
        ropes = [rope, *rope.values()] if isinstance(rope, dict) else []  # per layer type (Gemma-3) or one
        if any(isinstance(r, dict) and (r.get("rope_type") or r.get("type")) in _LENGTH_DEPENDENT_ROPE for r in ropes):
            return False
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return not any(callable(getattr(m, "get_rope_index", None)) for m in (base, getattr(base, "model", None)))


def rows_copyable(cache: Any) -> bool:
    """Whether every layer of ``cache`` holds only keys and values that indexing by rows copies (a dynamic or sliding-
    window attention layer); a linear-attention or state-space layer's states (hybrid models) are not."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in layers)


def shared_prompt_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep_cols: int
) -> tuple[torch.nn.Module, Any, torch.Tensor, int] | None:
    """The forward of rows [prompt | completion] (the last ``keep_cols`` columns the completion) that runs each
    distinct prompt once: :func:`rlvr_div.logprobs.head_split`'s (head, finish, hidden states, vocabulary) with the
    hidden states of the rows' last ``keep_cols + 1`` columns, [last prompt token | completion]; or None where it
    does not apply.

    GRPO's rows come in groups of G completions of one prompt, and TRL's forward runs every prompt token once per row.
    Here the distinct prompts but their last token run once with their key/value cache kept (with gradient), the
    cache is copied to each row of its prompt (indexing, which backward sums over the copies), and the rows continue
    from it: the same positions, attention mask and weights, so the same log-probs and gradients up to float
    round-off (matrix products over other shapes; ``tests/test_training_memory.py``). A prompt of P tokens and G
    completions of C tokens cost one forward of P − 1 + G·(C + 1) tokens instead of G·(P + C) (the memory a step
    saves is measured in docs/benchmarks_details.md, "Training memory at 64 rollouts × 64 tokens").

    None (the caller's full forward runs) where no prompt repeats, where the prompt is a single column, while a
    dropout draws masks (a shared prompt would share one mask among the rows that TRL gives one each:
    :func:`has_active_dropout`), with gradient checkpointing (which turns the cache off), for a model wrapped in
    DistributedDataParallel (two forwards before one backward), for a model whose result would differ
    (:func:`shares_prompts_exactly`: peft prompt learning, a sequence-length-dependent RoPE, positions from the
    model's own index), and for a model whose forward gives no cache that indexing by rows copies whole
    (:func:`rows_copyable`: hybrid models' linear-attention and state-space layers)."""
    rows, width = input_ids.shape
    prompt_width = width - keep_cols
    if prompt_width < 2 or rows < 2 or has_active_dropout(model):
        return None
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):  # its reducer expects one forward per backward
        return None
    if not may_split(model) or not shares_prompts_exactly(model):
        return None
    try:  # transformers 5's name (a peft model forwards it), then 4's
        checkpointing = model.is_activation_checkpointing
    except AttributeError:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        return None
    prompts = torch.cat([input_ids[:, :prompt_width], attention_mask[:, :prompt_width].to(input_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if distinct.size(0) == rows:
        return None
    head_ids = distinct[:, : prompt_width - 1]
    head_mask = distinct[:, prompt_width : 2 * prompt_width - 1].to(attention_mask.dtype)
    try:  # the head on the last position only: its logits are not used
        cache = model(input_ids=head_ids, attention_mask=head_mask, use_cache=True, logits_to_keep=1).past_key_values
    except TypeError as e:  # a forward without logits_to_keep
        if "logits_to_keep" not in str(e):
            raise
        return None
    if cache is None or not rows_copyable(cache):
        return None
    cache.batch_select_indices(inverse.to(input_ids.device))
    return head_split(model, input_ids[:, prompt_width - 1 :], attention_mask, past=lambda: cache)


def chunked_or_trl_forward(
    trainer: Any,
    trl_forward: Any,
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None = None,
    compute_entropy: bool = False,
    compute_aux_loss: bool = False,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """:func:`chunked_token_logps`, or ``trl_forward`` (TRL's ``_get_per_token_logps_and_entropies``, bound) with the
    same arguments where that returns None."""
    args = (model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss)
    out = chunked_token_logps(trainer, *args, **kwargs)
    return trl_forward(*args, **kwargs) if out is None else out
