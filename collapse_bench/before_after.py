"""Behaviour unchanged across a change of the study or training code: the smoke collapse grid (``tests/fixtures/
collapse_smoke.yaml``, 8 runs) and a small β study (exact, anneal, point, sampled and α-DPG arms, 14 runs) are
trained by an older commit and by this checkout, then every JSON file and every report line of the two are compared,
the keys that record time or the code commit aside.

    python -m collapse_bench.before_after --old COMMIT [--out /tmp/before_after]

Exit code 0 when everything is equal, 1 (with the files that differ) otherwise. The old commit runs from a
temporary ``git worktree`` of this repository, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# keys that record when, how long or with which code a run ran (they differ between any two invocations)
VOLATILE = {"commit", "commits", "code_states", "wall_seconds", "train_wall_seconds", "invocations", "seconds",
            "step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "failures",
            "build_seconds"}  # fmt: skip
STUDY = """model: tiny
task: pairsum
task_options: {{max_target: 9}}
seeds: [1, 2]
betas: [1.0, 0.1]
path_every: 2
threads: 1
convergence: {{window: 0.2, tolerance: 0.01, min_steps: 100}}
common: {{max_steps: 4, learning_rate: 3.0e-4, temperature: 1.0, per_device_train_batch_size: 8, num_generations: 4,
         max_completion_length: 8, use_cpu: true}}
arms:
  - {{name: exact, kind: exact}}
  - {{name: grpo, kind: point, recipe: {root}/recipes/tiny/grpo.yaml}}
  - {{name: rkl, recipe: {root}/recipes/tiny/grpo_reverse_kl.yaml, key: divergence_coef}}
  - {{name: alpha_dpg, kind: point, recipe: {root}/recipes/tiny/alpha_dpg.yaml}}
  - {{name: anneal, kind: anneal, dtype: float64, perturbation: 0.01, final_learning_rate: 1.0e-5}}
"""
HASH_CACHE = "fingerprints.json"  # rlvr_div.models.fingerprint's cache of a run directory: compared by file hashes
RUN_STUDY = (
    "import sys\nfrom pathlib import Path\nfrom collapse_bench.beta_report import write_report\n"
    "from collapse_bench.beta_spec import load_study\nfrom collapse_bench.beta_study import run_study\n"
    "study, out = load_study(sys.argv[1]), Path(sys.argv[2])\nrun_study(study, out, progress=False)\n"
    "write_report(study, out, 'before/after', toy=None)\n"
)


def without_volatile(x: Any) -> Any:
    """``x`` with every :data:`VOLATILE` key removed, at any depth."""
    if isinstance(x, dict):
        return {k: without_volatile(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [without_volatile(v) for v in x]
    return x


def _report_lines(path: Path, places: dict[str, str]) -> list[str]:
    """A report's lines with each side's own directories replaced by a name, without the lines of wall times."""
    text = path.read_text()
    for place in sorted(places, key=len, reverse=True):  # a directory before any it is a prefix of
        text = text.replace(place, places[place])
    return [line for line in text.splitlines() if "wall" not in line.lower()]


def differences(old: Path, new: Path, old_places: dict[str, str], new_places: dict[str, str]) -> list[str]:
    """The files of two output directories that differ: the set of JSON files, each JSON file without its
    :data:`VOLATILE` keys (a state file by its fingerprint only: its config names the tree's own recipe paths; the
    hash cache by each model file's name, size and sha256), and
    each markdown report, its side's directories (``*_places``: path → name) named alike and wall times left out."""
    out = []
    files = sorted(p.relative_to(old) for p in old.rglob("*.json"))
    if files != sorted(p.relative_to(new) for p in new.rglob("*.json")):
        out.append(f"{old.name}: the JSON files differ in name")
    for rel in files:
        if not (new / rel).is_file():
            continue
        a, b = (json.loads((d / rel).read_text()) for d in (old, new))
        if rel.name in ("study.json", "benchmark.json"):
            a, b = a.get("fingerprint"), b.get("fingerprint")
        if rel.name == HASH_CACHE:  # the model files' hashes, keyed by each tree's own paths and inodes
            a, b = (sorted((Path(f).name, e["size"], e["sha256"]) for f, e in d["files"].items()) for d in (a, b))
        if without_volatile(a) != without_volatile(b):
            out.append(f"{old.name}/{rel}")
    for rel in sorted(p.relative_to(old) for p in old.rglob("*.md")):
        if not (new / rel).is_file() or _report_lines(old / rel, old_places) != _report_lines(new / rel, new_places):
            out.append(f"{old.name}/{rel}")
    return out


def train(root: Path, out: Path) -> None:
    """The smoke grid and the small β study with the code of ``root``, into ``out/grid`` and ``out/beta``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out.mkdir(parents=True)
    grid = [sys.executable, "-m", "rlvr_div", "collapse", "--config", str(root / "tests/fixtures/collapse_smoke.yaml"),
            "--out", str(out / "grid"), "--quiet"]  # fmt: skip
    subprocess.run(grid, cwd=root, env=env, check=True)
    config = out / "beta.yaml"
    config.write_text(STUDY.format(root=root))
    subprocess.run([sys.executable, "-c", RUN_STUDY, str(config), str(out / "beta")], cwd=root, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.before_after", description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the commit to compare this checkout with")
    ap.add_argument("--out", default="/tmp/before_after", help="scratch directory (replaced)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    tree = out / "old_tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.old], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    try:
        train(tree, out / "old")
        train(ROOT, out / "new")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    places = {"old": {str(out / "old"): "OUT", str(tree): "ROOT"}, "new": {str(out / "new"): "OUT", str(ROOT): "ROOT"}}
    found = [d for kind in ("grid", "beta")
             for d in differences(out / "old" / kind, out / "new" / kind, places["old"], places["new"])]  # fmt: skip
    for line in found:
        print(f"differs: {line}")
    print("equal" if not found else f"{len(found)} difference(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
