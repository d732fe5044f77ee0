"""The divergence to the reference as a term of the GRPO loss (plug-in ``divergence``).

    L = L_GRPO + divergence_coef · agg_t( d_t )

d_t is the per-token estimate of the chosen divergence on the policy's own samples
(``rlvr_div.divergences.token_divergence(..., source="policy")``) and ``agg`` the normaliser TRL uses for the policy
loss of the configured ``loss_type`` (:func:`rlvr_div.trainers.common.aggregate`). The reference log-probs are TRL's
(a separate reference model, or the adapter-disabled base under LoRA: no second model in memory).

``divergence_gradient``:
- ``"ratio"`` (default; TRL's ``use_bias_correction_kl: true``): d_t is multiplied by the importance ratio
  π_θ/π_old (= 1 in value on fresh samples), which makes the autograd gradient that of the divergence itself;
- ``"plain"`` (also what ``use_bias_correction_kl: false`` selects): d_t is differentiated as is. For
  ``reverse_kl`` this is GRPO's k3 differentiated on policy samples, whose expected gradient is the per-token
  *forward*-KL gradient −E_ref[∇ log π].

With ``divergence: reverse_kl``, ``divergence_gradient: ratio`` and the coefficient equal to TRL's ``beta``, the loss
equals stock GRPO's (tested to 1e-6). Logged: ``divergence/<name>``, the masked mean of the per-token term that
enters the loss (with ``ratio``, w_t·d_t, as TRL logs its ``kl``; off-policy w_t ≠ 1), and with ``ratio`` also
``divergence/<name>_unweighted`` (mean d_t, the plain estimate on the π_old samples). ``divergence_coef: 0`` is
``divergence: none``: no term, no reference model, no ``divergence/*`` metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.divergences import DIVERGENCES, check_divergence_params, token_divergence
from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE, OPEN_UNIT, POSITIVE
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import aggregate, completion_mask, global_masked_mean
from rlvr_div.trainers.plugin import GRPOPlugin, loss_replacers, register_plugin

GRADIENT_FORMS = ("ratio", "plain")


@dataclass
class DivergenceArgs:
    """Recipe keys of the divergence term. ``beta`` (TRL's KL coefficient) is a synonym of ``divergence_coef``: give
    either; both given and different is an error. Only a value the user gives counts (both default to None, then 0).
    ``use_bias_correction_kl: false`` (TRL's switch for the ratio on its KL) means ``divergence_gradient: plain``."""

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

    @property
    def divergence_active(self) -> bool:
        """Whether the divergence term exists: a divergence is set and its coefficient is > 0."""
        return self.divergence != "none" and (self.divergence_coef or 0.0) > 0

    def divergence_params(self, name: str | None = None) -> dict[str, Any]:
        """The extra parameters of divergence ``name`` (default: the term's): α for ``alpha``, the scale for ``js``."""
        name = name or self.divergence
        return {"dph_alpha": self.dph_alpha} if name == "alpha" else {"js_scale": self.js_scale} if name == "js" else {}


def resolve_coefficient(args: Any) -> None:
    """``beta`` and ``divergence_coef`` are one value: whichever is given, equal when both are."""
    beta, coef = args.beta, args.divergence_coef
    if beta is not None and coef is not None and float(beta) != float(coef):
        raise ConfigError(
            f"beta={beta} and divergence_coef={coef} disagree; beta is TRL's name for divergence_coef, give one"
        )
    value = float(coef if coef is not None else beta if beta is not None else 0.0)
    if args.divergence == "none" and value != 0.0:
        key = "divergence_coef" if coef is not None else "beta"
        raise ConfigError(
            f"{key}={value} with divergence 'none' has no term to weight; set divergence (reverse_kl is GRPO's KL)"
        )
    args.divergence_coef = value


def resolve_gradient(args: Any) -> None:
    """``divergence_gradient`` from TRL's ``use_bias_correction_kl`` when not given; a contradiction is an error."""
    if args.divergence_gradient is None:
        args.divergence_gradient = "ratio" if args.use_bias_correction_kl else "plain"
    elif args.divergence_gradient == "ratio" and not args.use_bias_correction_kl:
        raise ConfigError(
            "use_bias_correction_kl=False contradicts divergence_gradient='ratio'; drop one (false means 'plain')"
        )
    args.use_bias_correction_kl = args.divergence_gradient == "ratio"


@register_plugin("loss_term", after=("dpg",))
class DivergenceTerm(GRPOPlugin):
    """Adds ``divergence_coef · agg_t(d_t)`` to the loss, d_t computed from the loss forward's own log-probs."""

    name = "divergence"
    Args = DivergenceArgs
    # beta too: it resolves into divergence_coef (checked before it does)
    ranges = {"beta": NON_NEGATIVE, "divergence_coef": NON_NEGATIVE, "dph_alpha": OPEN_UNIT, "js_scale": POSITIVE}
    switches = ("beta", "divergence", "divergence_coef")  # the selection itself
    own_rules = ("divergence_gradient",)  # acts only with the term: checked in prepare (resolved recipes carry it)
    parameters_of = {"dph_alpha": "alpha", "js_scale": "js"}  # shared with every term that evaluates a divergence
    kl_penalty = True  # the run's KL penalty in the loss, for the plug-ins that need or refuse one (kl_penalties)

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        trainer.kl_coef = float(trainer.args.divergence_coef)  # the live coefficient (a controller may move it)
        self._capture = False
        self._logps: torch.Tensor | None = None

    @classmethod
    def prepare(cls, args: Any) -> None:
        replacers = loss_replacers(args)
        if args.divergence != "none" and replacers:  # with a coefficient > 0 check_loss_owners would refuse it too
            raise ConfigError(f"divergence={args.divergence!r} does not act with {replacers[0]} (it replaces GRPO's "
                              "policy loss, to which the divergence term adds); remove it")  # fmt: skip
        resolve_coefficient(args)
        implied = "ratio" if args.use_bias_correction_kl else "plain"  # what use_bias_correction_kl alone selects
        if not args.divergence_active and args.divergence_gradient not in (None, implied):
            raise ConfigError(f"divergence_gradient={args.divergence_gradient!r} acts only with a divergence term "
                              "(divergence and divergence_coef > 0)")  # fmt: skip
        resolve_gradient(args)
        if args.divergence != "none":
            DIVERGENCES.get(args.divergence)
            check_divergence_params(args.divergence, **args.divergence_params())
        if args.divergence_gradient not in GRADIENT_FORMS:
            raise ConfigError(f"divergence_gradient must be one of {GRADIENT_FORMS}, got {args.divergence_gradient!r}")

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.divergence_active

    @classmethod
    def divergences(cls, args: Any) -> tuple[str, ...]:
        return (args.divergence,) if args.divergence_active else ()

    @classmethod
    def log_prob_penalties(cls, args: Any) -> tuple[str, ...]:
        return (f"divergence: {args.divergence} (coefficient > 0)",) if args.divergence_active else ()

    @classmethod
    def reference_coef(cls, args: Any) -> float:
        return args.divergence_coef if args.divergence_active else 0.0

    def before_loss(self, model: Any, inputs: dict[str, Any]) -> None:
        self._capture, self._logps = True, None

    def on_logps(self, logps: torch.Tensor) -> None:
        if self._capture:
            self._logps = logps

    def loss_term(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        trainer, args = self.trainer, self.trainer.args
        logps, self._capture, self._logps = self._logps, False, None
        mask = completion_mask(inputs)
        name = args.divergence
        per_token = token_divergence(
            name, logps, inputs["ref_per_token_logps"], source="policy", **args.divergence_params()
        )
        metrics = trl_seam.metrics(trainer, "train" if trainer.model.training else "eval")
        if args.divergence_gradient == "ratio":
            metrics[f"divergence/{name}_unweighted"].append(global_masked_mean(trainer, per_token.detach(), mask))
            per_token = per_token * self.importance_ratio(logps, inputs, mask)
        metrics[f"divergence/{name}"].append(global_masked_mean(trainer, per_token.detach(), mask))  # what enters L
        return trainer.kl_coef * aggregate(trainer, per_token, mask, inputs)  # β: the controller may move it

    def importance_ratio(self, logps: torch.Tensor, inputs: dict[str, Any], mask: torch.Tensor) -> torch.Tensor:
        """π_θ/π_old at the level TRL uses for its policy ratio (token or sequence), differentiable in π_θ."""
        old = inputs.get("old_per_token_logps")
        log_ratio = logps - (logps.detach() if old is None else old)
        if self.trainer.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        return torch.exp(log_ratio)
