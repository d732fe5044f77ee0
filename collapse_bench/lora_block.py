"""A real-LM study's LoRA block (issue 33, item 4): one seed's α-DPG − GRPO under several LoRA settings, side by side.

``python -m collapse_bench.lora_block --out bench/results/real_lm/countries_lora_block CONFIG=DIR ...`` reads the
finished runs of each setting (``rlvr-div beta-study --config CONFIG --out DIR``; nothing is trained or loaded) and
writes ``lora_block.md`` and ``lora_block.json``, one row per setting:
- the setting: LoRA rank r (its α), the blocks it adapts, the learning rate (the config's ``common``, merged);
- per arm: optimiser steps, the exact validity μ of the measured training prompts at the end, and pass@kmax on the
  measured held-out (test) prompts at the end;
- arm − against of the seed in KL(p*‖π_v) and in the effective number of valid answers, read along both training
  paths at each validity level (linear between path points, :func:`collapse_bench.measure.path_value_at`; '—' where a
  path never reaches it).
One seed per setting: descriptive, no interval, no claim.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from collapse_bench.beta_spec import Study, check_arm_names, load_study
from collapse_bench.beta_study import finished_results
from collapse_bench.markdown import table
from collapse_bench.measure import path_value_at
from eval.records import write_json
from rlvr_div.errors import ConfigError

KEYS = {"kl_pstar": "KL(p*‖π_v)", "effective_answers": "effective answers"}
BLOCK = re.compile(r"layers\.(\d+)\.")


def setting(study: Study) -> dict[str, Any]:
    """The LoRA setting a study's ``common`` sets (None: the recipe's): rank, α, the adapted blocks ('every block'
    for ``all-linear``, 'blocks a–b' or 'blocks a, c' for a list of modules ``layers.N.…``) and the learning rate."""
    targets = study.common.get("lora_target_modules")
    if isinstance(targets, list):
        blocks = sorted({int(m) for t in targets for m in BLOCK.findall(str(t))})
        contiguous = blocks == list(range(blocks[0], blocks[-1] + 1)) if blocks else False
        where = (f"blocks {blocks[0]}–{blocks[-1]}" if contiguous
                 else f"blocks {', '.join(map(str, blocks))}" if blocks else ", ".join(map(str, targets)))  # fmt: skip
    else:
        where = "every block" if targets == "all-linear" else "recipe's" if targets is None else str(targets)
    return {"lora_r": study.common.get("lora_r"), "lora_alpha": study.common.get("lora_alpha"), "blocks": where,
            "learning_rate": study.common.get("learning_rate")}  # fmt: skip


def block_row(study: Study, out: Path, seed: int, arms: tuple[str, str], levels: tuple[float, ...]) -> dict[str, Any]:
    """One setting's row: its LoRA setting, each arm's end numbers at ``seed`` (None where the run is not finished)
    and arm − against at each level of validity along both paths."""
    kmax = str(max(study.ks))
    done = {run.arm: r for run, r in finished_results(study, out)[0] if run.seed == seed and run.arm in arms}
    row: dict[str, Any] = {"setting": setting(study), "arms": {}, "matched": []}
    for arm in arms:
        r = done.get(arm)
        row["arms"][arm] = None if r is None else {
            "steps": r["steps"], "mu": r["splits"]["train"]["mean"]["mu"],
            "test_pass_kmax": r["splits"]["test"]["mean"]["pass_at"][kmax],
        }  # fmt: skip
    for mu in levels:
        entry: dict[str, Any] = {"mu": mu}
        for key in KEYS:
            values = [None if done.get(a) is None else path_value_at(done[a]["path"], mu, key) for a in arms]
            entry[key] = None if None in values else values[0] - values[1]
        row["matched"].append(entry)
    return row


def block_report(rows: dict[str, dict[str, Any]], seed: int, arms: tuple[str, str], kmax: int, command: str) -> str:
    """The block as markdown: one line per setting."""
    arm, against = arms
    levels = [lv["mu"] for lv in next(iter(rows.values()))["matched"]]
    head = ["config", "LoRA r (α)", "adapted", "lr"]
    head += [f"{a} steps, μ, test pass@{kmax}" for a in arms]
    at = " / ".join(f"{mu:g}" for mu in levels)
    head += [f"Δ {label} at μ {at}" for label in KEYS.values()]
    lines = []
    for config, row in rows.items():
        s = row["setting"]
        lr = "recipe's" if s["learning_rate"] is None else f"{s['learning_rate']:g}"
        cells = [f"`{config}`", f"{s['lora_r']} ({s['lora_alpha']})", s["blocks"], lr]
        for a in arms:
            e = row["arms"][a]
            cells.append("not run yet" if e is None else f"{e['steps']}, {e['mu']:.3f}, {e['test_pass_kmax']:.3f}")
        for key in KEYS:
            cells.append(" / ".join("—" if lv[key] is None else f"{lv[key]:+.3f}" for lv in row["matched"]))
        lines.append(cells)
    return "\n".join([
        f"# LoRA block: {arm} − {against}, seed {seed}",
        "",
        f"Made by `{command}`. Per setting, {arm} − {against} of seed {seed} along both training paths of the measured "
        "training prompts, read at the same validity μ (linear between path points; '—': a path never reaches μ); "
        "μ and pass@k are the end of training. One seed per setting: descriptive, no interval, no claim.",
        "",
        *table(head, lines),
    ]) + "\n"  # fmt: skip


def parse_setting(text: str) -> tuple[Path, Path]:
    """``CONFIG=DIR`` → (config, out directory); a one-line ConfigError otherwise."""
    config, sep, out = text.partition("=")
    if not sep or not config or not out:
        raise ConfigError(f"a setting is CONFIG=DIR (a β-study config and its --out directory), got {text!r}")
    if not Path(out).is_dir():
        raise ConfigError(f"setting {text!r}: {out!r} is not a directory")
    return Path(config), Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.lora_block", description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="+", metavar="CONFIG=DIR")
    ap.add_argument("--out", required=True, help="the directory lora_block.md and lora_block.json go to")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--arm", default="alpha_dpg")
    ap.add_argument("--against", default="grpo")
    ap.add_argument("--levels", type=float, nargs="+", default=[0.6, 0.7, 0.8])
    args = ap.parse_args(argv)
    arms = (args.arm, args.against)
    studies = [(config, out, load_study(config)) for config, out in map(parse_setting, args.settings)]
    for config, _, study in studies:
        check_arm_names(study, arms, f"--arm/--against of {config}")
    kmaxes = {max(study.ks) for _, _, study in studies}
    if len(kmaxes) > 1:
        raise ConfigError(f"the settings measure pass@k up to different k ({sorted(kmaxes)}); the block compares one")
    rows = {str(config): block_row(study, out, args.seed, arms, tuple(args.levels)) for config, out, study in studies}
    command = "python -m collapse_bench.lora_block " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "lora_block.json", {"seed": args.seed, "arms": list(arms), "rows": rows})
    text = block_report(rows, args.seed, arms, kmaxes.pop(), command)
    (out / "lora_block.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
