"""`rlvr-div eval`: one-line errors before any model loads, results.json recomputable from samples.jsonl, a LoRA
adapter, the report, the base-overtakes crossover, and resumption after SIGKILL equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eval.estimators import pass_at_k, report_ks
from eval.records import read_samples
from eval.report import overtake_sentence
from eval.runner import compare_to_base
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--task", "arith", "--n", "8", "--limit", "12", "--max-new-tokens", "6", "--batch-size", "32", "--quiet"]
SMALL += ["--threads", "1"]  # one torch thread: far faster than two on a CPU shared with other jobs


@pytest.fixture(scope="module")
def empty_task():
    """A registered task whose split has no rows (a task without data)."""
    import datasets

    from rlvr_div.tasks import TASKS, TaskSpec, get_task_spec

    name = "empty_for_eval_test"
    get_task_spec("arith")  # load the built-in tasks first
    if name not in TASKS:
        TASKS.add(name, TaskSpec(name, lambda **_: datasets.Dataset.from_list([]), "arith_exact", "no rows"))
    return name


def bad_input_cases(tmp_path, empty_task):
    return [
        (["--model", "tiny", *SMALL], "is not NAME=PATH"),
        (["--model", "a b=tiny", *SMALL], "must use letters"),
        (["--model", "base=/no/such/model", *SMALL], "model path '/no/such/model' does not exist"),
        (["--model", "base=tiny", "--model", "base=tiny", *SMALL], "given twice"),
        (["--model", "base=tiny", "--base", "other", *SMALL], "--base 'other'"),
        (["--model", "base=tiny", "--task", "nope", "--n", "4"], "unknown task 'nope'"),
        (["--model", "base=tiny", "--task", empty_task, "--n", "4"], "has no problems"),
        (["--model", "base=tiny", *SMALL, "--split", "dev"], "not 'dev'"),
        (["--model", "base=tiny", *SMALL, "--reward", "pair_sum"], "needs column(s) ['target']"),
        (["--model", "base=tiny", *SMALL, "--reward", "nope"], "unknown reward 'nope'"),
        (["--model", "base=tiny", *SMALL, "--n", "0"], "sampling n=0"),
        (["--model", "base=tiny", *SMALL, "--top-p", "0"], "sampling top_p=0.0"),
        (["--model", "base=tiny", *SMALL, "--limit", "0"], "--limit must be >= 1"),
        (["--model", "base=tiny", *SMALL, "--reward-arg", "oops"], "is not KEY=VALUE"),
        (["--model", "base=tiny", *SMALL, "--dtype", "int3"], "dtype 'int3'"),
    ]


def test_bad_input_is_one_line_exit_2(tmp_path, capsys, no_model_loads, empty_task):
    for args, message in bad_input_cases(tmp_path, empty_task):
        rc = cli_main(["eval", *args, "--output-dir", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, args
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], (args, err)


def test_vllm_backend_without_vllm_is_one_line(tmp_path, capsys, no_model_loads):
    from rlvr_div.sampling import vllm_available

    if vllm_available():
        pytest.skip("vllm is importable here")
    assert cli_main(["eval", "--model", "base=tiny", *SMALL, "--backend", "vllm", "--output-dir", str(tmp_path)]) == 2
    assert "needs the vllm package" in capsys.readouterr().err


@pytest.fixture(scope="module")
def lora_dir(tiny_path, tmp_path_factory):
    """A freshly initialised LoRA adapter on the tiny base (B = 0, so it computes exactly the base)."""
    from peft import get_peft_model

    from rlvr_div.models import load_model, lora_config

    path = tmp_path_factory.mktemp("lora")
    model = get_peft_model(load_model(tiny_path), lora_config(r=4, alpha=8))
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def two_model_run(tiny_path, lora_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    models = ["--model", f"base={tiny_path}", "--model", f"lora={lora_dir}"]
    rc = cli_main(["eval", *models, *SMALL, "--output-dir", str(out)])
    assert rc == 0
    return out


def test_results_recompute_from_samples_exactly(two_model_run):
    for name in ("base", "lora"):
        res = json.loads((two_model_run / name / "results.json").read_text())
        recs = [json.loads(line) for line in (two_model_run / name / "samples.jsonl").read_text().splitlines()]
        assert sorted(r["index"] for r in recs) == list(range(12))
        for r in recs:
            assert r["n"] == 8 and len(r["completions"]) == len(r["answers"]) == len(r["scores"]) == 8
            assert r["correct"] == [s == 1.0 for s in r["scores"]] and r["c"] == sum(r["correct"])
            assert all(isinstance(x, bool) for x in r["correct"])
        ks = report_ks(8)
        recomputed = pass_at_k([r["n"] for r in recs], [r["c"] for r in recs], ks).mean(axis=0)
        assert res["metrics"]["pass_at_k"] == {str(k): float(v) for k, v in zip(ks, recomputed)}
        assert all(0.0 <= v <= 1.0 for v in res["metrics"]["pass_at_k"].values())
        cfg = res["config"]
        for key in ("model", "task", "split", "n", "temperature", "top_p", "max_new_tokens", "seed", "reward"):
            assert key in cfg
        assert cfg["reward"] == "arith_exact" and "torch" in cfg["versions"] and "transformers" in cfg["versions"]
        for key in ("cover_at", "maj_at_k", "diversity", "pass_at_k_se", "maj_at_k_se"):
            assert res["metrics"][key]


def test_lora_adapter_loads_and_report_is_written(two_model_run, lora_dir):
    base = json.loads((two_model_run / "base" / "results.json").read_text())
    lora = json.loads((two_model_run / "lora" / "results.json").read_text())
    assert lora["config"]["adapter"] == str(Path(lora_dir).resolve())
    # a zero-initialised adapter computes the base, so the samples (and metrics) coincide
    assert lora["metrics"]["pass_at_k"] == base["metrics"]["pass_at_k"]
    vs = lora["metrics"]["vs_base"]
    assert vs["base"] == "base" and vs["lost"] == 0 and vs["overtake_k"] is None
    report = (two_model_run / "report.md").read_text()
    assert "| `base` | 12 |" in report and "`base` does not overtake `lora`" in report
    for png in ("pass_at_k.png", "accuracy_hist.png", "accuracy_vs_base.png"):
        assert (two_model_run / png).read_bytes()[:4] == b"\x89PNG"


def test_rerun_with_other_settings_fails_and_same_settings_resume(two_model_run, capsys, tiny_path):
    args = ["eval", "--model", f"base={tiny_path}", *SMALL, "--output-dir", str(two_model_run)]
    assert cli_main([*args, "--temperature", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "temperature=1.0 but this run has temperature=0.5" in err
    before = (two_model_run / "base" / "samples.jsonl").read_bytes()
    assert cli_main(args) == 0  # nothing left to sample: no model is loaded, the file is unchanged
    assert (two_model_run / "base" / "samples.jsonl").read_bytes() == before


def test_auto_dtype_is_bfloat16_only_where_the_cpu_computes_it_and_a_resumed_model_keeps_its_own(monkeypatch):
    import rlvr_div.cpu_bf16 as cpu_bf16
    from eval.settings import resolve_dtype

    for native, fresh in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(cpu_bf16, "native_bf16", lambda n=native: n)
        assert resolve_dtype("auto", "cpu") == fresh
        assert resolve_dtype("auto", "cpu", recorded="float32") == "float32"
        assert resolve_dtype("auto", "cpu", recorded="float16") == "float16"
        assert resolve_dtype("float32", "cpu", recorded="bfloat16") == "float32"  # given: check_resume then refuses
        assert resolve_dtype("bfloat16", "cpu", recorded="bfloat16") == "bfloat16"  # given: continued anyway
    monkeypatch.setattr(cpu_bf16, "native_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu", recorded="bfloat16") == "bfloat16"
    monkeypatch.setattr(cpu_bf16, "native_bf16", lambda: False)  # bfloat16 samples resumed where it is not native
    with pytest.raises(ConfigError, match="drawn in bfloat16, which this CPU does not compute natively"):
        resolve_dtype("auto", "cpu", recorded="bfloat16")


def test_the_first_line_says_which_dtype_why_and_what_the_cpu_computes(monkeypatch):
    import rlvr_div.cpu_bf16 as cpu_bf16
    from eval.cli import sampling_path
    from eval.settings import EvalSettings

    monkeypatch.setattr(cpu_bf16, "cpu_flags", lambda cpuinfo=None: frozenset({"amx_bf16"}))
    monkeypatch.setattr(cpu_bf16, "kernel_capability", lambda: "AVX512")
    line = sampling_path(EvalSettings(model="m", adapter=None, task="arith", dtype="bfloat16"), dtype_given=False)
    assert line == "m: sampling in bfloat16 (--dtype auto) on cpu; CPU with native bfloat16 (amx_bf16)"
    cuda = EvalSettings(model="m", adapter=None, task="arith", dtype="float32", device="cuda")
    assert sampling_path(cuda, dtype_given=True) == "m: sampling in float32 (--dtype) on cuda"


def test_one_dtype_per_job_and_models_sampled_in_two_are_one_line(tmp_path):
    from eval.resume import resumed_dtype

    for name, dtype in (("a", "float32"), ("b", None), ("c", "bfloat16")):
        (tmp_path / name).mkdir()
        if dtype:
            (tmp_path / name / "config.json").write_text(json.dumps({"dtype": dtype}))
    assert resumed_dtype([tmp_path / "a", tmp_path / "b"]) == "float32"  # b, not sampled yet, follows a
    assert resumed_dtype([tmp_path / "b"]) is None and resumed_dtype([]) is None
    with pytest.raises(ConfigError, match=r"sampled in different dtypes \(a in float32, c in bfloat16\)"):
        resumed_dtype([tmp_path / "a", tmp_path / "b", tmp_path / "c"])


def test_a_float32_evaluation_resumes_under_auto_dtype_on_a_cpu_with_native_bfloat16(two_model_run, tiny_path, capsys,
                                                                                    monkeypatch):  # fmt: skip
    """Samples drawn in float32 (the machine, or the default, of their first run) are continued in float32: a
    resumed evaluation keeps its dtype, on any machine, unless --dtype says otherwise (then one line)."""
    import rlvr_div.cpu_bf16 as cpu_bf16

    monkeypatch.setattr(cpu_bf16, "native_bf16", lambda: True)
    base = two_model_run / "base"
    config = json.loads((base / "config.json").read_text())
    before = (base / "samples.jsonl").read_bytes()
    (base / "config.json").write_text(json.dumps({**config, "dtype": "float32"}))
    try:
        args = ["eval", "--model", f"base={tiny_path}", *SMALL, "--output-dir", str(two_model_run)]
        assert cli_main([*args, "--dtype", "bfloat16"]) == 2
        assert "dtype='float32' but this run has dtype='bfloat16'" in capsys.readouterr().err
        assert cli_main(args) == 0 and (base / "samples.jsonl").read_bytes() == before  # nothing resampled
    finally:
        (base / "config.json").write_text(json.dumps(config))


def _records(path: Path) -> dict[int, dict]:
    return read_samples(path / "samples.jsonl")


def _without_timing(path: Path) -> dict:
    res = json.loads((path / "results.json").read_text())
    res.pop("timing")
    return res


def test_half_written_line_is_dropped_and_resampled(two_model_run, tmp_path, tiny_path):
    """A kill in the middle of a write leaves a partial last line: the rerun drops it and regenerates the chunk."""
    dst = tmp_path / "cut"
    (dst / "base").mkdir(parents=True)
    (dst / "base" / "config.json").write_bytes((two_model_run / "base" / "config.json").read_bytes())
    lines = (two_model_run / "base" / "samples.jsonl").read_bytes().splitlines(keepends=True)
    (dst / "base" / "samples.jsonl").write_bytes(b"".join(lines[:5]) + lines[5][:40])
    assert cli_main(["eval", "--model", f"base={tiny_path}", *SMALL, "--output-dir", str(dst)]) == 0
    assert _records(dst / "base") == _records(two_model_run / "base")
    want = _without_timing(two_model_run / "base")
    got = _without_timing(dst / "base")
    assert got["metrics"] == want["metrics"]


def test_base_overtakes_where_the_curves_cross():
    rng = np.random.default_rng(0)
    base = [{"index": i, "n": 16, "c": int(c)} for i, c in enumerate(rng.integers(1, 6, size=40))]
    collapsed = [{"index": i, "n": 16, "c": 16 if i % 2 == 0 else 0} for i in range(40)]
    out = compare_to_base(base, collapsed, "base")
    curve_b = pass_at_k([16] * 40, [r["c"] for r in base], range(1, 17)).mean(0)
    curve_m = pass_at_k([16] * 40, [r["c"] for r in collapsed], range(1, 17)).mean(0)
    first = next(k for k in range(1, 17) if curve_b[k - 1] > curve_m[k - 1])
    assert out["overtake_k"] == first > 1
    assert f"`base` overtakes `grpo` at k = {first} " in overtake_sentence("grpo", "base", out, 16)
    assert out["lost"] == 20 and out["base_solved"] == 40 and out["gained"] == 0
    assert compare_to_base(collapsed, base, "x")["overtake_k"] == 1


def _eval_args(out: Path, tiny_path: str) -> list[str]:
    return [
        "--model", f"base={tiny_path}", "--task", "arith", "--n", "4", "--limit", "150", "--max-new-tokens", "6",
        "--batch-size", "8", "--seed", "7", "--threads", "1", "--quiet", "--output-dir", str(out),
    ]  # fmt: skip


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path, tiny_path):
    """`python -m eval` killed with SIGKILL after some lines are written, then rerun (in-process: the same code and
    thread count), gives the same samples.jsonl and results.json (but timing) as an uninterrupted run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "eval", *_eval_args(killed, tiny_path)]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples = killed / "base" / "samples.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if samples.exists() and samples.read_bytes().count(b"\n") >= 10:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()[-500:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    written = samples.read_bytes().count(b"\n")
    assert 10 <= written < 150
    assert not (killed / "base" / "results.json").exists()
    assert cli_main(["eval", *_eval_args(killed, tiny_path)]) == 0

    fresh = tmp_path / "fresh"
    assert cli_main(["eval", *_eval_args(fresh, tiny_path)]) == 0
    assert len(_records(fresh / "base")) == 150
    assert _records(killed / "base") == _records(fresh / "base")
    assert _without_timing(killed / "base") == _without_timing(fresh / "base")
    assert json.loads((killed / "base" / "results.json").read_text())["timing"]["problems_sampled"] == 150 - written


def _retrain_in_place(model_dir: Path) -> None:
    """Stand-in for a retraining into the same output_dir: new weights saved over the old ones."""
    import torch

    from rlvr_div.models import load_model

    model = load_model(str(model_dir))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(model_dir)


def test_changed_model_stops_the_rerun_and_fresh_resamples(tiny_path, tmp_path, capsys, monkeypatch):
    """Evaluate a model, replace its weights in place, rerun into the same directory: one line naming --fresh,
    before any model loads, samples untouched. With --fresh the samples equal those of a new directory."""
    import shutil

    import transformers

    model = tmp_path / "model"
    shutil.copytree(tiny_path, model)
    out = tmp_path / "out"
    args = ["eval", "--model", f"m={model}", *SMALL, "--output-dir", str(out)]
    assert cli_main(args) == 0
    first = (out / "m" / "samples.jsonl").read_bytes()
    recorded = json.loads((out / "m" / "config.json").read_text())["model_fingerprint"]
    assert json.loads((out / "m" / "results.json").read_text())["config"]["model_fingerprint"] == recorded
    _retrain_in_place(model)
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: 1 / 0)
        assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the model changed since ") and "--fresh" in err[0], err
    assert (out / "m" / "samples.jsonl").read_bytes() == first

    assert cli_main([*args, "--fresh"]) == 0
    assert json.loads((out / "m" / "config.json").read_text())["model_fingerprint"] != recorded
    assert json.loads((out / "m" / "results.json").read_text())["timing"]["problems_sampled"] == 12
    new_dir = tmp_path / "new"
    assert cli_main(["eval", "--model", f"m={model}", *SMALL, "--output-dir", str(new_dir)]) == 0
    assert _records(out / "m") == _records(new_dir / "m") != read_samples_bytes(first)


def read_samples_bytes(data: bytes) -> dict[int, dict]:
    return {r["index"]: r for r in map(json.loads, data.decode().splitlines())}


def test_samples_without_a_fingerprint_are_not_resumed(two_model_run, tmp_path, tiny_path, capsys):
    """An output directory written before fingerprints existed cannot be tied to a model: one line, not a resume."""
    dst = tmp_path / "old"
    (dst / "base").mkdir(parents=True)
    config = json.loads((two_model_run / "base" / "config.json").read_text())
    config.pop("model_fingerprint")
    (dst / "base" / "config.json").write_text(json.dumps(config))
    (dst / "base" / "samples.jsonl").write_bytes((two_model_run / "base" / "samples.jsonl").read_bytes())
    assert cli_main(["eval", "--model", f"base={tiny_path}", *SMALL, "--output-dir", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "records no model fingerprint" in err and "--fresh" in err
