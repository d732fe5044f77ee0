"""f-divergences between the policy π and its reference π_ref: generators, conjugates, per-token estimators.

Convention (the names say which divergence between policy and reference is meant):

    D_f(π‖π_ref) = E_{π_ref}[ f(r) ],   r = π/π_ref,   f convex, f(1) = 0, f'(1) = 0,

- ``reverse_kl`` = KL(π‖π_ref)      f(u) = u·log u − u + 1               (GRPO's KL; k3 on policy samples)
- ``forward_kl`` = KL(π_ref‖π)      f(u) = u − log u − 1                 (DPH-RL's forward KL)
- ``js``         = js_scale·JS(π, π_ref), JS = ½KL(π‖M) + ½KL(π_ref‖M), M = (π + π_ref)/2,
                                    f(u) = (js_scale/2)·[u·log u − (u + 1)·log((u + 1)/2)].
  ``js_scale`` defaults to 1 (the standard JS, ≤ log 2); DPH-RL's code uses js_scale = 2 (no ½), so their η for JS
  corresponds to ``js_scale=2``.
- ``alpha``      = (Σ π^{1−α}·π_ref^α − 1)/(α(α − 1)), α = ``dph_alpha`` ∈ (0, 1), DPH-RL's convention:
                                    f(u) = (u^{1−α} − (1 − α)·u − α)/(α(α − 1)); α → 1 forward KL, α → 0 reverse KL.
  α-DPG (Kruszewski et al.) uses the mirror convention (α → 1 reverse KL); that module calls its parameter
  ``dpg_alpha``. Here D_α(π‖π_ref) = D_{1−α}(π_ref‖π).
- ``chi2``       = Pearson χ²(π‖π_ref) = Σ (π − π_ref)²/π_ref,  f(u) = (u − 1)².
- ``tv``         = ½·Σ |π − π_ref|,                              f(u) = ½·|u − 1|.

The conjugate generator f*(t) = t·f(1/t) gives the same divergence from the other side:
D_f(π‖π_ref) = E_π[f*(1/r)]. Every f above has f(1) = f'(1) = 0 (for the KLs by adding the control variate
c·(u − 1), whose expectation under π_ref is 0; f* then carries c·(t − 1), of expectation 0 under π), so f ≥ 0 and
f* ≥ 0: every per-token estimate is non-negative for every sample (up to rounding), like GRPO's k3.

Per-token estimators (``token_divergence``), with l = log π(y_t|·), l_ref = log π_ref(y_t|·), log r = l − l_ref
clamped to ±20 (clamped tokens get no gradient through r):

- ``source="reference"`` (y_t ~ π_ref, e.g. DPH-RL's rehearsal samples): d_t = f(r_t).
  Value: unbiased for D_f(π‖π_ref). Gradient: unbiased for ∇D_f (the sampling law does not depend on θ).
- ``source="policy"``, ``gradient="plain"`` (y_t ~ π, GRPO rollouts): d_t = f*(1/r_t).
  Value: unbiased for D_f. Gradient: in expectation E_π[∇f*(1/r)] = E_ref[(r·f'(r) − f(r))·∇l] = ∇E_ref[g(r)] with
  g(u) = f(u) − ∫_1^u f(s)/s ds (g ≥ 0, g(1) = 0): the score-function term E_π[f*(1/r)·∇l] is missing. So
    reverse_kl → ∇KL(π_ref‖π) = −E_ref[∇l] (GRPO's k3 descends the *forward* KL);
    forward_kl → ∇½E_ref[(log r)²];     alpha → ∇E_ref[(r^{1−α} − 1 − (1−α)·log r)]/(1 − α)²;
    chi2 → ∇(½χ² + KL(π_ref‖π));       tv → ∇½E_ref[|log r|];
    js → ∇E_ref[g(r)], g(u) = (js_scale/2)·∫_1^u log((1 + s)/2)/s ds (no closed form).
  Only for reverse_kl is this an f-divergence's gradient.
- ``source="policy"``, ``gradient="ratio"``: d_t = f*(1/r_t)·w_t, w_t = π/π_old = exp(l − l_old) with
  l_old = ``old_logp`` (default l.detach(), so w_t = 1 in value; TRL's ``use_bias_correction_kl``).
  Value: unbiased for D_f when y_t ~ π_old. Gradient: unbiased for ∇D_f (E_old[∇(w·h)] = ∇E_π[h]).

For ``reverse_kl`` with ``source="policy"`` the value is exactly TRL's per-token KL, exp(l_ref − l) − (l_ref − l) − 1.

Per-token sums over a sequence are *token-level* divergences, E_prefix[Σ_t D(π(·|y_<t)‖π_ref(·|y_<t))], with
prefixes drawn from the sample source. By the chain rule this equals the sequence-level divergence only for KL and
only when the prefixes come from the KL's first argument (reverse_kl on policy samples, forward_kl on reference
samples); for JS, α, χ² and TV the token-level divergence is not the sequence-level one.

``exact_divergence`` computes D_f between two full categorical distributions (last dim = vocabulary), for tests and
small-vocabulary exact modes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.functional import softplus

from rlvr_div.errors import ConfigError
from rlvr_div.registry import Registry

LOG_RATIO_CLAMP = 20.0
"""Per-token log-ratios log(π/π_ref) (and log(π/π_old)) are clamped to ±LOG_RATIO_CLAMP."""
LOGPROB_FLOOR = -1e4
"""``exact_divergence`` floors log-probabilities here, so −inf logits (masked tokens) stay finite."""
SOURCES = ("policy", "reference")
GRADIENTS = ("plain", "ratio")
_LOG2 = math.log(2.0)

LogFn = Callable[..., Tensor]


@dataclass(frozen=True)
class Divergence:
    """One f-divergence D_f(π‖π_ref) = E_ref[f(π/π_ref)], stored as functions of log-arguments for stability.

    ``f_log(d, **p) = f(e^d)``, ``conjugate_log(s, **p) = f*(e^s)`` with f*(t) = t·f(1/t), ``f_prime_log(d, **p)
    = f'(e^d)``. ``params`` are (name, default) pairs; ``check`` raises ConfigError on a bad resolved value.
    """

    name: str
    formula: str
    f_log: LogFn
    conjugate_log: LogFn
    f_prime_log: LogFn
    params: tuple[tuple[str, float], ...] = ()
    check: Callable[[dict[str, float]], None] | None = None

    def resolve(self, **given: object) -> dict[str, float]:
        """Parameters with defaults filled in; ConfigError for an unknown key or a bad value."""
        known = dict(self.params)
        for key, value in given.items():
            if key not in known:
                takes = ", ".join(known) or "no parameters"
                raise ConfigError(f"divergence {self.name!r} takes {takes}; got unknown parameter {key!r}")
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ConfigError(f"divergence {self.name!r}: {key}={value!r} must be a finite number")
            known[key] = float(value)
        if self.check is not None:
            self.check(known)
        return known

    def f(self, u: Tensor, **params: object) -> Tensor:
        """The generator f(u), u > 0."""
        return self.f_log(torch.log(u), **self.resolve(**params))

    def conjugate(self, t: Tensor, **params: object) -> Tensor:
        """The conjugate generator f*(t) = t·f(1/t), t > 0; D_f(π‖π_ref) = E_π[f*(π_ref/π)]."""
        return self.conjugate_log(torch.log(t), **self.resolve(**params))

    def f_prime(self, u: Tensor, **params: object) -> Tensor:
        """The derivative f'(u), u > 0."""
        return self.f_prime_log(torch.log(u), **self.resolve(**params))


DIVERGENCES: Registry[Divergence] = Registry("divergence")


# --------------------------------------------------------------------------------------------------------------------
# Generators. d = log u, s = log t. expm1 keeps the values accurate near u = 1.

# reverse KL(π‖π_ref): f(u) = u log u − u + 1, f*(t) = t − log t − 1 (k3), f'(u) = log u.
DIVERGENCES.add(
    "reverse_kl",
    Divergence(
        name="reverse_kl",
        formula="KL(π‖π_ref)",
        f_log=lambda d: torch.exp(d) * d - torch.expm1(d),
        conjugate_log=lambda s: torch.exp(s) - s - 1,  # TRL's per_token_kl, operation for operation
        f_prime_log=lambda d: d,
    ),
)

# forward KL(π_ref‖π): f(u) = u − log u − 1, f*(t) = t log t − t + 1, f'(u) = 1 − 1/u.
DIVERGENCES.add(
    "forward_kl",
    Divergence(
        name="forward_kl",
        formula="KL(π_ref‖π)",
        f_log=lambda d: torch.expm1(d) - d,
        conjugate_log=lambda s: torch.exp(s) * s - torch.expm1(s),
        f_prime_log=lambda d: -torch.expm1(-d),
    ),
)


# JS: f(u) = (c/2)[u log u − (u+1) log((u+1)/2)] = (c/2)[u·(log 2 − softplus(−d)) + log 2 − softplus(d)];
# symmetric (f* = f); f'(u) = (c/2)·log(2u/(u + 1)) = (c/2)(log 2 − softplus(−d)).
def _js_log(d: Tensor, js_scale: float = 1.0) -> Tensor:
    return 0.5 * js_scale * (torch.exp(d) * (_LOG2 - softplus(-d)) + _LOG2 - softplus(d))


def _check_js(p: dict[str, float]) -> None:
    if p["js_scale"] <= 0:
        raise ConfigError(f"js_scale={p['js_scale']} must be > 0 (1: standard JS; 2: DPH-RL's code)")


DIVERGENCES.add(
    "js",
    Divergence(
        name="js",
        formula="js_scale·(½KL(π‖M) + ½KL(π_ref‖M)), M = (π + π_ref)/2",
        f_log=_js_log,
        conjugate_log=_js_log,
        f_prime_log=lambda d, js_scale=1.0: 0.5 * js_scale * (_LOG2 - softplus(-d)),
        params=(("js_scale", 1.0),),
        check=_check_js,
    ),
)


# α (DPH-RL convention): f(u) = (u^{1−α} − (1−α)u − α)/(α(α−1)), f*(t) = (t^α − αt − (1−α))/(α(α−1)),
# f'(u) = (1 − u^{−α})/α. The numerators are rewritten with expm1 (the constants cancel).
def _alpha_f_log(d: Tensor, dph_alpha: float = 0.5) -> Tensor:
    a = dph_alpha
    return (torch.expm1((1 - a) * d) - (1 - a) * torch.expm1(d)) / (a * (a - 1))


def _alpha_conjugate_log(s: Tensor, dph_alpha: float = 0.5) -> Tensor:
    a = dph_alpha
    return (torch.expm1(a * s) - a * torch.expm1(s)) / (a * (a - 1))


def _check_alpha(p: dict[str, float]) -> None:
    a = p["dph_alpha"]
    if not 0.0 < a < 1.0:
        raise ConfigError(
            f"dph_alpha={a} must be strictly between 0 and 1 (DPH-RL convention: α→1 forward KL, α→0 reverse KL; "
            "use forward_kl or reverse_kl for the limits)"
        )


DIVERGENCES.add(
    "alpha",
    Divergence(
        name="alpha",
        formula="(Σ π^{1−α} π_ref^α − 1)/(α(α−1)), α = dph_alpha (α→1 KL(π_ref‖π), α→0 KL(π‖π_ref))",
        f_log=_alpha_f_log,
        conjugate_log=_alpha_conjugate_log,
        f_prime_log=lambda d, dph_alpha=0.5: -torch.expm1(-dph_alpha * d) / dph_alpha,
        params=(("dph_alpha", 0.5),),
        check=_check_alpha,
    ),
)

# Pearson χ²(π‖π_ref): f(u) = (u − 1)², f*(t) = (1 − t)²/t, f'(u) = 2(u − 1). Heavy-tailed on policy samples.
DIVERGENCES.add(
    "chi2",
    Divergence(
        name="chi2",
        formula="Σ (π − π_ref)²/π_ref",
        f_log=lambda d: torch.expm1(d).square(),
        conjugate_log=lambda s: torch.expm1(s).square() * torch.exp(-s),
        f_prime_log=lambda d: 2 * torch.expm1(d),
    ),
)

# total variation: f(u) = ½|u − 1| = f*(u), f'(u) = ½·sign(u − 1) (a subgradient; 0 at u = 1).
DIVERGENCES.add(
    "tv",
    Divergence(
        name="tv",
        formula="½ Σ |π − π_ref|",
        f_log=lambda d: 0.5 * torch.expm1(d).abs(),
        conjugate_log=lambda s: 0.5 * torch.expm1(s).abs(),
        f_prime_log=lambda d: 0.5 * torch.sign(d),
    ),
)


# --------------------------------------------------------------------------------------------------------------------
# Public API


def get_divergence(name: str) -> Divergence:
    """The registered divergence ``name`` (ConfigError listing the known names otherwise)."""
    return DIVERGENCES.get(name)


def check_divergence_params(name: str, **params: object) -> dict[str, float]:
    """Validate ``name`` and its parameters (e.g. ``dph_alpha`` ∈ (0, 1), ``js_scale`` > 0); return them resolved."""
    return get_divergence(name).resolve(**params)


def _compute_dtype(*xs: Tensor) -> torch.dtype:
    """At least float32 (half precision is computed in float32 and returned as given)."""
    dtype = torch.float32
    for x in xs:
        if not x.dtype.is_floating_point:
            raise ConfigError(f"log-probabilities and logits must be floating point, got {x.dtype}")
        dtype = torch.promote_types(dtype, x.dtype)
    return dtype


def token_divergence(
    name: str,
    logp: Tensor,
    ref_logp: Tensor,
    source: str,
    gradient: str = "plain",
    old_logp: Tensor | None = None,
    **params: object,
) -> Tensor:
    """Per-token estimate d_t of D_f(π‖π_ref), elementwise over any shape (e.g. (B, T)); dtype of the inputs.

    ``logp`` / ``ref_logp``: log π(y_t|·) / log π_ref(y_t|·) of the sampled tokens; log r = logp − ref_logp, clamped
    to ±20. ``source``: where y_t came from —
    ``"reference"`` (y_t ~ π_ref): d_t = f(r_t); value and gradient unbiased for D_f and ∇D_f.
    ``"policy"`` (y_t ~ π): d_t = f*(1/r_t); value unbiased for D_f. With ``gradient="plain"`` its autograd gradient
    is, in expectation, ∇E_ref[g(r)], g(u) = f(u) − ∫_1^u f(s)/s ds (for reverse_kl: ∇KL(π_ref‖π), i.e. GRPO's k3
    descends the forward KL; see the module docstring for the others). With ``gradient="ratio"`` d_t is multiplied by
    w_t = exp(logp − old_logp) (``old_logp`` defaults to ``logp.detach()``, so w_t = 1 in value): value unbiased for
    D_f on samples from π_old, gradient unbiased for ∇D_f.
    Sums over t are token-level divergences (the sequence-level one only for KL with prefixes from its first
    argument). Every d_t ≥ 0 (up to rounding). reverse_kl on policy samples is exactly TRL's k3.
    """
    div = get_divergence(name)
    resolved = div.resolve(**params)
    if source not in SOURCES:
        raise ConfigError(f"source={source!r} must be one of {SOURCES} (where the sampled tokens came from)")
    if gradient not in GRADIENTS:
        raise ConfigError(f"gradient={gradient!r} must be one of {GRADIENTS}")
    if source == "reference" and (gradient == "ratio" or old_logp is not None):
        raise ConfigError(
            "gradient='ratio' / old_logp apply to source='policy' only (reference samples need no weight)"
        )
    if old_logp is not None and gradient != "ratio":
        raise ConfigError("old_logp is only used with gradient='ratio'")
    out_dtype = torch.result_type(logp, ref_logp)
    dtype = _compute_dtype(logp, ref_logp)
    lp, lq = logp.to(dtype), ref_logp.to(dtype)
    if source == "reference":
        d = (lp - lq).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # log r
        value = div.f_log(d, **resolved)
    else:
        s = (lq - lp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # log(1/r)
        value = div.conjugate_log(s, **resolved)
        if gradient == "ratio":
            old = lp.detach() if old_logp is None else old_logp.to(dtype)
            value = value * torch.exp((lp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return value.to(out_dtype)


def exact_divergence(name: str, logits: Tensor, ref_logits: Tensor, **params: object) -> Tensor:
    """D_f(π‖π_ref) = Σ_y π_ref(y)·f(π(y)/π_ref(y)) between categoricals softmax(logits), softmax(ref_logits).

    The last dimension is the vocabulary; the result has the leading shape. Each term is evaluated as π_ref·f(r)
    where r ≤ 1 and as π·f*(1/r) where r > 1 (equal in exact arithmetic, both bounded), so peaked distributions do
    not overflow. Log-probabilities are floored at −1e4: a token with π_ref = 0 < π contributes a large finite value
    where the true divergence (reverse_kl, chi2) is infinite.
    """
    div = get_divergence(name)
    resolved = div.resolve(**params)
    out_dtype = torch.result_type(logits, ref_logits)
    dtype = _compute_dtype(logits, ref_logits)
    lp = torch.log_softmax(logits.to(dtype), dim=-1).clamp(min=LOGPROB_FLOOR)
    lq = torch.log_softmax(ref_logits.to(dtype), dim=-1).clamp(min=LOGPROB_FLOOR)
    d = lp - lq
    below = torch.exp(lq) * div.f_log(d.clamp(max=0.0), **resolved)
    above = torch.exp(lp) * div.conjugate_log((-d).clamp(max=0.0), **resolved)
    return torch.where(d <= 0, below, above).sum(-1).to(out_dtype)
