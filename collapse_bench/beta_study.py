"""The β study (issue 24): does the diversity of a neural policy shrink as the KL coefficient β falls, once each
objective has converged, and is it the objective, the sampler or the parameterisation?

``rlvr-div beta-study --config bench/beta.yaml --out bench/results/beta`` (resumable at the granularity of a run,
and within a sampled run or point from its last checkpoint with ``checkpoint_every``); its configuration is
:mod:`collapse_bench.beta_spec`.

A run is (arm, β, seed). An arm is
- **sampled**: ``rlvr-div train`` from the arm's recipe with the study's shared settings and the arm's own, its
  coefficient key set to β; the training prompts are measured exactly (teacher forcing every valid answer) every
  ``path_every`` steps, and training stops at the plateau (:func:`plateau_step`) or at ``max_steps``;
- **exact**: Adam ascent on the exact objective J = μ − β·KL(π̄‖ā) over the valid sets of the training prompts
  (:mod:`rlvr_div.exact.objective`): no sampling, hence no random stream at all (its seeds would give identical runs,
  so it runs once per β), with the sampled arms' optimiser (AdamW, no weight decay, gradient norm clipped at
  ``max_grad_norm``, 1 as in the Hugging Face Trainer); it trains its whole budget (its own ``max_steps``) and its
  plateau step is only recorded: a slow drift or a late instability after a first plateau is what it is there to
  show; its path also records the objective J and the gradient norm;
- **anneal**: the exact objective again, to convergence rather than for a fixed budget: each β warm-starts from the
  end of the β before it (same start; the arm's β values strictly decrease), the learning rate decays on a cosine
  from ``learning_rate`` to ``final_learning_rate`` within each β, the policy can be float64 (``dtype``), and each
  seed is a perturbed start (the base's weights plus ``perturbation``·rms(w)·N(0, 1) per tensor); its path also
  records J* − J (J* the closed-form maximum) and KL(π̄‖p̄_β); the end weights of each β are kept under
  ``weights/`` for the next β (and a resumed study);
- a **point**: a method with no β (stock GRPO, α-DPG), trained once per seed under the same plateau rule.

Output directory::

    study.json                      the checked configuration and the code commit of each invocation
    base.json                       the base model measured exactly on the training and test prompts
    runs/<arm>/<beta>/seed<s>/result.json   the path, the plateau step (or none), the end measurements
    runs/<arm>/<beta>/seed<s>/checkpoint-N/, progress.json   an unfinished run's last checkpoint and progress, with
                                    ``checkpoint_every`` (:mod:`collapse_bench.run_progress`); gone once it finishes
    weights/<arm>/<beta>/seed<s>/   an anneal run's end weights, the next β's start (not part of the report)
    beta.md, beta.json, *.png       the report (:mod:`collapse_bench.beta_report`)
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from pathlib import Path
from statistics import mean
from typing import Any

from collapse_bench.beta_spec import (
    SPLITS,
    Arm,
    Convergence,
    Study,
    StudyRun,
    check_arm_names,
    predecessor,
    run_identity,
    study_runs,
)
from collapse_bench.engine import (
    RESULT,
    fresh_run_dir,
    logged,
    open_state,
    read_result,
    record_run,
    run_dir,
    run_pool,
    train_or_raise,
    worker_code,
)
from collapse_bench.measure import (
    PER_PROMPT_PATH_KEYS,
    cached_base,
    exact_trajectory,
    measured_split,
    model_checkpoint,
    split_rows,
    summarise,
    training_summary,
    trajectory_point,
)
from collapse_bench.run_progress import Progress, progress_saver, saved_progress
from collapse_bench.spec import recipe_argv, run_settings
from eval.records import write_json
from rlvr_div.models.gguf_packages import package_reference

STATE = "study.json"
WEIGHTS = "weights"
BASE = "base.json"


def plateau_step(path: list[dict[str, Any]], rule: Convergence) -> int | None:
    """The step of the last path point if the run has plateaued there (see :class:`Convergence`), else None."""
    if not path:
        return None
    s = path[-1]["step"]
    if s < rule.min_steps:
        return None
    width = rule.window * s
    last = [p for p in path if s - width < p["step"] <= s]
    before = [p for p in path if s - 2 * width < p["step"] <= s - width]
    if len(last) < 2 or len(before) < 2:
        return None
    for key in ("mu", "effective_answers"):
        now, then = mean(p[key] for p in last), mean(p[key] for p in before)
        if abs(now - then) > rule.tolerance * abs(now):
            return None
    return s


def result_of(out: Path, study: Study, run: StudyRun) -> dict[str, Any] | None:
    """A run's current result (:func:`collapse_bench.engine.read_result` at the run's identity)."""
    return read_result(out, run.key, run_identity(study, run))


def finished_results(study: Study, out: Path) -> tuple[list[tuple[StudyRun, dict[str, Any]]], list[str]]:
    """The study's finished runs with their results, in :func:`study_runs` order, and the keys of the others."""
    done, missing = [], []
    for run in study_runs(study):
        result = result_of(out, study, run)
        if result is None:
            missing.append(run.key)
        else:
            done.append((run, result))
    return done, missing


# --------------------------------------------------------------------------------------------- the base


def study_rows(study: Study, split: str) -> list[dict[str, Any]]:
    """The measured prompts of a split: its first ``prompts[split]`` rows, or all of them."""
    rows = split_rows(study.task, split, study.task_options)
    return rows[: study.prompts.get(split, len(rows))]


def measure_base(study: Study, out: Path) -> dict[str, Any]:
    """The base model measured exactly on the training and test prompts (cached in ``base.json`` by
    :func:`collapse_bench.measure.cached_base`)."""
    from rlvr_div.models.fingerprint import model_fingerprint

    fingerprint = model_fingerprint(package_reference(study.model), gguf_file=study.gguf_file)
    what = {"fingerprint": fingerprint, "task": study.task, "task_options": study.task_options}
    temperature = float(study.common.get("temperature", 1.0))

    def measure(split: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return measured_split(model_checkpoint(study.model, study.gguf_file), study.task, rows, temperature, study.ks,
                              study.measure_batch_size)  # fmt: skip

    return cached_base(out / BASE, what, {split: study_rows(study, split) for split in SPLITS}, measure)


# --------------------------------------------------------------------------------------------- one run


def reached_mu(path: list[dict[str, Any]], rule: Convergence) -> bool:
    """Whether the last path point's validity reached ``stop_at_mu`` (never without one)."""
    return rule.stop_at_mu is not None and bool(path) and path[-1]["mu"] >= rule.stop_at_mu


def _stopper(study: Study):  # noqa: ANN202
    return lambda path: plateau_step(path, study.convergence) is not None or reached_mu(path, study.convergence)


def _append_eos(study: Study) -> bool:
    from rlvr_div.tasks import get_task_spec

    return get_task_spec(study.task).ends_with_eos


def _end_measurements(model: Any, tokenizer: Any, base: dict[str, Any], study: Study, seed: int) -> dict[str, Any]:
    """The exact numbers on both splits and, with ``samples``, the sampled validity and the mass on non-canonical
    tokenisations (:mod:`rlvr_div.exact.noncanonical`) beside them."""
    from rlvr_div.exact import sequence_logprobs
    from rlvr_div.exact.noncanonical import sample_tokenisations, summarise_tokenisations

    temperature = float(study.common.get("temperature", 1.0))
    eos = _append_eos(study)
    out = {}
    for split in SPLITS:
        b = base["splits"][split]
        logps = sequence_logprobs(model, tokenizer, b["prompts"], b["valid"], temperature,
                                  batch_size=study.measure_batch_size, append_eos=eos,
                                  shared_prefix=study.measure_shared_prefix)  # fmt: skip
        out[split] = summarise(b["prompts"], b["valid"], [lp.tolist() for lp in logps], b["logps"], study.ks)
        if study.samples:
            counts = sample_tokenisations(model, tokenizer, b["prompts"], b["valid"], n=study.samples, append_eos=eos,
                                          seed=seed, temperature=temperature)  # fmt: skip
            out[split]["sampling"] = summarise_tokenisations(counts)
            out[split]["sampling"]["per_prompt"] = [[c.samples, c.valid, c.canonical] for c in counts]
    return out


def _trained_model(directory: Path) -> Any:
    """The trained policy in ``directory``: the model, or a LoRA adapter merged into its base."""
    from rlvr_div.models import adapter_base, load_model

    base = adapter_base(directory)
    if base is None:
        return load_model(str(directory)).eval()
    from peft import PeftModel

    return PeftModel.from_pretrained(load_model(base), str(directory)).merge_and_unload().eval()


def train_settings(study: Study, run: StudyRun, directory: Path | str) -> dict[str, Any]:
    """``rlvr-div train``'s settings for ``run`` (its arm's recipe gives the rest): the study's model and shared
    settings, the arm's own, its β under the arm's key, the task's training split, the seed and ``directory``."""
    arm = study.arm(run.arm)
    settings: dict[str, Any] = {"model_name_or_path": package_reference(study.model), **study.common, **arm.overrides}
    if study.gguf_file:
        settings["gguf_file"] = study.gguf_file
    if run.beta is not None:
        settings[arm.key] = run.beta
    return settings | run_settings(study.task, study.task_options, run.seed, directory)


def execute_sampled(
    study: Study, out: Path, run: StudyRun, base: dict[str, Any], progress: Progress | None = None
) -> dict[str, Any]:
    """Train a sampled arm or a point through ``rlvr-div train`` with the exact path and the plateau stop. With the
    study's ``checkpoint_every``, ``progress`` is the run's (:mod:`collapse_bench.run_progress`): its path goes on
    from ``progress.path`` and training from ``progress.checkpoint`` when set."""
    from rlvr_div.models import load_tokenizer

    arm = study.arm(run.arm)
    directory = out / "runs" / run.key
    settings = train_settings(study, run, directory)
    b = base["splits"]["train"]
    temperature = float(study.common.get("temperature", 1.0))
    path = progress.path if progress is not None else []
    if not path:
        path.append({"step": 0, **trajectory_point(b["summary"]["mean"], max(study.ks))})
        if study.path_per_prompt:
            path[0]["per_prompt"] = {k: b["summary"]["per_prompt"][k] for k in PER_PROMPT_PATH_KEYS}
    dense = None if study.path_dense is None else (study.path_dense.above_mu, study.path_dense.every)
    callback = exact_trajectory(b["prompts"], b["valid"], b["logps"], study.ks, study.path_every, temperature, path,
                                stop=_stopper(study), append_eos=_append_eos(study),
                                batch_size=study.measure_batch_size, dense=dense,
                                per_prompt=study.path_per_prompt,
                                shared_prefix=study.measure_shared_prefix)  # fmt: skip
    callbacks = [callback]
    if progress is not None:  # checkpoints every checkpoint_every steps, the progress after every step
        settings |= {"save_strategy": "steps", "save_steps": study.checkpoint_every, "save_total_limit": 1}
        if progress.checkpoint is not None:
            settings |= {"overwrite_output_dir": False, "resume_from_checkpoint": progress.checkpoint}
        callbacks.append(progress_saver(directory, run_identity(study, run), progress))
    trained = directory
    if progress is not None and progress.checkpoint is not None and _trained_to_end(study, arm, progress):
        trained = Path(progress.checkpoint)  # the killed invocation had ended training there: measure, train no more
    else:
        train_or_raise(recipe_argv(arm.recipe, settings), callbacks, run.key)
    model = _trained_model(trained)
    measured = _end_measurements(model, load_tokenizer(str(trained)), base, study, run.seed)
    body = {"path": path, "train": training_summary(directory / "metrics.jsonl"), "splits": measured}
    return body | ({"resumed_at": progress.resumed_at} if progress is not None and progress.resumed_at else {})


def _trained_to_end(study: Study, arm: Arm, progress: Progress) -> bool:
    """Whether the checkpoint a run resumes from (step c) is where its training ended: c is the step budget, or c
    is a path point that met the stop rule. Resumed there, the Trainer would train on (past the budget when it is not
    a whole number of epochs, or to the next path point), so the run is measured from that checkpoint instead."""
    step = progress.resumed_at[-1]
    return step >= _budget(study, arm)[1] or (progress.path[-1]["step"] == step and _stopper(study)(progress.path))


def _budget(study: Study, arm: Arm) -> tuple[float, int]:
    """An arm's learning rate and step budget: its own where set, else the study's shared settings."""
    lr = float(arm.learning_rate if arm.learning_rate is not None else study.common.get("learning_rate", 3e-4))
    return lr, int(arm.max_steps or study.common["max_steps"])


def weights_path(out: Path, run: StudyRun) -> Path:
    """Where an anneal run keeps its end weights (a state dict), the next β's start."""
    return out / WEIGHTS / run.key / "model.pt"


def perturb(model: Any, scale: float, seed: int) -> None:
    """w ← w + scale·rms(w)·ε, ε ~ N(0, 1) per entry, tensor by tensor from ``seed`` (scale 0: unchanged); ε is drawn
    on the CPU, so a seed perturbs alike on any device."""
    import torch

    if scale == 0:
        return
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            rms = p.double().pow(2).mean().sqrt()  # a 0-dim tensor on p's device: no host sync, a meta tensor works
            eps = torch.randn(p.shape, generator=g, dtype=torch.float64).to(device=p.device, dtype=p.dtype)
            p.add_(eps * (rms * scale))


def _anneal_start(study: Study, out: Path, run: StudyRun, model: Any) -> None:
    """An anneal run's start: the base perturbed from its seed (the first β), or the end weights of the β before."""
    import torch

    before = predecessor(study, run)
    if before is None:
        perturb(model, float(study.arm(run.arm).perturbation or 0.0), run.seed)
        return
    start = weights_path(out, before)
    if not start.is_file():
        raise FileNotFoundError(f"{start}: the end weights of {before.key}, this run's start, are missing")
    model.load_state_dict(torch.load(start, map_location="cpu"))


def execute_exact(study: Study, out: Path, run: StudyRun, base: dict[str, Any]) -> dict[str, Any]:
    """Adam ascent on the exact objective (no sampling), with the same path; the whole budget. The exact arm starts
    from the base; an anneal arm at one β from the perturbed base (the first β) or from the end of the β before (same
    start), with a cosine-decayed learning rate and the arm's dtype, and its path adds J* − J and KL(π̄‖p̄_β)."""
    import math

    import torch

    from rlvr_div.exact.objective import (
        ascend,
        closed_form_objective,
        exact_objective,
        kl_to_tilted,
        valid_set_batch,
        valid_set_logprobs,
    )
    from rlvr_div.models import load_model, load_tokenizer

    arm = study.arm(run.arm)
    anneal = arm.kind == "anneal"
    if not anneal:
        torch.manual_seed(run.seed)
    model_path = model_checkpoint(study.model, study.gguf_file)
    model, tokenizer = load_model(model_path), load_tokenizer(model_path)
    if anneal:
        model = model.to(getattr(torch, str(arm.dtype)))
        _anneal_start(study, out, run, model)
    b = base["splits"]["train"]
    batch = valid_set_batch(tokenizer, b["prompts"], b["valid"], b["logps"])
    beta = float(run.beta)
    best = closed_form_objective([math.fsum(math.exp(x) for x in lp) for lp in b["logps"]], beta) if anneal else None
    temperature = float(study.common.get("temperature", 1.0))

    def point(step: int, logp: Any, grad_norm: float | None) -> dict[str, Any]:
        """A path point from the flat valid-set log-probs ``logp`` (prompt after prompt): the trajectory numbers and
        the objective J at β; an anneal arm's also J* − J and KL(π̄‖p̄_β)."""
        flat, logps = logp.tolist(), []
        for ys in b["valid"]:
            logps.append(flat[: len(ys)])
            flat = flat[len(ys) :]
        mean = summarise(b["prompts"], b["valid"], logps, b["logps"], study.ks)["mean"]
        numbers = {**trajectory_point(mean, max(study.ks)), "objective": float(exact_objective(logp, batch, beta))}
        if anneal:
            numbers |= {"gap": best - numbers["objective"], "kl_p_beta": float(kl_to_tilted(logp, batch, beta))}
        return {"step": step, **numbers, "grad_norm": grad_norm}

    if anneal:
        with torch.no_grad():
            path = [point(0, valid_set_logprobs(model, batch, temperature), None)]
    else:
        path = [{"step": 0, **trajectory_point(b["summary"]["mean"], max(study.ks))}]

    def on_point(step: int, logp: Any, grad_norm: float) -> bool:
        path.append(point(step, logp, grad_norm))
        return False  # the whole budget: cheap, and a slow drift after a plateau is what these arms are for

    lr, steps = _budget(study, arm)
    last = ascend(model, batch, beta, lr, steps, study.path_every, on_point,
                  temperature=temperature, max_grad_norm=float(study.common.get("max_grad_norm", 1.0)),
                  final_learning_rate=arm.final_learning_rate)  # fmt: skip
    model.eval()
    train = {"steps": last}
    if anneal:
        end = weights_path(out, run)
        end.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), end)
        train["optimum"] = best
    return {"path": path, "train": train, "splits": _end_measurements(model, tokenizer, base, study, run.seed)}


def execute(study: Study, out_dir: str, run: StudyRun, base: dict[str, Any]) -> dict[str, Any]:
    """One run, ``result.json`` written last (in a worker process; console output in its log): from scratch, or,
    with the study's ``checkpoint_every``, from where an interrupted invocation saved it (then the log goes on)."""
    out = Path(out_dir)
    progress = None
    if study.checkpoint_every is not None:
        progress = saved_progress(run_dir(out, run.key), run_identity(study, run))
    return logged(out, run.key, _execute, study, out, run, base, progress, append=progress is not None)


def _execute(study: Study, out: Path, run: StudyRun, base: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
    directory = run_dir(out, run.key)
    if progress is None:
        fresh_run_dir(out, run.key)
        if study.checkpoint_every is not None:
            progress = Progress()
    t0 = time.perf_counter() if progress is None else progress.started
    if study.arm(run.arm).kind in ("exact", "anneal"):
        body = execute_exact(study, out, run, base)
    else:
        body = execute_sampled(study, out, run, base, progress)
    steps = body["path"][-1]["step"]
    result = {
        "run": asdict(run), "identity": run_identity(study, run), "commit": worker_code(), **body,
        "plateau_step": plateau_step(body["path"], study.convergence), "steps": steps,
        "reached_stop_mu": reached_mu(body["path"], study.convergence),
        "max_steps": _budget(study, study.arm(run.arm))[1],
        "wall_seconds": time.perf_counter() - t0,
    }  # fmt: skip
    write_json(directory / RESULT, result)
    for leftover in directory.iterdir():  # the study keeps its measurements, not the trained weights
        if leftover.name != RESULT:
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    return result


# --------------------------------------------------------------------------------------------- all runs


def run_study(
    study: Study,
    out: Path,
    fresh: bool = False,
    progress: bool = True,
    arms: tuple[str, ...] | None = None,
    max_runs: int | None = None,
) -> int:
    """Measure the base, then every run not finished yet (``workers`` at a time; only those of ``arms`` when given;
    only the first ``max_runs`` of them when given); returns how many runs were trained. A failed run is reported in
    one line with its log and the others go on; the exit is then non-zero."""
    from tqdm.auto import tqdm

    open_state(out, STATE, asdict(study), fresh)
    t_start = time.time()
    base = measure_base(study, out)
    # seed by seed: every arm's first seed finishes before any arm's second, so a study cut short is balanced
    todo = runs_to_do(study, out, arms)[:max_runs]  # a prefix keeps every warm start after the run it starts from
    failures: list[str] = []
    finished: set[StudyRun] = set()
    failed: set[StudyRun] = set()
    bar = tqdm(total=len(todo), desc="beta study", disable=not progress)

    def ready() -> list[StudyRun]:  # a warm-started run waits for the run it starts from
        return [r for r in todo if r not in finished and ((before := predecessor(study, r)) is None
                                                          or before not in todo or before in finished)]  # fmt: skip

    def done(run: StudyRun, failure: str | None) -> None:
        record_run(out, STATE, run.key, failure, t_start)
        if failure is None:
            finished.add(run)
        else:
            failed.add(run)
            failures.append(failure)
            print(f"failed: {failure}", flush=True)
        bar.update(1)

    def task(run: StudyRun) -> tuple[Any, tuple[Any, ...]]:
        return execute, (study, str(out), run, base)

    run_pool(study.workers, study.threads, task, ready, done)
    bar.close()
    failures += [f"{r.key}: not run, the run it starts from did not finish" for r in todo
                 if r not in finished and r not in failed]  # fmt: skip
    if failures:
        raise RuntimeError(f"{len(failures)} run(s) failed; first: {failures[0]}")
    return len(todo)


def runs_to_do(study: Study, out: Path, arms: tuple[str, ...] | None = None) -> list[StudyRun]:
    """The runs without a current result (of ``arms`` only, when given), seed by seed (every arm's first seed
    finishes before any arm's second, so a study cut short is balanced), and the anneal runs whose end weights the
    next β needs but which are gone (a fresh clone holds the results, not the weights): they run again."""
    if arms is not None:
        check_arm_names(study, arms)
    runs = [r for r in study_runs(study) if arms is None or r.arm in arms]
    todo = {r for r in runs if result_of(out, study, r) is None}
    for r in sorted(todo, key=lambda r: runs.index(r), reverse=True):
        before = predecessor(study, r)
        while before is not None and before not in todo and not weights_path(out, before).is_file():
            todo.add(before)
            before = predecessor(study, before)
    order = {s: i for i, s in enumerate(study.seeds)}
    return sorted(todo, key=lambda r: (order[r.seed], runs.index(r)))
