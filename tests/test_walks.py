"""Walks (``tests/walks.py``, issue 34): the tracer's counting rules on a known path, and the walk of ``rlvr-div
train``'s argv on the tiny base up to TRL's ``train()``, whose re-entries are each a decision (docs/contributing.md)."""

import tempfile

import pytest
from walks import ROOT, eval_walk, trace, train_walk


def test_a_loop_enters_a_module_once_per_calling_frame():
    from rlvr_div import ranges

    def path():
        for _ in range(5):
            ranges.out_of_range("x", 0.5, ranges.UNIT)  # one entry from outside, not five

    walk = trace(path)
    assert walk.rooms == ["rlvr_div.ranges"] and walk.callers == [None]
    assert walk.summary() == {"stays": 1, "rooms": 1, "climbs": 0, "returns": 0, "entries": {"rlvr_div.ranges": 1}}


def test_what_a_module_or_class_body_runs_is_not_part_of_the_walk():
    from rlvr_div import errors, ranges

    def path():
        class Body:  # a class body runs as an import does
            complaint = ranges.out_of_range("x", 2, ranges.UNIT)

        with errors.relative_path_hint(None):
            pass

    assert trace(path).rooms == ["rlvr_div.errors"]


def test_the_stop_ends_the_walk_and_is_reported():
    from rlvr_div import ranges

    def path():
        ranges.out_of_range("x", 0.5, ranges.UNIT)
        ranges.is_integer_field(ranges.dataclasses.fields(ranges.Range)[0])  # never reached

    walk = trace(path, stop=("rlvr_div/ranges.py", "is_integer_field"))
    assert walk.handed_off and walk.rooms == ["rlvr_div.ranges"]
    assert not trace(lambda: ranges.out_of_range("x", 2, ranges.UNIT), stop=("ranges.py", "nowhere")).handed_off


def test_train_walk_from_argv_to_trl(tiny_path):
    """Measured at the commit that added it: 41 stays in 20 rooms. ``train`` enters the recipe layer (the package
    ``rlvr_div.recipe``) once, from ``main`` (``load_recipe``: parse, checks, vLLM); ``build_trainer`` reads the task's
    and rewards' settings resolved while parsing, without calling back; a new entry is a change of the flow to look
    at, not noise (docs/contributing.md, "Walks")."""
    with tempfile.TemporaryDirectory() as out:
        walk = train_walk(["--config", str(ROOT / "recipes" / "tiny" / "grpo.yaml"), "--model_name_or_path", tiny_path,
                           "--output_dir", out])  # fmt: skip
    assert walk.handed_off, "the walk never reached TRL's Trainer.train"
    entries = walk.summary()["entries"]
    assert walk.rooms[:2] == ["rlvr_div.cli", "rlvr_div.cpu_threads"] and entries["rlvr_div.train"] == 1
    layer = [(a, b) for a, b in zip(walk.callers, walk.rooms)
             if b.startswith("rlvr_div.recipe.") and not (a or "").startswith("rlvr_div.recipe.")]  # fmt: skip
    assert layer == [("rlvr_div.train", "rlvr_div.recipe.parse")]
    # every climb (a call into a higher floor) goes through a table of names: the command's entry point (cli), a
    # task's or a reward's builder; a package calling into its own submodule (rlvr_div.models into its tiny_base) is a
    # call within one room, which the import graph leaves out of the floors
    climbs = {(a, b) for a, b in zip(walk.callers, walk.rooms)
              if a is not None and walk.floor[b] > walk.floor[a] and not b.startswith(f"{a}.")}  # fmt: skip
    assert all(a in ("rlvr_div.cli", "rlvr_div.tasks", "rlvr_div.rewards", "rlvr_div.registry") for a, _ in climbs)


def test_eval_reads_and_writes_each_model_s_records_once_and_reports_from_memory(tiny_path, tmp_path):
    """``rlvr-div eval`` with two models: ``eval.records`` is entered once per model (resume read and sample log) and
    once to write the results; the report never reads them back (issue 34: it used to enter 8 times)."""
    small = ["--task", "arith", "--n", "4", "--limit", "4", "--max-new-tokens", "4", "--quiet", "--threads", "1"]
    walk = eval_walk(["--model", f"base={tiny_path}", "--model", f"again={tiny_path}", *small, "--output-dir",
                      str(tmp_path)])  # fmt: skip
    assert (tmp_path / "again" / "results.json").is_file()
    assert walk.summary()["entries"]["eval.records"] == 3
    assert ("eval.report", "eval.records") not in set(zip(walk.callers, walk.rooms))


@pytest.mark.parametrize("packages", [("rlvr_div",), ("rlvr_div", "eval", "collapse_bench")])
def test_floors_rise_along_every_import(packages):
    from import_graph import imports, modules
    from walks import floors

    graph = imports(modules(ROOT, packages))
    floor = floors(graph)
    assert all(floor[a] > floor[b] for a, targets in graph.items() for b in targets)
