"""``rlvr-div``: one entry point whose subcommands are found through the ``rlvr_div.commands`` entry-point group.

Each subcommand is ``main(argv: list[str] | None) -> int``. A :class:`ConfigError` anywhere before training prints
``error: <message>`` on one line and exits with code 2; Ctrl-C prints one line and exits with code 130.
``python -m rlvr_div`` is the same entry point. The entry-point indirection lets the separate ``eval`` package add
``rlvr-div eval`` without ``rlvr_div`` importing it. Before a subcommand loads, torch's waiting threads are set to
sleep rather than spin (:mod:`rlvr_div.cpu_threads`) unless ``OMP_WAIT_POLICY`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from rlvr_div.cpu_threads import prefer_passive_waiting
from rlvr_div.errors import ConfigError

COMMAND_GROUP = "rlvr_div.commands"
_HELP = {
    "train": "train with a recipe (TRL GRPO or a divergence trainer)",
    "list": "list registered tasks, rewards, divergences, trainers and methods (plug-ins)",
    "eval": "pass@k evaluation of one or more models",
    "rehearse": "DPH-RL offline stage: build the rehearsal set",
    "calibrate": "beta <-> validity calibration of the KL-regularised optimum",
    "toy": "exact toy lab of the tilted model and its projections",
    "demo": "the whole story on the tiny model",
    "collapse": "the collapse benchmark: methods x seeds x tasks, exact distances to p*, the beta sweep",
    "beta-study": "the beta question to convergence: arms x beta x seeds against the optimum p_beta",
    "build-tiny": "build (or locate) a built-in tiny base model ({tiny_bases})",
    "merge": "merge a LoRA adapter into its base and save the full model",
}


def _commands() -> dict[str, Callable[[list[str] | None], int]]:
    return {ep.name: ep for ep in entry_points(group=COMMAND_GROUP)}  # type: ignore[misc]


def run_command(fn: Callable[[list[str] | None], int | None], argv: list[str]) -> int:
    """Run a subcommand, turning :class:`ConfigError` and a full device (:func:`rlvr_div.runs.disk_space.out_of_space`)
    into one line on stderr and exit code 2, and Ctrl-C into one line (the interrupted command's own message, e.g.
    ``train``'s resume command) and exit code 130."""
    try:
        return int(fn(argv) or 0)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"\n{e}" if str(e) else "\ninterrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except Exception as e:
        from rlvr_div.runs.disk_space import out_of_space, written_file

        if not out_of_space(e):
            raise
        where = written_file(e)
        print(f"error: no space left on the device{f' writing {where}' if where else ''}; free space and run the "
              "same command again", file=sys.stderr)  # fmt: skip
        return 2


def _help(name: str) -> str:
    """The one-line help of a command; ``{tiny_bases}`` is filled from :data:`rlvr_div.models.tiny_base.TINY_BASES`, so
    the list of named bases cannot drift from the registry."""
    text = _HELP.get(name, "")
    if "{tiny_bases}" in text:
        from rlvr_div.models.tiny_base import TINY_BASES

        text = text.replace("{tiny_bases}", ", ".join(TINY_BASES))
    return text


def _usage(cmds: dict) -> str:
    lines = ["usage: rlvr-div COMMAND [ARGS ...]", "", "commands:"]
    lines += [f"  {name:<11} {_help(name)}" for name in sorted(cmds)]
    return "\n".join(lines)


def _plugin_lines() -> list[str]:
    """``rlvr-div list``'s methods: each plug-in of :mod:`rlvr_div.trainers` (found as the trainer finds them,
    :func:`rlvr_div.trainers.plugin.plugin_classes`) with the recipe keys that select it."""
    from rlvr_div.trainers.plugin import plugin_classes

    rows = []
    for cls in plugin_classes():
        how = cls.selected_by or (f"keys: {', '.join(cls.switches)}" if cls.switches else "always on")
        rows.append((cls.name, how))
    return [f"  {name:<24} {how}" for name, how in sorted(rows)]


def main(argv: list[str] | None = None) -> int:
    prefer_passive_waiting()  # before any subcommand imports torch (rlvr_div/cpu_threads.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = _commands()
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(cmds))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in cmds:
        print(f"error: unknown command {name!r}; known: {', '.join(sorted(cmds))}", file=sys.stderr)
        return 2
    try:
        fn = cmds[name].load()
    except (ModuleNotFoundError, AttributeError) as e:
        print(f"error: command {name!r} is not available in this installation ({e})", file=sys.stderr)
        return 2
    return run_command(fn, rest)


def list_main(argv: list[str] | None = None) -> int:
    """Print registered tasks, rewards, divergences, trainers and methods (the trainers' plug-ins, with the recipe
    keys that select each)."""
    import argparse
    import importlib

    from rlvr_div.rewards import list_rewards
    from rlvr_div.tasks import list_tasks

    argparse.ArgumentParser(prog="rlvr-div list", description=list_main.__doc__).parse_args(argv)
    print("tasks:")
    for spec in list_tasks():
        print(f"  {spec.name:<14} reward={spec.reward:<14} {spec.description}")
    print("rewards:")
    for name in list_rewards():
        print(f"  {name}")
    for title, module, attr in (
        ("divergences", "rlvr_div.divergences", "DIVERGENCES"),
        ("trainers", "rlvr_div.trainers", "TRAINERS"),
    ):
        try:
            names = getattr(importlib.import_module(module), attr).names()
        except (ModuleNotFoundError, AttributeError):
            continue
        print(f"{title}:")
        for name in names:
            print(f"  {name}")
    try:
        methods = _plugin_lines()
    except ModuleNotFoundError:  # trl or a plug-in's dependency missing: the methods are left out
        return 0
    print("methods (plug-ins; selected by):")
    for line in methods:
        print(line)
    return 0


def build_tiny_main(argv: list[str] | None = None) -> int:
    """Print the directory of a named tiny base (shipped with rlvr-div, its files checked against their sha256), or
    run the recipe that built it: ``--rebuild DIR`` builds it into DIR and says whether this machine reproduces the
    shipped bytes; ``--ship`` (for developers) rebuilds the shipped copy and its manifest entry."""
    import argparse

    from rlvr_div.models.tiny_base import TINY_BASES, TINY_NAME, compare_with_shipped, ship_tiny, tiny_model_path

    parser = argparse.ArgumentParser(
        prog="rlvr-div build-tiny", description=f"{_help('build-tiny')}. {build_tiny_main.__doc__}"
    )
    parser.add_argument(
        "name", nargs="?", default=TINY_NAME, choices=list(TINY_BASES), help=f"which named base (default {TINY_NAME})"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--rebuild", metavar="DIR", help="build the base by its recipe into DIR and compare")
    what.add_argument("--ship", action="store_true", help="rebuild the shipped copy and record its sha256")
    args = parser.parse_args(argv)
    if args.rebuild:
        from rlvr_div.models.tiny_base import build_tiny_model

        out = build_tiny_model(args.rebuild, TINY_BASES[args.name])
        print(f"{out}: {compare_with_shipped(out, args.name)}")
    elif args.ship:
        print(ship_tiny(args.name))
    else:
        print(tiny_model_path(TINY_BASES[args.name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
