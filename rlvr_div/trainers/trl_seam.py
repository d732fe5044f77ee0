"""The one seam between this project and TRL's internals: every private TRL (or transformers ``Trainer``) name the
project overrides, reads, writes or patches, in :data:`TRL_NAMES`, the check that the installed TRL still has them
as listed (:func:`check_seam`), and the accessors through which the trainers read and write TRL's private state.

An override of a method TRL renamed never runs, and nothing fails: ``tests/test_trl_seam.py`` runs
:func:`check_seam` (each name exists, each method keeps its parameter names, each TRL function that must still call
or use the name does) and :func:`unlisted_overrides` on the project's trainers (a new ``_``-override of a TRL name
must be listed here). On a TRL upgrade: run that test, and for each name it reports read TRL's new code, adapt the
override or access, then update its entry here (docs/contributing.md, "The TRL seam").

Private state (``_metrics``, ``_logs``, the entropy controller's) is read and written, and the per-token forward
called, only through the accessors at the end of this module, which also holds the two patches of a run (the
colocated vLLM engine on CPU, the resume warning about tied weights); methods are overridden where they are
(``rlvr_div/trainers/grpo.py``, a subclass's methods; the plug-ins act through its hooks) and listed here.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator, MutableSequence, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

UPSTREAM = ("trl", "transformers")  # the packages whose classes a project trainer subclasses
KINDS = ("method", "class_attribute", "instance_attribute", "module_attribute")
USES = ("override", "read", "write", "patch")

GRPO = "trl:GRPOTrainer"
TRAINER = "transformers:Trainer"
VLLM_GENERATION = "trl.generation.vllm_generation:VLLMGeneration"


@dataclass(frozen=True)
class TRLName:
    """One TRL name the project depends on.

    ``owner`` is ``"module:Class"`` (or ``"module"`` for a module global), ``kind`` one of :data:`KINDS`, ``uses`` a
    subset of :data:`USES`, ``where`` the files of ``rlvr_div`` that touch the name directly. ``params``: a method's
    parameter names, ``self`` first, as TRL declares them. ``keys``: the keys of a dict attribute the project
    relies on. ``used_by``: TRL functions (``"module:Class.method"``) that must still call (a method) or use (an
    attribute) the name, or an override or patch of it would silently never run.
    """

    owner: str
    name: str
    kind: str
    uses: tuple[str, ...]
    where: tuple[str, ...]
    params: tuple[str, ...] | None = None
    keys: tuple[str, ...] = ()
    used_by: tuple[str, ...] = ()
    note: str = ""

    @property
    def label(self) -> str:
        """``owner.name``, e.g. ``trl:GRPOTrainer._compute_loss``."""
        return f"{self.owner}.{self.name}"


GRPO_PY = "rlvr_div/trainers/grpo.py"
SEAM_PY = "rlvr_div/trainers/trl_seam.py"

# fmt: off
TRL_NAMES: tuple[TRLName, ...] = (
    # -- GRPOTrainer methods the project's trainer overrides
    TRLName(
        GRPO, "_get_per_token_logps_and_entropies", "method", ("override", "read"),
        (GRPO_PY, SEAM_PY),
        params=("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
                "compute_aux_loss", "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
                "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids",
                "image_position_ids"),
        used_by=(f"{GRPO}._compute_loss", f"{GRPO}._generate_and_score_completions"),
        note="the plug-ins' forward hook (DPH-RL folds its rows in); the override passes the multimodal parameters "
             "on as **kwargs; FlowRL's loss runs it in place of TRL's _compute_loss. Off Triton devices it computes "
             "text-only log-probs and entropies itself (common.chunked_token_logps: the LM head in chunks), which "
             "must equal TRL's: tests/test_training_memory.py compares the two",
    ),
    TRLName(
        GRPO, "_compute_loss", "method", ("override", "read"), (GRPO_PY,),
        params=("self", "model", "inputs"), used_by=(f"{GRPO}.compute_loss",),
        note="TRL's policy loss with its KL off, plus the plug-ins' terms, inside their wrappers (the dpg plug-in's "
             "replaces it)",
    ),
    TRLName(
        GRPO, "_calculate_rewards", "method", ("override",), (GRPO_PY,),
        params=("self", "inputs", "prompts", "completions", "completion_ids_list"),
        used_by=(f"{GRPO}._generate_and_score_completions",),
        note="gathered rewards (N, K): validity, diversity metrics, the plug-ins' on_rewards",
    ),
    TRLName(
        GRPO, "_generate_and_score_completions", "method", ("override",), (GRPO_PY,),
        params=("self", "inputs"), used_by=(f"{GRPO}._prepare_inputs",),
        note="replaces the batch's advantages (plug-ins: shapings, DPG)",
    ),
    TRLName(
        GRPO, "_generate_single_turn", "method", ("override",), (GRPO_PY,),
        params=("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
        used_by=(f"{GRPO}._generate",),
        note="rollout_sampler: rlvr_div samples the rollouts with the project's decoding loop "
             "(rlvr_div.trainers.rollouts); otherwise TRL's, called as it is",
    ),
    TRLName(
        GRPO, "_save_checkpoint", "method", ("override",), (GRPO_PY,),
        params=("self", "model", "trial"), used_by=(f"{TRAINER}._maybe_log_save_evaluate",),
        note="the plug-ins' state, written before trainer_state.json",
    ),
    TRLName(
        GRPO, "_load_optimizer_and_scheduler", "method", ("override",), (GRPO_PY,),
        params=("self", "checkpoint"), used_by=(f"{TRAINER}._prepare_for_training",),
        note="the plug-ins' state, read back on resume",
    ),
    TRLName(GRPO, "_tag_names", "class_attribute", ("override",), (GRPO_PY,),
            note="model-card tags: the trainer's, then the active plug-ins' (set before TRL's __init__ adds them)"),
    # -- GRPOTrainer state, read and written through the accessors at the end of this module
    TRLName(
        GRPO, "_metrics", "instance_attribute", ("read", "write"), (SEAM_PY,),
        keys=("train", "eval"), used_by=(f"{GRPO}.log",),
        note="{mode: {name: [values]}}: the project appends its own metrics; TRL logs their means",
    ),
    TRLName(
        GRPO, "_logs", "instance_attribute", ("read", "write"), (SEAM_PY,),
        keys=("advantages", "rewards", "completion"),
        used_by=(f"{GRPO}._generate_and_score_completions", f"{GRPO}.log"),
        note="the completions log: shaped advantages replace TRL's (logged last) in place; tests read 'rewards' and "
             "'completion'",
    ),
    TRLName(
        GRPO, "_entropy_bonus_enabled", "instance_attribute", ("read",), (SEAM_PY,),
        used_by=(f"{GRPO}._compute_loss",), note="dpg adds TRL's entropy bonus to its own loss",
    ),
    TRLName(
        GRPO, "_last_world_entropy", "instance_attribute", ("read", "write"), (SEAM_PY,),
        used_by=(f"{GRPO}._compute_loss", f"{GRPO}._save_checkpoint", f"{GRPO}._load_optimizer_and_scheduler"),
        note="the adaptive entropy controller's state, which TRL saves with checkpoints",
    ),
    TRLName(
        GRPO, "_entropy_window_stats", "instance_attribute", ("read", "write"), (SEAM_PY,),
        used_by=(f"{GRPO}._compute_loss",), note="the adaptive entropy controller's per-step window",
    ),
    TRLName(
        GRPO, "eos_token_ids", "instance_attribute", ("read", "write"), (SEAM_PY,),
        used_by=(f"{GRPO}._generate_single_turn",),
        note="public, but written after TRL's __init__ (end_completions_at): the ids that end a completion and its "
             "completion mask; a task's stop text adds its tokens",
    ),
    TRLName(
        GRPO, "generation_config", "instance_attribute", ("read", "write"), (SEAM_PY,),
        used_by=(f"{GRPO}._generate_single_turn",),
        note="public; its eos_token_id is set with eos_token_ids (end_completions_at)",
    ),
    # -- transformers.Trainer
    TRLName(
        TRAINER, "_get_output_dir", "method", ("read",), (GRPO_PY,),
        params=("self", "trial"), note="the checkpoint folder the plug-ins write into",
    ),
    TRLName(
        TRAINER, "_issue_warnings_after_load", "method", ("patch",), (SEAM_PY,),
        params=("self", "load_result"), used_by=(f"{TRAINER}._load_from_checkpoint",),
        note="replaced on the trainer instance: tied weights are not reported missing on resume",
    ),
    # -- the vLLM backend (the colocated CPU engine, patched below)
    TRLName(
        VLLM_GENERATION, "_init_vllm", "method", ("patch",), (SEAM_PY,),
        params=("self",), used_by=(f"{VLLM_GENERATION}.__init__",),
        note="patched on the class for the run: the engine gets the policy's dtype, sync_weights is replaced",
    ),
    TRLName(
        VLLM_GENERATION, "_iter_named_params", "method", ("read",), (SEAM_PY,),
        params=("self",), note="the weights the replacement sync_weights reloads",
    ),
    TRLName(
        VLLM_GENERATION, "sync_weights", "method", ("patch",), (SEAM_PY,),
        params=("self",), used_by=(f"{GRPO}._generate_single_turn",),
        note="public, but replaced on the instance: listed so that a rename cannot leave the patch unused",
    ),
    TRLName(
        "trl.generation.vllm_generation", "LLM", "module_attribute", ("patch",), (SEAM_PY,),
        used_by=(f"{VLLM_GENERATION}._init_vllm",),
        note="vLLM's LLM as TRL's module imports it (only when vllm is installed); patched while _init_vllm runs",
    ),
)
# fmt: on


def resolve(ref: str) -> Any:
    """The object ``"module"``, ``"module:Name"`` or ``"module:Class.attr"`` names (ImportError, AttributeError)."""
    module, _, path = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def _source_tree(obj: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets an assignment statement binds, tuples unpacked."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets += target.elts
        else:
            out.append(target)
    return out


def init_attributes(cls: type) -> dict[str, set[str] | None]:
    """``self.<name>`` assigned in the ``__init__`` of ``cls`` or its bases, each with the string keys of the dict
    literals assigned to it (None when any value assigned to it is not a dict literal)."""
    found: dict[str, set[str] | None] = {}
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        try:
            tree = _source_tree(vars(klass)["__init__"])
        except (OSError, TypeError):  # a C or generated __init__: nothing visible
            continue
        for node in ast.walk(tree):
            for target in _assigned(node):
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                    continue
                if target.value.id != "self":
                    continue
                value = getattr(node, "value", None)
                if isinstance(value, ast.Dict) and found.get(target.attr, set()) is not None:
                    keys = {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                    found[target.attr] = found.get(target.attr, set()) | keys
                else:
                    found[target.attr] = None
    return found


def _module_level(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module outside function and class bodies (inside ``if`` and ``try`` blocks too)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield from _module_level(child)


def _module_binds(module: Any, name: str) -> bool:
    """Whether ``module``'s source binds the global ``name`` (an import, an assignment, a def): a name imported only
    when an optional package is installed still counts."""
    for node in _module_level(_source_tree(module)):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if any(isinstance(t, ast.Name) and t.id == name for t in _assigned(node)):
            return True
    return False


def _use_pattern(entry: TRLName) -> re.Pattern[str]:
    name = re.escape(entry.name)
    if entry.kind == "method":
        return re.compile(rf"\.{name}\s*\(")  # a call through self or an attribute
    if entry.kind == "module_attribute":
        return re.compile(rf"(?<![\w.]){name}\s*\(")  # a call of the module global
    return re.compile(rf"\.{name}(?!\w)")


def check_name(entry: TRLName) -> list[str]:
    """What no longer holds of one entry in the installed TRL (empty: all of it holds)."""
    head = f"{entry.label} ({'/'.join(entry.uses)} in {', '.join(entry.where)})"
    if entry.kind not in KINDS or not entry.uses or not set(entry.uses) <= set(USES):
        return [f"{head}: bad entry (kind {entry.kind!r}, uses {entry.uses!r})"]
    try:
        owner = resolve(entry.owner)
    except (ImportError, AttributeError) as exc:
        return [f"{head}: {entry.owner} not found ({exc})"]
    problems: list[str] = []
    if entry.kind == "instance_attribute":
        assigned = init_attributes(owner)
        if entry.name not in assigned:
            return [f"{head}: no longer set in {owner.__name__}.__init__"]
        keys = assigned[entry.name]
        if entry.keys and keys is None:
            problems.append(f"{head}: its keys are not visible (not a dict literal); expected {list(entry.keys)}")
        elif entry.keys:
            missing = [k for k in entry.keys if k not in keys]
            if missing:
                problems.append(f"{head}: keys {missing} missing (found {sorted(keys)})")
    elif entry.kind == "module_attribute":
        if not (hasattr(owner, entry.name) or _module_binds(owner, entry.name)):
            return [f"{head}: missing"]
    else:
        if not hasattr(owner, entry.name):
            return [f"{head}: missing"]
        if entry.kind == "method":
            found = tuple(inspect.signature(getattr(owner, entry.name)).parameters)
            if found != entry.params:
                problems.append(f"{head}: parameters changed: expected {entry.params}, found {found}")
    pattern = _use_pattern(entry)
    for ref in entry.used_by:
        try:
            source = inspect.getsource(resolve(ref))
        except (ImportError, AttributeError, OSError, TypeError) as exc:
            problems.append(f"{head}: its user {ref} not found ({exc})")
            continue
        if not pattern.search(source):
            verb = "calls" if entry.kind in ("method", "module_attribute") else "uses"
            problems.append(f"{head}: {ref} no longer {verb} it")
    return problems


def check_seam(names: Sequence[TRLName] = TRL_NAMES) -> list[str]:
    """Every way the installed TRL differs from :data:`TRL_NAMES`, one line each (empty: the seam holds)."""
    problems: list[str] = []
    seen: set[str] = set()
    for entry in names:
        if entry.label in seen:
            problems.append(f"{entry.label}: listed twice")
        seen.add(entry.label)
        problems += check_name(entry)
    return problems


def _upstream(cls: type) -> bool:
    return cls.__module__.split(".")[0] in UPSTREAM


def unlisted_overrides(cls: type, names: Sequence[TRLName] = TRL_NAMES) -> list[str]:
    """The ``_``-names (not dunders) a project class ``cls`` or its project bases define that also exist on one of
    its TRL/transformers bases (as a class attribute, or set in an ``__init__``) but are not listed as overridden."""
    upstream = [k for k in cls.__mro__ if _upstream(k)]
    project = [k for k in cls.__mro__ if k is not object and not _upstream(k)]
    listed = set()
    for entry in names:
        if "override" in entry.uses:
            try:
                owner = resolve(entry.owner)
            except (ImportError, AttributeError):
                continue
            if isinstance(owner, type) and issubclass(cls, owner):
                listed.add(entry.name)
    theirs = {n for k in upstream for n in vars(k)} | (set(init_attributes(upstream[0])) if upstream else set())
    out = []
    for klass in project:
        for name in vars(klass):
            dunder = name.startswith("__") and name.endswith("__")
            if name.startswith("_") and not dunder and name in theirs and name not in listed:
                out.append(f"{klass.__module__}:{klass.__qualname__}.{name}")
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Accessors: the only places rlvr_div reads or writes TRL's private state


def metrics(trainer: Any, mode: str) -> dict[str, list[float]]:
    """TRL's metric lists of ``mode`` ("train" or "eval"): append a value to log its mean at the next log step."""
    return trainer._metrics[mode]


def logged_advantages(trainer: Any) -> MutableSequence[float]:
    """TRL's completions-log advantages (a bounded deque; the last batch's are the last entries), edited in place."""
    return trainer._logs["advantages"]


def entropy_bonus_enabled(trainer: Any) -> bool:
    """Whether TRL's entropy bonus acts (``entropy_coef`` non-zero or adaptive)."""
    return trainer._entropy_bonus_enabled


def last_world_entropy(trainer: Any) -> float:
    """The adaptive entropy controller's last optimizer step's mean entropy over all processes."""
    return trainer._last_world_entropy


def set_last_world_entropy(trainer: Any, value: float) -> None:
    """Set :func:`last_world_entropy` (saved with TRL's checkpoints)."""
    trainer._last_world_entropy = value


def entropy_window(trainer: Any) -> Any:
    """The adaptive entropy controller's (Σ entropy, Σ tokens) of the current optimizer step, or None."""
    return trainer._entropy_window_stats


def set_entropy_window(trainer: Any, stats: Any) -> None:
    """Set :func:`entropy_window` (None starts a new window)."""
    trainer._entropy_window_stats = stats


def end_completions_at(trainer: Any, token_ids: Sequence[int]) -> None:
    """Make the trainer's HF generation end a completion at any of ``token_ids`` as at EOS: generation stops there
    and the completion mask ends with that token (a task's stop text, :func:`rlvr_div.sampling.stop_token_ids`)."""
    ids = trainer.eos_token_ids  # extended in place: TRL's generation kwargs hold the same list
    ids.extend(int(i) for i in dict.fromkeys(token_ids) if int(i) not in ids)
    if getattr(trainer, "generation_config", None) is not None:
        trainer.generation_config.eos_token_id = list(ids)


def per_token_logps_params() -> tuple[str, ...]:
    """The parameter names of the per-token forward that :func:`per_token_logps` calls, ``self`` first, as listed."""
    forward = next(e for e in TRL_NAMES if e.label == f"{GRPO}._get_per_token_logps_and_entropies")
    return tuple(forward.params or ())


def per_token_logps(trainer: Any, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                    **kwargs: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """(log-probs, entropies, aux loss) of the trainer's per-token forward, TRL's ``_get_per_token_logps_and_entropies``
    as the trainer defines it (the project's override, so the plug-ins' ``forward`` and ``on_logps`` hooks run):
    ``kwargs`` are its keyword parameters (``batch_size``, ``compute_entropy``, ``compute_aux_loss``, multimodal)."""
    return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Patches: the only places rlvr_div replaces a TRL or transformers method for a run


@contextmanager
def colocated_vllm_on_cpu(training: Any) -> Iterator[None]:
    """While the trainer is built: make TRL's colocated vLLM engine work with the CPU build of vLLM.

    - Weight sync: TRL pushes each parameter with ``model.load_weights([(name, param)])``, which needs the
      checkpoint-format parameters (and their ``weight_loader``); vLLM's CPU backend repacks each linear layer's weight
      for its GEMM kernels after loading and drops the original, so the first sync fails. vLLM's in-place reload
      (``model_runner.reload_weights``) restores the checkpoint layout, loads and re-packs; it re-packs only layers
      that received weights, so a tied LM head (which keeps its own packed copy of the embedding) is re-packed after.
    - dtype: TRL builds ``LLM(model=...)`` without one and vLLM's ``auto`` serves a float32 checkpoint in bfloat16;
      the engine gets the policy's dtype, so sampler and trainer log-probs differ only by kernels, not by rounding.

    A no-op unless ``use_vllm`` in colocate mode on vLLM's CPU platform.
    """
    if not (getattr(training, "use_vllm", False) and training.vllm_mode == "colocate"):
        yield
        return
    from trl.generation import vllm_generation
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        yield
        return
    cls = vllm_generation.VLLMGeneration
    init_vllm = cls._init_vllm

    def _init_vllm(gen: Any) -> None:
        llm = vllm_generation.LLM
        vllm_generation.LLM = functools.partial(llm, dtype=str(gen.model.dtype).removeprefix("torch."))
        try:
            init_vllm(gen)
        finally:
            vllm_generation.LLM = llm
        gen.sync_weights = functools.partial(_reload_vllm_weights, gen)

    cls._init_vllm = _init_vllm
    try:
        yield
    finally:
        cls._init_vllm = init_vllm


def _reload_vllm_weights(gen: Any) -> None:
    """``VLLMGeneration.sync_weights`` for the colocated CPU engine (see :func:`colocated_vllm_on_cpu`)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    runner = gen.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=gen._iter_named_params(), is_checkpoint_format=True)
    for module in runner.get_model().modules():
        if isinstance(module, VocabParallelEmbedding):  # embedding and (tied) LM head: re-pack from the new weight
            module.quant_method.process_weights_after_loading(module)
    gen.llm.reset_prefix_cache()


def tied_weights_are_not_missing(trainer: Any) -> None:
    """On resume the Trainer loads the checkpoint with ``strict=False`` and warns about every missing key; a tied
    parameter (``lm_head.weight`` = the input embedding) is stored once, so it is reported missing although it is
    loaded through its twin. Drop such keys before the warning; a key that is really missing is still reported."""
    issue = getattr(trainer, "_issue_warnings_after_load", None)
    if issue is None:
        return

    def issue_untied(load_result: Any) -> Any:
        shared: dict[int, list[str]] = {}
        for name, param in trainer.model.named_parameters(remove_duplicate=False):
            shared.setdefault(id(param), []).append(name)
        missing = set(getattr(load_result, "missing_keys", []))
        tied = {n for names in shared.values() if len(names) > 1 and set(names) - missing for n in names}
        if missing & tied and hasattr(load_result, "_replace"):
            load_result = load_result._replace(missing_keys=[k for k in load_result.missing_keys if k not in tied])
        return issue(load_result)

    trainer._issue_warnings_after_load = issue_untied
