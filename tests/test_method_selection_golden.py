"""Which methods every recipe, every committed run's resolved ``recipe.yaml`` and every real-math study arm selects,
against a record made before the method-selection redesign (issue 59, item 1): a change to how recipes select
methods must keep each of these selections, or say so by writing the record again.

    .venv/bin/python tests/test_method_selection_golden.py --write    # record today's selections
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "fixtures" / "method_selection.json"
CPU = ["--bf16", "false", "--use_cpu", "true"]  # the real-model recipes ask for bf16 on a GPU


def _selected(argv: list[str]) -> dict[str, object]:
    """The trainer, the active plug-ins (in the order they run), TRL's ``beta`` as built (its KL coefficient, or the
    switch of its reference pass) and its entropy bonus (TRL's own, no plug-in: its coefficient, and whether it
    adapts) of the config ``argv`` parses into, or the one-line refusal."""
    from rlvr_div.errors import ConfigError
    from rlvr_div.recipe import parse_recipe
    from rlvr_div.trainers.plugin import active_plugins

    try:
        script, training, _ = parse_recipe(argv)
    except ConfigError as e:
        return {"refused": str(e)}
    return {"trainer": script.trainer, "methods": [cls.name for cls in active_plugins(training)],
            "beta": training.beta, "entropy_coef": training.entropy_coef,
            "adaptive_entropy": training.use_adaptive_entropy}  # fmt: skip


def selections(runs: list[str] | None = None) -> dict[str, dict[str, object]]:
    """Every recipe (with CPU settings), the resolved ``recipe.yaml`` of the runs under bench/results (``runs``: these
    paths; default: every one there), and every arm of bench/real_math.yaml (as its runs' arguments give it), by
    name."""
    from collapse_bench.real_math_plan import train_argv
    from collapse_bench.real_math_spec import load_study

    out: dict[str, dict[str, object]] = {}
    for recipe in sorted((ROOT / "recipes").glob("*/*.yaml")):
        out[str(recipe.relative_to(ROOT))] = _selected(["--config", str(recipe), *CPU])
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench" / "results").glob("**/recipe.yaml"))
    for resolved in found if runs is None else runs:
        out[resolved] = _selected(["--config", str(ROOT / resolved)])
    study = load_study(ROOT / "bench" / "real_math.yaml", check_inputs=False)
    for arm in study.arms:
        argv = train_argv(study, arm, 1, "/tmp/run", [0, 1], "/tmp/rehearsal", resume=False, resolve_model=False)
        out[f"bench/real_math.yaml:{arm.name}"] = _selected(argv)
    return out


def test_every_recipe_run_and_study_arm_selects_the_recorded_methods(no_model_packages: None) -> None:
    """Recipes and study arms as recorded, no more and no fewer; the recorded runs (a run committed later, or one a
    study is writing, is not in the record) each still there, selecting what they did."""
    recorded = json.loads(RECORD.read_text())
    runs = sorted(k for k in recorded if k.startswith("bench/results/"))
    assert len(runs) >= 9 and all((ROOT / r).is_file() for r in runs), "a recorded run's recipe.yaml is gone"
    now = selections(runs)
    changed = {k: (recorded.get(k), now.get(k)) for k in set(recorded) | set(now) if recorded.get(k) != now.get(k)}
    assert not changed, f"selections differ from {RECORD.name} (recorded, now): {changed}"
    assert all("refused" not in v for v in now.values())  # every recipe and run loads
    assert ["divergence", "mara"] in [v["methods"] for v in now.values()]  # the record holds plug-ins, not names


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    # the committed runs only (a study may be writing others)
    tracked = subprocess.run(["git", "ls-files", "bench/results/**/recipe.yaml"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
    RECORD.write_text(json.dumps(selections(tracked), indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}")
