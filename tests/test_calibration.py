"""β ↔ μ closed forms against brute-force enumeration, the calibrate CLI, and the validity-target controller."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rlvr_div.cli import run_command
from rlvr_div.errors import ConfigError
from rlvr_div.theory.beta_controller import ValidityTargetController
from rlvr_div.theory.calibration import beta_for, kl_filtered_to_tilted, kl_tilted_to_base, validity_at
from rlvr_div.theory.calibration_report import implied_validity_report, main, read_counts

ROOT = Path(__file__).resolve().parents[1]

BETAS = (5.0, 1.0, 0.5, 0.33, 0.2, 0.1, 0.05, 0.02)


def _random_world(seed: int, n: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    log_a = (torch.randn(n, generator=g, dtype=torch.float64) * 2).log_softmax(0)
    valid = torch.rand(n, generator=g, dtype=torch.float64) < 0.3
    valid[0], valid[1] = True, False
    return log_a, valid


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta", BETAS)
def test_closed_forms_match_enumeration(seed: int, beta: float) -> None:
    log_a, valid = _random_world(seed)
    a_rate = float(log_a.exp()[valid].sum())
    log_p = (log_a + valid.double() / beta).log_softmax(0)  # p_β ∝ a·e^{v/β}, normalised by brute force
    p = log_p.exp()
    mu = float(p[valid].sum())
    log_star = log_a[valid] - math.log(a_rate)
    assert abs(validity_at(beta, a_rate) - mu) < 1e-9
    assert abs(kl_tilted_to_base(beta, a_rate) - float((p * (log_p - log_a)).sum())) < 1e-9
    assert abs(kl_filtered_to_tilted(beta, a_rate) - float((log_star.exp() * (log_star - log_p[valid])).sum())) < 1e-9
    if mu < 1 - 1e-12:  # β(μ, A) inverts μ(β, A) where μ is representable
        assert abs(beta_for(mu, a_rate) - beta) < 1e-6 * beta


def test_worked_examples_from_methods() -> None:
    assert beta_for(0.9, 0.3) == pytest.approx(0.3285, abs=1e-4)
    assert validity_at(0.001, 0.3) == pytest.approx(1.0, abs=1e-12)
    assert kl_filtered_to_tilted(0.001, 0.3) >= 0.0


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (validity_at, (1.0, 0.0)),
        (validity_at, (1.0, 1.0)),
        (validity_at, (0.0, 0.3)),
        (validity_at, (-1.0, 0.3)),
        (beta_for, (0.3, 0.3)),
        (beta_for, (0.2, 0.3)),
        (beta_for, (1.0, 0.3)),
        (beta_for, (float("nan"), 0.3)),
    ],
)
def test_bad_inputs_raise_one_line_config_error(fn, args) -> None:
    with pytest.raises(ConfigError) as e:
        fn(*args)
    assert "\n" not in str(e.value)


def test_cli_target_validity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base-rate", "0.3", "--target-validity", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "0.328459" in out
    assert f"{kl_tilted_to_base(beta_for(0.9, 0.3), 0.3):.6g}" in out
    assert f"{-math.log(0.9):.6g}" in out


def test_cli_beta_gives_validity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base-rate", "0.3", "--beta", "0.5"]) == 0
    assert f"{validity_at(0.5, 0.3):.6g}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--base-rate", "0.3", "--target-validity", "0.2"],
        ["--base-rate", "1.5", "--target-validity", "0.9"],
        ["--target-validity", "0.9"],
        ["--base-rate", "0.3"],
        ["--base-rate", "0.3", "--target-validity", "0.9", "--beta", "1"],
        ["--from-samples", "/nonexistent/samples.jsonl", "--beta", "0.5"],
    ],
)
def test_cli_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def _write_samples(path, rows) -> None:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_from_samples_distribution(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(0)
    rows, rates = [], []
    for i in range(40):
        c = rng.randint(1, 15)
        rows.append({"correct": [j < c for j in range(16)]} if i % 2 else {"c": c, "n": 16})
        rates.append(c / 16)
    rows += [{"c": 0, "n": 16}, {"c": 0, "n": 16}, {"correct": [True] * 16}]
    path = tmp_path / "samples.jsonl"
    _write_samples(path, rows)
    counts = read_counts(path)
    assert [pc.rate for pc in counts[:40]] == rates
    beta = 0.4
    mus = sorted(validity_at(beta, a) for a in rates)
    report = implied_validity_report(counts, beta)
    assert "A = 0: 2 prompts" in report and "A = 1: 1 prompts" in report
    n_inner = len(rates)
    assert f"0 < A < 1: {n_inner} prompts" in report
    med = torch.quantile(torch.tensor(mus, dtype=torch.float64), 0.5).item()
    assert f"q50 {med:.4f}" in report
    assert f"q00 {min(mus):.4f}" in report
    hist = [line for line in report.splitlines() if line.strip().startswith("[")]
    assert len(hist) == 10 and sum(int(line.split()[2]) for line in hist) == n_inner
    assert main(["--from-samples", str(path), "--beta", str(beta)]) == 0
    assert "histogram of mu" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line",
    ['{"c": 3}', '{"correct": [true, 2]}', '{"c": 5, "n": 3}', "not json", '{"correct": []}'],
)
def test_from_samples_bad_lines(tmp_path, line: str) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_text('{"c": 1, "n": 4}\n' + line + "\n")
    with pytest.raises(ConfigError, match="line 2"):
        read_counts(path)


def test_from_samples_needs_beta(tmp_path) -> None:
    path = tmp_path / "samples.jsonl"
    _write_samples(path, [{"c": 1, "n": 4}])
    with pytest.raises(ConfigError, match="--beta"):
        main(["--from-samples", str(path)])


# --------------------------------------------------------------------------------------------------------------------
# The controller, against simulated environments


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _run(ctrl: ValidityTargetController, steps: int, validity_of_step, n: int = 64, seed: int = 0) -> list[float]:
    """Run the loop; returns the running validity after each step. ``validity_of_step(t, beta)`` is the policy's
    true validity; the batch is Binomial(n, that) / n."""
    rng = random.Random(seed)
    out = []
    for t in range(steps):
        v = validity_of_step(t, ctrl.beta)
        batch = sum(rng.random() < v for _ in range(n)) / n
        ctrl.update(batch, n)
        out.append(ctrl.running_validity)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("base_rate", "target", "init_beta"), [(0.2, 0.9, 1.0), (0.3, 0.7, 0.05), (0.05, 0.6, 5.0)])
def test_controller_tracks_target_on_the_tilted_model(seed, base_rate, target, init_beta) -> None:
    """Policy validity = μ(β, A) exactly (the unrestricted optimum), batches of 64 Bernoulli samples."""
    ctrl = ValidityTargetController(init_beta, target)
    running = _run(ctrl, 100, lambda t, beta: validity_at(beta, base_rate), seed=seed)
    assert max(abs(m - target) for m in running[50:]) <= 0.05
    assert ctrl.beta == pytest.approx(beta_for(target, base_rate), rel=0.35)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_controller_tracks_target_with_lag_and_drift(seed) -> None:
    """A policy that moves only part-way toward μ(β, A_t) each step (logit space), while its base rate A_t drifts
    from 0.2 to 0.45 as it learns; plus Gaussian noise on the batch rate."""
    target, state = 0.9, {"logit": _logit(0.2)}
    rng = random.Random(100 + seed)

    def validity(t: int, beta: float) -> float:
        a_t = 0.2 + 0.25 * min(t / 100, 1.0)
        state["logit"] += 0.3 * (_logit(validity_at(beta, a_t)) - state["logit"])
        v = 1 / (1 + math.exp(-state["logit"])) + rng.gauss(0, 0.02)
        return min(max(v, 0.0), 1.0)

    ctrl = ValidityTargetController(None, target, base_rate=0.2)
    running = _run(ctrl, 100, validity, seed=seed)
    assert max(abs(m - target) for m in running[50:]) <= 0.05


def test_controller_gain_one_jumps_to_closed_form() -> None:
    """gain 1, no proportional term, a policy at its tilted optimum: one update recovers A and β* exactly."""
    ctrl = ValidityTargetController(2.0, 0.9, gain=1.0, prop_gain=0.0, max_step=100.0)
    assert ctrl.base_rate_estimate == pytest.approx(1 / (1 + math.exp(0.5) / 9))  # logit Â = logit 0.9 − 1/2
    ctrl.update(validity_at(2.0, 0.25), 64)  # first batch initialises the running rate: m = μ(2, 0.25)
    assert ctrl.base_rate_estimate == pytest.approx(0.25, rel=1e-9)
    assert ctrl.beta == pytest.approx(beta_for(0.9, 0.25), rel=1e-9)


def test_controller_direction_clip_and_bounds() -> None:
    ctrl = ValidityTargetController(0.5, 0.8, beta_min=0.1, beta_max=2.0, max_step=0.5, gain=1.0, prop_gain=0.0)
    beta0 = ctrl.beta
    ctrl.update(0.5, 32)  # below target: β must drop (stronger pull toward validity)
    assert ctrl.beta < beta0
    assert 1 / ctrl.beta - 1 / beta0 == pytest.approx(0.5)  # the error (logit 0.5 − logit 0.8 = −1.39) is clipped
    for _ in range(200):
        ctrl.update(1.0, 32)  # always valid: β rises to the cap
    assert ctrl.beta == 2.0
    for _ in range(200):
        ctrl.update(0.0, 32)
    assert ctrl.beta == pytest.approx(0.1, rel=1e-12)


def test_controller_init_from_base_rate_and_state_roundtrip() -> None:
    ctrl = ValidityTargetController(None, 0.9, base_rate=0.3)
    assert ctrl.beta == pytest.approx(beta_for(0.9, 0.3))
    assert ctrl.running_validity is None and ctrl.base_rate_estimate == pytest.approx(0.3)
    ctrl.update(0.5, 16)
    ctrl.update(0.7, 16)
    other = ValidityTargetController(1.0, 0.9)
    other.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))
    assert other.state_dict() == ctrl.state_dict() and other.steps == 2
    assert other.update(0.6, 16) == ctrl.update(0.6, 16)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"init_beta": None, "target_validity": 0.9},
        {"init_beta": 1.0, "target_validity": 1.0},
        {"init_beta": 1.0, "target_validity": 0.9, "beta_min": 2.0, "beta_max": 1.0},
        {"init_beta": 1.0, "target_validity": 0.9, "gain": 3.0},
        {"init_beta": 1.0, "target_validity": 0.9, "prop_gain": -1.0},
        {"init_beta": -1.0, "target_validity": 0.9},
        {"init_beta": None, "target_validity": 0.2, "base_rate": 0.3},
        {"init_beta": 1.0, "target_validity": 0.9, "approach_steps": -1.0},
    ],
)
def test_controller_bad_config(kwargs) -> None:
    with pytest.raises(ConfigError):
        ValidityTargetController(**kwargs)


def test_controller_bad_update() -> None:
    ctrl = ValidityTargetController(1.0, 0.9)
    with pytest.raises(ConfigError):
        ctrl.update(1.5, 8)
    with pytest.raises(ConfigError):
        ctrl.update(0.5, 0)


def test_controller_conditional_integration_freezes_while_validity_approaches() -> None:
    """A policy whose validity ramps toward the target on its own (logit +0.1 per step, whatever β is): with
    ``approach_steps`` the integral (Â) is left alone while the ramp closes the gap, without it Â winds down."""
    target, start = 0.8, 0.3
    on = ValidityTargetController(0.5, target, prop_gain=0.0, approach_steps=30.0)
    off = ValidityTargetController(0.5, target, prop_gain=0.0)
    for t in range(20):  # logit 0.3 + 0.1·t stays below logit 0.8 (the gap is 2.23 logits)
        v = 1 / (1 + math.exp(-(_logit(start) + 0.1 * t)))
        on.update(v, 10**6)
        off.update(v, 10**6)
        if t == 0:
            after_first = on.base_rate_estimate  # the first update has no rate yet: it integrates
            assert not on.frozen
        else:
            assert on.frozen and not off.frozen
    assert on.base_rate_estimate == pytest.approx(after_first, rel=1e-12)
    assert off.base_rate_estimate < 0.05 * after_first  # wound down: β far below where it started
    assert on.beta > 2 * off.beta
    # past the target and still rising: moving away, so the integral acts again and raises β
    beta = on.beta
    on.update(0.95, 10**6)
    assert not on.frozen and on.beta > beta


@pytest.mark.slow
def test_validity_target_recipe_holds_the_band(tmp_path, tiny_path) -> None:
    """Issue 7: the 100-step tiny recipe keeps the logged running validity (the controller's EMA over
    ``validity_horizon`` completions) within ±0.05 of ``target_validity`` on every step 51–100."""
    recipe = ROOT / "recipes/tiny/validity_target.yaml"
    target = yaml.safe_load(recipe.read_text())["target_validity"]
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(recipe), "--output_dir", str(tmp_path),
           "--disable_tqdm", "true", "--save_strategy", "no"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    running = {r["step"]: r["controller/running_validity"] for r in rows if "controller/running_validity" in r}
    late = [running[step] for step in range(51, 101)]
    outside = [(step, round(m, 3)) for step, m in zip(range(51, 101), late, strict=True) if abs(m - target) > 0.05]
    assert not outside, f"running validity outside {target} ± 0.05 at (step, value): {outside}"


def test_controller_log_actuator_is_multiplicative() -> None:
    """``actuator="log"``: the PI law acts on log β (β* ← β*·e^{gain·e}, β = β*·e^{prop_gain·e}), with the caps."""
    ctrl = ValidityTargetController(0.5, 0.8, actuator="log", gain=0.5, prop_gain=0.0, max_step=0.5, beta_min=0.1)
    ctrl.update(0.5, 32)  # below target: the error (−1.39 logits) is clipped to −0.5
    assert ctrl.beta == pytest.approx(0.5 * math.exp(-0.25), rel=1e-12)
    assert ctrl.base_rate_estimate == pytest.approx(1 / (1 + math.exp(-(_logit(0.8) - 1 / ctrl.beta))), rel=1e-12)
    for _ in range(100):
        ctrl.update(0.0, 32)
    assert ctrl.beta == pytest.approx(0.1, rel=1e-12)
    ctrl.update(1.0, 10**6)  # the integral sat at the floor (no wind-up): one step above target lifts β at once
    assert ctrl.beta == pytest.approx(0.1 * math.exp(0.25), rel=1e-12)
    with pytest.raises(ConfigError):
        ValidityTargetController(1.0, 0.9, actuator="sqrt")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lag", [1.0, 0.1])
def test_controller_log_actuator_with_conditional_integration_tracks(seed, lag) -> None:
    """Log actuator plus conditional integration on the tilted model (lag 1: validity = μ(β, A) at once) and on a
    slow learner (logit validity moves 10% of the way to μ(β, A_t) per step, A_t drifting 0.2 → 0.45)."""
    target, state = 0.9, {"logit": _logit(0.2)}

    def validity(t: int, beta: float) -> float:
        a_t = 0.2 + 0.25 * min(t / 100, 1.0)
        goal = _logit(min(validity_at(beta, a_t), 1 - 1e-9))
        state["logit"] += lag * (goal - state["logit"])
        return 1 / (1 + math.exp(-state["logit"]))

    ctrl = ValidityTargetController(None, target, base_rate=0.2, actuator="log", approach_steps=20.0)
    running = _run(ctrl, 100, validity, seed=seed)
    assert max(abs(m - target) for m in running[50:]) <= 0.05


def _controller_trainer(tmp_path, tiny_path):
    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = DivergenceGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
        use_cpu=True, bf16=False, report_to="none", divergence="reverse_kl", divergence_coef=0.1,
        beta_schedule="validity_target", target_validity=0.5, save_strategy="steps", save_steps=1,
    )  # fmt: skip
    return DivergenceGRPOTrainer(
        model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args, train_dataset=get_task("pairsum", size=16),
        processing_class=load_tokenizer(tiny_path),
    )  # fmt: skip


def test_controller_state_is_in_the_checkpoint_before_it_looks_complete(tmp_path, tiny_path, monkeypatch) -> None:
    """A checkpoint is complete once ``trainer_state.json`` exists (what resume looks for); the controller's state
    must already be there then, so a kill between the two writes cannot leave a complete-looking checkpoint that
    resumes with a restarted β. Resuming from a checkpoint without it is an error, not a silent restart."""
    from transformers.trainer_callback import TrainerState

    from rlvr_div.trainers.validity_target import CONTROLLER_STATE

    trainer = _controller_trainer(tmp_path, tiny_path)
    trainer.create_optimizer_and_scheduler(num_training_steps=3)
    trainer.plugin("validity_target").controller.update(0.9, 64)
    trainer.state.global_step = 3
    present_at_completion = []
    save_state = TrainerState.save_to_json

    def save_to_json(state, path):
        present_at_completion.append((Path(path).parent / CONTROLLER_STATE).is_file())
        save_state(state, path)

    monkeypatch.setattr(TrainerState, "save_to_json", save_to_json)
    trainer._save_checkpoint(trainer.model, None)
    folder = tmp_path / "checkpoint-3"
    assert present_at_completion == [True] and (folder / "trainer_state.json").is_file()
    saved = json.loads((folder / CONTROLLER_STATE).read_text())
    assert saved == json.loads(json.dumps(trainer.plugin("validity_target").controller.state_dict()))
    (folder / CONTROLLER_STATE).unlink()
    with pytest.raises(ConfigError, match=CONTROLLER_STATE):
        trainer._load_optimizer_and_scheduler(str(folder))


def test_the_controller_moves_the_live_coefficient_not_trls_switch(tmp_path, tiny_path) -> None:
    """The divergence term's live coefficient is the trainer's ``kl_coef``: it starts at divergence_coef, the
    controller moves it (and a checkpoint restores it), the divergence term weights its loss by it; TRL's ``beta``
    only switches the reference log-probs on and stays put."""
    import torch

    trainer = _controller_trainer(tmp_path, tiny_path)
    assert trainer.kl_coef == 0.1 and trainer.beta == 0.1
    plugin = trainer.plugin("validity_target")
    trainer.model.train()  # the controller acts on training batches
    for _ in range(20):
        plugin.on_rewards(torch.zeros(64, 1), [], [], torch.ones(64), {"valid_rate": 0.95})
    assert trainer.kl_coef == plugin.controller.beta != 0.1 and trainer.beta == 0.1
    state = plugin.controller.state_dict()
    trainer.kl_coef = 0.1
    (tmp_path / "ck").mkdir()
    plugin.save(tmp_path / "ck")
    plugin.load(tmp_path / "ck")
    assert trainer.kl_coef == state["beta"] and trainer.beta == 0.1


def test_mean_validity_over_prompts_is_the_mean_of_the_closed_form() -> None:
    from rlvr_div.theory.calibration import mean_validity_at

    rates = [0.1, 0.5, 0.9]
    assert mean_validity_at(0.5, rates) == pytest.approx(sum(validity_at(0.5, a) for a in rates) / 3, rel=1e-15)
    assert mean_validity_at(0.0, rates) == 1.0
    assert 0 < mean_validity_at(1.0, [0.0, 1.0]) < 1  # A = 0 and 1 are clipped into (0, 1)
