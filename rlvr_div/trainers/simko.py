"""SimKO, Simple Pass@K Optimization (Peng, Ren, Yu, Liu & Wen 2025, "SimKO: Simple Pass@K Policy Optimization",
arXiv:2510.14807; code CLR-Lab/SimKO), as a plug-in on TRL's policy loss (``simko: true``, ``simko_top_k``,
``simko_alpha``, ``simko_tau``, ``simko_lambda``).

The paper finds that RLVR concentrates each next-token distribution on its top-1 candidate, and that the stronger
this concentration the worse pass@K. SimKO acts asymmetrically at the high-entropy ("forking") tokens of a
completion: on a verified-correct completion it spreads the positive update over the top-K candidates instead of the
sampled token alone; on a verified-incorrect one it penalises the sampled token harder when it is the top-1
candidate. For completion i and its token t (y_t sampled, π_θ at the sampling temperature, c_1..c_K the K most
probable tokens of π_θ(·|s_t), r_t = π_θ(y_t|s_t)/π_old(y_t|s_t), r_t^(k) the same ratio of c_k, sg the
stop-gradient, H_t the entropy of π_θ(·|s_t)):

    h_t = 1[H_t > Q_τ(H_s : s in completion i)]                (per completion: its τ-quantile, linear interpolation)
    A_i > 0:   r̃_t = (1 − α·h_t)·r_t + (α·h_t/K)·Σ_k sg(r_t / r_t^(k))·r_t^(k)     in place of r_t
    A_i < 0:   A_t = λ·A_i   where h_t = 1 and y_t = c_1,        A_t = A_i elsewhere

then TRL's objective (−min(r̃·A, clip(r̃)·A) for the ratio loss types) as configured. The value of r̃_t is r_t, so the
ratio, its clipping and the loss value are GRPO's (the released code's λ also scales the negative tokens' loss
value; the gradient is the same); only the gradient moves: ∇r̃_t = r_t·[(1 − α·h_t)·∇log π(y_t) + (α·h_t/K)·Σ_k
∇log π(c_k)], a share α of the positive update goes to the mean of the top-K log-probs, and on a negative sample a
sampled top-1 token at a high-entropy position gets λ times GRPO's push down.

Implementation: TRL's loss receives l̃_t in place of log π_θ(y_t|s_t),

    l̃_t = l_t + g_t − sg(g_t),
    g_t = α·h_t·1[A_i > 0]·((1/K)·Σ_k l_t^(k) − l_t) + (λ − 1)·h_t·1[A_i < 0]·1[y_t = c_1]·l_t

whose value is l_t exactly and whose gradient gives exp(l̃_t − l^old_t) the gradient of r̃_t above (and of λ·A on the
penalised tokens); for ``cispo`` and ``vespo``, whose gradient is c·A·∇l_t with c detached, it is the same
redistribution of ∇l_t. The loss forward computes its own logits (TRL's fused LM head yields no top-K), at the
completion positions only and a chunk of them at a time (:func:`rlvr_div.logprobs.head_chunks`, each chunk recomputed
in backward): log π, H_t, the top-K and the top-1 come from one float32 log-softmax of the logits divided by the
temperature.

Branches are chosen by the sign of the advantage the loss uses; the released code picks the positive branch by
reward == 1 and the negative one by A < 0. With one binary verifier and group-relative advantages (the paper's
setting) the two agree wherever A ≠ 0, and at A = 0 both branches leave the loss unchanged; under an advantage
shaping that can make an incorrect sample's advantage positive, the branch follows the advantage, not the verifier.

Defaults are the values of the authors' run scripts (``run_qwen2.5-math-7b_SimKO.sh``, ``run_llama3.2-3b_SimKO.sh``:
``top_k=3``, ``mix_topk_coef=0.01``, ``tau=0.8``) and λ = 1.1, a constant in their ``compute_policy_loss_simko``
(``verl/trainer/ppo/core_algos.py``), whose ratio mixing, per-completion entropy quantile (``torch.quantile`` over the
response tokens, strict ``>``) and top-1 test (argmax of the logits == sampled token) this follows.
The paper's method section was not readable here (its abstract and introduction were), so the formula is the
released code's; docs/methods.md lists what differs from that code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.logprobs import default_chunk, head_chunks, head_split
from rlvr_div.ranges import AT_LEAST_ONE, HALF_OPEN_UNIT, UNIT, Range
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import completion_mask, global_masked_mean
from rlvr_div.trainers.plugin import GRPOPlugin, log_prob_penalties, register_plugin


class TokenStats(NamedTuple):
    """Per-token statistics of a next-token distribution (all (B, T), ``topk_logps`` (B, T, K))."""

    logps: torch.Tensor  # l_t = log π(y_t|s_t), differentiable
    entropies: torch.Tensor  # H_t, differentiable
    topk_logps: torch.Tensor  # l_t^(k) = log π(c_k|s_t), k = 1..K by decreasing probability, differentiable
    is_top1: torch.Tensor  # y_t == c_1 (bool)


def token_statistics(logits: torch.Tensor, ids: torch.Tensor, top_k: int) -> TokenStats:
    """log π(y_t), H_t, the top-K log-probs and [y_t is the top-1] from ``logits`` (B, T, V), already divided by the
    temperature, and the sampled ``ids`` (B, T); one float32 log-softmax."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logps = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    entropies = -(logp.exp() * logp).sum(-1)
    top = logp.detach().topk(top_k, dim=-1).indices
    topk_logps = logp.gather(-1, top)
    is_top1 = logits.detach().argmax(-1) == ids
    return TokenStats(logps, entropies, topk_logps, is_top1)


def packed_statistics(logits: torch.Tensor, ids: torch.Tensor, top_k: int) -> torch.Tensor:
    """:func:`token_statistics` of logits (n, V) in one (n, K + 3) tensor: l_t, H_t, l_t^(1..K), [y_t is the top-1]
    (as 0/1), for :func:`rlvr_div.logprobs.head_chunks`."""
    s = token_statistics(logits, ids, top_k)
    flags = s.is_top1.to(s.logps.dtype)
    return torch.cat([s.logps.unsqueeze(-1), s.entropies.unsqueeze(-1), s.topk_logps, flags.unsqueeze(-1)], dim=-1)


def unpack_statistics(packed: torch.Tensor, top_k: int) -> TokenStats:
    """The :class:`TokenStats` that :func:`packed_statistics` packed into ``packed`` (..., K + 3)."""
    return TokenStats(packed[..., 0], packed[..., 1], packed[..., 2 : 2 + top_k], packed[..., 2 + top_k] > 0.5)


def high_entropy_positions(entropies: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """h_t (bool, (B, T)): H_t strictly above the τ-quantile (linear interpolation) of its row's masked entropies;
    False on masked tokens and on rows without any."""
    valid = mask.bool()
    h = entropies.detach().to(torch.float64)
    threshold = torch.nanquantile(torch.where(valid, h, torch.full_like(h, math.nan)), tau, dim=1, keepdim=True)
    return valid & (h > threshold)


def simko_logps(
    stats: TokenStats, high: torch.Tensor, advantages: torch.Tensor, alpha: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(l̃, topk_branch, top1_branch): l̃_t = l_t + g_t − sg(g_t) (module docstring), with ``high`` = h_t (B, T),
    ``advantages`` (B,) or (B, T); the branches are the tokens where each term of g_t acts."""
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    adv = adv.detach().expand_as(stats.logps)
    positive = high & (adv > 0)
    negative = high & (adv < 0) & stats.is_top1
    logps = stats.logps
    spread = stats.topk_logps.mean(-1) - logps
    g = alpha * positive.to(logps.dtype) * spread + (lam - 1.0) * negative.to(logps.dtype) * logps
    return logps + (g - g.detach()), positive, negative


@dataclass
class SimKOArgs:
    """Recipe keys of SimKO (``simko: true``), with the authors' run-script values as defaults."""

    simko: bool = field(
        default=False,
        metadata={
            "help": "SimKO (arXiv:2510.14807): at each completion's high-entropy tokens, spread a positive sample's "
            "update over the top-K tokens and strengthen a negative sample's push on a sampled top-1 token."
        },
    )
    simko_top_k: int = field(
        default=3,
        metadata={
            "help": "SimKO: K, the top-K tokens a positive sample's update is spread over; 3 in the authors' runs.",
        },
    )
    simko_alpha: float = field(
        default=0.01,
        metadata={
            "help": "SimKO: α in [0, 1], the share of a positive sample's update at a high-entropy token moved to the "
            "mean of the top-K log-probs (mix_topk_coef); 0.01 in the authors' runs.",
        },
    )
    simko_tau: float = field(
        default=0.8,
        metadata={
            "help": "SimKO: τ in [0, 1), a token is high-entropy when its entropy is above its completion's "
            "τ-quantile; 0.8 in the authors' runs (about the top fifth of each completion's tokens); at 1 no token "
            "is above the quantile.",
        },
    )
    simko_lambda: float = field(
        default=1.1,
        metadata={
            "help": "SimKO: λ >= 1, the factor on a negative sample's advantage at a high-entropy token whose sampled "
            "token is the top-1; 1.1 in the authors' code.",
        },
    )


def check_simko(args: Any) -> None:
    """One-line ConfigError for a setting that is plain GRPO, or a combination whose per-token log-prob gradient
    SimKO would also redistribute (the ranges of its keys, and "acts only with simko: true", are declared in
    :class:`SimKOArgs` and :class:`SimKO`)."""
    if not args.simko:
        return
    alpha, lam = args.simko_alpha, args.simko_lambda
    if alpha == 0 and lam == 1:
        raise ConfigError("simko_alpha = 0 and simko_lambda = 1: SimKO would be plain GRPO")
    if penalties := log_prob_penalties(args):
        raise ConfigError(f"simko does not combine with {penalties[0]}, a penalty on the per-token log-probabilities "
                          "whose gradient it would redistribute too; the paper trains without one")  # fmt: skip
    if getattr(args, "importance_sampling_level", "token") != "token":
        raise ConfigError(
            f"simko needs importance_sampling_level: token (the per-token ratio it reshapes), got "
            f"{args.importance_sampling_level!r}"
        )


@register_plugin("loss_term", after=("divergence", "covariance_penalty", "dph_rehearsal"))
class SimKO(GRPOPlugin):
    """Runs the training loss's forward on the full logits and hands TRL's loss l̃ in place of log π_θ(y_t)."""

    name = "simko"
    Args = SimKOArgs
    selected_by = "simko: true"
    switches = ("simko",)
    ranges = {"simko_top_k": AT_LEAST_ONE, "simko_alpha": UNIT, "simko_tau": HALF_OPEN_UNIT, "simko_lambda": Range(1)}

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        vocab = getattr(getattr(trainer.model, "config", None), "vocab_size", None)
        if isinstance(vocab, int) and trainer.args.simko_top_k > vocab:
            raise ConfigError(f"simko_top_k={trainer.args.simko_top_k} exceeds the vocabulary ({vocab} tokens)")
        self._inputs: dict[str, Any] | None = None  # the running training loss's batch, until its forward runs
        self._pending = False

    @classmethod
    def prepare(cls, args: Any) -> None:
        check_simko(args)

    @classmethod
    def active(cls, args: Any) -> bool:
        return bool(args.simko)

    def before_loss(self, model: Any, inputs: dict[str, Any]) -> None:
        training = self.trainer.model.training
        self._inputs, self._pending = (inputs, True) if training else (None, False)

    def forward(self, base: Callable[..., Any], model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                logits_to_keep: int, batch_size: int | None, compute_entropy: bool, compute_aux_loss: bool,
                **kwargs: Any) -> Any:  # fmt: skip
        """The training loss's forward: (l̃, H, None) from the full logits; any other forward is TRL's."""
        inputs, self._inputs = self._inputs, None
        if inputs is None:
            return None
        if compute_aux_loss or any(v is not None for v in kwargs.values()):
            raise RuntimeError("simko supports text-only models without an MoE auxiliary loss (it needs the logits)")
        trainer, args = self.trainer, self.trainer.args
        stats = self.statistics(model, input_ids, attention_mask, logits_to_keep, batch_size)
        mask = completion_mask(inputs)
        high = high_entropy_positions(stats.entropies, mask, args.simko_tau)
        logps, positive, negative = simko_logps(stats, high, inputs["advantages"], args.simko_alpha, args.simko_lambda)
        self._pending = False
        m = mask.to(torch.float32)
        train = trl_seam.metrics(trainer, "train")
        train["simko/high_entropy_frac"].append(global_masked_mean(trainer, high.float(), m))
        train["simko/topk_branch_frac"].append(global_masked_mean(trainer, positive.float(), m))
        train["simko/top1_branch_frac"].append(global_masked_mean(trainer, negative.float(), m))
        train["simko/top1_prob"].append(global_masked_mean(trainer, stats.topk_logps[..., 0].detach().exp(), m))
        return logps, (stats.entropies if compute_entropy else None), None

    def statistics(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                   batch_size: int | None) -> TokenStats:  # fmt: skip
        """:func:`token_statistics` of the completion tokens (the last ``logits_to_keep`` columns) from the model's
        logits at the sampling temperature, in chunks of ``batch_size`` rows; 0 (log-prob, entropy) where
        ``attention_mask`` is 0, as TRL's forward gives. The head is applied to the completion positions only,
        :data:`rlvr_div.logprobs.LOGIT_CHUNK_BYTES` of logits at a time, each chunk recomputed in backward
        (:func:`rlvr_div.logprobs.head_chunks`); a model whose logits the probe cannot split gets its full logits of
        those positions."""
        trainer = self.trainer
        rows, top_k, temperature = input_ids.size(0), trainer.args.simko_top_k, trainer.temperature
        size = batch_size or rows
        parts = []
        for start in range(0, rows, size):
            ids, att = input_ids[start : start + size], attention_mask[start : start + size]
            targets = ids[:, -logits_to_keep:]
            with trainer.accelerator.autocast():
                split = head_split(model, ids, att, use_cache=False)
                if split is None:
                    out = model(input_ids=ids, attention_mask=att, logits_to_keep=logits_to_keep + 1, use_cache=False)
                    logits = out.logits[:, -(logits_to_keep + 1) : -1] / temperature
                    parts.append(token_statistics(logits, targets, top_k))
                    continue
                head, finish, hidden, vocab = split
                h = hidden[:, -(logits_to_keep + 1) : -1].reshape(-1, hidden.size(-1))
                stats = functools.partial(packed_statistics, top_k=top_k)
                packed = head_chunks(head, finish, h, targets.reshape(-1), temperature, default_chunk(vocab), stats)
            parts.append(unpack_statistics(packed.view(*targets.shape, -1), top_k))
        stats = TokenStats(*(torch.cat(field_parts, dim=0) for field_parts in zip(*parts, strict=True)))
        keep = attention_mask[:, -logits_to_keep:].bool()
        zero = torch.zeros((), dtype=stats.logps.dtype, device=stats.logps.device)
        return stats._replace(
            logps=torch.where(keep, stats.logps, zero), entropies=torch.where(keep, stats.entropies, zero)
        )

    def loss_term(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        pending, self._pending, self._inputs = self._pending, False, None
        if pending:
            raise RuntimeError("simko: TRL's loss ran no per-token log-prob forward to reshape")
        return None
