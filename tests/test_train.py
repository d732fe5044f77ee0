"""`rlvr-div train`: bad input fails in one line before any model loads; a short run writes its outputs; a run
killed with SIGKILL resumes from its last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main
from rlvr_div.train import last_complete_checkpoint

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--task", "nope"], "unknown task 'nope'"),
        (["--rewards", "nope"], "unknown reward 'nope'"),
        (["--frobnicate", "1"], "unknown command line key 'frobnicate'"),
        (["--per_device_train_batch_size", "12"], "must be divisible by num_generations"),
        (["--model_name_or_path", "/no/such/model"], "model path '/no/such/model' does not exist"),
        (["--learning_rate", "abc"], "learning_rate"),
        (["--trainer", "nope"], "unknown trainer 'nope'"),
        (["--resume_from_checkpoint", "/no/such/ckpt"], "resume_from_checkpoint"),
        (["--trainer", "divergence", "--validity_reward_index", "1"], "validity_reward_index=1 but the rewards are"),
    ],
)
def test_bad_input_is_one_line_exit_2(extra, message, capsys, no_model_loads, tmp_path):
    rc = cli_main(["train", "--config", RECIPE, "--output_dir", str(tmp_path), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_unknown_yaml_key(tmp_path, capsys, no_model_loads):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(RECIPE).read_text() + "bogus_key: 1\n")
    assert cli_main(["train", "--config", str(bad)]) == 2
    assert "unknown recipe key 'bogus_key'" in capsys.readouterr().err


def _train_cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "rlvr_div.train", "--config", RECIPE, "--output_dir", str(out),
        "--disable_tqdm", "true", *extra,
    ]  # fmt: skip


def test_console_logs_false_keeps_logs_out_of_the_console_but_in_metrics(tmp_path, tiny_path):
    out = tmp_path / "run"
    cmd = _train_cmd(out, "--max_steps", "2", "--save_steps", "100", "--console_logs", "false")
    cmd[cmd.index("--disable_tqdm") + 1] = "false"  # the step bar stays
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert "'loss'" not in proc.stdout + proc.stderr
    assert "2/2" in proc.stderr  # the progress bar reached the last step
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == [1, 2]


def test_short_run_writes_model_recipe_and_metrics(tmp_path, tiny_path):
    out = tmp_path / "run"
    subprocess.run(_train_cmd(out, "--max_steps", "3", "--save_steps", "100"), check=True, capture_output=True)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "reward" in x] == [1, 2, 3]
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert "task: arith" in (out / "recipe.yaml").read_text()


def test_lora_run_saves_adapter(tmp_path, tiny_path):
    out = tmp_path / "lora"
    subprocess.run(
        _train_cmd(out, "--max_steps", "2", "--use_peft", "true", "--lora_target_modules", "all-linear"),
        check=True,
        capture_output=True,
    )
    assert (out / "adapter_config.json").exists()


def test_killed_run_resumes_to_max_steps(tmp_path, tiny_path):
    out = tmp_path / "resume"
    args = ["--max_steps", "12", "--save_steps", "2"]
    proc = subprocess.Popen(_train_cmd(out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (out / "checkpoint-4").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "checkpoint-12").exists()
    res = subprocess.run(_train_cmd(out, *args, "--resume_from_checkpoint", "true"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 12 and 12 in steps


def test_resume_skips_a_checkpoint_interrupted_while_saving(tmp_path):
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    (tmp_path / "checkpoint-6" / "trainer_state.json").write_text('{"global_st')  # killed mid-write
    assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
    (tmp_path / "checkpoint-4" / "trainer_state.json").unlink()
    assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert last_complete_checkpoint(str(tmp_path / "missing")) is None


def test_two_process_cpu_launch(tmp_path, tiny_path):
    out = tmp_path / "ddp"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2"]
    cmd = launcher + _train_cmd(out, "--max_steps", "3")[1:]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert steps == [1, 2, 3]
