"""DivergenceGRPOTrainer: `reverse_kl` reproduces stock GRPO's loss; the other divergences train; bad settings fail
in one line before the model loads; group diversity metrics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from launchers import TWO_PROCESSES, processes_of
from train_checks import make_trainer, run_recipe, trainer_config  # shared helpers (tests/ is on sys.path)

from rlvr_div.cli import main as cli_main
from rlvr_div.trainers.common import group_diversity, replace_advantages

ROOT = Path(__file__).resolve().parents[1]


# TRL's loss types, and the TRL options that change the policy loss: GSPO (sequence-level importance sampling) and
# the 80/20 high-entropy-token rule (top_entropy_quantile)
SLOW = pytest.mark.slow
LOSS_SETTINGS = {
    "dapo": {},
    "grpo": {},
    "dr_grpo": {},
    "bnpo": {},
    "cispo": {},
    "sapo": {},
    "luspo": {"importance_sampling_level": "sequence"},
    "vespo": {},
    "gspo": {"loss_type": "dapo", "importance_sampling_level": "sequence"},
    "top_entropy_quantile": {"loss_type": "dapo", "top_entropy_quantile": 0.2},
}


@pytest.mark.parametrize(
    "setting", [s if s in ("dapo", "grpo", "dr_grpo") else pytest.param(s, marks=SLOW) for s in LOSS_SETTINGS]
)
def test_reverse_kl_reproduces_stock_grpo_loss(setting, tmp_path, tiny_path):
    """Our trainer with the KL as a plug-in gives stock TRL's loss and gradient under each loss type and option."""
    from trl import GRPOConfig, GRPOTrainer

    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    options = {"loss_type": setting, **LOSS_SETTINGS[setting]}
    torch.manual_seed(0)
    stock = make_trainer(GRPOTrainer, trainer_config(GRPOConfig, tmp_path / "a", beta=0.04, **options), tiny_path)
    ours = make_trainer(
        DivergenceGRPOTrainer,
        trainer_config(DivergenceGRPOConfig, tmp_path / "b", divergence="reverse_kl", divergence_coef=0.04, **options),
        tiny_path,
    )
    ours.model.load_state_dict(stock.model.state_dict())
    rows = [r for r in stock.train_dataset.select(range(2)) for _ in range(8)]
    for t in (stock, ours):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    inputs = stock._generate_and_score_completions(rows)
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
    # perturb the policy so that the ratio and the KL are not trivially 1 and 0
    with torch.no_grad():
        for p in list(stock.model.parameters())[:3]:
            p.add_(0.01 * torch.randn_like(p))
    ours.model.load_state_dict(stock.model.state_dict())
    a = stock._compute_loss(stock.model, inputs)
    b = ours._compute_loss(ours.model, inputs)
    assert abs(a.item() - b.item()) < 1e-6, (a.item(), b.item())
    ga = torch.autograd.grad(a, list(stock.model.parameters())[0])[0]
    gb = torch.autograd.grad(b, list(ours.model.parameters())[0])[0]
    assert torch.allclose(ga, gb, atol=1e-6)
    # The logged KL is a mean of k3 = exp(d) - d - 1, which cancels: the two trainers' log-probs, equal to float32
    # round-off (ours runs each distinct prompt once), give k3 means that agree to about 1e-6, not to the last bit.
    kl = ours._metrics["train"]["divergence/reverse_kl"][-1]
    assert kl == pytest.approx(stock._metrics["train"]["kl"][-1], rel=1e-5)


def test_group_diversity():
    valid = torch.tensor([1, 1, 0, 1, 0, 0, 0, 0], dtype=torch.bool)
    texts = ["a", "a", "b", "c", "d", "e", "f", "g"]
    d = group_diversity(valid, texts, group=4)
    assert d == {"pass_at_group": 0.5, "distinct_valid": 1.0, "valid_rate": 3 / 8}
    with pytest.raises(ValueError):
        group_diversity(valid, texts, group=3)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--divergence", "nope"], "unknown divergence 'nope'"),
        (["--divergence_coef", "-1"], "divergence_coef must be a finite number >= 0, got -1.0"),
        (["--divergence", "alpha", "--dph_alpha", "1.5"], "dph_alpha"),
        (["--divergence_gradient", "zz"], "divergence_gradient"),
        (["--beta", "0.1"], "beta=0.1 and divergence_coef=0.04 disagree"),
        (["--beta", "0"], "beta=0.0 and divergence_coef=0.04 disagree"),  # TRL's "no KL" is not silently 0.04
        (["--divergence", "none"], "divergence_coef=0.04 with divergence 'none'"),
        (["--use_bias_correction_kl", "false", "--divergence_gradient", "ratio"], "use_bias_correction_kl=False"),
    ],
)
def test_bad_divergence_settings_fail_in_one_line(extra, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("rlvr_div.models.tiny_base.tiny_model_path", lambda *a, **k: pytest.fail("model loaded"))
    rc = cli_main(
        ["train", "--config", str(ROOT / "recipes/tiny/forward_kl.yaml"), "--output_dir", str(tmp_path)] + extra
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err


RECIPE_RUNS = [
    pytest.param(
        recipe, lora, marks=[] if (recipe, lora) in {("forward_kl", False), ("js", True)} else pytest.mark.slow
    )
    for recipe in ["grpo_reverse_kl", "forward_kl", "js", "alpha"]
    for lora in [False, True]
]


@pytest.mark.parametrize("recipe, lora", RECIPE_RUNS)
def test_tiny_divergence_recipes_train(recipe, lora, tmp_path, tiny_path):
    logs = run_recipe(recipe, lora, tmp_path / recipe, steps=2, batch=32)
    name = yaml.safe_load((ROOT / f"recipes/tiny/{recipe}.yaml").read_text()).get("divergence", "none")
    assert len(logs) == 2
    assert all(f"divergence/{name}" in x and "diversity/pass_at_group" in x for x in logs)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["grpo_reverse_kl", "forward_kl", "js", "alpha"])
@pytest.mark.parametrize("lora", [False, True])
def test_tiny_divergence_recipes_train_50_steps(recipe, lora, tmp_path, tiny_path):
    """Each recipe as shipped (its own batch: 24 of the 30 pairsum prompts per step) trains its 50 steps."""
    logs = run_recipe(recipe, lora, tmp_path / recipe, steps=50, batch=None)
    assert len(logs) == 50


@pytest.mark.parametrize(
    "recipe",
    ["pkpo", pytest.param("mara", marks=pytest.mark.slow), pytest.param("unlikeliness", marks=pytest.mark.slow)],
)
def test_reward_shaping_recipes_train(recipe, tmp_path, tiny_path):
    assert len(run_recipe(recipe, False, tmp_path / recipe, steps=2, batch=32)) == 2


def test_mara_without_kl_fails_in_one_line(capsys, tmp_path):
    rc = cli_main(["train", "--config", str(ROOT / "recipes/tiny/mara.yaml"), "--divergence", "none",
                   "--divergence_coef", "0", "--output_dir", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "inert at β = 0" in err[0]


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_two_process_run_logs_group_metrics(tmp_path, tiny_path):
    out = tmp_path / "ddp"
    cmd = TWO_PROCESSES + ["-m", "rlvr_div.train", "--config", str(ROOT / "recipes/tiny/forward_kl.yaml"),
                           "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "16",
                           "--save_strategy", "no", "--disable_tqdm", "true"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert processes_of(out) == 2
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert [x["step"] for x in logs] == [1, 2]
    for x in logs:
        assert 0.0 <= x["diversity/pass_at_group"] <= 1.0 and x["diversity/distinct_valid"] >= 0
        assert "divergence/forward_kl" in x


def _paired_trainers(tmp_path, tiny_path, stock_kw, ours_kw):
    """Stock GRPO and the divergence trainer on the same weights, in training mode, one accumulation step."""
    from trl import GRPOConfig, GRPOTrainer

    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    stock = make_trainer(GRPOTrainer, trainer_config(GRPOConfig, tmp_path / "a", **stock_kw), tiny_path)
    ours = make_trainer(
        DivergenceGRPOTrainer, trainer_config(DivergenceGRPOConfig, tmp_path / "b", **ours_kw), tiny_path
    )
    ours.model.load_state_dict(stock.model.state_dict())
    for t in (stock, ours):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    return stock, ours


def test_logged_divergence_is_the_ratio_weighted_value_off_policy(tmp_path, tiny_path):
    """Off-policy (π_θ ≠ π_old, as with num_iterations = 2), `divergence/<name>` is the ratio-weighted estimate that
    enters the loss, like TRL's `kl`; the plain estimate is logged as `divergence/<name>_unweighted`."""
    stock, ours = _paired_trainers(
        tmp_path, tiny_path, {"beta": 0.04, "loss_type": "grpo"},
        {"divergence": "reverse_kl", "divergence_coef": 0.04, "loss_type": "grpo"},
    )  # fmt: skip
    rows = [r for r in stock.train_dataset.select(range(2)) for _ in range(8)]
    inputs = stock._generate_and_score_completions(rows)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].size(1)
    with torch.no_grad():
        inputs["old_per_token_logps"] = stock._get_per_token_logps_and_entropies(stock.model, ids, attention, width)[0]
        for p in list(stock.model.parameters())[:3]:
            p.add_(0.1 * torch.randn_like(p))  # the policy moved since sampling: ratios away from 1
    ours.model.load_state_dict(stock.model.state_dict())
    a = stock._compute_loss(stock.model, inputs)
    b = ours._compute_loss(ours.model, inputs)
    assert abs(a.item() - b.item()) < 1e-6, (a.item(), b.item())
    weighted = ours._metrics["train"]["divergence/reverse_kl"][-1]
    unweighted = ours._metrics["train"]["divergence/reverse_kl_unweighted"][-1]
    assert weighted == pytest.approx(stock._metrics["train"]["kl"][-1], rel=1e-5)  # k3 cancels: see above
    with torch.no_grad():
        logps = ours._get_per_token_logps_and_entropies(ours.model, ids, attention, width)[0]
    d = inputs["ref_per_token_logps"] - logps
    k3, mask = torch.exp(d) - d - 1, inputs["completion_mask"]
    assert unweighted == pytest.approx(((k3 * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert abs(weighted - unweighted) > 1e-3 * abs(unweighted)  # the two names hold different numbers here


def test_zero_divergence_coef_means_no_term_and_no_reference_model(tmp_path, tiny_path):
    """`divergence_coef: 0` with a divergence set is `divergence: none`: no reference model, stock GRPO's loss."""
    stock, ours = _paired_trainers(
        tmp_path, tiny_path, {"beta": 0.0}, {"divergence": "forward_kl", "divergence_coef": 0.0}
    )
    assert ours.ref_model is None and ours.beta == 0.0
    rows = [r for r in stock.train_dataset.select(range(2)) for _ in range(8)]
    inputs = ours._generate_and_score_completions(rows)
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
    assert "ref_per_token_logps" not in inputs
    a, b = stock._compute_loss(stock.model, inputs), ours._compute_loss(ours.model, inputs)
    assert a.item() == pytest.approx(b.item(), abs=1e-7)
    assert not any(k.startswith("divergence/") for k in ours._metrics["train"])


def test_use_bias_correction_kl_false_maps_to_the_plain_gradient(tmp_path):
    from rlvr_div.errors import ConfigError
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig

    def config(**kw):
        return trainer_config(DivergenceGRPOConfig, tmp_path, divergence="reverse_kl", divergence_coef=0.04, **kw)

    assert config().divergence_gradient == "ratio"
    assert config(use_bias_correction_kl=False).divergence_gradient == "plain"
    plain = config(divergence_gradient="plain")
    assert plain.divergence_gradient == "plain" and plain.use_bias_correction_kl is False
    with pytest.raises(ConfigError, match="use_bias_correction_kl"):
        config(use_bias_correction_kl=False, divergence_gradient="ratio")


def test_beta_is_a_synonym_of_divergence_coef(tmp_path):
    """A TRL user's explicit `beta` is the divergence coefficient; a `beta` that disagrees with `divergence_coef`
    is an error (TRL's default beta is not "explicit")."""
    from rlvr_div.errors import ConfigError
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig

    def config(**kw):
        return trainer_config(DivergenceGRPOConfig, tmp_path, **kw)

    given_beta = config(divergence="reverse_kl", beta=0.07)
    assert given_beta.divergence_coef == 0.07 and given_beta.beta == 0.07
    assert config(divergence="reverse_kl", divergence_coef=0.05).beta == 0.05
    assert config(divergence="reverse_kl", beta=0.05, divergence_coef=0.05).divergence_coef == 0.05
    for kw in ({"beta": 0.0, "divergence_coef": 0.05}, {"beta": 0.1, "divergence_coef": 0.05}):
        with pytest.raises(ConfigError, match="beta"):
            config(divergence="reverse_kl", **kw)
    with pytest.raises(ConfigError, match="beta"):
        config(divergence="none", beta=0.04)
    assert config(divergence="none", beta=0.0).beta == 0.0
    # a resolved recipe (every key written out) reads back
    resolved = config(divergence="js", beta=0.2).to_dict()
    again = config(**{k: resolved[k] for k in ("divergence", "beta", "divergence_coef", "divergence_gradient")})
    assert again.divergence_coef == 0.2


def _scores_with_gaps(completions, **kwargs):
    """pair_sum's scores, None (unscorable) for every 8th completion from the 4th."""
    from rlvr_div.rewards import get_reward

    scores = get_reward("pair_sum")(completions=completions, **kwargs)
    return [None if i % 8 == 3 else s for i, s in enumerate(scores)]


def _length_with_gaps(completions, **kwargs):
    """A graded second reward (completion length mod 3, halved), None where the first is None and at i % 8 == 5."""
    from rlvr_div.rewards.base import completion_text

    return [None if i % 8 in (3, 5) else (len(completion_text(c)) % 3) / 2 for i, c in enumerate(completions)]


@pytest.mark.parametrize(
    "aggregation, scale", [("sum_then_normalize", "group"), ("sum_then_normalize", "batch"),
                           ("sum_then_normalize", "none"), ("normalize_then_sum", "group")],
)  # fmt: skip
def test_shaped_advantages_aggregate_and_mask_as_trl(aggregation, scale, tmp_path, tiny_path):
    """Reward shaping recomputes TRL's advantages from the shaped rewards: with an identity shaping (unlikeliness
    at λ = 0) they must equal TRL's own for every `multi_objective_aggregation` and `scale_rewards`, including
    completions no reward can score (NaN: left out of the group statistics, advantage 0)."""
    from trl import GRPOTrainer

    from rlvr_div.models import load_tokenizer
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = trainer_config(
        DivergenceGRPOConfig, tmp_path, reward_shaping="unlikeliness", unlikeliness_lambda=0.0,
        multi_objective_aggregation=aggregation, scale_rewards=scale, reward_weights=[1.0, 0.5],
    )  # fmt: skip
    trainer = DivergenceGRPOTrainer(
        model=tiny_path, reward_funcs=[_scores_with_gaps, _length_with_gaps], args=args,
        train_dataset=get_task("pairsum", size=16), processing_class=load_tokenizer(tiny_path),
    )  # fmt: skip
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    torch.manual_seed(0)
    out = GRPOTrainer._generate_and_score_completions(trainer, rows)  # TRL's advantages, unshaped
    assert torch.isnan(trainer.gathered_rewards).all(dim=1).sum() == 2
    shaped = replace_advantages(trainer, trainer.plugin("unlikeliness").advantages(out), out)
    assert torch.allclose(shaped, out["advantages"], atol=1e-6), (shaped, out["advantages"])
    assert (shaped[3::8] == 0).all()
