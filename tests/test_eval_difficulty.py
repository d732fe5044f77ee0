"""`rlvr-div eval` on the ``bird`` task reports execution accuracy per difficulty.

The tiny built-in model cannot read SQL prompts (64 positions), so the sampler is replaced by one that answers each
problem with a known number of gold queries; everything else (task, reward, samples.jsonl, metrics, report) is the
real evaluation path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bird_fixture import DEV, make_bird_dir

from eval import runner
from eval.diversity import PER_PROBLEM_KEYS
from eval.runner import compute_metrics, prepare, run
from rlvr_div.sampling import PromptSamples

N = 4
# correct completions out of N, per question_id: simple 4/4 and 3/4, moderate 2/4, challenging 0/4
CORRECT = {0: 2, 1: 4, 2: 0, 3: 3}


class FakeSampler:
    """Answers problem i with CORRECT[question_id] copies of its gold query and wrong queries for the rest."""

    def __init__(self, dataset):
        self.dataset = dataset

    def sample(self, prompts, indices, progress=False):
        for i in indices:
            row = self.dataset[i]
            c = CORRECT[row["question_id"]]
            texts = [f"```sql\n{row['gold_sql']}\n```"] * c + ["```sql\nSELECT 'wrong'\n```"] * (N - c)
            yield PromptSamples(i, prompts[0], [1], texts, [[1, 2]] * N, ["stop"] * N)


def test_bird_eval_reports_accuracy_per_difficulty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bird = make_bird_dir(tmp_path / "bird_dev", "dev", DEV[:4])
    job = prepare(
        ["base=tiny"],
        task="bird",
        output_dir=tmp_path / "eval",
        task_options={"path": str(bird)},
        device="cpu",
        split="dev",
        n=N,
        bootstrap=10,
        maj_subsets=5,
    )
    assert job.reward.settings()["semantics"] == "bird"  # the task's own reward
    monkeypatch.setattr(runner, "make_eval_sampler", lambda ref, settings: FakeSampler(job.dataset))
    results = run(job, progress=False)

    by = results["base"]["metrics"]["by_difficulty"]
    assert list(by) == ["simple", "moderate", "challenging"]
    assert by["simple"]["problems"] == 2 and by["simple"]["accuracy"] == pytest.approx((4 / 4 + 3 / 4) / 2)
    assert by["moderate"]["accuracy"] == 0.5 and by["challenging"]["accuracy"] == 0.0
    assert by["simple"]["pass_at_k"]["1"] == pytest.approx(by["simple"]["accuracy"])
    assert by["moderate"]["pass_at_k"][str(N)] == 1.0 and by["challenging"]["pass_at_k"][str(N)] == 0.0
    saved = json.loads((tmp_path / "eval" / "base" / "results.json").read_text())
    assert saved["metrics"]["by_difficulty"] == by

    report = (tmp_path / "eval" / "report.md").read_text()
    assert "## Execution accuracy by difficulty" in report
    row = next(line for line in report.splitlines() if line.startswith("| `base` | 0.875"))
    assert row == "| `base` | 0.875 (1.000) | 0.500 (1.000) | 0.000 (0.000) | 0.562 (0.750) |"
    assert "| model | simple (2) | moderate (1) | challenging (1) | all |" in report


def test_tasks_without_difficulty_have_no_such_section(tmp_path: Path) -> None:
    records = [
        {"index": i, "n": 2, "c": c, "answers": ["a", "b"], "correct": [c > 0, c > 1], "scores": [1.0, 0.0]}
        | {k: 0.0 for k in PER_PROBLEM_KEYS}
        for i, c in enumerate([0, 1, 2])
    ]
    settings = runner.EvalSettings(model="tiny", adapter=None, task="arith", n=2, bootstrap=10, maj_subsets=5)
    assert "by_difficulty" not in compute_metrics(records, settings)
    with_groups = [r | {"difficulty": d} for r, d in zip(records, ["hard", "simple", "hard"])]
    assert list(compute_metrics(with_groups, settings)["by_difficulty"]) == ["simple", "hard"]  # BIRD's names first
