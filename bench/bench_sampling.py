"""Throughput of ``rlvr_div.sampling`` (HF backend) against one bare ``model.generate`` call on the same total batch.

Both sides sample n completions for each of the same prompts in one generate call (``batch_size`` = prompts × n),
at the same temperature, top_p and max_new_tokens; they alternate for ``--rounds`` rounds after a warm-up round.
Generated tokens are counted up to and including each completion's first EOS. Prints tokens/s of both, and the
ratio sampler / bare (target ≥ 0.9).

    .venv/bin/python bench/bench_sampling.py [--model tiny] [--task arith] [--prompts 8] [--n 64] [--rounds 5]
        [--threads 1] [--temperature 1.0] [--top-p 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr_div.models import load_model, load_tokenizer
from rlvr_div.sampling import HFSampler, SamplingConfig, encode_prompt, eos_token_ids
from rlvr_div.tasks import get_task


def generated_tokens(gen: torch.Tensor, eos_ids: list[int]) -> int:
    """Tokens of a (rows × steps) block of generated ids up to and including each row's first EOS."""
    is_eos = torch.isin(gen, torch.tensor(eos_ids, device=gen.device))
    has = is_eos.any(dim=1)
    lengths = torch.where(has, is_eos.int().argmax(dim=1) + 1, gen.shape[1])
    return int(lengths.sum())


def bare_generate(model, tokenizer, prompts, cfg: SamplingConfig, eos_ids: list[int]) -> tuple[int, float]:
    """One ``model.generate(do_sample=True)`` call over every prompt repeated n times; (tokens, seconds)."""
    ids = [encode_prompt(tokenizer, p) for p in prompts for _ in range(cfg.n)]
    width = max(map(len, ids))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=model.device)
    attention = (input_ids != pad).long()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            do_sample=True,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=0,
            max_new_tokens=cfg.max_new_tokens,
            eos_token_id=eos_ids,
            pad_token_id=pad,
        )
    seconds = time.perf_counter() - t0
    return generated_tokens(out[:, width:], eos_ids), seconds


def sampler_generate(sampler: HFSampler, prompts, seed: int) -> tuple[int, float]:
    """All prompts' samples through :class:`HFSampler` (one generate call: batch_size = prompts × n)."""
    t0 = time.perf_counter()
    results = list(sampler.sample(prompts, indices=[seed * 10_000 + i for i in range(len(prompts))], progress=False))
    seconds = time.perf_counter() - t0
    return sum(r.num_tokens for r in results), seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--task", default="arith")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--smoke", action="store_true", help="2 prompts x 8 samples, 1 round, 1 thread: does it run?")
    args = ap.parse_args(argv)
    if args.smoke:
        args.prompts, args.n, args.rounds, args.threads = 2, 8, 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, device=device).eval()
    prompts = get_task(args.task, split="test")["prompt"][: args.prompts]
    cfg = SamplingConfig(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        batch_size=len(prompts) * args.n,
    )
    sampler = HFSampler(model, tokenizer, cfg)
    eos_ids = eos_token_ids(tokenizer, model)

    bare_generate(model, tokenizer, prompts, cfg, eos_ids)  # warm-up
    sampler_generate(sampler, prompts, seed=0)
    bare_rates, ours_rates = [], []
    for r in range(args.rounds):
        torch.manual_seed(r)
        tok_b, sec_b = bare_generate(model, tokenizer, prompts, cfg, eos_ids)
        tok_s, sec_s = sampler_generate(sampler, prompts, seed=r + 1)
        bare_rates.append(tok_b / sec_b)
        ours_rates.append(tok_s / sec_s)
        print(
            f"round {r}: bare generate {tok_b} tokens in {sec_b:.3f}s = {bare_rates[-1]:,.0f} tok/s | "
            f"rlvr_div.sampling {tok_s} tokens in {sec_s:.3f}s = {ours_rates[-1]:,.0f} tok/s"
        )
    bare, ours = statistics.median(bare_rates), statistics.median(ours_rates)
    print(
        f"model={args.model} device={device} batch={len(prompts)}x{args.n}={cfg.batch_size} sequences "
        f"max_new_tokens={args.max_new_tokens} T={args.temperature} top_p={args.top_p} "
        f"threads={torch.get_num_threads()}"
    )
    print(f"median bare generate: {bare:,.0f} tok/s")
    print(f"median rlvr_div.sampling: {ours:,.0f} tok/s")
    print(f"ratio sampling / bare: {ours / bare:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
