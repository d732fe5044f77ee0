"""The validity-target β controller: adapts the KL coefficient β online so that the running validity rate tracks a
target, using the tilted model's closed form ``1/β = logit μ − logit A`` (:mod:`rlvr_div.theory.calibration`). Pure
Python; its GRPO plug-in is :mod:`rlvr_div.trainers.validity_target` (``beta_schedule: validity_target``).
"""

from __future__ import annotations

import math

from rlvr_div.errors import ConfigError
from rlvr_div.theory.calibration import beta_for, check_beta, check_open_unit, logit, sigmoid

ACTUATORS = ("inverse", "log")  # the quantity the validity-target controller's PI law acts on: 1/β or log β
_LOGIT_EPS = 1e-6  # running validities are clamped to [eps, 1 - eps] before taking a logit


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
    inverse law changes β by ~1% per step. On the tiny model (docs/study/theory.md §2.1) β in 0.03–0.1 barely slows the
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
        self.target_validity = check_open_unit("target_validity", target_validity)
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
        logit_target = logit(self.target_validity)
        if init_beta is None:
            if base_rate is None:
                raise ConfigError("validity-target controller needs init_beta or base_rate; set one of them")
            init_beta = beta_for(self.target_validity, base_rate)
        self.beta = min(max(check_beta(init_beta), self.beta_min), self.beta_max)
        self._logit_base = logit_target - 1.0 / self.beta  # logit Â
        self.running_validity: float | None = None
        self._last_logit: float | None = None  # logit of the running validity after the previous update
        self.frozen = False  # whether the last update skipped the integral step (conditional integration)
        self.samples_seen = 0
        self.steps = 0

    @property
    def base_rate_estimate(self) -> float:
        """Â: the running estimate of the base rate that the closed form uses."""
        return sigmoid(self._logit_base)

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
        logit_target = logit(self.target_validity)
        err = min(max(logit(m) - logit_target, -self.max_step), self.max_step)
        closing = False
        if self.approach_steps > 0.0 and self._last_logit is not None:
            rate = logit(m) - self._last_logit  # logits per step; closing when it points against the error
            closing = err * rate < 0.0 and abs(err) <= self.approach_steps * abs(rate)
        self._last_logit = logit(m)
        self.frozen = closing
        step = 0.0 if closing else self.gain * err
        if self.actuator == "log":  # PI on log β: β* ← β*·e^{gain·e}, β = β*·e^{prop_gain·e}
            log_beta_star = -math.log(logit_target - self._logit_base) + step
            log_beta_star = min(max(log_beta_star, math.log(self.beta_min)), math.log(self.beta_max))  # anti-wind-up
            self._logit_base = logit_target - math.exp(-log_beta_star)
            self.beta = min(max(math.exp(log_beta_star + self.prop_gain * err), self.beta_min), self.beta_max)
        else:
            # PI on 1/β (the tilted model's closed form): logit Â ← logit Â + gain·e
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
