"""Scoring a sample log made elsewhere reads its answers by the log's own rule (issue 60, item 3): an lm-eval GSM8K
log's completions ("The answer is 18.", "#### 18") used to score 0 under the task's default (the last ``\\boxed{}``);
a GSM8K-style log now gets ``extract="gsm8k"`` (the number after the first "The answer is" or "####", lm-eval's
strict-match) with ``fallback="last_number"`` (its flexible-extract), under any setting the user gives. Our own
samples and logs of other tasks keep the task's settings."""

from __future__ import annotations

import json
from pathlib import Path

from eval.sample_formats import read_sample_file
from rlvr_div.cli import main as cli_main
from rlvr_div.rewards.math import MathAccuracy, gsm8k_marked

DOC = {"question": "Janet sells 9 eggs at $2 each. How many dollars?", "answer": "9 * 2 = <<9*2=18>>18\n#### 18"}
# strict-match "The answer is", strict-match "####", flexible-extract only, a wrong first answer, no answer at all
COMPLETIONS = [
    "She sells 9 eggs at $2 each. The answer is 18.",
    "9 * 2 = 18 dollars\n#### 18",
    "So she makes 18 dollars every day.",
    "The answer is 17. Then 18 more.",
    "I do not know.",
]
LOG_SCORES = [1.0, 1.0, 1.0, 0.0, 0.0]


def _lm_eval_log(path: Path, task_name: str = "gsm8k_cot") -> Path:
    line = {
        "doc_id": 0,
        "doc": DOC,
        "target": DOC["answer"],
        "arguments": {"gen_args_0": {"arg_0": f"Question: {DOC['question']}\nAnswer:", "arg_1": {}}},
        "resps": [COMPLETIONS],
        "filtered_resps": ["18"],
        "filter": "strict-match",
        "metrics": ["exact_match"],
        "task_name": task_name,
    }
    path.write_text(json.dumps(line) + "\n")
    return path


def _score(log: Path, out: Path, *extra: str) -> tuple[dict, dict]:
    args = ["eval", "--samples", f"m={log}", "--reward", "math_accuracy", "--reward-arg", "workers=1", *extra]
    assert cli_main([*args, "--quiet", "--output-dir", str(out)]) == 0
    record = json.loads((out / "m" / "samples.jsonl").read_text().splitlines()[0])
    return record, json.loads((out / "m" / "results.json").read_text())["config"]


def test_the_gsm8k_rule_reads_lm_evals_strict_match_answers() -> None:
    assert gsm8k_marked("9 * 2 = 18.\nThe answer is 1,800.") == "1800"
    assert gsm8k_marked("work... #### 18\n\nQuestion: ... #### 7") == "18"  # the first mark that a number follows
    assert gsm8k_marked("#### Step 1: 9 * 2. The answer is $18") == "18"
    assert gsm8k_marked("18 dollars") is None
    reward = MathAccuracy(extract="gsm8k")
    assert [reward.extract(c) for c in COMPLETIONS] == ["18", "18", None, "17", None]
    flexible = MathAccuracy(extract="gsm8k", fallback="last_number")
    assert [flexible.extract(c) for c in COMPLETIONS] == ["18", "18", "18", "17", None]
    assert flexible.settings()["extract"] == "gsm8k" and flexible.settings()["fallback"] == "last_number"


def test_an_lm_eval_gsm8k_log_is_scored_by_lm_evals_rule_by_default(tmp_path: Path) -> None:
    log = _lm_eval_log(tmp_path / "samples.jsonl")
    assert read_sample_file(str(log)).style == "gsm8k"
    record, config = _score(log, tmp_path / "out")
    assert record["answers"] == ["18", "18", "18", "17", None]
    assert record["scores"] == LOG_SCORES  # under the task's boxed rule all five scored 0
    assert config["reward_settings"]["extract"] == "gsm8k" and config["reward_settings"]["fallback"] == "last_number"
    assert config["scored_from"]["style"] == "gsm8k"
    # the user's settings win over the log's, key by key: strict-match only, or the boxed rule
    record, config = _score(log, tmp_path / "strict", "--reward-arg", "fallback=none")
    assert record["scores"] == [1.0, 1.0, 0.0, 0.0, 0.0] and config["reward_settings"]["extract"] == "gsm8k"
    record, _ = _score(log, tmp_path / "boxed", "--reward-arg", "extract=boxed", "--reward-arg", "fallback=none")
    assert record["scores"] == [0.0] * 5  # the task's rule, as before


def test_a_verl_dump_whose_prompt_asks_for_the_hashes_is_gsm8k_style(tmp_path: Path) -> None:
    """verl's GSM8K data asks 'output the final answer after "####"'; a markdown heading is no such mark."""
    prompt = f'{DOC["question"]} Let\'s think step by step and output the final answer after "####".'
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps({"input": prompt, "output": c, "gts": "18", "score": 0, "step": 1}) + "\n"
                           for c in COMPLETIONS))  # fmt: skip
    assert read_sample_file(str(log)).style == "gsm8k"
    record, _ = _score(log, tmp_path / "out")
    assert record["scores"] == LOG_SCORES
    heading = tmp_path / "heading.jsonl"
    heading.write_text(json.dumps({"input": "#### Problem\nWhat is 9 * 2?", "output": "18", "gts": "18"}) + "\n")
    assert read_sample_file(str(heading)).style is None


def test_other_logs_and_our_own_samples_keep_the_tasks_settings(tmp_path: Path) -> None:
    other = {"doc_id": 0, "doc": {"question": "q", "answer": "18"}, "target": "18", "arguments": [["q", {}]],
             "resps": [COMPLETIONS], "task_name": "arith"}  # fmt: skip
    (tmp_path / "other.jsonl").write_text(json.dumps(other) + "\n")
    assert read_sample_file(str(tmp_path / "other.jsonl")).style is None
    record, config = _score(tmp_path / "other.jsonl", tmp_path / "out")
    assert record["scores"] == [0.0] * 5 and "extract" not in config["reward_settings"]  # the boxed default
    # our own samples.jsonl, even one scored from a GSM8K log, has no style of its own: the task's settings apply
    _score(_lm_eval_log(tmp_path / "samples.jsonl"), tmp_path / "gsm8k")
    assert read_sample_file(str(tmp_path / "gsm8k" / "m")).style is None
    # in one report, each log keeps its own rule, and the report says which log was scored with other settings
    args = ["eval", "--samples", f"base={tmp_path / 'other.jsonl'}", "--samples", f"gsm={tmp_path / 'samples.jsonl'}"]
    args += [
        "--reward",
        "math_accuracy",
        "--reward-arg",
        "workers=1",
        "--quiet",
        "--output-dir",
        str(tmp_path / "both"),
    ]
    assert cli_main(args) == 0
    scores = {n: json.loads((tmp_path / "both" / n / "samples.jsonl").read_text())["scores"] for n in ("base", "gsm")}
    assert scores == {"base": [0.0] * 5, "gsm": LOG_SCORES}
    report = (tmp_path / "both" / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("- `gsm`"))
    assert "GSM8K-style" in line and '"extract": "gsm8k"' in line and '"fallback": "last_number"' in line
    assert "scored with reward settings" not in next(x for x in report.splitlines() if x.startswith("- `base`"))
