"""The sampling-free arm's objective (rlvr_div.exact.objective): its value against the exact measurements of
rlvr_div.exact, its gradient against finite differences, and ascent that climbs toward the closed-form maximum."""

import math

import numpy as np
import pytest
import torch

from rlvr_div.exact import ExactPrompt, prompt_metrics, sequence_logprobs
from rlvr_div.exact.objective import (
    ascend,
    closed_form_objective,
    exact_objective,
    kl_to_tilted,
    valid_set_batch,
    valid_set_logprobs,
)
from rlvr_div.tasks.synthetic import pairsum_valid
from rlvr_div.theory.calibration import bernoulli_kl

PROMPTS = ["sum 3:", "sum 6:", "sum 2:"]


@pytest.fixture(scope="module")
def setup(tiny_path):
    from transformers import AutoModelForCausalLM

    from rlvr_div.models import load_tokenizer

    tok = load_tokenizer(tiny_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    valid = [pairsum_valid({"target": int(p[4:-1])}) for p in PROMPTS]
    base_logps = [lp.tolist() for lp in sequence_logprobs(base, tok, PROMPTS, valid)]
    return tok, valid, base_logps


def _policy(tiny_path, scale=0.05, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_path).to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g).to(dtype))
    return policy


def test_rows_score_as_the_exact_measurement_does(setup, tiny_path):
    tok, valid, base_logps = setup
    policy = _policy(tiny_path).eval()
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    with torch.no_grad():
        logp = valid_set_logprobs(policy, batch).numpy()
    expected = np.concatenate(sequence_logprobs(policy, tok, PROMPTS, valid))
    np.testing.assert_allclose(logp, expected, atol=2e-5)


@pytest.mark.parametrize("beta", [0.0, 0.1, 1.0])
def test_objective_is_validity_minus_beta_times_the_lumped_kl(setup, tiny_path, beta):
    """J_x = μ − β·(KL(Bern μ‖Bern A) + μ·KL(π_v‖p*)), from rlvr_div.exact's per-prompt numbers."""
    tok, valid, base_logps = setup
    policy = _policy(tiny_path).eval()
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    with torch.no_grad():
        logp = valid_set_logprobs(policy, batch)
    got = float(exact_objective(logp, batch, beta))
    by_prompt, cursor = [], 0
    for prompt, ys, blp in zip(PROMPTS, valid, base_logps):
        lp = logp[cursor : cursor + len(ys)].numpy()
        cursor += len(ys)
        m = prompt_metrics(ExactPrompt(prompt, tuple(ys), lp, np.asarray(blp)), [1])
        # KL(π_v‖p*) = Σ π_v log(π_v/p*), the reverse of the kl_pstar column
        pv = np.exp(lp) / m["mu"]
        pstar = np.exp(blp) / m["base_mu"]
        kl_v = float(np.sum(pv * np.log(pv / pstar)))
        by_prompt.append(m["mu"] - beta * (bernoulli_kl(m["mu"], m["base_mu"]) + m["mu"] * kl_v))
    assert got == pytest.approx(float(np.mean(by_prompt)), rel=1e-9, abs=1e-12)


def _rms_norms_in_float64(model) -> int:
    """Make the model's RMSNorms compute in the model's dtype: Llama's upcasts to float32 whatever the dtype, which
    leaves a float64 model's J float32 round-off (~1e-8) that finite differences divide by the step. Returns how many
    it changed."""
    import types

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    for m in norms:
        m.forward = types.MethodType(forward, m)
    return len(norms)


FD_STEPS = [1e-2 / 4**k for k in range(10)]  # along a unit direction: 1e-2 down to 4e-8
FD_RTOL = 1e-6  # float64 throughout: far above its round-off, far below any gradient error worth the name


@pytest.mark.parametrize("beta", [0.0, 0.3])
def test_gradient_matches_finite_differences(setup, tiny_path, beta):
    """∇J·d against central differences D(h) = (J(θ + hd) − J(θ − hd)) / 2h, everything in float64 (RMSNorm too).
    d is a unit vector: |r_i|·sign(∂J/∂θ_i) for a fixed N(0,1) draw r, normalised, so ∇J·d = Σ|∂J/∂θ_i||r_i| / |r| is
    positive by construction (not 0 = 0) and a gradient wrong in sign, scale or any part shows along it. The step is
    the function's, not a constant: the largest of FD_STEPS whose D agrees with D at a quarter of it to FD_RTOL (J is
    sharply curved at some bases: a fixed step was too coarse for one built on another CPU); the analytic slope must
    match their Richardson extrapolation (16·D(h/4) − D(h)) / 15 to FD_RTOL."""
    tok, valid, base_logps = setup
    policy = _policy(tiny_path, dtype=torch.float64).eval()
    assert _rms_norms_in_float64(policy) > 0, "premise: the tiny base has RMSNorms to run in float64"
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    params = [p for p in policy.parameters() if p.requires_grad]
    objective = exact_objective(valid_set_logprobs(policy, batch), batch, beta)
    grads = torch.autograd.grad(objective, params)
    g = torch.Generator().manual_seed(1)
    draw = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in params]
    direction = [r.abs() * torch.where(gr >= 0, 1.0, -1.0) for r, gr in zip(draw, grads)]
    norm = math.sqrt(sum(float((d * d).sum()) for d in direction))
    direction = [d / norm for d in direction]
    analytic = sum(float((gr * d).sum()) for gr, d in zip(grads, direction))
    assert analytic > 1e-6, f"premise: J climbs along d (∇J·d = {analytic:.3g}), so the comparison is not 0 = 0"

    def shifted(step: float) -> float:
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(step * d)
            value = float(exact_objective(valid_set_logprobs(policy, batch), batch, beta))
            for p, d in zip(params, direction):
                p.sub_(step * d)
        return value

    def central(h: float) -> float:
        return (shifted(h) - shifted(-h)) / (2 * h)

    seen = [(FD_STEPS[0], central(FD_STEPS[0]))]
    for h in FD_STEPS[1:]:
        seen.append((h, central(h)))
        (_, coarse), (_, fine) = seen[-2:]
        if abs(coarse - fine) <= FD_RTOL * abs(fine):
            break
    else:
        pytest.fail(f"J is not smooth at any step of FD_STEPS along d: central differences {seen} never agree to "
                    f"{FD_RTOL:g} at two neighbouring steps, so no finite difference measures its slope")  # fmt: skip
    numeric = (16 * fine - coarse) / 15
    assert analytic == pytest.approx(numeric, rel=FD_RTOL), (analytic, seen)


def test_ascent_climbs_and_stays_below_the_closed_form_maximum(setup, tiny_path):
    tok, valid, base_logps = setup
    policy = _policy(tiny_path, scale=0.0)
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    beta = 0.3
    values: list[tuple[int, float]] = []

    def on_point(step, logp, grad_norm):
        assert grad_norm > 0
        values.append((step, float(exact_objective(logp, batch, beta))))
        return False

    with torch.no_grad():
        start = float(exact_objective(valid_set_logprobs(policy, batch), batch, beta))
    step = ascend(policy, batch, beta, learning_rate=1e-4, max_steps=30, every=10, on_point=on_point)
    assert step == 30 and [s for s, _ in values] == [10, 20, 30]
    assert values[-1][1] > start
    base_rates = [math.fsum(math.exp(x) for x in blp) for blp in base_logps]
    assert values[-1][1] < closed_form_objective(base_rates, beta)


def test_ascent_stops_when_asked(setup, tiny_path):
    tok, valid, base_logps = setup
    policy = _policy(tiny_path, scale=0.0)
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    step = ascend(policy, batch, 0.1, 1e-3, max_steps=50, every=5, on_point=lambda s, lp, g: s >= 10)
    assert step == 10


def test_closed_form_is_the_log_partition():
    a, beta = 0.3, 0.5
    assert closed_form_objective([a], beta) == pytest.approx(beta * math.log(1 - a + a * math.exp(1 / beta)))
    # stable where e^{1/β} overflows a float: 1 + β·log(A + (1 − A)·e^{−1/β}) → 1 + β·log A
    assert closed_form_objective([a], 1e-3) == pytest.approx(1.0 + 1e-3 * math.log(a), rel=1e-12)


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_the_gap_to_the_maximum_is_beta_times_the_kl_to_the_tilted_model(setup, tiny_path, beta):
    """J* − J = β·KL(π̄‖p̄_β), and KL(π̄‖p̄_β) from its definition on V ∪ {⊥} with p_β ∝ a·e^{v/β}."""
    tok, valid, base_logps = setup
    policy = _policy(tiny_path).eval()
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    with torch.no_grad():
        logp = valid_set_logprobs(policy, batch)
    kl = float(kl_to_tilted(logp, batch, beta))
    base_rates = [math.fsum(math.exp(x) for x in blp) for blp in base_logps]
    gap = closed_form_objective(base_rates, beta) - float(exact_objective(logp, batch, beta))
    assert gap == pytest.approx(beta * kl, rel=1e-9)
    by_prompt, cursor = [], 0
    for ys, blp, big_a in zip(valid, base_logps, base_rates):
        pi = np.exp(logp[cursor : cursor + len(ys)].numpy())
        cursor += len(ys)
        z = 1 - big_a + big_a * math.exp(1 / beta)
        p_beta = np.exp(np.asarray(blp)) * math.exp(1 / beta) / z
        rest = 1 - pi.sum()
        by_prompt.append(float(np.sum(pi * np.log(pi / p_beta))) + rest * math.log(rest / ((1 - big_a) / z)))
    assert kl == pytest.approx(float(np.mean(by_prompt)), rel=1e-9)
    assert kl > 0


def test_ascent_decays_the_learning_rate_on_a_cosine(setup, tiny_path, monkeypatch):
    tok, valid, base_logps = setup
    policy = _policy(tiny_path, scale=0.0)
    batch = valid_set_batch(tok, PROMPTS, valid, base_logps)
    seen: list[float] = []
    original = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    ascend(policy, batch, 0.3, 1e-3, max_steps=4, every=4, on_point=lambda s, lp, g: False, final_learning_rate=1e-5)
    expected = [1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi * t / 4)) for t in range(4)]
    assert seen == pytest.approx(expected, rel=1e-12)


def test_rows_are_scored_on_the_models_device(monkeypatch):
    """The batch is built on the CPU; valid_set_logprobs moves it to the model's device (the meta device stands in
    for a GPU: a CPU tensor met by a meta one fails, as it would beside a CUDA one)."""
    import rlvr_div.logprobs
    from rlvr_div.exact.objective import ValidSetBatch

    def on_device(model, input_ids, attention_mask, columns, temperature=1.0):
        device = next(model.parameters()).device
        assert {t.device for t in (input_ids, attention_mask, columns)} == {device}
        return torch.zeros(columns.shape, device=device)

    monkeypatch.setattr(rlvr_div.logprobs, "completion_logprobs", on_device)
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 5, 6]])
    batch = ValidSetBatch(
        ids, torch.ones_like(ids), torch.tensor([[1, 2], [1, 2]]), torch.ones(2, 2), torch.tensor([0, 0]),
        torch.zeros(2, dtype=torch.float64), 1,
    )  # fmt: skip
    logp = valid_set_logprobs(torch.nn.Linear(2, 2).to("meta"), batch)
    assert logp.device.type == "meta" and logp.shape == (2,) and logp.dtype == torch.float64
