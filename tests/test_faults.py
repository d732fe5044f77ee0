"""Faults a user meets end in one ``error:`` line (exit code 2), before any model loads and before anything is
written: a read-only or file ``--output-dir``, a recipe that is not UTF-8, a non-finite reward setting, a
``module:callable`` reward that is no reward (never called), ``train`` without ``--config``, an impossible ``--n``;
and a run's lock file does not outlive the run (issue 60)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

import rlvr_div.runs.run_lock as run_lock
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.runs.run_lock import directory_lock, lock_paths

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes" / "tiny" / "grpo.yaml")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _samples(tmp_path: Path) -> str:
    """A three-problem sample log to score (eval without a model)."""
    rows = [{"prompt": f"{i}+1=", "completions": [str(i + 1), "0"], "answer": str(i + 1)} for i in range(3)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _read_only(monkeypatch, directory: Path) -> None:
    """``directory`` refuses new files: its mode where that binds, and (root ignores modes) a probe there fails as
    on a read-only mount."""
    directory.chmod(0o555)
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's name)
        if dir is not None and Path(dir).resolve() == directory.resolve():
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


# ----------------------------------------------------------------------------------------- output directories


@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_read_only_output_dir_is_one_line_before_the_model_loads(command, tmp_path, monkeypatch, capsys,
                                                                   no_model_loads):  # fmt: skip
    out = tmp_path / "ro"
    out.mkdir()
    _read_only(monkeypatch, out)
    try:
        if command == "train":
            args = ["train", "--config", RECIPE, "--output_dir", str(out)]
        else:
            args = ["eval", "--samples", f"m={_samples(tmp_path)}", "--reward", "arith_exact", "--quiet",
                    "--output-dir", str(out)]  # fmt: skip
        assert cli_main(args) == 2
        line = _one_line(capsys)
    finally:
        out.chmod(0o755)
    assert f"{out} is not writable (" in line and "choose a writable --output" in line, line
    assert list(out.iterdir()) == [] and not any(p.exists() for p in lock_paths(out)), line


def test_an_output_dir_that_does_not_exist_under_a_read_only_parent_is_one_line(tmp_path, monkeypatch):
    parent = tmp_path / "ro"
    parent.mkdir()
    _read_only(monkeypatch, parent)
    try:
        with pytest.raises(ConfigError, match=r"ro, where --output_dir .*run would be made, is not writable"):
            with directory_lock(parent / "a" / "run", "training run", "--output_dir"):
                pass
    finally:
        parent.chmod(0o755)


def test_eval_output_dir_that_is_a_file_is_one_line_and_leaves_no_lock(tmp_path, capsys, no_model_loads):
    out = tmp_path / "afile"
    out.write_text("mine\n")
    args = ["eval", "--samples", f"m={_samples(tmp_path)}", "--reward", "arith_exact", "--quiet"]
    assert cli_main([*args, "--output-dir", str(out)]) == 2
    line = _one_line(capsys)
    assert f"--output-dir {out} is a file, not a directory" in line, line
    assert out.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "s.jsonl"]


# ------------------------------------------------------------------------------------------------- recipes


def test_a_recipe_with_a_latin1_byte_is_one_line_naming_the_file_and_offset(tmp_path, capsys, no_model_loads):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"trainer: grpo\n# caf\xe9\ntask: arith\n")
    assert cli_main(["train", "--config", str(recipe), "--output_dir", str(tmp_path / "o")]) == 2
    line = _one_line(capsys)
    assert f"recipe '{recipe}' is not UTF-8 text: byte 0xe9 at offset 19" in line, line


def test_train_without_arguments_asks_for_a_recipe(capsys, no_model_loads):
    assert cli_main(["train"]) == 2
    line = _one_line(capsys)
    assert "no recipe given: pass --config RECIPE.yaml" in line and "bf16" not in line, line


def test_a_directory_given_as_the_recipe_is_one_line(tmp_path, capsys, no_model_loads):
    assert cli_main(["train", "--config", str(tmp_path)]) == 2
    line = _one_line(capsys)
    assert f"recipe file '{tmp_path}' is a directory, not a YAML file" in line, line


# ------------------------------------------------------------------------------------------------- rewards


@pytest.mark.parametrize("value", ["nan", "NaN", "Infinity", "soon", "true"])
def test_a_reward_arg_that_is_not_a_finite_number_is_one_line_naming_it(value, tmp_path, capsys, no_model_loads):
    """``--reward-arg deadline=nan`` reaches the reward as the text "nan" (and ``NaN`` as a float NaN, which every
    comparison passes): one line naming the setting, not Python's "'<=' not supported"."""
    args = ["eval", "--samples", f"m={_samples(tmp_path)}", "--reward", "math_accuracy", "--quiet"]
    out = tmp_path / "o"
    assert cli_main([*args, "--reward-arg", f"deadline={value}", "--output-dir", str(out)]) == 2
    line = _one_line(capsys)
    assert "reward 'math_accuracy' setting deadline=" in line and "is not a finite number" in line, line
    assert not out.exists()


def test_reward_settings_of_number_parameters_are_checked_by_annotation_and_default():
    from rlvr_div.rewards import get_reward
    from rlvr_div.rewards.base import check_numbers

    def fn(completions, answer, threshold=0, limit: int | None = None, label="x", **kwargs):
        return [0.0 for _ in completions]

    check_numbers("f", fn, {"threshold": 0.5, "limit": None, "label": "nan"})  # a text setting stays text
    with pytest.raises(ConfigError, match=r"setting threshold=inf is not a finite number"):
        check_numbers("f", fn, {"threshold": float("inf")})
    with pytest.raises(ConfigError, match=r"setting limit=2.5 is not an integer \(or null\)"):
        check_numbers("f", fn, {"limit": 2.5})
    assert get_reward("math_accuracy", deadline=2, workers=None).settings()["deadline"] == 2.0


REWARDS_MODULE = """
from rlvr_div.rewards.base import Reward

CALLED = []


class Exact(Reward):
    name = "exact"
    columns = ("answer",)

    def __init__(self, strict=True):
        self.strict = strict

    def score(self, completions, answer):
        return [float(c == a) for c, a in zip(completions, answer)]


def make_exact(strict=True, **kwargs):
    CALLED.append("make_exact")
    return Exact(strict)


def make_typed(strict: bool = True) -> Exact:
    CALLED.append("make_typed")
    return Exact(strict)


def not_a_factory() -> dict:
    CALLED.append("not_a_factory")
    return {}


class NotAReward:
    def __init__(self):
        CALLED.append("NotAReward")


class Callable:
    def __call__(self):
        CALLED.append("instance")


instance = Callable()
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    name = f"fault_rewards_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(REWARDS_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_callable_that_is_no_reward_is_refused_without_being_called(rewards_module):
    import importlib

    from rlvr_div.rewards import get_reward

    module = importlib.import_module(rewards_module)
    for attr, what in [("not_a_factory", "annotated to return dict"), ("NotAReward", "the class"),
                       ("instance", "a Callable object")]:  # fmt: skip
        with pytest.raises(ConfigError, match=f"reward '{rewards_module}:{attr}' is .*{what}.*not a Reward"):
            get_reward(f"{rewards_module}:{attr}")
    for name in ("code:interact", "pdb:set_trace", "os:getpid"):
        with pytest.raises(ConfigError, match="not a Reward subclass, a reward function"):
            get_reward(name)
    assert module.CALLED == []
    assert get_reward(f"{rewards_module}:make_exact", strict=False).strict is False  # factories still work
    assert get_reward(f"{rewards_module}:make_typed").strict is True
    assert module.CALLED == ["make_exact", "make_typed"]


def test_os_abort_as_a_reward_is_one_line_not_an_abort():
    code = (
        "import sys\nfrom rlvr_div.cli import run_command\nfrom rlvr_div.rewards import get_reward\n"
        "sys.exit(run_command(lambda argv: get_reward('os:abort'), []))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: reward 'os:abort' is the builtin "), lines
    assert "not a Reward subclass" in lines[0], lines


# -------------------------------------------------------------------------------------------------- eval --n


def test_an_impossible_n_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, no_model_loads):
    """``--n 100000000 --limit 1`` would draw 204.8 GB of uniforms after config.json was written with that n (so a
    rerun with a sane n was refused until --fresh); now one line, and nothing is written."""
    monkeypatch.setattr("eval.settings.available_memory", lambda: 8 * 2**30)
    out = tmp_path / "eval"
    args = ["eval", "--model", "base=tiny", "--task", "arith", "--limit", "1", "--quiet", "--output-dir", str(out)]
    assert cli_main([*args, "--n", "100000000"]) == 2
    line = _one_line(capsys)
    assert "--n 100000000 × --max-new-tokens 512 needs 204.8 GB" in line and "8.6 GB of memory available" in line
    assert not out.exists() and not any(p.exists() for p in lock_paths(out))


# ------------------------------------------------------------------------------------------------ lock files


def test_the_lock_file_goes_with_its_holder(tmp_path):
    """No ``.NAME.lock`` stays beside a directory once its writer is done, whether it finished or failed."""
    out = tmp_path / "run"
    with directory_lock(out, "training run", "--output_dir") as path:
        assert path == lock_paths(out)[0] and path.exists()
    assert not path.exists()
    with pytest.raises(RuntimeError, match="boom"):
        with directory_lock(out, "training run", "--output_dir"):
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_lock_file_removed_while_it_was_being_taken_is_taken_again(tmp_path, monkeypatch):
    """A writer that opened the lock file just before its holder removed it (and let go) must not hold a lock on a
    file no longer at the path (a third writer would lock the new file beside it): it takes the lock again."""
    from filelock import FileLock

    path = tmp_path / ".run.lock"
    real, calls = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        if not calls:  # the first take: the file it holds is removed and another made at the path
            os.unlink(path)
            path.write_text("")
        calls.append(1)
        return result

    monkeypatch.setattr(FileLock, "acquire", acquire)
    lock = run_lock._acquire(path)
    try:
        assert len(calls) == 2
        assert os.path.samestat(os.fstat(lock._context.lock_file_fd), os.stat(path))
    finally:
        lock.release()
