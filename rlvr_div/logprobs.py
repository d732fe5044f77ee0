"""Log-probs of *given* completions under a model, by teacher forcing, in left-aligned rows [prompt | completion |
padding]: DPH-RL's stored reference log-probs, exact measurement and the sampling-free objective use them, and the
DPH-RL trainer scores its rehearsal rows in the same layout, so stored and recomputed log-probs agree to the bit on a
model in the same dtype.

log p(y_t | x, y_<t) = log softmax(logits / T)[y_t], no top-p: the model's own distribution at temperature T.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.progress import Progress


@torch.inference_mode()
def token_logprobs(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    temperature: float = 1.0,
    batch_size: int = 16,
    pad_token_id: int = 0,
    progress: bool = False,
) -> list[list[float]]:
    """Per-token log-probs log softmax(logits / T)[y_t] of given completions y under ``model`` (no top-p), one list
    per completion, aligned with its ids.

    Rows are left-aligned [prompt | completion | padding] and get no ``position_ids``: with no left padding a
    model's default positions count from each row's first token (as in ``generate``) whatever its position scheme,
    and this is the layout in which the DPH-RL trainer scores its rehearsal rows, so the stored reference log-probs
    and the training forward agree to the bit on a model in the same dtype. Rows are grouped by length to limit
    padding. Memory per batch is batch_size × row length × vocabulary floats."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError("prompt_ids and completion_ids must have one entry per completion")
    if temperature <= 0:
        raise ConfigError(f"token log-probs need temperature > 0, got {temperature}")
    device = model.device
    order = sorted(range(len(prompt_ids)), key=lambda i: -(len(prompt_ids[i]) + len(completion_ids[i])))
    out: list[list[float]] = [[] for _ in prompt_ids]
    with Progress(len(order), "log-probs", progress, mininterval=0.5, leave=False) as bar:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            c_len = max(len(completion_ids[i]) for i in rows)
            if c_len == 0:
                bar.update(len(rows))
                continue
            batch = left_aligned_rows([prompt_ids[i] for i in rows], [completion_ids[i] for i in rows], pad_token_id)
            chosen = completion_logprobs(model, *(t.to(device) for t in batch), temperature).cpu().tolist()
            for r, i in enumerate(rows):
                out[i] = chosen[r][: len(completion_ids[i])]
            bar.update(len(rows))
    return out


def left_aligned_rows(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, columns) of rows [prompt | completion | padding]; ``columns[r, t]`` is the column
    of the logits that predict completion token t of row r, len(prompt_r) − 1 + t, for t below the longest
    completion (past a row's own completion it points into its padding, which the caller masks)."""
    c_len = max(len(c) for c in completion_ids)
    width = max(len(p) for p in prompt_ids) + c_len
    input_ids = torch.full((len(prompt_ids), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for r, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        tokens = list(p) + list(c)
        input_ids[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention[r, : len(tokens)] = 1
    starts = torch.tensor([len(p) - 1 for p in prompt_ids])
    return input_ids, attention, starts.unsqueeze(1) + torch.arange(c_len)


def completion_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, columns: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """(rows, C) log softmax(logits / T)[y_t] of the tokens after ``columns`` (:func:`left_aligned_rows`), in
    float32 (float64 for a float64 model), differentiable unless called under no_grad."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits.gather(1, columns.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
    logits = logits if logits.dtype == torch.float64 else logits.float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, input_ids.gather(1, columns + 1).unsqueeze(-1)).squeeze(-1)
