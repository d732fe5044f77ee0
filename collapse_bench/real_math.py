"""The real-math study (issue 62): real LMs trained with RLVR on real math word problems, each remedy against stock
GRPO in the held-out problems the base solves and training loses.

    python -m collapse_bench.real_math run    --config bench/real_math.yaml --out DIR [--arms a,b] [--seeds 1,2]
    python -m collapse_bench.real_math report --config bench/real_math.yaml --out DIR

``run`` trains and evaluates every run not yet finished, one at a time, resumable at every stage
(:mod:`collapse_bench.real_math_runs`); ``report`` writes ``report.md``, ``report.json`` and the figures from the
finished runs' ``result.json`` files (:mod:`collapse_bench.real_math_report`). The configuration:
:mod:`collapse_bench.real_math_spec`. A bad config, option or directory is one ``error:`` line (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr_div.errors import ConfigError


def _names(text: str | None, flag: str) -> list[str] | None:
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ConfigError(f"{flag} must list at least one name, comma-separated")
    return names


def _seeds(text: str | None) -> list[int] | None:
    names = _names(text, "--seeds")
    if names is None:
        return None
    try:
        return [int(s) for s in names]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    summary = " ".join(__doc__.split("\n\n")[0].split())
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.real_math", description=summary)
    ap.add_argument("command", choices=["run", "report"])
    ap.add_argument("--config", default="bench/real_math.yaml", help="the study config (default bench/real_math.yaml)")
    ap.add_argument("--out", required=True, help="the study directory (runs, evaluations, report)")
    ap.add_argument("--arms", default=None, help="run only these arms (comma-separated names)")
    ap.add_argument("--seeds", default=None, help="run only these seeds (comma-separated)")
    ap.add_argument("--in-process", action="store_true",
                    help="run each rlvr-div command in this process instead of a child process")  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from collapse_bench.real_math_stages import StageFailed

    try:
        return _main(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except StageFailed as e:  # the filter's or the base's evaluation: nothing can run without them
        print(f"error: {e}", file=sys.stderr)
        return 1


def _main(args: argparse.Namespace) -> int:
    from collapse_bench.real_math_report import write_report
    from collapse_bench.real_math_spec import load_study

    out = Path(args.out)
    command = f"python -m collapse_bench.real_math report --config {args.config} --out {args.out}"
    if args.command == "report":
        study = load_study(args.config, check_inputs=False)
        if not (out / "base.json").is_file():
            raise ConfigError(f"{out} holds no real-math study to report on (no base.json)")
        print(f"report: {write_report(study, out, command, args.config)}")
        return 0
    from collapse_bench.real_math_runs import Driver
    from collapse_bench.real_math_stages import in_process_executor, subprocess_executor

    study = load_study(args.config)
    if is_draft(args.config):
        raise ConfigError(f"{args.config} is a draft (draft: true): its pilot values are not set, so it does not run; "
                          "set them, remove the key and commit the config first")  # fmt: skip
    executor = in_process_executor if args.in_process else subprocess_executor
    driver = Driver(study, out, executor, config=args.config)
    failed = driver.run(_names(args.arms, "--arms"), _seeds(args.seeds))
    print(f"report: {write_report(study, out, command, args.config)}")
    return 1 if failed else 0


def is_draft(config: str | Path) -> bool:
    """Whether a study config says ``draft: true`` (values still to be set: ``run`` refuses it, ``report`` reads it)."""
    from rlvr_div.recipe import read_yaml_mapping

    draft = read_yaml_mapping(Path(config), "real-math study config").get("draft", False)
    if not isinstance(draft, bool):
        raise ConfigError(f"draft must be true or false, got {draft!r}")
    return draft


if __name__ == "__main__":
    raise SystemExit(main())
