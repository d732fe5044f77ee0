"""ProRL, Prolonged Reinforcement Learning (Liu, Diao, Lu et al. 2025, NVIDIA, "ProRL: Prolonged Reinforcement
Learning Expands Reasoning Boundaries in Large Language Models", arXiv:2505.24864): a KL penalty to a reference
policy with periodic *hard resets*, as a plug-in (``prorl: true``) on TRL's reference-sync settings.

The objective is GRPO's with a KL penalty (the paper's Eq. 4, L = L_GRPO − β·KL(π_θ‖π_ref)): here the ``divergence``
plug-in (``divergence: reverse_kl``, β = ``divergence_coef``). The paper observes that as training goes on "the KL
term may increasingly dominate the loss, leading to diminishing policy updates", so periodically it hard-resets the
reference policy π_ref to a recent snapshot of the online policy π_θ *and reinitialises the optimizer states*
(§2.3.1). At a reset step s (after the optimizer update of step s):

    π_ref ← π_θ(s)                  (every weight copied: the KL restarts from 0)
    optimizer state ← empty         (AdamW's first and second moments and its step count: step s + 1 is a first step)

The reference copy is TRL's own ``SyncRefModelCallback`` (``sync_ref_model: true``), which sets
π_ref ← α·π_θ + (1 − α)·π_ref every ``ref_model_sync_steps`` optimizer steps: with ``ref_model_mixup_alpha: 1`` that
is the hard reset (α < 1 is TR-DPO's soft update, not ProRL's). This plug-in adds what TRL lacks: the optimizer
reset at the same steps; the reference's weights in every checkpoint taken after a reset (TRL saves only the
policy, so a resumed run would otherwise restart from the initial reference); and ``prorl/reference_step``, the step
the reference was last set at (0: the initial model). The learning-rate schedule is not reset.

Differences from the paper: it resets when a validation score "stagnates or degrades" (§3.3, App. E: eight runs,
resets between them, over 2,000 steps in all); here the reset comes every ``ref_model_sync_steps`` steps. Its
DAPO parts: decoupled clipping (ε_low = 0.2, ε_high = 0.4) is TRL's ``epsilon``/``epsilon_high``; dynamic sampling
(dropping groups whose rewards are all equal and sampling more) is not implemented (such groups get advantage 0 but
still count in the loss normaliser). The paper does not state β.
With ``steps_per_generation`` > ``gradient_accumulation_steps`` (or ``num_iterations`` > 1) the batches already
generated keep the reference log-probs computed before a reset; the new reference acts from the next generation.
Only full fine-tuning on one process or with DDP: under LoRA the reference is the adapter-disabled base, which TRL
cannot sync (refused before the model loads), and DeepSpeed or FSDP shard the optimizer and the reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import distributed_backend
from rlvr_div.trainers.plugin import GRPOPlugin, kl_penalties, register_plugin

STATE_FILE = "prorl_state.json"  # in a checkpoint: the step the reference was last set at
REFERENCE_FILE = "prorl_reference.safetensors"  # the reference's weights, when no other file holds them
LORA_REFUSAL = (
    "prorl resets a reference model, and under LoRA there is none (the reference is the adapter-disabled base, "
    "which TRL's sync_ref_model cannot update); train without use_peft/peft_config"
)


@dataclass
class ProRLArgs:
    """Recipe key of ProRL's hard resets (the schedule is TRL's ``sync_ref_model``, ``ref_model_sync_steps``)."""

    prorl: bool = field(
        default=False,
        metadata={
            "help": "ProRL: at each reference sync (TRL's sync_ref_model, every ref_model_sync_steps steps, with "
            "ref_model_mixup_alpha 1: the reference becomes the policy) also reset the optimizer's state; needs a "
            "divergence term (reverse_kl is the paper's KL penalty)."
        },
    )


def check_prorl(args: Any) -> None:
    """One-line ConfigErrors for ``prorl: true`` without what its reset acts on: a divergence term, TRL's reference
    sync, a hard (α = 1) sync at an interval >= 1 that fires within max_steps, and an unsharded optimizer."""
    if not args.prorl:
        return
    if not kl_penalties(args):
        raise ConfigError(
            "prorl resets the reference of a KL penalty and this run has none; set divergence: reverse_kl (the "
            "paper's KL) with divergence_coef > 0"
        )
    if not args.sync_ref_model:
        raise ConfigError(
            "prorl resets at TRL's reference sync: set sync_ref_model: true, ref_model_mixup_alpha: 1.0 and the "
            "interval ref_model_sync_steps"
        )
    alpha = args.ref_model_mixup_alpha
    if isinstance(alpha, bool) or alpha != 1.0:
        raise ConfigError(
            f"prorl is a hard reset, π_ref ← π_θ: set ref_model_mixup_alpha: 1.0 (got {alpha!r}; below 1 is TR-DPO's "
            "soft update)"
        )
    steps = args.ref_model_sync_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"ref_model_sync_steps must be an integer >= 1 (the reset interval), got {steps!r}")
    max_steps = getattr(args, "max_steps", -1)
    if isinstance(max_steps, int) and max_steps > 0 and steps > max_steps:
        raise ConfigError(
            f"ref_model_sync_steps={steps} is above max_steps={max_steps}: no reset would ever fire; use an interval "
            "<= max_steps"
        )
    backend = distributed_backend(args)
    if backend is not None:
        raise ConfigError(
            f"prorl runs on one process or with DDP; under {backend} the optimizer state and the reference are "
            "sharded and its reset and reference checkpoint are not implemented"
        )


def reset_optimizer_state(optimizer: Any) -> None:
    """Drop every parameter's state of ``optimizer`` (an accelerate wrapper or a torch optimizer): AdamW's moments
    and step count, so that its next step is a first step. Learning rates and other hyperparameters stay."""
    inner = getattr(optimizer, "optimizer", optimizer)
    inner.state.clear()


def sync_reference(policy: Any, reference: Any) -> None:
    """π_ref ← π_θ, every parameter copied, with TRL's own sync at α = 1 (what ``sync_ref_model`` runs)."""
    from trl.trainer.callbacks import SyncRefModelCallback

    SyncRefModelCallback.sync_target_model(policy, reference, 1.0)


@register_plugin("callbacks", after=("divergence",))
class ProRL(GRPOPlugin):
    """Clears the optimizer's state at each of TRL's hard reference syncs, and keeps the reference in checkpoints."""

    name = "prorl"
    Args = ProRLArgs
    selected_by = "prorl: true"
    switches = ("prorl",)

    def __init__(self, trainer: Any) -> None:
        from transformers import TrainerCallback

        super().__init__(trainer)
        if trainer.ref_model is None:  # a PeftModel the pre-load check did not see
            raise ConfigError(LORA_REFUSAL)
        self.reference_step = 0  # the optimizer step at which π_ref was last set to π_θ (0: the initial model)
        plugin = self

        class Reset(TrainerCallback):
            """After TRL's SyncRefModelCallback (added before it) copied π_θ into π_ref at a sync step."""

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                plugin.on_step_end(state.global_step)

        trainer.add_callback(Reset())

    @classmethod
    def prepare(cls, args: Any) -> None:
        check_prorl(args)

    @classmethod
    def active(cls, args: Any) -> bool:
        return bool(args.prorl)

    @classmethod
    def before_init(cls, config: Any, arguments: dict[str, Any]) -> None:
        """Refuse LoRA (a ``peft_config``, or a model that already holds adapters) before TRL loads the model."""
        if arguments.get("peft_config") is not None or getattr(arguments.get("model"), "peft_config", None):
            raise ConfigError(LORA_REFUSAL)

    def on_step_end(self, step: int) -> None:
        """At a sync step: clear the optimizer's state (TRL has just reset the reference); log the reference's step."""
        if step % self.trainer.args.ref_model_sync_steps == 0:
            reset_optimizer_state(self.trainer.optimizer)
            self.reference_step = step
        # the latest value only: TRL logs the mean of a metric's list, and a mean of steps is no step
        trl_seam.metrics(self.trainer, "train")["prorl/reference_step"] = [float(self.reference_step)]

    def reference(self) -> Any:
        return self.trainer.accelerator.unwrap_model(self.trainer.ref_model)

    def save(self, checkpoint: Path) -> None:
        """The reference's step, and its weights unless they are the initial model's or this checkpoint's policy."""
        from safetensors.torch import save_model

        step = self.trainer.state.global_step
        if self.reference_step not in (0, step):
            save_model(self.reference(), str(checkpoint / REFERENCE_FILE))
        state = {"reference_step": self.reference_step, "checkpoint_step": step}
        (checkpoint / STATE_FILE).write_text(json.dumps(state))

    def load(self, checkpoint: Path) -> None:
        """Restore the reference of a checkpoint (after the Trainer restored the policy's weights)."""
        from safetensors.torch import load_model

        path = checkpoint / STATE_FILE
        if not path.is_file():
            raise ConfigError(
                f"checkpoint {str(checkpoint)!r} has no {STATE_FILE}: it was not written by a prorl run, so its "
                "reference model cannot be restored"
            )
        state = json.loads(path.read_text())
        step = int(state["reference_step"])
        if step == int(state["checkpoint_step"]):
            sync_reference(self.trainer.accelerator.unwrap_model(self.trainer.model), self.reference())
        elif step != 0:
            load_model(self.reference(), str(checkpoint / REFERENCE_FILE))
        self.reference_step = step
