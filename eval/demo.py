"""``rlvr-div demo`` (= ``make demo``): the whole story on the built-in tiny model, on one CPU.

Stages, each resumable (a rerun with the same settings skips what is finished; a killed training resumes from its
last checkpoint, a killed evaluation from its last scored problem):

1. build (or find) the tiny base model;
2. the DPH-RL offline stage on ``pairsum`` (k samples per prompt from the base, split into D_pef / D_exp);
3. train, with equal budgets (same steps, rollouts per step and learning rate, from the recipes in
   ``recipes/tiny``): GRPO with reverse KL (k3) at a small β, GRPO with forward KL, DPH-RL with forward KL and with
   JS, and α-DPG;
4. evaluate the base and every trained model with n samples per prompt (pass@k, diversity, where the base
   overtakes);
5. the exact toy lab;
6. ``<out>/report.md``: stage times, a training table, the evaluation's tables and plots, and the toy table.

The numbers are whatever the runs measure.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from rlvr_div.errors import ConfigError

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "tiny"
TASK = "pairsum"
STATE_FILE = "demo_state.json"
REPORT = "report.md"


@dataclass(frozen=True)
class Method:
    """A trained model of the demo: its recipe in ``recipes/tiny`` and how the report names it."""

    name: str
    recipe: str
    label: str


METHODS = (
    Method("grpo_reverse_kl", "grpo_reverse_kl.yaml", "GRPO + reverse KL (k3)"),
    Method("forward_kl", "forward_kl.yaml", "GRPO + forward KL"),
    Method("dph_forward_kl", "dph_forward_kl.yaml", "DPH-RL, forward KL"),
    Method("dph_js", "dph_js.yaml", "DPH-RL, JS"),
    Method("alpha_dpg", "alpha_dpg.yaml", "α-DPG"),
)
REHEARSAL_RECIPE = "dph_forward_kl.yaml"  # both DPH recipes share its offline settings (k, threshold, sampling)


@dataclass(frozen=True)
class DemoSettings:
    """What a finished stage depends on: a rerun with other settings must start from a fresh output directory."""

    steps: int
    n: int
    methods: tuple[str, ...]
    seed: int
    toy: bool


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlvr-div demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    ap.add_argument("--steps", type=int, default=200, help="training steps per method (default 200)")
    ap.add_argument("--n", type=int, default=128, help="samples per prompt in the evaluation (default 128)")
    ap.add_argument(
        "--methods",
        default=",".join(m.name for m in METHODS),
        help=f"comma-separated subset of {', '.join(m.name for m in METHODS)}",
    )
    ap.add_argument("--seed", type=int, default=0, help="training and sampling seed (default 0)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads while evaluating (default torch's)")
    ap.add_argument("--no-toy", action="store_true", help="skip the exact toy lab")
    ap.add_argument("--fresh", action="store_true", help="delete --out first instead of resuming")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def check_args(args: argparse.Namespace) -> tuple[DemoSettings, list[Method]]:
    """Validate the arguments (one-line :class:`ConfigError`) before anything runs."""
    if args.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {args.steps}")
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}")
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    known = {m.name: m for m in METHODS}
    names = [x.strip() for x in args.methods.split(",") if x.strip()]
    unknown = [x for x in names if x not in known]
    if unknown or not names:
        raise ConfigError(f"--methods {args.methods!r}: unknown {unknown or 'empty'}; known: {', '.join(known)}")
    settings = DemoSettings(args.steps, args.n, tuple(names), args.seed, not args.no_toy)
    return settings, [known[x] for x in names]


def _check_state(out: Path, settings: DemoSettings) -> dict[str, Any]:
    path = out / STATE_FILE
    if not path.exists():
        return {"settings": asdict(settings), "stages": {}}
    state = json.loads(path.read_text())
    old = state.get("settings", {})
    old["methods"] = tuple(old.get("methods", ()))
    if old != asdict(settings):
        changed = sorted(k for k in asdict(settings) if old.get(k) != asdict(settings)[k])
        raise ConfigError(
            f"{out} holds a demo run with other settings ({', '.join(changed)}); pass --fresh or another --out"
        )
    return state


class _Stages:
    """Runs named stages once, recording their wall time in ``<out>/demo_state.json`` as each one finishes."""

    def __init__(self, out: Path, state: dict[str, Any], total: int) -> None:
        self.out, self.state, self.total, self.index = out, state, total, 0

    def run(self, key: str, title: str, fn: Any) -> None:
        self.index += 1
        done = self.state["stages"].get(key)
        if done is not None:
            print(f"[{self.index}/{self.total}] {title}: done earlier ({done['seconds']:.0f} s)", flush=True)
            return
        print(f"[{self.index}/{self.total}] {title} ...", flush=True)
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        self.state["stages"][key] = {"title": title, "seconds": seconds}
        (self.out / STATE_FILE).write_text(json.dumps(self.state, indent=1) + "\n")
        print(f"[{self.index}/{self.total}] {title}: {seconds:.0f} s", flush=True)
        gc.collect()


def _train(method: Method, out: Path, rehearsal: Path, settings: DemoSettings, quiet: bool) -> None:
    from rlvr_div.train import main as train

    # --console_logs false: the step bar only (metrics.jsonl has every log)
    argv = ["--config", str(RECIPES / method.recipe), "--output_dir", str(out / "runs" / method.name),
            "--max_steps", str(settings.steps), "--seed", str(settings.seed), "--task", TASK,
            "--save_steps", str(max(1, settings.steps // 2)), "--save_total_limit", "1",
            "--resume_from_checkpoint", "true", "--disable_tqdm", str(quiet).lower(),
            "--console_logs", "false"]  # fmt: skip
    if method.recipe.startswith("dph_"):
        argv += ["--rehearsal_path", str(rehearsal)]
    train(argv)


def _rehearse(rehearsal: Path) -> None:
    from rlvr_div.rehearsal import main as rehearse

    rehearse(["--config", str(RECIPES / REHEARSAL_RECIPE), "--rehearsal_path", str(rehearsal), "--task", TASK])


def _evaluate(out: Path, methods: list[Method], settings: DemoSettings, threads: int | None, quiet: bool) -> None:
    from eval.runner import prepare, run

    models = ["base=tiny"] + [f"{m.name}={out / 'runs' / m.name}" for m in methods]
    job = prepare(
        models, task=TASK, output_dir=out / "eval", base="base", n=settings.n, max_new_tokens=8,
        temperature=1.0, seed=settings.seed, batch_size=1024, threads=threads,
    )  # fmt: skip
    run(job, progress=not quiet)


def training_summary(run_dir: Path) -> dict[str, Any]:
    """From ``metrics.jsonl``: steps logged, mean reward over the first and last 10 steps, and the last 10 steps'
    mean in-training group diversity (``diversity/*``), where the trainer logs it."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "reward" in r]
    first, last = rows[:10], rows[-10:]
    summary: dict[str, Any] = {
        "steps": rows[-1]["step"] if rows else 0,
        "reward_first10": mean(r["reward"] for r in first) if first else float("nan"),
        "reward_last10": mean(r["reward"] for r in last) if last else float("nan"),
    }
    for key in ("diversity/distinct_valid", "diversity/pass_at_group"):
        values = [r[key] for r in last if key in r]
        summary[key] = mean(values) if values else None
    return summary


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _demote(lines: list[str], levels: int = 1) -> list[str]:
    """Markdown headings ``levels`` levels down (a report nested under the demo's)."""
    return [("#" * levels + line) if re.match(r"#+ ", line) else line for line in lines]


def write_demo_report(out: Path, methods: list[Method], state: dict[str, Any], command: str) -> Path:
    """``<out>/report.md`` from what the stages left on disk."""
    from eval.report import report_sections

    settings = state["settings"]
    stages = state["stages"]
    total = sum(s["seconds"] for s in stages.values())
    lines = [
        "# rlvr-div demo: pass@1 versus pass@k on the tiny model",
        "",
        f"Command: `{command}`. Task `{TASK}` ('sum n:' → any a+b = n, n+1 valid answers per prompt), the built-in "
        f"tiny base model, {settings['steps']} training steps per method from the recipes in `recipes/tiny` (same "
        f"rollouts per step and learning rate), evaluation with n = {settings['n']} samples per prompt at T = 1.",
        "",
        "## Stages",
        "",
        "| stage | wall time (s) |",
        "|---|---|",
    ]
    lines += [f"| {s['title']} | {s['seconds']:.1f} |" for s in stages.values()]
    lines += [f"| total (this and earlier invocations) | {total:.1f} |", ""]
    lines += [
        "## Training",
        "",
        "Mean reward (validity rate of the rollouts) over the first and last 10 steps; distinct valid completions "
        "per prompt group and the fraction of groups with a valid completion over the last 10 steps (DPH-RL trains "
        "on D_exp only, so its rollouts come from the harder prompts).",
        "",
        "| model | method | recipe | steps | reward, first 10 | reward, last 10 | distinct valid / group | "
        "groups with a valid completion |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        t = training_summary(out / "runs" / m.name)
        lines.append(
            f"| `{m.name}` | {m.label} | `recipes/tiny/{m.recipe}` | {t['steps']} | {t['reward_first10']:.3f} | "
            f"{t['reward_last10']:.3f} | {_fmt(t['diversity/distinct_valid'])} | "
            f"{_fmt(t['diversity/pass_at_group'])} |"
        )
    summary_path = out / "rehearsal" / "summary.json"
    if summary_path.exists():
        reh = json.loads(summary_path.read_text())
        lines += [
            "",
            f"DPH-RL offline stage: {reh['n_prompts']} prompts, k = {reh['k']} samples each; D_pef (≥ "
            f"{reh['threshold']} of {reh['k']} correct) = {reh['n_pef']} prompts, D_exp = {reh['n_exp']}; "
            f"{reh['n_rehearsal']} rehearsal samples kept.",
        ]
    eval_dir = out / "eval"
    results = {
        name: json.loads((eval_dir / name / "results.json").read_text())
        for name in ["base"] + [m.name for m in methods]
    }
    lines += ["", "## Evaluation", ""]
    lines += _demote(report_sections(eval_dir, results, "base", "eval/"))
    toy = out / "toy" / "toy.md"
    if toy.exists():
        lines += ["", "## Exact toy lab", "", "Plots: `toy/*.png`.", ""]
        lines += _demote(toy.read_text().splitlines()[1:])  # without its own title
    path = out / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div demo``."""
    args = build_parser().parse_args(argv)
    settings, methods = check_args(args)
    out = Path(args.out)
    if args.fresh and out.exists():
        shutil.rmtree(out)
    state = _check_state(out, settings)
    out.mkdir(parents=True, exist_ok=True)
    command = "rlvr-div demo " + " ".join(sys.argv[2:] if argv is None else argv)
    rehearsal = out / "rehearsal"
    needs_rehearsal = any(m.recipe.startswith("dph_") for m in methods)
    total = 2 + needs_rehearsal + len(methods) + settings.toy
    stages = _Stages(out, state, total)
    t0 = time.perf_counter()

    def build() -> None:
        from rlvr_div.models import tiny_model_path

        print(f"    tiny base: {tiny_model_path(progress=not args.quiet)}", flush=True)

    stages.run("base", "build the tiny base model", build)
    if needs_rehearsal:
        stages.run("rehearse", "DPH-RL offline stage", lambda: _rehearse(rehearsal))
    for m in methods:
        stages.run(f"train:{m.name}", f"train {m.label}", lambda m=m: _train(m, out, rehearsal, settings, args.quiet))
    stages.run(
        "eval", f"evaluate base + {len(methods)} models, n = {settings.n}",
        lambda: _evaluate(out, methods, settings, args.threads, args.quiet),
    )  # fmt: skip
    if settings.toy:
        from rlvr_div.toy import main as toy

        stages.run("toy", "exact toy lab", lambda: toy(["--out", str(out / "toy")]))
    path = write_demo_report(out, methods, state, command.strip())
    print(f"report: {path}  ({time.perf_counter() - t0:.0f} s in this invocation)")
    return 0


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
