"""β ↔ μ calibration of the KL-regularised optimum, and a validity-target β controller.

The optimum of ``max_q E_q[v] − β·KL(q‖a)`` over *all* distributions is the tilted model
``p_β(y) = a(y)·e^{v(y)/β} / (1 − A + A·e^{1/β})`` with ``A = a(valid)`` the base validity rate. Its validity is

    μ(β, A) = A·e^{1/β} / (1 − A + A·e^{1/β}) = σ(logit A + 1/β),   so   1/β = logit μ − logit A   (μ > A),

and, because ``p_β = μ·p* + (1 − μ)·a(·|invalid)`` with ``p* = a(·|valid)``:

    KL(p_β‖a) = μ·log(μ/A) + (1 − μ)·log((1 − μ)/(1 − A))   (a Bernoulli KL),     KL(p*‖p_β) = −log μ.

``rlvr-div calibrate`` turns these into numbers; :class:`ValidityTargetController` uses them to adapt β online.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr_div.errors import ConfigError

ACTUATORS = ("inverse", "log")  # the quantity the validity-target controller's PI law acts on: 1/β or log β
_LOGIT_EPS = 1e-6  # running validities are clamped to [eps, 1 - eps] before taking a logit


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _check_open_unit(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 < value < 1.0:  # also rejects nan
        raise ConfigError(f"{name}={value} must be strictly between 0 and 1")
    return value


def _check_beta(beta: float) -> float:
    beta = float(beta)
    if not beta > 0.0 or math.isinf(beta):
        raise ConfigError(f"beta={beta} must be a positive finite number")
    return beta


def validity_at(beta: float, base_rate: float) -> float:
    """μ(β, A) = σ(logit A + 1/β): the validity of the tilted optimum p_β for base validity rate A."""
    return _sigmoid(_logit(_check_open_unit("base_rate", base_rate)) + 1.0 / _check_beta(beta))


def beta_for(target_validity: float, base_rate: float) -> float:
    """β(μ, A) = 1 / (logit μ − logit A): the KL coefficient whose tilted optimum has validity μ; needs μ > A."""
    mu = _check_open_unit("target_validity", target_validity)
    a = _check_open_unit("base_rate", base_rate)
    if mu <= a:
        raise ConfigError(f"target_validity={mu} must exceed base_rate={a} (the base is already that valid)")
    return 1.0 / (_logit(mu) - _logit(a))


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
    x = _logit(_check_open_unit("base_rate", base_rate)) + 1.0 / _check_beta(beta)
    return math.log1p(math.exp(-x)) if x > -30.0 else -x + math.log1p(math.exp(x))


# --------------------------------------------------------------------------------------------------------------------
# The controller


class ValidityTargetController:
    """Adapts the KL coefficient β online so that the running validity rate tracks ``target_validity`` μ*.

    Like PPO's adaptive KL controller (Ziegler et al. 2019), but the controlled quantity is the validity rate and β
    comes from the tilted model's closed form ``1/β = logit μ − logit A``, applied to a running estimate Â of the
    base rate, plus a proportional correction. After each batch with validity rate v̂ over n samples:

    1. running validity (EMA over samples with horizon ``horizon``, averaging all batches so far while fewer than
       ``horizon`` samples have been seen): ``m ← m + w·(v̂ − m)``, ``w = max(1 − exp(−n/horizon), n/n_seen)``;
    2. error in logits, clipped: ``e = clip(logit m − logit μ*, −max_step, max_step)`` (m clamped to [1e-6, 1−1e-6]);
    3. integral term, on the quantity ``actuator`` names, clamped so that β* stays in [beta_min, beta_max]
       (anti-wind-up at the caps):
       ``"inverse"`` (default): base-rate estimate ``logit Â ← logit Â + gain·e``, i.e. ``1/β* ← 1/β* − gain·e``
       (validity above target means the policy is more valid than Â says);
       ``"log"``: ``log β* ← log β* + gain·e`` (multiplicative, like Ziegler et al.'s adaptive KL controller);
       Â is then the base rate β* implies, ``logit Â = logit μ* − 1/β*``.
       With ``approach_steps = K > 0`` this step is skipped while the running validity is closing the gap on its
       own fast enough, i.e. ``d = logit m_t − logit m_{t−1}`` points against ``e`` and ``|e| ≤ K·|d|``
       (conditional integration, reported by ``frozen``). Rationale: the integral reads a lasting error as "the
       policy sits at its tilted optimum for this β, so Â (β*) is off"; while the policy is still moving toward the
       target (a learning-rate-limited trainer) that reading is wrong, and integrating it only winds β down (up)
       to overshoot later;
    4. proportional term: ``"inverse"``: ``1/β = (logit μ* − logit Â) − prop_gain·e``, i.e.
       ``β = β*(Â) / (1 − prop_gain·β*(Â)·e)``, the closed-form β* for Â times a proportional correction;
       ``"log"``: ``β = β*·exp(prop_gain·e)``; then β is clipped to [beta_min, beta_max].

    Â starts at ``base_rate`` (the base model's validity, e.g. from ``rlvr-div calibrate --from-samples``; β then
    starts at the closed form β(μ*, A)) or, given ``init_beta``, at the base rate that β implies. Validity above
    target raises β (weaker pull toward validity), below target lowers it. With ``gain = 1``, ``prop_gain = 0`` and
    a policy at its tilted optimum, one update sets Â to the true A exactly. The defaults keep a simulated
    policy whose validity relaxes toward μ(β, A) within a few steps inside ±0.05 of μ* (tests/test_calibration.py);
    a policy that learns more slowly needs smaller gains, a longer horizon or conditional integration, or the loop
    oscillates. ``approach_steps`` defaults to 0 (off), ``actuator`` to ``"inverse"``.

    The inverse law is the natural one at the tilted optimum (d logit μ / d(1/β) = 1 there). A GRPO trainer is far
    from its optimum: its validity moves at a pace set by the learning rate, and β acts on that pace only once
    β·∇KL competes with the (group-normalised) advantages, through relative changes of β; at 1/β ≈ 10–30 the
    inverse law changes β by ~1% per step. On the tiny model (docs/theory.md §2.1) β in 0.03–0.1 barely slows the
    policy and 0.2–1 does; the recipe uses the log law with a floor beta_min = 0.1, and a target (0.4) that the
    policy reaches within the run: no β can hold a target the policy does not reach.
    """

    def __init__(
        self,
        init_beta: float | None,
        target_validity: float,
        horizon: float = 1024.0,
        beta_min: float = 1e-3,
        beta_max: float = 100.0,
        gain: float = 0.2,
        prop_gain: float = 1.5,
        max_step: float = 5.0,
        base_rate: float | None = None,
        approach_steps: float = 0.0,
        actuator: str = "inverse",
    ) -> None:
        self.target_validity = _check_open_unit("target_validity", target_validity)
        if not 0.0 < beta_min < beta_max:
            raise ConfigError(f"beta_min={beta_min}, beta_max={beta_max}: need 0 < beta_min < beta_max")
        if not horizon > 0.0:
            raise ConfigError(f"horizon={horizon} must be a positive number of samples")
        if not 0.0 < gain <= 1.0:
            raise ConfigError(f"gain={gain} must be in (0, 1] (1 jumps straight to the closed-form beta)")
        if not prop_gain >= 0.0:
            raise ConfigError(f"prop_gain={prop_gain} must be non-negative")
        if not max_step > 0.0:
            raise ConfigError(f"max_step={max_step} must be positive (logits)")
        if not approach_steps >= 0.0:
            raise ConfigError(f"approach_steps={approach_steps} must be >= 0 (0 turns conditional integration off)")
        self.approach_steps = float(approach_steps)
        if actuator not in ACTUATORS:
            raise ConfigError(f"actuator={actuator!r} must be one of {ACTUATORS}")
        self.actuator = actuator
        self.beta_min, self.beta_max = float(beta_min), float(beta_max)
        self.horizon, self.gain, self.prop_gain, self.max_step = float(horizon), float(gain), float(prop_gain), max_step
        logit_target = _logit(self.target_validity)
        if init_beta is None:
            if base_rate is None:
                raise ConfigError("validity-target controller needs init_beta or base_rate; set one of them")
            init_beta = beta_for(self.target_validity, base_rate)
        self.beta = min(max(_check_beta(init_beta), self.beta_min), self.beta_max)
        self._logit_base = logit_target - 1.0 / self.beta  # logit Â
        self.running_validity: float | None = None
        self._last_logit: float | None = None  # logit of the running validity after the previous update
        self.frozen = False  # whether the last update skipped the integral step (conditional integration)
        self.samples_seen = 0
        self.steps = 0

    @property
    def base_rate_estimate(self) -> float:
        """Â: the running estimate of the base rate that the closed form uses."""
        return _sigmoid(self._logit_base)

    def update(self, batch_validity: float, n: int) -> float:
        """Feed one batch's validity rate (fraction of valid samples among ``n``) and return the new β."""
        v = float(batch_validity)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"batch_validity={v} must be in [0, 1]")
        if n < 1:
            raise ConfigError(f"n={n} must be a positive number of samples")
        self.samples_seen += n
        if self.running_validity is None:
            self.running_validity = v
        else:
            w = max(1.0 - math.exp(-n / self.horizon), n / self.samples_seen)
            self.running_validity += w * (v - self.running_validity)
        m = min(max(self.running_validity, _LOGIT_EPS), 1.0 - _LOGIT_EPS)
        logit_target = _logit(self.target_validity)
        err = min(max(_logit(m) - logit_target, -self.max_step), self.max_step)
        closing = False
        if self.approach_steps > 0.0 and self._last_logit is not None:
            rate = _logit(m) - self._last_logit  # logits per step; closing when it points against the error
            closing = err * rate < 0.0 and abs(err) <= self.approach_steps * abs(rate)
        self._last_logit = _logit(m)
        self.frozen = closing
        step = 0.0 if closing else self.gain * err
        if self.actuator == "log":  # PI on log β: β* ← β*·e^{gain·e}, β = β*·e^{prop_gain·e}
            log_beta_star = -math.log(logit_target - self._logit_base) + step
            log_beta_star = min(max(log_beta_star, math.log(self.beta_min)), math.log(self.beta_max))  # anti-wind-up
            self._logit_base = logit_target - math.exp(-log_beta_star)
            self.beta = min(max(math.exp(log_beta_star + self.prop_gain * err), self.beta_min), self.beta_max)
        else:  # PI on 1/β (the tilted model's closed form): logit Â ← logit Â + gain·e
            inv_beta_star = logit_target - (self._logit_base + step)
            inv_beta_star = min(max(inv_beta_star, 1.0 / self.beta_max), 1.0 / self.beta_min)  # no wind-up
            self._logit_base = logit_target - inv_beta_star
            inv_beta = inv_beta_star - self.prop_gain * err
            self.beta = self.beta_max if inv_beta <= 1.0 / self.beta_max else max(1.0 / inv_beta, self.beta_min)
        self.steps += 1
        return self.beta

    def state_dict(self) -> dict[str, float | int | None]:
        """What a checkpoint needs to resume the controller."""
        return {
            "beta": self.beta,
            "running_validity": self.running_validity,
            "logit_base_rate": self._logit_base,
            "last_logit_validity": self._last_logit,
            "samples_seen": self.samples_seen,
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, float | int | None]) -> None:
        self.beta = float(state["beta"])  # type: ignore[arg-type]
        rv = state["running_validity"]
        self.running_validity = None if rv is None else float(rv)
        self._logit_base = float(state["logit_base_rate"])  # type: ignore[arg-type]
        last = state.get("last_logit_validity")  # absent in checkpoints written before conditional integration
        self._last_logit = None if last is None else float(last)
        self.samples_seen = int(state["samples_seen"])  # type: ignore[arg-type]
        self.steps = int(state["steps"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------------------
# Per-prompt base rates from samples, and the CLI


@dataclass(frozen=True)
class PromptCounts:
    """c valid samples out of n for one prompt; Â = c/n."""

    c: int
    n: int

    @property
    def rate(self) -> float:
        return self.c / self.n


def read_counts(path: str | Path) -> list[PromptCounts]:
    """Per-prompt (c, n) from a JSONL with one line per prompt holding ``correct`` (list of booleans) or ``c``, ``n``.

    This is the ``samples.jsonl`` that ``rlvr-div eval`` writes.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--from-samples {path}: no such file; pass the samples.jsonl written by rlvr-div eval")
    out = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path} line {lineno}: not JSON ({e.msg})") from None
            if isinstance(row, dict) and isinstance(row.get("correct"), list):
                flags = row["correct"]
                if not all(isinstance(x, bool | int) and x in (0, 1) for x in flags):
                    raise ConfigError(f"{path} line {lineno}: `correct` must be a list of booleans")
                c, n = sum(bool(x) for x in flags), len(flags)
            elif isinstance(row, dict) and isinstance(row.get("c"), int) and isinstance(row.get("n"), int):
                c, n = row["c"], row["n"]
            else:
                raise ConfigError(f"{path} line {lineno}: needs `correct` (a list of booleans) or integers `c` and `n`")
            if n < 1 or not 0 <= c <= n:
                raise ConfigError(f"{path} line {lineno}: c={c}, n={n}; need n >= 1 and 0 <= c <= n")
            out.append(PromptCounts(c, n))
    if not out:
        raise ConfigError(f"{path}: no prompts in the file")
    return out


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an ascending sequence."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (pos - lo) * (sorted_xs[hi] - sorted_xs[lo])


def implied_validity_report(counts: Sequence[PromptCounts], beta: float, bins: int = 10) -> str:
    """Text report of μ_i = μ(β, Â_i) across prompts with 0 < Â_i < 1; prompts with Â = 0 or 1 are counted apart.

    Â = 0 means no valid sample was seen: the tilt multiplies a valid output's odds by e^{1/β} but cannot create
    one the base never produces, so μ stays ≈ 0 there; Â = 1 gives μ = 1 for every β.
    """
    beta = _check_beta(beta)
    zero = sum(pc.c == 0 for pc in counts)
    one = sum(pc.c == pc.n for pc in counts)
    inner = sorted(pc.rate for pc in counts if 0 < pc.c < pc.n)
    mus = sorted(validity_at(beta, a) for a in inner)
    ns = sorted(pc.n for pc in counts)
    lines = [
        f"prompts: {len(counts)}   samples per prompt: {ns[0]}" + (f"..{ns[-1]}" if ns[-1] != ns[0] else ""),
        f"base rate A (c/n): mean {sum(pc.rate for pc in counts) / len(counts):.4f}   "
        f"A = 0: {zero} prompts   A = 1: {one} prompts   0 < A < 1: {len(inner)} prompts",
        f"beta = {beta:g}   (odds multiplier e^(1/beta) = {math.exp(min(1.0 / beta, 700.0)):.4g})",
    ]
    if mus:
        qs = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        lines.append(f"implied validity mu = sigma(logit A + 1/beta) over the {len(mus)} prompts with 0 < A < 1:")
        lines.append("  " + "  ".join(f"q{int(q * 100):02d} {_quantile(mus, q):.4f}" for q in qs))
        lines.append(f"  mean {sum(mus) / len(mus):.4f}   (their base rates: mean {sum(inner) / len(inner):.4f})")
        counts_per_bin = [0] * bins
        for mu in mus:
            counts_per_bin[min(int(mu * bins), bins - 1)] += 1
        width = max(counts_per_bin)
        lines.append("  histogram of mu:")
        for i, k in enumerate(counts_per_bin):
            bar = "#" * round(40 * k / width) if width else ""
            lines.append(f"  [{i / bins:.2f}, {(i + 1) / bins:.2f}{']' if i == bins - 1 else ')'} {k:6d} {bar}")
    else:
        lines.append("no prompt has 0 < A < 1: the tilt changes nothing measurable here")
    mean_all = (sum(mus) + one) / len(counts)  # A = 0 prompts contribute mu = 0, A = 1 prompts mu = 1
    lines.append(f"mean implied validity over all prompts (A = 0 -> 0, A = 1 -> 1): {mean_all:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """β ↔ validity calibration of the KL-regularised optimum p_β ∝ a·e^{v/β}."""
    p = argparse.ArgumentParser(
        prog="rlvr-div calibrate",
        description=(
            "Closed forms of the tilted model p_beta = a*exp(v/beta)/Z: mu = sigma(logit A + 1/beta), "
            "KL(p_beta||a) = KL(Bern(mu)||Bern(A)), KL(p*||p_beta) = -log mu."
        ),
    )
    p.add_argument("--base-rate", type=float, help="A: the base model's validity rate on a prompt, in (0, 1)")
    p.add_argument("--target-validity", type=float, help="mu: the validity the KL-regularised optimum should have")
    p.add_argument("--beta", type=float, help="KL coefficient (with --base-rate: print mu; with --from-samples)")
    p.add_argument("--from-samples", metavar="JSONL", help="samples.jsonl of rlvr-div eval: per-prompt A = c/n")
    p.add_argument("--bins", type=int, default=10, help="histogram bins for --from-samples (default 10)")
    args = p.parse_args(argv)

    if args.from_samples is not None:
        if args.beta is None:
            raise ConfigError("--from-samples needs --beta: the KL coefficient whose implied validity to report")
        if args.bins < 1:
            raise ConfigError(f"--bins={args.bins} must be at least 1")
        print(implied_validity_report(read_counts(args.from_samples), args.beta, args.bins))
        return 0
    if args.base_rate is None:
        raise ConfigError("--base-rate is required (or use --from-samples JSONL --beta B)")
    if (args.target_validity is None) == (args.beta is None):
        raise ConfigError("give exactly one of --target-validity (to get beta) or --beta (to get the validity)")
    a = _check_open_unit("--base-rate", args.base_rate)
    if args.target_validity is not None:
        beta = beta_for(args.target_validity, a)
    else:
        beta = _check_beta(args.beta)
    mu = validity_at(beta, a)
    print(f"base rate A            {a:.6g}")
    print(f"validity mu            {mu:.6g}")
    print(f"beta                   {beta:.6g}   (1/beta = logit mu - logit A = {1.0 / beta:.6g})")
    print(f"KL(p_beta || a)        {kl_tilted_to_base(beta, a):.6g} nats   (the KL budget)")
    print(f"KL(p* || p_beta)       {kl_filtered_to_tilted(beta, a):.6g} nats   (= -log mu)")
    return 0
