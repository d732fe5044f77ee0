"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv:2505.22617): restrict the update of the few tokens whose log-probability and advantage covary most.

Under a policy gradient, a token's contribution to the change of policy entropy is (minus) the covariance of its
log-probability and its advantage; a few high-covariance tokens drive entropy collapse. Over the N completion
tokens of a loss batch (y_t sampled from π_old, l_t = log π_θ(y_t|·) at the current parameters, A_t the advantage of
the token's completion):

    Cov_t = (l_t − (1/N)·Σ_s l_s) · (A_t − (1/N)·Σ_s A_s)

- ``clip_cov``: draw ⌊r·N⌋ tokens uniformly at random among those with ω_low ≤ Cov_t ≤ ω_high (all of them when
  fewer qualify) and detach them from the policy gradient: their policy-loss term is 0 (their advantage is set to 0
  before TRL's loss). r = ``clip_cov_ratio``, ω = (``clip_cov_lb``, ``clip_cov_ub``).
- ``kl_cov``: the ⌊k·N⌋ tokens with the largest Cov_t (k = ``kl_cov_ratio``) get a penalty β·|l_t − log π_old(y_t)|
  (β = ``kl_cov_coef``) added to their policy-loss term, aggregated with the same normaliser as TRL's loss.

The selection uses detached values; the means and N are over the loss batch of one process (as in the reference
code). The policy term itself is TRL's for the recipe's ``loss_type`` (PPO-clipped by ``epsilon``); the paper writes
the unclipped π_θ/π_old·A, and the authors' Clip-Cov runs set the clip range to 1.

Where the paper and its reference code (PRIME-RL/Entropy-Mechanism-of-RL, merged into verl) differ, this follows
the paper: the code selects at least one token (max(⌊r·N⌋, 1)) where the paper selects ⌊r·N⌋, and its Clip-Cov
leaves out tokens PPO's clip already cut, where the paper draws among all tokens in [ω_low, ω_high]. verl's defaults
are kept: r = k = 2e-4, ω = (1, 5), β = 0.1. |l_t − log π_old(y_t)| is 0 with zero gradient on fresh samples
(π_θ = π_old), so KL-Cov acts only on reused samples (``num_iterations`` > 1 or ``steps_per_generation`` >
``gradient_accumulation_steps``); the checks refuse a recipe where it could never act.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import POSITIVE, PROBABILITY
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import aggregate, global_masked_mean
from rlvr_div.trainers.plugin import GRPOPlugin, LossFn, register_plugin

COVARIANCE_PENALTIES = ("none", "clip_cov", "kl_cov")


def token_covariance(logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cov_t = (l_t − l̄)(A_t − Ā) with the means over the masked tokens; 0 where ``mask`` is 0.

    ``logps`` and ``mask`` are (B, T); ``advantages`` is (B,) (one per completion) or (B, T).
    """
    m = mask.to(torch.float64)
    n = m.sum().clamp(min=1.0)
    lp = logps.detach().to(torch.float64)
    adv = advantages.detach().to(torch.float64)
    adv = adv.unsqueeze(-1).expand_as(lp) if adv.dim() == 1 else adv.expand_as(lp)
    lp_mean = (lp * m).sum() / n
    adv_mean = (adv * m).sum() / n
    return (lp - lp_mean) * (adv - adv_mean) * m


def clip_cov_tokens(
    cov: torch.Tensor,
    mask: torch.Tensor,
    ratio: float,
    lower: float,
    upper: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Clip-Cov's token set: ⌊ratio·N⌋ tokens drawn uniformly among the masked ones with lower ≤ Cov ≤ upper."""
    valid = mask.bool()
    count = math.floor(ratio * int(valid.sum()))
    candidates = torch.nonzero((valid & (cov >= lower) & (cov <= upper)).reshape(-1)).squeeze(-1)
    selected = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if count > 0 and candidates.numel() > 0:
        order = torch.randperm(candidates.numel(), generator=generator, device="cpu").to(candidates.device)
        selected[candidates[order[:count]]] = True
    return selected.view_as(cov)


def kl_cov_tokens(cov: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """KL-Cov's token set: the ⌊ratio·N⌋ masked tokens with the largest Cov (ties: the first in batch order)."""
    valid = mask.bool()
    count = math.floor(ratio * int(valid.sum()))
    selected = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if count > 0:
        keyed = torch.where(valid, cov.to(torch.float64), torch.full_like(cov, -math.inf, dtype=torch.float64))
        order = torch.sort(keyed.reshape(-1), descending=True, stable=True).indices
        selected[order[:count]] = True
    return selected.view_as(cov)


def kl_cov_penalty(logps: torch.Tensor, old_logps: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """|l_t − log π_old(y_t)| on the selected tokens, 0 elsewhere; differentiable in ``logps``."""
    return (logps - old_logps.detach()).abs() * selected.to(logps.dtype)


class CovariancePenalty:
    """Applies Clip-Cov or KL-Cov inside ``DivergenceGRPOTrainer``'s loss.

    The plug-in (:class:`CovariancePlugin`) calls :meth:`loss` around the trainer's own loss; the one forward that
    TRL's loss runs reports the current log-probs through :meth:`on_loss_logps`, where the tokens are selected and
    (Clip-Cov) the advantages TRL is about to read are replaced by a (B, T) copy with zeros on the selected tokens.
    """

    def __init__(self, name: str, ratio: float, lower: float, upper: float, kl_coef: float) -> None:
        self.name, self.ratio, self.lower, self.upper, self.kl_coef = name, ratio, lower, upper, kl_coef
        self._watched: dict[str, Any] | None = None
        self._selected: torch.Tensor | None = None
        self._kl_term: torch.Tensor | None = None
        self._cov: torch.Tensor | None = None
        self.last_selected: torch.Tensor | None = None  # the tokens of the last training loss batch, for inspection

    @classmethod
    def from_args(cls, args: Any) -> CovariancePenalty | None:
        if args.covariance_penalty == "none":
            return None
        if args.covariance_penalty == "clip_cov":
            return cls("clip_cov", args.clip_cov_ratio, args.clip_cov_lb, args.clip_cov_ub, 0.0)
        return cls("kl_cov", args.kl_cov_ratio, -math.inf, math.inf, args.kl_cov_coef)

    @staticmethod
    def _mask(inputs: dict[str, Any]) -> torch.Tensor:
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    def on_loss_logps(self, logps: torch.Tensor) -> None:
        """Select the tokens from the loss forward's log-probs (no-op outside :meth:`loss`, or after the first)."""
        watched = self._watched
        if watched is None or self._selected is not None:
            return
        mask = self._mask(watched)
        advantages = watched["advantages"]
        cov = token_covariance(logps, advantages, mask)
        if self.name == "clip_cov":
            selected = clip_cov_tokens(cov, mask, self.ratio, self.lower, self.upper)
            adv = advantages.unsqueeze(-1).expand_as(logps) if advantages.dim() == 1 else advantages.expand_as(logps)
            watched["advantages"] = adv * (~selected).to(adv.dtype)
        else:
            selected = kl_cov_tokens(cov, mask, self.ratio)
            old = watched.get("old_per_token_logps")
            self._kl_term = kl_cov_penalty(logps, logps.detach() if old is None else old, selected)
        self._selected, self._cov, self.last_selected = selected, cov, selected

    def loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        inner: Callable[[Any, dict[str, Any]], torch.Tensor],
        aggregate: Callable[[torch.Tensor, torch.Tensor, dict[str, Any]], torch.Tensor],
        log: Callable[[str, torch.Tensor, torch.Tensor], None],
    ) -> torch.Tensor:
        """``inner(model, inputs)`` (the trainer's loss) with the tokens restricted, plus KL-Cov's penalty
        ``kl_coef · aggregate(per_token, mask, inputs)``; ``log(name, per_token, mask)`` records a masked mean."""
        self._watched, self._selected, self._kl_term, self._cov = dict(inputs), None, None, None
        try:
            loss = inner(model, self._watched)
        finally:
            watched, self._watched = self._watched, None
        if self._selected is None:
            raise RuntimeError(
                f"covariance_penalty {self.name!r}: the loss ran no per-token log-prob forward to select tokens from"
            )
        mask = self._mask(watched)
        selected = self._selected.to(mask.dtype)
        log(f"cov/{self.name}_frac", selected, mask)
        log("cov/covariance", self._cov.to(mask.dtype), mask)
        if self._kl_term is not None:
            log("cov/kl_cov_penalty", self._kl_term.detach(), mask)
            loss = loss + self.kl_coef * aggregate(self._kl_term, mask, inputs)
        self._selected = self._kl_term = self._cov = None
        return loss


@dataclass
class CovariancePenaltyArgs:
    """Recipe keys of Clip-Cov / KL-Cov (``covariance_penalty: clip_cov | kl_cov``), with verl's defaults."""

    covariance_penalty: str = field(
        default="none",
        metadata={"help": "Restrict high-covariance tokens (Cui et al. 2025): none, clip_cov or kl_cov."},
    )
    clip_cov_ratio: float = field(
        default=2e-4, metadata={"help": "Clip-Cov: r, the fraction of a loss batch's tokens detached."}
    )
    clip_cov_lb: float = field(default=1.0, metadata={"help": "Clip-Cov: ω_low, the lower covariance bound."})
    clip_cov_ub: float = field(default=5.0, metadata={"help": "Clip-Cov: ω_high, the upper covariance bound."})
    kl_cov_ratio: float = field(
        default=2e-4, metadata={"help": "KL-Cov: k, the fraction of a loss batch's tokens penalised (top covariance)."}
    )
    kl_cov_coef: float = field(
        default=0.1, metadata={"help": "KL-Cov: β, the weight of |log π_θ − log π_old| on the selected tokens."}
    )


_CLIP_KEYS = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
_KL_KEYS = ("kl_cov_ratio", "kl_cov_coef")


def check_covariance_penalty(args: Any) -> None:
    """One-line ConfigError for a bad Clip-Cov / KL-Cov setting (or one that could never select a token or act, as
    the other penalty's keys); the ranges of the ratios and of ``kl_cov_coef``, and that every key acts only with a
    penalty, are declared in :class:`CovariancePlugin`."""
    name = args.covariance_penalty
    if name not in COVARIANCE_PENALTIES:
        raise ConfigError(f"unknown covariance_penalty {name!r}; known: {', '.join(COVARIANCE_PENALTIES)}")
    idle = {"clip_cov": _KL_KEYS, "kl_cov": _CLIP_KEYS}.get(name, ())  # none: declared (CovariancePlugin)
    for key in idle:
        if getattr(args, key) != getattr(CovariancePenaltyArgs, key):
            raise ConfigError(f"{key}={getattr(args, key)} does not act with covariance_penalty: {name}")
    if name == "none":
        return
    ratio_key = "clip_cov_ratio" if name == "clip_cov" else "kl_cov_ratio"
    ratio = getattr(args, ratio_key)
    tokens = getattr(args, "per_device_train_batch_size", 0) * (getattr(args, "max_completion_length", 0) or 0)
    if tokens and ratio * tokens < 1:
        raise ConfigError(
            f"{ratio_key}={ratio} selects ⌊{ratio}·N⌋ = 0 tokens: a loss batch holds at most N = "
            f"per_device_train_batch_size·max_completion_length = {tokens} tokens; "
            f"raise {ratio_key} to >= {1 / tokens:.2g}"
        )
    if name == "clip_cov":
        lb, ub = args.clip_cov_lb, args.clip_cov_ub
        if not (math.isfinite(lb) and math.isfinite(ub) and lb <= ub):
            raise ConfigError(f"need finite clip_cov_lb <= clip_cov_ub, got {lb} and {ub}")
        return
    reused = getattr(args, "num_iterations", 1) > 1 or (
        (getattr(args, "steps_per_generation", None) or 1) > getattr(args, "gradient_accumulation_steps", 1)
    )
    if not reused:
        raise ConfigError(
            "covariance_penalty 'kl_cov' penalises |log π_θ − log π_old|, which is 0 with zero gradient on fresh "
            "samples: set num_iterations > 1 or steps_per_generation > gradient_accumulation_steps"
        )


@register_plugin("loss_term")
class CovariancePlugin(GRPOPlugin):
    """Clip-Cov / KL-Cov around the whole training loss (``covariance_penalty``)."""

    name = "covariance_penalty"
    Args = CovariancePenaltyArgs
    selected_by = "covariance_penalty: clip_cov or kl_cov"
    switches = ("covariance_penalty",)
    ranges = {"clip_cov_ratio": PROBABILITY, "kl_cov_ratio": PROBABILITY, "kl_cov_coef": POSITIVE}

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        self.penalty = CovariancePenalty.from_args(trainer.args)

    @classmethod
    def prepare(cls, args: Any) -> None:
        check_covariance_penalty(args)

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.covariance_penalty != "none"

    @classmethod
    def log_prob_penalties(cls, args: Any) -> tuple[str, ...]:
        return ("covariance_penalty: kl_cov",) if args.covariance_penalty == "kl_cov" else ()

    def on_logps(self, logps: torch.Tensor) -> None:  # the tokens are selected from the loss forward's log-probs
        self.penalty.on_loss_logps(logps)

    def wrap_loss(self, loss: LossFn) -> LossFn:
        trainer = self.trainer

        def restricted(model: Any, inputs: dict[str, Any]) -> torch.Tensor:
            if not trainer.model.training:
                return loss(model, inputs)
            train = trl_seam.metrics(trainer, "train")
            log = lambda name, x, mask: train[name].append(global_masked_mean(trainer, x, mask))  # noqa: E731
            return self.penalty.loss(model, inputs, loss, lambda *a: aggregate(trainer, *a), log)

        return restricted
