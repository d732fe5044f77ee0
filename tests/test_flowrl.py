"""FlowRL (flowrl: true): the trajectory-balance loss, its importance weights and its gradients (log Z and token
log-probs) against a hand computation; its minimiser on a tabular policy is the tilted reference π_ref·e^{βr}/Z (not
the reward maximiser); the trainer's loss against the formula written out from independent pieces (TRL's group
advantages as r̂, the reference log-probs, log Z from the prompt's mean last hidden state); the head's parameters
optimised, the same on every process at the start, averaged over processes, zeroed after a skipped step, saved with
checkpoints and restored on resume; bad settings (and settings its loss would ignore) in one line; the tiny
recipe."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launchers import TWO_PROCESSES
from train_checks import assert_train_refuses, make_trainer, mixed_pair_sum, run_recipe, trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.flowrl import (
    MULTIMODAL_KEYS,
    STATE_FILE,
    FlowRLArgs,
    check_flowrl,
    flowrl_loss,
    flowrl_residuals,
    new_head,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "flowrl.yaml"


def _batch() -> dict[str, torch.Tensor]:
    """Three completions (T = 3, the third column of rows 1 and 3 and the second of row 3 padding; padding holds
    junk values that must not count). Rows 1 and 2 share a prompt."""
    return dict(
        mask=torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
        logps=torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -1.0, -1.5], [-2.0, -5.0, -5.0]]),
        ref=torch.tensor([[-1.5, -1.5, -7.0], [-1.0, -1.0, -1.0], [-3.0, -0.1, -0.1]]),
        # Σ_t (l − l_old): row 1 +0.5 (ratio e^0.5 ≈ 1.65, clipped to 1.28), row 2 −1 (e^−1 ≈ 0.37, clipped to 0.8),
        # row 3 0 (ratio 1)
        old=torch.tensor([[-1.25, -2.25, 3.0], [-0.5 + 1 / 3, -1.0 + 1 / 3, -1.5 + 1 / 3], [-2.0, 0.0, 0.0]]),
        rewards=torch.tensor([1.0, -0.5, 0.25]),
    )


def test_hand_values_of_the_loss_and_its_gradients():
    b = _batch()
    log_z = torch.tensor([0.3, 0.3, -0.4], requires_grad=True)
    logps = b["logps"].clone().requires_grad_(True)
    # β = 2: δ_1 = 0.3 + (−1.5) − 2·1 − (−1.5) = −1.7; δ_2 = 0.3 + (−1) + 1 − (−1) = 1.3;
    # δ_3 = −0.4 + (−2) − 0.5 − (−3) = 0.1
    loss, delta, w, clipped = flowrl_loss(log_z, logps, b["ref"], b["old"], b["mask"], b["rewards"], 2.0, 0.2, 0.28)
    assert delta.tolist() == pytest.approx([-1.7, 1.3, 0.1])
    assert w.tolist() == pytest.approx([1.28, 0.8, 1.0]) and clipped.tolist() == [True, True, False]
    # L = (1.28·2.89 + 0.8·1.69 + 1·0.01)/3 = 5.0612/3
    assert loss.item() == pytest.approx(5.0612 / 3)
    loss.backward()
    # dL/dlog Z_i = 2·w_i·δ_i/B
    assert log_z.grad.tolist() == pytest.approx([2 * 1.28 * -1.7 / 3, 2 * 0.8 * 1.3 / 3, 2 * 0.1 / 3])
    # dL/dl_it = 2·w_i·δ_i/(B·|y_i|) on the completion tokens, 0 on padding: w is a constant (detached)
    expected = torch.tensor(
        [[2 * 1.28 * -1.7 / 6] * 2 + [0.0], [2 * 0.8 * 1.3 / 9] * 3, [2 * 0.1 / 3, 0.0, 0.0]]
    )  # fmt: skip
    assert torch.allclose(logps.grad, expected, atol=1e-6)


def test_the_gradient_of_a_shared_log_z_is_twice_the_mean_residual():
    """On fresh samples (π_old = π_θ, every w = 1) the G completions of a prompt share one log Z(x), and
    dL/dlog Z = 2·mean_i δ_i: log Z moves until the residuals of its prompt average 0."""
    b = _batch()
    shared = torch.tensor(0.3, requires_grad=True)
    loss, delta, w, _ = flowrl_loss(shared.expand(3), b["logps"], b["ref"], b["logps"], b["mask"], b["rewards"],
                                    2.0, 0.2, 0.28)  # fmt: skip
    loss.backward()
    assert w.tolist() == [1.0, 1.0, 1.0]
    # the residuals with log Z = 0.3 everywhere: (−1.7, 1.3, 0.8) (row 3: 0.3 − 2 − 0.5 + 3)
    assert delta.tolist() == pytest.approx([-1.7, 1.3, 0.8])
    assert shared.grad.item() == pytest.approx(2 * (-1.7 + 1.3 + 0.8) / 3)
    assert loss.item() == pytest.approx((1.7**2 + 1.3**2 + 0.8**2) / 3)


def test_the_minimiser_on_a_tabular_policy_is_the_tilted_reference():
    """Four one-token answers, two of them equally rewarded: the expected loss E_{y∼π}[δ(y)²] (π detached as the
    sampling distribution, as the on-policy estimate) is minimised by π ∝ π_ref·e^{β·r}, log Z = log Σ π_ref·e^{β·r}:
    the two best answers keep the reference's ratio between them (the reward maximiser would give them all the mass
    in any split)."""
    torch.manual_seed(0)
    ref = torch.log_softmax(torch.tensor([0.4, -0.3, 1.0, 0.2], dtype=torch.float64), 0)
    reward = torch.tensor([1.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    beta = 1.5
    theta = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    log_z = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta, log_z], lr=0.05)
    mask = torch.ones(4, 1, dtype=torch.float64)
    for _ in range(3000):
        logp = torch.log_softmax(theta, 0)
        delta = flowrl_residuals(log_z.expand(4), logp.unsqueeze(1), ref.unsqueeze(1), mask, reward, beta)
        loss = (logp.detach().exp() * delta.square()).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    target = torch.softmax(ref + beta * reward, 0)
    pi = torch.softmax(theta.detach(), 0)
    assert torch.allclose(pi, target, atol=1e-6), (pi, target)
    assert log_z.item() == pytest.approx(torch.logsumexp(ref + beta * reward, 0).item(), abs=1e-6)
    assert (pi[0] / pi[1]).item() == pytest.approx((ref[0] - ref[1]).exp().item(), rel=1e-5)
    assert pi[2].item() > 0.1  # the unrewarded answer keeps mass: distribution matching, not maximisation


def _config(tmp_path: Path, **kw):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig

    return trainer_config(DivergenceGRPOConfig, tmp_path, **{"flowrl": True, **kw})


def test_config_defaults_are_the_papers_and_need_the_reference(tmp_path):
    args = _config(tmp_path)
    assert (args.flowrl_beta, args.flowrl_logz_layers, args.flowrl_logz_dropout) == (15.0, 3, 0.1)
    assert (FlowRLArgs.flowrl_beta, FlowRLArgs.flowrl) == (15.0, False)
    assert args.beta == 1.0  # TRL computes π_ref's log-probs
    assert _config(tmp_path, flowrl=False).beta == 0.0


def test_trainer_loss_is_the_formula_on_a_generated_batch(tmp_path, tiny_path):
    """One generated batch: the trainer's loss equals mean_i δ_i² written out from the rewards (r̂ = (R − group mean)/
    (group std + 1e-4)), the policy's and the reference's log-probs and log Z = head(mean of the prompt's last hidden
    state, from a prompt-only forward); the head's output bias gets dL/db = 2·mean δ (every w = 1 on fresh samples)."""
    from rlvr_div.trainers.common import policy_logps_no_grad
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = _config(tmp_path, flowrl_beta=2.0, flowrl_logz_dropout=0.0)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    assert args.share_prompt_forward and not trainer.share_prompt_forward  # log Z reads whole rows' hidden states
    trainer.model.train()
    with torch.no_grad():  # a policy away from its reference, so log π − log π_ref is not 0
        for p in trainer.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    assert out.get("old_per_token_logps") is None  # on-policy: π_old = π_θ, w = 1
    r = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"])).view(-1, 8)
    r_hat = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
    assert torch.allclose(out["advantages"], r_hat, atol=1e-5) and r_hat.abs().max() > 0.5

    mask = out["completion_mask"]
    length = mask.sum(-1)
    policy = policy_logps_no_grad(trainer, out)
    ref = out["ref_per_token_logps"]
    ref_ratio = ((policy - ref) * mask).sum(-1) / length
    assert ref_ratio.abs().max() > 1e-3
    with torch.no_grad():
        hidden = trainer.model(
            input_ids=out["prompt_ids"], attention_mask=out["prompt_mask"], output_hidden_states=True
        ).hidden_states[-1]
        m = out["prompt_mask"].unsqueeze(-1).float()
        head = trainer.plugin("flowrl").head
        log_z = head((hidden * m).sum(1) / m.sum(1))
    delta = log_z + ref_ratio - 2.0 * r_hat  # mean log π − mean log π_ref = the per-token mean log-ratio
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test does not run
    loss = trainer.compute_loss(trainer.model, out)
    assert loss.item() == pytest.approx(delta.square().mean().item(), rel=1e-4)
    trainer.model.zero_grad()
    head.zero_grad()
    loss.backward()
    assert head.net[-1].bias.grad.item() == pytest.approx(2 * delta.mean().item(), rel=1e-4, abs=1e-5)
    logged = trainer._metrics["train"]
    assert logged["flowrl/log_z"][-1] == pytest.approx(log_z.mean().item(), rel=1e-4, abs=1e-6)
    assert logged["flowrl/importance_weight"][-1] == 1.0 and logged["flowrl/clip_frac"][-1] == 0.0


def test_a_training_step_updates_the_head_which_travels_with_the_checkpoint(tmp_path, tiny_path, monkeypatch):
    import rlvr_div.trainers.flowrl as flowrl_module
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    calls = []
    average = flowrl_module.average_gradients
    monkeypatch.setattr(flowrl_module, "average_gradients", lambda params: (calls.append(len(params)), average(params)))
    torch.manual_seed(0)
    args = _config(tmp_path, max_steps=1, save_steps=1, learning_rate=1e-3, weight_decay=0.1)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path)
    head = trainer.plugin("flowrl").head
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    # another process draws the same head: GRPOTrainer seeded this one with seed + rank 0 (device_specific); after
    # the seed of rank 1 the head is the same, and building it leaves the global random state as it was
    torch.manual_seed(args.seed + 1)
    rng = torch.get_rng_state()
    other = dict(new_head(head.net[0].in_features, args).named_parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[n], other[n].detach()) for n in before)
    trainer.train()
    after = dict(head.named_parameters())
    assert all(not torch.equal(before[n], after[n]) for n in before), "a head parameter was not optimised"
    # each head parameter is in the optimizer once; weight decay as the Trainer gives it (no decay on LayerNorm/bias)
    groups = trainer.optimizer.param_groups
    ours = [(g["weight_decay"], p) for g in groups for p in g["params"] if any(p is q for q in head.parameters())]
    assert len(ours) == len(before) == 10
    assert {wd for wd, _ in ours} == {0.1, 0.0}
    assert {n for n, p in head.named_parameters() if any(p is q and wd == 0.0 for wd, q in ours)} == {
        n
        for n in before
        if n.endswith("bias") or n.split(".")[1] in ("2", "6")  # the LayerNorms: net.2, net.6
    }
    assert calls == [10]  # the step's pre-hook averaged the head's gradients (a no-op with one process)
    assert all(p.grad is None for p in head.parameters())  # zeroed after the step (the Trainer zeroes the model's)
    ckpt = tmp_path / "checkpoint-1"
    saved = torch.load(ckpt / STATE_FILE, weights_only=True)
    assert all(torch.equal(saved[n], after[n].detach()) for n in before)
    assert (ckpt / STATE_FILE).stat().st_mtime_ns <= (ckpt / "trainer_state.json").stat().st_mtime_ns
    from safetensors import safe_open

    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:  # the saved model has no head weights
        assert not [k for k in f.keys() if "net." in k]
    # load restores the weights in place; a checkpoint without them is refused
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
    trainer.plugin("flowrl").load(ckpt)
    assert all(torch.equal(saved[n], p.detach()) for n, p in head.named_parameters())
    (ckpt / STATE_FILE).unlink()
    with pytest.raises(ConfigError, match="has no flowrl_log_z.pt"):
        trainer.plugin("flowrl").load(ckpt)
    # the head's gradients are clipped to max_grad_norm on their own before a step
    for p in head.parameters():
        p.grad = torch.full_like(p, 10.0)
    trainer.plugin("flowrl")._prepare_head_step()
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in head.parameters()]))
    assert norm.item() == pytest.approx(args.max_grad_norm, rel=1e-5)


def test_a_skipped_optimizer_step_leaves_no_head_gradients(tmp_path, tiny_path):
    """fp16's GradScaler skips the optimizer step on inf gradients, and the optimizer's hooks with it: the head's
    gradients are zeroed with the model's anyway, so they do not carry over into the next step."""
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    torch.manual_seed(0)
    trainer = make_trainer(DivergenceGRPOTrainer, _config(tmp_path, max_steps=1, save_strategy="no"), tiny_path)
    head = trainer.plugin("flowrl").head
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    base, steps = trainer.create_optimizer, []

    def create_optimizer(model=None):
        optimizer = base(model)
        optimizer.step = lambda closure=None: steps.append(1)  # every step skipped, hooks included
        return optimizer

    trainer.create_optimizer = create_optimizer
    seen = []
    for p in head.parameters():
        p.register_hook(lambda g: (seen.append(1), g)[1])
    trainer.train()
    assert steps == [1] and seen  # the head had gradients, and the one optimizer step was skipped
    assert all(torch.equal(before[n], p.detach()) for n, p in head.named_parameters())
    assert all(p.grad is None for p in head.parameters())


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(RECIPE), "--output_dir", str(out),
           "--per_device_train_batch_size", "16", "--save_steps", "1", "--save_total_limit", "3",
           "--disable_tqdm", "true", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_the_head_and_its_optimizer_state_survive_a_resume(tmp_path, tiny_path):
    """A run stopped after its step-1 checkpoint and resumed reaches the same head at step 2 as the uninterrupted
    run: its weights come back from the checkpoint and its Adam moments from the Trainer's optimizer.pt."""
    full = tmp_path / "full"
    res = _train(full, "--max_steps", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    at1 = torch.load(full / "checkpoint-1" / STATE_FILE, weights_only=True)
    at2 = torch.load(full / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert any(not torch.equal(at1[k], at2[k]) for k in at1)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-1", resumed / "checkpoint-1")
    res = _train(resumed, "--max_steps", "2", "--resume_from_checkpoint", "true")
    assert res.returncode == 0, res.stderr[-3000:]
    again = torch.load(resumed / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert all(torch.allclose(again[k], at2[k], atol=1e-6) for k in at2)


TWO_PROCESS_SCRIPT = """
import json, sys
from types import SimpleNamespace
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import set_seed
from rlvr_div.trainers.flowrl import average_gradients, new_head

Accelerator(cpu=True)  # the gloo group of the torchrun launch, as the Trainer's
rank = dist.get_rank()
# the head, built as the plug-in builds it after GRPOTrainer's per-process seeding
set_seed(0, device_specific=True)
draw = torch.rand(1).item()  # differs between the processes
head = new_head(8, SimpleNamespace(seed=0, flowrl_logz_layers=3, flowrl_logz_dropout=0.1))
flat = torch.cat([p.detach().flatten() for p in head.parameters()])
heads = [torch.zeros_like(flat) for _ in range(2)]
dist.all_gather(heads, flat)
draws = [None, None]
dist.all_gather_object(draws, draw)
# the gradients' average
a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
a.grad = torch.tensor([1.0, 2.0]) * (rank + 1)
b.grad = None if rank == 0 else torch.tensor([4.0])  # a parameter without a gradient on one process counts as 0
average_gradients([a, b])
with open(sys.argv[1] + f"/rank{rank}.json", "w") as f:
    json.dump({"grads": [a.grad.tolist(), b.grad.tolist()], "same_head": torch.equal(heads[0], heads[1]),
               "same_draw": draws[0] == draws[1]}, f)
dist.destroy_process_group()
"""


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_two_processes_start_from_one_head_and_average_its_gradients(tmp_path):
    """Under a 2-process launch the head is the same on both processes although the Trainer's per-process seeds
    differ (their next random draws do), and the head's gradients are averaged (a missing one counts as 0)."""
    script = tmp_path / "two_processes.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    res = subprocess.run([*TWO_PROCESSES, str(script), str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got == {"grads": [[1.5, 3.0], [2.0]], "same_head": True, "same_draw": False}


def test_multimodal_keys_are_the_forwards_parameters_after_compute_aux_loss():
    import inspect

    from trl import GRPOTrainer

    names = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert MULTIMODAL_KEYS == tuple(names[names.index("compute_aux_loss") + 1 :]) and "pixel_values" in MULTIMODAL_KEYS


def test_sharded_runs_and_vllm_correction_are_refused(tmp_path, monkeypatch):
    """DeepSpeed builds its own optimizer and FSDP switches it to the model's shards (the head would not be trained);
    TRL's vLLM importance-sampling correction is not part of FlowRL's loss."""
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    args = _config(tmp_path)
    check_flowrl(args)
    for key, value, message in [
        ("deepspeed_plugin", object(), "under DeepSpeed the optimizer is not the Trainer's own"),
        ("fsdp", [object()], "under FSDP the optimizer is not the Trainer's own"),
        ("use_vllm", True, "set vllm_importance_sampling_correction: false"),
    ]:
        saved = getattr(args, key)
        setattr(args, key, value)
        with pytest.raises(ConfigError, match=message):
            check_flowrl(args)
        setattr(args, key, saved)
    args.use_vllm, args.vllm_importance_sampling_correction = True, False
    check_flowrl(args)  # vLLM sampling without the correction: w is FlowRL's own ratio
    args.use_vllm = False
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match="under FSDP"):
        check_flowrl(args)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--flowrl_beta", "0"], "flowrl_beta must be a finite number > 0, got 0"),
        (["--flowrl_beta", "inf"], ("flowrl_beta", "finite number > 0", "inf")),
        (["--flowrl_logz_layers", "0"], "flowrl_logz_layers must be an integer >= 1, got 0"),
        (["--flowrl_logz_dropout", "1"], "flowrl_logz_dropout must be a finite number in [0, 1), got 1"),
        (["--flowrl", "false", "--flowrl_beta", "5"], ("flowrl_beta=5", "acts only with flowrl: true")),
        (["--epsilon", "1"], "need 0 <= epsilon < 1 and epsilon_high >= 0"),
        (["--entropy_coef", "0.01"], "its entropy bonus and top_entropy_quantile would not act"),
        (["--delta", "2.0"], "delta would not act: leave delta unset (got 2.0)"),
        (["--importance_sampling_level", "sequence"], "leave it token (got 'sequence')"),
        (["--off_policy_mask_threshold", "0.5"], "off_policy_mask_threshold would not act: leave it unset (got 0.5)"),
        (
            ["--divergence", "reverse_kl", "--divergence_coef", "0.04"],
            "divergence='reverse_kl' does not act with flowrl: true (it replaces",
        ),
        (["--reward_shaping", "ucpo"], "flowrl and ucpo both act on the advantages"),
        (
            ["--covariance_penalty", "clip_cov", "--clip_cov_ratio", "0.05"],
            "flowrl and covariance_penalty both act on the loss",
        ),
        (["--sequence_kl_coef", "0.1"], "flowrl and sequence_kl both act on the advantages"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True])
def test_tiny_recipe_trains(tmp_path, tiny_path, lora):
    logs = run_recipe("flowrl", lora, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all(math.isfinite(x["flowrl/loss"]) and "flowrl/log_z" in x for x in logs)
    assert logs[0]["flowrl/ref_log_ratio"] == 0.0  # the first batch: the policy is its reference (LoRA: adapter off)
