"""Every committed run of the collapse benchmarks and of the β / real-LM studies still has the identity today's code
gives it, so none would be trained again (a change to the recipe layer, the method selection or an argv builder that
moves one fails here; issue 59's guard rail). The real-math study's runs: tests/test_real_math_study.py. On a fresh
clone: no model package is installed (the real-LM studies name GGUF packages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _collapse_dirs() -> list[Path]:
    return sorted(d for d in RESULTS.glob("collapse*") if (d / "benchmark.json").is_file())


def _study_dirs() -> list[tuple[Path, Path]]:
    """(results directory, its config) of every β-engine study with committed runs."""
    pairs = [(RESULTS / name, ROOT / "bench" / f"{name}.yaml") for name in ("beta", "beta_v2", "beta_v2_anneal")]
    pairs.append((RESULTS / "real_lm" / "study", ROOT / "bench" / "real_lm.yaml"))
    for d in sorted((RESULTS / "real_lm").iterdir()):
        if (d / "study.json").is_file() and d.name != "study":
            pairs.append((d, ROOT / "bench" / f"real_lm_{d.name}.yaml"))
    return pairs


def test_the_committed_result_directories_are_all_checked():
    """Each directory here has its config, and they hold the runs counted when this guard was written (more may
    come; fewer means results were lost)."""
    collapse = {d.name: len(list(d.glob("runs/**/result.json"))) for d in _collapse_dirs()}
    assert all((ROOT / "bench" / f"{name}.yaml").is_file() for name in collapse)
    assert len(collapse) == 13 and sum(collapse.values()) >= 684
    studies = {d.name: len(list(d.glob("runs/**/result.json"))) for d, _ in _study_dirs()}
    assert all(config.is_file() for _, config in _study_dirs())
    assert len(studies) == 12 and sum(studies.values()) >= 133


@pytest.mark.parametrize("directory", _collapse_dirs(), ids=lambda d: d.name)
def test_every_committed_collapse_run_keeps_its_identity(directory: Path, no_model_packages: None) -> None:
    from collapse_bench.spec import Run, load_benchmark, run_identity

    bench = load_benchmark(ROOT / "bench" / f"{directory.name}.yaml")
    for path in sorted(directory.glob("runs/**/result.json")):
        result = json.loads(path.read_text())
        now = json.loads(json.dumps(run_identity(bench, Run(**result["run"]))))
        assert now == result["identity"], f"{path.relative_to(ROOT)} would be trained again"


@pytest.mark.parametrize("directory,config", _study_dirs(), ids=lambda x: x.name)
def test_every_committed_study_run_keeps_its_identity(directory: Path, config: Path, no_model_packages: None) -> None:
    from collapse_bench.beta_spec import StudyRun, load_study, run_identity

    study = load_study(config)
    for path in sorted(directory.glob("runs/**/result.json")):
        result = json.loads(path.read_text())
        assert run_identity(study, StudyRun(**result["run"])) == result["identity"], (
            f"{path.relative_to(ROOT)} would be trained again"
        )
