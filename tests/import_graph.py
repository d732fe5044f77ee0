"""The project's import graph, read from the source with ``ast`` (function-level imports included), for the layering
tests: module circles, package circles (two sibling sub-packages or modules that import each other through any of
their modules), and imports of one top-level package by another."""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterable
from pathlib import Path


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of the given top-level packages."""
    out = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its file (a package's own submodules left out)."""
    known = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name and not target.startswith(name + "."):
                    found.add(target)
        graph[name] = found
    return graph


def unit_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """For every import a -> b, the edge between the two children of their deepest common package that hold them
    (rlvr_div.tasks.sql -> rlvr_div.models gives rlvr_div.tasks -> rlvr_div.models)."""
    edges = set()
    for a, targets in graph.items():
        for b in targets:
            pa, pb = a.split("."), b.split(".")
            common = 0
            while common < min(len(pa), len(pb)) and pa[common] == pb[common]:
                common += 1
            if common < len(pa) and common < len(pb):
                edges.add((".".join(pa[: common + 1]), ".".join(pb[: common + 1])))
    return edges


def find_cycle(edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """One circle of the directed graph, or None."""
    sorter = graphlib.TopologicalSorter()
    for a, b in edges:
        sorter.add(a, b)
    try:
        sorter.prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return None
