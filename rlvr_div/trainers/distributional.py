"""α-DPG / f-DPG: a policy gradient that moves the policy toward the filtered model p* = a(·|valid) itself.

Kruszewski et al. (ICLR 2026, "Whatever remains must be true"), building on f-DPG (Go et al. 2023). Instead of a
reward plus a penalty toward the base model a, the target is the explicit distribution p*(y) = a(y)·v(y)/A with
A = a(valid) the prompt's base validity rate, and the policy π_θ descends an f-divergence D_f(π_θ‖p*) =
E_{p*}[f(π_θ/p*)]. Its gradient is a policy gradient on π_θ's own samples,

    ∇_θ D_f(π_θ‖p*) = E_{y∼π_θ}[ f′(t(y)) · ∇_θ log π_θ(y) ],      t(y) = π_θ(y)/p*(y),

so −f′(t) plays the role of a reward ("pseudo-reward"). Per prompt group of n samples y_i ∼ π_old (= π_θ at
generation), with sequence log-probs L_i = log π_old(y_i|x), L^ref_i = log a(y_i|x) and validity v_i ∈ {0, 1}:

- Ẑ = (1/n)·Σ_i exp(L^ref_i + log v_i − L^q_i)  (importance estimate of A, since E_q[v·a/q] = A), clamped to ≤ 1,
  with q the distribution the samples came from: π_old, or with vLLM the sampler (its log-probs, which differ from
  π_old's by kernels and precision; π_old's would bias Ẑ);
  a group with no valid sample has Ẑ = 0, replaced by ``dpg_z_floor`` (1e-4) so that logs stay finite (such a
  group gets all-equal pseudo-rewards and zero advantages anyway);
- log t_i = L_i − (L^ref_i + log v_i − log Ẑ)   (+∞ for an invalid sample);
- pseudo-reward R_i by ``dpg_divergence``, clipped above at M = ``dpg_clip`` (10):
    ``alpha``      R = t^{α−1} − 1, invalid → −1   (α = ``dpg_alpha`` ∈ (0, 1), α-DPG's convention: α → 1 reverse
                   KL KL(π‖p*), α → 0 forward KL KL(p*‖π)). This is (1−α)·(−f_α′(t)) for the generator
                   f_α(t) = (t^α − α·t − (1−α))/(α(α−1)), i.e. the gradient of (1−α)·D_α(π‖p*) with
                   D_α(π‖p*) = Σ_valid p*·f_α(π/p*) + π(invalid)/(1−α);
    ``forward_kl`` R = 1/t − 1, invalid → −1  (= −f′ for f(t) = −log t: KL(p*‖π); the α → 0 end of the family);
    ``js``         R = softplus(−log t) − log 2 = log((1 + 1/t)/2), invalid → −log 2 (= −f′ for
                   f(t) = t·log t − (t+1)·log((t+1)/2), twice the usual Jensen–Shannon divergence);
- advantage A_i = R_i − (1/(n−1))·Σ_{j≠i} R_j (leave-one-out baseline);
- loss = −mean_i(w_i·A_i)/L_max with w_i = exp(L^θ_i − L_i) (value 1 on fresh samples, gradient ∇L^θ_i: plain
  REINFORCE, −mean_i(A_i·∇L^θ_i)/L_max), L_max = ``max_completion_length``. When the data is off-policy
  (``num_iterations`` > 1 or generation batches reused across steps) w_i is the importance weight π_θ/π_old of the
  whole sequence, so the gradient stays the on-policy one in expectation. No clipping, no KL term.

A plug-in of the GRPO trainer (:class:`DPG`, selected by ``trainer: dpg`` or ``dpg: true``; ``DPGConfig`` and
``DPGTrainer`` in :mod:`rlvr_div.trainers.dpg_trainer` preselect it): its advantages replace TRL's and its loss
replaces GRPO's, so no other plug-in that acts on the loss or the advantages may be active beside it. Everything is
computed from gathered tensors (a group may span processes). The reference log-probs are TRL's: while the plug-in is
active TRL's ``beta`` is set to a non-zero value so that TRL computes ``ref_per_token_logps`` (a reference copy of the
model, or the adapter-disabled base under LoRA), but the loss is replaced entirely, so no KL term is ever added.
Validity is ``score == 1`` of the reward function at ``validity_reward_index``; the other reward functions are still
computed and logged by TRL but do not enter the loss. TRL's ``loss_type``, ``epsilon`` and ``scale_rewards`` do not
apply (``top_entropy_quantile`` < 1 is refused); TRL's entropy bonus (``entropy_coef``, ``use_adaptive_entropy``) is
subtracted from the loss as TRL does it (``rlvr_div.trainers.entropy_bonus``). With vLLM, sampler/trainer mismatch is
corrected by TRL's sequence-level importance ratio (``vllm_importance_sampling_mode`` sequence_*).
Logged: ``dpg/z_mean`` (mean Ẑ over groups), ``dpg/no_valid_frac`` (groups whose Ẑ is floored), ``dpg/invalid_frac``,
``dpg/pseudo_reward_{min,mean,max}``, ``dpg/divergence`` (the batch estimate of D_f(π‖p*), see
``divergence_estimate``), ``dpg/clip_frac`` (fraction clipped at M), ``dpg/is_weight_mean`` (off-policy only), and
the ``diversity/*`` group metrics of ``DivergenceGRPOTrainer`` (``pass_at_group``, ``distinct_valid``, ``valid_rate``).
Docs: ``docs/distributional.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from rlvr_div.errors import ConfigError
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import completion_mask, policy_logps_no_grad
from rlvr_div.trainers.entropy_bonus import entropy_bonus
from rlvr_div.trainers.plugin import GRPOPlugin, LossFn, register_plugin

DPG_DIVERGENCES = ("alpha", "forward_kl", "js")
REF_BETA = 1.0  # TRL's `beta` while training with DPG: only switches on TRL's reference log-probs, never a KL term
LOG_RATIO_CLAMP = 20.0


# ---------------------------------------------------------------------------------------------------------------------
# Pure functions: Ẑ, log t, pseudo-rewards, baseline, loss


def check_dpg(divergence: str, alpha: float, clip: float, z_floor: float) -> None:
    """One-line :class:`ConfigError` for an unknown divergence or out-of-range α, M or floor."""
    if divergence not in DPG_DIVERGENCES:
        raise ConfigError(f"unknown dpg_divergence {divergence!r}; known: {', '.join(DPG_DIVERGENCES)}")
    if divergence == "alpha" and not 0.0 < alpha < 1.0:
        raise ConfigError(
            f"dpg_alpha must be in (0, 1) (α → 1 reverse KL, α → 0 forward KL), got {alpha}; "
            "use dpg_divergence: forward_kl for α = 0"
        )
    if not clip > 0 or not math.isfinite(clip):
        raise ConfigError(f"dpg_clip (M) must be a finite number > 0, got {clip}")
    if not 0.0 < z_floor <= 1.0:
        raise ConfigError(f"dpg_z_floor must be in (0, 1], got {z_floor}")


def _grouped(x: torch.Tensor, group: int, what: str) -> torch.Tensor:
    if x.dim() != 1 or group < 2 or x.numel() % group:
        raise ValueError(f"{what} of shape {tuple(x.shape)} does not form groups of {group} (need group >= 2)")
    return x.view(-1, group)


def log_partition_estimate(
    policy_seq_logps: torch.Tensor,
    ref_seq_logps: torch.Tensor,
    valid: torch.Tensor,
    group: int,
    z_floor: float = 1e-4,
    sampler_seq_logps: torch.Tensor | None = None,
) -> torch.Tensor:
    """log Ẑ per group, shape (N/group,): Ẑ = min(1, (1/n)·Σ_{i valid} exp(L^ref_i − L^q_i)); Ẑ = ``z_floor`` when
    the group has no valid sample. L^q_i = log q(y_i) under the distribution q that drew the samples:
    ``sampler_seq_logps`` (e.g. vLLM's, which differs from π_old by kernels and precision), or the policy's
    ``policy_seq_logps`` when the policy itself sampled. Then E_q[Ẑ] = Σ_valid a = a(valid) before the clamp."""
    source = policy_seq_logps if sampler_seq_logps is None else sampler_seq_logps
    lp = _grouped(source, group, "sampler_seq_logps").double()
    lr = _grouped(ref_seq_logps, group, "ref_seq_logps").double()
    v = _grouped(valid.bool(), group, "valid")
    log_w = torch.where(v, lr - lp, torch.full_like(lp, -math.inf))
    log_z = torch.logsumexp(log_w, dim=1) - math.log(group)
    log_z = torch.where(v.any(dim=1), log_z.clamp(max=0.0), torch.full_like(log_z, math.log(z_floor)))
    return log_z


def log_target_ratio(
    policy_seq_logps: torch.Tensor,
    ref_seq_logps: torch.Tensor,
    valid: torch.Tensor,
    log_z: torch.Tensor,
    group: int,
) -> torch.Tensor:
    """log t_i = log π(y_i) − log p̂*(y_i) = L_i − L^ref_i + log Ẑ for valid samples, +∞ for invalid ones (N,)."""
    lp = _grouped(policy_seq_logps, group, "policy_seq_logps").double()
    lr = _grouped(ref_seq_logps, group, "ref_seq_logps").double()
    v = _grouped(valid.bool(), group, "valid")
    log_t = lp - lr + log_z.double().unsqueeze(1)
    return torch.where(v, log_t, torch.full_like(log_t, math.inf)).reshape(-1)


def pseudo_rewards(
    log_t: torch.Tensor, divergence: str = "alpha", alpha: float = 0.25, clip: float = 10.0
) -> torch.Tensor:
    """R = −f′(t) (see the module docstring), clipped above at M = ``clip``; log t = +∞ marks an invalid sample.

    alpha: min(t^{α−1} − 1, M), invalid −1; forward_kl: min(1/t − 1, M), invalid −1; js: min(softplus(−log t) −
    log 2, M), invalid −log 2.
    """
    log_t = log_t.double()
    cap = math.log1p(clip)  # t^{α−1} − 1 ≤ M  ⟺  (α−1)·log t ≤ log(1 + M)
    if divergence == "alpha":
        return torch.exp(((alpha - 1.0) * log_t).clamp(max=cap)) - 1.0
    if divergence == "forward_kl":
        return torch.exp((-log_t).clamp(max=cap)) - 1.0
    if divergence == "js":
        return (F.softplus(-log_t) - math.log(2.0)).clamp(max=clip)
    raise ConfigError(f"unknown dpg_divergence {divergence!r}; known: {', '.join(DPG_DIVERGENCES)}")


def divergence_estimate(log_t: torch.Tensor, divergence: str = "alpha", alpha: float = 0.25) -> torch.Tensor:
    """Per-sample g(t) with E_{y∼π}[g(t(y))] = D_f(π‖p*) = E_{p*}[f(t)] + π(invalid)·lim_{t→∞} f(t)/t, i.e.
    g(t) = f(t)/t (the f of ``pseudo_rewards``, shifted so that f(1) = 0); invalid samples (log t = +∞) get the
    limit: 1/(1−α) for alpha, 1 for forward_kl, log 2 for js. Its mean over a batch estimates the divergence being
    descended (with Ẑ in place of A in t).

    alpha: (t^{α−1} − α − (1−α)/t)/(α(α−1)); forward_kl (f = t − 1 − log t): 1 − (1 + log t)/t;
    js: log t − (1 + 1/t)·log((1 + t)/2).
    """
    log_t = log_t.double()
    invalid = torch.isinf(log_t) & (log_t > 0)
    lt = torch.where(invalid, torch.zeros_like(log_t), log_t).clamp(min=-300.0)
    inv_t = torch.exp(-lt)
    if divergence == "alpha":
        g = (torch.exp((alpha - 1.0) * lt) - alpha - (1.0 - alpha) * inv_t) / (alpha * (alpha - 1.0))
        limit = 1.0 / (1.0 - alpha)
    elif divergence == "forward_kl":
        g = 1.0 - (1.0 + lt) * inv_t
        limit = 1.0
    elif divergence == "js":
        g = lt - (1.0 + inv_t) * (F.softplus(lt) - math.log(2.0))
        limit = math.log(2.0)
    else:
        raise ConfigError(f"unknown dpg_divergence {divergence!r}; known: {', '.join(DPG_DIVERGENCES)}")
    return torch.where(invalid, torch.full_like(g, limit), g)


def leave_one_out(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """A_i = R_i − (1/(n−1))·Σ_{j≠i, same group} R_j = n/(n−1)·(R_i − mean_group R)."""
    r = _grouped(rewards, group, "rewards")
    baseline = (r.sum(dim=1, keepdim=True) - r) / (group - 1)
    return (r - baseline).reshape(-1)


@dataclass(frozen=True)
class DPGBatch:
    """The per-sample quantities of one α-DPG batch (all (N,) except ``log_z``: (N/group,))."""

    advantages: torch.Tensor
    rewards: torch.Tensor
    log_t: torch.Tensor
    log_z: torch.Tensor


def dpg_advantages(
    policy_seq_logps: torch.Tensor,
    ref_seq_logps: torch.Tensor,
    valid: torch.Tensor,
    group: int,
    divergence: str = "alpha",
    alpha: float = 0.25,
    clip: float = 10.0,
    z_floor: float = 1e-4,
    sampler_seq_logps: torch.Tensor | None = None,
) -> DPGBatch:
    """Ẑ → log t → pseudo-rewards → leave-one-out advantages for a batch of consecutive groups (float64). Ẑ weights
    by the sampler's log-probs when given (see :func:`log_partition_estimate`); t = π_old/p̂* at each sample."""
    log_z = log_partition_estimate(policy_seq_logps, ref_seq_logps, valid, group, z_floor, sampler_seq_logps)
    log_t = log_target_ratio(policy_seq_logps, ref_seq_logps, valid, log_z, group)
    rewards = pseudo_rewards(log_t, divergence, alpha, clip)
    return DPGBatch(leave_one_out(rewards, group), rewards, log_t, log_z)


def reinforce_loss(
    seq_logps: torch.Tensor,
    advantages: torch.Tensor,
    old_seq_logps: torch.Tensor | None = None,
    normaliser: float = 1.0,
    behaviour_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """−mean_i(w_i·A_i)/normaliser with w_i = exp(L^θ_i − L^old_i) (log-ratio clamped to ±20) times an optional
    fixed ``behaviour_weight`` (e.g. vLLM's π_old/π_sampler).

    ``seq_logps`` L^θ_i carries the gradient; without ``old_seq_logps`` the samples are taken as fresh (L^old =
    L^θ detached): w = 1 in value and the gradient is −mean_i(A_i·∇L^θ_i)/normaliser (REINFORCE).
    """
    old = seq_logps.detach() if old_seq_logps is None else old_seq_logps.to(seq_logps.dtype)
    weight = torch.exp((seq_logps - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if behaviour_weight is not None:
        weight = weight * behaviour_weight.to(weight.dtype)
    return -(weight * advantages.to(weight.dtype)).mean() / normaliser


# ---------------------------------------------------------------------------------------------------------------------
# The plug-in


@dataclass
class DPGArgs:
    """Recipe keys of α-DPG / f-DPG (``trainer: dpg`` selects it; the keys act only then)."""

    dpg: bool = field(
        default=False, metadata={"help": "Train toward p* with DPG in place of GRPO's loss (trainer: dpg sets it)."}
    )
    dpg_divergence: str = field(
        default="alpha", metadata={"help": "Divergence to p* descended: alpha (α-DPG), forward_kl, js."}
    )
    dpg_alpha: float = field(
        default=0.25,
        metadata={"help": "α of α-DPG, in (0, 1); α-DPG's convention: α→1 reverse KL, α→0 forward KL."},
    )
    dpg_clip: float = field(default=10.0, metadata={"help": "M: pseudo-rewards are clipped above at M."})
    dpg_z_floor: float = field(
        default=1e-4, metadata={"help": "Ẑ of a group with no valid sample (keeps log Ẑ finite)."}
    )


@register_plugin("loss_replacement")
class DPG(GRPOPlugin):
    """α-DPG / f-DPG as the whole objective: its advantages replace TRL's and its loss replaces GRPO's (see the
    module docstring); TRL supplies generation, rewards and the reference log-probs (``reference_coef``)."""

    name = "dpg"
    Args = DPGArgs
    selected_by = "trainer: dpg"
    switches = ("dpg",)

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        self._valid: torch.Tensor | None = None

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.dpg is True

    @classmethod
    def prepare(cls, args: Any) -> None:
        if not isinstance(args.dpg, bool):
            raise ConfigError(f"dpg must be true or false, got {args.dpg!r}")
        if not args.dpg:
            return
        check_dpg(args.dpg_divergence, args.dpg_alpha, args.dpg_clip, args.dpg_z_floor)
        if args.dpg_divergence != "alpha" and args.dpg_alpha != DPGArgs.dpg_alpha:
            raise ConfigError(f"dpg_alpha={args.dpg_alpha} acts only with dpg_divergence: alpha, not "
                              f"{args.dpg_divergence!r}")  # fmt: skip
        # REF_BETA is accepted so that a resolved recipe (which records TRL's beta = REF_BETA) can be read back
        if args.beta not in (None, 0.0, REF_BETA):
            raise ConfigError(
                f"beta={args.beta} is set with trainer 'dpg', whose loss has no KL term; remove beta from the recipe"
            )
        args.beta = None  # no divergence term: TRL's beta is this plug-in's reference switch (reference_coef)
        if (
            args.use_vllm
            and args.vllm_importance_sampling_correction
            and args.vllm_importance_sampling_mode.startswith("token")
        ):
            raise ConfigError(
                f"trainer 'dpg' weights whole sequences: set vllm_importance_sampling_mode to sequence_mask or "
                f"sequence_truncate, not {args.vllm_importance_sampling_mode!r}"
            )
        if args.top_entropy_quantile < 1.0:
            raise ConfigError(
                f"top_entropy_quantile={args.top_entropy_quantile} does not act with trainer 'dpg' (its loss weighs "
                "whole sequences); remove it"
            )

    @classmethod
    def reference_coef(cls, args: Any) -> float:
        return REF_BETA  # TRL computes the reference log-probs; the loss adds no KL term

    def on_rewards(self, rewards_per_func: torch.Tensor, prompts: list[Any], completions: list[Any],
                   valid: torch.Tensor, stats: dict[str, float]) -> None:  # fmt: skip
        self._valid = valid  # gathered; NaN → invalid

    def advantages(self, out: dict[str, Any]) -> torch.Tensor:
        """The DPG advantages of a scored batch (train or eval), from π_old's, the reference's and (vLLM) the
        sampler's sequence log-probs."""
        trainer, a = self.trainer, self.trainer.args
        mode = "train" if trainer.model.training else "eval"
        group = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        mask = completion_mask(out)
        policy = out.get("old_per_token_logps")
        if policy is None:  # on-policy: TRL skipped π_old; one no-grad forward gives L_i
            size = a.per_device_train_batch_size if mode == "train" else a.per_device_eval_batch_size
            policy = policy_logps_no_grad(trainer, out, size)
        policy_seq = trainer.accelerator.gather((policy * mask).sum(-1).float())
        ref_seq = trainer.accelerator.gather((out["ref_per_token_logps"] * mask).sum(-1).float())
        sampler_seq = None
        sampler = out.get("sampling_per_token_logps")  # vLLM: the samples came from the sampler's distribution
        if sampler is not None:  # a token vLLM could not score (NaN) counts at π_old's value, as TRL's IS ratio does
            sampler = torch.where(torch.isnan(sampler), policy, sampler)
            sampler_seq = trainer.accelerator.gather((sampler * mask).sum(-1).float())
        valid = self._valid.to(policy_seq.device)
        batch = dpg_advantages(
            policy_seq, ref_seq, valid, group, a.dpg_divergence, a.dpg_alpha, a.dpg_clip, a.dpg_z_floor, sampler_seq
        )
        self._log(batch, valid, mode)
        return batch.advantages.to(mask.device)

    def _log(self, batch: DPGBatch, valid: torch.Tensor, mode: str) -> None:
        metrics = trl_seam.metrics(self.trainer, mode)
        args = self.trainer.args
        has_valid = valid.view(batch.log_z.numel(), -1).any(dim=1)
        metrics["dpg/z_mean"].append(batch.log_z.exp().mean().item())
        metrics["dpg/no_valid_frac"].append((~has_valid).float().mean().item())
        metrics["dpg/invalid_frac"].append((~valid).float().mean().item())
        metrics["dpg/pseudo_reward_min"].append(batch.rewards.min().item())
        metrics["dpg/pseudo_reward_mean"].append(batch.rewards.mean().item())
        metrics["dpg/pseudo_reward_max"].append(batch.rewards.max().item())
        divergence = divergence_estimate(batch.log_t, args.dpg_divergence, args.dpg_alpha)
        metrics["dpg/divergence"].append(divergence.mean().item())
        metrics["dpg/clip_frac"].append((batch.rewards >= args.dpg_clip - 1e-9).float().mean().item())

    def wrap_loss(self, loss: LossFn) -> LossFn:
        return self._loss  # GRPO's loss (``loss``) is replaced, not wrapped

    def _loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """Sequence-level REINFORCE with the DPG advantages: −mean_i(w_i·A_i)/L_max (see ``reinforce_loss``), minus
        TRL's entropy bonus when it is on."""
        trainer = self.trainer
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids = inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, inputs["completion_mask"]], dim=1)
        mask = completion_mask(inputs)
        logps, entropies, _ = trl_seam.per_token_logps(
            trainer, model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        seq = (logps * mask).sum(-1)
        old = inputs.get("old_per_token_logps")
        old_seq = None if old is None else (old * mask).sum(-1)
        behaviour = inputs.get("importance_sampling_ratio")  # vLLM: π_old/π_sampler, (B, 1) in sequence modes
        if behaviour is not None:
            behaviour = behaviour.view(behaviour.size(0), -1)[:, 0]
        loss = reinforce_loss(seq, inputs["advantages"], old_seq, float(trainer.max_completion_length), behaviour)
        mode = "train" if trainer.model.training else "eval"
        if mode == "train":
            loss = loss / trainer.current_gradient_accumulation_steps
        if trl_seam.entropy_bonus_enabled(trainer):  # TRL's entropy bonus, which this loss replaces (entropy_bonus.py)
            loss = loss - entropy_bonus(trainer, entropies, mask)
        totals = trainer.accelerator.reduce(
            torch.stack([(entropies.detach() * mask).sum(), mask.sum().float()]), reduction="sum"
        )
        trl_seam.metrics(trainer, mode)["entropy"].append((totals[0] / totals[1].clamp(min=1.0)).item())
        if old_seq is not None:
            w = torch.exp((seq.detach() - old_seq).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
            trl_seam.metrics(trainer, mode)["dpg/is_weight_mean"].append(trainer.accelerator.gather(w).mean().item())
        return loss


def __getattr__(name: str) -> Any:
    """``DPGConfig`` and ``DPGTrainer`` (``trainer: dpg``) live in :mod:`rlvr_div.trainers.dpg_trainer`, which imports
    the GRPO trainer and so cannot be imported by this plug-in module; the old import path still works."""
    if name in ("DPGConfig", "DPGTrainer"):
        from rlvr_div.trainers import dpg_trainer

        return getattr(dpg_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
