"""rlvr_div.divergences: every per-token estimator is unbiased for the divergence it claims (Monte Carlo on random
categoricals, V = 10, 10⁵ samples, float64), and its autograd gradient is, in expectation, the gradient the module
docstring says; exact divergences against sums written out here; generators, conjugates, validation."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_div.divergences import (
    DIVERGENCES,
    check_divergence_params,
    exact_divergence,
    get_divergence,
    token_divergence,
)
from rlvr_div.errors import ConfigError

V = 10
N = 100_000
Z_VALUE = 4.0  # Monte Carlo tolerance on values, in standard errors
Z_GRAD = 4.5  # per gradient component (10 components per check)

CASES = [
    ("reverse_kl", {}),
    ("forward_kl", {}),
    ("js", {}),
    ("js", {"js_scale": 2.0}),
    ("alpha", {"dph_alpha": 0.3}),
    ("alpha", {"dph_alpha": 0.8}),
    ("chi2", {}),
    ("tv", {}),
]
IDS = [f"{n}-{next(iter(p.values()))}" if p else n for n, p in CASES]


def _pair(seed: int, batch: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = 0.8 * torch.randn(*batch, V, generator=g, dtype=torch.float64)
    ref = 0.8 * torch.randn(*batch, V, generator=g, dtype=torch.float64)
    return logits, ref


# --------------------------------------------------------------------------------------------------------------------
# Divergences written out from their definitions (p = policy, q = reference), independent of the module.


def _written_out(name: str, p: torch.Tensor, q: torch.Tensor, **params: float) -> torch.Tensor:
    if name == "reverse_kl":
        return (p * (p / q).log()).sum(-1)
    if name == "forward_kl":
        return (q * (q / p).log()).sum(-1)
    if name == "js":
        m = (p + q) / 2
        js = 0.5 * (p * (p / m).log()).sum(-1) + 0.5 * (q * (q / m).log()).sum(-1)
        return params.get("js_scale", 1.0) * js
    if name == "alpha":
        a = params["dph_alpha"]
        return ((p ** (1 - a) * q**a).sum(-1) - 1) / (a * (a - 1))
    if name == "chi2":
        return ((p - q) ** 2 / q).sum(-1)
    if name == "tv":
        return 0.5 * (p - q).abs().sum(-1)
    raise AssertionError(name)


def _plain_policy_potential(name: str, logits: torch.Tensor, ref: torch.Tensor, **params: float) -> torch.Tensor:
    """A function of the policy logits whose gradient is the expected gradient of the un-weighted estimator on
    policy samples, E_ref[(r·f'(r) − f(r))·∇log π] (the docstring's ∇E_ref[g(r)])."""
    logp, logq = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    q, d = logq.exp(), logp - logq
    if name == "reverse_kl":  # GRPO's k3: the forward-KL gradient
        return (q * -d).sum(-1)
    if name == "forward_kl":
        return 0.5 * (q * d**2).sum(-1)
    if name == "alpha":
        b = 1 - params["dph_alpha"]
        return (q * ((b * d).exp() - 1 - b * d)).sum(-1) / b**2
    if name == "chi2":
        return 0.5 * (q * (d.exp() - 1) ** 2).sum(-1) + (q * -d).sum(-1)
    if name == "tv":
        return 0.5 * (q * d.abs()).sum(-1)
    if name == "js":  # no closed form: a surrogate with the right gradient, E_ref[h(r)·∇l], h(r) = (c/2)·log((1+r)/2)
        h = 0.5 * params.get("js_scale", 1.0) * ((1 + d.exp()) / 2).log()
        return (q * h.detach() * logp).sum(-1)
    raise AssertionError(name)


def _grad(fn, logits: torch.Tensor) -> torch.Tensor:
    theta = logits.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(theta), theta)
    return g


# --------------------------------------------------------------------------------------------------------------------
# Exact divergences


@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_exact_matches_written_out_sum(name, params):
    logits, ref = _pair(1, batch=(3,))
    expected = _written_out(name, torch.softmax(logits, -1), torch.softmax(ref, -1), **params)
    got = exact_divergence(name, logits, ref, **params)
    assert got.shape == (3,) and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-13)
    assert (got > 0).all()
    torch.testing.assert_close(exact_divergence(name, ref, ref, **params), torch.zeros(3, dtype=torch.float64))


def test_exact_is_finite_for_peaked_and_masked_distributions():
    logits = torch.tensor([0.0, -200.0, 3.0, float("-inf")])
    ref = torch.tensor([-150.0, 1.0, 2.0, float("-inf")])
    for name in DIVERGENCES.names():
        if name == "chi2":  # Σ π²/π_ref ≈ e^146 here: not representable, inf is the right answer
            assert exact_divergence(name, logits, ref) == float("inf")
            continue
        value = exact_divergence(name, logits, ref)
        assert torch.isfinite(value) and value > 0, name
        # a token masked in both distributions changes nothing
        torch.testing.assert_close(value, exact_divergence(name, logits[:3], ref[:3]))
        grad = _grad(lambda t, n=name: exact_divergence(n, t, ref), logits)
        assert torch.isfinite(grad).all(), name


def test_alpha_limits_follow_dph_convention():
    """DPH-RL: α → 1 is forward KL (KL(π_ref‖π)), α → 0 is reverse KL (KL(π‖π_ref))."""
    logits, ref = _pair(2)
    fwd, rev = exact_divergence("forward_kl", logits, ref), exact_divergence("reverse_kl", logits, ref)
    assert abs(fwd - rev) > 0.005  # the two limits are distinguishable on this pair
    torch.testing.assert_close(exact_divergence("alpha", logits, ref, dph_alpha=1 - 1e-7), fwd, rtol=1e-5, atol=0)
    torch.testing.assert_close(exact_divergence("alpha", logits, ref, dph_alpha=1e-7), rev, rtol=1e-5, atol=0)
    # D_α(π‖π_ref) = D_{1−α}(π_ref‖π)
    torch.testing.assert_close(
        exact_divergence("alpha", logits, ref, dph_alpha=0.3), exact_divergence("alpha", ref, logits, dph_alpha=0.7)
    )


# --------------------------------------------------------------------------------------------------------------------
# Values: Monte Carlo mean over samples from the stated source equals the exact divergence


def _sample(logits: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(torch.softmax(logits, -1), n, replacement=True, generator=g)


@pytest.mark.parametrize("source", ["policy", "reference"])
@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_monte_carlo_mean_is_the_exact_divergence(name, params, source):
    logits, ref = _pair(3)
    logp, logq = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    y = _sample(logits if source == "policy" else ref, N, seed=4)
    est = token_divergence(name, logp[y], logq[y], source=source, **params)
    assert est.shape == (N,) and est.dtype == torch.float64
    assert (est >= -1e-12).all()  # non-negative for every sample
    mean, se = est.mean().item(), est.std().item() / math.sqrt(N)
    exact = exact_divergence(name, logits, ref, **params).item()
    assert abs(mean - exact) < Z_VALUE * se, (mean, exact, se)
    if source == "policy":  # the value does not change with the ratio weight on fresh samples
        torch.testing.assert_close(
            token_divergence(name, logp[y], logq[y], source=source, gradient="ratio", **params), est, rtol=0, atol=0
        )


def test_ratio_weight_corrects_for_stale_samples():
    """Samples from π_old ≠ π with old_logp: value and gradient are those of D_f(π‖π_ref)."""
    logits, ref = _pair(5)
    old = logits + 0.3 * _pair(6)[0]
    y = _sample(old, N, seed=7)
    logp, logq, log_old = (torch.log_softmax(x, -1) for x in (logits, ref, old))
    leaf = logp[y].clone().requires_grad_(True)
    est = token_divergence("js", leaf, logq[y], "policy", gradient="ratio", old_logp=log_old[y])
    (dl,) = torch.autograd.grad(est.sum(), leaf)
    per_sample = dl[:, None] * (torch.nn.functional.one_hot(y, V) - logp.exp())
    mean, se = est.mean().item(), est.std().item() / math.sqrt(N)
    assert abs(mean - exact_divergence("js", logits, ref).item()) < Z_VALUE * se
    _assert_gradient(per_sample, _grad(lambda t: exact_divergence("js", t, ref), logits))


# --------------------------------------------------------------------------------------------------------------------
# Gradients: the Monte Carlo mean of the estimator's autograd gradient (w.r.t. the policy logits)


def _per_sample_gradients(name, params, source, gradient, logits, ref, seed) -> torch.Tensor:
    """(N, V): gradient of each sample's estimate w.r.t. the policy logits θ — autograd through the estimator to the
    sampled log-prob l = log π(y), times ∂l/∂θ = onehot(y) − π."""
    y = _sample(logits if source == "policy" else ref, N, seed)
    logp = torch.log_softmax(logits, -1)
    leaf = logp[y].clone().requires_grad_(True)
    est = token_divergence(name, leaf, torch.log_softmax(ref, -1)[y], source=source, gradient=gradient, **params)
    (dl,) = torch.autograd.grad(est.sum(), leaf)
    return dl[:, None] * (torch.nn.functional.one_hot(y, V) - logp.exp())


def _z_scores(per_sample: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    se = per_sample.std(0) / math.sqrt(per_sample.size(0))
    return (per_sample.mean(0) - exact).abs() / se.clamp(min=1e-12)


def _assert_gradient(per_sample: torch.Tensor, exact: torch.Tensor) -> None:
    z = _z_scores(per_sample, exact)
    assert (z < Z_GRAD).all(), (per_sample.mean(0), exact, z)


@pytest.mark.parametrize(("source", "gradient"), [("reference", "plain"), ("policy", "ratio")])
@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_gradient_is_the_divergence_gradient(name, params, source, gradient):
    logits, ref = _pair(8)
    per_sample = _per_sample_gradients(name, params, source, gradient, logits, ref, seed=9)
    _assert_gradient(per_sample, _grad(lambda t: exact_divergence(name, t, ref, **params), logits))


@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_plain_gradient_on_policy_samples(name, params):
    """Un-weighted on policy samples: ∇E_ref[g(r)], g(u) = f(u) − ∫_1^u f(s)/s ds (not ∇D_f)."""
    logits, ref = _pair(10)
    per_sample = _per_sample_gradients(name, params, "policy", "plain", logits, ref, seed=11)
    _assert_gradient(per_sample, _grad(lambda t: _plain_policy_potential(name, t, ref, **params), logits))
    # ... and it is measurably not the divergence's own gradient
    z = _z_scores(per_sample, _grad(lambda t: exact_divergence(name, t, ref, **params), logits))
    assert z.max() > 10 * Z_GRAD


def test_k3_gradient_is_forward_kl_unweighted_and_reverse_kl_with_ratio():
    logits, ref = _pair(12)
    forward = _grad(lambda t: exact_divergence("forward_kl", t, ref), logits)
    reverse = _grad(lambda t: exact_divergence("reverse_kl", t, ref), logits)
    plain = _per_sample_gradients("reverse_kl", {}, "policy", "plain", logits, ref, seed=13)
    ratio = _per_sample_gradients("reverse_kl", {}, "policy", "ratio", logits, ref, seed=13)
    _assert_gradient(plain, forward)
    _assert_gradient(ratio, reverse)
    assert _z_scores(plain, reverse).max() > 10 * Z_GRAD and _z_scores(ratio, forward).max() > 10 * Z_GRAD


# --------------------------------------------------------------------------------------------------------------------
# TRL's k3, shapes, dtypes, clamping


def test_reverse_kl_on_policy_samples_is_trl_k3_exactly():
    g = torch.Generator().manual_seed(14)
    logp, ref = -3 * torch.rand(4, 16, generator=g), -3 * torch.rand(4, 16, generator=g)
    trl = torch.exp(ref - logp) - (ref - logp) - 1  # TRL 1.16 GRPOTrainer per_token_kl
    assert torch.equal(token_divergence("reverse_kl", logp, ref, source="policy"), trl)
    coef_1 = torch.exp(logp - logp.detach())  # use_bias_correction_kl on fresh samples
    assert torch.equal(token_divergence("reverse_kl", logp, ref, source="policy", gradient="ratio"), trl * coef_1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("source", ["policy", "reference"])
def test_shape_dtype_and_clamping(dtype, source):
    g = torch.Generator().manual_seed(15)
    logp = (-60 * torch.rand(2, 8, generator=g)).to(dtype).requires_grad_(True)
    ref = (-60 * torch.rand(2, 8, generator=g)).to(dtype)
    for name in DIVERGENCES.names():
        est = token_divergence(name, logp, ref, source=source)
        assert est.shape == (2, 8) and est.dtype == dtype, name
        assert torch.isfinite(est).all() and (est >= -1e-6).all(), name
        (grad,) = torch.autograd.grad(est.sum(), logp)
        assert torch.isfinite(grad).all(), name
    # log-ratios beyond ±20 are clamped: the value stops growing
    far = token_divergence("forward_kl", torch.tensor([-50.0, -80.0]), torch.tensor([0.0, 0.0]), source=source)
    assert far[0] == far[1]


# --------------------------------------------------------------------------------------------------------------------
# Generators


def test_generators_are_dph_rl_forms():
    u = torch.linspace(0.05, 6.0, 200, dtype=torch.float64)
    torch.testing.assert_close(get_divergence("forward_kl").f(u), u - u.log() - 1)
    torch.testing.assert_close(get_divergence("reverse_kl").f(u), u * u.log() - u + 1)
    torch.testing.assert_close(
        get_divergence("js").f(u, js_scale=2.0), u * u.log() - (u + 1) * ((u + 1) / 2).log()
    )  # DPH-RL's code
    a = 0.3
    torch.testing.assert_close(
        get_divergence("alpha").f(u, dph_alpha=a), (u ** (1 - a) - (1 - a) * u - a) / (a * (a - 1))
    )


@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_conjugate_and_derivative(name, params):
    div = get_divergence(name)
    t = torch.linspace(0.05, 8.0, 300, dtype=torch.float64)
    torch.testing.assert_close(div.conjugate(t, **params), t * div.f(1 / t, **params))
    u = t.clone().requires_grad_(True)
    (fprime,) = torch.autograd.grad(div.f(u, **params).sum(), u)
    torch.testing.assert_close(div.f_prime(t, **params), fprime)
    one = torch.ones(1, dtype=torch.float64)
    assert div.f(one, **params).abs().item() < 1e-14 and div.f_prime(one, **params).abs().item() < 1e-14
    values = div.f(t, **params)
    assert (values >= 0).all() and (values[:-2] - 2 * values[1:-1] + values[2:] >= -1e-12).all()  # ≥ 0, convex


# --------------------------------------------------------------------------------------------------------------------
# Validation


def test_registry_names():
    assert DIVERGENCES.names() == ["alpha", "chi2", "forward_kl", "js", "reverse_kl", "tv"]


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2, 1.5, float("nan"), float("inf"), "0.5", True])
def test_alpha_outside_its_domain(bad):
    with pytest.raises(ConfigError, match="dph_alpha"):
        check_divergence_params("alpha", dph_alpha=bad)
    with pytest.raises(ConfigError, match="dph_alpha"):
        token_divergence("alpha", torch.zeros(2), torch.zeros(2), source="policy", dph_alpha=bad)


def test_bad_input_raises_config_error():
    z = torch.zeros(3)
    assert check_divergence_params("alpha") == {"dph_alpha": 0.5}
    assert check_divergence_params("js", js_scale=2) == {"js_scale": 2.0}
    cases = [
        (lambda: check_divergence_params("kl"), "unknown divergence 'kl'"),
        (lambda: exact_divergence("nope", z, z), "unknown divergence 'nope'"),
        (lambda: check_divergence_params("js", dph_alpha=0.5), "unknown parameter 'dph_alpha'"),
        (lambda: check_divergence_params("reverse_kl", dpg_alpha=0.5), "unknown parameter 'dpg_alpha'"),
        (lambda: check_divergence_params("js", js_scale=0.0), "js_scale"),
        (lambda: token_divergence("js", z, z, source="both"), "source"),
        (lambda: token_divergence("js", z, z, source="policy", gradient="dice"), "gradient"),
        (lambda: token_divergence("js", z, z, source="reference", gradient="ratio"), "source='policy' only"),
        (lambda: token_divergence("js", z, z, source="policy", old_logp=z), "old_logp"),
        (lambda: token_divergence("js", torch.zeros(3, dtype=torch.long), z, source="policy"), "floating point"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigError, match=message):
            call()
