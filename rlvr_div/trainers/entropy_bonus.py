"""The entropy bonus of TRL 1.16 (``entropy_coef``, and Skywork-OR1's adaptive control ``use_adaptive_entropy``) for
every trainer here, and the checks of its keys.

TRL's objective is L = L_policy − c·H̄, where H̄ is the mean per-token entropy of π_θ's next-token distribution over
the completion tokens the policy loss acts on (sampled from π_old), divided by the gradient-accumulation steps and
never by a loss type's own normaliser. With ``use_adaptive_entropy`` the coefficient c starts at ``entropy_coef``;
after every optimizer step it moves by ``entropy_coef_delta`` (up when the step's token-weighted mean entropy over
all processes was ≤ ``entropy_target``, down otherwise) within [``entropy_coef_min``, ``entropy_coef_max``], and the
bonus is applied only while the last step's entropy was ≤ ``entropy_target``. TRL saves (c, last entropy) with each
checkpoint (``entropy_ctrl_state.json``).

``grpo`` (TRL's own trainer) and ``divergence`` (whose loss is TRL's plus its plug-ins' terms) get the bonus from TRL.
α-DPG (the ``dpg`` plug-in, ``trainer: dpg``) replaces TRL's loss, so :func:`entropy_bonus` adds the same term,
with the same controller state, to it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from trl import GRPOConfig

from rlvr_div.errors import ConfigError
from rlvr_div.trainers import trl_seam

ADAPTIVE_KEYS = ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")


def check_entropy_bonus(training: Any) -> None:
    """One-line ConfigError for entropy settings that are invalid or would do nothing, before any model loads."""
    coef = training.entropy_coef
    if not math.isfinite(coef) or coef < 0:
        raise ConfigError(f"entropy_coef must be a finite number >= 0 (a bonus), got {coef}")
    if not training.use_adaptive_entropy:
        for key in ADAPTIVE_KEYS:
            if getattr(training, key) != getattr(GRPOConfig, key):
                raise ConfigError(f"{key}={getattr(training, key)} acts only with use_adaptive_entropy: true")
    else:
        lo, hi = training.entropy_coef_min, training.entropy_coef_max
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
            raise ConfigError(f"need 0 <= entropy_coef_min <= entropy_coef_max, got {lo} and {hi}")
        if not lo <= coef <= hi:
            raise ConfigError(f"entropy_coef={coef} (the initial coefficient) is outside [{lo}, {hi}]")
        if not (math.isfinite(training.entropy_coef_delta) and training.entropy_coef_delta > 0):
            raise ConfigError(f"entropy_coef_delta must be > 0, got {training.entropy_coef_delta}")
        if not (math.isfinite(training.entropy_target) and training.entropy_target > 0):
            raise ConfigError(f"entropy_target must be > 0 nats, got {training.entropy_target}")
        if hi == 0:
            raise ConfigError("entropy_coef_max is 0: the adaptive entropy bonus could never act")


def entropy_bonus(trainer: Any, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """c·H̄ for a GRPOTrainer subclass whose loss replaces TRL's (subtract it from the loss), with TRL's semantics
    and controller state (``trainer.entropy_coef``, TRL's ``_last_world_entropy`` and ``_entropy_window_stats``, read
    and written through :mod:`rlvr_div.trainers.trl_seam`).

    H̄ = Σ_t H_t·m_t / Σ_t m_t over this micro-batch, divided by the accumulation steps in training. Adaptive mode:
    c is the coefficient from the end of the previous optimizer step, gated on that step's entropy ≤ target; the
    window's entropy sums are reduced over processes at the step boundary and c moves by ±delta within its bounds.
    Logs ``entropy_coef`` at each train optimizer step, as TRL does.
    """
    args = trainer.args
    mode = "train" if trainer.model.training else "eval"
    m = mask.to(entropies.dtype)
    accumulation = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
    mean_entropy = (entropies * m).sum() / m.sum().clamp(min=1.0) / accumulation
    if trainer.use_adaptive_entropy:
        coef = trainer.entropy_coef if trl_seam.last_world_entropy(trainer) <= args.entropy_target else 0.0
    else:
        coef = trainer.entropy_coef
    if trainer.use_adaptive_entropy and mode == "train":
        stats = torch.stack([(entropies * m).sum(), m.sum()]).detach()
        window = trl_seam.entropy_window(trainer)
        trl_seam.set_entropy_window(trainer, stats if window is None else window + stats)
        if trainer.accelerator.sync_gradients:
            totals = trainer.accelerator.reduce(trl_seam.entropy_window(trainer), reduction="sum")
            world_entropy = (totals[0] / totals[1].clamp(min=1.0)).item()
            step = args.entropy_coef_delta if world_entropy <= args.entropy_target else -args.entropy_coef_delta
            trainer.entropy_coef = min(max(trainer.entropy_coef + step, args.entropy_coef_min), args.entropy_coef_max)
            trl_seam.set_last_world_entropy(trainer, world_entropy)
            trl_seam.set_entropy_window(trainer, None)
    if mode == "train" and trainer.accelerator.sync_gradients:
        trl_seam.metrics(trainer, mode)["entropy_coef"].append(trainer.entropy_coef)
    return coef * mean_entropy
