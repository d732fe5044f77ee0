"""The evaluation's orchestration: validate every input, sample and score each model (resumable) or score each
sample log (:mod:`eval.score_only`), compare with the base, write the report. Its parts: :mod:`eval.settings` (what
an evaluation depends on, and the checks on it), :mod:`eval.resume` (may earlier samples be kept),
:mod:`eval.scoring` (a problem's record), :mod:`eval.metrics` (everything computed from the records).

Per model, in ``OUTPUT/NAME/``:
- ``config.json`` — the settings that determine the samples and the model's content fingerprint
  (``rlvr_div.models.fingerprint.model_fingerprint``: its weight, adapter and tokenizer files), written once the model
  is loaded, before the first sample; a rerun whose settings differ, or whose model files changed (a model retrained
  in place), fails with a one-line :class:`ConfigError` instead of mixing samples; ``--fresh`` starts over.
- ``samples.jsonl`` — one line per problem, appended (flushed and fsync'd) as soon as it is scored: index, prompt,
  completions, extracted answers, scores, ``correct`` (score == 1), c, n, completion token counts and the problem's
  diversity numbers. A rerun skips the problems already there, so ``kill -9`` loses only the problems in flight;
  a half-written last line is dropped.
- ``results.json`` — the full configuration (with package versions), the metrics computed from ``samples.jsonl``
  alone (:func:`compute_metrics`), and timing.

Bitwise-identical resumption: prompts are sampled in fixed chunks of ``prompts_per_batch`` consecutive problems
(see ``rlvr_div.sampling``); a rerun regenerates every chunk that still has an unfinished problem, with the same
chunk boundaries, so a killed-and-rerun evaluation equals an uninterrupted one on the same machine, device and
batch size.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.metrics import MATERIAL_PROBLEMS, compare_to_base, compute_metrics, package_versions
from eval.records import RESULTS_FILE, SAMPLES_FILE, append_line, read_samples, write_json
from eval.resume import (
    CONFIG_FILE,
    FINGERPRINT_KEY,
    START_OVER,
    check_model_unchanged,
    check_not_sampled,
    check_resume,
    fingerprint,
    resumed_dtype,
    start_over,
)
from eval.scoring import score_problem
from eval.settings import (
    EvalSettings,
    ModelRef,
    check_backend,
    check_device,
    check_sampling_memory,
    default_device,
    parse_model_arg,
    resolve_dtype,
    resolve_model_ref,
    torch_threads,
)
from rlvr_div.errors import ConfigError

__all__ = [  # the names other packages and the tests import from here
    "CONFIG_FILE",
    "MATERIAL_PROBLEMS",
    "RESULTS_FILE",
    "START_OVER",
    "EvalJob",
    "EvalSettings",
    "compare_to_base",
    "compute_metrics",
    "evaluate_model",
    "load_for_eval",
    "prepare",
    "resolve_model_ref",
    "run",
]


def load_for_eval(ref: ModelRef, settings: EvalSettings) -> tuple[Any, Any]:
    """(model, tokenizer) for the HF backend: a LoRA adapter is loaded with peft on its base and merged."""
    import torch

    from rlvr_div.models import load_model

    dtype = getattr(torch, settings.dtype)
    try:
        tokenizer = _tokenizer(ref)
        model = load_model(ref.model, dtype=dtype, device=settings.device, revision=ref.revision)
        if ref.adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, ref.adapter).merge_and_unload()
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot load model {ref.name}={ref.given}: {first}") from None
    model.eval()
    return model, tokenizer


def _tokenizer(ref: ModelRef) -> Any:
    """A reference's tokenizer: an adapter directory's when it holds one (TRL saves one beside the adapter), else
    the model's (an adapter's base at the revision the adapter records)."""
    from rlvr_div.models import holds_tokenizer, load_tokenizer

    if ref.adapter and holds_tokenizer(ref.adapter):
        return load_tokenizer(ref.adapter)
    return load_tokenizer(ref.model, revision=ref.revision)


def make_eval_sampler(ref: ModelRef, settings: EvalSettings) -> Any:
    from rlvr_div.sampling import HFSampler, VLLMSampler

    if settings.backend == "hf":
        model, tokenizer = load_for_eval(ref, settings)
        return HFSampler(model, tokenizer, settings.sampling())
    from rlvr_div.models import holds_tokenizer, resolve_model

    path = resolve_model(ref.model)
    tokenizer = _tokenizer(ref)
    kwargs: dict[str, Any] = {"dtype": settings.dtype}
    if ref.revision:
        kwargs["revision"] = ref.revision
        if not (ref.adapter and holds_tokenizer(ref.adapter)):
            kwargs["tokenizer_revision"] = ref.revision  # vLLM's detokenizer: the base's tokenizer at its revision
    if ref.adapter:
        rank = int(json.loads((Path(ref.adapter) / "adapter_config.json").read_text()).get("r", 16))
        kwargs.update(lora_path=ref.adapter, lora_rank=rank)
    return VLLMSampler(path, tokenizer, settings.sampling(), **kwargs)


def rendered_prompt(sampler: Any, prompt: Any, chat_template: bool | None) -> str | None:
    """The prompt text the model saw (chat template applied where it was), stored beside the messages."""
    from rlvr_div.sampling import format_prompt

    tokenizer = getattr(sampler, "tokenizer", None)
    return None if tokenizer is None else format_prompt(tokenizer, prompt, chat_template)[0]


def evaluate_model(
    ref: ModelRef,
    settings: EvalSettings,
    dataset: Any,
    reward: Any,
    out_dir: Path,
    progress: bool = True,
    fresh: bool = False,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sample and score every unfinished problem of ``dataset[:limit]`` (each appended to ``samples.jsonl`` as it is
    scored); returns the results (what :func:`run` writes to ``results.json``, once) and the records of
    ``dataset[:limit]`` by index.

    ``fresh``: delete ``out_dir``'s earlier samples first. Otherwise earlier samples are kept only when their
    settings and model fingerprint match (checked before the load, and again after it: loading a hub id may fetch a
    newer snapshot). Fingerprints are cached in ``out_dir.parent / file_hashes.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if fresh:
        start_over(out_dir)
    check_resume(out_dir, settings)
    if (out_dir / CONFIG_FILE).is_file():
        check_model_unchanged(out_dir, fingerprint(ref, out_dir.parent))
    samples_path = out_dir / SAMPLES_FILE
    done = read_samples(samples_path, settings.n)
    total = len(dataset) if settings.limit is None else min(settings.limit, len(dataset))
    pending = {i for i in range(total) if i not in done}
    per = settings.sampling().prompts_per_batch()
    chunks = [list(range(s, min(s + per, total))) for s in range(0, total, per)]
    needed = [i for chunk in chunks if any(i in pending for i in chunk) for i in chunk]
    tokens, load_seconds, sample_seconds = 0, 0.0, 0.0
    if needed:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc=f"{ref.name}: scoring", disable=not progress, mininterval=0.5)
        with torch_threads(settings.threads), open(samples_path, "a") as f, bar:
            t0 = time.perf_counter()
            sampler = make_eval_sampler(ref, settings)
            load_seconds = time.perf_counter() - t0
            current = fingerprint(ref, out_dir.parent)  # after the load: a hub id's files are in the local cache now
            check_model_unchanged(out_dir, current)
            if not (out_dir / CONFIG_FILE).is_file():
                write_json(out_dir / CONFIG_FILE, {**settings.sample_key(), FINGERPRINT_KEY: current})
            t0 = time.perf_counter()
            rows = dataset.select(needed)
            for samples in sampler.sample(rows["prompt"], indices=needed, progress=progress):
                if samples.index not in pending:
                    continue
                row = dataset[samples.index]
                text = rendered_prompt(sampler, row["prompt"], settings.chat_template)
                record = score_problem(samples.index, row, samples, reward, prompt_text=text)
                append_line(f, record)
                done[samples.index] = record
                tokens += samples.num_tokens
                bar.update(1)
            sample_seconds = time.perf_counter() - t0
        del sampler
    records = [done[i] for i in range(total)]
    recorded = json.loads((out_dir / CONFIG_FILE).read_text()).get(FINGERPRINT_KEY)
    results = {
        "config": {
            "name": ref.name,
            "model_given": ref.given,
            **asdict(settings),
            FINGERPRINT_KEY: recorded,
            "versions": package_versions(),
        },
        "metrics": compute_metrics(records, settings),
        "timing": {
            "problems_sampled": len(pending),
            "load_seconds": round(load_seconds, 3),
            "sampling_seconds": round(sample_seconds, 3),  # sampling and scoring
            "generated_tokens": tokens,
            "tokens_per_second": round(tokens / sample_seconds, 1) if sample_seconds > 0 and tokens else None,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    }
    return results, records


@dataclass
class EvalJob:
    """A validated multi-model evaluation (see :func:`prepare`): models to sample and sample logs to score."""

    models: list[ModelRef]
    base: str
    settings: dict[str, EvalSettings]
    dataset: Any
    reward: Any
    output_dir: Path
    fresh: bool = False
    sources: list[Any] = field(default_factory=list)  # eval.score_only.ScoredSource, scored without a model
    task: str | None = None
    split: str | None = None
    source_rewards: dict[str, Any] = field(default_factory=dict)  # a source's own reward (its log's style), by name

    def reward_of(self, name: str) -> Any:
        """The reward that scores model or sample log ``name``."""
        return self.source_rewards.get(name, self.reward)

    def names(self) -> list[str]:
        return [r.name for r in self.models] + [s.name for s in self.sources]


def prepare(
    models: Sequence[str],
    task: str | None,
    output_dir: str | os.PathLike,
    base: str | None = None,
    reward: str | None = None,
    reward_settings: dict[str, Any] | None = None,
    task_options: dict[str, Any] | None = None,
    dtype: str = "auto",
    device: str | None = None,
    fresh: bool = False,
    samples: Sequence[str] = (),
    **settings: Any,
) -> EvalJob:
    """Validate every input — model specs and paths, sample logs, task and its data, reward and its columns,
    sampling settings, earlier runs in ``output_dir`` — before any model loads; :class:`ConfigError` (one line) on
    the first problem.

    ``samples``: ``NAME=FILE`` sample logs to score instead of sampling (:mod:`eval.score_only`); every problem's
    verifier columns are checked here. An earlier run's samples must have been made with the same settings and from a
    model with the same content fingerprint (its files are hashed, not loaded), and a sample log is not scored over
    samples a model made there; ``fresh``: start every model over, let sample logs replace what was there."""
    from eval.score_only import check_columns, log_reward_settings, read_source
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import check_task, get_task, task_reward_settings, task_stop_text

    if not models and not samples:
        raise ConfigError("give at least one --model NAME=PATH or --samples NAME=FILE")
    refs: list[ModelRef] = []
    names: list[str] = []
    for text in models:
        name, path = parse_model_arg(text)
        if name in names:
            raise ConfigError(f"--model name {name!r} is given twice; names must be unique")
        names.append(name)
        refs.append(resolve_model_ref(name, path))
    sources = []
    for text in samples:
        name, path = parse_model_arg(text, flag="--samples")
        if name in names:
            raise ConfigError(f"--samples name {name!r} is given twice; names must be unique")
        names.append(name)
        sources.append(read_source(name, path))
    if base is None:
        base = "base" if "base" in names else names[0]
    elif base not in names:
        raise ConfigError(f"--base {base!r} is not one of the models ({', '.join(names)})")
    limit = settings.get("limit")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    task_options = dict(task_options or {})
    split = settings.get("split", "test")
    dataset, reward_name = None, reward
    if task is None:
        if refs:
            raise ConfigError("sampling a --model needs --task (the prompts to complete)")
        if task_options:
            raise ConfigError("--task-arg needs --task")
        if reward is None:
            raise ConfigError("scoring --samples without --task needs --reward NAME (rlvr-div list shows them)")
    else:
        spec = check_task(task, **task_options)
        dataset = get_task(task, split=split, seed=settings.get("task_seed", 0), **task_options)
        if len(dataset) == 0:
            raise ConfigError(f"task {task!r} split {split!r} has no problems; check its data")
        if "prompt" not in dataset.column_names:
            raise ConfigError(f"task {task!r} has no 'prompt' column")
        reward_name = reward or spec.reward
    given = dict(reward_settings or {})
    if task is not None:  # the task's defaults (a few-shot prompt's answer extraction) under the given settings
        reward_settings = task_reward_settings(task, reward_name, reward_settings, **task_options)
        if settings.get("stop_text", "task") == "task":  # a few-shot prompt's blank line ends a completion
            settings["stop_text"] = task_stop_text(task, **task_options)
    if settings.get("stop_text") in ("task", "none"):
        settings["stop_text"] = None
    reward_obj = get_reward(reward_name, **(reward_settings or {}))
    if dataset is not None and refs:
        missing = [c for c in reward_obj.columns if c not in dataset.column_names]
        if missing:
            raise ConfigError(f"reward {reward_name!r} needs column(s) {missing} that task {task!r} does not have")
    source_rewards = {}
    for source in sources:  # a log's style (GSM8K-style: lm-eval's answer rule) over the task's, under the given
        style = {k: v for k, v in log_reward_settings(source, reward_name).items() if k not in given}
        if style and {**(reward_settings or {}), **style} != (reward_settings or {}):
            source_rewards[source.name] = get_reward(reward_name, **{**(reward_settings or {}), **style})
        check_columns(source, source_rewards.get(source.name, reward_obj), dataset, limit)
    backend = settings.get("backend", "hf")
    check_backend(backend)
    device = device or default_device()
    if refs:
        check_device(device)
    out = Path(output_dir)
    # one dtype for the whole job (its models are compared); under auto, the one their samples were drawn in
    resolved_dtype = resolve_dtype(dtype, device, None if fresh else resumed_dtype([out / r.name for r in refs]))
    per_model: dict[str, EvalSettings] = {}
    for ref_name, model, adapter in [(r.name, r.model, r.adapter) for r in refs] + [
        (s.name, s.given, None) for s in sources
    ]:
        sampled = any(r.name == ref_name for r in refs)
        s = EvalSettings(
            model=model,
            adapter=adapter,
            task=task or "",
            task_options=task_options,
            reward=reward_name,
            reward_settings=source_rewards.get(ref_name, reward_obj).settings(),
            dtype=resolved_dtype,
            device=device,
            **settings,
        )
        s.sampling()  # validates n, temperature, top_p, …
        if s.threads is not None and s.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {s.threads}")
        if dataset is not None and sampled:  # a model to sample: can it be held?
            check_sampling_memory(s, len(dataset) if limit is None else min(limit, len(dataset)))
        if not fresh and sampled:
            check_resume(out / ref_name, s)
        elif not fresh:
            check_not_sampled(out / ref_name, ref_name)
        per_model[ref_name] = s
    if not fresh:
        for ref in refs:
            if (out / ref.name / CONFIG_FILE).is_file():
                check_model_unchanged(out / ref.name, fingerprint(ref, out))
    return EvalJob(refs, base, per_model, dataset, reward_obj, out, fresh, sources, task, split, source_rewards)


def run(job: EvalJob, progress: bool = True, lm_eval_log: bool = False) -> dict[str, dict[str, Any]]:
    """Evaluate every model of ``job`` (resuming) and score every sample log, compare each with the base, write each
    ``results.json`` once and the report (and, with ``lm_eval_log``, each model's records as an lm-eval samples log),
    all from the records in memory; results by name."""
    from eval.report import write_report
    from eval.score_only import score_source

    scored: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for ref in job.models:
        scored[ref.name] = evaluate_model(
            ref, job.settings[ref.name], job.dataset, job.reward, job.output_dir / ref.name, progress, job.fresh
        )
    for src in job.sources:
        out_dir = job.output_dir / src.name
        settings = job.settings[src.name]
        reward = job.reward_of(src.name)
        scored[src.name] = score_source(src, reward, job.dataset, out_dir, settings, job.task, job.split, progress)
        if reward is not job.reward and hasattr(reward, "close"):
            reward.close()  # its own worker pool
    base_records = scored[job.base][1]
    results: dict[str, dict[str, Any]] = {}
    for name in job.names():  # scored in memory: each results.json is written once, with its comparison to the base
        results[name], records = scored[name]
        if name != job.base:
            results[name]["metrics"]["vs_base"] = compare_to_base(base_records, records, job.base)
        write_json(job.output_dir / name / RESULTS_FILE, results[name])
        if lm_eval_log:
            from eval.sample_formats import LM_EVAL_FILE, write_lm_eval

            write_lm_eval(records, job.output_dir / name / LM_EVAL_FILE, job.task or "")
    write_report(job.output_dir, results, job.base, {name: scored[name][1] for name in results})
    return results
