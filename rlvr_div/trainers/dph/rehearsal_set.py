"""The stored DPH-RL rehearsal set: its layout on disk, its checks, and its samples served as batches.

A rehearsal directory (written by :mod:`rlvr_div.trainers.dph.offline`) holds

- ``rehearsal/`` (``datasets.save_to_disk``): prompt, completion, prompt_ids, completion_ids, ref_logps;
- ``d_exp/`` (``save_to_disk``): the D_exp rows of the task, the training set of the hybrid trainer;
- ``summary.json``: counts, sampling settings, the model and a hash of the tokenizer;
- ``samples.jsonl``: one line per scored prompt (resumption of the offline stage).

The recipe layer checks a set before any model loads (:func:`check_rehearsal`); the trainer serves its samples
(:class:`RehearsalSamples`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr_div.errors import ConfigError

SUMMARY = "summary.json"
REHEARSAL_DIR = "rehearsal"
D_EXP_DIR = "d_exp"


def tokenizer_hash(tokenizer: Any) -> str:
    """A short hash of a tokenizer's vocabulary (a rehearsal set is only valid for the tokenizer that made it)."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16]


def read_summary(path: str | Path) -> dict[str, Any]:
    """The ``summary.json`` of a rehearsal directory; one-line errors for a missing or unfinished directory."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"rehearsal_path {str(path)!r} does not exist; build it with `rlvr-div rehearse`")
    summary = root / SUMMARY
    if not summary.is_file() or not (root / REHEARSAL_DIR).is_dir():
        raise ConfigError(f"rehearsal_path {str(path)!r} holds no finished rehearsal set (no {SUMMARY})")
    return json.loads(summary.read_text())


def check_rehearsal(
    path: str | Path,
    model: str | None = None,
    tokenizer: Any = None,
    temperature: float | None = None,
    stage: dict[str, tuple[str, Any]] | None = None,
) -> dict[str, Any]:
    """Validate a rehearsal set against the model, tokenizer and sampling temperature about to be trained, before
    training starts (its reference log-probs are log a(y_t|·) at the temperature it was sampled at), and against the
    offline-stage settings a training recipe gives (``stage``: ``{"k" | "threshold" | "top_p" | "keep": (recipe key,
    value)}``): the set decided them, so a different value would be ignored."""
    summary = read_summary(path)
    if summary.get("n_rehearsal", 0) == 0:
        raise ConfigError(
            f"rehearsal set {str(path)!r} is empty (D_pef has {summary.get('n_pef', 0)} prompts, "
            f"{summary.get('n_rehearsal', 0)} kept samples); lower `threshold` or raise `k`"
        )
    if model is not None and summary.get("model") not in (None, model):
        raise ConfigError(
            f"rehearsal set {str(path)!r} was sampled from {summary.get('model')!r}, not from the model being "
            f"trained ({model!r}); rebuild it with `rlvr-div rehearse`"
        )
    if tokenizer is not None and summary.get("tokenizer_hash") != tokenizer_hash(tokenizer):
        raise ConfigError(f"rehearsal set {str(path)!r} was built with another tokenizer; rebuild it")
    stored = summary.get("sampling", {}).get("temperature")
    if temperature is not None and stored != temperature:
        raise ConfigError(
            f"temperature={temperature} differs from the rehearsal set's sampling temperature {stored}; the stored "
            "reference log-probs are only valid at that temperature"
        )
    for name, (key, value) in (stage or {}).items():
        stored = summary.get("sampling", {}).get(name) if name == "top_p" else summary.get(name)
        if name == "keep" and stored is None:
            stored = "fresh"  # a set that records no rule kept the fresh sample (the only rule before there were two)
        if stored != value:
            raise ConfigError(
                f"{key}={value} differs from the rehearsal set's {name} = {stored} (`rlvr-div rehearse` decided it "
                f"when it built {str(path)!r}); remove {key} from the training recipe or rebuild the set with it"
            )
    return summary


@dataclass
class RehearsalSamples:
    """Stored rehearsal samples, served as padded batches of left-aligned rows [prompt | completion | padding].

    Left-aligned rows have no left padding, so a model's default positions count from each row's first token, as
    in ``generate``: the trainer scores them with no ``position_ids`` (the layout of :func:`rlvr_div.sampling.
    token_logprobs`, which computed the stored reference log-probs), whatever the model's position scheme."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    ref_logps: list[list[float]]
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.completion_ids)

    def indices(self, call: int, size: int, rank: int, world: int, seed: int) -> list[int]:
        """Rows for micro-step ``call`` on process ``rank`` of ``world``: consecutive global slices of a per-epoch
        permutation (same on every process), each process taking its own part, so processes never share a row."""
        n = len(self)
        start = (call * world + rank) * size
        return [self._permutation(seed, pos // n)[pos % n] for pos in range(start, start + size)]

    def _permutation(self, seed: int, epoch: int) -> list[int]:
        cache = self.__dict__.setdefault("_perms", {})
        if (seed, epoch) not in cache:
            cache.clear()
            g = torch.Generator().manual_seed(seed * 100_003 + epoch)
            cache[(seed, epoch)] = torch.randperm(len(self), generator=g).tolist()
        return cache[(seed, epoch)]

    def batch(self, call: int, size: int, rank: int, world: int, seed: int = 0) -> dict[str, torch.Tensor]:
        """The rows of :meth:`indices` as tensors: ``input_ids`` and ``attention_mask`` (B, max prompt + C),
        ``prompt_lengths`` (B,) (row i's completion starts at that column), ``completion_mask`` and ``ref_logps``
        (B, C) with C the longest completion."""
        rows = self.indices(call, size, rank, world, seed)
        prompts = [self.prompt_ids[i] for i in rows]
        completions = [self.completion_ids[i] for i in rows]
        logps = [self.ref_logps[i] for i in rows]
        c_len = max(map(len, completions))
        input_ids = torch.full((len(rows), max(map(len, prompts)) + c_len), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        completion_mask = torch.zeros((len(rows), c_len))
        ref = torch.zeros((len(rows), c_len))
        for i, (p, c, lp) in enumerate(zip(prompts, completions, logps)):
            input_ids[i, : len(p) + len(c)] = torch.tensor(p + c)
            attention[i, : len(p) + len(c)] = 1
            completion_mask[i, : len(c)] = 1
            ref[i, : len(lp)] = torch.tensor(lp)
        return {
            "input_ids": input_ids,
            "attention_mask": attention,
            "prompt_lengths": torch.tensor([len(p) for p in prompts]),
            "completion_mask": completion_mask,
            "ref_logps": ref,
        }


def load_rehearsal_samples(path: str | Path) -> RehearsalSamples:
    """Load the ``rehearsal/`` dataset of a rehearsal directory (checked with :func:`check_rehearsal`)."""
    import datasets

    summary = check_rehearsal(path)
    ds = datasets.load_from_disk(str(Path(path) / REHEARSAL_DIR))
    columns = ds.select_columns(["prompt_ids", "completion_ids", "ref_logps"])[:]  # plain lists: row access is hot
    return RehearsalSamples(
        prompt_ids=columns["prompt_ids"],
        completion_ids=columns["completion_ids"],
        ref_logps=columns["ref_logps"],
        pad_token_id=int(summary["pad_token_id"]),
    )
