"""The exact toy lab: its world, the closed forms by enumeration, the optimisers, the measurements and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlvr_div import toy
from rlvr_div.errors import ConfigError
from rlvr_div.theory.calibration import kl_filtered_to_tilted, kl_tilted_to_base, validity_at


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny tensors: intra-op threads only cost time on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def world() -> toy.World:
    return toy.make_world()


def test_world_is_enumerable_normalised_and_in_range(world: toy.World) -> None:
    n = len(toy.VOCAB) ** toy.LENGTH
    assert world.seqs.shape == (n, toy.LENGTH) and len({tuple(s) for s in world.seqs.tolist()}) == n
    assert len(toy.VOCAB) <= 8 and toy.LENGTH <= 6
    assert abs(float(world.log_a.logsumexp(0))) < 1e-12
    assert 0.05 <= world.base_rate <= 0.5
    # the rule, as a 5-state automaton run token by token
    for seq, ok in zip(world.seqs.tolist()[::37], world.valid.tolist()[::37]):
        state = 0
        for tok in seq:
            state = (state + tok) % toy.MODULUS
        assert ok == (state == 0)
    # the base model is the bigram it claims to be
    y = world.seqs[1234]
    lf, lt = world.first_logits.log_softmax(0), world.trans_logits.log_softmax(1)
    manual = lf[y[0]] + sum(lt[y[t - 1], y[t]] for t in range(1, toy.LENGTH))
    assert float(world.log_a[1234]) == pytest.approx(float(manual), abs=1e-12)


@pytest.mark.parametrize("beta", toy.DEFAULT_BETAS)
def test_closed_forms_agree_with_enumeration(world: toy.World, beta: float) -> None:
    a = world.base_rate
    log_p = (world.log_a + world.valid.double() / beta).log_softmax(0)  # p_β by brute-force normalisation
    p = log_p.exp()
    assert float((world.log_tilted(beta) - log_p).abs().max()) < 1e-9
    assert abs(float(p[world.valid].sum()) - validity_at(beta, a)) < 1e-9
    assert abs(float((p * (log_p - world.log_a)).sum()) - kl_tilted_to_base(beta, a)) < 1e-9
    star = world.log_filtered[world.valid]
    assert abs(float((star.exp() * (star - log_p[world.valid])).sum()) - kl_filtered_to_tilted(beta, a)) < 1e-9
    # p_β restricted to the valid sequences is p*, for every β
    restricted = log_p[world.valid] - log_p[world.valid].logsumexp(0)
    assert float((restricted - star).abs().max()) < 1e-9


def test_tabular_reverse_kl_reproduces_the_tilted_model(world: toy.World) -> None:
    fits = toy.sweep(toy.Tabular(world), lambda b: toy.regularised_objective(world, b, "reverse_kl"), toy.DEFAULT_BETAS)
    for beta, (fit, _) in zip(toy.DEFAULT_BETAS, fits):
        assert toy.f_divergence(fit.log_q, world.log_tilted(beta), "reverse_kl") < 1e-6
        assert abs(float(fit.log_q.exp()[world.valid].sum()) - validity_at(beta, world.base_rate)) < 1e-6
        m = toy.measure(world, fit.log_q)
        assert m["n90"] == toy.measure(world, world.log_filtered)["n90"]
    # from random starts too (for KL(q‖p_β) one natural-gradient step θ − ∇/q lands on log p_β from anywhere)
    g = torch.Generator().manual_seed(0)
    for beta in (2.0, 0.25, 0.05):
        start = 2.0 * torch.randn(world.log_a.shape, generator=g, dtype=torch.float64)
        fit = toy.Tabular(world).minimise(toy.regularised_objective(world, beta, "reverse_kl"), start)
        assert toy.f_divergence(fit.log_q, world.log_tilted(beta), "reverse_kl") < 1e-6


@pytest.mark.parametrize("name", ["forward_kl", "js", "alpha"])
def test_tabular_f_regularised_optimum_keeps_p_star_inside_the_valid_set(world: toy.World, name: str) -> None:
    """Stationarity f'(q/a) = λ + v/β makes q/a constant on the valid set, for any f: q(·|valid) = p*."""
    obj = toy.regularised_objective(world, 0.2, name)
    fit = toy.Tabular(world).minimise(obj, world.log_a)
    lv = fit.log_q[world.valid]
    assert float((lv - lv.logsumexp(0) - world.log_filtered[world.valid]).abs().max()) < 1e-6
    assert float(fit.log_q.exp()[world.valid].sum()) > world.base_rate + 0.3  # and it did move toward validity


def _autograd_loss(family: toy.Family, obj: toy.Objective):
    return lambda theta: obj.value(family.log_probs(theta))


@pytest.mark.parametrize("family_cls", [toy.Bigram, toy.Factorised])
@pytest.mark.parametrize(
    "kind", ["reg:reverse_kl", "reg:forward_kl", "reg:js", "reg:alpha", "proj:forward_kl", "proj:js", "proj:alpha"]
)
def test_newton_derivatives_match_autograd(world: toy.World, family_cls, kind: str) -> None:
    fam = family_cls(world)
    target, name = kind.split(":")
    obj = toy.regularised_objective(world, 0.3, name) if target == "reg" else toy.projection_objective(world, name)
    g = torch.Generator().manual_seed(3)
    theta = fam.init_params() + torch.randn(fam.init_params().shape, generator=g, dtype=torch.float64)
    loss, grad, hess = fam.loss_grad_hess(theta, obj)
    f = _autograd_loss(fam, obj)
    t = theta.clone().requires_grad_(True)
    (grad_ref,) = torch.autograd.grad(f(t), t)
    hess_ref = torch.autograd.functional.hessian(f, theta)
    assert loss == pytest.approx(float(f(theta)), abs=1e-12)
    assert float((grad - grad_ref).abs().max()) < 1e-10
    assert float((hess - hess_ref).abs().max()) < 1e-10


def test_tabular_gradient_matches_autograd(world: toy.World) -> None:
    fam = toy.Tabular(world)
    g = torch.Generator().manual_seed(4)
    theta = world.log_a + torch.randn(world.log_a.shape, generator=g, dtype=torch.float64)
    for name in toy.REGULARISERS:
        obj = toy.regularised_objective(world, 0.3, name)
        _, grad, _ = fam._loss_grad(theta, obj)
        t = theta.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(obj.value(fam.log_probs(t)), t)
        assert float((grad - ref).abs().max()) < 1e-12


def test_f_divergences_by_enumeration(world: toy.World) -> None:
    q = toy.Factorised(world)
    log_q = q.log_probs(q.init_params())
    star = world.log_filtered
    v = world.valid
    p, qq = star.exp(), log_q.exp()
    assert toy.f_divergence(log_q, star, "forward_kl") == pytest.approx(float((p[v] * (star[v] - log_q[v])).sum()))
    m = 0.5 * (p + qq)
    js = float((torch.special.xlogy(p, p / m)).sum() + (qq * (log_q - m.log())).sum()) / 2
    assert toy.f_divergence(log_q, star, "js") == pytest.approx(2 * js)  # DPH-RL's generator is twice JS
    kl_qa = float((qq * (log_q - world.log_a)).sum())
    assert toy.f_divergence(log_q, world.log_a, "reverse_kl") == pytest.approx(kl_qa)
    assert toy.f_divergence(log_q, star, "reverse_kl") == math.inf
    for name in toy.REGULARISERS:
        assert abs(toy.f_divergence(world.log_a, world.log_a, name)) < 1e-12
    # α → 1 is forward KL in the DPH-RL convention
    assert toy.f_divergence(log_q, star, "alpha", 0.999) == pytest.approx(
        toy.f_divergence(log_q, star, "forward_kl"), rel=1e-2
    )
    with pytest.raises(ConfigError):
        toy.generator("alpha", 1.0)
    with pytest.raises(ConfigError):
        toy.generator("tv")


def test_restricted_families_limits(world: toy.World) -> None:
    """β → ∞: the bigram family holds a, so its reverse-KL optimum is a; the factorised forward-KL projection of a
    is a's per-position marginals (its init)."""
    big = toy.Bigram(world)
    fit = big.minimise(toy.regularised_objective(world, 1e4, "reverse_kl"), big.init_params() + 0.5)
    assert toy.f_divergence(fit.log_q, world.log_a, "reverse_kl") < 1e-6
    fac = toy.Factorised(world)
    fit = fac.minimise(
        toy.Objective(world.log_a, "forward_kl"), torch.zeros(len(toy.VOCAB) * toy.LENGTH, dtype=torch.float64)
    )
    assert float((fit.log_q - fac.log_probs(fac.init_params())).abs().max()) < 1e-6


def test_measure_definitions(world: toy.World) -> None:
    # a distribution with 0.5 on one valid sequence, 0.3 on another, 0.2 spread on the invalid ones
    v_idx = torch.nonzero(world.valid).squeeze(1)
    inv = ~world.valid
    q = torch.zeros(len(world.log_a), dtype=torch.float64)
    q[v_idx[0]], q[v_idx[1]] = 0.5, 0.3
    q[inv] = 0.2 / int(inv.sum())
    m = toy.measure(world, q.log())
    assert m["mu"] == pytest.approx(0.8)
    assert m["n90"] == 2  # 0.5 alone is 62.5% of the valid mass, 0.5 + 0.3 is 100%
    star = world.log_filtered.exp()
    assert m["cov90"] == pytest.approx(float(star[v_idx[0]] + star[v_idx[1]]))
    assert m["pass_at_k"][0] == pytest.approx(0.8) and m["pass_at_k"][2] == pytest.approx(1 - 0.2**3)
    assert m["cov_at_k"][1] == pytest.approx(float(star[v_idx[0]] * 0.75 + star[v_idx[1]] * (1 - 0.7**2)))
    assert m["max_mass"] == pytest.approx(0.5)
    ref = toy.measure(world, world.log_filtered)
    assert ref["mu"] == pytest.approx(1.0) and ref["cov90"] >= 0.9
    assert ref["entropy"] == pytest.approx(ref["entropy_valid"])


def test_cli_small_grid(tmp_path) -> None:
    out = tmp_path / "toy"
    assert toy.main(["--out", str(out), "--betas", "1,0.1"]) == 0
    result = json.loads((out / "toy.json").read_text())
    assert result["betas"] == [1.0, 0.1]
    kinds = {(r["family"], r["objective"]) for r in result["rows"]}
    assert len(kinds) == len(toy.FAMILIES) * (len(toy.REGULARISERS) + len(toy.PROJECTIONS))
    for r in result["rows"]:
        assert len(r["pass_at_k"]) == 64 and 0.0 <= r["mu"] <= 1.0 and r["n90"] >= 1
    md = (out / "toy.md").read_text()
    assert "rlvr-div toy --out" in md and "| tabular | reg:reverse_kl | 0.1 |" in md
    for name in ("valid_mass_vs_beta.png", "coverage_vs_beta.png", "pass_at_k.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv", [["--betas", "1,x"], ["--betas", "0,1"], ["--alpha", "1.5"]])
def test_cli_bad_arguments(tmp_path, argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        toy.main(["--out", str(tmp_path / "o"), *argv])


@pytest.mark.slow
def test_full_default_run_within_budget(tmp_path) -> None:
    import time

    t0 = time.perf_counter()
    assert toy.main(["--out", str(tmp_path / "toy")]) == 0
    assert time.perf_counter() - t0 < 60
