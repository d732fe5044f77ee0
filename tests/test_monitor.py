"""The held-out pass@k monitor (rlvr_div/monitor.py): pass@k at step 0, every monitor_steps steps and at the end, in
metrics.jsonl and monitor.jsonl; the same per-problem counts as `rlvr-div eval` on the base and on a checkpoint; the
base counts read back on resume; one warning line each time problems lost to the base grow; TRL's eval_strategy
turning it on; the training curve drawn at the end; the run stopped when the base overtakes the policy; bad keys
refused in one line before the model loads."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from train_checks import assert_train_refuses

from rlvr_div.cli import main as cli_main
from rlvr_div.monitor import CURVE_FILE, MONITOR_FILE, PassAtKMonitor, lost_warning, monitor_metrics
from rlvr_div.sampling import SamplingConfig

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml")
N, PROBLEMS = 4, 8
MONITOR = ["--monitor_split", "test", "--monitor_size", str(PROBLEMS), "--monitor_n", str(N), "--monitor_steps", "2"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _train(out: Path, *extra: str, monitor: list[str] = MONITOR) -> None:
    args = ["train", "--config", RECIPE, "--output_dir", str(out), "--disable_tqdm", "true",
            "--per_device_train_batch_size", "32", "--save_steps", "3", "--threads", "1", *monitor, *extra]  # fmt: skip
    assert cli_main(args) == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_path) -> dict:
    """A monitored run of 3 steps, then its base record made all-solved by hand, then a resume to step 5."""
    out = tmp_path_factory.mktemp("monitor") / "run"
    _train(out, "--max_steps", "3")
    first = {"monitor": _lines(out / MONITOR_FILE), "metrics": _lines(out / "metrics.jsonl")}
    records = first["monitor"]
    forged = [{**records[0], "c": [N] * PROBLEMS}, *records[1:]]  # a base that solved every sample
    (out / MONITOR_FILE).write_text("".join(json.dumps(r) + "\n" for r in forged))
    _train(out, "--max_steps", "5", "--resume_from_checkpoint", "true")
    return {"out": out, "first": first, "monitor": _lines(out / MONITOR_FILE), "metrics": _lines(out / "metrics.jsonl")}


def test_monitor_logs_pass_at_k_at_step_0_every_n_steps_and_at_the_end(run):
    records, metrics = run["first"]["monitor"], run["first"]["metrics"]
    assert [r["step"] for r in records] == [0, 2, 3]
    assert all(r["n"] == N and len(r["c"]) == PROBLEMS and all(0 <= c <= N for c in r["c"]) for r in records)
    logged = {m["step"]: m for m in metrics if "monitor/pass@1" in m}
    assert sorted(logged) == [0, 2, 3]
    for r in records:  # the logged numbers are those of the recorded counts, in the step's own line
        assert {k: v for k, v in logged[r["step"]].items() if k.startswith("monitor/") and "seconds" not in k} == (
            monitor_metrics(N, r["c"], records[0]["c"])
        )
    assert "reward" in logged[2] and "reward" not in logged[0]  # step 0 is the base, before any update
    assert [m["step"] for m in metrics].count(2) == 1  # each step once


def test_resume_reads_the_base_counts_back(run):
    records, metrics = run["monitor"], run["metrics"]
    assert [r["step"] for r in records] == [0, 2, 3, 4, 5]
    assert records[0]["c"] == [N] * PROBLEMS  # the forged base was kept, not measured again
    assert [m["step"] for m in metrics if "monitor/pass@1" in m] == [0, 2, 3, 4, 5]
    for step in (4, 5):  # lost against the forged base: every problem the policy fails in all N samples
        (record,) = [r for r in records if r["step"] == step]
        (line,) = [m for m in metrics if m["step"] == step]
        assert line["monitor/lost_vs_base"] == sum(c == 0 for c in record["c"])
        assert line["monitor/gained_vs_base"] == 0


def test_monitor_counts_equal_rlvr_div_eval_on_the_base_and_a_checkpoint(run, tmp_path, tiny_path):
    """The same samples: `rlvr-div eval` of the base and of checkpoint-3 at the monitor's n, seed, temperature and
    length gives the per-problem counts the monitor recorded at steps 0 and 3."""
    ckpt = run["out"] / "checkpoint-3"
    rc = cli_main(["eval", "--model", f"base={tiny_path}", "--model", f"step3={ckpt}", "--task", "arith",
                   "--split", "test", "--limit", str(PROBLEMS), "--n", str(N), "--max-new-tokens", "8", "--seed", "0",
                   "--device", "cpu", "--threads", "1", "--dtype", "float32",  # the monitor's: the training model's
                   "--output-dir", str(tmp_path / "eval"), "--quiet"])  # fmt: skip
    assert rc == 0
    by_step = {r["step"]: r["c"] for r in run["first"]["monitor"]}
    for name, step in (("base", 0), ("step3", 3)):
        samples = sorted(_lines(tmp_path / "eval" / name / "samples.jsonl"), key=lambda r: r["index"])
        assert [r["c"] for r in samples] == by_step[step], name
    assert by_step[0] != by_step[3]  # the checkpoint moved: the comparison tells the two apart


def test_monitor_metrics_count_lost_and_gained_against_the_base():
    out = monitor_metrics(4, [0, 4, 2, 0], [1, 4, 0, 0])
    assert out["monitor/pass@1"] == pytest.approx((0 + 1 + 0.5 + 0) / 4)
    assert out["monitor/pass@2"] == pytest.approx((0 + 1 + (1 - 1 / 6) + 0) / 4)  # 1 - C(2,2)/C(4,2) for c = 2
    assert out["monitor/pass@4"] == pytest.approx(0.5)
    assert out["monitor/lost_vs_base"] == 1 and out["monitor/gained_vs_base"] == 1
    assert set(monitor_metrics(6, [1], None)) == {f"monitor/pass@{k}" for k in (1, 2, 4, 6)}  # no base: no lost


def test_one_warning_line_each_time_lost_grows(tmp_path, caplog):
    base, steps = [2, 1, 0, 3], [[0, 1, 0, 3], [0, 1, 1, 3], [0, 0, 0, 3], [0, 0, 0, 0]]
    dataset = {"prompt": ["a", "b", "c", "d"], "answer": ["1", "2", "3", "4"]}
    reward = SimpleNamespace(name="fake", columns=("answer",), settings=lambda: {})
    monitor = PassAtKMonitor(None, dataset, reward, SamplingConfig(n=3), every=1, path=tmp_path / MONITOR_FILE)
    warned = []
    for step, counts in enumerate([base, *steps]):
        monitor.counts = lambda counts=counts: counts
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlvr_div.monitor"):
            monitor.measure(SimpleNamespace(global_step=step, is_world_process_zero=True))
        assert len(caplog.records) <= 1
        warned += [(step, r.getMessage()) for r in caplog.records]
    assert [s for s, _ in warned] == [1, 3, 4]  # lost 1, then 1 (no line), 2, 3
    assert "lost 1 of the 3 held-out problems the base solved" in warned[0][1]
    assert [r["step"] for r in _lines(tmp_path / MONITOR_FILE)] == [0, 1, 2, 3, 4]
    assert lost_warning(7, 3, [0, 0], [0, 0], 0) is None  # nothing to lose


def test_the_run_draws_its_training_curve(run):
    curve = run["out"] / CURVE_FILE
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_strategy_steps_turns_the_monitor_on(tmp_path, caplog):
    """TRL's --eval_strategy steps --eval_steps 2: the monitor measures on the task's validation split every 2 steps,
    and transformers' Trainer does not run its own evaluate() (which would need an eval_dataset)."""
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="rlvr_div.train"):
        _train(out, "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "2",
               monitor=["--monitor_size", "4", "--monitor_n", "2"])  # fmt: skip
    records = _lines(out / MONITOR_FILE)
    assert [r["step"] for r in records] == [0, 2]
    assert {r["settings"]["split"] for r in records} == {"validation"}
    assert any(m["step"] == 2 and "monitor/pass@1" in m for m in _lines(out / "metrics.jsonl"))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("eval_strategy=steps")]
    assert "split 'validation' every 2 steps" in line and "eval_strategy=no" in line
    assert (out / CURVE_FILE).exists()


def test_stop_on_overtake_warns_once_and_stops_after_saving(tmp_path, caplog):
    """A forged base that solves every problem: the first measurement that loses one stops the run after saving."""
    from transformers import TrainerControl

    dataset = {"prompt": ["a", "b", "c"], "answer": ["1", "2", "3"]}
    reward = SimpleNamespace(name="fake", columns=("answer",), settings=lambda: {})
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list)})
    monitor = PassAtKMonitor(trainer, dataset, reward, SamplingConfig(n=2), every=1, path=tmp_path / MONITOR_FILE,
                             stop_on_overtake=True, overtake_margin=2)  # fmt: skip
    monitor.counts = lambda: [2, 2, 2]
    monitor.measure(SimpleNamespace(global_step=0, is_world_process_zero=True))  # the forged base
    stops = []
    for step, counts in enumerate([[2, 2, 2], [0, 2, 2], [0, 0, 2]], start=1):
        monitor.counts = lambda counts=counts: counts
        control = TrainerControl()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlvr_div.monitor"):
            monitor.on_step_end(None, SimpleNamespace(global_step=step, max_steps=9, is_world_process_zero=True),
                                control)  # fmt: skip
        overtook = [r.getMessage() for r in caplog.records if "overtook" in r.getMessage()]
        stops.append((control.should_training_stop, control.should_save, len(overtook)))
    assert stops == [(False, False, 0), (False, False, 0), (True, True, 1)]  # lost 1 < margin 2, then lost 2
    assert "lost 2, gained 0, margin 2" in overtook[0]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--monitor_n", "0"], "monitor_n=0 is out of range: it must be >= 1"),
        (["--monitor_split", "test", "--monitor_steps", "0"], "monitor_steps=0 is out of range: it must be >= 1"),
        (["--monitor_split", "test", "--monitor_size", "0"], "monitor_size=0 is out of range"),
        (["--monitor_split", "test", "--monitor_max_new_tokens", "0"], "monitor_max_new_tokens=0 is out of range"),
        (["--monitor_n", "8"], "monitor_n=8 acts only with monitor_split"),
        (["--monitor_steps", "5"], "monitor_steps=5 acts only with monitor_split"),
        (["--monitor_split", "train"], ("monitor_split=train reads the training data", "not held out")),
        (["--monitor_split", "nope"], "task 'arith' has splits"),
        (["--monitor_stop_on_overtake", "true"], "monitor_stop_on_overtake=True acts only with monitor_split"),
        (["--monitor_split", "test", "--monitor_overtake_margin", "2"], "acts only with monitor_stop_on_overtake"),
        (["--monitor_split", "test", "--monitor_overtake_margin", "0"], "monitor_overtake_margin=0 is out of range"),
        (["--eval_strategy", "epoch"], "eval_strategy=epoch is not supported"),
    ],
)
def test_bad_monitor_keys_are_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path / "out")
