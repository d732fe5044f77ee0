"""Evaluation settings and the checks on them: which model (``--model NAME=PATH``), how it is sampled, on which
device, with which dtype and backend. Nothing here loads a model."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.sampling import BACKENDS, SamplingConfig, vllm_available

DEFAULT_TAUS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
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
    stop_text: str | None = None
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
            stop_text=self.stop_text,
        )

    def sample_key(self) -> dict[str, Any]:
        d = asdict(self)
        key = {k: d[k] for k in SAMPLE_KEYS}
        if self.stop_text is not None:  # left out when unset: evaluations made before it still resume
            key["stop_text"] = self.stop_text
        return key


def parse_model_arg(text: str, flag: str = "--model") -> tuple[str, str]:
    """``NAME=PATH`` → (NAME, PATH); NAME becomes a directory name, so letters, digits, ``._-`` only."""
    name, sep, path = text.partition("=")
    example = "--model base=tiny" if flag == "--model" else "--samples rl=samples.jsonl"
    if not sep or not name or not path:
        raise ConfigError(f"{flag} {text!r} is not NAME=PATH (e.g. {example})")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{flag} name {name!r} must use letters, digits, '.', '_' or '-' (it names a directory)")
    return name, path


def with_gguf_file(models: list[str], gguf_file: str | None) -> list[str]:
    """``--model NAME=DIR --gguf_file FILE`` as ``--model NAME=DIR/FILE`` (as ``train`` reads ``--model_name_or_path DIR
    --gguf_file FILE``: the file in the local directory, else ``FILE`` as a path of its own, else the file in the hub
    repo ``DIR``, taken from the hub cache or downloaded); ``models`` unchanged without ``gguf_file``. One
    :class:`ConfigError` line when it is ambiguous (no ``--model``, several) or does not name a GGUF file."""
    if not gguf_file:
        return list(models)
    if len(models) != 1:
        given = "no --model" if not models else f"{len(models)} --model options"
        raise ConfigError(
            f"--gguf_file names the GGUF file of one --model, but there are {given}; "
            "give each model its file as --model NAME=DIR/FILE.gguf instead"
        )
    name, path = parse_model_arg(models[0])
    if not gguf_file.endswith(".gguf"):
        raise ConfigError(f"--gguf_file {gguf_file!r} does not end in .gguf")
    if path.endswith(".gguf"):
        raise ConfigError(f"--model {models[0]!r} is a GGUF file already and --gguf_file {gguf_file!r} names another")
    from rlvr_div.models import resolve_model
    from rlvr_div.models.tiny_base import tiny_spec

    if tiny_spec(path) is not None:
        raise ConfigError(
            f"--gguf_file {gguf_file!r} with --model {name}={path}, a built-in tiny base: not a GGUF repo"
        )
    local = resolve_model(path, gguf_file, build=False)  # a missing directory or file: one line
    directory = Path(local).expanduser()
    if directory.is_dir():
        if (directory / "adapter_config.json").is_file():
            raise ConfigError(f"--gguf_file {gguf_file!r} with --model {name}={path}, a LoRA adapter: not a GGUF repo")
        found = directory / gguf_file if (directory / gguf_file).is_file() else Path(gguf_file).expanduser()
    elif directory.exists():
        raise ConfigError(f"--gguf_file {gguf_file!r} with --model {name}={path}, a file: give a directory")
    else:
        found = _hub_gguf(name, path, gguf_file)
    return [f"{name}={found}"]


def _hub_gguf(name: str, repo: str, gguf_file: str) -> Path:
    """``gguf_file`` of hub repo ``repo`` (the hub cache's copy, or downloaded; HF_HUB_OFFLINE is honoured)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo, gguf_file))
    except Exception as e:  # noqa: BLE001 - offline, missing repo or file, network: one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--model {name}={repo} --gguf_file {gguf_file!r}: cannot get the file ({first})") from None


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


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


DTYPES = ("float32", "bfloat16", "float16")


def resolve_dtype(dtype: str, device: str, recorded: str | None = None) -> str:
    """``auto`` → ``recorded`` (the dtype of the samples already in the job's output directory: a resumed
    evaluation keeps it), else bfloat16 on a GPU that supports it or on a CPU that computes it natively
    (:func:`rlvr_div.cpu_bf16.native_bf16`: AMX or AVX-512 BF16, with torch's AVX-512 kernels), else float32. Only the
    model's forward runs in bfloat16: the sampler draws from float32 logits (``bench/bench_bf16_sampling_check.py``
    measures the difference). Samples drawn in bfloat16, resumed under ``auto`` on a CPU that does not compute it
    natively, are one line (emulated it is slow, and below torch's AVX-512 kernels its attention raises)."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}")
        return dtype
    if recorded in DTYPES:
        if recorded == "bfloat16" and device == "cpu":
            from rlvr_div.cpu_bf16 import describe, native_bf16

            if not native_bf16():
                raise ConfigError(
                    f"the samples in the output directory were drawn in bfloat16, which this CPU does not compute "
                    f"natively ({describe()}): pass --dtype bfloat16 to continue them here anyway, or --dtype "
                    "float32 --fresh to sample again"
                )
        return recorded
    import torch

    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bfloat16"
    if device == "cpu":
        from rlvr_div.cpu_bf16 import native_bf16

        if native_bf16():
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


def check_device(device: str) -> None:
    """A CUDA device needs a CUDA build of torch with a visible GPU; one line otherwise (not torch's assertion)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else "no visible CUDA device"
        raise ConfigError(f"--device {device} but this machine has {build}; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda") or device == "mps"):
        raise ConfigError(f"--device {device!r} is not cpu, cuda, cuda:N or mps")


SAMPLE_BYTES = 4  # float32 uniforms (HF backend; rlvr_div.sampling.prompt_uniforms) or token ids, per token per sample


def check_sampling_memory(settings: EvalSettings, problems: int) -> None:
    """One line, before anything is written, when one chunk of the sampler (``batch_size // n`` prompts, at least
    one, of ``problems``) would hold more per-token values than this machine has memory available: the HF backend
    draws ``n × max_new_tokens`` float32 uniforms per prompt up front (``--n 100000000`` would ask for 204.8 GB)."""
    rows = min(settings.sampling().prompts_per_batch(), max(problems, 1)) * settings.n
    need = rows * settings.max_new_tokens * SAMPLE_BYTES
    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"--n {settings.n} × --max-new-tokens {settings.max_new_tokens} needs {need / 1e9:.1f} GB for the "
            f"sampler's per-token values of {rows} sequences at once ({SAMPLE_BYTES} bytes each), more than the "
            f"{have / 1e9:.1f} GB of memory available; lower --n or --max-new-tokens"
        )


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (psutil's ``available`` where installed, else the physical
    memory), or None where neither can be read."""
    try:
        import psutil
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().available)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
