"""A full device ends in one ``error:`` line (exit code 2) and loses nothing (issue 60, item 2): too little space is
refused before any model loads; a device that fills up while training stops the run with the step reached, the last
complete checkpoint and the command that resumes it, and that command, once space is freed, finishes the run. The
real cases run on a small tmpfs, where root may mount one; the rules are also checked without it."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main
from rlvr_div.cli import run_command
from rlvr_div.errors import ConfigError
from rlvr_div.runs import disk_space
from rlvr_div.runs.disk_space import MIN_FREE_BYTES, checkpoint_bytes, out_of_space
from rlvr_div.runs.run_lock import lock_paths

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes" / "tiny" / "grpo.yaml")


def _one_line(capsys) -> str:
    """The one ``error:`` line on stderr, its last line (model loading may draw its progress bar before)."""
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def _can_mount() -> bool:
    if os.geteuid() != 0 or sys.platform != "linux":
        return False
    probe = Path("/tmp") / f"rlvr-div-tmpfs-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True)
    if ok.returncode == 0:
        subprocess.run(["umount", str(probe)], check=True)
    probe.rmdir()
    return ok.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root on Linux")


@pytest.fixture
def small_device(tmp_path):
    """A directory on a tmpfs of a given size in MB (``mount(size)``; ``remount(size)`` resizes it)."""
    where = tmp_path / "dev"
    where.mkdir()

    class Device:
        path = where

        def mount(self, mb: int) -> Path:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", str(where)], check=True)
            return where

        def remount(self, mb: int) -> None:
            subprocess.run(["mount", "-o", f"remount,size={mb}m", str(where)], check=True)

    yield Device()
    subprocess.run(["umount", str(where)], capture_output=True)


# ------------------------------------------------------------------------------------------------- the rules


def test_full_device_errors_are_recognised_and_others_are_not(tmp_path, monkeypatch):
    assert out_of_space(OSError(errno.ENOSPC, "No space left on device"))
    assert out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert out_of_space(wrapped)
    assert out_of_space(Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert not out_of_space(OSError(errno.EACCES, "Permission denied"))
    assert not out_of_space(ValueError("bad value"))
    torch_failure = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    assert not out_of_space(torch_failure)  # no directory to look at: its message names no cause
    monkeypatch.setattr(disk_space, "free_bytes", lambda d: 10**9)
    assert not out_of_space(torch_failure, tmp_path)
    monkeypatch.setattr(disk_space, "free_bytes", lambda d: 1000)
    assert out_of_space(torch_failure, tmp_path)


def test_a_checkpoint_is_three_copies_of_the_weights_in_full_fine_tuning_only(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"0" * 1000)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert checkpoint_bytes(tmp_path, peft=False) == 3000
    assert checkpoint_bytes(tmp_path, peft=True) == 0
    assert checkpoint_bytes(tmp_path / "missing", peft=False) == 0 and checkpoint_bytes(None, peft=False) == 0


def test_a_command_that_runs_out_of_space_is_one_line(capsys):
    def fills_the_disk(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/samples.jsonl")

    def fails_otherwise(argv):
        raise OSError(errno.EIO, "Input/output error")

    assert run_command(fills_the_disk, []) == 2
    line = _one_line(capsys)
    assert "no space left on the device writing /data/out/samples.jsonl; free space" in line, line
    with pytest.raises(OSError):
        run_command(fails_otherwise, [])


def test_train_refuses_a_model_whose_checkpoint_would_not_fit(tmp_path, monkeypatch, no_model_loads):
    from rlvr_div.recipe import parse_recipe, validate

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"0" * 100)
    script, training, cfg = parse_recipe(["--config", RECIPE, "--output_dir", str(tmp_path / "run")])
    cfg.model_name_or_path = str(model)
    monkeypatch.setattr("rlvr_div.models.lora_targets.check_lora_targets", lambda *a: None)
    monkeypatch.setattr(disk_space, "free_bytes", lambda d: MIN_FREE_BYTES + 1)
    validate(script, training, cfg)  # 300 bytes needed: the minimum rules
    (model / "model.safetensors").write_bytes(b"0" * (MIN_FREE_BYTES // 2))
    with pytest.raises(ConfigError, match=r"MB free; one checkpoint of this run \(weights and Adam state\) needs"):
        validate(script, training, cfg)


# ------------------------------------------------------------------------------------------- on a real tmpfs


@needs_tmpfs
@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_device_with_too_little_space_is_one_line_before_anything(command, small_device, tmp_path, capsys,
                                                                      no_model_loads):  # fmt: skip
    device = small_device.mount(4)  # below MIN_FREE_BYTES
    out = device / "out"
    if command == "train":
        args = ["train", "--config", RECIPE, "--output_dir", str(out)]
    else:
        rows = [{"prompt": "1+1=", "completions": ["2", "3"], "answer": "2"}]
        samples = tmp_path / "s.jsonl"
        samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
        args = ["eval", "--samples", f"m={samples}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)]
    assert cli_main(args) == 2
    line = _one_line(capsys)
    assert f"{out} is on a device with 4.0 MB free; it needs at least 16.0 MB" in line, line
    assert list(device.iterdir()) == [] and not any(p.exists() for p in lock_paths(out))


@needs_tmpfs
def test_training_that_fills_the_device_stops_in_one_line_and_resumes_once_space_is_freed(small_device, capsys,
                                                                                         monkeypatch):  # fmt: skip
    """The tiny run's checkpoints (about 3.5 MB each, all kept) fill a 17 MB device part-way; the line names the
    last complete checkpoint and the resume command, which finishes the run on the enlarged device."""
    out = small_device.mount(17) / "run"
    argv = ["--config", RECIPE, "--output_dir", str(out), "--max_steps", "20", "--save_steps", "2",
            "--save_total_limit", "10", "--per_device_train_batch_size", "16", "--disable_tqdm", "true"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["rlvr-div", "train", *argv])  # as typed: the line gives the resume command
    assert cli_main(["train", *argv]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"error: no space left on the device of --output_dir {out} ("), line
    assert "last complete checkpoint: " in line, line
    stopped = int(line.split("stopped at step ", 1)[1].split("/", 1)[0])
    assert 0 < stopped < 20, line
    resume = line.split("free space, then: ", 1)[1]
    assert resume.endswith("--resume_from_checkpoint true"), line
    small_device.remount(200)
    assert cli_main(["train", *argv, "--resume_from_checkpoint", "true"]) == 0
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 20
