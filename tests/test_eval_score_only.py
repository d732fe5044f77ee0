"""`rlvr-div eval --samples`: completions made elsewhere (lm-eval, verl, plain JSONL, our own samples.jsonl) are scored
without loading a model and give the same numbers as the sampled run that made them; mixed sources in one report;
re-scoring a directory with other reward settings; one-line errors. The fixtures are written by the tests, in each
tool's schema, from a sampled run's completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.sample_formats import read_sample_file
from rlvr_div.cli import main as cli_main

SMALL = ["--task", "arith", "--n", "8", "--limit", "12", "--max-new-tokens", "6", "--batch-size", "32", "--quiet"]
SMALL += ["--threads", "1"]
COMPARED = ("pass_at_k", "pass_at_k_se", "cover_at", "cover_at_se", "maj_at_k", "maj_at_k_se", "diversity", "solved")


@pytest.fixture(scope="module")
def sampled(tiny_path, tmp_path_factory):
    """A sampled evaluation of the tiny base on arith (12 problems, 8 samples each), written in lm-eval's schema too."""
    out = tmp_path_factory.mktemp("sampled")
    assert cli_main(["eval", "--model", f"base={tiny_path}", *SMALL, "--lm-eval-log", "--output-dir", str(out)]) == 0
    return out


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "base" / "samples.jsonl").read_text().splitlines()]


def write_lm_eval_fixture(records: list[dict], path: Path) -> None:
    """lm-eval --log_samples lines as lm-eval 0.4 writes them: one line per document and filter (two filters here),
    the rendered prompt in ``arguments``, the generations in ``resps``, the filter's answers in ``filtered_resps``."""
    with open(path, "w") as f:
        for r in reversed(records):  # order must not matter
            for filt in ("strict-match", "flexible-extract"):
                line = {
                    "doc_id": r["index"],
                    "doc": {"question": r["prompt"], "answer": r["columns"]["answer"]},
                    "target": r["columns"]["answer"],
                    "arguments": {"gen_args_0": {"arg_0": r["prompt_text"], "arg_1": {"until": ["\n"]}}},
                    "resps": [r["completions"]],
                    "filtered_resps": [a or "[invalid]" for a in r["answers"]],
                    "filter": filt,
                    "metrics": ["exact_match"],
                    "doc_hash": "0",
                    "prompt_hash": "0",
                    "target_hash": "0",
                    "exact_match": r["c"] / r["n"],
                }
                f.write(json.dumps(line) + "\n")


def write_verl_fixture(records: list[dict], path: Path) -> None:
    """verl validation dumps: one line per sample with input, output, gts, score, step; an earlier step first (with
    other outputs), which must not be read."""
    with open(path, "w") as f:
        for step, wrong in ((10, True), (20, False)):
            for r in records:
                for c, s in zip(r["completions"], r["scores"]):
                    output = "x" if wrong else c
                    f.write(json.dumps({"input": r["prompt_text"], "output": output, "gts": r["columns"]["answer"],
                                        "score": s, "step": step}) + "\n")  # fmt: skip


def write_plain_fixture(records: list[dict], path: Path) -> None:
    """The plain format, one line per sample: prompt, completion, answer."""
    with open(path, "w") as f:
        for r in records:
            for c in r["completions"]:
                f.write(json.dumps({"prompt": r["prompt"], "completion": c, "answer": r["columns"]["answer"]}) + "\n")


@pytest.fixture(scope="module")
def fixtures(sampled, tmp_path_factory):
    d = tmp_path_factory.mktemp("fixtures")
    records = _records(sampled)
    write_lm_eval_fixture(records, d / "lm_eval.jsonl")
    write_verl_fixture(records, d / "verl.jsonl")
    write_plain_fixture(records, d / "plain.jsonl")
    return d


def test_formats_are_read_as_written(sampled, fixtures):
    records = _records(sampled)
    assert all(r["prompt_text"] == r["prompt"] for r in records)  # arith prompts are plain text, no template
    for name, fmt in (("lm_eval.jsonl", "lm_eval"), ("verl.jsonl", "verl"), ("plain.jsonl", "plain")):
        f = read_sample_file(str(fixtures / name))
        assert f.format == fmt and len(f.problems) == 12, name
        assert [p.completions for p in f.problems] == [r["completions"] for r in records], name
    assert read_sample_file(str(fixtures / "verl.jsonl")).step == 20
    ours = read_sample_file(str(sampled / "base"))
    assert ours.format == "rlvr_div" and ours.problems[3].num_tokens == records[3]["num_tokens"]
    written = read_sample_file(str(sampled / "base" / "samples_lm_eval.jsonl"))
    assert written.format == "lm_eval" and [p.completions for p in written.problems] == [
        r["completions"] for r in records
    ]


def test_scored_files_equal_the_sampled_run_without_loading_a_model(sampled, fixtures, tmp_path, no_model_loads,
                                                                   monkeypatch):  # fmt: skip
    import eval.runner

    out = tmp_path / "scored"
    sources = [f"lm={fixtures / 'lm_eval.jsonl'}", f"plain={fixtures / 'plain.jsonl'}", f"ours={sampled / 'base'}"]
    args = ["eval", "--task", "arith", "--quiet", "--output-dir", str(out)]
    for s in sources:
        args += ["--samples", s]
    written, write_json = [], eval.runner.write_json
    monkeypatch.setattr(eval.runner, "write_json", lambda path, data: (written.append(path), write_json(path, data)))
    assert cli_main(args) == 0
    results_files = [p for p in written if p.name == "results.json"]
    assert sorted(results_files) == sorted(out / n / "results.json" for n in ("lm", "plain", "ours"))  # each once
    # verl dumps carry their own ground truth: no task needed, the reward is named
    assert cli_main(["eval", "--samples", f"verl={fixtures / 'verl.jsonl'}", "--reward", "arith_exact", "--quiet",
                     "--output-dir", str(tmp_path / "verl")]) == 0  # fmt: skip
    want = json.loads((sampled / "base" / "results.json").read_text())["metrics"]
    results = {n: json.loads((out / n / "results.json").read_text()) for n in ("lm", "plain", "ours")}
    results["verl"] = json.loads((tmp_path / "verl" / "verl" / "results.json").read_text())
    for name, res in results.items():
        for key in COMPARED:
            assert res["metrics"][key] == want[key], (name, key)
        assert res["config"]["scored_from"]["problems"] == 12
    assert results["ours"]["metrics"]["truncated_fraction"] == want["truncated_fraction"]
    assert results["lm"]["metrics"]["truncated_fraction"] is None  # lm-eval logs do not say
    assert results["ours"]["config"]["sampled_with"]["temperature"] == 1.0
    report = (out / "report.md").read_text()
    assert "scored from lm_eval sample log" in report
    assert "`lm` does not overtake `plain` at any k ≤ 8" in report  # no `base`: the first source is the base
    assert "`lm` does not overtake `ours` at any k ≤ 8" in report
    assert "| `plain` |" in report and "unknown" in report


def test_a_sampled_base_and_a_scored_file_in_one_report(sampled, fixtures, tiny_path):
    """The sampled base resumes (nothing to sample), the verl file is scored beside it, the report compares them."""
    before = (sampled / "base" / "samples.jsonl").read_bytes()
    args = ["eval", "--model", f"base={tiny_path}", *SMALL, "--samples", f"rl={fixtures / 'verl.jsonl'}"]
    assert cli_main([*args, "--output-dir", str(sampled)]) == 0
    assert (sampled / "base" / "samples.jsonl").read_bytes() == before
    rl = json.loads((sampled / "rl" / "results.json").read_text())
    base = json.loads((sampled / "base" / "results.json").read_text())
    assert rl["metrics"]["pass_at_k"] == base["metrics"]["pass_at_k"]
    assert rl["metrics"]["vs_base"]["lost"] == 0 and rl["metrics"]["vs_base"]["overtake_k"] is None
    report = (sampled / "report.md").read_text()
    assert "sampled here, n = 8" in report and "scored from verl sample log" in report and "step 20" in report


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_scoring_into_a_sampled_directory_is_refused_without_fresh(sampled, fixtures, tmp_path, capsys, no_model_loads):
    """The reverse of sampling into a scored directory: `--samples base=FILE` over an output directory where `base`
    was sampled stops in one line before anything is written (the sampled samples.jsonl, config.json and results.json
    stay as they were); with --fresh the file's completions replace them."""
    import shutil

    out = tmp_path / "eval"
    shutil.copytree(sampled, out)  # base/ sampled by `rlvr-div eval --model base=tiny`: config.json beside samples
    before = _tree(out)
    args = ["eval", "--samples", f"base={fixtures / 'plain.jsonl'}", "--task", "arith", "--quiet"]
    assert cli_main([*args, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out / 'base'} holds samples drawn from a model"), err
    assert "--fresh" in err[0] and "another --output-dir" in err[0], err
    assert _tree(out) == before
    assert cli_main([*args, "--fresh", "--output-dir", str(out)]) == 0
    assert not (out / "base" / "config.json").exists()
    results = json.loads((out / "base" / "results.json").read_text())
    assert results["config"]["scored_from"]["format"] == "plain"


def _math_file(path: Path) -> None:
    rows = [
        {"prompt": "What is 6 times 7?", "completions": ["It is 42.", "6*7 = 42", "I think 41"], "answer": "42"},
        {"prompt": "What is 2 plus 2?", "completions": ["4", "The sum is 4", "five"], "answer": "4"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rescoring_a_directory_with_other_reward_settings_reuses_its_completions(tmp_path, no_model_loads):
    """Completions without \\boxed{} score 0 under math_accuracy's default (the report says nothing was
    extractable); re-scoring the same directory with fallback=last_number reads the same completions again."""
    _math_file(tmp_path / "math.jsonl")
    out = tmp_path / "out"
    common = ["eval", "--reward", "math_accuracy", "--reward-arg", "workers=1", "--quiet", "--output-dir", str(out)]
    assert cli_main([*common, "--samples", f"m={tmp_path / 'math.jsonl'}"]) == 0
    first = json.loads((out / "m" / "results.json").read_text())
    assert first["metrics"]["pass_at_k"]["1"] == 0.0 and first["metrics"]["extractable_fraction"] == 0.0
    report = (out / "report.md").read_text()
    assert "No answer was extractable" in report and '"fallback": "none"' in report
    assert cli_main([*common, "--samples", f"m={out / 'm'}", "--reward-arg", "fallback=last_number"]) == 0
    second = json.loads((out / "m" / "results.json").read_text())
    assert second["config"]["reward_settings"]["fallback"] == "last_number"
    assert second["metrics"]["pass_at_k"]["1"] == pytest.approx(4 / 6)
    recs = [json.loads(line) for line in (out / "m" / "samples.jsonl").read_text().splitlines()]
    assert [r["completions"] for r in recs] == [["It is 42.", "6*7 = 42", "I think 41"], ["4", "The sum is 4", "five"]]
    report = (out / "report.md").read_text()
    assert "No answer was extractable" not in report and '"fallback": "last_number"' in report


def test_bad_sample_input_is_one_line(tmp_path, fixtures, capsys, no_model_loads):
    (tmp_path / "odd.jsonl").write_text('{"foo": 1}\n')
    (tmp_path / "nogold.jsonl").write_text('{"prompt": "1+1=", "completion": "2"}\n')
    far = tmp_path / "far.jsonl"
    far.write_text(json.dumps({"doc_id": 99999, "doc": {}, "resps": [["1"]], "arguments": {}}) + "\n")
    cases = [
        (["--samples", "x"], "is not NAME=PATH"),
        (["--samples", f"x={tmp_path / 'missing.jsonl'}", "--task", "arith"], "does not exist"),
        (["--samples", f"x={tmp_path / 'odd.jsonl'}", "--task", "arith"], "cannot tell the sample format"),
        (["--samples", f"x={tmp_path / 'nogold.jsonl'}", "--reward", "arith_exact"], "no value for the reward"),
        (["--samples", f"x={fixtures / 'verl.jsonl'}"], "needs --reward"),
        (["--samples", f"x={far}", "--task", "arith"], "problem index 99999 is not a row"),
        (
            [
                "--samples",
                f"x={fixtures / 'plain.jsonl'}",
                "--samples",
                f"x={fixtures / 'plain.jsonl'}",
                "--task",
                "arith",
            ],
            "given twice",
        ),  # fmt: skip
        (["--model", "base=tiny"], "needs --task"),
        (["--model", "base=tiny", *SMALL, "--n", "8.0"], "argument --n: invalid int value: '8.0'"),
        ([], "give at least one --model"),
    ]
    for args, message in cases:
        rc = cli_main(["eval", *args, "--quiet", "--output-dir", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, args
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], (args, err)


def test_cuda_device_on_a_cpu_build_is_one_line(tmp_path, capsys, no_model_loads):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    rc = cli_main(["eval", "--model", "base=tiny", *SMALL, "--device", "cuda", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--device cuda but this machine has" in err[0], err
