"""The built-in tiny base models: a character-level tokenizer and a small Llama, pretrained on built-in synthetic
tasks by a recipe deterministic from a seed (:class:`TinySpec`).

The named bases (:data:`TINY_BASES`) ship with the package (``tiny_bases/tiny-<spec hash>``, checked against the
sha256 in ``tiny_bases/manifest.json`` at first use: :func:`shipped_tiny_path`), because the recipe is not
bit-reproducible across CPUs and thread counts: on an AVX-512/AMX Xeon the 1- and 2-thread builds differ, so a base
built by each user would differ in the last bits from the one behind the committed results. ``rlvr-div build-tiny
NAME --rebuild DIR`` runs the recipe and compares (:func:`compare_with_shipped`); ``--ship`` re-ships a base after
its recipe changed (:func:`ship_tiny`).

Any other spec is built on first use (a minute or two on 2 CPU cores) and cached under ``$RLVR_DIV_CACHE`` (default
``~/.cache/rlvr_div``) as ``tiny-<spec hash>``. The spec hash names the directory; what the weights depend on beyond
the spec (the corpus samplers' code, the build code, the torch and transformers versions) is the build's
*fingerprint* (:func:`build_fingerprint`), recorded in ``tiny_spec.json``. A cached base whose fingerprint differs
from the current one was built by other code: it is rebuilt, with one line saying why, so two users of one name
cannot hold different models silently.

The named bases: ``tiny``, pretrained on ``arith`` and ``pairsum``; ``tiny2``, the base of the collapse benchmark's
protocol v2, pretrained on ``carry`` and ``skewsum`` (a latent skill with a systematic error mode; a skewed filtered
model); ``tiny3``, pretrained on ``routes`` (two strategies, one of them the only reliable one on a held-out class),
``tiny3-seed1`` / ``tiny3-seed2``, the same build from other pretraining seeds, and ``tiny3-swapped`` /
``tiny3-equal``, pretrained on the controls of ``routes`` (:mod:`rlvr_div.tasks.routes_controls`).
:func:`rlvr_div.models.resolve_model` maps these names (and ``tiny-<spec hash>``) here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlvr_div.cache import cache_dir
from rlvr_div.errors import ConfigError
from rlvr_div.progress import Progress

TINY_NAME = "tiny"
BOS, EOS, PAD, UNK = "<bos>", "<eos>", "<pad>", "<unk>"
# Every character a built-in task can produce; anything else maps to <unk>.
TINY_ALPHABET = "0123456789+-*/=:;,.()<>? abcdefghijklmnopqrstuvwxyz"


# --------------------------------------------------------------------------------------------- tokenizer


def build_char_tokenizer(alphabet: str = TINY_ALPHABET) -> Any:
    """A character-level ``PreTrainedTokenizerFast``: one token per character, ``<bos>`` prepended on encode,
    decoding concatenates characters (exact round trip for text over ``alphabet``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, BOS, EOS, UNK]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        model_max_length=64,
    )


# --------------------------------------------------------------------------------------------- tiny base


@dataclass(frozen=True)
class TinySpec:
    """Everything the tiny base depends on; its hash names the cache directory."""

    seed: int = 0
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4  # head_dim 32 (the CPU build of vLLM needs >= 32)
    max_positions: int = 64
    steps: int = 1800
    batch_size: int = 128
    lr: float = 3e-3
    warmup: int = 50
    tasks: tuple[str, ...] = ("arith", "pairsum")
    version: int = 2  # bump when the pretraining corpus changes

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


# The named tiny bases. ``tiny2`` trains longer: its two tasks need more steps to fit their corpus.
TINY_BASES: dict[str, TinySpec] = {
    TINY_NAME: TinySpec(),
    "tiny2": TinySpec(tasks=("carry", "skewsum"), steps=4000, version=3),
    "tiny3": TinySpec(tasks=("routes",), steps=4000, version=4),
    # ``tiny3`` from two more pretraining seeds (initialisation and corpus order): the routes study's robustness block.
    "tiny3-seed1": TinySpec(seed=1, tasks=("routes",), steps=4000, version=4),
    "tiny3-seed2": TinySpec(seed=2, tasks=("routes",), steps=4000, version=4),
    # the controls of ``routes`` (rlvr_div.tasks.routes_controls): the strategies' shares swapped; direct at column's
    # length
    "tiny3-swapped": TinySpec(tasks=("routes_swapped",), steps=4000, version=4),
    "tiny3-equal": TinySpec(tasks=("routes_equal",), steps=4000, version=4),
}


def tiny_spec(name: str) -> TinySpec | None:
    """The spec of a named tiny base (a key of :data:`TINY_BASES`), else None."""
    return TINY_BASES.get(name)


# How many corpus examples, drawn as the build draws them, the fingerprint hashes (4 batches of the default spec).
FINGERPRINT_SAMPLES = 512


def corpus_stream(spec: TinySpec) -> Iterator[tuple[str, str]]:
    """The pretraining examples ``(prompt, completion)`` in the order the build draws them: each from a task chosen
    uniformly among ``spec.tasks`` by ``random.Random(spec.seed)``, then drawn by that task's ``corpus`` sampler."""
    samplers = _corpus_samplers(spec)
    rng = random.Random(spec.seed)
    while True:
        yield samplers[rng.randrange(len(samplers))](rng)


def _corpus_samplers(spec: TinySpec) -> list[Callable[[random.Random], tuple[str, str]]]:
    from rlvr_div.tasks import get_task_spec

    samplers = []
    for task in spec.tasks:
        corpus = get_task_spec(task).corpus
        if corpus is None:
            raise ConfigError(f"task {task!r} has no pretraining corpus; a tiny base can be pretrained only on tasks "
                              "that define TaskSpec.corpus")  # fmt: skip
        samplers.append(corpus)
    return samplers


@functools.cache
def build_fingerprint(spec: TinySpec, libraries: bool = True) -> str:
    """sha256 over what the built weights depend on beyond ``spec``: the first :data:`FINGERPRINT_SAMPLES` corpus
    examples as the build draws them (the samplers' code and the task registry), the source of the build and of the
    tokenizer (and its alphabet), and, with ``libraries``, the installed torch and transformers versions (without
    them: the build's *recipe*, which a shipped base records)."""
    from importlib.metadata import version

    h = hashlib.sha256()
    stream = corpus_stream(spec)
    for _ in range(FINGERPRINT_SAMPLES):
        h.update(json.dumps(next(stream)).encode())
    for fn in (build_tiny_model, build_char_tokenizer, corpus_stream, _corpus_samplers):
        h.update(inspect.getsource(fn).encode())
    h.update(TINY_ALPHABET.encode())
    for package in ("torch", "transformers") if libraries else ():
        h.update(f"{package}=={version(package)}".encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------- shipped bases

# The named bases ship as package data: the build is not bit-reproducible across CPUs and thread counts (MKL and
# oneDNN pick other kernels and reduction orders on AVX-512/AMX than on AVX2), so a base built on the user's machine
# would differ in the last bits from the one behind the committed results. ``tiny_bases/manifest.json`` records, per
# ``tiny-<spec hash>``, the sha256 of every shipped file, the build recipe (:func:`build_fingerprint` without the
# library versions) and where the files were built; ``rlvr-div build-tiny NAME --ship`` rebuilds and re-ships one.
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "tiny_bases"  # package data of rlvr_div (pyproject.toml)
MANIFEST_NAME = "manifest.json"


def shipped_manifest(root: Path = SHIPPED_DIR) -> dict[str, Any]:
    """The shipped bases' manifest (``tiny-<spec hash>`` → its record); empty when nothing is shipped."""
    path = root / MANIFEST_NAME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.cache
def _verified(directory: Path, files: tuple[tuple[str, str], ...]) -> None:
    for name, expected in files:
        path = directory / name
        if not path.is_file():
            raise ConfigError(f"the shipped tiny base {directory} lacks {name}; reinstall rlvr-div")
        if file_sha256(path) != expected:
            raise ConfigError(f"the shipped tiny base file {path} does not match its recorded sha256 "
                              f"({MANIFEST_NAME}); reinstall rlvr-div or restore it from git")  # fmt: skip


def shipped_tiny_path(spec: TinySpec, root: Path = SHIPPED_DIR) -> Path | None:
    """The shipped directory of ``spec``'s base, its files checked against their recorded sha256 (once per process;
    a mismatch or a missing file is a one-line :class:`ConfigError`), or None when no base of this spec ships."""
    record = shipped_manifest(root).get(f"tiny-{spec.key()}")
    if record is None:
        return None
    directory = root / f"tiny-{spec.key()}"
    _verified(directory, tuple(sorted(record["files"].items())))
    return directory


def ship_tiny(name: str, root: Path = SHIPPED_DIR, progress: bool = True) -> Path:
    """Build the named base ``name`` by its recipe into ``root/tiny-<spec hash>`` and record its files' sha256, its
    recipe and this machine in the manifest (for developers: what every user then loads)."""
    spec = TINY_BASES[name]
    directory = root / f"tiny-{spec.key()}"
    # both fingerprints as the build starts: they are cached, so the build's and the manifest's are these, not a
    # re-read of source files edited while it trained (inspect reads the file at call time: a shifted line reads
    # another function's text)
    build_fingerprint(spec, libraries=False), build_fingerprint(spec)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=root))
    try:
        build_tiny_model(tmp, spec, progress=progress)
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    record_shipped(name, root)
    return directory


def record_shipped(name: str, root: Path = SHIPPED_DIR) -> None:
    """Record the files of the named base ``name`` as they lie in ``root/tiny-<spec hash>`` in the manifest: their
    sha256, the recipe that built them and this machine."""
    import platform

    import torch

    spec = TINY_BASES[name]
    directory = root / f"tiny-{spec.key()}"
    manifest = shipped_manifest(root)
    manifest[directory.name] = {
        "name": name,
        "recipe": build_fingerprint(spec, libraries=False),
        "built_on": f"{platform.machine()} {_cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "files": {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file()},
    }
    (root / MANIFEST_NAME).write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n", encoding="utf-8")
    _verified.cache_clear()


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def stale_reason(path: Path, spec: TinySpec) -> str | None:
    """Why the cached base at ``path`` is not what this code builds for ``spec`` (None when it is current)."""
    try:
        recorded = json.loads((path / "tiny_spec.json").read_text()).get("fingerprint")
    except (OSError, ValueError):
        return "it has no readable tiny_spec.json"
    if recorded is None:
        return "it was built by an older rlvr-div that recorded no build fingerprint"
    current = build_fingerprint(spec)
    if recorded != current:
        return f"its build fingerprint {recorded} differs from this code's {current} (corpus, build code or torch)"
    return None


def cached_tiny_path(spec: TinySpec) -> Path | None:
    """The shipped directory of ``spec``'s base, else its cached directory if it is built and current (never
    builds)."""
    shipped = shipped_tiny_path(spec)
    if shipped is not None:
        return shipped
    path = cache_dir() / f"tiny-{spec.key()}"
    if (path / "config.json").exists() and stale_reason(path, spec) is None:
        return path
    return None


@contextlib.contextmanager
def _hub_bars(enabled: bool) -> Iterator[None]:
    """transformers' progress bars on (left as they are) or off for the block, restored after it."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    if shown and not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown and not enabled:
            hf_logging.enable_progress_bar()


def tiny_model_path(spec: TinySpec | None = None, progress: bool = True) -> Path:
    """The directory of the base of ``spec``: the shipped one for a named base (:func:`shipped_tiny_path`), else
    the cached build, building it first if it is not cached or its cached build is stale (a file lock makes
    concurrent processes wait for one build)."""
    from filelock import FileLock

    spec = spec or TinySpec()
    shipped = shipped_tiny_path(spec)
    if shipped is not None:
        return shipped
    root = cache_dir()
    path = root / f"tiny-{spec.key()}"
    if cached_tiny_path(spec) is not None:
        return path
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if (path / "config.json").exists():
            reason = stale_reason(path, spec)
            if reason is None:
                return path
            print(f"rlvr-div: rebuilding the tiny base {path.name}: {reason}", file=sys.stderr, flush=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=root))
        try:
            with _hub_bars(progress):  # transformers' own "Writing model shards" bar follows ``progress`` too
                build_tiny_model(tmp, spec, progress=progress)
            if path.exists():  # the stale build: moved aside, then removed once the new one is in place
                old = Path(tempfile.mkdtemp(prefix=path.name + ".stale.", dir=root))
                path.rename(old / "model")
                tmp.rename(path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return path


def build_tiny_model(out_dir: str | os.PathLike, spec: TinySpec | None = None, progress: bool = True) -> Path:
    """Pretrain the tiny base on the built-in synthetic tasks and save model + tokenizer to ``out_dir``.

    The corpus is ``<bos>prompt completion<eos>`` drawn from each task's pretraining sampler (its
    ``corpus_sample``), which mixes correct answers with plausible mistakes at a prompt-dependent rate so that
    the base has a spread of per-prompt validity rates. Next-token cross-entropy on the completion tokens,
    AdamW with warm-up and cosine decay; deterministic from ``spec.seed``.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    spec = spec or TinySpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer()
    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_positions,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    model = LlamaForCausalLM(config)
    model.train()
    corpus = corpus_stream(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < spec.warmup:
            return spec.lr * (step + 1) / spec.warmup
        frac = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
        return spec.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    vocab = tok.get_vocab()
    bos, eos, pad, unk = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id

    def encode(text: str) -> list[int]:  # the tokenizer's own mapping, without its per-call overhead
        return [vocab.get(ch, unk) for ch in text]

    bar = Progress(spec.steps, "building tiny base model", enabled=progress)
    t0 = time.time()
    for step in range(spec.steps):
        ids, labels = [], []
        for _ in range(spec.batch_size):
            prompt, completion = next(corpus)
            p = [bos] + encode(prompt)
            c = encode(completion) + [eos]
            ids.append(p + c)
            labels.append([-100] * len(p) + c)
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
        label_t = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
        attn = (torch.arange(width)[None, :] < torch.tensor([len(x) for x in ids])[:, None]).long()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = model(input_ids=input_ids, attention_mask=attn, labels=label_t).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.update(1, loss=loss.item())
    bar.close()
    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=16,
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "tiny_spec.json").write_text(
        json.dumps(
            {**asdict(spec), "fingerprint": build_fingerprint(spec), "build_seconds": round(time.time() - t0, 1)},
            indent=1,
        )
    )
    return out


# --------------------------------------------------------------------------------------------- names

# The cache directory name of a tiny base, ``tiny-<spec hash>``.
TINY_DIR = re.compile(r"tiny-[0-9a-f]{12}")


def tiny_by_name(name: str, given: str, build: bool) -> str:
    """``tiny-<spec hash>`` → that named base (built when ``build``) when the hash is a current named spec's, else
    that cached directory."""
    for base, spec in TINY_BASES.items():
        if name == f"{TINY_NAME}-{spec.key()}":
            return str(tiny_model_path(spec)) if build else base
    cached = cache_dir() / name
    if (cached / "config.json").is_file():
        return str(cached)
    current = ", ".join(f"{base} = {spec.key()}" for base, spec in TINY_BASES.items())
    raise ConfigError(
        f"model {given!r} is the tiny base with spec hash {name[len(TINY_NAME) + 1 :]}, but this rlvr-div builds "
        f"{current} and {cached} does not exist; copy that directory there or retrain on a named base"
    )


def compare_with_shipped(directory: str | os.PathLike, name: str) -> str:
    """Whether the weights built in ``directory`` are the shipped bytes of the named base ``name``, else the largest
    weight difference, in words."""
    from safetensors.torch import load_file

    shipped = shipped_tiny_path(TINY_BASES[name])
    if shipped is None:
        return f"no shipped copy of {name} to compare with"
    built, ours = Path(directory) / "model.safetensors", shipped / "model.safetensors"
    if file_sha256(built) == file_sha256(ours):
        return f"the same bytes as the shipped {name}"
    a, b = load_file(built), load_file(ours)
    if a.keys() != b.keys():
        return f"other tensors than the shipped {name}: another recipe"
    largest = max((a[k].double() - b[k].double()).abs().max().item() for k in b)
    return (f"other bytes than the shipped {name} (largest weight difference {largest:.3g}): this CPU or thread count "
            "rounds differently; the shipped base is the one behind the committed results")  # fmt: skip
