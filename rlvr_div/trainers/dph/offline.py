"""DPH-RL offline stage (Li et al., ICLR 2026): sample the initial policy once, split prompts, store rehearsal samples.

``rlvr-div rehearse --config recipe.yaml`` draws k completions per training prompt from the base policy a (at the
recipe's temperature and top_p; HF ``generate`` on the training device, or vLLM with ``use_vllm``), scores them
with the reward at ``validity_reward_index`` (correct = score 1), and splits the prompts into

    D_pef = {x : #correct(x) >= threshold}   (near-perfect; default threshold = k)   and   D_exp = the rest.

For each D_pef prompt one more sample y ~ a(·|x) is drawn and kept only if correct (``rehearsal_keep: fresh``, the
default), or, with ``rehearsal_keep: any_correct``, the first correct of the k when that extra one is not: every D_pef
prompt keeps one sample, and it is still a draw from a(·|x, correct) (:func:`kept_sample`). The kept sample is stored
with its token ids and per-token reference log-probs log a(y_t | x, y_<t) computed at the sampling temperature, so
that training needs no reference model. The output directory's layout, its checks and the served batches are in
:mod:`rlvr_div.trainers.dph.rehearsal_set`; ``samples.jsonl`` gets one line per prompt as soon as it is scored, so
a killed run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.dph.rehearsal_set import D_EXP_DIR, REHEARSAL_DIR, SUMMARY, tokenizer_hash


def _append(f: Any, record: dict[str, Any]) -> None:
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def _read_done(path: Path) -> dict[int, dict[str, Any]]:
    """Finished prompts of an earlier run (a torn last line from a kill is ignored)."""
    done: dict[int, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[int(rec["index"])] = rec
    return done


def kept_sample(record: dict[str, Any], keep: str) -> dict[str, Any] | None:
    """The sample a D_pef prompt's ``record`` keeps (``completion``, ``completion_ids``), or None.

    ``fresh``: the extra (k+1)-th draw if correct. ``any_correct``: that one if correct, else the first correct of the
    k draws. Either is distributed as a(·|x, correct): the draws are i.i.d., so which of them are correct is independent
    of which correct answer each one is, and the first correct one is a draw from a(·|x, correct); the extra draw is
    independent of the k (so P(y) = A·a*(y) + (1 − A)·a*(y) = a*(y), A the prompt's pass rate)."""
    extra = record["extra"]
    if extra["correct"]:
        return extra
    if keep == "any_correct":
        for text, ids, ok in zip(record["completions"], record["completion_ids"], record["correct"]):
            if ok:
                return {"completion": text, "completion_ids": ids, "correct": True}
    return None


def build_rehearsal_set(script: Any, training: Any, model_args: Any, progress: bool = True) -> dict[str, Any]:
    """Run the offline stage for a DPH recipe (parsed by ``rlvr_div.recipe.parse_recipe``) and return the summary.

    k + 1 samples per prompt come from one reproducible stream per prompt (``rlvr_div.sampling``): samples 0..k−1
    decide the split, sample k is the extra draw that is kept for a D_pef prompt when it is correct (with
    ``rehearsal_keep: any_correct``, else the first correct of the k: :func:`kept_sample`). A sample is
    correct when the reward at ``validity_reward_index`` scores it 1 (the training's notion of valid).

    The base is loaded as training loads it (the recipe's ``dtype``, ``attn_implementation``, revision, quantization;
    :func:`rlvr_div.models.model_init_kwargs`) on the training device (the accelerator unless ``use_cpu``), and
    runs under the training's mixed precision (``bf16``/``fp16`` autocast). With ``use_vllm`` the samples come from
    the vLLM backend of :mod:`rlvr_div.sampling` (an engine of its own, with the recipe's ``vllm_*`` engine
    settings, whatever ``vllm_mode``); the reference log-probs always come from the loaded model.
    """
    import datasets

    from rlvr_div.logprobs import token_logprobs
    from rlvr_div.models import load_tokenizer, resolve_model
    from rlvr_div.rewards import get_reward
    from rlvr_div.sampling import SamplingConfig
    from rlvr_div.tasks import get_task, get_task_spec, task_reward_settings, task_stop_text
    from rlvr_div.trainers.dph import offline_stage

    out = Path(training.rehearsal_path)
    stage = offline_stage(training)
    k, threshold, keep = stage["k"], stage["threshold"], stage["keep"]
    sampling = SamplingConfig(
        n=k + 1,
        temperature=training.temperature,
        top_p=stage["top_p"],
        max_new_tokens=training.max_completion_length,
        seed=training.seed,
        batch_size=training.rehearsal_sampling_batch_size,
        stop_text=task_stop_text(script.task, **script.task_kwargs),  # as training's generation
    )
    rewards = script.rewards or [get_task_spec(script.task).reward]
    validity = rewards[getattr(training, "validity_reward_index", 0)]
    settings = {
        "model": model_args.model_name_or_path,
        "task": script.task,
        "task_split": script.task_split,
        "task_size": script.task_size,
        "task_seed": script.task_seed,
        "k": k,
        "threshold": threshold,
        "validity_reward": validity,
        "sampling": sampling.to_dict(),
        "backend": "vllm" if training.use_vllm else "hf",
        "dtype": model_args.dtype,
        "mixed_precision": _mixed_precision(training),
    }
    if keep != "fresh":  # recorded when not the default, so the sets built before the rule existed still resume
        settings["keep"] = keep
    out.mkdir(parents=True, exist_ok=True)
    settings_file = out / "settings.json"
    if settings_file.exists() and json.loads(settings_file.read_text()) != settings:
        raise ConfigError(f"{out} holds a rehearsal run with other settings; use another rehearsal_path or delete it")
    settings_file.write_text(json.dumps(settings, indent=1))

    dataset = get_task(script.task, split=script.task_split, seed=script.task_seed, **script.task_kwargs)
    if script.task_size is not None:
        dataset = dataset.select(range(min(script.task_size, len(dataset))))
    reward = get_reward(validity, **task_reward_settings(script.task, validity, None, **script.task_kwargs))
    path = resolve_model(model_args.model_name_or_path, script.gguf_file)
    tokenizer = load_tokenizer(path, script.gguf_file, model_args.model_revision, training.trust_remote_code)
    device = training.device
    model = None
    if not training.use_vllm:
        model = _load_base(path, script, training, model_args, device)

    log = out / "samples.jsonl"
    done = _read_done(log)
    todo = [i for i in range(len(dataset)) if i not in done]
    if todo:
        sampler = _sampler(sampling, tokenizer, path, training, model_args, model)
        with open(log, "a") as f, torch.no_grad(), _autocast(training, device):
            for item in sampler.sample([dataset[i]["prompt"] for i in todo], indices=todo, progress=progress):
                row = dataset[item.index]
                columns = {c: [row[c]] * len(item.completions) for c in reward.columns}
                scores = reward.score(item.completions, **columns)
                correct = [s == 1.0 for s in scores]
                rec = {
                    "index": item.index,
                    "prompt_ids": item.prompt_ids,
                    "completions": item.completions[:k],
                    "completion_ids": item.completion_ids[:k],
                    "correct": correct[:k],
                    "c": sum(correct[:k]),
                    "n": k,
                    "extra": {"completion": item.completions[k], "completion_ids": item.completion_ids[k],
                              "correct": correct[k]},
                }  # fmt: skip
                _append(f, rec)
                done[item.index] = rec
        del sampler
        _release_accelerator_memory()

    records = [done[i] for i in range(len(dataset))]
    pef = [r for r in records if r["c"] >= threshold]
    kept = [(r, sample) for r in pef if (sample := kept_sample(r, keep)) is not None]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ref_logps: list[list[float]] = []
    if kept:
        model = model if model is not None else _load_base(path, script, training, model_args, device)
        with _autocast(training, device):
            ref_logps = token_logprobs(
                model,
                [r["prompt_ids"] for r, _ in kept],
                [sample["completion_ids"] for _, sample in kept],
                temperature=sampling.temperature,
                pad_token_id=pad,
                progress=progress,
            )
    rehearsal = datasets.Dataset.from_list(
        [
            {
                "prompt": dataset[r["index"]]["prompt"],
                "completion": sample["completion"],
                "prompt_ids": r["prompt_ids"],
                "completion_ids": sample["completion_ids"],
                "ref_logps": lp,
            }
            for (r, sample), lp in zip(kept, ref_logps)
        ]
    )
    pef_set = {r["index"] for r in pef}
    d_exp = dataset.select([i for i in range(len(dataset)) if i not in pef_set])
    _save(rehearsal, out / REHEARSAL_DIR)
    _save(d_exp, out / D_EXP_DIR)
    histogram = {str(c): sum(1 for r in records if r["c"] == c) for c in range(k + 1)}
    summary = {
        **settings,
        "device": str(device),
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "pad_token_id": pad,
        "n_prompts": len(records),
        "n_pef": len(pef),
        "n_exp": len(d_exp),
        "n_rehearsal": len(rehearsal),
        "pass_rate_histogram": histogram,
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=1))
    return summary


def _mixed_precision(training: Any) -> str:
    return "bf16" if getattr(training, "bf16", False) else "fp16" if getattr(training, "fp16", False) else "no"


def _autocast(training: Any, device: torch.device) -> Any:
    """The training's mixed precision (``bf16``/``fp16`` autocast on ``device``), or nothing."""
    mode = _mixed_precision(training)
    if mode == "no":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if mode == "bf16" else torch.float16)


def _load_base(path: str, script: Any, training: Any, model_args: Any, device: torch.device) -> Any:
    """The base model as training loads it (every ModelConfig setting, quantization included), on ``device``."""
    from rlvr_div import models

    kwargs = models.model_init_kwargs(model_args, training)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("device_map", None)
    model = models.load_model(
        path,
        script.gguf_file,
        dtype=dtype,
        device=device,
        quantization_config=models.quantization_config(model_args),
        **kwargs,
    )
    return model.eval()


def _sampler(sampling: Any, tokenizer: Any, path: str, training: Any, model_args: Any, model: Any) -> Any:
    """The HF sampler over the loaded base, or with ``use_vllm`` a vLLM engine with the recipe's engine settings."""
    from rlvr_div import sampling as backends

    if not training.use_vllm:
        return backends.make_sampler("hf", sampling, tokenizer, model=model)
    engine: dict[str, Any] = {
        "dtype": model_args.dtype or "auto",
        "revision": model_args.model_revision,
        "trust_remote_code": training.trust_remote_code,
        "tensor_parallel_size": training.vllm_tensor_parallel_size,
        "gpu_memory_utilization": training.vllm_gpu_memory_utilization,
        "model_impl": training.vllm_model_impl,
    }
    if training.vllm_max_model_length is not None:
        engine["max_model_len"] = training.vllm_max_model_length
    if model_args.load_in_4bit:
        engine["quantization"] = "bitsandbytes"  # as TRL's colocated engine serves a 4-bit policy
    return backends.make_sampler("vllm", sampling, tokenizer, model_path=path, **engine)


def _release_accelerator_memory() -> None:
    """Free what a finished sampler held (a vLLM engine's cache) before the reference model loads."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _save(ds: Any, path: Path) -> None:
    """``save_to_disk`` into a fresh directory, replacing an older one only once the new one is complete."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
