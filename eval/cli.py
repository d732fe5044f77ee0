"""``rlvr-div eval`` (also ``python -m eval``): pass@k of one or more models on a task, resumable, with a report.

    rlvr-div eval --model base=tiny --model grpo=runs/grpo --task arith --n 64 --limit 200 --output-dir runs/eval
    rlvr-div eval --model base=models/smollm2 --gguf_file SmolLM2.Q4_1.gguf --task gsm8k --output-dir runs/eval
    rlvr-div eval --samples base=lm_eval_base.jsonl --samples rl=verl_dump.jsonl --task gsm8k --output-dir runs/eval

Every input is checked before any model loads (one ``error:`` line, exit code 2); a second evaluation on the same
``--output-dir`` is refused while the first runs (:mod:`rlvr_div.runs.run_lock`). See ``eval.runner`` for the files.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.runs.run_lock import directory_lock


def _key_values(items: list[str] | None, flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; VALUE is parsed as JSON when it is JSON (numbers, booleans, lists), else a string."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _chat_template(value: str) -> bool | None:
    return {"auto": None, "on": True, "off": False}[value]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rlvr-div eval",
        description="pass@k evaluation: does RL fine-tuning collapse coverage compared with the base model?",
    )
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a model to sample and evaluate (repeat for several): 'tiny', a local directory (full model or LoRA "
        "adapter) or a hub id; NAME names its output directory",
    )
    ap.add_argument(
        "--gguf_file",
        "--gguf-file",
        dest="gguf_file",
        default=None,
        metavar="FILE",
        help="with one --model NAME=DIR (a local directory or hub repo): the GGUF file in it to load, as train's "
        "--gguf_file (the same as --model NAME=DIR/FILE)",
    )
    ap.add_argument(
        "--samples",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="completions to score without sampling (repeat for several; mixes with --model): our samples.jsonl or "
        "an evaluation directory holding one, lm-eval --log_samples JSONL, a verl validation dump, or plain JSONL "
        "(prompt, completions or completion, answer); see docs/evaluation.md",
    )
    ap.add_argument("--base", default=None, help="the base model's NAME (default: 'base' if given, else the first)")
    ap.add_argument(
        "--task",
        default=None,
        help="a registered task (rlvr-div list); needed with --model; with --samples it supplies the verifier's "
        "columns by problem index and the default reward",
    )
    ap.add_argument("--split", default="test", help="task split (default: test)")
    ap.add_argument("--task-seed", type=int, default=0, help="seed of the task builder (default 0, as training)")
    ap.add_argument("--task-arg", action="append", metavar="KEY=VALUE", help="task option, e.g. data_dir=...")
    ap.add_argument("--reward", default=None, help="reward name (default: the task's reward)")
    ap.add_argument("--reward-arg", action="append", metavar="KEY=VALUE", help="reward setting")
    ap.add_argument("--n", type=int, default=16, help="samples per problem (default 16)")
    ap.add_argument("--limit", type=int, default=None, help="evaluate the first PROMPTS problems only")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0; 0 = greedy)")
    ap.add_argument("--top-p", type=float, default=1.0, help="nucleus top_p (default 1.0)")
    ap.add_argument("--max-new-tokens", type=int, default=512, help="completion length cap (default 512)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ap.add_argument("--batch-size", type=int, default=256, help="sequences per generate call (default 256)")
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"], help="sampling backend (default hf)")
    ap.add_argument(
        "--chat-template",
        default="auto",
        choices=["auto", "on", "off"],
        help="apply the tokenizer's chat template: auto = when the prompt is a list of messages",
    )
    ap.add_argument(
        "--stop-text",
        default="task",
        help="a completion ends with the first token holding this text (default 'task': the task's own, e.g. a "
        "newline for format=fewshot; 'none': only EOS)",
    )
    ap.add_argument(
        "--dtype",
        default="auto",
        help="auto (a resumed model's own; else bfloat16 on a GPU, or on a CPU with native bfloat16, AMX or "
        "AVX-512 BF16; else float32), float32, bfloat16. Only the forward: tokens are drawn from float32 logits",
    )
    ap.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda when available)")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads while sampling (default: torch's); 1 is much faster on a CPU shared with other jobs",
    )
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for standard errors")
    ap.add_argument("--maj-subsets", type=int, default=200, help="random k-subsets per problem for maj@k")
    ap.add_argument("--output-dir", required=True, help="where NAME/samples.jsonl, results.json, report.md go")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="delete the earlier samples of these models in --output-dir and sample again (needed after a model "
        "changed: a rerun resumes only when the settings and the model's files are the same)",
    )
    ap.add_argument(
        "--lm-eval-log",
        action="store_true",
        help="also write each model's samples in lm-eval's --log_samples schema (NAME/samples_lm_eval.jsonl)",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no math-verify timeout lines")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div eval``; ConfigError propagates to the caller (one line, exit 2)."""
    parser = build_parser()

    def one_line(message: str) -> None:  # argparse would print the usage too; a bad value is one line here
        raise ConfigError(f"{message} (rlvr-div eval --help lists the options)")

    parser.error = one_line  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    job = _prepare(args)  # every check first: a refused command leaves no lock file behind
    with directory_lock(args.output_dir, "evaluation", "--output-dir"):  # one writer per --output-dir
        return _evaluate(args, job)


def _prepare(args: argparse.Namespace) -> Any:
    """The checked job (one-line ConfigErrors; nothing is written)."""
    from eval.runner import prepare
    from eval.settings import with_gguf_file

    return prepare(
        with_gguf_file(args.model, args.gguf_file),
        samples=args.samples,
        task=args.task,
        output_dir=args.output_dir,
        base=args.base,
        reward=args.reward,
        reward_settings=_key_values(args.reward_arg, "--reward-arg"),
        task_options=_key_values(args.task_arg, "--task-arg"),
        dtype=args.dtype,
        device=args.device,
        split=args.split,
        task_seed=args.task_seed,
        limit=args.limit,
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        batch_size=args.batch_size,
        backend=args.backend,
        chat_template=_chat_template(args.chat_template),
        stop_text=args.stop_text.replace("\\n", "\n").replace("\\t", "\t"),  # --stop-text '\n\n' as typed
        threads=args.threads,
        bootstrap=args.bootstrap,
        maj_subsets=args.maj_subsets,
        fresh=args.fresh,
    )


def sampling_path(settings: Any, dtype_given: bool) -> str:
    """One line: the model, its dtype (and why: given, or ``auto``'s choice) and device, and on a CPU its bfloat16
    support (``rlvr_div.cpu_bf16``)."""
    why = "--dtype" if dtype_given else "--dtype auto"
    line = f"{settings.model}: sampling in {settings.dtype} ({why}) on {settings.device}"
    if settings.device == "cpu":
        from rlvr_div.cpu_bf16 import describe

        line += f"; {describe()}"
    return line


def _evaluate(args: argparse.Namespace, job: Any) -> int:
    """Sample or score, report; ``--output-dir``'s lock is held."""
    from eval.runner import run
    from rlvr_div.rewards.math import set_quiet

    was_quiet = set_quiet(True) if args.quiet else None  # --quiet: no math-verify timeout lines either
    if not args.quiet:
        for ref in job.models:  # which path it samples on, in one line
            print(sampling_path(job.settings[ref.name], args.dtype != "auto"))
    try:
        results = run(job, progress=not args.quiet, lm_eval_log=args.lm_eval_log)
    finally:
        if was_quiet is not None:
            set_quiet(was_quiet)
    for name, res in results.items():
        pk = res["metrics"]["pass_at_k"]
        shown = ", ".join(f"pass@{k}={v:.3f}" for k, v in pk.items())
        print(f"{name}: {shown}")
    print(f"report: {job.output_dir / 'report.md'}")
    return 0
