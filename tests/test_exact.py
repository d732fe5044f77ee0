"""Exact validity, p* and KL (rlvr_div.exact) against brute force: unbatched prefix-by-prefix probabilities,
enumeration of pairs of draws, and sampling from the model itself."""

import itertools
import math

import numpy as np
import pytest
import torch

from rlvr_div.exact import ExactPrompt, exact_prompts, expected_lost_gained, prompt_metrics, sequence_logprobs
from rlvr_div.tasks.synthetic import pairsum_valid


def _unbatched_logprob(model, tok, prompt: str, completion: str) -> float:
    """log π(completion ⊕ EOS | prompt): one unpadded forward per prefix, softmax of the last position."""
    ids = list(tok(prompt)["input_ids"])
    total = 0.0
    for t in list(tok(completion, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        total += float(logits.log_softmax(-1)[t])
        ids.append(t)
    return total


@pytest.fixture(scope="module")
def models(tiny_path):
    from transformers import AutoModelForCausalLM

    from rlvr_div.models import load_tokenizer

    tok = load_tokenizer(tiny_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    policy = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a policy that differs from the base
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return tok, base, policy


def test_teacher_forcing_equals_unbatched_prefix_probabilities(models):
    tok, base, policy = models
    prompts = ["sum 3:", "sum 12:", "sum 7:"]  # different prompt lengths: left padding and position ids matter
    valid = [pairsum_valid({"target": int(p[4:-1])}) for p in prompts]
    batched = sequence_logprobs(policy, tok, prompts, valid, batch_size=7)
    for p, ys, lps in zip(prompts, valid, batched):
        for y, lp in zip(ys, lps):
            assert lp == pytest.approx(_unbatched_logprob(policy, tok, p, y), abs=2e-5)


def test_metrics_against_brute_force_enumeration():
    rng = np.random.default_rng(0)
    valid = tuple(f"{a}+{5 - a}" for a in range(6))
    probs = rng.dirichlet(np.ones(6)) * 0.7  # the policy's mass on the valid answers (μ = 0.7)
    base = rng.dirichlet(np.ones(6)) * 0.4
    ex = ExactPrompt("sum 5:", valid, np.log(probs), np.log(base))
    m = prompt_metrics(ex, [1, 2, 3])
    pstar, pv = base / base.sum(), probs / probs.sum()
    assert m["mu"] == pytest.approx(0.7) and m["base_mu"] == pytest.approx(0.4)
    assert m["kl_pstar"] == pytest.approx(sum(pstar[i] * math.log(pstar[i] / pv[i]) for i in range(6)))
    assert m["kl_uniform"] == pytest.approx(sum(math.log((1 / 6) / pv[i]) / 6 for i in range(6)))
    assert m["entropy_valid"] == pytest.approx(-sum(x * math.log(x) for x in pv))
    # draws: each of the 6 valid answers, or "invalid" (mass 0.3); enumerate every ordered k-tuple of draws
    outcomes = list(range(6)) + [None]
    mass = list(probs) + [0.3]
    for k in (1, 2, 3):
        distinct = cover = solved = 0.0
        for draw in itertools.product(range(7), repeat=k):
            w = math.prod(mass[i] for i in draw)
            seen = {outcomes[i] for i in draw} - {None}
            distinct += w * len(seen)
            cover += w * sum(pstar[i] for i in seen)
            solved += w * bool(seen)
        assert m["distinct_at"][str(k)] == pytest.approx(distinct)
        assert m["cov_at"][str(k)] == pytest.approx(cover)
        assert m["pass_at"][str(k)] == pytest.approx(solved)
    order = np.argsort(-pv)
    n90 = next(i + 1 for i in range(6) if pv[order[: i + 1]].sum() >= 0.9)
    assert m["n90"] == n90 and m["cov90"] == pytest.approx(pstar[order[:n90]].sum())
    assert m["top_answer"] == valid[order[0]]


def test_lost_and_gained_against_enumerated_draws():
    base_mu, mu, k = [0.5, 0.1, 0.9], [0.2, 0.6, 0.9], 2
    lost = gained = 0.0
    for b, m in zip(base_mu, mu):  # enumerate whether each model solves the problem in k draws
        for b_solves, m_solves in itertools.product([True, False], repeat=2):
            pb = 1 - (1 - b) ** k if b_solves else (1 - b) ** k
            pm = 1 - (1 - m) ** k if m_solves else (1 - m) ** k
            lost += pb * pm * (b_solves and not m_solves)
            gained += pb * pm * (m_solves and not b_solves)
    assert expected_lost_gained(base_mu, mu, k) == pytest.approx((lost, gained))


def test_exact_validity_matches_sampling_from_the_model(models):
    """The fraction of sampled completions that the reward accepts agrees with exact μ within 4 standard errors.

    The prompt is chosen by measuring, not fixed: the one whose exact μ under the perturbed policy is nearest 0.5
    (any reasonable base has one between 0.05 and 0.95), so the test does not rest on one build's weights."""
    from rlvr_div.rewards import get_reward

    tok, base, policy = models
    prompts = [f"sum {t}:" for t in range(2, 31)]
    exact = exact_prompts(policy, base, tok, prompts, [pairsum_valid({"target": int(p[4:-1])}) for p in prompts])
    mus = [prompt_metrics(ex, [1])["mu"] for ex in exact]
    i = int(np.argmin([abs(m - 0.5) for m in mus]))
    prompt, target, mu, n = prompts[i], int(prompts[i][4:-1]), mus[i], 3000
    assert 0.05 < mu < 0.95, f"no prompt with 0.05 < μ < 0.95: {dict(zip(prompts, mus))}"
    torch.manual_seed(0)
    ids = tok([prompt] * n, return_tensors="pt")
    with torch.no_grad():
        out = policy.generate(**ids, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=8)
    texts = tok.batch_decode(out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    rate = float(np.mean(get_reward("pair_sum").score(texts, target=[target] * n)))
    se = math.sqrt(mu * (1 - mu) / n)
    assert abs(rate - mu) < 4 * se, (prompt, rate, mu, se)
