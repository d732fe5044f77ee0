"""GRPO extensions as plug-ins: one method, one module.

A plug-in is a subclass of :class:`GRPOPlugin` in its own module, holding
- ``Args``: the dataclass of its recipe keys, a mixin of ``DivergenceGRPOConfig`` (its fields become recipe keys);
- ``ranges``: each number key of its Args with its allowed :class:`rlvr_div.ranges.Range`;
- ``selected_by`` (and ``switches``): how a recipe selects it, e.g. ``"simko: true"``; its other keys then act only
  when it is selected, and one set away from its default while it is not is refused. A plug-in whose keys are
  themselves the selection (the divergence term, ``reward_shaping``) lists them in ``switches`` instead, and a key
  whose rule its own ``prepare`` checks in ``own_rules``;
- ``parameters_of``: its keys that parametrise a divergence (``js_scale`` -> ``js``): each acts only while some
  plug-in evaluates that divergence (its :meth:`GRPOPlugin.divergences`), and is refused otherwise, once every
  plug-in has prepared the config (:func:`check_parameters`);
- ``kl_penalty``: its ``divergences`` are the run's penalty to the reference in the policy loss, which other
  plug-ins ask for or refuse through :func:`kl_penalties`, never by reading its keys;
- ``log_prob_penalties(args)``: the penalties on the per-token log-probabilities it adds to the policy loss (the
  divergence term's KL, KL-Cov's), which a plug-in that reshapes that gradient refuses through
  :func:`log_prob_penalties` (SimKO);
- ``unscaled``: its advantages are used as they are, so TRL's ``scale_rewards`` would not act: while it is active any
  value but ``none`` is refused. The contract its Args and these declare is enforced by
  :meth:`GRPOPlugin.check_declared` before its ``prepare``;
- ``prepare(args)``: its other one-line checks (between its keys, against other settings; a
  :class:`~rlvr_div.errors.ConfigError`), run while the config is built, before any model loads, in
  :func:`plugin_classes` order (it may resolve its own keys, e.g. a synonym);
- ``check_task(args, task, spec, rewards)``: its checks against the run's task and rewards while it is active (MARA
  refuses a one-answer task), and ``check_inputs(script, training, model)``: its checks of the files it reads (DPH-RL's
  rehearsal set), both called by ``rlvr-div train``'s pre-load checks for the :func:`active_plugins`;
- ``train_dataset(args)``: the dataset GRPO trains on in place of the task's while it is active (DPH-RL: D_exp);
- ``active(args)``: whether the run uses it; the trainer builds one instance of each active plug-in;
- the hooks it needs, each a no-op by default (the trainer calls them in :func:`plugin_classes` order):
  ``forward`` (take over the loss forward, e.g. to fold extra rows into it), ``on_logps`` (the per-token log-probs
  of every such forward), ``on_rewards`` (the gathered rewards and validity of a batch), ``advantages`` (replace
  TRL's advantages: at most one active plug-in may), ``wrap_loss`` (run around the whole loss), ``before_loss`` and
  ``loss_term`` (a term added to TRL's policy loss), ``save``/``load`` (state that travels with checkpoints);
- ``reference_coef(args)``: TRL's ``beta`` while it is active (non-zero makes TRL compute the reference log-probs);
- ``replaces_loss`` (set by the decorator from the phase ``loss_replacement``): its ``wrap_loss`` replaces GRPO's
  policy loss rather than wrapping it (α-DPG, FlowRL): another active plug-in that acts on the loss or the advantages
  (:data:`LOSS_HOOKS`) would not act, and is refused (:func:`check_loss_owners`), and a plug-in whose keys add to
  that loss refuses them even where they would add nothing, through :func:`loss_replacers` (``divergence: js`` under
  ``trainer: dpg``);
- ``reads_whole_rows``: its hooks read the backbone's output over whole [prompt | completion] rows (FlowRL's log Z),
  so while it is active the trainer's log-prob forward runs every row's prompt instead of each distinct prompt once
  (:func:`rlvr_div.trainers.common.shared_prompt_forward`).

The class is registered by one decorator, ``@register_plugin(phase=..., after=(...))``:

- ``phase``: where in a training step it acts, one of :data:`PHASES` (``advantages``: it sets the advantages or
  shapes the rewards they come from; ``loss_term``: it adds a term to GRPO's policy loss or changes which tokens that
  loss sees; ``loss_replacement``: its ``wrap_loss`` replaces GRPO's policy loss, so it runs alone on the loss and
  the advantages, see :func:`check_loss_owners`; ``callbacks``: it acts between steps, e.g. a controller of β or a
  reset of the reference). A step hook outside its phase's (:data:`PHASES`) is a TypeError at registration;
- ``after``: the names of the plug-ins it must come after, where the order matters: its ``prepare`` reads what
  theirs resolved (a plug-in that asks for a KL penalty comes after the divergence term), or its loss term is added
  after theirs.

The plug-ins run (checks, hooks, loss terms) in :func:`plugin_classes` order: every ``after`` before its plug-in,
otherwise by phase, then by module name. :func:`plugin_modules` finds every module of the package that registers a
plug-in, so nothing else lists it. The trainer (:mod:`rlvr_div.trainers.grpo`) holds no method-specific code: adding a
method is a new module, its recipe, its docs row and its tests, and deleting them removes it (docs/contributing.md,
"Adding a method").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import Range, is_integer_field, out_of_range
from rlvr_div.registry import Registry

PLUGIN_PACKAGE = "rlvr_div.trainers"  # where plug-in modules live

LossFn = Callable[[Any, dict[str, Any]], torch.Tensor]
# the hooks through which a plug-in changes the policy loss or its advantages
LOSS_HOOKS = ("forward", "advantages", "wrap_loss", "before_loss", "loss_term")
# the hooks whose result replaces TRL's (the first active plug-in's would win and the others' never run)
SINGLE_OWNER_HOOKS = {"forward": "take over the loss forward", "advantages": "set the advantages"}
# where in a training step a plug-in acts, in the order a step meets them, with the step hooks a plug-in of the phase
# may implement (the checks, the config queries, before_init and save/load are open to every phase)
PHASES: dict[str, tuple[str, ...]] = {
    "advantages": ("on_rewards", "advantages"),
    "loss_term": ("forward", "on_logps", "before_loss", "loss_term", "wrap_loss"),
    "loss_replacement": ("on_rewards", "advantages", "wrap_loss"),
    "callbacks": ("on_rewards",),
}
STEP_HOOKS = ("forward", "on_logps", "on_rewards", "advantages", "wrap_loss", "before_loss", "loss_term")


class GRPOPlugin:
    """One GRPO extension (see the module docstring); ``self.trainer`` is the ``DivergenceGRPOTrainer`` it runs in."""

    name: ClassVar[str] = ""
    Args: ClassVar[type | None] = None
    selected_by: ClassVar[str | None] = None  # how a recipe selects it; then its other keys act only when selected
    switches: ClassVar[tuple[str, ...]] = ()  # the Args keys that select it (exempt from "acts only when selected")
    own_rules: ClassVar[tuple[str, ...]] = ()  # keys whose "acts only when" rule its own prepare checks
    ranges: ClassVar[dict[str, Range]] = {}  # its number keys' allowed values (an ``int`` field: integers)
    parameters_of: ClassVar[dict[str, str]] = {}  # key -> the divergence it parametrises (acts only while in use)
    unscaled: ClassVar[bool] = False  # its advantages are used as they are: TRL's scale_rewards must be none
    kl_penalty: ClassVar[bool] = False  # its divergences(args) are the run's penalty to the reference in the loss
    phase: ClassVar[str] = ""  # set by register_plugin: one of PHASES
    after: ClassVar[tuple[str, ...]] = ()  # set by register_plugin: the plug-ins it comes after
    replaces_loss: ClassVar[bool] = False  # set by register_plugin (phase loss_replacement; see check_loss_owners)
    # its hooks read the backbone's output over whole [prompt | completion] rows (FlowRL's log Z): while it is active
    # the trainer's log-prob forward runs every row's prompt (rlvr_div.trainers.common.shared_prompt_forward is off)
    reads_whole_rows: ClassVar[bool] = False

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    @classmethod
    def check_declared(cls, args: Any) -> None:
        """The contract of its declarations, as one-line ConfigErrors: with ``selected_by`` and the plug-in not
        :meth:`active`, any Args key but the ``switches`` set away from its default is refused (a key that would not
        act is not ignored); while active, an ``unscaled`` plug-in refuses TRL's ``scale_rewards`` but ``none``;
        every key of ``ranges`` holds an integer (an ``int`` field) or a finite number in its range (None: unset).
        ``parameters_of`` is checked once every plug-in has prepared the config (:func:`check_parameters`)."""
        own = {f.name: f for f in dataclasses.fields(cls.Args)} if cls.Args is not None else {}
        undeclared = sorted((set(cls.ranges) | set(cls.parameters_of)) - set(own))
        if undeclared:  # a programming error in the plug-in, not a user's
            raise TypeError(f"plug-in {cls.name!r} declares {undeclared[0]!r}, which is not in its Args")
        if cls.selected_by is not None and not cls.active(args):
            for f in own.values():
                value = getattr(args, f.name)
                if f.name not in cls.switches and value != f.default:
                    raise ConfigError(f"{f.name}={value} acts only with {cls.selected_by}")
            return
        scale = getattr(args, "scale_rewards", "none")
        if cls.unscaled and scale != "none" and cls.active(args):
            raise ConfigError(f"scale_rewards={scale!r} does not act with {cls.selected_by or cls.name}, whose "
                              "advantages are used as they are; set scale_rewards: none")  # fmt: skip
        for key, allowed in cls.ranges.items():
            value = getattr(args, key)
            problem = None if value is None else out_of_range(key, value, allowed, is_integer_field(own[key]))
            if problem:
                raise ConfigError(problem)

    @classmethod
    def prepare(cls, args: Any) -> None:
        """Resolve and check this plug-in's keys of a config (one-line ConfigErrors); runs for every config."""

    @classmethod
    def active(cls, args: Any) -> bool:
        return False

    @classmethod
    def divergences(cls, args: Any) -> tuple[str, ...]:
        """The divergences (:data:`rlvr_div.divergences.DIVERGENCES` names) this plug-in evaluates in the run that
        ``args`` configure, with the parameters ``args.divergence_params(name)``; read once this plug-in has
        prepared the config (by :func:`check_parameters` after every ``prepare``, by :func:`kl_penalties` from the
        ``prepare`` of a plug-in that comes ``after`` it)."""
        return ()

    @classmethod
    def log_prob_penalties(cls, args: Any) -> tuple[str, ...]:
        """The penalties on the policy's per-token log-probabilities that this plug-in adds to the policy loss in the
        run ``args`` configure, each named as the recipe selects it (``"covariance_penalty: kl_cov"``); read once
        this plug-in has prepared the config, through :func:`log_prob_penalties` (a plug-in that reshapes the
        per-token gradient refuses them: SimKO)."""
        return ()

    @classmethod
    def reference_coef(cls, args: Any) -> float:
        """TRL's ``beta`` while this plug-in is active: non-zero makes TRL load or derive the reference model."""
        return 0.0

    @classmethod
    def check_task(cls, args: Any, task: str, spec: Any, rewards: list[str]) -> None:
        """Checks against the run's task (``spec``: its :class:`~rlvr_div.tasks.base.TaskSpec`) and reward names,
        before any model loads; called only while the plug-in is active."""

    @classmethod
    def check_inputs(cls, script: Any, training: Any, model: Any) -> None:
        """Checks of the files this plug-in reads, before any model loads (``rlvr-div train``; only while active, and
        not when a command is about to write them)."""

    @classmethod
    def train_dataset(cls, args: Any) -> Any:
        """The dataset GRPO trains on in place of the task's while this plug-in is active, or None (the task's)."""
        return None

    @classmethod
    def before_init(cls, config: Any, arguments: dict[str, Any]) -> None:
        """Checks on ``GRPOTrainer.__init__``'s bound ``arguments`` before it loads the model (Python users)."""

    def forward(self, base: Callable[..., Any], model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                logits_to_keep: int, batch_size: int | None, compute_entropy: bool, compute_aux_loss: bool,
                **kwargs: Any) -> Any:  # fmt: skip
        """Run the per-token log-prob forward in place of TRL's ``base`` (same arguments and result), or None."""
        return None

    def on_logps(self, logps: torch.Tensor) -> None:
        """The per-token log-probs (B, T) of each per-token forward the trainer runs."""

    def on_rewards(self, rewards_per_func: torch.Tensor, prompts: list[Any], completions: list[Any],
                   valid: torch.Tensor, stats: dict[str, float]) -> None:  # fmt: skip
        """A scored batch: gathered rewards (N, K), this process's prompts and completions, gathered validity (N,) and
        the batch's ``diversity/*`` statistics."""

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        """Gathered advantages (N,) replacing TRL's for a training batch (``out`` is TRL's generation output), or
        None to keep them."""
        return None

    def wrap_loss(self, loss: LossFn) -> LossFn:
        """The loss to run instead of ``loss`` (e.g. ``loss`` with some tokens masked)."""
        return loss

    def before_loss(self, model: Any, inputs: dict[str, Any]) -> None:
        """Called before TRL's policy loss runs its forward."""

    def loss_term(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        """A term added to TRL's policy loss (after its forward), or None."""
        return None

    def save(self, checkpoint: Path) -> None:
        """Write this plug-in's state into a checkpoint folder (before the Trainer marks it complete)."""

    def load(self, checkpoint: Path) -> None:
        """Restore this plug-in's state from a checkpoint folder."""


P = TypeVar("P", bound=type[GRPOPlugin])
# name -> class, filled as the modules of PLUGIN_PACKAGE that register a plug-in are imported
PLUGINS: Registry[type[GRPOPlugin]] = Registry("method", package=PLUGIN_PACKAGE, marker="@register_plugin(")


def overrides(cls: type[GRPOPlugin], hook: str) -> bool:
    """Whether ``cls`` implements ``hook`` (its own or a base's, not :class:`GRPOPlugin`'s no-op)."""
    return getattr(cls, hook) is not getattr(GRPOPlugin, hook)


def register_plugin(phase: str, after: tuple[str, ...] = ()) -> Callable[[P], P]:
    """Class decorator that makes a :class:`GRPOPlugin` subclass a plug-in of ``phase`` (one of :data:`PHASES`) that
    comes after the plug-ins named in ``after`` (see the module docstring). A step hook outside the phase's, or a
    second class under one name, is a TypeError: a programming error in the plug-in, not a user's."""
    if phase not in PHASES:
        raise TypeError(f"unknown plug-in phase {phase!r}; known: {', '.join(PHASES)}")

    def register(cls: P) -> P:
        outside = [h for h in STEP_HOOKS if overrides(cls, h) and h not in PHASES[phase]]
        if outside:
            raise TypeError(f"plug-in {cls.name!r} of phase {phase!r} implements {outside[0]!r}, a hook of another "
                            f"phase (phase {phase!r} may implement {', '.join(PHASES[phase])})")  # fmt: skip
        known = PLUGINS.registered(cls.name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"plug-ins {known.__module__}.{known.__qualname__} and {cls.__module__}.{cls.__qualname__} "
                            f"share the name {cls.name!r}")  # fmt: skip
        cls.phase, cls.after, cls.replaces_loss = phase, tuple(after), phase == "loss_replacement"
        PLUGINS.add(cls.name, cls, replace=True)  # the same class again: its module was imported again
        return cls

    return register


def plugin_modules() -> tuple[str, ...]:
    """The plug-in modules: every module of :data:`PLUGIN_PACKAGE` (or package, by its ``__init__``: DPH-RL's room)
    that registers a plug-in (a line that starts with ``@register_plugin(``), by name. A method is added by its module
    alone and removed by deleting it (:mod:`rlvr_div.registry`)."""
    return PLUGINS.modules()


@functools.cache
def _ordered() -> tuple[type[GRPOPlugin], ...]:
    return tuple(plugin_order(PLUGINS.values()))


def plugin_order(classes: list[type[GRPOPlugin]]) -> list[type[GRPOPlugin]]:
    """``classes`` in the order they run: each after every plug-in its ``after`` names, otherwise by phase (the order
    of :data:`PHASES`), then by module name (Kahn's algorithm, the smallest ready key first). An ``after`` naming no
    plug-in, or a cycle, is a TypeError."""
    names = {cls.name: cls for cls in classes}
    for cls in classes:
        unknown = [a for a in cls.after if a not in names]
        if unknown:
            raise TypeError(f"plug-in {cls.name!r} comes after {unknown[0]!r}, which is no plug-in")
    phases = list(PHASES)

    def key(cls: type[GRPOPlugin]) -> tuple[int, str, str]:
        return phases.index(cls.phase), cls.__module__, cls.__qualname__

    placed: list[type[GRPOPlugin]] = []
    waiting = sorted(classes, key=key)
    while waiting:
        done = {c.name for c in placed}
        ready = next((c for c in waiting if all(a in done for a in c.after)), None)
        if ready is None:
            raise TypeError(f"plug-ins {', '.join(c.name for c in waiting)} come after one another in a cycle")
        placed.append(ready)
        waiting.remove(ready)
    return placed


def plugin_classes() -> list[type[GRPOPlugin]]:
    """Every plug-in class, in the order they run (:func:`plugin_order`)."""
    return list(_ordered())


def active_plugins(args: Any) -> list[type[GRPOPlugin]]:
    """The plug-in classes active in ``args``, in :func:`plugin_classes` order (a config without the plug-ins' keys,
    another trainer's, has none active)."""
    if not all(hasattr(args, f.name) for a in plugin_args() for f in dataclasses.fields(a)):
        return []
    return [cls for cls in plugin_classes() if cls.active(args)]


def check_parameters(args: Any) -> None:
    """One-line ConfigError for a key of a plug-in's ``parameters_of`` set away from its default while no plug-in
    evaluates its divergence (:meth:`GRPOPlugin.divergences`); run after every plug-in's ``prepare``, so that an
    unknown divergence name or a bad coefficient is reported as such first."""
    for cls in plugin_classes():
        own = {f.name: f for f in dataclasses.fields(cls.Args)} if cls.Args is not None else {}
        for key, divergence in cls.parameters_of.items():
            value = getattr(args, key)
            if value != own[key].default and not any(divergence in p.divergences(args) for p in plugin_classes()):
                raise ConfigError(f"{key}={value} parametrises the {divergence!r} divergence, which no term of this "
                                  "run evaluates")  # fmt: skip


def kl_penalties(args: Any) -> list[str]:
    """The divergences to the reference that the run configured by ``args`` penalises in its policy loss (those of
    the plug-ins that declare ``kl_penalty``): the interface through which a plug-in asks for a KL penalty (MARA,
    ProRL, the validity target) or refuses one (the sequence-level KL) without reading another's keys."""
    return [d for cls in plugin_classes() if cls.kl_penalty for d in cls.divergences(args)]


def log_prob_penalties(args: Any) -> list[str]:
    """Every plug-in's :meth:`GRPOPlugin.log_prob_penalties` in the run configured by ``args``: the interface through
    which a plug-in refuses a penalty on the per-token log-probabilities without reading another's keys."""
    return [p for cls in plugin_classes() for p in cls.log_prob_penalties(args)]


def loss_replacers(args: Any) -> list[str]:
    """How the recipe selects each active plug-in that replaces GRPO's policy loss (``replaces_loss``; e.g.
    ``"trainer: dpg"``): the interface through which a plug-in whose keys add to that loss refuses them, even set
    where they would add nothing (:func:`check_loss_owners` refuses the active ones)."""
    return [cls.selected_by or cls.name for cls in plugin_classes() if cls.replaces_loss and cls.active(args)]


def kl_penalty_coef(args: Any) -> float:
    """The coefficient of the run's KL penalty in the policy loss as configured (the largest ``reference_coef`` of
    the plug-ins that declare ``kl_penalty``; 0 without one): where a controller of that penalty starts (the validity
    target), without reading another plug-in's keys."""
    return max((cls.reference_coef(args) for cls in plugin_classes() if cls.kl_penalty), default=0.0)


def check_loss_owners(active: list[type[GRPOPlugin]]) -> None:
    """One-line ConfigError when an active plug-in that replaces GRPO's loss (``replaces_loss``) runs beside another
    that acts on the loss or the advantages through a :data:`LOSS_HOOKS` hook, or when two active plug-ins both
    implement a hook only one can own (:data:`SINGLE_OWNER_HOOKS`): the other's change would be dropped."""
    for owner in (p for p in active if p.replaces_loss):
        for other in active:
            hooks = [h for h in LOSS_HOOKS if overrides(other, h)]
            if other is not owner and hooks:
                what = "advantages" if "advantages" in hooks else "loss"
                raise ConfigError(f"{owner.name} and {other.name} both act on the {what} ({owner.name} replaces "
                                  "GRPO's policy loss); use one")  # fmt: skip
    for hook, what in SINGLE_OWNER_HOOKS.items():
        owners = [p.name for p in active if overrides(p, hook)]
        if len(owners) > 1:
            raise ConfigError(f"{' and '.join(owners)} both {what}; use one")


def train_dataset_of(args: Any) -> Any:
    """The dataset an active plug-in trains on in place of the task's (:meth:`GRPOPlugin.train_dataset`), or None;
    two plug-ins that each replace it are refused in one line."""
    replacing = [(cls, data) for cls in active_plugins(args) if (data := cls.train_dataset(args)) is not None]
    if len(replacing) > 1:
        raise ConfigError(f"plug-ins {replacing[0][0].name!r} and {replacing[1][0].name!r} each replace the training "
                          "set; use one of them")  # fmt: skip
    return replacing[0][1] if replacing else None


def plugin_args() -> tuple[type, ...]:
    """The recipe-key dataclasses of the plug-ins, mixins of ``DivergenceGRPOConfig`` (first listed, first in MRO)."""
    seen: list[type] = []
    for cls in plugin_classes():
        if cls.Args is not None and cls.Args not in seen:
            seen.append(cls.Args)
    return tuple(seen)
