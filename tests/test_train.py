"""`rlvr-div train`: bad input (names, paths, value ranges, an output_dir holding a run) fails in one line before any
model loads; a short run writes its outputs and prints a step bar, not log dicts; a run killed with SIGKILL resumes
from its last checkpoint with each step logged once; Ctrl-C prints one line with the command that resumes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from launchers import TWO_PROCESSES, processes_of
from train_checks import assert_train_refuses

from rlvr_div.cli import main as cli_main
from rlvr_div.run_dir import last_complete_checkpoint

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
        # value ranges, before the load; a negative number after a space is a value, as argparse users expect
        (["--learning_rate", "-1e-4"], "learning_rate=-0.0001 is out of range: it must be > 0"),
        (["--learning_rate=-1e-4"], "learning_rate=-0.0001 is out of range"),
        (["--temperature=-1"], "temperature=-1.0 is out of range: it must be > 0"),
        (["--top_p", "1.5"], "top_p=1.5 is out of range: it must be in (0, 1]"),
        (["--max_steps=-5"], "max_steps=-5 is out of range: give a number of steps >= 1, or -1 to train"),
        (["--max_steps", "0"], "max_steps=0 is out of range"),
        (["--num_train_epochs", "0"], "num_train_epochs=0.0 is out of range"),
        (["--max_completion_length", "0"], "max_completion_length=0 is out of range: it must be >= 1"),
        (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps=0 is out of range"),
        (["--weight_decay", "-0.1"], "weight_decay=-0.1 is out of range: it must be >= 0"),
        (["--use_peft", "true", "--lora_dropout", "1"], "lora_dropout=1.0 is out of range: it must be in [0, 1)"),
        (
            ["--trainer", "divergence", "--rehearsal_coef", "-1"],
            "rehearsal_coef=-1.0 acts only with rehearsal_path",
        ),
        # a path on a task that reads no data; the hub offline
        (
            ["--data_path", "x.jsonl"],
            "task 'arith' reads no data, so data_path does not apply; tasks that take a data_path: ",
        ),  # fmt: skip
        (["--model_name_or_path", "org/nope"], "not in the Hugging Face cache, and HF_HUB_OFFLINE is set"),
        (["--push_to_hub", "true"], "push_to_hub=true needs the Hugging Face Hub, but HF_HUB_OFFLINE is set"),
        (["--resume_from_checkpoint", "true", "--overwrite_output_dir", "true"], "both set: choose one"),
    ],
)
def test_bad_input_is_one_line_exit_2(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


def test_unknown_yaml_key(tmp_path, capsys, no_model_loads):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(RECIPE).read_text() + "bogus_key: 1\n")
    assert cli_main(["train", "--config", str(bad)]) == 2
    assert "unknown recipe key 'bogus_key'" in capsys.readouterr().err


def test_relative_paths_are_read_from_the_current_directory(tmp_path, capsys, no_model_loads, monkeypatch):
    """One rule for `train` and `rehearse`: a relative path in a recipe or on the command line is read from the
    current directory (as in TRL); run elsewhere, the one-line error says which directory that was."""
    from rlvr_div.recipe import parse_recipe, validate

    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "data" / "train.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    recipe = project / "recipes" / "gsm8k.yaml"
    recipe.write_text(
        "model_name_or_path: tiny\ntrainer: divergence\ntask: gsm8k\ndata_path: data/train.jsonl\n"
        "rehearsal_path: runs/rehearsal\noutput_dir: runs/run\nper_device_train_batch_size: 8\nnum_generations: 8\n"
        "use_cpu: true\nbf16: false\n"
    )
    monkeypatch.chdir(project)  # where the recipe's paths were written for
    script, training, model = parse_recipe(["--config", "recipes/gsm8k.yaml"])
    validate(script, training, model, check_inputs=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for command in ("train", "rehearse"):
        assert cli_main([command, "--config", str(recipe)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "data/train.jsonl" in err[0], err
        assert f"relative paths are read from the current directory, {elsewhere}" in err[0], err
    # the same relative path on the command line, from the project directory, is found
    monkeypatch.chdir(project)
    script, training, model = parse_recipe(["--config", str(recipe), "--data_path", "data/train.jsonl"])
    validate(script, training, model, check_inputs=False)


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
    cmd = _train_cmd(out, "--max_steps", "3", "--save_steps", "100")
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    console = proc.stdout + proc.stderr
    assert "'loss'" not in console and "FutureWarning" not in console  # log dicts are off by default
    assert "trained 3 steps in " in proc.stdout and f"in {out}" in proc.stdout
    assert "training computes in float32 on the CPU; CPU with" in console  # the precision path, in one line
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


def _steps(out: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_killed_run_resumes_to_max_steps_with_each_step_logged_once(tmp_path, tiny_path, capsys):
    out = tmp_path / "resume"
    args = ["--max_steps", "12", "--save_steps", "2"]
    proc = subprocess.Popen(_train_cmd(out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    # checkpoint-6 appearing means checkpoint-4 is complete (saves are sequential): the resume starts at step >= 4
    while not (out / "checkpoint-6").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "checkpoint-12").exists()
    killed_at = max(_steps(out))
    # the same command again is refused before any model loads, naming the two ways on
    assert cli_main(["train", *_train_cmd(out, *args)[3:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a partial run (last complete checkpoint: step" in err[0], err
    assert "--resume_from_checkpoint true" in err[0] and "--overwrite_output_dir true" in err[0]
    res = subprocess.run(_train_cmd(out, *args, "--resume_from_checkpoint", "true"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12
    assert _steps(out) == list(range(1, 13))  # each step once, although steps up to killed_at were logged twice
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    first, resumed = recipe["history"]
    assert first["action"] == "new" and resumed["action"] == "resume" and resumed["step"] >= 4
    assert resumed["metrics_lines_dropped"] - (killed_at - resumed["step"]) in (0, 1)  # (+1: a line torn by the kill)
    assert resumed["checkpoint"].endswith(f"checkpoint-{resumed['step']}")
    step = resumed["step"]  # the summary counts the steps this invocation trained
    assert f"trained {12 - step} steps (resumed after step {step}, now at 12)" in res.stdout, res.stdout[-500:]
    assert "missing keys" not in res.stderr and "is_gradient_checkpointing" not in res.stderr
    # finished: a rerun is refused again, and --overwrite_output_dir starts over at step 0
    assert cli_main(["train", *_train_cmd(out, *args)[3:]]) == 2
    assert "holds a finished run (12 steps)" in capsys.readouterr().err
    res = subprocess.run(_train_cmd(out, "--max_steps", "2", "--save_steps", "100", "--overwrite_output_dir", "true"),
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert _steps(out) == [1, 2] and not (out / "checkpoint-12").exists()
    (entry,) = yaml.safe_load((out / "recipe.yaml").read_text())["history"]
    assert entry["action"] == "overwrite" and "checkpoint-12" in entry["removed"]


def test_ctrl_c_prints_one_line_with_the_resume_command(tmp_path, tiny_path):
    out = tmp_path / "interrupted"
    args = ["--config", RECIPE, "--output_dir", str(out), "--max_steps", "10", "--save_steps", "2"]
    cmd = [sys.executable, "-m", "rlvr_div", "train", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.time() + 120
    # trainer_state.json is written last into a checkpoint: once it is there, checkpoint-2 is complete
    while not (out / "checkpoint-2" / "trainer_state.json").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted at step ") and "/10; last complete checkpoint: " in last, last
    command = shlex.split(last.split("; to continue: ", 1)[1])
    assert command[1:] == ["-m", "rlvr_div", "train", *args, "--resume_from_checkpoint", "true"]
    res = subprocess.run(command, capture_output=True, text=True)  # exactly as printed
    assert res.returncode == 0, res.stderr[-3000:]
    assert _steps(out) == list(range(1, 11))


def test_python_m_rlvr_div_is_the_cli():
    res = subprocess.run([sys.executable, "-m", "rlvr_div", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "usage: rlvr-div COMMAND" in res.stdout and "train" in res.stdout


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
    cmd = TWO_PROCESSES + _train_cmd(out, "--max_steps", "3")[1:]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert processes_of(out) == 2
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert steps == [1, 2, 3]


@pytest.mark.parametrize("recipe", ["forward_kl", "alpha_dpg"])
def test_train_help_lists_every_key_of_the_recipes_trainer(recipe, capsys, no_model_loads):
    """``rlvr-div train --config RECIPE --help`` prints the trainer's keys, the plug-ins' included (argparse
    %-formats each help text: a bare '%' in one broke the whole listing)."""
    from rlvr_div.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["train", "--config", str(Path(RECIPE).parent / f"{recipe}.yaml"), "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None) and "--simko_tau" in out and "--rehearsal_k" in out, out[-2000:]
