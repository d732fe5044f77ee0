"""GRPO with plug-in extensions: the divergence to the reference, DPH-RL rehearsal, reward and advantage shaping,
Clip-Cov/KL-Cov, the sequence KL in the reward, the validity-target controller and α-DPG (which replaces the loss)
are each a plug-in (:mod:`rlvr_div.trainers.plugin`), one module per method.

``DivergenceGRPOTrainer`` subclasses ``trl.GRPOTrainer`` with the smallest overrides that let plug-ins act, and no
method of its own: TRL computes the policy loss with its own KL switched off (the divergence term is the
``divergence`` plug-in, :mod:`rlvr_div.trainers.divergence_term`), and the active plug-ins, in their order (phases),

- may take over the loss forward (DPH-RL folds its rehearsal rows into it) and see its per-token log-probs, which
  off CUDA/XPU come from the project's forward with the LM head in chunks (loss, reference and π_old alike:
  :func:`rlvr_div.trainers.common.chunked_token_logps`), else from TRL's fused LM head;
- see every scored batch (gathered rewards and validity) and may replace a training batch's advantages;
- may wrap the whole loss (or replace it, as α-DPG and FlowRL do; then no other active plug-in may act on the loss
  or the advantages) and add terms to TRL's policy loss;
- keep state in checkpoints (written before ``trainer_state.json``, which marks a checkpoint complete).

``DivergenceGRPOConfig`` is ``GRPOConfig`` plus every plug-in's recipe keys (its ``Args`` mixin) and
``validity_reward_index``; each plug-in checks its own keys in one line while the config is built, before any model
loads. TRL's ``beta`` is set to the coefficient of the active plug-in that needs reference log-probs (0: no
reference model) and only switches them on; the divergence term's live coefficient is the trainer's ``kl_coef``
(the validity-target controller moves it, MARA reads it). With ``divergence: reverse_kl``, ``divergence_gradient:
ratio`` and the coefficient equal to TRL's ``beta``, the loss equals stock GRPO's (tested to 1e-6).

Every step also logs, from rewards gathered over all processes (a prompt's group can span ranks):
``diversity/pass_at_group`` (fraction of groups with at least one valid completion), ``diversity/distinct_valid``
(distinct valid completion texts per group) and ``diversity/valid_rate`` (:func:`rlvr_div.trainers.common
.group_diversity`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.common import (
    checked_init_arguments,
    chunked_or_trl_forward,
    log_group_diversity,
    replace_advantages,
)
from rlvr_div.trainers.plugin import GRPOPlugin, check_loss_owners, check_parameters, plugin_args, plugin_classes
from rlvr_div.trainers.rollouts import Rollouts, check_model, check_rollout_sampler

PLUGIN_CLASSES: tuple[type[GRPOPlugin], ...] = tuple(plugin_classes())


@dataclass
class DivergenceGRPOConfig(*plugin_args(), GRPOConfig):  # type: ignore[misc]  # every plug-in's keys, then TRL's
    """``GRPOConfig`` plus the recipe keys of every plug-in (see the module docstring)."""

    validity_reward_index: int = field(
        default=0,
        metadata={"help": "Which reward function decides validity (score == 1): diversity metrics, α-DPG, shapings."},
    )
    share_prompt_forward: bool = field(
        default=True,
        metadata={
            "help": "Run each distinct prompt of a log-prob forward once and continue its rows from a copy of its "
            "cache (the same log-probs and gradients; off CUDA/XPU, where the LM head runs in chunks). It steps "
            "aside by itself while a dropout draws masks (LoRA's lora_dropout > 0) or with activation checkpointing; "
            "false: every row's prompt runs, as in TRL."
        },
    )

    rollout_sampler: str = field(
        default="trl",
        metadata={
            "help": "Who samples the rollouts: 'trl' (TRL's call to transformers' generate, or vLLM) or 'rlvr_div' "
            "(the loop rlvr-div eval samples with: each distinct prompt read once, ended rows leave the batch; the "
            "same distribution at temperature and top_p; rlvr_div.trainers.rollouts)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_rollout_sampler(self)
        for plugin in PLUGIN_CLASSES:  # one-line checks, in plug-in order: the declared ones, then its own
            plugin.check_declared(self)
            plugin.prepare(self)
        check_parameters(self)
        if self.validity_reward_index < 0:
            raise ConfigError(f"validity_reward_index must be >= 0, got {self.validity_reward_index}")
        active = [p for p in PLUGIN_CLASSES if p.active(self)]
        check_loss_owners(active)
        # TRL computes reference log-probs (and loads a reference model) exactly when its beta is non-zero
        self.beta = max((p.reference_coef(self) for p in active), default=0.0)


class DivergenceGRPOTrainer(GRPOTrainer):
    """GRPO with the active plug-ins and in-training diversity metrics (see the module docstring)."""

    _tag_names = ["trl", "grpo", "rlvr-div"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # checked before GRPOTrainer.__init__ loads the model from its path
        bound = checked_init_arguments(self, args, kwargs)
        config = bound.get("args")
        active = [cls for cls in PLUGIN_CLASSES if config is not None and cls.active(config)]
        for cls in active:
            cls.before_init(config, bound)
        # model-card tags (TRL adds them to the model in its __init__): the trainer's, then the active plug-ins'
        self._tag_names = [*self._tag_names, *(c.name for c in active if c.name not in self._tag_names)]
        super().__init__(*args, **kwargs)
        self.gathered_rewards: torch.Tensor | None = None  # the last scored batch's rewards, over all processes
        self.gathered_texts: list[str] | None = None  # its stripped completion texts (set by log_group_diversity)
        # the live coefficient of the divergence term, an interface between plug-ins: set by the divergence term
        # from divergence_coef, moved by the validity-target controller, read by MARA. Not TRL's ``beta``, which
        # here only switches TRL's reference log-probs on (DivergenceGRPOConfig sets it; TRL's own KL is off).
        self.kl_coef = 0.0
        self.plugins = [cls(self) for cls in PLUGIN_CLASSES if cls.active(self.args)]
        # whether the per-token forward runs each distinct prompt once (the config's choice, off while a plug-in
        # reads the backbone's output over whole rows)
        self.share_prompt_forward = bool(getattr(self.args, "share_prompt_forward", True)) and not any(
            p.reads_whole_rows for p in self.plugins
        )
        # the rollouts' sampler: None is TRL's (generate or vLLM)
        self.rollouts: Rollouts | None = None
        if getattr(self.args, "rollout_sampler", "trl") == "rlvr_div":
            check_model(self)
            self.rollouts = Rollouts(self)

    def plugin(self, name: str) -> GRPOPlugin | None:
        """The active plug-in called ``name``, or None."""
        return next((p for p in self.plugins if p.name == name), None)

    # -- the per-token log-prob forward: the LM head in chunks where TRL's kernel would form large tiles (CPU), else
    # TRL's; a plug-in may run it (DPH-RL's folded rows); every plug-in sees its result
    def _get_per_token_logps_and_entropies(  # noqa: ANN202
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **kwargs: Any,
    ):
        base = functools.partial(chunked_or_trl_forward, self, super()._get_per_token_logps_and_entropies)
        out = None
        for plugin in self.plugins:
            out = plugin.forward(base, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                                 compute_aux_loss, **kwargs)  # fmt: skip
            if out is not None:
                break
        if out is None:
            out = base(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                       **kwargs)  # fmt: skip
        for plugin in self.plugins:
            plugin.on_logps(out[0])
        return out

    # -- the loss: TRL's policy loss without its own KL, plus the plug-ins' terms, inside their wrappers
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        loss = self._loss
        for plugin in reversed(self.plugins):  # the first plug-in's wrapper runs outermost
            loss = plugin.wrap_loss(loss)
        return loss(model, inputs)

    def _loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        for plugin in self.plugins:
            plugin.before_loss(model, inputs)
        coef, self.beta = self.beta, 0.0  # TRL's own KL off: a divergence is a plug-in's term
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self.beta = coef
        for plugin in self.plugins:
            term = plugin.loss_term(model, inputs)
            if term is not None:
                loss = loss + term
        return loss

    # -- rollouts: TRL's, or the project's decoding loop (rollout_sampler: rlvr_div) for text prompts
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: ANN001, ANN202
        if self.rollouts is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)  # fmt: skip
        if images is not None or multimodal_fields:  # check_model refuses a processor; a guard
            raise ConfigError("rollout_sampler: rlvr_div samples text prompts only; use rollout_sampler: trl")
        return self.rollouts.generate(prompt_ids), None

    # -- scored batches: diversity metrics, then the plug-ins
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.gathered_rewards = rewards_per_func
        valid = rewards_per_func[:, self.args.validity_reward_index] == 1.0
        stats = log_group_diversity(self, valid, completions)
        for plugin in self.plugins:
            plugin.on_rewards(rewards_per_func, prompts, completions, valid.cpu(), stats)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001, ANN202
        out = super()._generate_and_score_completions(inputs)
        for plugin in self.plugins:
            advantages = plugin.advantages(out)
            if advantages is not None:
                out["advantages"] = replace_advantages(self, advantages, out)
        return out

    # -- the plug-ins' state travels with checkpoints
    def _save_checkpoint(self, model, trial):  # noqa: ANN001, ANN202
        # first: trainer_state.json, written last by the Trainer, marks a checkpoint complete, so a checkpoint that
        # looks complete always holds the plug-ins' state (a kill in between leaves an incomplete one); here, not
        # with the optimizer, so that save_only_model keeps it too
        if self.plugins and self.args.should_save:
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            for plugin in self.plugins:
                plugin.save(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):  # noqa: ANN001, ANN202
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint:
            for plugin in self.plugins:
                plugin.load(Path(checkpoint))
