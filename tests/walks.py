"""Walks: the order in which a call path enters the project's modules ("rooms"), traced with ``sys.setprofile``,
for the layout tests and issue 34's walk measurement.

A frame's room is its module. An entry is a call from a frame of one project room into a function of another (the
caller being the innermost project frame on the stack; frames of other packages in between, e.g. TRL calling a
plug-in, do not count as rooms), counted once per calling frame and room: a loop in one function that calls a
helper of another module 50 times enters that module once. Imports are not part of the walk: nothing that runs
under a module's or a class's body counts. A room's floor is its height in the project's import
graph (:mod:`import_graph`; 0 for a module that imports no project module, else one above the highest module it
imports). The summary counts:

- stays: the walk's length, one per entry (the first ones from the code that called ``trace``);
- rooms: the distinct rooms visited;
- climbs: entries into a room on a higher floor than the caller's (a callback upward);
- returns: entries into a room the walk had visited before;
- entries: per room, how many stays it has.

    python tests/walks.py   # the walks of ``rlvr-div train`` (argv to TRL's train()) and ``rlvr-div eval`` (2 models)
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from import_graph import imports, modules  # noqa: E402

PACKAGES = ("rlvr_div", "eval", "collapse_bench")


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Module -> its height in the import graph: 0 when it imports no project module, else 1 + the highest floor
    among the modules it imports (the graph has no circle: ``tests/test_layout.py``)."""
    out: dict[str, int] = {}

    def floor(name: str) -> int:
        if name not in out:
            out[name] = 1 + max((floor(b) for b in graph[name]), default=-1)
        return out[name]

    for name in graph:
        floor(name)
    return out


@dataclass
class Walk:
    """The rooms in the order the walk entered them, with each entry's calling room (None: from outside)."""

    rooms: list[str] = field(default_factory=list)
    callers: list[str | None] = field(default_factory=list)
    floor: dict[str, int] = field(default_factory=dict)
    handed_off: bool = False  # the walk reached its ``stop``

    def summary(self) -> dict[str, Any]:
        climbs = sum(a is not None and self.floor[b] > self.floor[a] for a, b in zip(self.callers, self.rooms))
        seen: set[str] = set()
        returns = 0
        for room in self.rooms:
            returns += room in seen
            seen.add(room)
        return {"stays": len(self.rooms), "rooms": len(seen), "climbs": climbs, "returns": returns,
                "entries": dict(Counter(self.rooms).most_common())}  # fmt: skip


class _Handoff(Exception):
    """Raised where the traced path hands over (e.g. TRL's ``train``): the walk ends there."""


def trace(fn: Callable[[], Any], stop: tuple[str, str] | None = None, packages: tuple[str, ...] = PACKAGES) -> Walk:
    """Run ``fn()`` under ``sys.setprofile`` and return its walk through the project's modules. ``stop`` = (file
    suffix, function name): the walk ends at the first call of that function (it is not run: ``fn`` sees an
    exception there, which is swallowed)."""
    files = modules(ROOT, packages)
    walk = Walk(floor=floors(imports(files)))
    stack: list[tuple[str | None, set[str]]] = [(None, set())]  # per project frame (first: the caller outside)

    def room_of(frame: Any) -> str | None:
        name = frame.f_globals.get("__name__")
        return name if name in files else None

    hidden: list[Any] = []  # the module and class bodies being run (imports): nothing under them is the walk's

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            hidden.append(frame)
            return
        if hidden:
            if event == "return" and frame is hidden[-1]:
                hidden.pop()
            return
        if event == "call":
            if stop and frame.f_code.co_name == stop[1] and frame.f_code.co_filename.endswith(stop[0]):
                walk.handed_off = True
                raise _Handoff
            room = room_of(frame)
            if room is None:
                return
            if stack[-1][0] != room and room not in stack[-1][1]:
                stack[-1][1].add(room)
                walk.rooms.append(room)
                walk.callers.append(stack[-1][0])
            stack.append((room, set()))
        elif event == "return" and len(stack) > 1 and room_of(frame) is not None:
            stack.pop()

    sys.setprofile(profile)
    try:
        fn()
    except _Handoff:
        pass
    finally:
        sys.setprofile(None)
    return walk


def train_walk(argv: list[str]) -> Walk:
    """The walk of ``rlvr-div train`` with ``argv``, from the command line to TRL's ``Trainer.train`` (the trainer is
    built, the model loaded; no step runs)."""
    from rlvr_div.cli import main

    return trace(lambda: main(["train", *argv]), stop=("transformers/trainer.py", "train"))


def eval_walk(argv: list[str]) -> Walk:
    """The walk of ``rlvr-div eval`` with ``argv``, start to end (models sampled and scored, results and report
    written)."""
    from rlvr_div.cli import main

    return trace(lambda: main(["eval", *argv]))


if __name__ == "__main__":
    import json
    import tempfile

    from rlvr_div.models.tiny_base import tiny_model_path

    with tempfile.TemporaryDirectory() as out:
        walk = train_walk(["--config", str(ROOT / "recipes" / "tiny" / "grpo.yaml"), "--model_name_or_path",
                           str(tiny_model_path(progress=False)), "--output_dir", out])  # fmt: skip
        print("rlvr-div train:", json.dumps(walk.summary(), indent=1))
        small = ["--task", "arith", "--n", "8", "--limit", "12", "--max-new-tokens", "6", "--quiet"]
        base = str(tiny_model_path(progress=False))
        walk = eval_walk(["--model", f"base={base}", "--model", f"again={base}", *small, "--output-dir", out])
    print("rlvr-div eval, 2 models:", json.dumps(walk.summary(), indent=1))
