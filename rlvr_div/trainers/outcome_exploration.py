"""Outcome-based exploration (Song, Kempe & Munos 2025, "Outcome-based Exploration for LLM Reasoning",
arXiv:2509.06941): exploration bonuses that depend only on a completion's *final answer* (its outcome), not on the
reasoning that led to it.

For a prompt x and a completion y_i ∼ π_old with final answer a_i = a(y_i) (the validity reward's ``extract``), the
shaped reward is

    r̃_i = r_i + c_hist · b_i − c_batch · p_i,

- historical exploration (UCB-style): b_i = min(1, 1/sqrt(N(x, a_i))), where N(x, a) counts how often answer a was
  produced for prompt x in all *earlier* training batches (an answer never seen before gets b = 1). The counts are
  updated with the batch after its bonuses are computed, so they are state: ``OutcomeCounts`` keeps them and they
  travel with every checkpoint (``outcome_counts.json``, written before ``trainer_state.json``);
- batch exploration: p_i = (1/G)·Σ_{j≠i} 1[a_j = a_i], the share of the other G − 1 completions of the same prompt
  in this batch that repeat a_i (G = ``num_generations``).

A completion without an extractable answer (``extract`` returns None) gets neither bonus nor penalty and is not
counted; an unscored completion (NaN reward) stays NaN. The shaped rewards then go through GRPO's group-relative
advantages like any other reward (``reward_shaping: outcome_exploration``), so a bonus that is the same for a whole
group cancels. With rewards in {0, 1}, b ≤ 1 and p ≤ (G−1)/G, a correct completion keeps a higher shaped reward
than any incorrect one whenever c_hist + c_batch·(G−1)/G < 1; the defaults (0.25 and 0.25) are this project's
choice and satisfy it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE
from rlvr_div.rewards.base import completion_text
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping

STATE_FILE = "outcome_counts.json"


def prompt_key(prompt: Any) -> str:
    """A short stable key of a prompt (text or chat messages), the same on every process and across resumes."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def outcomes(prompts: Sequence[Any], completions: Sequence[Any], reward: Any) -> list[tuple[str, str | None]]:
    """(prompt key, final answer) per completion; the answer is ``reward.extract(text)`` when the reward has an
    ``extract`` (every rlvr-div reward does), else the stripped text (None when empty)."""
    extract = getattr(reward, "extract", None)
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        text = completion_text(completion)
        answer = extract(text) if extract is not None else (text.strip() or None)
        out.append((prompt_key(prompt), answer))
    return out


def historical_bonus(counts: torch.Tensor) -> torch.Tensor:
    """b = min(1, 1/sqrt(N)) per sample from its answer's earlier count N ≥ 0 (N = 0 gives 1)."""
    n = counts.to(torch.float64)
    return torch.where(n > 0, n.clamp(min=1.0).rsqrt(), torch.ones_like(n)).clamp(max=1.0)


def repeat_penalty(answers: Sequence[str | None], group: int) -> torch.Tensor:
    """p_i = (1/G)·Σ_{j≠i} 1[a_j = a_i] within each consecutive group of G = ``group`` answers; 0 for None."""
    if group < 1 or len(answers) % group:
        raise ValueError(f"{len(answers)} answers do not form groups of {group}")
    out = torch.zeros(len(answers), dtype=torch.float64)
    for start in range(0, len(answers), group):
        block = answers[start : start + group]
        for i, a in enumerate(block):
            if a is not None:
                out[start + i] = (sum(b == a for b in block) - 1) / group
    return out


class OutcomeCounts:
    """N(x, a): how often each final answer a was produced for each prompt x over the training batches seen so far."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self._pending: list[tuple[str, str | None]] | None = None

    def lookup(self, items: Sequence[tuple[str, str | None]]) -> torch.Tensor:
        """Earlier counts N(x_i, a_i) (0 for a None answer)."""
        return torch.tensor(
            [self.counts.get(x, {}).get(a, 0) if a is not None else 0 for x, a in items], dtype=torch.float64
        )

    def update(self, items: Sequence[tuple[str, str | None]]) -> None:
        for x, a in items:
            if a is not None:
                per_prompt = self.counts.setdefault(x, {})
                per_prompt[a] = per_prompt.get(a, 0) + 1

    def observe(self, items: Sequence[tuple[str, str | None]]) -> None:
        """Hold the (gathered) outcomes of the batch being scored until :meth:`shape` uses them."""
        self._pending = list(items)

    def shape(
        self, rewards: torch.Tensor, group: int, bonus_coef: float, penalty_coef: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """r̃ = r + c_hist·b − c_batch·p for the observed batch (module docstring), then N += the batch's answers.

        Returns the shaped rewards (same dtype and device) and statistics to log.
        """
        items, self._pending = self._pending, None
        if items is None or len(items) != rewards.numel():
            raise RuntimeError(
                f"outcome exploration: {0 if items is None else len(items)} observed outcomes for "
                f"{rewards.numel()} rewards (observe() must see the batch first)"
            )
        has_answer = torch.tensor([a is not None for _, a in items])
        bonus = torch.where(
            has_answer, historical_bonus(self.lookup(items)), torch.zeros(len(items), dtype=torch.float64)
        )
        penalty = repeat_penalty([a for _, a in items], group)
        self.update(items)
        shaped = rewards.double() + bonus_coef * bonus.to(rewards.device) - penalty_coef * penalty.to(rewards.device)
        distinct = [len({a for _, a in items[s : s + group] if a is not None}) for s in range(0, len(items), group)]
        stats = {
            "outcome/bonus_mean": bonus.mean().item(),
            "outcome/penalty_mean": penalty.mean().item(),
            "outcome/distinct_answers": sum(distinct) / len(distinct),
            "outcome/answered_frac": has_answer.float().mean().item(),
        }
        return shaped.to(rewards.dtype), stats

    def state_dict(self) -> dict[str, Any]:
        return {"counts": self.counts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = {x: {a: int(n) for a, n in per.items()} for x, per in state["counts"].items()}

    def save(self, checkpoint_dir: str | Path) -> None:
        """Write the counts into a checkpoint folder (atomically: a temporary file, then a rename)."""
        path = Path(checkpoint_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        tmp.replace(path)

    def load(self, checkpoint_dir: str | Path) -> None:
        """Read the counts back from a checkpoint folder; a ConfigError when the checkpoint has none."""
        path = Path(checkpoint_dir) / STATE_FILE
        if not path.is_file():
            raise ConfigError(
                f"checkpoint {str(checkpoint_dir)!r} has no {STATE_FILE}: it was not written by a "
                "reward_shaping: outcome_exploration run, so its answer counts cannot be restored"
            )
        self.load_state_dict(json.loads(path.read_text()))


@dataclass
class OutcomeExplorationArgs:
    """Recipe keys of outcome-based exploration (selected by ``reward_shaping: outcome_exploration``)."""

    outcome_bonus_coef: float = field(
        default=0.25,
        metadata={"help": "Outcome exploration: c_hist, the weight of the UCB bonus min(1, 1/sqrt(N(x, a)))."},
    )
    outcome_penalty_coef: float = field(
        default=0.25,
        metadata={"help": "Outcome exploration: c_batch, the weight of the within-group repeat penalty."},
    )


def check_outcome_exploration(args: Any) -> None:
    """One-line ConfigError for both ``outcome_*`` coefficients 0 (their ranges, and "acts only with reward_shaping:
    outcome_exploration", are declared in :class:`OutcomeExploration`)."""
    if args.outcome_bonus_coef == 0 and args.outcome_penalty_coef == 0:
        raise ConfigError("outcome_bonus_coef and outcome_penalty_coef are both 0: outcome exploration would be inert")


@register_plugin("advantages", after=("reward_shaping",))
class OutcomeExploration(RewardShaping):
    """Observes each training batch's (prompt, answer) outcomes, shapes its validity rewards, keeps the counts."""

    name = "outcome_exploration"
    Args = OutcomeExplorationArgs
    ranges = {"outcome_bonus_coef": NON_NEGATIVE, "outcome_penalty_coef": NON_NEGATIVE}

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        self.counts = OutcomeCounts()

    @classmethod
    def prepare(cls, args: Any) -> None:
        if cls.active(args):
            check_outcome_exploration(args)

    def on_rewards(self, rewards_per_func: torch.Tensor, prompts: list[Any], completions: list[Any],
                   valid: torch.Tensor, stats: dict[str, float]) -> None:  # fmt: skip
        trainer = self.trainer
        if trainer.model.training:  # (prompt, final answer) of the batch, gathered: a group can span processes
            reward = trainer.reward_funcs[trainer.args.validity_reward_index]
            self.counts.observe(gather_object(outcomes(prompts, completions, reward)))

    def shape(self, rewards: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
        trainer, args = self.trainer, self.trainer.args
        shaped, stats = self.counts.shape(
            rewards, trainer.num_generations, args.outcome_bonus_coef, args.outcome_penalty_coef
        )
        for name, value in stats.items():
            trl_seam.metrics(trainer, "train")[name].append(value)
        return shaped

    def save(self, checkpoint: Path) -> None:
        self.counts.save(checkpoint)

    def load(self, checkpoint: Path) -> None:
        self.counts.load(checkpoint)
