"""One writer per output directory (:mod:`rlvr_div.runs.run_lock`): while another process holds a directory, a training
run or an evaluation on it stops in one line naming that process's PID, before anything is written; a lock left by a
process killed with SIGKILL is taken by the next writer."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.runs.run_lock import directory_lock, holder, lock_paths

ROOT = Path(__file__).resolve().parents[1]
HOLD = (  # python -c HOLD DIRECTORY WHAT: hold DIRECTORY's lock as WHAT, say so, sleep
    "import sys, time\nfrom rlvr_div.runs.run_lock import directory_lock\n"
    "with directory_lock(sys.argv[1], sys.argv[2], '--output-dir'):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(120)\n"
)


@contextmanager
def held_elsewhere(directory: Path, what: str) -> Iterator[subprocess.Popen]:
    """Another process holding ``directory``'s lock (killed on exit)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), what], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_a_second_training_run_on_the_same_output_dir_is_refused(tmp_path, capsys, no_model_loads):
    """`rlvr-div train ... --resume_from_checkpoint true` while another run holds the directory: one line naming the
    holder's PID, and the directory is as it was (no metrics.jsonl cut, no checkpoint deleted)."""
    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}\n')
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    before = _tree(out)
    args = ["train", "--config", "recipes/tiny/grpo.yaml", "--output_dir", str(out), "--resume_from_checkpoint", "true"]
    with held_elsewhere(out, "training run") as proc:
        assert cli_main(args) == 2
        line = _one_line(capsys)
    assert f"{out} is being written by another training run" in line and f"held by PID {proc.pid};" in line, line
    assert "choose another --output_dir" in line, line
    assert _tree(out) == before


def test_a_second_evaluation_on_the_same_output_dir_is_refused_then_runs(tmp_path, capsys, no_model_loads):
    """`rlvr-div eval --output-dir D` while another evaluation holds D: one line with its PID, nothing written; once
    that process is gone the same command runs and writes each problem once."""
    rows = [{"prompt": f"{i}+1=", "completions": [str(i + 1), "0"], "answer": str(i + 1)} for i in range(3)]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    args = ["eval", "--samples", f"m={tmp_path / 's.jsonl'}", "--reward", "arith_exact", "--quiet"]
    with held_elsewhere(out, "evaluation") as proc:
        assert cli_main([*args, "--output-dir", str(out)]) == 2
        line = _one_line(capsys)
        assert f"another evaluation (lock: {lock_paths(out)[0]}) held by PID {proc.pid};" in line, line
        assert "choose another --output-dir" in line, line
        assert not out.exists()
    assert cli_main([*args, "--output-dir", str(out)]) == 0
    lines = (out / "m" / "samples.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["index"] for x in lines) == [0, 1, 2]


def test_a_refused_evaluation_takes_no_lock(tmp_path, capsys, no_model_loads):
    """A bad argument is one line before the lock is taken: no lock file, no output directory, and a holder of
    the directory is not even asked."""
    out = tmp_path / "eval"
    bad = ["eval", "--samples", f"m={tmp_path / 'missing.jsonl'}", "--reward", "arith_exact", "--quiet"]
    assert cli_main([*bad, "--output-dir", str(out)]) == 2
    assert "missing.jsonl" in _one_line(capsys)
    assert not out.exists() and not any(p.exists() for p in lock_paths(out))
    with held_elsewhere(out, "evaluation"):  # the argument error, not the lock's refusal
        assert cli_main([*bad, "--output-dir", str(out)]) == 2
        assert "missing.jsonl" in _one_line(capsys)


def test_a_killed_holders_lock_is_taken_over(tmp_path):
    """SIGKILL leaves the lock file and the dead holder's PID entry; the OS released the lock, so the next writer
    takes it, names itself while it holds it, and removes its entry and the lock file when done. Re-entrant within a
    process."""
    import os

    out = tmp_path / "out"
    with held_elsewhere(out, "training run") as proc:
        with pytest.raises(ConfigError, match=f"held by PID {proc.pid};"):
            with directory_lock(out, "evaluation", "--output-dir"):
                pass
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock, pid_file = lock_paths(out)
    assert json.loads(pid_file.read_text())["pid"] == proc.pid  # stale: nothing ran to remove it
    with directory_lock(out, "evaluation", "--output-dir") as path, directory_lock(out, "evaluation", "--output-dir"):
        assert path == lock and holder(out)["pid"] == os.getpid()
    assert not lock.exists() and not pid_file.exists()
    if shutil.which("git") and (ROOT / ".git").exists():  # the lock files stay out of git wherever they land
        names = [f"runs/tiny/.grpo{s}.lock" for s in ("", ".pid")] + ["bench/results/c/runs/t/m/v/.seed1.pid.lock"]
        res = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
        assert res.stdout.split() == names


def _read_only_parent(monkeypatch, out: Path) -> None:
    """Locks may be created only inside ``out`` (its parent is read-only, as for a mounted volume)."""
    import rlvr_div.runs.run_lock as run_lock

    real = run_lock._acquire

    def read_only_parent(path: Path):
        if path.parent != out:
            raise PermissionError(errno.EROFS, "Read-only file system")
        return real(path)

    monkeypatch.setattr(run_lock, "_acquire", read_only_parent)


def test_an_unwritable_parent_puts_the_lock_inside_and_a_file_parent_is_one_line(tmp_path, monkeypatch):

    out = tmp_path / "mounted"
    out.mkdir()
    _read_only_parent(monkeypatch, out)
    with directory_lock(out, "evaluation", "--output-dir") as path:
        assert path == out / ".rlvr-div.lock" and holder(out)["what"] == "evaluation"
    monkeypatch.undo()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="cannot create the lock .* beside --output_dir"):
        with directory_lock(tmp_path / "a_file" / "run", "training run", "--output_dir"):
            pass


def test_starting_over_keeps_a_lock_held_inside_the_directory(tmp_path, monkeypatch):
    """--fresh of the benchmark and the β study clears the directory but not the lock a holder keeps inside it (a
    parent that is not writable): deleting it would let a second writer in beside the first."""
    import rlvr_div.runs.run_lock as run_lock
    from collapse_bench.beta_spec import load_study
    from collapse_bench.beta_study import run_study

    out = tmp_path / "mounted"
    (out / "runs" / "old").mkdir(parents=True)
    (out / "study.json").write_text("{}")
    _read_only_parent(monkeypatch, out)
    with directory_lock(out, "beta study", "--out") as path:
        run_lock.clear_directory(out)
        assert sorted(p.name for p in out.iterdir()) == [".rlvr-div.lock", ".rlvr-div.pid.lock"]
        assert holder(out)["what"] == "beta study" and path.is_file()
        study = load_study(ROOT / "bench" / "beta_v2_anneal.yaml")

        class Stop(Exception):
            pass

        def stop(*args):
            raise Stop

        monkeypatch.setattr("collapse_bench.beta_study.measure_base", stop)
        with pytest.raises(Stop):  # run_study's --fresh start, stopped before it measures the base
            run_study(study, out, fresh=True, progress=False)
        assert {".rlvr-div.lock", ".rlvr-div.pid.lock"} <= {p.name for p in out.iterdir()}
