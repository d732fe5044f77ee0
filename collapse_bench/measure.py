"""What the collapse benchmark measures on one model and one split of a task.

Every task the benchmark takes enumerates its valid completions (``TaskSpec.valid_completions``; the config loader
refuses others) and is measured exactly by teacher forcing (:mod:`rlvr_div.exact`): validity, pass@k, the distance
KL(p*‖π(·|valid)) to the filtered model, the correct-answer entropy, the expected number of distinct valid answers
and the expected p*-mass covered in k draws. Sampled pass@k for other tasks is ``rlvr-div eval``'s.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.records import write_json
from rlvr_div.errors import ConfigError
from rlvr_div.exact import expected_lost_gained, pass_at, pass_at_one, prompt_metrics, sequence_logprobs

# the smallest difference in problems that is called a difference (a crossover, the base ahead): half a problem
MIN_PROBLEMS = 0.5
PER_PROMPT = ("mu", "kl_pstar", "kl_uniform", "entropy_valid", "effective_answers", "n90", "cov90", "top_share")
# the shifted verifier: it rejects the base's SHIFT_TOP likeliest valid answers of each prompt, accepts the others
SHIFT_TOP = 3


def model_checkpoint(model: str, gguf_file: str | None = None) -> str:
    """The directory ``from_pretrained`` loads for ``model``: a built-in tiny base's name, a path or hub id, or
    ``package:NAME`` (the installed Python package NAME's directory, where a GGUF model ships), with ``gguf_file`` the
    GGUF file in it (dequantised once, cached)."""
    from rlvr_div.models import checkpoint_path
    from rlvr_div.models.gguf_packages import package_reference

    return checkpoint_path(package_reference(model), gguf_file)


def split_rows(task: str, split: str, options: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a task split (as plain dicts)."""
    from rlvr_div.tasks import get_task

    return [dict(r) for r in get_task(task, split=split, **options)]


def valid_sets(task: str, rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    from rlvr_div.tasks import get_task_spec

    enumerate_valid = get_task_spec(task).valid_completions
    if enumerate_valid is None:
        raise ConfigError(f"task {task!r} cannot enumerate its valid completions, so it cannot be measured exactly")
    return [enumerate_valid(r) for r in rows]


@dataclass(frozen=True)
class Structure:
    """What a task says about its prompts beyond validity (``TaskSpec.strategy``, ``TaskSpec.class_column``): per
    prompt, whether each valid completion takes the minority strategy, and the prompt's class."""

    minority: list[list[bool]] | None = None
    classes: list[str] | None = None


def has_classes(task: str) -> bool:
    """Whether a task sorts its prompts into classes (``TaskSpec.class_column``)."""
    from rlvr_div.tasks import get_task_spec

    return get_task_spec(task).class_column is not None


def task_structure(task: str, rows: Sequence[dict[str, Any]]) -> Structure | None:
    """The :class:`Structure` of a task split, None for a task that defines neither strategies nor classes."""
    from rlvr_div.tasks import get_task_spec

    spec = get_task_spec(task)
    if spec.strategy is None and spec.class_column is None:
        return None
    minority = None
    if spec.strategy is not None and spec.minority_strategy is not None:
        minority = [[spec.strategy(y) == spec.minority_strategy for y in ys] for ys in valid_sets(task, rows)]
    classes = [str(r[spec.class_column]) for r in rows] if spec.class_column else None
    return Structure(minority, classes)


def class_indices(classes: Sequence[str]) -> dict[str, list[int]]:
    """class → the indices of its prompts, classes in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, c in enumerate(classes):
        out.setdefault(c, []).append(i)
    return out


def minority_share(logps: Sequence[float], flags: Sequence[bool]) -> float:
    """π(minority strategy | valid) = Σ_{y valid, minority} π(y) / Σ_{y valid} π(y), from log π(y) of the valid y."""
    lp = np.asarray(logps, float)
    w = np.exp(lp - lp.max())
    return float(w[np.asarray(flags, bool)].sum() / w.sum())


def mean_pass_at(mu: Sequence[float], k: int) -> float:
    """The mean over prompts of pass@k = 1 − (1 − μ)^k (scalar arithmetic, prompt by prompt)."""
    return float(np.mean([pass_at_one(m, k) for m in mu]))


def class_summary(
    mu: Sequence[float], base_mu: Sequence[float], share: Sequence[float] | None, ks: Sequence[int]
) -> dict[str, Any]:
    """One class of prompts: mean validity, pass@k, the minority strategy's share (when known), and the expected
    problems lost and gained against the base at every k (expected counts, :func:`expected_lost_gained`)."""
    out: dict[str, Any] = {"problems": len(mu), "mu": float(np.mean(mu))}
    out["pass_at"] = {str(k): mean_pass_at(mu, k) for k in ks}
    if share is not None:
        out["minority_share"] = float(np.mean(share))
    out["lost_at"], out["gained_at"] = {}, {}
    for k in ks:
        out["lost_at"][str(k)], out["gained_at"][str(k)] = expected_lost_gained(base_mu, mu, k)
    return out


def logprobs_of(
    model_path: str, task: str, rows: Sequence[dict[str, Any]], temperature: float, batch_size: int = 512
) -> list[list[float]]:
    """log π(y ⊕ EOS | x) for every valid y of every row, under the model at ``model_path``."""
    from transformers.utils import logging as hf_logging

    from rlvr_div.models import load_model, load_tokenizer

    tok = load_tokenizer(model_path)
    shown = hf_logging.is_progress_bar_enabled()
    if Path(model_path).is_dir():  # a "Loading weights" bar for each measured split says nothing (a download's stays)
        hf_logging.disable_progress_bar()
    try:
        model = load_model(model_path).eval()
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    from rlvr_div.tasks import get_task_spec

    eos = get_task_spec(task).ends_with_eos
    out = sequence_logprobs(
        model, tok, [r["prompt"] for r in rows], valid_sets(task, rows), temperature, batch_size, append_eos=eos
    )
    return [lp.tolist() for lp in out]


def measured_split(
    model_path: str,
    task: str,
    rows: Sequence[dict[str, Any]],
    temperature: float,
    ks: Sequence[int],
    batch_size: int = 512,
    structure: Structure | None = None,
) -> dict[str, Any]:
    """One split measured exactly under the model at ``model_path``: the prompts, their valid sets, log π(y | x) for
    every valid y (:func:`logprobs_of`) and their :func:`summarise` against themselves (the base's own numbers)."""
    prompts, valid = [r["prompt"] for r in rows], valid_sets(task, rows)
    logps = logprobs_of(model_path, task, rows, temperature, batch_size)
    return {"prompts": prompts, "valid": valid, "logps": logps,
            "summary": summarise(prompts, valid, logps, logps, ks, structure)}  # fmt: skip


def cached_base(
    path: Path,
    what: dict[str, Any],
    rows: dict[str, list[dict[str, Any]]],
    measure: Callable[[str, list[dict[str, Any]]], dict[str, Any]],
) -> dict[str, Any]:
    """The base's exact measurement in ``path`` (``what`` — the model's ``fingerprint``, the task, its options — then
    ``splits``). A file made with the same ``what`` on the prompts of ``rows`` (split → rows) is read; one made with
    anything else is refused; without a file every split is measured with ``measure(split, rows)`` and written."""
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("fingerprint") != what["fingerprint"]:
            raise ConfigError(f"the base model changed since {path} was written; pass --fresh or another --out")
        if {k: data.get(k) for k in what} != what:
            raise ConfigError(f"{path} measured the base on another task, options or temperature; pass --fresh or "
                              "another --out")  # fmt: skip
        for split in sorted(set(rows) | set(data["splits"])):
            if data["splits"].get(split, {}).get("prompts") != [r["prompt"] for r in rows.get(split, [])]:
                raise ConfigError(f"{path} measured other {split} prompts than this config chooses; pass --fresh "
                                  "or another --out")  # fmt: skip
        return data
    data = {**what, "splits": {split: measure(split, r) for split, r in rows.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, data)
    return data


def summarise(
    prompts: Sequence[str],
    valid: Sequence[Sequence[str]],
    logps: Sequence[Sequence[float]],
    base_logps: Sequence[Sequence[float]],
    ks: Sequence[int],
    structure: Structure | None = None,
) -> dict[str, Any]:
    """Per-prompt exact numbers and their means over prompts; lost/gained against the base at every k. With a
    ``structure``: the minority strategy's share of the valid mass per prompt (``minority_share``, the base's
    ``base_minority_share``) and a :func:`class_summary` per prompt class (``by_class``)."""
    from rlvr_div.exact import ExactPrompt

    rows = [
        prompt_metrics(ExactPrompt(p, tuple(v), np.asarray(lp, float), np.asarray(blp, float)), ks)
        for p, v, lp, blp in zip(prompts, valid, logps, base_logps, strict=True)
    ]
    mean: dict[str, Any] = {k: float(np.mean([r[k] for r in rows])) for k in PER_PROMPT}
    for key in ("pass_at", "distinct_at", "cov_at"):
        mean[key] = {str(k): float(np.mean([r[key][str(k)] for r in rows])) for k in ks}
    base_mu, mu = [r["base_mu"] for r in rows], [r["mu"] for r in rows]
    mean["lost_at"], mean["gained_at"] = {}, {}
    for k in ks:
        mean["lost_at"][str(k)], mean["gained_at"][str(k)] = expected_lost_gained(base_mu, mu, k)
    mean["base_ahead_at_1"] = mean_pass_at(base_mu, 1) >= mean["pass_at"]["1"] if "1" in mean["pass_at"] else None
    mean["crossover_k"] = crossover_k(mean, ks)
    mean["problems"] = len(rows)
    per_prompt = {k: [r[k] for r in rows] for k in (*PER_PROMPT, "top_answer")}
    shifted = shifted_summary(logps, base_logps, ks)
    if shifted is not None:
        per_prompt["shifted_mass"] = shifted.pop("per_prompt")
        mean["shifted"] = shifted
    if structure is not None:
        share = None
        if structure.minority is not None:
            share = [minority_share(lp, f) for lp, f in zip(logps, structure.minority, strict=True)]
            per_prompt["minority_share"] = share
            per_prompt["base_minority_share"] = [minority_share(b, f) for b, f in zip(base_logps, structure.minority)]
            mean["minority_share"] = float(np.mean(share))
            mean["base_minority_share"] = float(np.mean(per_prompt["base_minority_share"]))
        if structure.classes is not None:
            mean["by_class"] = {}
            for c, idx in class_indices(structure.classes).items():
                mean["by_class"][c] = class_summary(
                    [mu[i] for i in idx], [base_mu[i] for i in idx], None if share is None else [share[i] for i in idx],
                    ks,
                )  # fmt: skip
    return {"mean": mean, "per_prompt": per_prompt}


def shifted_masses(
    logps: Sequence[Sequence[float]], base_logps: Sequence[Sequence[float]], top: int = SHIFT_TOP
) -> list[float] | None:
    """π(S|x) per prompt, where S(x) is the valid set of x less the base's ``top`` likeliest answers (ties: the first
    listed): the mass a held-out verifier that accepts only S would pass. None for a task whose valid sets all have
    at most ``top`` answers (the verifier would accept nothing)."""
    if not base_logps or max(len(b) for b in base_logps) <= top:
        return None
    out = []
    for lp, blp in zip(logps, base_logps, strict=True):
        kept = np.argsort(-np.asarray(blp, float), kind="stable")[top:]
        out.append(float(np.exp(np.asarray(lp, float)[kept]).sum()))
    return out


def shifted_summary(logps: Sequence[Sequence[float]], base_logps: Sequence[Sequence[float]], ks: Sequence[int]
                    ) -> dict[str, Any] | None:  # fmt: skip
    """Pass@k under the shifted verifier, exactly: 1 − (1 − π(S|x))^k per prompt (:func:`shifted_masses`), its mean
    over prompts at each k, the base's, and the problems lost and gained against the base under that verifier (the
    question: does diversity a method kept pass a check that training never asked for?). None: no such verifier."""
    mass = shifted_masses(logps, base_logps)
    if mass is None:
        return None
    base = shifted_masses(base_logps, base_logps)
    assert base is not None
    out: dict[str, Any] = {"per_prompt": mass, "mass": float(np.mean(mass)), "base_mass": float(np.mean(base)),
                           "pass_at": {}, "base_pass_at": {}, "lost_at": {}, "gained_at": {}}  # fmt: skip
    for k in ks:
        out["pass_at"][str(k)] = float(np.mean(pass_at(mass, k)))
        out["base_pass_at"][str(k)] = float(np.mean(pass_at(base, k)))
        out["lost_at"][str(k)], out["gained_at"][str(k)] = expected_lost_gained(base, mass, k)
    return out


def crossover_k(mean: dict[str, Any], ks: Sequence[int], min_problems: float = MIN_PROBLEMS) -> int | None:
    """The smallest k at which the base overtakes a model that leads it at k = 1 by at least ``min_problems``
    problems: lost@k − gained@k ≥ min_problems (expected counts, whose difference is the number of problems by which
    the base's pass@k exceeds the model's); None: it never does so, or the model does not lead at k = 1 (flagged by
    ``base_ahead_at_1``). A crossover of a hundredth of a problem is not a crossover."""
    if mean.get("base_ahead_at_1"):
        return None
    lost, gained = mean.get("lost_at") or {}, mean.get("gained_at") or {}
    return next((k for k in ks if str(k) in lost and lost[str(k)] - gained[str(k)] >= min_problems), None)


def trajectory_point(mean: dict[str, Any], kmax: int) -> dict[str, float]:
    """The numbers a training path records at each of its points: validity, the exact diversity and cov@K; with a
    many-answer task also the shifted verifier's mass π(S) and pass@K (:func:`shifted_summary`); with a
    task structure also the minority strategy's share and, per prompt class c, ``mu_<c>``, ``pass_kmax_<c>`` and
    ``minority_share_<c>``."""
    point = {
        "mu": mean["mu"],
        "effective_answers": mean["effective_answers"],
        "kl_pstar": mean["kl_pstar"],
        "kl_uniform": mean.get("kl_uniform"),  # results written before it was measured lack it
        "cov_at_kmax": mean["cov_at"][str(kmax)],
    }
    if "minority_share" in mean:
        point["minority_share"] = mean["minority_share"]
    if "shifted" in mean:
        point["shifted_mass"] = mean["shifted"]["mass"]
        point["shifted_pass_kmax"] = mean["shifted"]["pass_at"][str(kmax)]
    for c, entry in (mean.get("by_class") or {}).items():
        point[f"mu_{c}"] = entry["mu"]
        point[f"pass_kmax_{c}"] = entry["pass_at"][str(kmax)]
        if "minority_share" in entry:
            point[f"minority_share_{c}"] = entry["minority_share"]
    return point


def path_value_at(path: list[dict[str, Any]], mu: float, key: str) -> float | None:
    """``key`` where a training path (points ``{"step", "mu", key}``) first reaches validity ``mu``: linear in μ
    between the two consecutive points (by step) whose validities bracket ``mu``; None if no segment does (the run
    never reached that validity, or ``mu`` lies below every point)."""
    points = sorted(path, key=lambda p: p["step"])
    for a, b in zip(points, points[1:]):
        lo, hi = sorted((a["mu"], b["mu"]))
        if lo <= mu <= hi:
            if hi == lo:
                return float(a[key])
            w = (mu - a["mu"]) / (b["mu"] - a["mu"])
            return float(a[key] + w * (b[key] - a[key]))
    return float(points[0][key]) if len(points) == 1 and points[0]["mu"] == mu else None


PER_PROMPT_PATH_KEYS = ("mu", "kl_pstar", "effective_answers")  # what a point's ``per_prompt`` holds, per prompt


def path_point_due(step: int, last_step: int, every: int, sink: Sequence[dict[str, Any]],
                   dense: tuple[float, int] | None = None) -> bool:  # fmt: skip
    """Whether the path takes a point after optimiser step ``step``: every ``every``-th step and the last; with
    ``dense`` = (above_mu, dense_every) also every ``dense_every``-th step once the last point's μ exceeds above_mu."""
    if step % every == 0 or step == last_step:
        return True
    return dense is not None and bool(sink) and sink[-1]["mu"] > dense[0] and step % dense[1] == 0


def exact_trajectory(
    prompts: Sequence[str],
    valid: Sequence[Sequence[str]],
    base_logps: Sequence[Sequence[float]],
    ks: Sequence[int],
    every: int,
    temperature: float,
    sink: list[dict[str, Any]],
    stop: Callable[[list[dict[str, Any]]], bool] | None = None,
    append_eos: bool = True,
    batch_size: int = 512,
    structure: Structure | None = None,
    dense: tuple[float, int] | None = None,
    per_prompt: bool = False,
    shared_prefix: bool = False,
) -> Any:
    """A ``TrainerCallback`` that measures the training policy exactly on ``prompts`` (teacher forcing every valid
    answer, no sampling, so the run's random stream is untouched) after every ``every``-th optimiser step and the
    last, and appends ``{"step": t, **trajectory_point}`` to ``sink``: the run's own path from the base to where it
    ends, against which another run's end point is compared at the same validity. ``stop(sink)`` True after a point
    ends training there (a plateau criterion). ``append_eos`` False: the valid strings carry their own end
    (``TaskSpec.ends_with_eos``). ``structure``: the prompts' :class:`Structure`, whose numbers the points then
    carry too. ``dense`` = (above_mu, dense_every): points every ``dense_every`` steps as well once the last point's
    μ exceeds above_mu (:func:`path_point_due`). ``per_prompt``: each point also holds ``per_prompt``, the prompts'
    own :data:`PER_PROMPT_PATH_KEYS` in ``prompts``' order (a bootstrap over prompts reads the path from them).
    ``shared_prefix``: each prompt's forward is shared by its valid answers
    (:func:`rlvr_div.exact.sequence_logprobs`)."""
    import torch
    from transformers import TrainerCallback

    kmax = max(ks)

    class ExactTrajectory(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):  # noqa: ANN001
            if not path_point_due(state.global_step, state.max_steps, every, sink, dense):
                return
            was_training = model.training
            model.eval()
            with torch.no_grad():
                logps = sequence_logprobs(model, processing_class, prompts, valid, temperature, batch_size, append_eos,
                                          shared_prefix)  # fmt: skip
            model.train(was_training)
            summary = summarise(prompts, valid, logps, base_logps, ks, structure)
            point = {"step": state.global_step, **trajectory_point(summary["mean"], kmax)}
            if per_prompt:
                point["per_prompt"] = {k: [float(v) for v in summary["per_prompt"][k]] for k in PER_PROMPT_PATH_KEYS}
            sink.append(point)
            if stop is not None and stop(sink):
                control.should_training_stop = True

    return ExactTrajectory()


def training_summary(metrics_path: Path, window: int = 10) -> dict[str, Any]:
    """Steps trained, the mean reward (the rollouts' validity) over the first and the last ``window`` logged rewards
    (steps that sampled), and the first step at which their running mean over ``window`` reached 0.9 (None if
    never)."""
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    logged = [r for r in rows if "reward" in r]
    rewards = [r["reward"] for r in logged]
    # the last indices of the windows whose mean reward reached 0.9
    ends = [i for i in range(window - 1, len(rewards)) if statistics.mean(rewards[i - window + 1 : i + 1]) >= 0.9]
    reached = logged[ends[0]]["step"] if ends else None
    return {
        "steps": max((r["step"] for r in rows), default=0),  # with num_iterations > 1 not every step samples
        "reward_first": statistics.mean(rewards[:window]) if rewards else None,
        "reward_last": statistics.mean(rewards[-window:]) if rewards else None,
        "step_reached_0.9": reached,
        "seconds": sum(r.get("step_time", 0.0) for r in rows),
    }
