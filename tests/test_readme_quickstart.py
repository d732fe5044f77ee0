"""The README's CPU quickstart trains its recipes on one task and evaluates them together (issue 60, item 4):
`grpo.yaml` trains `arith` and `forward_kl.yaml` `pairsum`, so the two could not be compared in one `eval`. Each
`rlvr-div train` line is parsed as `train` parses it (recipe plus overrides), and the `eval` line must name that task
and every run the quickstart trains."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from eval.cli import build_parser
from eval.settings import parse_model_arg
from rlvr_div.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[list[str]]:
    """The `rlvr-div` commands of the README's "Quickstart on a CPU" block (continuations joined, comments gone),
    without the program name."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart on a CPU\n\n```bash\n(.*?)\n```", text, re.S)
    assert block is not None, "README.md has no '## Quickstart on a CPU' bash block"
    joined = block.group(1).replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0].endswith("rlvr-div"):
            commands.append(words[1:])
    return commands


def test_the_quickstart_trains_one_task_and_evaluates_its_runs_together(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the recipes' paths are relative to the checkout, as the README runs them
    commands = quickstart_commands()
    trains = [c[1:] for c in commands if c[0] == "train"]
    evals = [c[1:] for c in commands if c[0] == "eval"]
    assert len(trains) >= 2 and len(evals) == 1, commands
    runs = {}
    for argv in trains:
        script, training, _ = parse_recipe(argv)
        runs[training.output_dir] = script.task
    assert len(runs) == len(trains), f"two quickstart runs share an output_dir: {runs}"
    tasks = set(runs.values())
    assert len(tasks) == 1, f"the quickstart trains different tasks: {runs}"
    args = build_parser().parse_args(evals[0])
    assert args.task in tasks
    evaluated = {parse_model_arg(m)[1] for m in args.model}
    assert set(runs) <= evaluated, f"eval compares {sorted(evaluated)}, the quickstart trains {sorted(runs)}"
