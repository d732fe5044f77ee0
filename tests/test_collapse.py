"""The collapse benchmark: config checks in one line, and an interrupted benchmark that resumes to identical tables."""

import json
import shutil
from pathlib import Path

import pytest

from collapse_bench.aggregate import code_states
from collapse_bench.cli import main as collapse_main
from collapse_bench.engine import RESULT, run_dir
from collapse_bench.runs import result_of, run_benchmark
from collapse_bench.spec import Run, grid_runs, load_benchmark, run_argv
from rlvr_div.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "fixtures" / "collapse_smoke.yaml"


def _tables(out: Path) -> dict:
    """collapse.json without what legitimately differs between invocations (nothing else may)."""
    agg = json.loads((out / "collapse.json").read_text())
    agg.pop("failures", None)
    return agg


def test_interrupted_benchmark_resumes_to_identical_tables(tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert collapse_main(["--config", str(SMOKE), "--out", str(whole), "--quiet"]) == 0
    bench = load_benchmark(SMOKE)
    outcome = run_benchmark(bench, broken, progress=False, max_runs=3)  # stopped after three runs
    assert outcome["stopped_early"]
    finished = [p for p in (broken / "runs").rglob(RESULT)]
    assert len(finished) == 3
    finished[0].unlink()  # as if killed while measuring: the run directory is there, its result is not
    outcome = run_benchmark(bench, broken, progress=False)
    assert not outcome["stopped_early"] and not outcome["failures"]
    assert outcome["runs"] == len(list((broken / "runs").rglob(RESULT))) == 8  # the bar's total: no run counted twice
    assert collapse_main(["--config", str(SMOKE), "--out", str(broken), "--quiet"]) == 0
    assert _tables(broken) == _tables(whole)
    assert sum(code_states(bench, broken).values()) == 8  # the report header counts every run, tuning included
    methods = _tables(whole)["tasks"]["pairsum"]["methods"]
    assert methods["grpo"]["seeds"] == [1, 2]
    assert methods["grpo_reverse_kl"]["seeds"] == [1, 2]  # selected and reported though its grid is all sweep runs
    assert methods["grpo_reverse_kl"]["value"] in (0.1, 0.01)
    md = (broken / "collapse.md").read_text()
    for needle in ("## Task `pairsum`", "Paired differences", "## The seed paper's question", "KL(p*‖π_v)",
                   "At matched validity"):  # fmt: skip
        assert needle in md
    for png in ("pareto_pairsum.png", "frontier_pairsum.png", "beta_sweep.png"):
        assert (broken / png).stat().st_size > 10_000
    # --report-only recomputes the same tables from the kept per-run files
    shutil.copy(broken / "collapse.json", tmp_path / "before.json")
    assert collapse_main(["--config", str(SMOKE), "--out", str(broken), "--report-only"]) == 0
    assert _tables(broken) == {
        k: v for k, v in json.loads((tmp_path / "before.json").read_text()).items() if k != "failures"
    }


def test_a_run_records_its_exact_path_from_the_base_to_its_end(tmp_path):
    only_grpo = {
        "seeds": [1],
        "methods": [{"name": "grpo", "recipe": "../../recipes/tiny/grpo.yaml"}],
        "beta_sweep": None,
    }
    bench = load_benchmark(SMOKE, only_grpo)
    run_benchmark(bench, tmp_path, progress=False)
    result = json.loads((run_dir(tmp_path, Run("pairsum", "grpo", None, 1).key) / RESULT).read_text())
    path = result["trajectory"]
    assert [p["step"] for p in path] == [0, 1, 2]
    base = json.loads((tmp_path / "base" / "pairsum.json").read_text())["splits"]["train"]["summary"]["mean"]
    assert path[0]["mu"] == base["mu"] and path[0]["effective_answers"] == base["effective_answers"]
    end = result["splits"]["train"]["mean"]  # measured after training, by loading the saved model
    assert path[-1]["mu"] == pytest.approx(end["mu"], abs=1e-6)
    assert path[-1]["effective_answers"] == pytest.approx(end["effective_answers"], abs=1e-5)
    assert path[-1]["cov_at_kmax"] == pytest.approx(end["cov_at"]["16"], abs=1e-6)
    assert path[1]["mu"] != path[0]["mu"]  # the policy moved after one step
    # measuring along the way leaves training untouched: the same weights as a run that does not (a task may turn
    # its path off); the path asked for is part of a run's identity, so the finished run is not reused
    task = {"name": "pairsum", "task": "pairsum", "task_options": {"max_target": 25}, "trajectory_every": 0}
    plain = load_benchmark(SMOKE, {**only_grpo, "tasks": [task]})
    assert result_of(tmp_path, plain, Run("pairsum", "grpo", None, 1)) is None
    run_benchmark(plain, tmp_path / "plain", progress=False)
    other = json.loads((run_dir(tmp_path / "plain", Run("pairsum", "grpo", None, 1).key) / RESULT).read_text())
    assert other["trajectory"] == [] and other["fingerprint"] == result["fingerprint"]


def test_grid_shares_runs_between_tuning_and_the_beta_sweep():
    bench = load_benchmark(SMOKE)
    fixed, tuning = grid_runs(bench)
    assert Run("pairsum", "grpo", None, 1) in fixed and Run("pairsum", "grpo", None, 2) in fixed
    assert Run("pairsum", "grpo", None, 0) not in fixed  # the tuning seed is never reported
    assert Run("pairsum", "grpo_reverse_kl", 0.1, 1) in fixed  # the sweep's β = 0.1, seed 1
    assert tuning == [Run("pairsum", "grpo_reverse_kl", v, 0) for v in (0.1, 0.01)]  # every value at the tuning seed
    assert Run("pairsum", "grpo_reverse_kl", 0.01, 2) in fixed  # the sweep trains every reported seed at every β
    argv = run_argv(bench, Run("pairsum", "grpo_reverse_kl", 0.01, 1), "/tmp/x", None)
    assert "--divergence_coef=0.01" in argv and "--seed=1" in argv and '--task_options={"max_target": 25}' in argv
    assert argv.index("--learning_rate=0.0003") > argv.index("--config")  # the benchmark's settings win


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"nope": 1}, "unknown key 'nope'"),
        ({"seeds": [0, 0]}, "repeat a seed"),
        ({"seeds": [0, 1]}, "tune_seed must be an integer that is not a reported seed"),
        ({"common": {"task_seed": 3}}, "common sets 'task_seed', which the benchmark sets"),
        ({"common": 5}, "common must be a mapping, got int"),  # was a TypeError
        ({"baseline": "ghost"}, "baseline 'ghost' is not a method"),
        ({"methods": [{"name": "m", "recipe": "missing.yaml"}]}, "recipe 'missing.yaml' is not a file"),
        ({"evaluation": {"ks": [4, 1]}}, "increasing"),
        ({"workers": True}, "workers must be an integer >= 1, got True"),  # a bool is not a count
        ({"evaluation": {"trajectory_every": 2.5}}, "evaluation.trajectory_every must be an integer >= 0, got 2.5"),
        ({"tasks": [{"name": "pairsum", "trajectory_every": -1}]}, "task 'pairsum' trajectory_every must be"),
        ({"tasks": [{"name": "pairsum", "task": "pairsum", "methods": ["grpo_reverse_kl"]}]}, "must run the baseline"),
        # the benchmark measures exactly: a task that cannot list its valid completions is refused, not sampled
        ({"tasks": [{"name": "g", "task": "gsm8k"}]}, "task 'g': 'gsm8k' cannot list its valid completions"),
        ({"tasks": [{"name": "ghost"}]}, "unknown task 'ghost'"),
        ({"evaluation": {"n": 64}}, "unknown key 'n'"),  # it sized the sampled measurement, now gone
    ],
)
def test_bad_configs_fail_in_one_line_before_anything_runs(tmp_path, edit, message, no_model_loads):
    import yaml

    config = yaml.safe_load(SMOKE.read_text()) | edit
    path = tmp_path / "bench.yaml"
    for m in config["methods"]:
        m["recipe"] = str((SMOKE.parent / m["recipe"]).resolve()) if m["recipe"] != "missing.yaml" else m["recipe"]
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=message):
        load_benchmark(path)


def test_a_directory_of_another_configuration_is_refused(tmp_path, no_model_loads):
    bench = load_benchmark(SMOKE)
    from collapse_bench.engine import open_state
    from collapse_bench.runs import STATE

    def check_state(b) -> None:  # what the benchmark does first
        open_state(tmp_path, STATE, {}, False, b.fingerprint(), "collapse benchmark")

    check_state(bench)
    check_state(load_benchmark(SMOKE, {"seeds": [5, 6]}))  # more runs: fine
    other = load_benchmark(SMOKE, {"evaluation": {"ks": [1, 2]}})  # other measurements: refused
    with pytest.raises(ConfigError, match="holds a collapse benchmark with other settings or base model; pass --fresh"):
        check_state(other)
    assert run_dir(tmp_path, Run("pairsum", "grpo", None, 0).key).name == "seed0"


def test_a_task_may_set_its_own_path_interval(no_model_loads):
    task = {"name": "pairsum", "task": "pairsum", "task_options": {"max_target": 25}}
    assert load_benchmark(SMOKE, {"tasks": [{**task, "trajectory_every": None}]}).trajectory_every("pairsum") == 1
    assert load_benchmark(SMOKE, {"tasks": [{**task, "trajectory_every": 0}]}).trajectory_every("pairsum") == 0


def test_a_second_benchmark_on_the_same_directory_is_refused(tmp_path, no_model_loads):
    """One writer per output directory: while another process holds it, a benchmark (runs or report) on it stops in
    one line before writing anything; once that process ends, the directory is free."""
    import subprocess
    import sys

    from rlvr_div.runs.run_lock import directory_lock

    out = tmp_path / "out"
    code = "import sys, time\nfrom pathlib import Path\nfrom rlvr_div.runs.run_lock import directory_lock\n" \
        "with directory_lock(Path(sys.argv[1]), 'collapse benchmark', '--out'):\n" \
        "    print('held', flush=True)\n    time.sleep(120)\n"  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"being written by another collapse benchmark \(lock: .*\.out\.lock\) "
                           rf"held by PID {holder.pid};"):  # fmt: skip
            run_benchmark(load_benchmark(SMOKE), out, progress=False)
        with pytest.raises(ConfigError, match="being written by another collapse benchmark"):
            collapse_main(["--config", str(SMOKE), "--out", str(out), "--fresh"])
        assert not out.exists()  # nothing written, not even by --fresh
    finally:
        holder.kill()
        holder.wait()
    lock = ("collapse benchmark", "--out")
    with directory_lock(out, *lock), directory_lock(out, *lock):  # free again, and re-entrant within one process
        pass
    (tmp_path / "a_file").write_text("")  # a lock that cannot be made is one line too
    with pytest.raises(ConfigError, match="cannot create the lock .* beside --out"):
        run_benchmark(load_benchmark(SMOKE), tmp_path / "a_file" / "out", progress=False)


def test_results_written_into_the_checkout_do_not_mark_the_code_dirty(tmp_path):
    import subprocess

    from collapse_bench.engine import code_commit

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)  # fmt: skip

    for name in ("rlvr_div/a.py", "bench/collapse.yaml", "bench/results/collapse/result.json", "docs/x.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    clean = code_commit(tmp_path)
    assert clean != "unknown" and not clean.endswith("+dirty")
    (tmp_path / "bench/results/collapse/result.json").write_text("1\n")  # a benchmark writing its results
    (tmp_path / "docs/x.md").write_text("1\n")
    assert code_commit(tmp_path) == clean
    (tmp_path / "bench/collapse.yaml").write_text("1\n")
    assert code_commit(tmp_path) == clean + "+dirty"
    (tmp_path / "bench/collapse.yaml").write_text("0\n")
    (tmp_path / "rlvr_div/a.py").write_text("1\n")
    assert code_commit(tmp_path) == clean + "+dirty"


def test_a_run_keeps_its_identity_when_the_checkout_moves(tmp_path):
    """Finished runs are reused from a clone or a moved checkout: the identity names the recipe as the config does."""
    from collapse_bench.spec import run_identity

    shutil.copytree(ROOT / "recipes" / "tiny", tmp_path / "recipes" / "tiny")
    (tmp_path / "tests" / "fixtures").mkdir(parents=True)
    moved = tmp_path / "tests" / "fixtures" / SMOKE.name
    shutil.copy(SMOKE, moved)
    here, there = load_benchmark(SMOKE), load_benchmark(moved)
    run = Run("pairsum", "grpo_reverse_kl", 0.1, 1)
    assert here.method("grpo").recipe != there.method("grpo").recipe
    assert run_identity(here, run) == run_identity(there, run)
    (tmp_path / "recipes" / "tiny" / "grpo_reverse_kl.yaml").write_text("learning_rate: 1.0e-3\n")
    assert run_identity(here, run) != run_identity(load_benchmark(moved), run)  # a changed recipe still counts


def test_a_dph_run_gives_training_its_sets_offline_settings_without_changing_its_identity():
    """The task's offline-stage overrides reach training (which checks them against the stored set), not the run's
    identity: the set decides them, so the committed DPH-RL runs stay current."""
    from collapse_bench.spec import run_identity

    bench = load_benchmark(ROOT / "bench" / "collapse.yaml")
    run = next(r for r in grid_runs(bench)[0] + grid_runs(bench)[1] if bench.method(r.method).rehearsal)
    assert bench.task(run.task).rehearsal == {"rehearsal_threshold": 8}
    assert "--rehearsal_threshold=8" in run_argv(bench, run, "out", "rehearsal")
    identity = run_identity(bench, run)
    assert not any("rehearsal_threshold" in a for a in identity["argv"])
    assert result_of(ROOT / "bench" / "results" / "collapse", bench, run) is not None


def test_a_cached_base_is_read_only_when_made_the_same_way(tmp_path):
    """Both engines keep the base in one file (:func:`collapse_bench.measure.cached_base`): written once, read back
    unchanged, refused in one line when the model, the task's settings or the measured prompts differ."""
    from collapse_bench.measure import cached_base

    calls = []

    def measure(split, rows):
        calls.append(split)
        return {"prompts": [r["prompt"] for r in rows], "logps": [[-0.5]] * len(rows)}

    path, what = tmp_path / "base" / "t.json", {"fingerprint": "f1", "task": "t", "task_options": {"n": 1}}
    rows = {"train": [{"prompt": "a"}, {"prompt": "b"}], "test": [{"prompt": "c"}]}
    made = cached_base(path, what, rows, measure)
    assert calls == ["train", "test"] and list(made) == ["fingerprint", "task", "task_options", "splits"]
    assert cached_base(path, what, rows, measure) == made and calls == ["train", "test"]  # read, not measured again
    for other, message in [
        ({**what, "fingerprint": "f2"}, "the base model changed since"),
        ({**what, "task_options": {"n": 2}}, "measured the base on another task, options or temperature"),
    ]:
        with pytest.raises(ConfigError, match=message):
            cached_base(path, other, rows, measure)
    with pytest.raises(ConfigError, match="measured other train prompts than this config chooses"):
        cached_base(path, what, {**rows, "train": rows["train"][:1]}, measure)
    with pytest.raises(ConfigError, match="measured other validation prompts"):
        cached_base(path, what, {**rows, "validation": [{"prompt": "d"}]}, measure)
