"""β ↔ μ calibration of the KL-regularised optimum: the closed forms of the tilted model.

The optimum of ``max_q E_q[v] − β·KL(q‖a)`` over *all* distributions is the tilted model
``p_β(y) = a(y)·e^{v(y)/β} / (1 − A + A·e^{1/β})`` with ``A = a(valid)`` the base validity rate. Its validity is

    μ(β, A) = A·e^{1/β} / (1 − A + A·e^{1/β}) = σ(logit A + 1/β),   so   1/β = logit μ − logit A   (μ > A),

and, because ``p_β = μ·p* + (1 − μ)·a(·|invalid)`` with ``p* = a(·|valid)``:

    KL(p_β‖a) = μ·log(μ/A) + (1 − μ)·log((1 − μ)/(1 − A))   (a Bernoulli KL),     KL(p*‖p_β) = −log μ.

``rlvr-div calibrate`` (:mod:`rlvr_div.theory.calibration_report`) turns these into numbers;
:class:`rlvr_div.theory.beta_controller.ValidityTargetController` uses them to adapt β online.
"""

from __future__ import annotations

import math
import statistics

from rlvr_div.errors import ConfigError


def logit(p: float) -> float:
    """log(p / (1 − p)) for p in (0, 1)."""
    return math.log(p) - math.log1p(-p)


def sigmoid(x: float) -> float:
    """1 / (1 + e^{−x}), without overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def check_open_unit(name: str, value: float) -> float:
    """``value`` as a float strictly between 0 and 1, else a one-line :class:`ConfigError` naming ``name``."""
    value = float(value)
    if not 0.0 < value < 1.0:  # also rejects nan
        raise ConfigError(f"{name}={value} must be strictly between 0 and 1")
    return value


def check_beta(beta: float) -> float:
    """``beta`` as a positive finite float, else a one-line :class:`ConfigError`."""
    beta = float(beta)
    if not beta > 0.0 or math.isinf(beta):
        raise ConfigError(f"beta={beta} must be a positive finite number")
    return beta


def validity_at(beta: float, base_rate: float) -> float:
    """μ(β, A) = σ(logit A + 1/β): the validity of the tilted optimum p_β for base validity rate A."""
    return sigmoid(logit(check_open_unit("base_rate", base_rate)) + 1.0 / check_beta(beta))


def mean_validity_at(beta: float, base_rates: list[float]) -> float:
    """mean_x μ(β, A_x) = mean_x σ(logit A_x + 1/β): the validity of the tilted optimum over prompts x with base
    validity rates A_x (clipped to [1e-12, 1 − 1e-12]); 1 at β = 0, the limit."""
    if beta == 0:
        return 1.0
    return float(statistics.mean(validity_at(beta, min(max(a, 1e-12), 1 - 1e-12)) for a in base_rates))


def beta_for(target_validity: float, base_rate: float) -> float:
    """β(μ, A) = 1 / (logit μ − logit A): the KL coefficient whose tilted optimum has validity μ; needs μ > A."""
    mu = check_open_unit("target_validity", target_validity)
    a = check_open_unit("base_rate", base_rate)
    if mu <= a:
        raise ConfigError(f"target_validity={mu} must exceed base_rate={a} (the base is already that valid)")
    return 1.0 / (logit(mu) - logit(a))


def bernoulli_kl(p: float, q: float) -> float:
    """KL(Bern(p)‖Bern(q)) = p·log(p/q) + (1 − p)·log((1 − p)/(1 − q)), with 0·log 0 = 0; q in (0, 1)."""
    out = 0.0
    if p > 0.0:
        out += p * (math.log(p) - math.log(q))
    if p < 1.0:
        out += (1.0 - p) * (math.log1p(-p) - math.log1p(-q))
    return out


def kl_tilted_to_base(beta: float, base_rate: float) -> float:
    """KL(p_β‖a) = KL(Bern(μ)‖Bern(A)) with μ = μ(β, A), in nats: the KL budget that buys validity μ."""
    return bernoulli_kl(validity_at(beta, base_rate), base_rate)


def kl_filtered_to_tilted(beta: float, base_rate: float) -> float:
    """KL(p*‖p_β) = −log μ(β, A) = log(1 + e^{−(logit A + 1/β)}), in nats (p* = a(·|valid), the filtered model)."""
    x = logit(check_open_unit("base_rate", base_rate)) + 1.0 / check_beta(beta)
    return math.log1p(math.exp(-x)) if x > -30.0 else -x + math.log1p(math.exp(x))
