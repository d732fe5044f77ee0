"""The lab's experiment: sweep β for each (family, objective), keep the best optimum found, and measure it.

Measured per point: μ = q(valid); H(q) and H(q|valid) in nats; n90 = the least number of valid sequences whose
q-mass reaches 90% of q(valid); cov90 = p*-mass of those n90 sequences; cov@k = Σ_{valid y} p*(y)·(1 − (1 − q(y))^k),
the expected p*-mass of the distinct valid sequences seen in k draws from q; max q(y); pass@k = 1 − (1 − μ)^k.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.theory.calibration import validity_at
from rlvr_div.toy.families import FAMILIES, FAMILY_CLASSES, PEAKED_STARTS, Family, Fit, Tabular
from rlvr_div.toy.objectives import (
    DEFAULT_ALPHA,
    PROJECTIONS,
    REGULARISERS,
    Objective,
    f_divergence,
    projection_objective,
    regularised_objective,
)
from rlvr_div.toy.world import DT, World, decode, describe_world

DEFAULT_BETAS = (4.0, 2.0, 1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08, 0.05)
MAX_K = 64
RANDOM_STARTS = 1  # extra random initialisations per point for the restricted (non-convex) families
SCREEN_ITER = 10  # Newton steps each start gets before the best one is run to convergence


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
