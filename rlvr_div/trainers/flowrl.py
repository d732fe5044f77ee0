"""FlowRL (Zhu et al., "FlowRL: Matching Reward Distributions for LLM Reasoning", arXiv:2509.15207, ICLR 2026) as a
plug-in that replaces GRPO's policy loss (``flowrl: true``, ``flowrl_beta``, ``flowrl_logz_*``).

FlowRL matches the reward distribution instead of maximising the reward: it minimises the reverse KL from the policy
to the target π*(y|x) = π_ref(y|x)·exp(β·r̂(x, y))/Z(x), with the partition function Z learned, through the
trajectory-balance loss of GFlowNets (equal in expected gradient to that KL). With length normalisation and a
clipped importance weight, the loss of a batch of B completions y_i of prompts x_i is

    δ_i = log Z_φ(x_i) + (1/|y_i|)·log π_θ(y_i|x_i) − β·r̂_i − (1/|y_i|)·log π_ref(y_i|x_i)
    w_i = clip(π_θ(y_i|x_i)/π_old(y_i|x_i), 1 − ε_low, 1 + ε_high)          (sequence ratio, detached)
    L   = (1/B)·Σ_i w_i·δ_i²

log π(y|x) = Σ_t log π(y_t|x, y_<t) over the completion tokens, |y| their number; r̂_i is TRL's group advantage of
the batch (R_i − mean of the group, divided by the group's std with ``scale_rewards: group``: the authors feed their
GRPO advantages as r̂); ε_low, ε_high are TRL's ``epsilon`` and ``epsilon_high``. dL/dlog Z_φ(x) = (2/B)·Σ_{i: x_i = x}
w_i·δ_i. The residual pushes the per-token mean of log π_θ − log π_ref toward β·r̂ − log Z: for one-token answers
the minimiser is π_θ = π_ref·e^{β·r̂}/Z (every answer keeps mass in proportion to its tilted reference probability,
equal-reward answers in the reference's proportions); for completions of L tokens the length normalisation makes the
tilt e^{L·β·r̂}.

log Z_φ(x) = MLP(h̄(x)): h̄ the mean of the policy's last hidden state (the backbone's output, after its final norm)
over the prompt's tokens, taken from the loss's own forward (no second forward); the MLP is the authors' head
(``flowrl_logz_layers`` − 1 blocks Linear(H, H)–GELU–LayerNorm–Dropout, then Linear(H, 1)). h̄ is not detached, so
the log Z regression also trains the policy's trunk, as in the authors' code. The head is not part of the model: its
initial weights are drawn from ``seed`` alone (the same on every process), its parameters join the Trainer's
optimizer as two extra parameter groups (weight decay as the Trainer applies it, learning rate and schedule the
model's), its gradients are averaged over processes and clipped to ``max_grad_norm`` on their own before each
optimizer step and zeroed where the Trainer zeroes the model's (after every step, run or skipped), and its weights
travel with every checkpoint (:data:`STATE_FILE`; its optimizer state is in the Trainer's ``optimizer.pt``). The
saved model has no extra weights. One process or DDP only: under DeepSpeed or FSDP the optimizer is not the
Trainer's own (refused before the model loads).

Sources: the objective as the paper and the authors' README state it (the README of ``recipe/flowrl`` in verl and of
Xuekai-Zhu/FlowRL); the head, the prompt-mean hidden state, β = 15 and r̂ = the GRPO advantage from the authors' code
(``verl/workers/actor/dp_actor.py`` of Xuekai-Zhu/FlowRL, ``recipe/flowrl/flowrl_actor.py`` of verl); the PPO-style
clip of w from the paper as quoted in Xuekai-Zhu/FlowRL issue #13 (the released code clamps w at 10 from above
only). docs/methods.md lists what differs from the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import AT_LEAST_ONE, HALF_OPEN_UNIT, POSITIVE
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import completion_mask, distributed_backend
from rlvr_div.trainers.plugin import GRPOPlugin, register_plugin

STATE_FILE = "flowrl_log_z.pt"  # the log Z head's weights, in every checkpoint folder
# the multimodal inputs TRL's loss forward passes on (as its own _compute_loss does): the parameters of the per-token
# forward after compute_aux_loss, as the seam lists them
_FORWARD_PARAMS = trl_seam.per_token_logps_params()
MULTIMODAL_KEYS = _FORWARD_PARAMS[_FORWARD_PARAMS.index("compute_aux_loss") + 1 :]


@dataclass
class FlowRLArgs:
    """Recipe keys of FlowRL (selected by ``flowrl: true``)."""

    flowrl: bool = field(
        default=False,
        metadata={
            "help": "FlowRL: replace GRPO's policy loss by FlowRL's trajectory-balance loss (log Z + mean log π − "
            "β·r̂ − mean log π_ref)², importance weight clipped to [1 − epsilon, 1 + epsilon_high], with a learned "
            "log-partition head; needs no divergence term, reward shaping or entropy bonus."
        },
    )
    flowrl_beta: float = field(
        default=15.0,
        metadata={"help": "FlowRL: β > 0, the inverse temperature of the target π_ref·exp(β·r̂)/Z; 15 as in the paper."},
    )
    flowrl_logz_layers: int = field(
        default=3,
        metadata={
            "help": "FlowRL: layers of the log Z head on the prompt's mean last hidden state (1: linear); 3 as in "
            "the authors' code."
        },
    )
    flowrl_logz_dropout: float = field(
        default=0.1,
        metadata={"help": "FlowRL: dropout in [0, 1) of the log Z head's hidden blocks; 0.1 as in the authors' code."},
    )


def check_flowrl(args: Any) -> None:
    """One-line ConfigErrors (its keys' ranges and "acts only with flowrl: true" are declared in :class:`FlowRL`): a
    ``flowrl`` that is not a boolean, a setting FlowRL's loss would silently drop (TRL's entropy bonus, ``delta``,
    sequence-level importance sampling, off-policy mask and vLLM importance-sampling correction; another plug-in's
    loss term, advantages or loss wrapper is refused by :func:`~rlvr_div.trainers.plugin.check_loss_owners`), or a
    DeepSpeed or FSDP run (whose optimizer would not train the log Z head)."""
    flowrl = args.flowrl
    if not isinstance(flowrl, bool):
        raise ConfigError(f"flowrl must be true or false, got {flowrl!r}")
    if not flowrl:
        return
    high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    if not (0 <= args.epsilon < 1 and high >= 0):
        raise ConfigError(
            f"flowrl clips its importance weight to [1 - epsilon, 1 + epsilon_high]: need 0 <= epsilon < 1 and "
            f"epsilon_high >= 0, got {args.epsilon} and {high}"
        )
    if args.delta is not None:
        raise ConfigError(
            f"flowrl clips its importance weight to [1 - epsilon, 1 + epsilon_high] only, so TRL's two-sided clip "
            f"delta would not act: leave delta unset (got {args.delta})"
        )
    if args.importance_sampling_level != "token":
        raise ConfigError(
            "flowrl's importance weight is always the sequence ratio, so importance_sampling_level would not act: "
            f"leave it token (got {args.importance_sampling_level!r})"
        )
    if args.off_policy_mask_threshold is not None:
        raise ConfigError(
            "flowrl's loss masks no off-policy sequences, so off_policy_mask_threshold would not act: leave it unset "
            f"(got {args.off_policy_mask_threshold})"
        )
    if args.use_vllm and args.vllm_importance_sampling_correction:
        raise ConfigError(
            "flowrl's loss does not apply TRL's vLLM importance-sampling correction: with use_vllm, set "
            "vllm_importance_sampling_correction: false"
        )
    backend = distributed_backend(args)
    if backend is not None:
        raise ConfigError(
            f"flowrl runs on one process or with DDP; under {backend} the optimizer is not the Trainer's own "
            "(DeepSpeed builds it; FSDP switches it to the model's shards and saves its state by the model's), so "
            "the log Z head would not be trained or checkpointed"
        )
    if args.entropy_coef != 0 or args.use_adaptive_entropy or args.top_entropy_quantile < 1:
        raise ConfigError(
            "flowrl replaces TRL's policy loss, so its entropy bonus and top_entropy_quantile would not act: set "
            "entropy_coef: 0, use_adaptive_entropy: false, top_entropy_quantile: 1"
        )


class LogPartition(nn.Module):
    """log Z_φ(x) from the prompt's mean hidden state h̄ (B, H): ``layers`` − 1 blocks Linear–GELU–LayerNorm–Dropout of
    width H, then Linear(H, 1); returns (B,)."""

    def __init__(self, hidden: int, layers: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for _ in range(layers - 1):
            blocks += [nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Dropout(dropout)]
        self.net = nn.Sequential(*blocks, nn.Linear(hidden, 1))

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.net(pooled).squeeze(-1)


def new_head(hidden: int, args: Any) -> LogPartition:
    """The log Z head of a run, its initial weights drawn from ``args.seed`` alone: the same on every process (the
    Trainer seeds each process differently, ``device_specific``, and DDP does not sync parameters outside the model).
    The global random state is left as it was."""
    with torch.random.fork_rng(devices=[]):  # the head is built on the CPU
        torch.manual_seed(args.seed)
        return LogPartition(hidden, args.flowrl_logz_layers, args.flowrl_logz_dropout)


def prompt_mean(hidden: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
    """h̄ (B, H) = Σ_p h_p·m_p / Σ_p m_p over the prompt columns of ``hidden`` (B, P', H), P' ≥ P = the mask's width;
    the prompt fills the first P columns (TRL's layout: left-padded prompt, then completion)."""
    width = prompt_mask.size(1)
    mask = prompt_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden[:, :width] * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def flowrl_residuals(
    log_z: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor,
    beta: float,
) -> torch.Tensor:  # fmt: skip
    """δ_i = log Z_i + (1/|y_i|)·Σ_t l_it − β·r̂_i − (1/|y_i|)·Σ_t l^ref_it (B,), sums over ``mask`` (B, T)."""
    length = mask.sum(-1).clamp(min=1.0)
    mean_logp = (logps * mask).sum(-1) / length
    mean_ref = (ref_logps * mask).sum(-1) / length
    return log_z + mean_logp - beta * rewards - mean_ref


def importance_weights(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, clipped): w_i = clip(exp(Σ_t (l_it − l^old_it)), 1 − ε_low, 1 + ε_high), detached (B,), and whether each
    sequence ratio lay outside the range."""
    log_ratio = ((logps.detach() - old_logps) * mask).sum(-1)
    ratio = log_ratio.exp()
    weights = ratio.clamp(min=1.0 - eps_low, max=1.0 + eps_high)
    return weights, weights != ratio


def flowrl_loss(
    log_z: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor,
    rewards: torch.Tensor, beta: float, eps_low: float, eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(L, δ, w, clipped) of a batch: L = (1/B)·Σ_i w_i·δ_i² (module docstring); log Z, r̂ (B,), log-probs (B, T)."""
    delta = flowrl_residuals(log_z, logps, ref_logps, mask, rewards, beta)
    weights, clipped = importance_weights(logps, old_logps, mask, eps_low, eps_high)
    return (weights.to(delta.dtype) * delta.square()).mean(), delta, weights, clipped


def average_gradients(params: list[nn.Parameter]) -> None:
    """Replace each parameter's gradient by its mean over the processes of the default group (a missing gradient
    counts as 0); nothing with one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    world = dist.get_world_size()
    for p in params:
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        dist.all_reduce(grad)
        p.grad = grad / world


def _backbone(model: Any) -> nn.Module:
    """The module whose output holds the last hidden state of every position: the backbone of the (unwrapped) causal
    LM, the one TRL's fused LM head runs (``base_model``; under PEFT, that of the wrapped model)."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):  # DDP and similar wrappers
        model = model.module
    if hasattr(model, "get_base_model"):  # a PEFT model
        model = model.get_base_model()
    return model.base_model


@register_plugin("loss_replacement")
class FlowRL(GRPOPlugin):
    """FlowRL's loss in place of TRL's policy loss, with its log Z head (parameters, optimizer groups, checkpoints)."""

    name = "flowrl"
    Args = FlowRLArgs
    reads_whole_rows = True  # log Z from the loss forward's prompt hidden states (log_z_and_logps)
    selected_by = "flowrl: true"
    switches = ("flowrl",)
    ranges = {"flowrl_beta": POSITIVE, "flowrl_logz_layers": AT_LEAST_ONE, "flowrl_logz_dropout": HALF_OPEN_UNIT}

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        args = trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        hidden = model.config.get_text_config().hidden_size
        self.head = new_head(hidden, args)
        self.head.to(device=trainer.accelerator.device, dtype=torch.float32)
        self._add_head_to_optimizer()
        self._zero_head_gradients_with_the_models()

    @classmethod
    def prepare(cls, args: Any) -> None:
        check_flowrl(args)

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.flowrl is True

    @classmethod
    def reference_coef(cls, args: Any) -> float:
        """1: the weight of log π_ref in the residual; non-zero so that TRL computes π_ref's log-probs (its KL term,
        which would use it, is not run: FlowRL's loss replaces TRL's)."""
        return 1.0

    # -- the optimizer: the head's parameters are two more groups of the Trainer's optimizer
    def _add_head_to_optimizer(self) -> None:
        """Wrap the trainer's ``create_optimizer`` (on the instance) so that the optimizer it builds holds the head,
        before the Trainer builds the LR scheduler and loads a checkpoint's optimizer state."""
        trainer, base = self.trainer, self.trainer.create_optimizer

        def create_optimizer(model: Any = None) -> torch.optim.Optimizer:
            optimizer = base(model)
            ours = {id(p) for p in self.head.parameters()}
            if not any(id(p) in ours for group in optimizer.param_groups for p in group["params"]):
                decay = set(trainer.get_decay_parameter_names(self.head))
                named = list(self.head.named_parameters())
                optimizer.add_param_group(
                    {"params": [p for n, p in named if n in decay], "weight_decay": trainer.args.weight_decay}
                )
                optimizer.add_param_group({"params": [p for n, p in named if n not in decay], "weight_decay": 0.0})
                optimizer.register_step_pre_hook(lambda *_: self._prepare_head_step())
            return optimizer

        trainer.create_optimizer = create_optimizer

    def _zero_head_gradients_with_the_models(self) -> None:
        """Zero the head's gradients where the Trainer zeroes the model's: at the start of training and after every
        optimizer step, run or skipped (fp16's GradScaler skips a step with inf gradients, and with it the
        optimizer's hooks). Without this the head's gradients would add up over steps."""
        from transformers import TrainerCallback

        head = self.head

        class ZeroHeadGradients(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                head.zero_grad(set_to_none=True)

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                head.zero_grad(set_to_none=True)

        self.trainer.add_callback(ZeroHeadGradients())

    def _prepare_head_step(self) -> None:
        """Before each optimizer step: average the head's gradients over processes (it is outside the DDP-wrapped
        model), then clip them to ``max_grad_norm`` (the Trainer clips the model's parameters only)."""
        params = list(self.head.parameters())
        average_gradients(params)
        max_norm = self.trainer.args.max_grad_norm
        if max_norm is not None and max_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], max_norm)

    # -- the loss
    def wrap_loss(self, loss: Any) -> Any:
        return self.loss

    def log_z_and_logps(self, model: Any, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(log Z (B,), per-token log π_θ (B, T), MoE aux loss or None) from one forward of the batch, TRL's own
        (through the trainer's per-token forward), the backbone's last hidden state captured on the way."""
        trainer = self.trainer
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids = inputs["completion_ids"]
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention = torch.cat([prompt_mask, inputs["completion_mask"]], dim=1)
        captured: list[torch.Tensor] = []

        def grab(module: nn.Module, args: Any, output: Any) -> None:
            captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

        handle = _backbone(model).register_forward_hook(grab)
        try:
            logps, _, aux = trl_seam.per_token_logps(
                trainer, model, ids, attention, completion_ids.size(1), compute_aux_loss=trainer.aux_loss_enabled,
                **{key: inputs.get(key) for key in MULTIMODAL_KEYS},
            )  # fmt: skip
        finally:
            handle.remove()
        if not captured:
            raise RuntimeError("flowrl: the backbone's hidden states were not seen in the loss forward")
        hidden = torch.cat(captured, dim=0).to(torch.float32)
        self.head.train(trainer.model.training)
        return self.head(prompt_mean(hidden, prompt_mask)), logps, aux

    def loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """FlowRL's loss of a micro-batch (module docstring), divided by the accumulation steps like TRL's."""
        trainer, args = self.trainer, self.trainer.args
        log_z, logps, aux = self.log_z_and_logps(model, inputs)
        mask = completion_mask(inputs)
        old = inputs.get("old_per_token_logps")
        eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
        loss, delta, weights, clipped = flowrl_loss(
            log_z, logps, inputs["ref_per_token_logps"], logps.detach() if old is None else old, mask,
            inputs["advantages"].to(logps.dtype), args.flowrl_beta, args.epsilon, eps_high,
        )  # fmt: skip
        training = trainer.model.training
        accum = trainer.current_gradient_accumulation_steps if training else 1.0
        mode = "train" if training else "eval"
        length = mask.sum(-1).clamp(min=1.0)
        ref_ratio = ((logps.detach() - inputs["ref_per_token_logps"]) * mask).sum(-1) / length
        stats = torch.stack(
            [loss.detach(), log_z.detach().mean(), delta.detach().mean(), weights.float().mean(),
             clipped.float().mean(), ref_ratio.mean()]
        )  # fmt: skip
        means = trainer.accelerator.gather(stats.unsqueeze(0)).mean(0).tolist()
        metrics = trl_seam.metrics(trainer, mode)
        for name, value in zip(("loss", "log_z", "residual", "importance_weight", "clip_frac", "ref_log_ratio"), means):
            metrics[f"flowrl/{name}"].append(value)
        loss = loss / accum
        if aux is not None:
            loss = loss + trainer.router_aux_loss_coef * aux / accum
        return loss

    # -- checkpoints: the head's weights (its optimizer state is in the Trainer's optimizer.pt)
    def save(self, checkpoint: Path) -> None:
        path = Path(checkpoint) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        torch.save(self.head.state_dict(), tmp)
        tmp.replace(path)

    def load(self, checkpoint: Path) -> None:
        path = Path(checkpoint) / STATE_FILE
        if not path.is_file():
            raise ConfigError(
                f"checkpoint {str(checkpoint)!r} has no {STATE_FILE}: it was not written by a flowrl run, so its "
                "log Z head cannot be restored"
            )
        state = torch.load(path, map_location=self.trainer.accelerator.device, weights_only=True)
        self.head.load_state_dict(state)
