"""DPH-RL's rehearsal term (Li et al., ICLR 2026) as a GRPO plug-in (``rehearsal_path``).

GRPO runs on D_exp (set ``divergence: none``: no reference model at all) and every micro-step adds

    η · mean_t f(u_t),   u_t = π_θ(y_t|·) / π_ref(y_t|·)

over a shard of the stored rehearsal samples (correct samples of the near-perfect prompts D_pef, drawn once from
the initial policy by ``rlvr-div rehearse``, with their per-token reference log-probs), with f the generator of
``rehearsal_divergence`` evaluated on reference samples (``source="reference"``): for forward KL,
f(u) = u − log u − 1. The stored samples are filtered (y ∼ a(·|correct)), so this is not the NLL: its gradient is 0
at π = a and its minimiser keeps π(y) = a(y) on the correct answers (π(correct) = a(correct)); it preserves the base
there. The global rehearsal batch (``rehearsal_batch_size``) is split over processes and gradient-accumulation
micro-steps. The rehearsal rows are stacked under the policy's rows in the one forward TRL runs for its loss (one
forward and one backward per micro-step, as in GRPO without KL), every token at its own position (see
:meth:`Rehearsal.forward`); a separate forward is used only where TRL's loss does not score per-token log-probs.

The ``rehearsal_k``, ``rehearsal_threshold``, ``rehearsal_top_p``, ``rehearsal_keep`` and
``rehearsal_sampling_batch_size`` keys are read by the offline stage (``rlvr-div rehearse``,
:mod:`rlvr_div.trainers.dph.offline`) from the same recipe; the stored set decides them for training, so the first four,
when a training recipe gives them, must equal the set's (:meth:`Rehearsal.check_inputs`; unset, they are taken from the
set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from rlvr_div.divergences import DIVERGENCES, check_divergence_params, token_divergence
from rlvr_div.errors import ConfigError, relative_path_hint
from rlvr_div.logprobs import completion_logprobs
from rlvr_div.ranges import AT_LEAST_ONE, NON_NEGATIVE, PROBABILITY
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.plugin import GRPOPlugin, register_plugin


@dataclass
class RehearsalArgs:
    """Recipe keys of DPH-RL: the rehearsal term and its offline sampling stage."""

    rehearsal_path: str | None = field(
        default=None,
        metadata={"help": "DPH-RL: directory written by `rlvr-div rehearse` (enables the rehearsal term)."},
    )
    rehearsal_divergence: str = field(
        default="forward_kl", metadata={"help": "DPH-RL: divergence of the rehearsal term (forward_kl, js, alpha)."}
    )
    rehearsal_coef: float = field(default=0.02, metadata={"help": "DPH-RL: η, the coefficient of the rehearsal term."})
    rehearsal_k: int | None = field(
        default=None,
        metadata={"help": "DPH-RL offline stage: samples per prompt (k); default 8. Given to train: the set's."},
    )
    rehearsal_threshold: int | None = field(
        default=None,
        metadata={
            "help": "DPH-RL offline stage: correct samples (of k) that put a prompt in D_pef; default k. Given "
            "to train: the set's."
        },
    )
    rehearsal_top_p: float | None = field(
        default=None,
        metadata={"help": "DPH-RL offline stage: top_p of the sampling; default 1.0. Given to train: the set's."},
    )
    rehearsal_keep: str | None = field(
        default=None,
        metadata={
            "help": "DPH-RL offline stage: the sample kept for a D_pef prompt: 'fresh' (default; a (k+1)-th "
            "sample, kept if correct) or 'any_correct' (the fresh one if correct, else the first correct of the k: "
            "every D_pef prompt keeps one, still a draw from a(.|correct)). Given to train: the set's."
        },
    )
    rehearsal_sampling_batch_size: int = field(
        default=256, metadata={"help": "DPH-RL offline stage: sequences per generate call."}
    )
    rehearsal_batch_size: int = field(
        default=32, metadata={"help": "DPH-RL: rehearsal samples per optimizer step, over all processes."}
    )


DEFAULT_K, DEFAULT_TOP_P, DEFAULT_KEEP = 8, 1.0, "fresh"
KEEP_RULES = ("fresh", "any_correct")  # which sample a D_pef prompt keeps (``rehearsal_keep``)
# the offline stage's settings that the stored set records, by the set's name for each: a training recipe that gives
# one must match the set (``rehearsal_sampling_batch_size`` only batches the sampling)
OFFLINE_STAGE_KEYS = {
    "k": "rehearsal_k",
    "threshold": "rehearsal_threshold",
    "top_p": "rehearsal_top_p",
    "keep": "rehearsal_keep",
}


def offline_stage(args: Any) -> dict[str, Any]:
    """The offline stage's settings as the stored set records them (``k``, ``threshold``, ``top_p``, ``keep``), the
    defaults filled in: k 8, threshold k, top_p 1.0, keep 'fresh'."""
    k = DEFAULT_K if args.rehearsal_k is None else args.rehearsal_k
    threshold = k if args.rehearsal_threshold is None else args.rehearsal_threshold
    top_p = DEFAULT_TOP_P if args.rehearsal_top_p is None else args.rehearsal_top_p
    keep = DEFAULT_KEEP if args.rehearsal_keep is None else args.rehearsal_keep
    return {"k": k, "threshold": threshold, "top_p": top_p, "keep": keep}


def given_offline_stage(args: Any) -> dict[str, tuple[str, Any]]:
    """The offline-stage settings ``args`` gives (not None), as ``{set's name: (recipe key, value)}``: what a training
    run's stored rehearsal set must match."""
    given = {name: (key, getattr(args, key)) for name, key in OFFLINE_STAGE_KEYS.items()}
    return {name: pair for name, pair in given.items() if pair[1] is not None}


def _completion_columns(offsets: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, C) column indices offsets[i] + t, t < C = the completion width of a rehearsal ``batch``."""
    width = batch["completion_mask"].size(1)
    return offsets.unsqueeze(1) + torch.arange(width, device=offsets.device)


@register_plugin("loss_term", after=("divergence",))
class Rehearsal(GRPOPlugin):
    """The rehearsal term: folds a shard of stored samples into the loss forward and adds η·mean_t f(u_t)."""

    name = "dph_rehearsal"
    Args = RehearsalArgs
    selected_by = "rehearsal_path"  # (written by `rlvr-div rehearse`, which reads the offline stage's keys with it)
    switches = ("rehearsal_path",)
    ranges = {
        "rehearsal_coef": NON_NEGATIVE,
        "rehearsal_k": AT_LEAST_ONE,
        "rehearsal_threshold": AT_LEAST_ONE,
        "rehearsal_top_p": PROBABILITY,
        "rehearsal_sampling_batch_size": AT_LEAST_ONE,
        "rehearsal_batch_size": AT_LEAST_ONE,
    }

    def __init__(self, trainer: Any, samples: Any = None) -> None:
        """``samples``: the stored rehearsal samples (default: loaded from ``rehearsal_path``)."""
        from rlvr_div.trainers.dph.rehearsal_set import load_rehearsal_samples

        super().__init__(trainer)
        self.samples = load_rehearsal_samples(trainer.args.rehearsal_path) if samples is None else samples
        self._micro = 0
        self._pending: dict[str, torch.Tensor] | None = None  # the micro-step's shard, until the loss forward folds it
        self._batch: dict[str, torch.Tensor] | None = None  # the shard of the running loss
        self._logps: torch.Tensor | None = None  # its log-probs, from the folded forward

    @classmethod
    def prepare(cls, args: Any) -> None:
        if args.rehearsal_path is None:
            return
        DIVERGENCES.get(args.rehearsal_divergence)
        check_divergence_params(args.rehearsal_divergence, **args.divergence_params(args.rehearsal_divergence))
        stage = offline_stage(args)
        if stage["keep"] not in KEEP_RULES:
            raise ConfigError(f"rehearsal_keep={stage['keep']!r} is not one of {', '.join(KEEP_RULES)}")
        if stage["threshold"] > stage["k"]:
            raise ConfigError(
                f"rehearsal_threshold={stage['threshold']} exceeds rehearsal_k={stage['k']}; need rehearsal_threshold "
                "<= rehearsal_k (the correct samples, of rehearsal_k, that put a prompt in D_pef)"
            )

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.rehearsal_path is not None

    @classmethod
    def divergences(cls, args: Any) -> tuple[str, ...]:
        return (args.rehearsal_divergence,) if cls.active(args) else ()

    @classmethod
    def check_inputs(cls, script: Any, training: Any, model: Any) -> None:
        """The rehearsal set exists, is not empty, and comes from this model, tokenizer and temperature, and from the
        offline-stage settings the recipe gives (k, threshold, top_p)."""
        from rlvr_div.models import load_tokenizer, resolve_model
        from rlvr_div.trainers.dph.rehearsal_set import check_rehearsal

        with relative_path_hint(training.rehearsal_path):
            path = resolve_model(model.model_name_or_path, script.gguf_file)
            tokenizer = load_tokenizer(path, script.gguf_file, model.model_revision, training.trust_remote_code)
            check_rehearsal(training.rehearsal_path, model.model_name_or_path, tokenizer,
                            temperature=training.temperature, stage=given_offline_stage(training))  # fmt: skip

    @classmethod
    def train_dataset(cls, args: Any) -> Any:
        """D_exp: the prompts the offline stage left out of D_pef (GRPO explores there, the term rehearses D_pef)."""
        import datasets

        from rlvr_div.trainers.dph.rehearsal_set import D_EXP_DIR

        return datasets.load_from_disk(str(Path(args.rehearsal_path) / D_EXP_DIR))

    @classmethod
    def before_init(cls, config: Any, arguments: dict[str, Any]) -> None:
        """The checks ``rlvr-div train`` makes before loading, for Python users: the rehearsal set exists, is not
        empty, was sampled at this ``temperature``, with this tokenizer (``processing_class``, when given) and with
        the offline-stage settings the config gives."""
        from transformers import ProcessorMixin

        from rlvr_div.trainers.dph.rehearsal_set import check_rehearsal

        tokenizer = arguments.get("processing_class")
        if isinstance(tokenizer, ProcessorMixin):
            tokenizer = tokenizer.tokenizer
        check_rehearsal(config.rehearsal_path, tokenizer=tokenizer, temperature=config.temperature,
                        stage=given_offline_stage(config))  # fmt: skip

    # -- the micro-step's shard: set before TRL's loss, folded into its forward, scored after it
    def before_loss(self, model: Any, inputs: dict[str, Any]) -> None:
        self._batch = self._next_batch() if self.trainer.model.training else None
        self._pending, self._logps = self._batch, None

    def forward(self, base: Callable[..., Any], model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                logits_to_keep: int, batch_size: int | None, compute_entropy: bool, compute_aux_loss: bool,
                **kwargs: Any) -> Any:  # fmt: skip
        """One forward over the policy rows and the rehearsal rows stacked below them, every token at the position it
        has in a forward of its own, so the policy rows score exactly as in TRL's own forward.

        The policy rows keep TRL's layout [left-padded prompt | completion] column for column and only gain right
        padding, which no real token attends to. The rehearsal rows come left-aligned [prompt | completion | padding]
        (:class:`~rlvr_div.trainers.dph.rehearsal_set.RehearsalSamples`), the layout their reference log-probs were
        computed in. The scored window starts at the earliest completion column of any row; each row's completion is cut
        out of it at its own offset. Multimodal or MoE inputs keep TRL's forward (the shard then takes a forward of its
        own)."""
        rehearsal = self._pending
        if rehearsal is None or compute_aux_loss or any(v is not None for v in kwargs.values()):
            return None
        self._pending = None
        rows, width = input_ids.shape
        start = width - logits_to_keep  # first completion column of the policy rows
        r_ids, r_start = rehearsal["input_ids"], rehearsal["prompt_lengths"]
        r_mask = rehearsal["attention_mask"].to(attention_mask.dtype)
        total, first = max(width, r_ids.size(1)), min(start, int(r_start.min()))
        pad = self.samples.pad_token_id
        ids = torch.cat([F.pad(input_ids, (0, total - width), value=pad), F.pad(r_ids, (0, total - r_ids.size(1)))])
        mask = torch.cat([F.pad(attention_mask, (0, total - width)), F.pad(r_mask, (0, total - r_ids.size(1)))])
        chunk = None if batch_size is None or batch_size >= rows else batch_size
        logps, entropies, _ = base(model, ids, mask, total - first, chunk, compute_entropy)
        self._logps = logps[rows:].gather(1, _completion_columns(r_start - first, rehearsal))
        policy = slice(start - first, start - first + logits_to_keep)
        return logps[:rows, policy], None if entropies is None else entropies[:rows, policy], None

    def loss_term(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        batch, logps = self._batch, self._logps
        self._batch = self._pending = self._logps = None
        if batch is None:
            return None
        if logps is None:  # TRL's loss did not score per-token log-probs (e.g. a fused kernel): a separate forward
            logps = self._separate_forward(model, batch)
        return self.trainer.args.rehearsal_coef * self._term(logps, batch)

    def _next_batch(self) -> dict[str, torch.Tensor]:
        """This process's shard of the micro-step's rehearsal batch (deterministic in the step: survives a resume)."""
        trainer = self.trainer
        accum = trainer.current_gradient_accumulation_steps
        world = trainer.accelerator.num_processes
        local = max(1, trainer.args.rehearsal_batch_size // (world * accum))
        call = trainer.state.global_step * accum + self._micro % accum
        self._micro += 1
        batch = self.samples.batch(call, local, trainer.accelerator.process_index, world, seed=trainer.args.seed)
        return {key: value.to(trainer.accelerator.device) for key, value in batch.items()}

    def _separate_forward(self, model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """log π_θ of the stored completion tokens from a forward of its own (left-aligned rows, default positions),
        at the sampling temperature, the output head applied to those tokens only, in chunks
        (:func:`rlvr_div.logprobs.completion_logprobs`: no rows × width × vocabulary logits)."""
        # the logits that predict completion token t of row i sit at column prompt_lengths[i] − 1 + t
        columns = _completion_columns(batch["prompt_lengths"] - 1, batch)
        # log-probs at the temperature the stored reference log-probs were computed at (checked against summary.json)
        return completion_logprobs(model, batch["input_ids"], batch["attention_mask"], columns,
                                   self.trainer.temperature)  # fmt: skip

    def _term(self, logps: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """mean_t f(u_t) over this process's rehearsal shard, u_t = π_θ/π_ref at the stored tokens (f on reference
        samples), divided by the accumulation steps like the policy loss."""
        trainer = self.trainer
        completion_mask = batch["completion_mask"]
        name = trainer.args.rehearsal_divergence
        per_token = token_divergence(
            name, logps, batch["ref_logps"], source="reference", **trainer.args.divergence_params(name)
        )
        tokens = completion_mask.sum().clamp(min=1.0)
        value = (per_token * completion_mask).sum() / tokens
        nll = -(logps.detach() * completion_mask).sum() / tokens
        metrics = trl_seam.metrics(trainer, "train")
        metrics[f"rehearsal/{name}"].append(trainer.accelerator.gather(value.detach()).mean().item())
        metrics["rehearsal/nll"].append(trainer.accelerator.gather(nll).mean().item())
        return value / trainer.current_gradient_accumulation_steps
