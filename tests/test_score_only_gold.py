"""Score-only gold answers that would silently give wrong scores (issue 36): an lm-eval GSM8K log scored without
`--task` takes the gold by GSM8K's own rule (the text after `####`, commas removed), not the whole worked solution; any
other gold that is not a bare answer is named in one warning line; plain lines of one prompt that disagree on its gold
are refused in one line naming the prompt instead of being scored against the first line's answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eval.sample_formats import gsm8k_gold, read_sample_file
from rlvr_div.cli import main as cli_main
from rlvr_div.tasks.data import find_data

# GSM8K test row 1303: math-verify reads "28" (days, the last number it parses) from the whole worked solution, but the
# answer after "####" is 4 (weeks)
ROW = 1303


def _gsm8k_row(index: int) -> dict:
    path = find_data("math/gsm8k/test.jsonl")
    if path is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    return json.loads(path.read_text().splitlines()[index])


def _lm_eval_line(row: dict, completions: list[str], **extra: object) -> dict:
    """One line as lm-eval 0.4's gsm8k task logs it: `target` is the doc's whole `answer` (the worked solution)."""
    return {
        "doc_id": 0,
        "doc": {"question": row["question"], "answer": row["answer"]},
        "target": row["answer"],
        "arguments": {"gen_args_0": {"arg_0": f"Question: {row['question']}\nAnswer:", "arg_1": {}}},
        "resps": [completions],
        "filtered_resps": ["[invalid]"],
        "filter": "strict-match",
        "metrics": ["exact_match"],
        **extra,
    }


def _score(sample_file: Path, out: Path, *extra: str) -> list[dict]:
    args = ["eval", "--samples", f"m={sample_file}", "--reward", "math_accuracy", "--reward-arg", "workers=1"]
    assert cli_main([*args, *extra, "--quiet", "--output-dir", str(out)]) == 0
    return [json.loads(line) for line in (out / "m" / "samples.jsonl").read_text().splitlines()]


def test_an_lm_eval_gsm8k_log_without_task_is_scored_against_the_number_after_the_hashes(tmp_path, capsys):
    row = _gsm8k_row(ROW)
    assert row["answer"].rstrip().endswith("#### 4") and "= <<28/7=4>>4 weeks" in row["answer"]
    log = tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl"
    log.write_text(json.dumps(_lm_eval_line(row, ["So \\boxed{4}", "\\boxed{28}", "4 weeks, \\boxed{4.0}"])) + "\n")
    (record,) = _score(log, tmp_path / "out")
    assert record["columns"] == {"answer": "4"}
    assert record["scores"] == [1.0, 0.0, 1.0]
    assert "warning" not in capsys.readouterr().err  # the GSM8K rule applied: nothing to warn about


def test_gsm8k_is_told_by_the_task_name_or_the_doc_shape(tmp_path):
    doc = {"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7 then 1,000 + 234 = 1,234\n#### 1,234"}
    line = {"doc_id": 0, "doc": doc, "target": doc["answer"], "arguments": [["q", {}]], "resps": [["\\boxed{1234}"]]}
    (tmp_path / "shape.jsonl").write_text(json.dumps(line) + "\n")
    problem = read_sample_file(str(tmp_path / "shape.jsonl")).problems[0]
    assert problem.fields["answer"] == "1234" and problem.gold == "1234"
    # a task name that says GSM8K (lm-eval's own, or ours from --lm-eval-log): a bare answer keeps, commas go
    named = {**line, "doc": {"question": "How many?", "answer": "1,234"}, "target": "1,234", "task_name": "gsm8k_cot"}
    (tmp_path / "named.jsonl").write_text(json.dumps(named) + "\n")
    problem = read_sample_file(str(tmp_path / "named.jsonl")).problems[0]
    assert problem.fields["answer"] == "1234" and problem.gold == "1234"
    # another task's doc keeps its own answer
    other = {**line, "doc": {"question": "q", "answer": "1,234"}, "target": "1,234"}
    (tmp_path / "other.jsonl").write_text(json.dumps(other) + "\n")
    assert read_sample_file(str(tmp_path / "other.jsonl")).problems[0].fields["answer"] == "1,234"


def test_the_gsm8k_rule_reads_every_gold_of_the_shared_test_set_as_a_number(tmp_path):
    """The rule (one function, :func:`rlvr_div.rewards.math.gsm8k_answer`, shared with ``--task gsm8k``) turns every
    worked solution of the shared test set into a bare number."""
    path = find_data("math/gsm8k/test.jsonl")
    if path is None:
        pytest.skip("shared benchmark data (../shared/data) is absent")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    golds = [gsm8k_gold(r["answer"]) for r in rows]
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", g) for g in golds), [g for g in golds if not re.fullmatch(r"-?\d+", g)][
        :3
    ]


def test_a_gold_that_is_not_a_bare_answer_is_named_in_one_warning_line(tmp_path, capsys):
    rows = [
        {"prompt": "What is 6 times 7?", "completions": ["\\boxed{42}"], "answer": "6 * 7 = 42.\nSo the answer is 42"},
        {"prompt": "What is 2 plus 2?", "completions": ["\\boxed{4}"], "answer": "4"},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _score(tmp_path / "m.jsonl", tmp_path / "out")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    warnings = [line for line in err if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert "--samples m" in warnings[0] and "problem 0" in warnings[0] and "not a bare answer" in warnings[0]
    assert "What is 6 times 7?" in warnings[0] and "2 plus 2" not in warnings[0]


def test_plain_lines_of_one_prompt_with_different_gold_are_refused(tmp_path, capsys, no_model_loads):
    lines = [
        {"prompt": "What is 2 plus 2?", "completion": "4", "answer": "4"},
        {"prompt": "What is 3 plus 3?", "completion": "6", "answer": "6"},
        {"prompt": "What is 2 plus 2?", "completion": "5", "answer": "5"},
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = ["eval", "--samples", f"p={tmp_path / 'p.jsonl'}", "--reward", "arith_exact", "--quiet"]
    assert cli_main([*args, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --samples p: "), err
    assert "'What is 2 plus 2?'" in err[0] and "answer" in err[0] and "p.jsonl:3" in err[0] and "line 1" in err[0]
    assert not (tmp_path / "out" / "p").exists()
    # the same lines with one gold per prompt are one problem each, as before
    lines[2]["answer"] = "4"
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert cli_main([*args, "--output-dir", str(tmp_path / "out")]) == 0
    records = [json.loads(line) for line in (tmp_path / "out" / "p" / "samples.jsonl").read_text().splitlines()]
    assert [r["completions"] for r in records] == [["4", "5"], ["6"]]


def test_a_per_sample_field_that_differs_is_not_a_gold(tmp_path, no_model_loads):
    """Only the verifier's columns must agree: a per-sample score that differs between the lines of one prompt is not
    read, so the file is scored."""
    lines = [
        {"prompt": "2+2=", "completion": "4", "answer": "4", "score": 1.0},
        {"prompt": "2+2=", "completion": "5", "answer": "4", "score": 0.0},
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = ["eval", "--samples", f"p={tmp_path / 'p.jsonl'}", "--reward", "arith_exact", "--quiet"]
    assert cli_main([*args, "--output-dir", str(tmp_path / "out")]) == 0
