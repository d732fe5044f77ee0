"""bench/gpu_check.py, the GPU readiness check, prepared on CPU: its --smoke form (2 layers, hidden 64) builds every
default trainer, times each side by side with stock GRPO and measures sampling; the full shape is Qwen2.5-0.5B's;
trainer specs parse as recipe keys; the carried packages' requirements are checked. The GPU numbers come from a lent
machine (docs/benchmarks.md); nothing here reaches the network."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def gpu_check():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", BENCH / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_the_full_shape_is_qwen25_05b(gpu_check):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    with torch.device("meta"):  # no memory: only the parameter count
        model = AutoModelForCausalLM.from_config(Qwen2Config(**gpu_check.QWEN25_05B))
    assert sum(p.numel() for p in model.parameters()) == 494_032_768  # Qwen2.5-0.5B's 494M (tied embedding)
    shape = gpu_check.QWEN25_05B
    assert (shape["hidden_size"], shape["num_hidden_layers"], shape["num_attention_heads"]) == (896, 24, 14)
    assert (shape["num_key_value_heads"], shape["intermediate_size"], shape["vocab_size"]) == (2, 4864, 151936)


def test_trainer_specs_and_defaults(gpu_check):
    from rlvr_div.divergences import DIVERGENCES

    assert gpu_check.parse_spec("divergence:divergence=js,divergence_coef=0.04,bf16=true") == (
        "divergence",
        {"divergence": "js", "divergence_coef": 0.04, "bf16": True},
    )
    assert gpu_check.parse_spec("grpo") == ("grpo", {})
    with pytest.raises(SystemExit, match="is not key=value"):
        gpu_check.parse_spec("grpo:beta")
    specs = gpu_check.default_trainers()
    assert specs[0] == "grpo:beta=0.04"  # the baseline the ratios are to
    assert {f"divergence:divergence={d},divergence_coef=0.04" for d in DIVERGENCES.names()} <= set(specs)
    assert any(s.startswith("dpg:") for s in specs) and any("sequence_kl_coef" in s for s in specs)
    assert gpu_check.DPH_SPEC in specs and gpu_check.parse_spec(gpu_check.DPH_SPEC)[1]["rehearsal_path"] == "<built>"


def test_dph_rehearses_the_built_set_and_starts_at_the_reference(gpu_check, tmp_path):
    """The DPH-RL entry trains on a set built here: the trainer loads it (the rehearsal checks pass: tokenizer,
    temperature), folds its rows into the loss forward, and at the start (π = the model the reference log-probs came
    from) its forward-KL term is 0 up to round-off, which fails if the stored log-probs and the trainer's forward
    disagree (another layout, temperature or model)."""
    import datasets
    import torch

    model_dir, _ = gpu_check.build_model_dir(tmp_path / "model", gpu_check.SMOKE_SHAPE, torch.float32)
    tokenizer = gpu_check.build_tokenizer(gpu_check.SMOKE_SHAPE["vocab_size"])
    prompts = gpu_check.random_prompts(2, 8, seed=0)
    built = []

    def rehearsal():
        built.append(gpu_check.build_rehearsal_set(tmp_path / "set", model_dir, prompts, 4, count=8,
                                                   temperature=1.0, dtype=torch.float32, device="cpu"))  # fmt: skip
        return built[-1]

    common = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=4, temperature=1.0,
                  learning_rate=1e-6, use_cpu=True, report_to="none", seed=0, save_strategy="no",
                  dataloader_num_workers=0, disable_tqdm=True)  # fmt: skip
    dataset = datasets.Dataset.from_dict({"prompt": prompts})
    trainer = gpu_check.make_trainer(gpu_check.DPH_SPEC, model_dir, tmp_path / "out", common, dataset, tokenizer,
                                     rehearsal)  # fmt: skip
    assert len(built) == 1 and trainer.args.rehearsal_path == str(built[0])
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(4)])
    trainer._compute_loss(trainer.model, inputs).backward()
    term = trainer._metrics["train"]["rehearsal/forward_kl"]
    assert len(term) == 1 and abs(term[0]) < 1e-5, term
    with pytest.raises(ValueError, match="no rehearsal set"):
        gpu_check.make_trainer(gpu_check.DPH_SPEC, model_dir, tmp_path / "out2", common, dataset, tokenizer)


def test_tokenizer_decodes_every_id_and_the_reward_splits(gpu_check):
    tok = gpu_check.build_tokenizer(600)
    assert len(tok) == 600 and tok.decode([599]) == "<t599>"
    ids = tok("1+2=")["input_ids"]
    assert ids[0] == tok.bos_token_id and tok.decode(ids, skip_special_tokens=True) == "1+2="
    assert gpu_check.parity_reward(["a", "b"], completion_ids=[[3, 5], [3, 4]]) == [1.0, 0.0]


def test_carried_requirements_are_met_here(gpu_check):
    assert gpu_check.requirement_problems() == []
    assert gpu_check.requirement_problems(["no-such-dist"]) == ["no-such-dist is not installed"]


def test_the_shell_scripts_parse():
    for name in ("gpu_check.sh", "gpu_wheels.sh"):
        subprocess.run(["bash", "-n", str(BENCH / name)], check=True)


def test_smoke_form_times_every_trainer_against_stock_grpo(gpu_check, tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--smoke", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    steps = results["steps"]
    assert [r["trainer"] for r in steps] == gpu_check.default_trainers()
    assert all("error" not in r for r in steps), steps
    assert steps[0]["step_ratio"] == 1.0 and all(r["baseline"] == "grpo:beta=0.04" for r in steps)
    assert all(r["generate_s"] > 0 and r["loss_backward_s"] > 0 and r["step_ratio"] > 0 for r in steps)
    (sampled,) = results["sampling"]
    assert sampled["backend"] == "hf" and sampled["new_tokens"] == 4 and sampled["tokens_per_s"] > 0
    assert "(a) step time" in printed and "(b) sampling throughput" in printed and "step×" in printed
    assert results["timed_rounds"] == 1 and results["wall_s"] > 0  # the smoke form's one round, no wall-clock bound


def test_recipe_specs_keep_the_method_keys_and_drop_the_run_settings(gpu_check, tmp_path):
    (tmp_path / "a.yaml").write_text(
        "model_name_or_path: tiny\ntrainer: divergence\ndivergence: none\nreward_shaping: mara\nmara_tau: 1.0\n"
        "task: pairsum\ntask_options: {max_target: 25}\nlora_target_modules: all-linear\nlearning_rate: 1.0e-4\n"
        "max_steps: 50\nnum_generations: 8\ntemperature: 1.0\nscale_rewards: none\nnum_iterations: 2\n"
    )
    (tmp_path / "b.yaml").write_text(
        "trainer: divergence\nrehearsal_path: runs/x\nrehearsal_coef: 0.2\nrehearsal_k: 8\nrehearsal_threshold: 6\n"
        "rehearsal_sampling_batch_size: 64\n"
    )
    assert gpu_check.recipe_trainers(tmp_path) == [
        "divergence:divergence=none,reward_shaping=mara,mara_tau=1.0,scale_rewards=none,num_iterations=2",
        "divergence:rehearsal_path=<built>,rehearsal_coef=0.2",
    ]
    specs = gpu_check.recipe_trainers()
    assert len(specs) == len(list(gpu_check.RECIPES.glob("*.yaml"))) >= 20
    assert all(gpu_check.parse_spec(s)[0] in {"grpo", "divergence", "dpg"} for s in specs)


def test_smoke_form_steps_every_recipe(gpu_check, tmp_path):
    """``--recipes``: stock GRPO against every recipe in recipes/tiny; each builds and steps (the smoke batch is
    large enough for every recipe's own checks: covariance ratios, pass@k subsets)."""
    out = tmp_path / "recipes.json"
    assert gpu_check.main(["--smoke", "--recipes", "--json", str(out)]) == 0
    steps = json.loads(out.read_text())["steps"]
    assert [r["trainer"] for r in steps] == ["grpo:beta=0.04", *gpu_check.recipe_trainers()]
    assert all("error" not in r and r["loss_backward_s"] > 0 for r in steps), steps
    with pytest.raises(SystemExit):
        gpu_check.main(["--smoke", "--recipes", "--trainers", "grpo"])


def test_timing_stops_at_the_budget_after_one_timed_round(gpu_check):
    """--budget-s bounds the device time: past it, no further round starts (at least one timed round is kept)."""
    import torch

    class Fake:
        model = torch.nn.Linear(1, 1)

        def _generate_and_score_completions(self, rows):
            return None

        def _compute_loss(self, model, inputs):
            return model(torch.ones(1, 1)).sum()

    timed = [gpu_check.Timed("a", Fake()), gpu_check.Timed("b", Fake())]
    assert gpu_check.time_steps(timed, [], "cpu", rounds=5, warmup=1, budget_s=0.0) == 1
    assert [len(t.gen) for t in timed] == [1, 1]
    assert gpu_check.time_steps(timed, [], "cpu", rounds=3, warmup=0, budget_s=1e9) == 3


def test_checkpointing_is_turned_off_under_the_field_name_the_installed_transformers_has(gpu_check):
    """transformers 5.20 renamed ``gradient_checkpointing`` to ``activation_checkpointing``; the lent H100 had 5.17,
    and a hard-coded new name failed every trainer there."""
    from dataclasses import dataclass

    @dataclass
    class Old:
        gradient_checkpointing: bool = True

    @dataclass
    class New:
        activation_checkpointing: bool = True

    assert gpu_check.checkpointing_off(Old) == {"gradient_checkpointing": False}
    assert gpu_check.checkpointing_off(New) == {"activation_checkpointing": False}


def test_sampling_is_measured_when_no_trainer_builds(gpu_check, tmp_path):
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--smoke", "--json", str(out), "--trainers", "grpo:no_such_key=1"]) == 1
    results = json.loads(out.read_text())
    assert "error" in results["steps"][0]
    (sampled,) = results["sampling"]
    assert sampled["backend"] == "hf" and sampled["tokens_per_s"] > 0
