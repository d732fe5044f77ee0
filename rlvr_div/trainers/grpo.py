"""GRPO where the divergence that keeps the policy near its reference is a choice.

``DivergenceGRPOTrainer`` subclasses ``trl.GRPOTrainer`` with the smallest override that works: TRL computes the
policy loss with its own KL switched off, and this class adds

    L = L_GRPO + divergence_coef · agg_t( d_t )

where d_t is the per-token estimate of the chosen divergence on the policy's own samples
(``rlvr_div.divergences.token_divergence(..., source="policy")``) and ``agg`` is the same normaliser TRL uses for
the policy loss of the configured ``loss_type``. The reference log-probs are TRL's (a separate reference model,
or the adapter-disabled base under LoRA: no second model in memory).

``divergence_gradient``:
- ``"ratio"`` (default; TRL's ``use_bias_correction_kl: true``): d_t is multiplied by the importance ratio
  π_θ/π_old (= 1 in value on fresh samples), which makes the autograd gradient that of the divergence itself;
- ``"plain"`` (also what ``use_bias_correction_kl: false`` selects): d_t is differentiated as is. For
  ``reverse_kl`` this is GRPO's k3 differentiated on policy samples, whose expected gradient is the per-token
  *forward*-KL gradient −E_ref[∇ log π].

With ``divergence: reverse_kl``, ``divergence_gradient: ratio`` and the coefficient equal to TRL's ``beta``, the loss
equals stock GRPO's (tested to 1e-6).

DPH-RL (Li et al., ICLR 2026) is the same trainer with ``rehearsal_path`` set to the output of ``rlvr-div rehearse``:
GRPO runs on D_exp (set ``divergence: none``, no reference model at all) and every micro-step adds

    η · mean_t f(u_t),   u_t = π_θ(y_t|·) / π_ref(y_t|·)

over a shard of the stored rehearsal samples (correct samples of the near-perfect prompts D_pef, drawn once from
the initial policy, with their per-token reference log-probs), with f the generator of ``rehearsal_divergence``
evaluated on reference samples (``source="reference"``): for forward KL, f(u) = u − log u − 1. The stored samples
are filtered (y ∼ a(·|correct)), so this is not the NLL: its gradient is 0 at π = a and its minimiser keeps
π(y) = a(y) on the correct answers (π(correct) = a(correct)); it preserves the base there. The global rehearsal
batch (``rehearsal_batch_size``) is split over processes and gradient-accumulation micro-steps. The rehearsal rows
are stacked under the policy's rows in the one forward TRL runs for its loss (one forward and one backward per
micro-step, as in GRPO without KL), every token at its own position (see ``_folded_logps``); a separate forward is
used only where TRL's loss does not score per-token log-probs.

``sequence_kl_coef: β`` (with ``divergence: none``) puts the sequence-level reverse KL in the reward instead,
r' = r − β·Σ_t log(π_old/π_ref), with no KL term in the loss (:mod:`rlvr_div.trainers.sequence_kl`): REINFORCE on
E_π[v] − β·KL(π‖π_ref), whose optimum is the tilted model p_β when ``scale_rewards`` is ``none``.

Every step also logs, from rewards gathered over all processes (a prompt's group can span ranks):
``diversity/pass_at_group`` (fraction of groups with at least one valid completion), ``diversity/distinct_valid``
(distinct valid completion texts per group), ``diversity/valid_rate``, and ``divergence/<name>``: the masked mean of
the per-token term that enters the loss (with ``ratio``, w_t·d_t, as TRL logs its ``kl``; off-policy w_t ≠ 1), and
with ``ratio`` also ``divergence/<name>_unweighted`` (mean d_t, the plain estimate on the π_old samples).
``divergence_coef: 0`` is ``divergence: none``: no term, no reference model, no ``divergence/*`` metric.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import nanstd

from rlvr_div.calibration import ValidityTargetController
from rlvr_div.divergences import DIVERGENCES, check_divergence_params, token_divergence
from rlvr_div.errors import ConfigError
from rlvr_div.rewards.base import completion_text
from rlvr_div.trainers.covariance_clip import CovariancePenalty, CovariancePenaltyArgs
from rlvr_div.trainers.outcome_exploration import OutcomeCounts, OutcomeExplorationArgs, outcomes
from rlvr_div.trainers.passk_advantage import PassKTrainingArgs
from rlvr_div.trainers.reward_shaping import (
    DIRECT_ADVANTAGES,
    WReinforceArgs,
    check_reward_shaping,
    direct_advantages,
    mara_rewards,
    unlikeliness_rewards,
)
from rlvr_div.trainers.sequence_kl import check_sequence_kl, penalised_rewards

GRADIENT_FORMS = ("ratio", "plain")
BETA_SCHEDULES = ("constant", "validity_target")
CONTROLLER_STATE = "validity_controller.json"


@dataclass
class DivergenceGRPOConfig(
    WReinforceArgs, PassKTrainingArgs, OutcomeExplorationArgs, CovariancePenaltyArgs, GRPOConfig
):  # the mixins hold the keys of W-REINFORCE, Pass@k Training, outcome exploration and Clip-/KL-Cov
    """``GRPOConfig`` plus the divergence settings.

    ``beta`` (TRL's KL coefficient) is a synonym of ``divergence_coef``: give either; both given and different is an
    error. Only a value the user gives counts (both default to None, then 0). ``use_bias_correction_kl: false``
    (TRL's switch for the ratio on its KL) means ``divergence_gradient: plain``."""

    beta: float | None = field(
        default=None,
        metadata={"help": "TRL's name for divergence_coef (a synonym; both given and different is an error)."},
    )
    divergence: str = field(
        default="none",
        metadata={"help": "Divergence to the reference: none, reverse_kl (GRPO's k3), forward_kl, js, alpha, ..."},
    )
    divergence_coef: float | None = field(
        default=None,
        metadata={"help": "Coefficient of the divergence term (>= 0; default 0: no term and no reference model)."},
    )
    dph_alpha: float = field(
        default=0.5,
        metadata={"help": "α of the `alpha` divergence, DPH-RL's convention (α→1 forward KL, α→0 reverse KL)."},
    )
    js_scale: float = field(
        default=1.0,
        metadata={"help": "Scale of the `js` divergence: 1 = standard JS, 2 = DPH-RL's code (its η values assume 2)."},
    )
    divergence_gradient: str | None = field(
        default=None,
        metadata={
            "help": "'ratio': weight by π/π_old so autograd gives the divergence's gradient; 'plain': no weight. "
            "Default: 'ratio', or 'plain' when use_bias_correction_kl is false."
        },
    )
    rehearsal_path: str | None = field(
        default=None,
        metadata={"help": "DPH-RL: directory written by `rlvr-div rehearse` (enables the rehearsal term)."},
    )
    rehearsal_divergence: str = field(
        default="forward_kl", metadata={"help": "DPH-RL: divergence of the rehearsal term (forward_kl, js, alpha)."}
    )
    rehearsal_coef: float = field(default=0.02, metadata={"help": "DPH-RL: η, the coefficient of the rehearsal term."})
    rehearsal_k: int = field(default=8, metadata={"help": "DPH-RL offline stage: samples per prompt (k)."})
    rehearsal_threshold: int | None = field(
        default=None,
        metadata={"help": "DPH-RL offline stage: correct samples (of k) that put a prompt in D_pef; default k."},
    )
    rehearsal_top_p: float = field(default=1.0, metadata={"help": "DPH-RL offline stage: top_p of the sampling."})
    rehearsal_sampling_batch_size: int = field(
        default=256, metadata={"help": "DPH-RL offline stage: sequences per generate call."}
    )
    rehearsal_batch_size: int = field(
        default=32, metadata={"help": "DPH-RL: rehearsal samples per optimizer step, over all processes."}
    )
    beta_schedule: str = field(
        default="constant",
        metadata={
            "help": "'constant', or 'validity_target': adapt divergence_coef so validity tracks target_validity."
        },
    )
    target_validity: float = field(default=0.9, metadata={"help": "validity_target: the validity rate to track."})
    validity_horizon: float = field(
        default=256.0, metadata={"help": "validity_target: EMA horizon of the running validity, in completions."}
    )
    controller_gain: float = field(
        default=0.5, metadata={"help": "validity_target: integral gain per logit of validity error, in (0, 1]."}
    )
    controller_prop_gain: float = field(
        default=1.5, metadata={"help": "validity_target: proportional gain (on 1/β or log β) per logit of error."}
    )
    controller_beta_min: float = field(default=1e-3, metadata={"help": "validity_target: lower bound of β."})
    controller_beta_max: float = field(default=100.0, metadata={"help": "validity_target: upper bound of β."})
    controller_approach_steps: float = field(
        default=0.0,
        metadata={
            "help": "validity_target: skip the integral step while the running validity would reach the target "
            "within this many steps at its current rate (conditional integration; 0 = off)."
        },
    )
    controller_actuator: str = field(
        default="inverse",
        metadata={"help": "validity_target: PI law on 'inverse' (1/β, the tilted-model closed form) or 'log' (log β)."},
    )
    reward_shaping: str = field(
        default="none",
        metadata={
            "help": "Group reward transform: none, mara (needs divergence_coef > 0), unlikeliness, pkpo, w_reinforce, "
            "passk_training, outcome_exploration."
        },
    )
    mara_tau: float = field(default=1.0, metadata={"help": "MARA: rewards >= tau are re-anchored."})
    unlikeliness_lambda: float = field(default=0.25, metadata={"help": "Unlikeliness reward: λ in [0, 1]."})
    unlikeliness_rank: str = field(
        default="correct", metadata={"help": "Unlikeliness reward: rank among 'correct' samples or 'all'."}
    )
    pkpo_k: int = field(default=1, metadata={"help": "PKPO: the k of the pass@k objective (<= num_generations)."})
    validity_reward_index: int = field(
        default=0, metadata={"help": "Which reward function decides validity (score == 1) for diversity metrics."}
    )
    sequence_kl_coef: float = field(
        default=0.0,
        metadata={
            "help": "β of the sequence-level reverse KL in the reward, r' = r − β·Σ_t log(π_old/π_ref) (no KL in the "
            "loss; with scale_rewards none the optimum is p_β). 0: off."
        },
    )

    def __post_init__(self) -> None:
        self._resolve_coefficient()
        self._resolve_gradient()
        self.check_divergence()
        # TRL computes reference log-probs (and loads a reference model) exactly when its beta is non-zero; the
        # sequence KL in the reward needs them too (its trainer keeps TRL's own KL out of the loss)
        self.beta = self.divergence_coef if self.divergence_active else float(self.sequence_kl_coef)
        super().__post_init__()

    @property
    def divergence_active(self) -> bool:
        """Whether the divergence term exists: a divergence is set and its coefficient is > 0."""
        return self.divergence != "none" and (self.divergence_coef or 0.0) > 0

    def _resolve_coefficient(self) -> None:
        """``beta`` and ``divergence_coef`` are one value: whichever is given, equal when both are."""
        beta, coef = self.beta, self.divergence_coef
        if beta is not None and coef is not None and float(beta) != float(coef):
            raise ConfigError(
                f"beta={beta} and divergence_coef={coef} disagree; beta is TRL's name for divergence_coef, give one"
            )
        value = float(coef if coef is not None else beta if beta is not None else 0.0)
        if self.divergence == "none" and value != 0.0:
            key = "divergence_coef" if coef is not None else "beta"
            raise ConfigError(
                f"{key}={value} with divergence 'none' has no term to weight; set divergence (reverse_kl is GRPO's KL)"
            )
        self.divergence_coef = value

    def _resolve_gradient(self) -> None:
        """``divergence_gradient`` from TRL's ``use_bias_correction_kl`` when not given; a contradiction is an error."""
        if self.divergence_gradient is None:
            self.divergence_gradient = "ratio" if self.use_bias_correction_kl else "plain"
        elif self.divergence_gradient == "ratio" and not self.use_bias_correction_kl:
            raise ConfigError(
                "use_bias_correction_kl=False contradicts divergence_gradient='ratio'; drop one (false means 'plain')"
            )
        self.use_bias_correction_kl = self.divergence_gradient == "ratio"

    def divergence_params(self, name: str | None = None) -> dict[str, Any]:
        name = name or self.divergence
        return {"dph_alpha": self.dph_alpha} if name == "alpha" else {"js_scale": self.js_scale} if name == "js" else {}

    def check_divergence(self) -> None:
        """One-line errors for an unknown divergence, a bad α, a negative coefficient or gradient form."""
        if self.divergence != "none":
            DIVERGENCES.get(self.divergence)
            check_divergence_params(self.divergence, **self.divergence_params())
        if self.divergence_coef < 0:
            raise ConfigError(f"divergence_coef must be >= 0, got {self.divergence_coef}")
        if self.divergence_gradient not in GRADIENT_FORMS:
            raise ConfigError(f"divergence_gradient must be one of {GRADIENT_FORMS}, got {self.divergence_gradient!r}")
        if self.rehearsal_path is not None:
            DIVERGENCES.get(self.rehearsal_divergence)
            check_divergence_params(self.rehearsal_divergence, **self.divergence_params(self.rehearsal_divergence))
            if self.rehearsal_coef < 0:
                raise ConfigError(f"rehearsal_coef must be >= 0, got {self.rehearsal_coef}")
            if self.rehearsal_k < 1 or not 1 <= (self.rehearsal_threshold or self.rehearsal_k) <= self.rehearsal_k:
                raise ConfigError(
                    f"need rehearsal_k >= 1 and 1 <= rehearsal_threshold <= rehearsal_k, got {self.rehearsal_k} "
                    f"and {self.rehearsal_threshold}"
                )
            if self.rehearsal_batch_size < 1:
                raise ConfigError(f"rehearsal_batch_size must be >= 1, got {self.rehearsal_batch_size}")
        if self.reward_shaping == "mara" and self.divergence not in ("reverse_kl", "none"):
            raise ConfigError(
                f"reward_shaping 'mara' re-anchors rewards for the reverse-KL-regularised optimum; it needs "
                f"divergence: reverse_kl, got {self.divergence!r}"
            )
        check_reward_shaping(
            self.reward_shaping,
            self.divergence_coef if self.divergence != "none" else 0.0,
            mara_tau=self.mara_tau,
            unlikeliness_lambda=self.unlikeliness_lambda,
            unlikeliness_rank=self.unlikeliness_rank,
            pkpo_k=self.pkpo_k,
            num_generations=self.num_generations,
        )
        check_sequence_kl(
            self.sequence_kl_coef, self.divergence_active, self.reward_shaping, self.multi_objective_aggregation
        )
        if self.beta_schedule not in BETA_SCHEDULES:
            raise ConfigError(f"beta_schedule must be one of {BETA_SCHEDULES}, got {self.beta_schedule!r}")
        if self.beta_schedule == "validity_target":
            if self.divergence == "none" or self.divergence_coef <= 0:
                raise ConfigError(
                    "beta_schedule 'validity_target' adapts divergence_coef: set a divergence and a coef > 0"
                )
            self.make_controller()  # validates target_validity, horizon and gain

    def make_controller(self) -> ValidityTargetController:
        return ValidityTargetController(
            init_beta=self.divergence_coef,
            target_validity=self.target_validity,
            horizon=self.validity_horizon,
            gain=self.controller_gain,
            prop_gain=self.controller_prop_gain,
            beta_min=self.controller_beta_min,
            beta_max=self.controller_beta_max,
            approach_steps=self.controller_approach_steps,
            actuator=self.controller_actuator,
        )


class DivergenceGRPOTrainer(GRPOTrainer):
    """GRPO with a chosen divergence term and in-training diversity metrics (see the module docstring)."""

    _tag_names = ["trl", "grpo", "rlvr-div"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._check_rehearsal_set(*args, **kwargs)  # before GRPOTrainer.__init__ loads the model
        super().__init__(*args, **kwargs)
        self._capture_logps = False
        self._captured_logps: torch.Tensor | None = None
        self._rehearsal = None
        self._rehearsal_micro = 0
        self._pending_rehearsal: dict[str, torch.Tensor] | None = None
        self._rehearsal_logps: torch.Tensor | None = None
        self.controller = self.args.make_controller() if self.args.beta_schedule == "validity_target" else None
        self.outcome = OutcomeCounts() if self.args.reward_shaping == "outcome_exploration" else None
        self.cov_penalty = CovariancePenalty.from_args(self.args)  # Clip-Cov / KL-Cov, or None
        if self.args.rehearsal_path is not None:
            from rlvr_div.rehearsal_set import load_rehearsal_samples

            self._rehearsal = load_rehearsal_samples(self.args.rehearsal_path)

    def _check_rehearsal_set(self, *args: Any, **kwargs: Any) -> None:
        """The checks ``rlvr-div train`` makes before loading, for Python users: the rehearsal set exists, is not
        empty, was sampled at this ``temperature`` and with this tokenizer (``processing_class``, when given)."""
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        config = bound.get("args")
        if getattr(config, "rehearsal_path", None) is None:
            return
        from transformers import ProcessorMixin

        from rlvr_div.rehearsal_set import check_rehearsal

        tokenizer = bound.get("processing_class")
        if isinstance(tokenizer, ProcessorMixin):
            tokenizer = tokenizer.tokenizer
        check_rehearsal(config.rehearsal_path, tokenizer=tokenizer, temperature=config.temperature)

    # -- the policy's grad-enabled log-probs, captured while TRL computes its loss; DPH's rehearsal rows ride along
    def _get_per_token_logps_and_entropies(  # noqa: ANN202
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **kwargs: Any,
    ):
        batch, self._pending_rehearsal = self._pending_rehearsal, None
        if batch is not None and (compute_aux_loss or any(v is not None for v in kwargs.values())):
            self._pending_rehearsal = batch  # multimodal or MoE inputs: the rehearsal term takes its own forward
            batch = None
        if batch is None:
            out = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **kwargs,
            )
        else:
            out = self._folded_logps(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, batch
            )
        if self._capture_logps:
            self._captured_logps = out[0]
        if self.cov_penalty is not None:  # Clip-Cov / KL-Cov select their tokens from the loss forward's log-probs
            self.cov_penalty.on_loss_logps(out[0])
        return out

    def _folded_logps(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None,
        compute_entropy: bool,
        rehearsal: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        """One forward over the policy rows and the rehearsal rows stacked below them, every token at the position it
        has in a forward of its own, so the policy rows score exactly as in TRL's own forward.

        The policy rows keep TRL's layout [left-padded prompt | completion] column for column and only gain right
        padding, which no real token attends to. The rehearsal rows come left-aligned [prompt | completion |
        padding] (:class:`~rlvr_div.rehearsal_set.RehearsalSamples`), the layout their reference log-probs were
        computed in. The scored window starts at the earliest completion column of any row; each row's completion
        is cut out of it at its own offset. The rehearsal log-probs are kept in ``_rehearsal_logps``.
        """
        rows, width = input_ids.shape
        start = width - logits_to_keep  # first completion column of the policy rows
        r_ids, r_start = rehearsal["input_ids"], rehearsal["prompt_lengths"]
        r_mask = rehearsal["attention_mask"].to(attention_mask.dtype)
        total, first = max(width, r_ids.size(1)), min(start, int(r_start.min()))
        pad = self._rehearsal.pad_token_id
        ids = torch.cat([F.pad(input_ids, (0, total - width), value=pad), F.pad(r_ids, (0, total - r_ids.size(1)))])
        mask = torch.cat([F.pad(attention_mask, (0, total - width)), F.pad(r_mask, (0, total - r_ids.size(1)))])
        chunk = None if batch_size is None or batch_size >= rows else batch_size
        logps, entropies, _ = super()._get_per_token_logps_and_entropies(
            model, ids, mask, total - first, chunk, compute_entropy
        )
        self._rehearsal_logps = logps[rows:].gather(1, _completion_columns(r_start - first, rehearsal))
        policy = slice(start - first, start - first + logits_to_keep)
        return logps[:rows, policy], None if entropies is None else entropies[:rows, policy], None

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self.cov_penalty is not None and self.model.training:  # Clip-Cov / KL-Cov around the whole loss
            train = self._metrics["train"]
            log = lambda name, x, mask: train[name].append(self._global_masked_mean(x, mask))  # noqa: E731
            return self.cov_penalty.loss(model, inputs, self._loss, self._aggregate, log)
        return self._loss(model, inputs)

    def _loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self._rehearsal is None or not self.model.training:
            return self._online_loss(model, inputs)
        batch = self._next_rehearsal_batch()
        self._pending_rehearsal, self._rehearsal_logps = batch, None
        try:
            loss = self._online_loss(model, inputs)
        finally:
            self._pending_rehearsal = None
        logps, self._rehearsal_logps = self._rehearsal_logps, None
        if logps is None:  # TRL's loss did not score per-token log-probs (e.g. a fused kernel): a separate forward
            logps = self._rehearsal_forward(model, batch)
        return loss + self.args.rehearsal_coef * self._rehearsal_term(logps, batch)

    def _online_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's policy loss plus the divergence term on the policy's samples."""
        name = self.args.divergence
        if not self.args.divergence_active:  # no term (the sequence KL, if any, is in the advantages already)
            coef, self.beta = self.beta, 0.0  # TRL's own KL off
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self.beta = coef
        coef, self.beta = self.beta, 0.0  # TRL's own KL off
        self._capture_logps = True
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self.beta, self._capture_logps = coef, False
        logps, self._captured_logps = self._captured_logps, None
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        per_token = token_divergence(
            name, logps, inputs["ref_per_token_logps"], source="policy", **self.args.divergence_params()
        )
        metrics = self._metrics["train" if self.model.training else "eval"]
        if self.args.divergence_gradient == "ratio":
            metrics[f"divergence/{name}_unweighted"].append(self._global_masked_mean(per_token.detach(), mask))
            per_token = per_token * self._importance_ratio(logps, inputs, mask)
        metrics[f"divergence/{name}"].append(self._global_masked_mean(per_token.detach(), mask))  # what enters L
        return loss + coef * self._aggregate(per_token, mask, inputs)

    def _next_rehearsal_batch(self) -> dict[str, torch.Tensor]:
        """This process's shard of the micro-step's rehearsal batch (deterministic in the step: survives a resume)."""
        accum = self.current_gradient_accumulation_steps
        world = self.accelerator.num_processes
        local = max(1, self.args.rehearsal_batch_size // (world * accum))
        call = self.state.global_step * accum + self._rehearsal_micro % accum
        self._rehearsal_micro += 1
        batch = self._rehearsal.batch(call, local, self.accelerator.process_index, world, seed=self.args.seed)
        return {key: value.to(self.accelerator.device) for key, value in batch.items()}

    def _rehearsal_forward(self, model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """log π_θ of the stored completion tokens from a forward of its own (left-aligned rows, default positions),
        at the sampling temperature."""
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        # the logits that predict completion token t of row i sit at column prompt_lengths[i] − 1 + t
        columns = _completion_columns(batch["prompt_lengths"] - 1, batch)
        logits = logits.gather(1, columns.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
        # log-probs at the temperature the stored reference log-probs were computed at (checked against summary.json)
        logps = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        return logps.gather(-1, batch["input_ids"].gather(1, columns + 1).unsqueeze(-1)).squeeze(-1)

    def _rehearsal_term(self, logps: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """mean_t f(u_t) over this process's rehearsal shard, u_t = π_θ/π_ref at the stored tokens (f on reference
        samples), divided by the accumulation steps like the policy loss."""
        completion_mask = batch["completion_mask"]
        name = self.args.rehearsal_divergence
        per_token = token_divergence(
            name, logps, batch["ref_logps"], source="reference", **self.args.divergence_params(name)
        )
        tokens = completion_mask.sum().clamp(min=1.0)
        value = (per_token * completion_mask).sum() / tokens
        nll = -(logps.detach() * completion_mask).sum() / tokens
        self._metrics["train"][f"rehearsal/{name}"].append(self.accelerator.gather(value.detach()).mean().item())
        self._metrics["train"]["rehearsal/nll"].append(self.accelerator.gather(nll).mean().item())
        return value / self.current_gradient_accumulation_steps

    def _importance_ratio(self, logps: torch.Tensor, inputs: dict[str, Any], mask: torch.Tensor) -> torch.Tensor:
        """π_θ/π_old at the level TRL uses for its policy ratio (token or sequence), differentiable in π_θ."""
        old = inputs.get("old_per_token_logps")
        log_ratio = logps - (logps.detach() if old is None else old)
        if self.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        return torch.exp(log_ratio)

    def _aggregate(self, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's normaliser of the policy loss for ``self.loss_type`` (gradient accumulation included)."""
        training = self.model.training
        accum = self.current_gradient_accumulation_steps if training else 1.0
        masked = per_token * mask
        lt = self.loss_type
        if lt in ("grpo", "sapo"):
            return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accum
        if lt == "bnpo":
            return masked.sum() / mask.sum().clamp(min=1.0) / accum
        if lt == "dr_grpo":
            return masked.sum() / (per_token.size(0) * self.max_completion_length) / accum
        if lt in ("cispo", "dapo", "vespo"):
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if training:
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return masked.sum() / normalizer
        if lt == "luspo":
            return masked.sum(-1).mean() / accum
        raise ValueError(f"unknown loss_type {lt!r}")

    def _global_masked_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        totals = self.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    # -- group diversity metrics from gathered rewards
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        texts = gather_object([completion_text(c).strip() for c in completions])
        valid = (rewards_per_func[:, self.args.validity_reward_index] == 1.0).cpu()
        self._gathered_rewards = rewards_per_func
        if self.outcome is not None and mode == "train":  # outcome exploration: (prompt, final answer) of the batch
            reward = self.reward_funcs[self.args.validity_reward_index]
            self.outcome.observe(gather_object(outcomes(prompts, completions, reward)))
        stats = group_diversity(valid, texts, group)
        for name, value in stats.items():
            self._metrics[mode][f"diversity/{name}"].append(value)
        if self.controller is not None and mode == "train":
            self.beta = self.controller.update(stats["valid_rate"], valid.numel())
            self._metrics[mode]["controller/beta"].append(self.beta)
            self._metrics[mode]["controller/running_validity"].append(self.controller.running_validity)
        return rewards_per_func

    # -- reward shaping (MARA, unlikeliness, PKPO): advantages recomputed from the transformed rewards
    def _generate_and_score_completions(self, inputs):  # noqa: ANN001, ANN202
        out = super()._generate_and_score_completions(inputs)
        if self.args.reward_shaping != "none" and self.model.training:
            out["advantages"] = self._shaped_advantages(out)
        elif self.args.sequence_kl_coef > 0 and self.model.training:
            out["advantages"] = self._sequence_kl_advantages(out)
        return out

    def _sequence_kl_advantages(self, out: dict[str, Any]) -> torch.Tensor:
        """Group advantages of r' = R − β·Σ_t log(π_old/π_ref) (:mod:`rlvr_div.trainers.sequence_kl`)."""
        mask = out["completion_mask"]
        old = out.get("old_per_token_logps")
        if old is None:  # on-policy: the sampling policy is the current one
            old = self._policy_logps_no_grad(out)
        log_ratio = self._seq_logps(old - out["ref_per_token_logps"], mask)
        self._metrics["train"]["sequence_kl/k1"].append(log_ratio.mean().item())
        rewards, weights = penalised_rewards(
            self._gathered_rewards, self.reward_weights.to(log_ratio.device), log_ratio, self.args.sequence_kl_coef
        )
        adv = group_advantages(
            rewards.to(mask.device), weights.to(mask.device), self.num_generations, self.multi_objective_aggregation,
            self.scale_rewards,
        )  # fmt: skip
        return self._replace_logged_advantages(adv, out)

    def _seq_logps(self, per_token: torch.Tensor, mask: torch.Tensor, mean: bool = False) -> torch.Tensor:
        """Sequence log-probs of the local batch (sum, or mean per token), gathered over processes."""
        total = (per_token * mask).sum(-1)
        if mean:
            total = total / mask.sum(-1).clamp(min=1.0)
        return self.accelerator.gather(total)

    def _shaped_advantages(self, out: dict[str, Any]) -> torch.Tensor:
        """TRL's group-relative advantages (:func:`group_advantages`) on the shaped validity reward; the shapings in
        ``DIRECT_ADVANTAGES`` (PKPO, …) are advantages already and are used as they are (centring would bias them)."""
        args, group = self.args, self.num_generations
        rewards_per_func = self._gathered_rewards.clone()
        col = args.validity_reward_index
        mask = out["completion_mask"]
        if args.reward_shaping in DIRECT_ADVANTAGES:  # PKPO, W-REINFORCE, Pass@k Training: used as they are
            adv = direct_advantages(args.reward_shaping, rewards_per_func[:, col], group, args).to(mask.device)
        else:
            if args.reward_shaping == "mara":
                ref = self._seq_logps(out["ref_per_token_logps"], mask)
                rewards_per_func[:, col] = mara_rewards(rewards_per_func[:, col], ref, group, args.mara_tau, self.beta)
            elif args.reward_shaping == "outcome_exploration":
                shaped, stats = self.outcome.shape(
                    rewards_per_func[:, col], group, args.outcome_bonus_coef, args.outcome_penalty_coef
                )
                rewards_per_func[:, col] = shaped
                for name, value in stats.items():
                    self._metrics["train"][name].append(value)
            else:  # unlikeliness: rank by mean per-token log-prob under the sampling policy π_old
                old = out.get("old_per_token_logps")
                if old is None:
                    old = self._policy_logps_no_grad(out)
                score = self._seq_logps(old, mask, mean=True)
                rewards_per_func[:, col] = unlikeliness_rewards(
                    rewards_per_func[:, col], score, group, args.unlikeliness_lambda, args.unlikeliness_rank
                )
            adv = group_advantages(
                rewards_per_func.to(mask.device),
                self.reward_weights.to(mask.device),
                group,
                self.multi_objective_aggregation,
                self.scale_rewards,
            )
        return self._replace_logged_advantages(adv, out)

    def _replace_logged_advantages(self, adv: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
        """This process's slice of the gathered advantages ``adv``, which also replace the ones TRL logged last."""
        logged = self._logs["advantages"]  # TRL logged the unshaped advantages of this batch last: replace them
        for _ in range(min(adv.numel(), len(logged))):
            logged.pop()
        logged.extend(adv.tolist())
        local = out["completion_mask"].size(0)
        start = self.accelerator.process_index * local
        return adv[start : start + local].to(out["advantages"].dtype)

    @torch.no_grad()
    def _policy_logps_no_grad(self, out: dict[str, Any]) -> torch.Tensor:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, out["completion_ids"].size(1))
        return logps

    # -- the validity controller's state and the outcome counts travel with checkpoints
    def _save_checkpoint(self, model, trial):  # noqa: ANN001, ANN202
        # they go in first: trainer_state.json, written last by the Trainer, marks a checkpoint complete, so a
        # checkpoint that looks complete always holds them (a kill in between leaves an incomplete one); here, not
        # with the optimizer, so that save_only_model keeps them too
        if (self.controller is not None or self.outcome is not None) and self.args.should_save:
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            if self.controller is not None:
                tmp = folder / (CONTROLLER_STATE + ".tmp")
                tmp.write_text(json.dumps(self.controller.state_dict()))
                tmp.replace(folder / CONTROLLER_STATE)
            if self.outcome is not None:
                self.outcome.save(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):  # noqa: ANN001, ANN202
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.outcome is not None and checkpoint:
            self.outcome.load(checkpoint)
        if self.controller is not None and checkpoint:
            path = Path(checkpoint) / CONTROLLER_STATE
            if not path.is_file():
                raise ConfigError(
                    f"checkpoint {checkpoint} has no {CONTROLLER_STATE} (not saved by a validity_target run), so β "
                    "would restart; resume from a checkpoint of this run or start afresh"
                )
            self.controller.load_state_dict(json.loads(path.read_text()))
            self.beta = self.controller.beta


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


def _completion_columns(offsets: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, C) column indices offsets[i] + t, t < C = the completion width of a rehearsal ``batch``."""
    width = batch["completion_mask"].size(1)
    return offsets.unsqueeze(1) + torch.arange(width, device=offsets.device)


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
