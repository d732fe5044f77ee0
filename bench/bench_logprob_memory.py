"""Peak memory of teacher-forced log-probs with a large vocabulary: ``rlvr_div.logprobs.completion_logprobs`` (the
output head on the scored positions only, log-softmax a chunk at a time) against the full-vocabulary path
(``completion_logprobs_unchunked``: logits at every position, rows × width × vocabulary floats), side by side.

The model is a synthetic Gemma-3 (Gemma-3-270M's dimensions: vocabulary 262,144, hidden size 640, 4 heads of 256,
one KV head, MLP 2,048, tied embeddings) with one decoder layer and random weights, so that the head and the
log-softmax are the memory that matters, as in the real model. Each path runs in a fresh subprocess: the model is
built, one row is scored as a warm-up, the peak resident set is reset (``/proc/self/clear_refs``), and the peak
above the resident set before the call is reported (on CUDA: ``torch.cuda.max_memory_allocated`` above the memory
allocated before). ``--grad`` also backpropagates the sum of the log-probs into the decoder layer, the tied
embedding/head frozen as LoRA training leaves it (the sampling-free objective's use; TRL refuses LoRA on lm_head).
Prints both peaks, their ratio, the seconds of each call and the largest difference between the two paths' values.

    .venv/bin/python bench/bench_logprob_memory.py [--rows 64] [--prompt 44] [--completion 4] [--vocab 262144]
        [--hidden 640] [--chunk N] [--grad] [--device cpu|cuda] [--quick | --smoke]

Defaults: the `between` study's scoring batch (64 valid answers of a ~44-token prompt, 4 tokens each). ``--quick``:
16 rows of 40 + 8 tokens, without and with gradient; ``--smoke``: a 4,096-token vocabulary, in-process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

PATHS = ("chunked", "full")
QUICK = (16, 40, 8)  # rows, prompt tokens, completion tokens


def build_model(vocab: int, hidden: int, layers: int, seed: int = 0) -> Any:
    """A random Gemma-3 with Gemma-3-270M's widths (scaled down with ``hidden`` below 640), float32, eval mode."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    heads, head_dim = (4, 256) if hidden >= 640 else (2, max(8, hidden // 2))
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 16 // 5,
                              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=1,
                              head_dim=head_dim, max_position_embeddings=512, sliding_window=512, pad_token_id=0,
                              tie_word_embeddings=True)  # fmt: skip
    return Gemma3ForCausalLM(config).eval()


def batch(rows: int, prompt: int, completion: int, vocab: int, seed: int = 1) -> tuple[torch.Tensor, ...]:
    """``rows`` rows of one prompt and distinct random completions, in :func:`left_aligned_rows`'s layout."""
    from rlvr_div.logprobs import left_aligned_rows

    g = torch.Generator().manual_seed(seed)
    p = torch.randint(1, vocab, (prompt,), generator=g).tolist()
    completions = [torch.randint(1, vocab, (completion,), generator=g).tolist() for _ in range(rows)]
    return left_aligned_rows([p] * rows, completions, pad_token_id=0)


def _status_kib(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set (Linux >= 4.0)
        return True
    except OSError:
        return False


def measure(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build the model, score the batch once with ``path``; peak bytes above the start, seconds, the values."""
    from rlvr_div.logprobs import completion_logprobs, completion_logprobs_unchunked

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = build_model(args.vocab, args.hidden, args.layers).to(device)
    if args.grad:
        model.train()
        model.get_input_embeddings().weight.requires_grad_(False)  # tied: the head is frozen too
    tensors = [t.to(device) for t in batch(args.rows, args.prompt, args.completion, args.vocab)]

    def run(ids: torch.Tensor, mask: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        with torch.set_grad_enabled(args.grad):
            if path == "chunked":
                out = completion_logprobs(model, ids, mask, cols, chunk_size=args.chunk)
            else:
                out = completion_logprobs_unchunked(model, ids, mask, cols)
            if args.grad:
                out.sum().backward()
        return out.detach()

    run(*(t[:1] for t in tensors))  # warm-up: kernels and their workspaces
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before, how = torch.cuda.memory_allocated(), "cuda max_memory_allocated"
    else:
        before, how = (_status_kib("VmRSS") or 0) * 1024, "VmHWM - VmRSS"
        if not _reset_peak_rss():
            how = "ru_maxrss - VmRSS (peak not reset: includes the build)"
    start = time.perf_counter()
    values = run(*tensors)
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        import resource

        hwm = _status_kib("VmHWM")
        peak = (hwm * 1024 if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) - before
    return {"path": path, "peak": peak, "seconds": time.perf_counter() - start, "how": how, "values": values.cpu()}


def _in_subprocess(path: str, argv: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.pt"
        cmd = [sys.executable, __file__, *argv, "--worker", path, "--worker-out", str(out)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path])}
        subprocess.run(cmd, check=True, env=env)
        return torch.load(out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=44, help="prompt tokens per row")
    ap.add_argument("--completion", type=int, default=4, help="completion tokens per row")
    ap.add_argument("--vocab", type=int, default=262_144)
    ap.add_argument("--hidden", type=int, default=640)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=None, help="positions per chunk (default: 64 MiB of float32 logits)")
    ap.add_argument("--grad", action="store_true", help="also backpropagate the sum of the log-probs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="16 rows of 40 + 8 tokens, without and with gradient")
    ap.add_argument("--smoke", action="store_true", help="a 4,096-token vocabulary, 2 rows, in-process")
    ap.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.prompt, args.completion = QUICK
    if args.smoke:
        args.rows, args.prompt, args.completion, args.vocab, args.hidden = 2, 6, 3, 4096, 64
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.worker:
        torch.save(measure(args.worker, args), args.worker_out)
        return 0
    settings = [args.grad] if not args.quick else [False, True]
    mib = 1 << 20
    print(f"rows {args.rows}, prompt {args.prompt} + completion {args.completion} tokens, vocabulary {args.vocab:,}, "
          f"hidden {args.hidden}, device {args.device}, {args.threads} threads; full logits "
          f"{args.rows * (args.prompt + args.completion) * args.vocab * 4 / mib:,.0f} MiB of float32")  # fmt: skip
    print("| gradient | path | peak above start (MiB) | seconds | max abs diff vs full |")
    print("|---|---|---|---|---|")
    for grad in settings:
        worker_argv = [a for a in argv if a not in ("--quick", "--grad")]
        if args.quick:
            worker_argv += ["--rows", str(QUICK[0]), "--prompt", str(QUICK[1]), "--completion", str(QUICK[2])]
        worker_argv += ["--grad"] if grad else []
        results = {}
        for path in PATHS:
            if args.smoke:
                results[path] = measure(path, parse(worker_argv))
            else:
                results[path] = _in_subprocess(path, worker_argv)
        diff = float((results["chunked"]["values"] - results["full"]["values"]).abs().max())
        for path in PATHS:
            r = results[path]
            print(f"| {'yes' if grad else 'no'} | {path} | {r['peak'] / mib:,.1f} | {r['seconds']:.2f} | "
                  f"{diff if path == 'chunked' else 0.0:.2e} |")  # fmt: skip
        ratio = results["full"]["peak"] / max(results["chunked"]["peak"], 1)
        print(f"gradient {'yes' if grad else 'no'}: full / chunked peak = {ratio:.1f}x  ({results['full']['how']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
