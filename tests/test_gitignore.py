"""What the documented commands write lands in ignored paths: a fresh clone stays clean after following the README,
the docs and the recipes (output directories of ``rlvr-div eval``/``train``/``demo``/``toy``, recipe ``output_dir`` and
``rehearsal_path``, the Makefile's targets)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# --output-dir X, --output_dir X, --out X, --rehearsal_path X (command lines), output_dir: X (recipes)
OPTION = re.compile(r"--(?:output-dir|output_dir|out|rehearsal_path)[ =]([^\s`'\"|)]+)")
KEY = re.compile(r"^(?:output_dir|rehearsal_path):\s*(\S+)", re.M)
# committed benchmark results (docs/study/collapse.md), tracked on purpose: rules in the top .gitignore keep models
# and logs out (checked below), where `rlvr-div collapse --fresh`, which empties the directory, cannot delete them
TRACKED_RESULTS = ("bench/results/",)


def tracked_results(path: str) -> bool:
    return path.startswith(TRACKED_RESULTS)


def written_paths() -> list[tuple[str, str]]:
    """(where, path) for every relative output path the README, docs, Makefile and recipes name."""
    out = []
    for page in [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]:
        out += [(page.name, p) for p in OPTION.findall(page.read_text(encoding="utf-8"))]
    for recipe in sorted((ROOT / "recipes").rglob("*.yaml")):
        out += [(recipe.relative_to(ROOT).as_posix(), p) for p in KEY.findall(recipe.read_text(encoding="utf-8"))]
    return [(w, p) for w, p in out if not p.startswith(("/", "~", "$")) and p not in ("DIR", "OUT", "NAME")]


def test_the_pattern_finds_what_the_readme_names():
    found = {p for _, p in written_paths()}
    assert {"demo_out", "runs/tiny/grpo"} <= found


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_documented_outputs_are_ignored():
    paths = written_paths()
    res = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"],
        input="".join(p.rstrip("/") + "/\n" for _, p in paths),  # every one is a directory
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    not_ignored = {line.split("\t")[1].rstrip("/") for line in res.stdout.splitlines() if line.startswith("::")}
    assert res.returncode in (0, 1) and len(res.stdout.splitlines()) == len(paths), res.stderr
    where = [f"{p} ({w})" for w, p in paths if p.rstrip("/") in not_ignored and not tracked_results(p)]
    assert not where, f"documented commands write into the checkout outside .gitignore: {', '.join(where)}"
    # a tracked results directory keeps no model or log (a tracked results file, e.g. a base profile's JSON, has none)
    for p in {p for _, p in paths if tracked_results(p) and not Path(p).suffix}:
        heavy = [f"{p}/runs/t/m/v/seed1/model.safetensors", f"{p}/logs/x.log", f"{p}/rehearsal/t/samples.jsonl"]
        kept = subprocess.run(["git", "check-ignore", "--no-index", *heavy], cwd=ROOT, capture_output=True, text=True)
        assert kept.stdout.split() == heavy, f"{p}: heavy outputs not ignored: {kept.stdout}"
