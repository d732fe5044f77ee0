"""Every bench/ script runs (its `--smoke` mode: the smallest setting, one repetition), so a new check in the code it
drives cannot break a benchmark unnoticed. The numbers a smoke run prints mean nothing; only that it finishes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("bench_*.py"))


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_smoke_{name[:-3]}", BENCH / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_script_has_a_smoke_mode():
    assert SCRIPTS == [
        "bench_bf16_sampling_check.py",
        "bench_divergence_step.py",
        "bench_dph_step.py",
        "bench_exact_measure.py",
        "bench_logprob_memory.py",
        "bench_monitor_cost.py",
        "bench_real_lm_sampling.py",
        "bench_real_lm_step.py",
        "bench_rewards.py",
        "bench_sampled_vs_exact.py",
        "bench_sampling.py",
        "bench_step_breakdown.py",
        "bench_threads.py",
    ]
    for name in SCRIPTS:
        assert "--smoke" in (BENCH / name).read_text(), name


# the step breakdown's smoke takes one arm in two variants (the A/B of settings, and the timing of the project
# trainer's own rollouts) in place of its two default arms: two training processes either way
EXTRA = {
    "bench_step_breakdown.py": ["--arms", "alpha_dpg", "--variant", "trl:rollout_sampler=trl",
                                "--variant", "loop:rollout_sampler=rlvr_div"],
}  # fmt: skip


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_script_runs_in_smoke_mode(name, tiny_path, capsys, tmp_path):
    record = tmp_path / "result.json"
    extra = ["--json", str(record)] if name == "bench_real_lm_step.py" else EXTRA.get(name, [])
    if name == "bench_bf16_sampling_check.py":  # its two evaluations go to a temporary directory
        extra = ["--out", str(tmp_path / "runs"), "--json", str(record)]
    _load(name).main(["--smoke", *extra])
    out = capsys.readouterr().out
    assert out.strip(), f"{name} printed nothing"
    if name == "bench_step_breakdown.py":  # both variants timed, generation included
        assert "alpha_dpg: loop / trl:" in out and "x generation" in out, out
    if name == "bench_real_lm_step.py":  # its JSON says what made it
        saved = json.loads(record.read_text())
        assert saved["command"].endswith("--smoke --json " + str(record)) and saved["commit"]
        assert set(saved["arms"]) == {"grpo", "alpha_dpg"}
    if name == "bench_bf16_sampling_check.py":  # float32 twice where bfloat16 is not native: identical, TV 0
        saved = json.loads(record.read_text())
        assert saved["problems"] == 4 and saved["n"] == 2 and saved["token_tv"]["tokens"] > 0
        if saved["second_dtype"] == "float32":
            assert saved["identical_completions"] == 1.0 and saved["token_tv"]["max"] == 0.0


def test_step_breakdown_variants_parse_names_and_yaml_values():
    import argparse

    bench = _load("bench_step_breakdown.py")
    ap = argparse.ArgumentParser()
    assert bench.parse_variant("loop:rollout_sampler=rlvr_div,lora_dropout=0", ap) == (
        "loop",
        {"rollout_sampler": "rlvr_div", "lora_dropout": 0},
    )
    assert bench.parse_variant("plain:", ap) == ("plain", {})
    for bad in ("noname", ":a=1", "x:a", "a@b:c=1"):
        with pytest.raises(SystemExit):
            bench.parse_variant(bad, ap)


def test_monitor_cost_reads_step_and_measurement_times_from_one_runs_metrics(tmp_path):
    bench = _load("bench_monitor_cost.py")
    lines = [{"step": 0, "monitor/seconds": 2.0}, {"step": 1, "step_time": 9.0}, {"step": 2, "step_time": 1.0},
             {"step": 2, "step_time": None, "monitor/seconds": 0.5}, {"step": 3, "step_time": 1.5},
             {"step": 4, "step_time": 0.5, "monitor/seconds": 0.7}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    steps, measurements = bench.read_times(tmp_path / "metrics.jsonl")
    assert steps == [9.0, 1.0, 1.5, 0.5] and measurements == [(0, 2.0), (2, 0.5), (4, 0.7)]
    cost = bench.round_cost(steps, measurements, every=2)  # the warm-up step and the base's measurement left out
    assert cost == {"step_s": 1.0, "measurement_s": 0.6, "base_s": 2.0, "added": 0.3}
    with pytest.raises(SystemExit, match="raise --steps"):
        bench.round_cost(steps, [(0, 2.0)], every=2)


def test_step_breakdown_reports_a_steps_memory_alone_at_a_chosen_size(tiny_path, capsys, tmp_path):
    """``--memory-only`` (issue 61, item 3): each arm's peak resident set and its resident set once built, the step's
    token counts at ``--rollouts`` × ``--completion-tokens``, and no times (a busy machine measures memory only)."""
    bench = _load("bench_step_breakdown.py")
    record = tmp_path / "memory.json"
    argv = ["--smoke", "--rollouts", "16", "--completion-tokens", "6", "--full-length", "--memory-only",
            "--set", "temperature=0.9", "--json", str(record)]  # fmt: skip
    bench.main(argv)
    saved = json.loads(record.read_text())
    assert saved["memory_only"] is True and saved["matmul_flops32"] is None
    assert saved["settings"] == {
        "per_device_train_batch_size": 16,
        "max_completion_length": 6,
        "temperature": 0.9,
        "generation_kwargs": {"min_new_tokens": 6},
    }
    for arm in ("grpo_beta004", "alpha_dpg"):
        result = saved["arms"][arm]
        assert "wall" not in result and "floor" not in result
        assert 0 < result["memory"]["rss_built_mib"] <= result["memory"]["peak_rss_mib"]
        # how much each phase raised the peak: none below 0, none above the step's whole rise
        rises = result["raised_mib"]
        assert set(rises) == {"generation", "rewards", "forward_grad", "forward_no_grad", "backward"}
        assert all(0 <= v <= result["memory"]["peak_rss_mib"] for v in rises.values())
        assert result["tokens"]["samples"] == 16 and result["tokens"]["completion_tokens"] == 16 * 6  # full length
    assert "peak RSS" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "value"), [("--rollouts", "10"), ("--rollouts", "0"), ("--completion-tokens", "0"),
                                            ("--full-length", None), ("--set", "lora_dropout")])  # fmt: skip
def test_step_breakdown_refuses_a_step_size_it_cannot_train_before_any_run(flag, value, capsys):
    with pytest.raises(SystemExit):
        _load("bench_step_breakdown.py").main(["--smoke", flag, *([value] if value else [])])
    err = capsys.readouterr().err
    assert any(x in err for x in ("must be", "needs --completion-tokens", "takes KEY=VALUE")), err
