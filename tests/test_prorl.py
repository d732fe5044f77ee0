"""ProRL (prorl: true): at each of TRL's hard reference syncs the reference model's weights equal the policy's and the
optimizer's state is empty, and not before (step by step on the tiny model; TRL's sync alone resets the reference but
keeps the moments); a run resumed from a checkpoint taken after a reset continues from that reference; bad settings
and LoRA fail in one line before the model loads; the tiny recipe trains, its KL restarting from 0 after a reset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, mixed_pair_sum, trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.prorl import REFERENCE_FILE, STATE_FILE, check_prorl

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "prorl.yaml"


def _config(tmp_path: Path, prorl: bool = True, **kw):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig

    base = dict(
        divergence="reverse_kl", divergence_coef=0.05, prorl=prorl, sync_ref_model=True, ref_model_mixup_alpha=1.0,
        ref_model_sync_steps=2, max_steps=3, learning_rate=1e-3, save_strategy="no",
    )  # fmt: skip
    return trainer_config(DivergenceGRPOConfig, tmp_path, **{**base, **kw})


def _trainer(args, tiny_path: str):
    """The tests' trainer, its reward :func:`mixed_pair_sum`: every group holds a correct and an incorrect sample, so
    every step moves the policy, which the tests' "the policy moved on from the reference" rests on (with pair_sum
    alone the tiny base can fail every group of a step, and the step then changes nothing)."""
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    torch.manual_seed(0)
    return make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


class Probe:
    """A callback (added last, so it runs after TRL's sync and ProRL's reset) that records, at the start of training
    and after each optimizer step, the reference's and the policy's weights and the optimizer's per-parameter state."""

    def __init__(self, trainer) -> None:
        from transformers import TrainerCallback

        self.seen: dict[int, dict] = {}
        probe = self

        class Record(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                probe.record(trainer, state.global_step, "begin")

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                probe.record(trainer, state.global_step, "end")

        trainer.add_callback(Record())

    def record(self, trainer, step: int, when: str) -> None:
        inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        state = inner.state
        self.seen[step if when == "end" else -1 - step] = {
            "ref": _weights(trainer.ref_model),
            "policy": _weights(trainer.model),
            "n_state": len(state),
            "steps": {float(s["step"]) for s in state.values() if "step" in s},
            "moments": max((float(s["exp_avg"].abs().max()) for s in state.values() if "exp_avg" in s), default=0.0),
        }

    def begin(self, step: int) -> dict:
        return self.seen[-1 - step]


@pytest.mark.parametrize("prorl", [True, False], ids=["prorl", "trl_sync_only"])
def test_a_reset_step_sets_the_reference_to_the_policy_and_clears_the_optimizer(prorl, tmp_path, tiny_path):
    """ref_model_sync_steps 2, three steps. Step 1: the reference is still the initial model, the moments non-zero.
    Step 2 (a reset): reference == policy, bit for bit, and (ProRL) no optimizer state at all; TRL's sync alone keeps
    AdamW's moments and step count. Step 3: the policy moved on from the reference of step 2; ProRL's AdamW took a
    first step (step count 1), TRL's its third."""
    trainer = _trainer(_config(tmp_path, prorl=prorl), tiny_path)
    initial = _weights(trainer.ref_model)
    assert _same(initial, _weights(trainer.model))  # both start from the tiny base
    probe = Probe(trainer)
    trainer.train()
    s1, s2, s3 = probe.seen[1], probe.seen[2], probe.seen[3]
    for step, before in ((1, probe.begin(0)), (3, s2)):  # what "the policy moved on" below rests on
        moved = not _same(probe.seen[step]["policy"], before["policy"])
        assert moved, f"premise: step {step} moved the policy (mixed_pair_sum: every group scores 0 and 1)"

    assert _same(s1["ref"], initial) and not _same(s1["ref"], s1["policy"])  # not before the reset step
    assert s1["n_state"] > 0 and s1["steps"] == {1.0} and s1["moments"] > 0

    assert _same(s2["ref"], s2["policy"]) and not _same(s2["ref"], initial)  # the reset: π_ref ← π_θ
    if prorl:
        assert s2["n_state"] == 0 and s2["moments"] == 0.0
    else:
        assert s2["n_state"] == s1["n_state"] and s2["steps"] == {2.0} and s2["moments"] > 0

    assert _same(s3["ref"], s2["policy"]) and not _same(s3["ref"], s3["policy"])
    assert s3["n_state"] == s1["n_state"] and s3["steps"] == ({1.0} if prorl else {3.0})
    logged = [x.get("prorl/reference_step") for x in trainer.state.log_history if "loss" in x]
    assert logged == ([0.0, 2.0, 2.0] if prorl else [None] * 3)


def test_the_logged_reference_step_is_the_last_one_not_a_mean(tmp_path, tiny_path):
    """A reset at every step and one log every two steps: the log of step 2 says 2 (the reference is the policy of
    step 2), not 1.5, the mean over the logged steps that TRL makes of a metric's list."""
    trainer = _trainer(_config(tmp_path, ref_model_sync_steps=1, max_steps=2, logging_steps=2), tiny_path)
    trainer.train()
    logged = [(x["step"], x.get("prorl/reference_step")) for x in trainer.state.log_history if "loss" in x]
    assert logged == [(2, 2.0)]


def test_a_resumed_run_continues_from_the_reset_reference(tmp_path, tiny_path):
    """Checkpoints at steps 1, 2, 3 with a reset at 2: checkpoint 3 stores the reference (the policy of step 2),
    checkpoints 1 and 2 need not (the initial model; the checkpoint's own policy). Resuming from 3 or from 2 starts
    from the policy of step 2 as the reference, not from the initial model; the schedule goes on (a reset at 4)."""
    out = tmp_path / "run"
    first = _trainer(_config(out, save_strategy="steps", save_steps=1), tiny_path)
    initial = _weights(first.ref_model)
    probe = Probe(first)
    first.train()
    policy_2 = probe.seen[2]["policy"]
    assert not _same(policy_2, initial), "premise: steps 1 and 2 moved the policy (mixed_pair_sum)"
    states = {n: json.loads((out / f"checkpoint-{n}" / STATE_FILE).read_text()) for n in (1, 2, 3)}
    assert [states[n]["reference_step"] for n in (1, 2, 3)] == [0, 2, 2]
    assert [(out / f"checkpoint-{n}" / REFERENCE_FILE).is_file() for n in (1, 2, 3)] == [False, False, True]

    for checkpoint in (3, 2):
        resumed = _trainer(_config(out, save_strategy="no", max_steps=4), tiny_path)
        assert _same(_weights(resumed.ref_model), initial)  # TRL loads the initial reference
        probe = Probe(resumed)
        resumed.train(resume_from_checkpoint=str(out / f"checkpoint-{checkpoint}"))
        start = probe.begin(checkpoint)
        assert _same(start["ref"], policy_2) and not _same(start["ref"], initial)
        assert resumed.plugin("prorl").reference_step == 4
        assert _same(probe.seen[4]["ref"], probe.seen[4]["policy"]) and probe.seen[4]["n_state"] == 0


def test_a_checkpoint_without_prorl_state_is_refused(tmp_path, tiny_path):
    out = tmp_path / "run"
    plain = _trainer(_config(out, prorl=False, save_strategy="steps", save_steps=1, max_steps=1), tiny_path)
    plain.train()
    resumed = _trainer(_config(out, max_steps=2), tiny_path)
    with pytest.raises(ConfigError, match=f"has no {STATE_FILE}: it was not written by a prorl run"):
        resumed.train(resume_from_checkpoint=str(out / "checkpoint-1"))


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sync_ref_model", "false"], "prorl resets at TRL's reference sync: set sync_ref_model: true"),
        (["--ref_model_mixup_alpha", "0.6"], "prorl is a hard reset, π_ref ← π_θ: set ref_model_mixup_alpha: 1.0"),
        (["--divergence_coef", "0"], "prorl resets the reference of a KL penalty and this run has none"),
        (["--divergence", "none", "--divergence_coef", "0"], "prorl resets the reference of a KL penalty"),
        (["--ref_model_sync_steps", "0"], "ref_model_sync_steps must be an integer >= 1 (the reset interval), got 0"),
        (["--ref_model_sync_steps", "60"], "ref_model_sync_steps=60 is above max_steps=50: no reset would ever fire"),
        (["--use_peft", "true"], "sync_ref_model=true with use_peft: under LoRA the reference is the adapter-disabled"),
        # TRL's own sync_ref_model refusal at beta 0 comes after loading the model; ours before, without prorl too
        (["--prorl", "false", "--divergence_coef", "0"], "sync_ref_model=true with TRL's beta 0: no term uses a"),
        (["--prorl", "false", "--divergence", "none", "--divergence_coef", "0"], "sync_ref_model=true with TRL's beta"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


def test_stock_grpo_sync_ref_model_at_beta_zero_fails_before_the_model_loads(capsys, no_model_loads, tmp_path):
    grpo = ROOT / "recipes" / "tiny" / "grpo.yaml"  # trainer grpo, beta 0.0
    assert_train_refuses(grpo, ["--sync_ref_model", "true"], "sync_ref_model=true with TRL's beta 0", capsys, tmp_path)


def test_sync_ref_model_needs_a_non_zero_resolved_beta():
    from rlvr_div.models import check_model_settings

    model = SimpleNamespace(load_in_4bit=False, load_in_8bit=False, attn_implementation="sdpa", use_peft=False)
    check_model_settings(model, SimpleNamespace(sync_ref_model=True, beta=0.05))
    check_model_settings(model, SimpleNamespace(sync_ref_model=False, beta=0.0))
    with pytest.raises(ConfigError, match="sync_ref_model=true with TRL's beta 0"):
        check_model_settings(model, SimpleNamespace(sync_ref_model=True, beta=0.0))


def test_lora_is_refused_before_trl_loads_the_model(tmp_path, tiny_path, monkeypatch):
    """Python users: a peft_config stops DivergenceGRPOTrainer before TRL builds the model from its path."""
    from peft import LoraConfig
    from trl.trainer import grpo_trainer

    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    def boom(*a, **k):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(grpo_trainer, "create_model_from_path", boom)
    with pytest.raises(ConfigError, match="prorl resets a reference model, and under LoRA there is none"):
        DivergenceGRPOTrainer(
            model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=_config(tmp_path),
            train_dataset=get_task("pairsum", size=16), processing_class=load_tokenizer(tiny_path),
            peft_config=LoraConfig(target_modules="all-linear"),
        )  # fmt: skip


def _args(**kw) -> SimpleNamespace:
    base = dict(
        prorl=True, divergence_active=True, divergence="reverse_kl", divergence_coef=0.05, sync_ref_model=True,
        ref_model_mixup_alpha=1.0, ref_model_sync_steps=10, deepspeed=None, deepspeed_plugin=None, fsdp=False,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_an_interval_above_max_steps_is_refused():
    check_prorl(_args(ref_model_sync_steps=10, max_steps=10))  # one reset, at the last step
    check_prorl(_args(ref_model_sync_steps=10, max_steps=-1))  # epochs decide the length: not checked
    with pytest.raises(ConfigError, match="ref_model_sync_steps=11 is above max_steps=10: no reset would ever fire"):
        check_prorl(_args(ref_model_sync_steps=11, max_steps=10))


def test_sharded_runs_are_refused(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    check_prorl(_args())
    check_prorl(_args(prorl=False, sync_ref_model=False, deepspeed="ds.json"))  # nothing to check without prorl
    with pytest.raises(ConfigError, match="under DeepSpeed the optimizer state and the reference are sharded"):
        check_prorl(_args(deepspeed_plugin=object()))
    with pytest.raises(ConfigError, match="under FSDP"):
        check_prorl(_args(fsdp=True))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match="under FSDP"):
        check_prorl(_args())


@pytest.mark.slow
def test_tiny_recipe_trains_and_its_kl_restarts_after_a_reset(tmp_path, tiny_path):
    """Three steps, a reset after step 2: the KL term is positive at step 2 (the policy moved away from the initial
    reference) and 0 at step 3 (samples, policy and reference are all the policy of step 2). The reward is
    :func:`train_checks.mixed_pair_sum`, so that step 1 moves the policy (the recipe's easy prompts can be passed by
    every sample of every group)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(RECIPE), "--output_dir", str(out),
           "--max_steps", "3", "--ref_model_sync_steps", "2", "--per_device_train_batch_size", "32",
           "--disable_tqdm", "true", "--save_strategy", "no", "--rewards", "train_checks:mixed_pair_sum"]  # fmt: skip
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert [x["step"] for x in logs] == [1, 2, 3]
    assert all(x["frac_reward_zero_std"] == 0 for x in logs), "premise: every group scores 0 and 1 (mixed_pair_sum)"
    assert [x["prorl/reference_step"] for x in logs] == [0.0, 2.0, 2.0]
    kl = [x["divergence/reverse_kl"] for x in logs]
    assert kl[0] == pytest.approx(0.0, abs=1e-6) and kl[1] > 1e-5 and kl[2] == pytest.approx(0.0, abs=1e-6), kl
