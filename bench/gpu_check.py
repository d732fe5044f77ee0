"""GPU readiness check: one training step of stock TRL GRPO against each of the project's trainers, and sampling
throughput, on a randomly initialised model of Qwen2.5-0.5B's shape (built from a config written here: nothing is
downloaded).

(a) Step time. Every trainer (``--trainers``: ``TRAINER[:key=value,...]``, the names and keys of a recipe's
``trainer:`` and its settings) is built from the same saved random model, with the same batch settings (prompts ×
``num_generations`` completions of ``max_completion_length`` tokens), and timed side by side in one process: in each
round every trainer, in turn, generates and scores its batch (``_generate_and_score_completions``: sampling with
``model.generate``, the reward, the reference log-probs where it has a reference) and then computes its loss and
the backward pass (``_compute_loss`` + ``backward``; no optimizer step, so the weights, and with one seed per round
the sampled batch, stay the same across trainers). The first round is a warm-up (not counted). Printed: the median
seconds of both parts and their sum for each trainer, and each one's ratio to the first trainer (stock GRPO with a
KL term, β = 0.04, the cost the divergence trainers are compared with). DPH-RL's trainer rehearses a set this check
builds (``rehearsal_path=<built>`` in a spec): random completions of the prompts with their reference log-probs
under the saved model, in the layout ``rlvr-div rehearse`` writes.

(b) Sampling: ``model.generate`` tokens/s at a few batch sizes (every completion runs to ``--sample-tokens``: a
random model all but never samples EOS, and ``min_new_tokens`` makes sure), and vLLM's when it is importable.

The random model makes a realistic cost, not a realistic text: the reward is the parity of the sampled token ids
(about half the completions "valid"), so advantages and α-DPG's pseudo-rewards are not all zero.

    bash bench/gpu_check.sh                        # on a lent GPU machine: installs the carried wheels, then this
    .venv/bin/python bench/gpu_check.py --smoke    # CPU, 2 layers, hidden 64: does it run? (the numbers mean nothing)
    bash bench/gpu_check.sh --recipes              # stock GRPO against every recipe in recipes/tiny instead
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml

# Qwen2.5-0.5B's architecture (its config.json): 494M parameters with the tied 151,936-token embedding
QWEN25_05B: dict[str, Any] = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}
# --smoke: the same architecture, small enough for a CPU test
SMOKE_SHAPE: dict[str, Any] = {
    **QWEN25_05B,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 512,
}
BETA = 0.04  # the KL coefficient of the baseline and of the divergence terms (bench_divergence_step.py's)
REHEARSAL = "<built>"  # a spec's rehearsal_path value that stands for the set this check builds
# DPH-RL (recipes/tiny/dph_forward_kl.yaml's term): no reference model on the exploration rows, a forward-KL rehearsal
# term over 8 stored samples per step (1/8 of the default 64 rollouts, the paper's ratio)
DPH_SPEC = (
    f"divergence:divergence=none,rehearsal_path={REHEARSAL},rehearsal_divergence=forward_kl,rehearsal_coef=0.05,"
    "rehearsal_batch_size=8"
)
ALPHABET = "0123456789+-*/=:;,.()<>? abcdefghijklmnopqrstuvwxyz"
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def default_trainers() -> list[str]:
    """Stock GRPO with β (the baseline, first) and without; the divergence trainer with every registered divergence
    at the same coefficient; the sequence-level KL in the reward; α-DPG; DPH-RL (recipes/tiny/*.yaml's settings)."""
    from rlvr_div.divergences import DIVERGENCES

    specs = [f"grpo:beta={BETA}", "grpo:beta=0"]
    specs += [f"divergence:divergence={name},divergence_coef={BETA}" for name in DIVERGENCES.names()]
    specs += [f"divergence:sequence_kl_coef={BETA},scale_rewards=none", "dpg:dpg_divergence=alpha,dpg_alpha=0.25"]
    specs.append(DPH_SPEC)
    return specs


RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "tiny"
# the batch settings this check fixes for every trainer (config fields of GRPO that a recipe also sets)
FIXED_KEYS = frozenset({"num_generations", "max_completion_length", "temperature", "per_device_train_batch_size"})


def recipe_trainers(directory: Path = RECIPES) -> list[str]:
    """One spec per recipe in ``directory`` (sorted by file name): its ``trainer`` and the method keys it sets, i.e. its
    keys that are fields of that trainer's config but not of ``transformers.TrainingArguments`` (the run's length,
    precision, logging), less :data:`FIXED_KEYS`; a ``rehearsal_path`` becomes :data:`REHEARSAL` (the set built
    here, in place of the offline stage, whose keys drop out). Task, model and LoRA keys are not config fields, so
    they drop out too."""
    from transformers import TrainingArguments

    from rlvr_div.trainers import TRAINERS
    from rlvr_div.trainers.dph import OFFLINE_STAGE_KEYS

    training = {f.name for f in fields(TrainingArguments)}
    offline = {*OFFLINE_STAGE_KEYS.values(), "rehearsal_sampling_batch_size"}
    specs = []
    for path in sorted(directory.glob("*.yaml")):
        recipe = yaml.safe_load(path.read_text())
        name = recipe.get("trainer", "grpo")
        config = {f.name for f in fields(TRAINERS.get(name).config_class())}
        keys = {k: v for k, v in recipe.items() if k in config and k not in training and k not in FIXED_KEYS}
        if "rehearsal_path" in keys:
            keys = {k: REHEARSAL if k == "rehearsal_path" else v for k, v in keys.items() if k not in offline}
        specs.append(name + "".join(f"{',' if i else ':'}{k}={v}" for i, (k, v) in enumerate(keys.items())))
    return specs


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``TRAINER[:key=value,...]`` → (trainer name, settings); values are read as YAML (numbers, booleans, text)."""
    name, _, rest = spec.partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: trainer spec {spec!r}: {item!r} is not key=value")
        settings[key.strip()] = yaml.safe_load(value)
    return name.strip(), settings


def build_tokenizer(vocab_size: int) -> Any:
    """A character tokenizer over :data:`ALPHABET` (``<bos>`` prepended, decoding concatenates), its vocabulary
    filled up to ``vocab_size`` with placeholder tokens ``<t123>`` so that every id the model samples decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in ALPHABET:
        vocab.setdefault(ch, len(vocab))
    for i in range(len(vocab), vocab_size):
        vocab[f"<t{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        padding_side="left",
    )  # fmt: skip


def build_model_dir(
    out: Path, shape: dict[str, Any], dtype: torch.dtype, device: str = "cpu", seed: int = 0
) -> tuple[Path, int]:
    """Save a randomly initialised Qwen2 causal LM of ``shape`` (initialised on ``device``) and the tokenizer to
    ``out``; (path, parameters)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**shape, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    build_tokenizer(shape["vocab_size"]).save_pretrained(out)
    del model
    return out, params


def load_model(model_dir: Path, dtype: torch.dtype, device: str) -> Any:
    """The saved random model, for sampling when no trainer built (its numbers still say what ``generate`` does)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()


def build_rehearsal_set(
    out: Path,
    model_dir: Path,
    prompts: Sequence[str],
    completion_tokens: int,
    count: int,
    temperature: float,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
) -> Path:
    """A DPH-RL rehearsal set in ``out``, in the layout ``rlvr-div rehearse`` writes
    (:mod:`rlvr_div.trainers.dph.rehearsal_set`):
    ``count`` rows cycling over ``prompts``, each with ``completion_tokens`` ids drawn uniformly from the non-special
    vocabulary (a random model's "correct" samples mean nothing; the cost depends on the shapes), their reference
    log-probs log softmax(logits / T)[y_t] under the saved model, the prompts as D_exp, and a summary.json."""
    import datasets
    from transformers import AutoTokenizer

    from rlvr_div.logprobs import token_logprobs
    from rlvr_div.trainers.dph.rehearsal_set import D_EXP_DIR, REHEARSAL_DIR, SUMMARY, tokenizer_hash

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = [prompts[i % len(prompts)] for i in range(count)]
    prompt_ids = [tokenizer(p)["input_ids"] for p in rows]
    g = torch.Generator().manual_seed(seed)
    low = len(SPECIALS)
    completion_ids = torch.randint(low, len(tokenizer), (count, completion_tokens), generator=g).tolist()
    model = load_model(model_dir, dtype, device)
    with torch.no_grad():
        ref_logps = token_logprobs(model, prompt_ids, completion_ids, temperature=temperature,
                                   pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    del model
    columns = {"prompt": rows, "completion": tokenizer.batch_decode(completion_ids), "prompt_ids": prompt_ids,
               "completion_ids": completion_ids, "ref_logps": ref_logps}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns).save_to_disk(str(out / REHEARSAL_DIR))
    datasets.Dataset.from_dict({"prompt": list(prompts)}).save_to_disk(str(out / D_EXP_DIR))
    summary = {
        "model": str(model_dir), "k": 1, "threshold": 1, "sampling": {"temperature": temperature, "top_p": 1.0},
        "tokenizer_hash": tokenizer_hash(tokenizer), "pad_token_id": tokenizer.pad_token_id,
        "n_prompts": len(prompts), "n_pef": len(set(rows)), "n_exp": len(prompts), "n_rehearsal": count,
    }  # fmt: skip
    (out / SUMMARY).write_text(json.dumps(summary, indent=1))
    return out


def parity_reward(completions: list[Any], completion_ids: list[list[int]] | None = None, **kwargs: Any) -> list[float]:
    """1 when the completion's token ids sum to an even number, else 0 (a random model's completions: about half)."""
    return [float(sum(ids) % 2 == 0) for ids in completion_ids or [[len(str(c))] for c in completions]]


def random_prompts(count: int, length: int, seed: int) -> list[str]:
    """``count`` prompts of ``length`` random characters of :data:`ALPHABET`."""
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(length)) for _ in range(count)]


@dataclass
class Timed:
    """One trainer under test: its spec, the trainer (None when it failed) and its timings."""

    spec: str
    trainer: Any = None
    error: str | None = None
    gen: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def checkpointing_off(config_class: type) -> dict[str, bool]:
    """The config key that turns activation checkpointing off: ``activation_checkpointing`` from transformers 5.20,
    ``gradient_checkpointing`` before (the project supports both; the lent machines ran 5.17)."""
    names = {f.name for f in fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}


def make_trainer(
    spec: str,
    model_dir: Path,
    out: Path,
    common: dict[str, Any],
    dataset: Any,
    tokenizer: Any,
    rehearsal: Callable[[], Path] | None = None,
) -> Any:
    """The trainer of ``spec`` (registry name and recipe keys, :func:`parse_spec`) on ``model_dir``; a
    ``rehearsal_path`` of :data:`REHEARSAL` becomes ``rehearsal()``, the path of the set it builds (once)."""
    from rlvr_div.trainers import TRAINERS

    name, settings = parse_spec(spec)
    if settings.get("rehearsal_path") == REHEARSAL:
        if rehearsal is None:
            raise ValueError(f"{spec!r} names {REHEARSAL} but no rehearsal set can be built here")
        settings["rehearsal_path"] = str(rehearsal())
    entry = TRAINERS.get(name)
    config_class = entry.config_class()
    args = config_class(output_dir=str(out), **common, **checkpointing_off(config_class), **settings)
    return entry.trainer_class()(
        model=str(model_dir),
        reward_funcs=[parity_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def time_steps(
    timed: Sequence[Timed], rows: list[dict[str, Any]], device: str, rounds: int, warmup: int, budget_s: float
) -> int:
    """Alternate the trainers round by round (the same seed for every trainer within a round); returns the timed
    rounds run (fewer than ``rounds`` when the next would overrun ``budget_s``)."""
    start, done = time.perf_counter(), 0
    for r in range(warmup + rounds):
        t_round = time.perf_counter()
        for t in timed:
            if t.trainer is None:
                continue
            try:
                torch.manual_seed(1000 + r)
                _sync(device)
                t0 = time.perf_counter()
                inputs = t.trainer._generate_and_score_completions(rows)
                _sync(device)
                t1 = time.perf_counter()
                loss = t.trainer._compute_loss(t.trainer.model, inputs)
                loss.backward()
                _sync(device)
                t2 = time.perf_counter()
                t.trainer.model.zero_grad(set_to_none=True)
                del inputs, loss
            except Exception as e:  # noqa: BLE001 - a readiness check reports every trainer, failed or not
                t.error, t.trainer = _one_line(e), None
                traceback.print_exc(limit=3)
                continue
            if r >= warmup:
                t.gen.append(t1 - t0)
                t.loss.append(t2 - t1)
        if r >= warmup:
            done += 1
        last = time.perf_counter() - t_round
        print(f"  round {r + 1}/{warmup + rounds} ({'warm-up' if r < warmup else 'timed'}): {last:.1f} s", flush=True)
        if r + 1 < warmup + rounds and time.perf_counter() - start + last > budget_s and done >= 1:
            print(f"  stopping after {done} timed round(s): the next would pass --budget-s {budget_s:.0f}", flush=True)
            break
    return done


def step_table(timed: Sequence[Timed]) -> list[dict[str, Any]]:
    """Median generate+score, loss+backward and total seconds per trainer, and their ratios to the first trainer."""
    rows, base = [], None
    for t in timed:
        if t.error or not t.gen:
            rows.append({"trainer": t.spec, "error": t.error or "not timed"})
            continue
        gen, loss = statistics.median(t.gen), statistics.median(t.loss)
        row = {
            "trainer": t.spec,
            "generate_s": gen,
            "loss_backward_s": loss,
            "step_s": gen + loss,
            "rounds": len(t.gen),
        }
        base = base or row
        row.update(
            loss_ratio=loss / base["loss_backward_s"],
            step_ratio=(gen + loss) / base["step_s"],
            baseline=base["trainer"],
        )
        rows.append(row)
    return rows


def print_steps(rows: Sequence[dict[str, Any]], batch: int, completion: int) -> None:
    print(f"\n(a) step time, {batch} completions of {completion} tokens, median seconds (ratio to the first row)")
    print(f"{'trainer':<58}{'gen+score':>10}{'loss+bwd':>10}{'step':>9}{'loss×':>8}{'step×':>8}")
    for row in rows:
        if "error" in row:
            print(f"{row['trainer']:<58}  FAILED: {row['error']}")
            continue
        print(
            f"{row['trainer']:<58}{row['generate_s']:>10.4f}{row['loss_backward_s']:>10.4f}{row['step_s']:>9.4f}"
            f"{row['loss_ratio']:>8.3f}{row['step_ratio']:>8.3f}"
        )


def hf_tokens_per_s(
    model: Any, prompt_len: int, batches: Sequence[int], new_tokens: int, rounds: int, device: str
) -> list[dict[str, Any]]:
    """``model.generate`` (sampling, T = 1) throughput at each batch size: every row runs to ``new_tokens``."""
    out = []
    model.eval()
    for batch in batches:
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(len(SPECIALS), len(SPECIALS) + len(ALPHABET), (batch, prompt_len), generator=g)
        ids, mask = ids.to(device), torch.ones(batch, prompt_len, dtype=torch.long, device=device)
        times = []
        for r in range(rounds + 1):  # the first is a warm-up
            _sync(device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                gen = model.generate(
                    input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                    max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0,
                )  # fmt: skip
            _sync(device)
            if r:
                times.append(time.perf_counter() - t0)
        tokens = (gen.shape[1] - prompt_len) * batch
        seconds = statistics.median(times)
        out.append({"backend": "hf", "batch": batch, "new_tokens": tokens // batch, "tokens_per_s": tokens / seconds})
    return out


def vllm_tokens_per_s(
    model_dir: Path, prompt_len: int, batches: Sequence[int], new_tokens: int
) -> list[dict[str, Any]]:
    """vLLM's throughput at each batch size (``ignore_eos``: every completion runs to ``new_tokens``); [] when vLLM is
    not importable. Runs after the trainers are freed."""
    try:
        from vllm import LLM, SamplingParams
    except Exception as e:  # noqa: BLE001 - absent or broken: say so and go on
        print(f"  vLLM: not measured ({_one_line(e)})")
        return []
    llm = LLM(model=str(model_dir), dtype="bfloat16", gpu_memory_utilization=0.3, seed=0,
              max_model_len=prompt_len + new_tokens + 8)  # fmt: skip
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new_tokens, ignore_eos=True, seed=0)
    out = []
    for batch in batches:
        g = torch.Generator().manual_seed(batch)
        prompts = [
            {"prompt_token_ids": row.tolist()}
            for row in torch.randint(len(SPECIALS), len(SPECIALS) + len(ALPHABET), (batch, prompt_len), generator=g)
        ]
        llm.generate(prompts, params, use_tqdm=False)  # warm-up
        t0 = time.perf_counter()
        done = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in done)
        out.append({"backend": "vllm", "batch": batch, "new_tokens": new_tokens, "tokens_per_s": tokens / seconds})
    return out


CARRIED = ("trl", "datasets", "math-verify", "latex2sympy2_extended", "multiprocess")  # bench/gpu_wheels.sh's


def requirement_problems(dists: Sequence[str] = CARRIED) -> list[str]:
    """One line per unmet requirement of ``dists`` (their non-extra ``Requires-Dist`` against what is installed):
    the carried wheels are installed with ``--no-deps``, so a package the machine has at too old a version shows
    here rather than as an import error later."""
    from packaging.requirements import Requirement

    problems = []
    for dist in dists:
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            problems.append(f"{dist} is not installed")
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{dist} needs {req}, which is not installed")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                problems.append(f"{dist} needs {req}, installed {have}")
    return problems


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "vllm"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def _write(path: str | None, results: dict[str, Any]) -> bool:
    """Write ``results`` as JSON to ``path`` (nothing when None); whether it wrote."""
    if path:
        Path(path).write_text(json.dumps(results, indent=1, default=str))
    return bool(path)


def _quiet() -> None:
    """No weight-loading, shard-writing or dataset-saving bars, no deprecation warning at every generate (as
    ``rlvr-div train``)."""
    import warnings

    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore", message=r".*`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--trainers",
        nargs="+",
        default=None,
        help=f"TRAINER[:key=value,...] (first = the baseline; rehearsal_path={REHEARSAL}: a built set)",
    )
    ap.add_argument(
        "--recipes",
        action="store_true",
        help=f"time stock GRPO (β = {BETA}) against every recipe in recipes/tiny (its method keys)",
    )
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts per step (default 8)")
    ap.add_argument("--num-generations", type=int, default=8, help="completions per prompt (default 8)")
    ap.add_argument("--prompt-length", type=int, default=32, help="characters per prompt (default 32)")
    ap.add_argument("--max-completion-length", type=int, default=128, help="tokens per completion (default 128)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up (default 2)")
    ap.add_argument("--budget-s", type=float, default=240, help="stop timing rounds past this many seconds")
    ap.add_argument("--sample-batches", type=int, nargs="+", default=[64, 256], help="model.generate batch sizes")
    ap.add_argument("--sample-tokens", type=int, default=256, help="new tokens per sampled row (default 256)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--json", default=None, help="also write the results here (default: $OUT/gpu_check.json if set)")
    ap.add_argument("--smoke", action="store_true", help="CPU, 2 layers, hidden 64, tiny batches: does it run?")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    shape, warmup, threads = QWEN25_05B, 1, torch.get_num_threads()
    if args.smoke:
        shape, warmup = SMOKE_SHAPE, 0
        args.device = args.device or "cpu"
        args.prompts, args.num_generations, args.prompt_length, args.max_completion_length = 2, 8, 8, 8
        args.rounds, args.sample_batches, args.sample_tokens = 1, [4], 4
        torch.set_num_threads(1)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device.startswith("cuda")
    dtype = torch.bfloat16 if gpu else torch.float32
    if args.recipes and args.trainers:
        ap.error("--recipes and --trainers both choose the trainers; give one")
    trainers = [f"grpo:beta={BETA}", *recipe_trainers()] if args.recipes else args.trainers or default_trainers()
    info = {"versions": versions(), "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu"}
    print(f"device: {info['device']}; " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()), flush=True)
    info["requirement_problems"] = requirement_problems()
    for line in info["requirement_problems"]:
        print(f"  requirement not met: {line} (bench/gpu_wheels.sh: GPU_EXTRA_WHEELS='NAME==VERSION')", flush=True)
    _quiet()

    import datasets

    path = args.json or (str(Path(os.environ["OUT"]) / "gpu_check.json") if os.environ.get("OUT") else None)
    results: dict[str, Any] = {**info, "smoke": args.smoke, "shape": shape, "dtype": str(dtype).removeprefix("torch.")}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        model_dir, params = build_model_dir(Path(tmp) / "model", shape, dtype, device)
        print(f"random model: {params / 1e6:.1f}M parameters, {shape['num_hidden_layers']} layers, hidden "
              f"{shape['hidden_size']}, vocab {shape['vocab_size']}, {results['dtype']} "
              f"({time.perf_counter() - t_start:.1f} s)", flush=True)  # fmt: skip
        tokenizer = build_tokenizer(shape["vocab_size"])
        batch = args.prompts * args.num_generations
        prompts = random_prompts(max(args.prompts, 2), args.prompt_length, seed=0)
        dataset = datasets.Dataset.from_dict({"prompt": prompts})
        rows = [{"prompt": p} for p in prompts[: args.prompts] for _ in range(args.num_generations)]
        common: dict[str, Any] = dict(
            per_device_train_batch_size=batch, num_generations=args.num_generations,
            max_completion_length=args.max_completion_length, temperature=1.0, learning_rate=1e-6,
            bf16=gpu, use_cpu=not gpu, report_to="none", seed=0,
            save_strategy="no", logging_steps=1, dataloader_num_workers=0, disable_tqdm=True,
            model_init_kwargs={"dtype": results["dtype"]},
        )  # fmt: skip
        rehearsal_dir: list[Path] = []

        def rehearsal() -> Path:
            if not rehearsal_dir:
                t0 = time.perf_counter()
                rehearsal_dir.append(build_rehearsal_set(
                    Path(tmp) / "rehearsal", model_dir, prompts, args.max_completion_length, count=max(batch, 8),
                    temperature=common["temperature"], dtype=dtype, device=device,
                ))  # fmt: skip
                print(f"  rehearsal set: {max(batch, 8)} rows ({time.perf_counter() - t0:.1f} s)", flush=True)
            return rehearsal_dir[0]

        timed = []
        for i, spec in enumerate(trainers):
            t0 = time.perf_counter()
            entry = Timed(spec)
            try:
                entry.trainer = make_trainer(spec, model_dir, Path(tmp) / f"out{i}", common, dataset, tokenizer,
                                             rehearsal)  # fmt: skip
                entry.trainer.model.train()
                entry.trainer.current_gradient_accumulation_steps = 1
            except Exception as e:  # noqa: BLE001 - report it and time the others
                entry.error = _one_line(e)
                traceback.print_exc(limit=3)
            timed.append(entry)
            state = "built" if entry.trainer is not None else f"FAILED ({entry.error})"
            print(f"  trainer {spec}: {state} ({time.perf_counter() - t0:.1f} s)", flush=True)
        print(f"timing {len(timed)} trainers, {warmup} warm-up + {args.rounds} rounds", flush=True)
        results["timed_rounds"] = time_steps(timed, rows, device, args.rounds, warmup, args.budget_s)
        results["steps"] = step_table(timed)
        results["batch"] = {"completions": batch, "completion_tokens": args.max_completion_length,
                            "prompt_chars": args.prompt_length}  # fmt: skip
        print_steps(results["steps"], batch, args.max_completion_length)
        if gpu:
            results["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            print(f"peak GPU memory allocated: {results['peak_gpu_memory_gib']:.1f} GiB (all trainers held at once)")
        _write(path, results)  # (a) is kept if (b) runs past the limit

        built = next((t.trainer for t in timed if t.trainer is not None), None)
        sampler = built.model if built is not None else load_model(model_dir, dtype, device)
        sampling = hf_tokens_per_s(
            sampler, args.prompt_length + 1, args.sample_batches, args.sample_tokens, 1 if args.smoke else 2, device
        )
        for t in timed:
            t.trainer = None
        sampler = None
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
            sampling += vllm_tokens_per_s(model_dir, args.prompt_length + 1, args.sample_batches, args.sample_tokens)
        results["sampling"] = sampling
        print("\n(b) sampling throughput (T = 1, every row to its length)")
        for row in sampling:
            print(f"  {row['backend']:<5} batch {row['batch']:>4} × {row['new_tokens']} tokens: "
                  f"{row['tokens_per_s']:,.0f} tokens/s")  # fmt: skip
    results["wall_s"] = time.perf_counter() - t_start
    print(f"\ngpu_check: {results['wall_s']:.0f} s in all", flush=True)
    if _write(path, results):
        print(f"results: {path}")
    torch.set_num_threads(threads)
    failed = [r["trainer"] for r in results["steps"] if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
