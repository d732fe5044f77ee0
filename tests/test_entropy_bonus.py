"""TRL's entropy bonus (``entropy_coef``) and its adaptive control (``use_adaptive_entropy``) with every trainer:
the loss drops by c·(mean token entropy), computed here from the model's own entropies; the adaptive coefficient
moves by ±delta per step and travels with checkpoints; bad settings fail in one line before the model loads; the
tiny recipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from train_checks import assert_reward_rises, assert_train_refuses, make_trainer, run_recipe, trainer_config

from rlvr_div.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def _classes(name: str):
    from trl import GRPOConfig, GRPOTrainer

    from rlvr_div.trainers.distributional import DPGConfig, DPGTrainer
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    return {
        "grpo": (GRPOConfig, GRPOTrainer, {}),
        "divergence": (
            DivergenceGRPOConfig,
            DivergenceGRPOTrainer,
            {"divergence": "forward_kl", "divergence_coef": 0.05},
        ),
        "dpg": (DPGConfig, DPGTrainer, {}),
    }[name]


@pytest.mark.parametrize("trainer_name", ["grpo", "divergence", "dpg"])
def test_loss_drops_by_coef_times_mean_token_entropy(trainer_name, tmp_path, tiny_path):
    config_cls, trainer_cls, kw = _classes(trainer_name)
    torch.manual_seed(0)
    losses, inputs = {}, None
    for coef in (0.0, 0.3):  # two trainers from the same weights, one batch
        trainer = make_trainer(
            trainer_cls, trainer_config(config_cls, tmp_path / str(coef), entropy_coef=coef, **kw), tiny_path
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop
        if inputs is None:
            rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
            inputs = trainer._generate_and_score_completions(rows)
        losses[coef] = trainer._compute_loss(trainer.model, inputs)
    mask = inputs["completion_mask"].float()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    _, entropies, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attention, mask.size(1), compute_entropy=True
    )
    mean_entropy = (entropies * mask).sum() / mask.sum()
    assert mean_entropy > 0.1
    assert losses[0.3].item() == pytest.approx(losses[0.0].item() - 0.3 * mean_entropy.item(), abs=1e-5)


def test_dpg_bonus_pushes_entropy_up(tmp_path, tiny_path):
    """The bonus's gradient acts: one SGD step on −H̄ through DPGTrainer's loss raises the batch's mean entropy."""
    config_cls, trainer_cls, _ = _classes("dpg")
    torch.manual_seed(0)
    trainer = make_trainer(trainer_cls, trainer_config(config_cls, tmp_path, entropy_coef=1.0), tiny_path)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    inputs = trainer._generate_and_score_completions(rows)
    inputs["advantages"] = torch.zeros_like(inputs["advantages"])  # only the bonus moves the weights
    mask = inputs["completion_mask"].float()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)

    def mean_entropy() -> float:
        with torch.no_grad():
            _, ent, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, mask.size(1), compute_entropy=True
            )
        return ((ent * mask).sum() / mask.sum()).item()

    before = mean_entropy()
    trainer._compute_loss(trainer.model, inputs).backward()
    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.grad is not None:
                p -= 1e-2 * p.grad
    assert mean_entropy() > before + 1e-4


def _train(recipe: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(recipe), "--output_dir", str(out),
           "--per_device_train_batch_size", "32", "--disable_tqdm", "true", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("trainer_name", ["divergence", "dpg"])
def test_adaptive_coefficient_steps_by_delta_and_is_checkpointed(trainer_name, tmp_path, tiny_path):
    # target 5 nats is above any entropy here, so the coefficient rises by delta after every optimizer step
    recipe = ROOT / "recipes" / "tiny" / "adaptive_entropy.yaml"
    if trainer_name == "dpg":  # the same recipe on the DPG trainer (which refuses a divergence)
        data = yaml.safe_load(recipe.read_text())
        del data["divergence"]
        recipe = tmp_path / "adaptive_entropy_dpg.yaml"
        recipe.write_text(yaml.safe_dump({**data, "trainer": "dpg"}))
    out = tmp_path / trainer_name
    res = _train(recipe, out, "--entropy_target", "5.0", "--entropy_coef", "0.01", "--entropy_coef_delta", "0.02",
                 "--max_steps", "3", "--save_steps", "3")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"entropy_coef"' in x]
    assert [round(x["entropy_coef"], 6) for x in logs] == [0.03, 0.05, 0.07]
    state = json.loads((out / "checkpoint-3" / "entropy_ctrl_state.json").read_text())
    assert state["entropy_coef"] == pytest.approx(0.07) and 0 < state["last_world_entropy"] < 5.0


@pytest.mark.parametrize(
    "recipe, extra, message",
    [
        ("entropy_bonus", ["--entropy_coef", "-0.1"], "entropy_coef must be a finite number >= 0"),
        ("entropy_bonus", ["--entropy_target", "0.5"], "entropy_target=0.5 acts only with use_adaptive_entropy"),
        ("adaptive_entropy", ["--entropy_coef_min", "0.2"], "need 0 <= entropy_coef_min <= entropy_coef_max"),
        ("adaptive_entropy", ["--entropy_coef", "0.5"], "entropy_coef=0.5 (the initial coefficient) is outside"),
        ("adaptive_entropy", ["--entropy_coef_delta", "0"], "entropy_coef_delta must be > 0"),
        ("adaptive_entropy", ["--entropy_target", "0"], "entropy_target must be > 0 nats"),
        ("adaptive_entropy", ["--entropy_coef_max", "0"], "the adaptive entropy bonus could never act"),
        ("grpo", ["--entropy_coef", "-1"], "entropy_coef must be a finite number >= 0"),
        ("grpo", ["--entropy_coef_max", "0.5"], "entropy_coef_max=0.5 acts only with use_adaptive_entropy"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(recipe, extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(ROOT / "recipes" / "tiny" / f"{recipe}.yaml", extra, message, capsys, tmp_path)


def test_dpg_refuses_top_entropy_quantile(capsys, no_model_loads, tmp_path):
    path = str(ROOT / "recipes" / "tiny" / "alpha_dpg.yaml")
    rc = cli_main(["train", "--config", path, "--output_dir", str(tmp_path), "--top_entropy_quantile", "0.2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "top_entropy_quantile=0.2 does not act with trainer 'dpg'" in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["entropy_bonus", "adaptive_entropy"])
def test_tiny_recipes_train_50_steps_with_the_reward_rising(recipe, tmp_path, tiny_path):
    logs = run_recipe(recipe, False, tmp_path / recipe, steps=50, batch=96)
    assert all("entropy_coef" in x for x in logs)
    assert_reward_rises(logs, 50, 0.05)
