"""Exact toy lab: the tilted model p_β and its projections onto restricted policy families, by full enumeration.

World (fixed length, no EOS): every sequence y ∈ {a, b, c, d}^6 (4^6 = 4096 of them) is enumerated.
- Base model a: a time-homogeneous bigram, a(y) = a_1(y_1)·Π_t a(y_t | y_{t−1}), with N(0, 1.5²) random logits
  from a fixed seed.
- Validity v: the regular language "the letters' values (a=0, b=1, c=2, d=3) sum to 0 mod 5" (a 5-state DFA).
  A = a(valid) ≈ 0.19 for the default seed.
- p* = a(·|valid) (the filtered model); p_β ∝ a·e^{v/β} (the tilted model, the unrestricted KL-regularised optimum).

Policy families q_θ (all softmax-parametrised, so q > 0 everywhere):
- ``tabular``: one logit per sequence; represents every full-support distribution.
- ``bigram``: the base model's own family (first-token table + one shared transition table): contains a, not p_β.
- ``factorised``: independent per-position tables, q(y) = Π_t q_t(y_t): contains neither.

Objectives, each minimised exactly (all sequences enumerated, float64, L-BFGS to a gradient norm ≤ 1e-9 or the
iteration cap), with the DPH-RL convention D_f(q‖p) = Σ_y p(y)·f(q(y)/p(y)) (+ q(p = 0)·lim_{u→∞} f(u)/u):
- ``reg:<f>`` along a β grid: maximise E_q[v] − β·D_f(q‖a). For f = reverse KL this is the paper's objective and
  equals min KL(q‖p_β) (up to the constant log Z_β); the other generators (forward KL, JS, α) ask what happens when
  the divergence to the base model is swapped, as DPH-RL does.
- ``proj:<f>`` (no β): argmin_q D_f(q‖p*) for forward KL (= KL(p*‖q)), JS and α, the mass-covering projections of
  the filtered model. For the tabular family the minimiser is p* itself (D_f = 0 iff q = p*), used as is.

Generators (u = q/p): reverse KL u·log u − u + 1; forward KL u − log u − 1; JS u·log u − (u + 1)·log((u + 1)/2)
(twice the usual JS); α (DPH-RL: α → 1 forward, α → 0 reverse) (u^{1−α} − (1−α)·u − α)/(α(α − 1)).

Measured per point: μ = q(valid); H(q) and H(q|valid) in nats; n90 = the least number of valid sequences whose
q-mass reaches 90% of q(valid) (the top of q's valid part); cov90 = p*-mass of those n90 sequences; cov@k =
Σ_{valid y} p*(y)·(1 − (1 − q(y))^k), the expected p*-mass of the distinct valid sequences seen in k draws from q;
max q(y); pass@k = 1 − (1 − μ)^k (one prompt), k = 1…64.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from rlvr_div.calibration import validity_at
from rlvr_div.errors import ConfigError

VOCAB = "abcd"
LENGTH = 6
MODULUS = 5
BASE_SCALE = 1.5
DEFAULT_SEED = 0
DEFAULT_BETAS = (4.0, 2.0, 1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08, 0.05)
DEFAULT_ALPHA = 0.5
FAMILIES = ("tabular", "bigram", "factorised")
REGULARISERS = ("reverse_kl", "forward_kl", "js", "alpha")
PROJECTIONS = ("forward_kl", "js", "alpha")
MAX_K = 64
DT = torch.float64
RANDOM_STARTS = 1  # extra random initialisations per point for the restricted (non-convex) families
SCREEN_ITER = 10  # Newton steps each start gets before the best one is run to convergence
PEAKED_STARTS = 6  # starts piled up on one valid sequence each (the best, by loss, of the pool below)
PEAK_SHARPNESS = 3.0
PEAK_POOL = 128  # the valid sequences (most probable under a first) that peaked starts are drawn from


# --------------------------------------------------------------------------------------------------------------------
# The world: all sequences, the base model, the validity rule


@dataclass(frozen=True)
class World:
    """All sequences ``seqs`` (N, L), the base model's log-probs ``log_a`` (N,), the validity mask ``valid`` (N,)."""

    seqs: torch.Tensor
    log_a: torch.Tensor
    valid: torch.Tensor
    first_logits: torch.Tensor  # (V,) base model, first token
    trans_logits: torch.Tensor  # (V, V) base model, next token given the previous one

    @property
    def base_rate(self) -> float:
        """A = a(valid)."""
        return float(self.log_a.exp()[self.valid].sum())

    @property
    def log_filtered(self) -> torch.Tensor:
        """log p*(y) = log a(y) − log A on valid y, −∞ elsewhere."""
        out = self.log_a - math.log(self.base_rate)
        return out.masked_fill(~self.valid, -math.inf)

    def log_tilted(self, beta: float) -> torch.Tensor:
        """log p_β(y) = log a(y) + v(y)/β − log(1 − A + A·e^{1/β})."""
        a = self.base_rate
        log_z = math.log1p(-a) + math.log1p(a / (1 - a) * math.exp(1.0 / beta)) if 1.0 / beta < 700 else None
        if log_z is None:  # e^{1/β} overflows: log Z = log A + 1/β + log(1 + (1 − A)/(A·e^{1/β}))
            log_z = math.log(a) + 1.0 / beta
        return self.log_a + self.valid.to(DT) / beta - log_z


def all_sequences(vocab_size: int = len(VOCAB), length: int = LENGTH) -> torch.Tensor:
    """Every sequence of ``length`` tokens over ``range(vocab_size)``, in lexicographic order: (V^L, L) long."""
    return torch.tensor(list(itertools.product(range(vocab_size), repeat=length)), dtype=torch.long)


def is_valid(seqs: torch.Tensor, modulus: int = MODULUS) -> torch.Tensor:
    """The regular language {y : Σ_t y_t ≡ 0 (mod modulus)} (token values a=0, b=1, …)."""
    return seqs.sum(dim=1) % modulus == 0


def bigram_log_probs(first_logits: torch.Tensor, trans_logits: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
    """log q(y) = log softmax(first)[y_1] + Σ_{t≥2} log softmax(trans[y_{t−1}])[y_t] for every row of ``seqs``."""
    lf = first_logits.log_softmax(-1)
    lt = trans_logits.log_softmax(-1)
    return lf[seqs[:, 0]] + lt[seqs[:, :-1], seqs[:, 1:]].sum(dim=1)


def make_world(seed: int = DEFAULT_SEED, scale: float = BASE_SCALE) -> World:
    """The default toy world: a random bigram base model (seeded) over {a, b, c, d}^6 and the mod-5 rule."""
    g = torch.Generator().manual_seed(seed)
    v = len(VOCAB)
    first = torch.randn(v, generator=g, dtype=DT) * scale
    trans = torch.randn(v, v, generator=g, dtype=DT) * scale
    seqs = all_sequences()
    return World(seqs, bigram_log_probs(first, trans, seqs), is_valid(seqs), first, trans)


def decode(seq: Sequence[int]) -> str:
    return "".join(VOCAB[int(t)] for t in seq)


# --------------------------------------------------------------------------------------------------------------------
# Objectives: f-divergences in the DPH-RL convention, as sums of per-sequence terms in log q


def generator(name: str, alpha: float = DEFAULT_ALPHA) -> tuple[Callable[[torch.Tensor], torch.Tensor], float]:
    """(f as a function of d = log u, f'(∞) = lim_{u→∞} f(u)/u) for one generator; f(1) = 0, f convex."""
    if name == "reverse_kl":
        return (lambda d: d.exp() * d - d.exp() + 1.0), math.inf
    if name == "forward_kl":
        return (lambda d: d.exp() - d - 1.0), 1.0
    if name == "js":
        log2 = math.log(2.0)
        return (lambda d: d.exp() * d - (d.exp() + 1.0) * (torch.nn.functional.softplus(d) - log2)), log2
    if name == "alpha":
        if not 0.0 < alpha < 1.0:
            raise ConfigError(f"alpha={alpha} must be strictly between 0 and 1 (1 is forward KL, 0 reverse KL)")
        c = alpha * (alpha - 1.0)
        return (lambda d: (((1.0 - alpha) * d).exp() - (1.0 - alpha) * d.exp() - alpha) / c), 1.0 / alpha
    raise ConfigError(f"unknown divergence {name!r}; known: reverse_kl, forward_kl, js, alpha")


class Objective:
    """L(q) = D_f(q‖p) + Σ_y c_y·q(y), a sum of one term φ_y(ℓ_y) per sequence, in ℓ = log q.

    D_f(q‖p) = Σ_{p>0} p·f(q/p) + f'(∞)·q(p = 0). With q = e^ℓ, d = ℓ − log p and r = q^{1−α}·p^α, the terms and
    their derivatives φ' = dφ/dℓ, φ'' = d²φ/dℓ² are
      reverse KL  φ = q·d − q + p                        φ' = q·d                        φ'' = q·(d + 1)
      forward KL  φ = q − p − p·d                        φ' = q − p                      φ'' = q
      JS          φ = q·d − (q + p)·(softplus(d) − log 2)  φ' = q·(d − softplus(d) + log 2)  φ'' = φ' + q·σ(−d)
      α           φ = (r − (1−α)·q − α·p)/(α(α − 1))     φ' = (q − r)/α                  φ'' = φ' + r
    (the −q + p parts sum to 0 and keep each term ≥ 0); outside p's support φ = φ' = φ'' = f'(∞)·q, and the linear
    term adds c_y·q to all three.
    """

    def __init__(
        self, log_p: torch.Tensor, name: str, alpha: float = DEFAULT_ALPHA, linear: torch.Tensor | None = None
    ) -> None:
        _, self.f_inf = generator(name, alpha)
        self.name, self.alpha, self.linear = name, alpha, linear
        support = torch.isfinite(log_p)
        self.full_support = bool(support.all())
        if not self.full_support and not math.isfinite(self.f_inf):
            raise ConfigError(f"divergence {name!r} to a target with zeros is infinite for full-support policies")
        self.log_p = torch.where(support, log_p, torch.zeros_like(log_p))  # 0: a placeholder off the support
        self.inside = support.to(DT)

    def _terms(self, log_q: torch.Tensor, order: int) -> list[torch.Tensor]:
        q, lp = log_q.exp(), self.log_p
        p, d = lp.exp(), log_q - lp
        if self.name == "reverse_kl":
            out = [q * d - q + p, q * d, q * (d + 1.0)]
        elif self.name == "forward_kl":
            out = [q - p - p * d, q - p, q]
        elif self.name == "js":
            sp, log2 = torch.nn.functional.softplus(d), math.log(2.0)
            d1 = q * (d - sp + log2)
            out = [q * d - (q + p) * (sp - log2), d1, d1 + q * torch.sigmoid(-d)]
        else:  # alpha
            al = self.alpha
            r = ((1.0 - al) * log_q + al * lp).exp()
            d1 = (q - r) / al
            out = [(r - (1.0 - al) * q - al * p) / (al * (al - 1.0)), d1, d1 + r]
        out = out[: order + 1]
        if not self.full_support:
            out = [torch.where(self.inside > 0, t, self.f_inf * q) for t in out]
        if self.linear is not None:
            out = [t + self.linear * q for t in out]
        return out

    def value(self, log_q: torch.Tensor) -> torch.Tensor:
        """L(q); a batch of log q (B, N) gives B values."""
        return self._terms(log_q, 0)[0].sum(-1)

    def derivatives(self, log_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(L, φ'(ℓ), φ''(ℓ)): the loss and the per-sequence first and second derivatives in ℓ = log q."""
        phi, d1, d2 = self._terms(log_q, 2)
        return phi.sum(), d1, d2


def f_divergence(log_q: torch.Tensor, log_p: torch.Tensor, name: str, alpha: float = DEFAULT_ALPHA) -> float:
    """D_f(q‖p) = Σ_{p>0} p·f(q/p) + f'(∞)·q(p = 0); ∞ for reverse KL when q has mass where p has none.

    Forward KL gives KL(p‖q), reverse KL gives KL(q‖p), JS twice the Jensen–Shannon divergence.
    """
    support = torch.isfinite(log_p)
    if not bool(support.all()) and not math.isfinite(generator(name, alpha)[1]):
        if bool(torch.isfinite(log_q[~support]).any()):
            return math.inf
        log_q, log_p = log_q[support], log_p[support]
    return float(Objective(log_p, name, alpha).value(log_q))


def regularised_objective(world: World, beta: float, name: str, alpha: float = DEFAULT_ALPHA) -> Objective:
    """−(E_q[v] − β·D_f(q‖a))/β = D_f(q‖a) − μ_q/β; for reverse KL this is KL(q‖p_β) − log Z_β."""
    return Objective(world.log_a, name, alpha, linear=-world.valid.to(DT) / beta)


def projection_objective(world: World, name: str, alpha: float = DEFAULT_ALPHA) -> Objective:
    """D_f(q‖p*) (forward KL: KL(p*‖q))."""
    return Objective(world.log_filtered, name, alpha)


# --------------------------------------------------------------------------------------------------------------------
# Policy families: parameters -> log q over all sequences, and exact minimisation


@dataclass
class Fit:
    log_q: torch.Tensor
    theta: torch.Tensor
    loss: float
    grad_norm: float  # max-norm of the gradient in the search coordinates, at the end
    iters: int


class Family:
    """A softmax-parametrised family: ``log_probs(θ)`` gives log q_θ(y) for every enumerated y."""

    name: str

    def __init__(self, world: World) -> None:
        self.world = world

    def init_params(self) -> torch.Tensor:
        """A starting point at or near the base model a."""
        raise NotImplementedError

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def minimise(self, obj: Objective, init: torch.Tensor, max_iter: int) -> Fit:
        raise NotImplementedError


class Tabular(Family):
    """q = softmax(θ) over all sequences: any full-support distribution.

    Minimised by L-BFGS in the softmax's natural geometry, θ = θ_0 + φ/√q_0 (q_0 the current point, re-centred each
    round), where these objectives' Hessian is close to the identity (in θ its scale follows q itself). Gradient:
    ∂L/∂θ_y = φ'_y − q_y·Σ_z φ'_z.
    """

    name = "tabular"

    def init_params(self) -> torch.Tensor:
        return self.world.log_a.clone()

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        return theta.log_softmax(0)

    def _loss_grad(self, theta: torch.Tensor, obj: Objective) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_q = theta.log_softmax(0)
        loss, d1, _ = obj.derivatives(log_q)
        scale = (-0.5 * log_q).exp().clamp(max=1e8)
        return loss, d1 - log_q.exp() * d1.sum(), scale

    def minimise(
        self, obj: Objective, init: torch.Tensor, max_iter: int = 500, tol: float = 1e-10, rounds: int = 4
    ) -> Fit:
        theta, iters = init.detach().clone(), 0
        for _ in range(rounds):
            _, g, scale = self._loss_grad(theta, obj)
            if float((g * scale).abs().max()) <= tol:
                break

            def loss_grad(phi: Tensor, base: Tensor = theta, scale: Tensor = scale) -> tuple[float, Tensor]:
                loss, grad, _ = self._loss_grad(base + scale * phi, obj)
                return float(loss), scale * grad

            phi, n = lbfgs(loss_grad, torch.zeros_like(theta), max_iter, tol)
            theta, iters = theta + scale * phi, iters + n
        loss, g, scale = self._loss_grad(theta, obj)
        return Fit(theta.log_softmax(0), theta, float(loss), float((g * scale).abs().max()), iters)


def lbfgs(
    loss_grad: Callable[[Tensor], tuple[float, Tensor]], x: Tensor, max_iter: int, tol: float, history: int = 10
) -> tuple[Tensor, int]:
    """Minimise with L-BFGS (two-loop recursion, Armijo backtracking from a unit step) until max|∇| ≤ tol, or
    until the loss stops changing (three steps in a row within 1e-15 relative: the floating-point floor).

    Returns the point and the number of iterations.
    """
    f, g = loss_grad(x)
    pairs: list[tuple[Tensor, Tensor, float]] = []  # (s, y, 1/(yᵀs))
    it = stalled = 0
    while it < max_iter and float(g.abs().max()) > tol:
        it += 1
        d, alphas = g.clone(), []
        for s, y, rho in reversed(pairs):
            a = rho * float(s @ d)
            d -= a * y
            alphas.append(a)
        if pairs:
            s, y, _ = pairs[-1]
            d *= float(s @ y) / float(y @ y)
        for (s, y, rho), a in zip(pairs, reversed(alphas)):
            d += (a - rho * float(y @ d)) * s
        d = -d
        slope = float(g @ d)
        if slope >= 0:  # not a descent direction: restart from steepest descent
            pairs, d, slope = [], -g, -float(g @ g)
        step = 1.0
        while True:
            x_new = x + step * d
            f_new, g_new = loss_grad(x_new)
            if f_new <= f + 1e-4 * step * slope or step < 1e-12:
                break
            step *= 0.5
        if step < 1e-12:
            break  # no decrease along the direction: stationary to numerical precision
        stalled = stalled + 1 if f - f_new <= 1e-15 * max(1.0, abs(f)) else 0
        if stalled >= 3:
            break
        s, y = x_new - x, g_new - g
        sy = float(s @ y)
        if sy > 1e-16:
            pairs = [*pairs[-(history - 1) :], (s, y, 1.0 / sy)]
        x, f, g = x_new, f_new, g_new
    return x, it


class _LinearInLogTables(Family):
    """log q = M·T(θ): T stacks the log-softmax rows of small tables, M[y, j] counts the uses of entry j in y.

    Few parameters (≤ 24), so minimised by exact Newton steps. With φ', φ'' from the objective, s = e^T and
    J = ∂T/∂θ (block diagonal, I − 1·s_rᵀ for each softmax row r):
      ∇L = Jᵀ·g,  g = Mᵀφ';   ∇²L = Jᵀ·(Mᵀ diag(φ'') M)·J − ⊕_r c_r·(diag(s_r) − s_r s_rᵀ),  c_r = Σ_{j∈r} g_j.
    """

    def __init__(self, world: World, counts: torch.Tensor, table_shapes: list[tuple[int, int]]) -> None:
        super().__init__(world)
        self._m = counts.to(DT)
        self._shapes = table_shapes
        firsts = itertools.accumulate([0] + [r for r, _ in table_shapes])  # index of each table's first row
        row_of = torch.cat([torch.arange(r).repeat_interleave(c) + k for (r, c), k in zip(table_shapes, firsts)])
        self._same_row = (row_of[:, None] == row_of[None, :]).to(DT)  # (P, P): 1 where two entries share a row

    def _tables(self, theta: torch.Tensor) -> torch.Tensor:
        """T(θ) for θ of shape (P,) or (B, P)."""
        tables, i, lead = [], 0, theta.shape[:-1]
        for rows, cols in self._shapes:
            tables.append(theta[..., i : i + rows * cols].reshape(*lead, rows, cols).log_softmax(-1).reshape(*lead, -1))
            i += rows * cols
        return torch.cat(tables, dim=-1)

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """log q for θ of shape (P,) → (N,), or a batch (B, P) → (B, N)."""
        return self._tables(theta) @ self._m.T

    def peaked_starts(
        self, obj: Objective, k: int, sharpness: float = PEAK_SHARPNESS, pool: int = PEAK_POOL
    ) -> list[torch.Tensor]:
        """The k best (by L at the start) of the starts θ_a + c·[M[y] > 0], one for each of the ``pool`` most
        probable valid y under a: the base model with the table entries that y uses raised by c, so that q piles
        up on y. Collapsed optima sit near such points.
        """
        log_a_valid = self.world.log_a.masked_fill(~self.world.valid, -math.inf)
        rows = torch.argsort(log_a_valid, descending=True)[: min(pool, int(self.world.valid.sum()))]
        thetas = self.init_params()[None, :] + sharpness * (self._m[rows] > 0).to(DT)
        losses = obj.value(self.log_probs(thetas))
        return [thetas[i] for i in torch.argsort(losses)[:k].tolist()]

    def loss_grad_hess(self, theta: torch.Tensor, obj: Objective) -> tuple[float, torch.Tensor, torch.Tensor]:
        """L(θ), ∇L, ∇²L (formulas in the class docstring)."""
        t = self._tables(theta)
        loss, d1, d2 = obj.derivatives(self._m @ t)
        s = t.exp()
        jac = torch.eye(len(s), dtype=DT) - self._same_row * s[None, :]
        g = self._m.T @ d1
        h_t = self._m.T @ (d2[:, None] * self._m)
        curv = (torch.diag(s) - s[:, None] * s[None, :]) * self._same_row * (self._same_row @ g)[:, None]
        return float(loss), jac.T @ g, jac.T @ h_t @ jac - curv

    def minimise(self, obj: Objective, init: torch.Tensor, max_iter: int = 300, tol: float = 1e-9) -> Fit:
        """Levenberg–Marquardt-damped Newton: solve (∇²L + λI)·δ = −∇L, take δ if L drops enough (Armijo), else λ×10."""
        theta = init.detach().clone()
        eye = torch.eye(len(theta), dtype=DT)
        loss, g, h = self.loss_grad_hess(theta, obj)
        lam, iters = 1e-6, 0
        while iters < max_iter and float(g.abs().max()) > tol:
            iters += 1
            while lam < 1e12:
                chol, info = torch.linalg.cholesky_ex(h + lam * eye)
                if int(info) == 0:
                    step = -torch.cholesky_solve(g[:, None], chol)[:, 0]
                    if float(obj.value(self.log_probs(theta + step))) <= loss + 1e-4 * float(g @ step):
                        theta, lam = theta + step, max(lam / 10.0, 1e-12)
                        break
                lam *= 10.0
            else:
                break  # no damping gives descent: stationary to numerical precision
            loss, g, h = self.loss_grad_hess(theta, obj)
        return Fit(self.log_probs(theta), theta, loss, float(g.abs().max()), iters)


class Bigram(_LinearInLogTables):
    """q(y) = q_1(y_1)·Π_t q(y_t|y_{t−1}), one transition table shared by all positions (the base model's family)."""

    name = "bigram"

    def __init__(self, world: World) -> None:
        v, seqs = len(VOCAB), world.seqs
        n = seqs.shape[0]
        counts = torch.zeros(n, v + v * v, dtype=DT)
        counts[torch.arange(n), seqs[:, 0]] = 1.0
        pairs = v + seqs[:, :-1] * v + seqs[:, 1:]
        counts.scatter_add_(1, pairs, torch.ones(pairs.shape, dtype=DT))
        super().__init__(world, counts, [(1, v), (v, v)])

    def init_params(self) -> torch.Tensor:
        """The base model's own logits (a is in this family)."""
        return torch.cat([self.world.first_logits, self.world.trans_logits.reshape(-1)]).clone()


class Factorised(_LinearInLogTables):
    """q(y) = Π_t q_t(y_t): independent per-position tables."""

    name = "factorised"

    def __init__(self, world: World) -> None:
        v, seqs = len(VOCAB), world.seqs
        n, length = seqs.shape
        counts = torch.zeros(n, length * v, dtype=DT)
        counts.scatter_(1, torch.arange(length) * v + seqs, 1.0)
        super().__init__(world, counts, [(length, v)])

    def init_params(self) -> torch.Tensor:
        """Per-position marginals of a (the forward-KL projection of a onto this family)."""
        return (self.world.log_a.exp() @ self._m).log()


FAMILY_CLASSES: dict[str, type[Family]] = {"tabular": Tabular, "bigram": Bigram, "factorised": Factorised}


# --------------------------------------------------------------------------------------------------------------------
# Measurements


def _entropy(log_q: torch.Tensor) -> float:
    q = log_q.exp()
    return float(-(torch.where(q > 0, q * log_q, torch.zeros_like(q))).sum())


def measure(world: World, log_q: torch.Tensor, max_k: int = MAX_K) -> dict:
    """μ, entropies, n90, cov90, cov@k, pass@k and the top sequence for one distribution q (given as log q)."""
    q = log_q.exp()
    valid = world.valid
    mu = float(q[valid].sum())
    qv = q[valid]
    pstar = world.log_filtered.exp()[valid]
    order = torch.argsort(qv, descending=True, stable=True)
    cum = qv[order].cumsum(0)
    n90 = int((cum < 0.9 * mu * (1 - 1e-12)).sum()) + 1
    top = order[:n90]
    ks = torch.arange(1, max_k + 1, dtype=DT)
    # cov@k = Σ_valid p*(y)·(1 − (1 − q(y))^k), computed as −expm1(k·log1p(−q))
    miss = torch.log1p(-qv.clamp(max=1.0 - 1e-16))[:, None] * ks[None, :]
    cov_at_k = (pstar[:, None] * (-torch.expm1(miss))).sum(0)
    pass_at_k = -torch.expm1(ks * math.log1p(-min(mu, 1.0 - 1e-16)))
    log_qv = log_q[valid] - math.log(mu) if mu > 0 else log_q[valid]
    i_max = int(torch.argmax(q))
    return {
        "mu": mu,
        "entropy": _entropy(log_q),
        "entropy_valid": _entropy(log_qv),
        "n90": n90,
        "cov90": float(pstar[top].sum()),
        "max_mass": float(q[i_max]),
        "top_sequence": decode(world.seqs[i_max]),
        "kl_filtered_to_q": float((pstar * (world.log_filtered[valid] - log_q[valid])).sum()),
        "cov_at_k": cov_at_k.tolist(),
        "pass_at_k": pass_at_k.tolist(),
    }


# --------------------------------------------------------------------------------------------------------------------
# The experiment


@contextmanager
def _single_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # the tensors are tiny: threads only add overhead on a shared machine
    try:
        yield
    finally:
        torch.set_num_threads(old)


def sweep(
    family: Family,
    objective_at: Callable[[float], Objective],
    betas: Sequence[float],
    seed: int = 0,
    random_starts: int = RANDOM_STARTS,
    peaked_starts: int = PEAKED_STARTS,
    screen_iter: int = SCREEN_ITER,
) -> list[tuple[Fit, dict]]:
    """The best fit found at each β (``betas`` descending), the continuation path from a, and search diagnostics.

    Tabular objectives are convex in q (one optimum): one warm-started sweep. Restricted families are not (their
    collapsed optima are combinatorial: which few valid sequences to pile onto). At each β the starts are: the
    previous β's best, the previous β's path point, the base-model fit, the ``peaked_starts`` best starts piled up
    on one valid sequence (:meth:`_LinearInLogTables.peaked_starts`) and ``random_starts`` random logit vectors
    (N(0, 3²)); each gets ``screen_iter`` Newton steps and the best is run to convergence. A sweep back up in β,
    warm-started from the smaller β's optimum, replaces any point it improves. The *path* is the local optimum
    reached by continuation from a alone (each β warm-started from the previous path point): what a slow
    annealing of β from large to small would track.
    """
    with _single_thread():
        return _sweep(family, objective_at, betas, seed, random_starts, peaked_starts, screen_iter)


def _sweep(
    family: Family,
    objective_at: Callable[[float], Objective],
    betas: Sequence[float],
    seed: int,
    random_starts: int,
    peaked_starts: int,
    screen_iter: int,
) -> list[tuple[Fit, dict]]:
    start = family.init_params()
    g = torch.Generator().manual_seed(seed)
    convex = isinstance(family, Tabular)
    out: list[tuple[Fit, dict]] = []
    prev = path = start
    for beta in betas:
        obj = objective_at(beta)
        info: dict = {"starts": 1, "from_upward_sweep": False}
        init = prev
        if not convex:
            path_fit = family.minimise(obj, path)
            path = path_fit.theta
            info["path"] = {"loss": path_fit.loss} | _brief(family.world, path_fit.log_q)
            inits = [prev, path, start, *family.peaked_starts(obj, peaked_starts)]  # type: ignore[attr-defined]
            inits += [3.0 * torch.randn(start.shape, generator=g, dtype=DT) for _ in range(random_starts)]
            screened = [family.minimise(obj, x, max_iter=screen_iter) for x in inits]
            info |= {"starts": len(inits), "screen_losses": [f.loss for f in screened]}
            init = min(screened, key=lambda f: f.loss).theta
        best = family.minimise(obj, init)
        if not convex and path_fit.loss < best.loss:
            best = path_fit
        out.append((best, info))
        prev = best.theta
    if not convex:
        for i in range(len(betas) - 2, -1, -1):
            fit = family.minimise(objective_at(betas[i]), out[i + 1][0].theta)
            if fit.loss < out[i][0].loss - 1e-9:
                out[i] = (fit, out[i][1] | {"from_upward_sweep": True})
    return out


def _brief(world: World, log_q: torch.Tensor) -> dict:
    m = measure(world, log_q)
    return {k: m[k] for k in ("mu", "entropy", "n90", "cov90", "max_mass", "top_sequence")}


def run_lab(
    world: World,
    betas: Sequence[float] = DEFAULT_BETAS,
    alpha: float = DEFAULT_ALPHA,
    families: Sequence[str] = FAMILIES,
    regularisers: Sequence[str] = REGULARISERS,
    projections: Sequence[str] = PROJECTIONS,
    seed: int = 0,
) -> dict:
    """Every (family, objective, β) point of the lab, optimised (see :func:`sweep`) and measured."""
    betas = sorted({float(b) for b in betas}, reverse=True)
    if not betas or betas[-1] <= 0:
        raise ConfigError(f"betas={betas} must be positive numbers")
    a = world.base_rate
    rows: list[dict] = []
    refs = {"base a": measure(world, world.log_a), "filtered p*": measure(world, world.log_filtered)}
    with _single_thread():
        for fam_name in families:
            fam = FAMILY_CLASSES[fam_name](world)
            for reg in regularisers:
                fits = sweep(fam, lambda b, reg=reg: regularised_objective(world, b, reg, alpha), betas, seed)
                for beta, (fit, info) in zip(betas, fits):
                    row = {
                        "family": fam_name,
                        "objective": f"reg:{reg}",
                        "beta": beta,
                        "loss": fit.loss,
                        "grad_norm": fit.grad_norm,
                        "iters": fit.iters,
                    } | info
                    row["kl_q_to_tilted"] = f_divergence(fit.log_q, world.log_tilted(beta), "reverse_kl")
                    row["mu_tilted"] = validity_at(beta, a)
                    rows.append(row | measure(world, fit.log_q))
            for proj in projections:
                row = {"family": fam_name, "objective": f"proj:{proj}", "beta": None}
                if fam_name == "tabular":  # the minimiser is p* itself (D_f(q‖p*) = 0 iff q = p*)
                    log_q = world.log_filtered
                    row |= {"loss": 0.0, "grad_norm": 0.0, "iters": 0, "starts": 0}
                else:
                    obj = projection_objective(world, proj, alpha)
                    fit, info = sweep(fam, lambda _b, obj=obj: obj, [1.0], seed)[0]
                    log_q = fit.log_q
                    row |= {"loss": fit.loss, "grad_norm": fit.grad_norm, "iters": fit.iters} | info
                rows.append(row | measure(world, log_q))
    tilted = [{"beta": b, "mu": validity_at(b, a)} for b in betas]
    return {
        "world": describe_world(world),
        "alpha": alpha,
        "betas": betas,
        "references": refs,
        "tilted_closed_form": tilted,
        "rows": rows,
    }


def describe_world(world: World) -> dict:
    return {
        "vocab": VOCAB,
        "length": int(world.seqs.shape[1]),
        "n_sequences": int(world.seqs.shape[0]),
        "n_valid": int(world.valid.sum()),
        "rule": f"sum of token values (a=0, b=1, c=2, d=3) = 0 mod {MODULUS}",
        "base_model": f"time-homogeneous bigram, N(0, {BASE_SCALE}^2) logits",
        "base_rate": world.base_rate,
    }


# --------------------------------------------------------------------------------------------------------------------
# Report: markdown table, plots


def _fmt_beta(b: float | None) -> str:
    return "—" if b is None else f"{b:g}"


def _table_row(label: list[str], m: dict) -> str:
    pk = m["pass_at_k"]
    cells = label + [
        f"{m['mu']:.4f}",
        f"{m['entropy']:.3f}",
        f"{m['entropy_valid']:.3f}",
        str(m["n90"]),
        f"{m['cov90']:.3f}",
        f"{m['cov_at_k'][63]:.3f}",
        f"{m['max_mass']:.3f}",
        m["top_sequence"],
        f"{pk[0]:.4f}",
        f"{pk[7]:.4f}",
        f"{pk[63]:.4f}",
    ]
    return "| " + " | ".join(cells) + " |"


_HEADER = "| μ | H(q) | H(q\\|valid) | n90 | cov90 | cov@64 | max q | argmax | pass@1 | pass@8 | pass@64 |"


def write_markdown(result: dict, path: Path, command: str, seconds: float) -> None:
    w = result["world"]
    rows = result["rows"]
    fams = list(dict.fromkeys(r["family"] for r in rows))
    regs = list(dict.fromkeys(r["objective"] for r in rows if r["objective"].startswith("reg:")))
    refs = result["references"]
    out = [
        "# Exact toy lab: the tilted model and its projections",
        "",
        f"Command: `{command}` ({seconds:.1f} s). All numbers are exact sums over the {w['n_sequences']} sequences.",
        "",
        f"World: vocabulary `{w['vocab']}`, fixed length {w['length']} (no EOS), base model a = {w['base_model']}; "
        f"valid = {w['rule']} ({w['n_valid']} valid sequences); A = a(valid) = {w['base_rate']:.4f}; "
        f"α = {result['alpha']} for the α-divergence (DPH-RL convention).",
        "",
        "Columns: μ = q(valid); H in nats; n90 = fewest valid sequences holding 90% of q's valid mass; cov90 = p*-mass "
        "of those sequences; cov@64 = expected p*-mass of the distinct valid sequences in 64 draws from q; "
        "max q = the largest single-sequence probability (argmax = that sequence); pass@k = 1 − (1 − μ)^k.",
        "",
        "## n90 as β decreases (objective max E_q[v] − β·D_f(q‖a))",
        "",
    ]
    head = "| β | μ(β) closed form | " + " | ".join(f"{reg[4:]}: {f}" for reg in regs for f in fams) + " |"
    out += [head, "|" + "---|" * (2 + len(regs) * len(fams))]
    by_key = {(r["family"], r["objective"], r["beta"]): r for r in rows}
    for tc in result["tilted_closed_form"]:
        b = tc["beta"]
        cells = [f"{b:g}", f"{tc['mu']:.4f}"]
        for reg in regs:
            for f in fams:
                r = by_key.get((f, reg, b))
                cells.append("" if r is None else f"{r['n90']} (μ {r['mu']:.3f})")
        out.append("| " + " | ".join(cells) + " |")
    path_fams = [f for f in fams if any("path" in r for r in rows if r["family"] == f)]
    if path_fams:
        out += [
            "",
            "## n90 along the continuation path from a (restricted families)",
            "",
            "The local optimum reached by warm-starting each β from the previous one, starting at a: what slowly "
            "lowering β from a tracks. Where it differs from the table above, the global optimum sits in "
            "another basin.",
            "",
        ]
        out += [
            "| β | " + " | ".join(f"{reg[4:]}: {f}" for reg in regs for f in path_fams) + " |",
            "|" + "---|" * (1 + len(regs) * len(path_fams)),
        ]
        for b in result["betas"]:
            cells = [f"{b:g}"]
            for reg in regs:
                for f in path_fams:
                    pt = by_key[(f, reg, b)]["path"]
                    cells.append(f"{pt['n90']} (μ {pt['mu']:.3f})")
            out.append("| " + " | ".join(cells) + " |")
    proj_rows = [r for r in rows if r["objective"].startswith("proj:")]
    if proj_rows:
        out += [
            "",
            "Projections of p* (no β): "
            + "; ".join(f"{r['objective'][5:]}/{r['family']}: n90 {r['n90']} (μ {r['mu']:.3f})" for r in proj_rows)
            + ".",
        ]
    out += ["", "## All points", "", "| family | objective | β " + _HEADER, "|" + "---|" * 14]
    out.append(_table_row(["—", "base a", "—"], refs["base a"]))
    out.append(_table_row(["—", "filtered p*", "—"], refs["filtered p*"]))
    for r in rows:
        out.append(_table_row([r["family"], r["objective"], _fmt_beta(r["beta"])], r))
    worst = max((r for r in rows if r["iters"]), key=lambda r: r["grad_norm"], default=None)
    if worst is not None:
        out += [
            "",
            f"Largest final gradient (max-norm) over all fits: {worst['grad_norm']:.2e} "
            f"({worst['family']}, {worst['objective']}, β = {_fmt_beta(worst['beta'])}).",
        ]
    path.write_text("\n".join(out) + "\n")


def write_plots(result: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fams = list(dict.fromkeys(r["family"] for r in rows))
    regs = list(dict.fromkeys(r["objective"] for r in rows if r["objective"].startswith("reg:")))
    colours = {"tabular": "tab:blue", "bigram": "tab:orange", "factorised": "tab:green"}
    refs = result["references"]
    paths = []

    def series(fam: str, obj: str, key: str) -> tuple[list[float], list[float]]:
        pts = [(r["beta"], r[key]) for r in rows if r["family"] == fam and r["objective"] == obj]
        return [p[0] for p in pts], [p[1] for p in pts]

    for fname, key, ylabel, logy in (
        ("valid_mass_vs_beta.png", "mu", "μ = q(valid)", False),
        ("coverage_vs_beta.png", None, None, None),
    ):
        if key is None:
            fig, axes = plt.subplots(2, len(regs), figsize=(4 * len(regs), 6.5), squeeze=False)
            panels = [
                (axes[0], "n90", "n90 (valid sequences holding 90%)", True),
                (axes[1], "cov90", "cov90 = p*-mass of those sequences", False),
            ]
        else:
            fig, axes = plt.subplots(1, len(regs), figsize=(4 * len(regs), 3.5), squeeze=False)
            panels = [(axes[0], key, ylabel, logy)]
        for ax_row, k, lab, lg in panels:
            for ax, reg in zip(ax_row, regs):
                for fam in fams:
                    xs, ys = series(fam, reg, k)
                    ax.plot(xs, ys, "o-", ms=3, color=colours.get(fam), label=fam)
                if k == "mu" and reg == "reg:reverse_kl":
                    tc = result["tilted_closed_form"]
                    ax.plot([t["beta"] for t in tc], [t["mu"] for t in tc], "k:", label="μ(β, A) closed form")
                if k in ("n90", "cov90"):
                    ax.axhline(refs["filtered p*"][k], color="grey", ls="--", lw=1, label="p*")
                ax.set_xscale("log")
                ax.invert_xaxis()
                if lg:
                    ax.set_yscale("log")
                ax.set_title(f"max E[v] − β·{reg[4:]}(q‖a)", fontsize=9)
                ax.set_xlabel("β (decreasing →)")
                ax.set_ylabel(lab)
                ax.grid(alpha=0.3)
            ax_row[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        paths.append(out_dir / fname)

    # pass@k and cov@k curves, one column per family: reverse-KL points along β, and the projections of p*
    ks = list(range(1, MAX_K + 1))
    fig, axes = plt.subplots(2, len(fams), figsize=(4.3 * len(fams), 7), squeeze=False)
    cmap = plt.get_cmap("viridis")
    betas = result["betas"]
    for j, fam in enumerate(fams):
        for i, (key, lab) in enumerate(
            (("pass_at_k", "pass@k = 1 − (1 − μ)^k"), ("cov_at_k", "cov@k = p*-mass seen in k draws"))
        ):
            ax = axes[i][j]
            for r in rows:
                if r["family"] != fam:
                    continue
                if r["objective"] == "reg:reverse_kl":
                    c = cmap(betas.index(r["beta"]) / max(len(betas) - 1, 1))
                    ax.plot(ks, r[key], color=c, lw=1, label=f"rKL β={r['beta']:g}")
                elif r["objective"].startswith("proj:"):
                    ax.plot(ks, r[key], "--", lw=1.5, label=f"proj {r['objective'][5:]}")
            ax.plot(ks, refs["base a"][key], "k:", lw=1.5, label="base a")
            ax.plot(ks, refs["filtered p*"][key], "k-", lw=0.8, alpha=0.5, label="p*")
            ax.set_xscale("log", base=2)
            ax.set_title(fam, fontsize=9)
            ax.set_xlabel("k")
            ax.set_ylabel(lab)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out_dir / "pass_at_k.png", dpi=110)
    plt.close(fig)
    paths.append(out_dir / "pass_at_k.png")
    return paths


def main(argv: list[str] | None = None) -> int:
    """Exact toy lab of the tilted model p_β ∝ a·e^{v/β} and its projections onto restricted policy families."""
    p = argparse.ArgumentParser(prog="rlvr-div toy", description=main.__doc__)
    p.add_argument("--out", required=True, help="output directory (toy.md, toy.json, PNG plots)")
    p.add_argument("--betas", default=",".join(f"{b:g}" for b in DEFAULT_BETAS), help="comma-separated β grid")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="α of the α-divergence (DPH-RL convention)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the random base model")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = p.parse_args(argv)
    try:
        betas = [float(b) for b in args.betas.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--betas={args.betas!r} must be comma-separated numbers, e.g. 2,1,0.5") from None
    if not betas or min(betas) <= 0:
        raise ConfigError(f"--betas={args.betas!r} must be positive numbers")
    generator("alpha", args.alpha)  # validates α
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    world = make_world(args.seed)
    a = world.base_rate
    if not 0.05 <= a <= 0.5:
        print(f"note: seed {args.seed} gives A = {a:.4f}, outside the intended 0.05..0.5")
    result = run_lab(world, betas, args.alpha)
    seconds = time.perf_counter() - t0
    result["seconds_optimisation"] = seconds
    command = "rlvr-div toy " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "toy.json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result, out / "toy.md", command.strip(), seconds)
    written = [out / "toy.md", out / "toy.json"]
    if not args.no_plots:
        written += write_plots(result, out)
    print(f"A = {a:.4f}; {len(result['rows'])} points in {time.perf_counter() - t0:.1f} s")
    for path in written:
        print(f"wrote {path}")
    return 0
