"""The import structure: no module or package circles (function-level imports included), and `rlvr_div` never
imports another top-level package (`eval`, `collapse_bench`).

The project's own check (:mod:`import_graph`) runs in any clone; the workplace's checker
``../shared/tools/import_cycles.py --packages`` runs too where ``../shared`` is beside the checkout (CI)."""

import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import find_cycle, imports, modules, unit_edges

ROOT = Path(__file__).resolve().parents[1]
CHECKER = ROOT.parent / "shared" / "tools" / "import_cycles.py"


TOP_LEVEL = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "tests" and (p / "__init__.py").is_file())


def test_no_module_or_package_circle():
    graph = imports(modules(ROOT, TOP_LEVEL))
    assert find_cycle(unit_edges(graph)) is None


def test_rlvr_div_imports_no_other_top_level_package():
    graph = imports(modules(ROOT, TOP_LEVEL))
    assert {"rlvr_div", "eval", "collapse_bench"} <= set(TOP_LEVEL)
    bad = sorted((a, b) for a, targets in graph.items() if a.split(".")[0] == "rlvr_div" for b in targets
                 if b.split(".")[0] != "rlvr_div")  # fmt: skip
    assert not bad


def test_the_check_sees_a_planted_package_circle(tmp_path):
    """Two sub-packages that import each other through different modules, one import inside a function."""
    for rel, text in {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/x.py": "from pkg.b.y import g\n",
        "pkg/b/__init__.py": "",
        "pkg/b/y.py": "def g():\n    from pkg.a import z\n    return z\n",
        "pkg/a/z.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = imports(modules(tmp_path, ["pkg"]))
    assert set(find_cycle(unit_edges(graph))) == {"pkg.a", "pkg.b"}
    (tmp_path / "pkg/b/y.py").write_text("def g():\n    return 1\n")
    assert find_cycle(unit_edges(imports(modules(tmp_path, ["pkg"])))) is None


@pytest.mark.skipif(not CHECKER.is_file(), reason="../shared/tools/import_cycles.py is not beside this checkout")
def test_no_import_circles_and_rlvr_div_never_imports_eval():
    proc = subprocess.run([sys.executable, str(CHECKER), "--packages"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no import circles" in proc.stdout


def test_checker_sees_a_planted_circle(tmp_path):
    """The checker is not vacuous: a two-module circle through a function-level import is reported."""
    if not CHECKER.is_file():
        pytest.skip("../shared/tools/import_cycles.py is not beside this checkout")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg.a import f\n    return f\n")
    proc = subprocess.run([sys.executable, str(CHECKER), "pkg"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "circle" in proc.stdout
