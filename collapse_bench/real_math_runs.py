"""Running the real-math study (issue 62): ``python -m collapse_bench.real_math run --config bench/real_math.yaml
--out DIR``, resumable at every stage. Its configuration is :mod:`collapse_bench.real_math_spec`.

First every selected arm's training arguments go through ``rlvr-div train``'s own checks (one line naming the arm).
Then the stages, one at a time, each an ``rlvr-div`` command (a subprocess by default) whose output goes to a log
(``logs/<stage>.log``, a run's in ``runs/<arm>/seed<s>/logs/``):

1. with ``train.filter``: the base on the training split, ``filter.n`` samples per problem (``rlvr-div eval``,
   ``eval/filter``); the problems it solves at least once are kept (``train_filter.json``: their positions in the
   split's order) and every arm trains on them only (the task's ``indices`` option); the test set is never filtered;
2. the base on the held-out split (``eval/base``, ``n_end`` samples on the first ``limit`` problems), on the OOD set
   (``eval/base_ood``) and under each other sampling protocol (``eval/base_<name>``); ``base.json``.
   ``train_filter.json`` and ``base.json`` record the settings they were sampled with and are reused while those
   match, also without ``eval/`` (the samples are not committed; a study continued on another machine, where
   sampling the base again could keep another pool, keeps the committed one);
3. per run (arm, seed), in the config's order, every arm of seed s before seed s + 1: the DPH-RL offline stage once
   per arm that needs it (``rehearsal/<arm>``), ``rlvr-div train`` into ``runs/<arm>/seed<s>`` with a checkpoint
   every ``path_every`` steps (all kept), resumed with ``--resume_from_checkpoint true`` from its last complete
   checkpoint when a run is there and not finished (its final ``trainer_state.json``), skipped when finished; then
   ``rlvr-div eval`` of every checkpoint before the last step (``n_path`` samples on the first ``path_limit``
   problems, ``eval/step<N>``), of the final model (``eval/end``, ``n_end``), on the OOD set (``eval/ood``) and
   under each other protocol (``eval/end_<name>``); each evaluation resumes from its own ``samples.jsonl``;
   ``result.json`` last.

A kill at any point loses at most the stage in flight's unsaved part: the next invocation skips what is complete and
continues. Each run's directory records its training identity (``identity.json``: another config's run is refused in
one line) and the wall time of each stage (``timing.json``: finished attempts, and for an attempt cut by a kill the
time to its last write). One driver per ``--out`` (:func:`rlvr_div.runs.run_lock.directory_lock`).

``result.json`` holds everything the report needs, per problem: the held-out path (step 0 is the base; then each
checkpoint; the last step is the final model), each point's n and per-problem correct counts c; the end point's c,
distinct correct completions (whitespace-normalised solution lines) and distinct correct answers per problem; the OOD
and other protocols' counts; the training reward per step; the wall times.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from collapse_bench.engine import code_commit, open_state
from collapse_bench.real_math_plan import run_identity, study_runs, train_argv
from collapse_bench.real_math_spec import Arm, Study, StudyRun
from collapse_bench.real_math_stages import (
    Executor,
    StageFailed,
    Timing,
    eval_done,
    machine,
    path_point,
    problem_counts,
    subprocess_executor,
    train_rewards,
)
from eval.records import SAMPLES_FILE, write_json
from eval.resume import recorded_dtype
from rlvr_div.errors import ConfigError
from rlvr_div.run_dir import checkpoint_step, checkpoints, earlier_run
from rlvr_div.runs.run_lock import directory_lock

STATE = "study.json"
BASE = "base.json"
FILTER = "train_filter.json"
RESULT = "result.json"
IDENTITY = "identity.json"
TIMING = "timing.json"
MODEL = "model"  # the name of a run's model in its evaluations
BASE_NAME = "base"

# --------------------------------------------------------------------------------------------- the driver


# every evaluation of a study draws in float32, on any machine (eval's ``--dtype auto`` takes bfloat16 on a CPU with
# native bfloat16): the runs of one study are compared with each other, and a study spans machines
EVAL_DTYPE = "float32"


class Driver:
    """The study in ``out``: its stages, run by ``executor`` (``subprocess_executor`` unless given)."""

    def __init__(self, study: Study, out: Path, executor: Executor | None = None, config: str = "") -> None:
        self.study, self.out, self.config = study, Path(out), config
        self.executor = executor or subprocess_executor

    # ----------------------------------------------------------------------------- evaluation stages

    def _eval_argv(self, model: str, out_dir: Path, task: str, options: dict[str, Any], split: str,
                   limit: int | None, n: int, sampling: dict[str, Any], gguf: bool) -> list[str]:  # fmt: skip
        e = self.study.eval
        argv = ["--model", model, "--task", task, "--split", split, "--n", str(n),
                "--temperature", repr(sampling["temperature"]), "--top-p", repr(sampling["top_p"]),
                "--max-new-tokens", str(sampling["max_new_tokens"]), "--seed", str(e.seed), "--dtype", EVAL_DTYPE,
                "--output-dir", str(out_dir), "--quiet"]  # fmt: skip
        for key, value in options.items():
            argv += ["--task-arg", f"{key}={json.dumps(value)}"]
        if limit is not None:
            argv += ["--limit", str(limit)]
        if gguf and self.study.gguf_file:
            argv += ["--gguf_file", self.study.gguf_file]
        if self.study.threads is not None:
            argv += ["--threads", str(self.study.threads)]
        if e.batch_size is not None:
            argv += ["--batch-size", str(e.batch_size)]
        for key, value in self.study.verifier.items():
            argv += ["--reward-arg", f"{key}={json.dumps(value)}"]
        return argv

    def evaluate(self, stage: str, where: Path, name: str, model_path: str, timing: Timing, *, task: str,
                 options: dict[str, Any], split: str, limit: int | None, n: int, sampling: dict[str, Any],
                 gguf: bool = False) -> dict[str, Any]:  # fmt: skip
        """One evaluation stage (``where/stage``, the model named ``name``), skipped when finished with these
        settings; the per-problem counts of its samples."""
        out_dir = where / "eval" / stage
        expected = self._settings(task, options, split, limit, n, sampling)
        expected["reward_settings"] = self._reward_settings(task, options)
        expected["dtype"] = EVAL_DTYPE  # (the pool's and base's records predate the key: it is not in _settings)
        if not eval_done(out_dir, name, expected):
            argv = self._eval_argv(f"{name}={model_path}", out_dir, task, options, split, limit, n, sampling, gguf)
            if recorded_dtype(out_dir / name) not in (None, EVAL_DTYPE):
                argv.append("--fresh")  # samples drawn in another dtype are not continued in this one
            with timing.stage(stage):
                self.executor("eval", argv, where / "logs" / f"{stage}.log")
        return problem_counts(out_dir / name / SAMPLES_FILE)

    def _settings(self, task: str, options: dict[str, Any], split: str, limit: int | None, n: int,
                  sampling: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        """What an evaluation must have been run with to be reused (its ``results.json`` config; ``evaluate`` adds the
        reward's settings)."""
        return {"task": task, "split": split, "task_options": options, "limit": limit, "n": n,
                "seed": self.study.eval.seed, **sampling}  # fmt: skip

    def _with_verifier(self, settings: dict[str, Any]) -> dict[str, Any]:
        """``settings`` as ``train_filter.json`` and ``base.json`` record them: with the study's ``verifier`` settings
        where it has some (a pool or base scored otherwise is not reused)."""
        return {**settings, "verifier": dict(self.study.verifier)} if self.study.verifier else settings

    def _reward_settings(self, task: str, options: dict[str, Any]) -> dict[str, Any]:
        """The settings an evaluation of ``task`` records for its reward (``Reward.settings``): the task's defaults
        and the study's ``verifier`` settings, so that one scored otherwise is not reused."""
        from rlvr_div.rewards import get_reward
        from rlvr_div.tasks import get_task_spec, task_reward_settings

        reward = get_task_spec(task).reward
        return get_reward(reward, **task_reward_settings(task, reward, self.study.verifier, **options)).settings()

    def _held_out(self) -> dict[str, Any]:
        e = self.study.eval
        sampling = {"temperature": e.temperature, "top_p": e.top_p, "max_new_tokens": e.max_new_tokens}
        return {"task": self.study.task, "options": dict(self.study.task_options), "split": e.split,
                "sampling": sampling}  # fmt: skip

    def _ood(self) -> dict[str, Any] | None:
        o, e = self.study.eval.ood, self.study.eval
        if o is None:
            return None
        sampling = {"temperature": e.temperature, "top_p": e.top_p,
                    "max_new_tokens": o.max_new_tokens or e.max_new_tokens}  # fmt: skip
        return {"task": o.task, "options": dict(o.task_options), "split": o.split, "sampling": sampling,
                "limit": o.limit, "n": o.n}  # fmt: skip

    def _protocol(self, q: Any) -> dict[str, Any]:
        return {"temperature": q.temperature, "top_p": q.top_p, "max_new_tokens": self.study.eval.max_new_tokens}

    def _base_model(self) -> str:
        from rlvr_div.models.gguf_packages import package_reference

        return package_reference(self.study.model)

    # ----------------------------------------------------------------------------- study-level stages

    def train_filter(self) -> list[int] | None:
        """The kept training problems (positions in the split's order), computed once (``train_filter.json``)."""
        f = self.study.filter
        if f is None:
            return None
        common = self.study.common
        sampling = {"temperature": f.temperature if f.temperature is not None else common.get("temperature", 1.0),
                    "top_p": f.top_p if f.top_p is not None else common.get("top_p", 1.0),
                    "max_new_tokens": f.max_new_tokens or common.get("max_completion_length")}  # fmt: skip
        sampling = {k: float(v) if k != "max_new_tokens" else int(v) for k, v in sampling.items()}
        options, split = dict(self.study.task_options), self.study.train_split
        settings = self._with_verifier(self._settings(self.study.task, options, split, f.limit, f.n, sampling))
        done = _read_json(self.out / FILTER)
        if done is not None and done.get("settings") == settings:
            return done["kept"]  # committed with the results: another machine reuses it, not samples it again
        timing = Timing(self.out / TIMING)
        counts = self.evaluate("filter", self.out, BASE_NAME, self._base_model(), timing, task=self.study.task,
                               options=options, split=split, limit=f.limit, n=f.n, sampling=sampling,
                               gguf=True)  # fmt: skip
        kept = [i for i, c in enumerate(counts["c"]) if c > 0]
        if not kept:
            raise ConfigError(f"the base solves none of the {counts['problems']} training problems in {f.n} samples: "
                              "no training pool is left after train.filter")  # fmt: skip
        write_json(self.out / FILTER, {"n": f.n, "sampling": sampling, "problems": counts["problems"],
                                       "kept": kept, "kept_count": len(kept),
                                       "base_pass_at_1": sum(counts["c"]) / (f.n * counts["problems"]),
                                       "settings": settings})  # fmt: skip
        return kept

    def base(self) -> dict[str, Any]:
        """The base on the held-out split (``n_end``) and the OOD set, once (``base.json``)."""
        e, held, ood = self.study.eval, self._held_out(), self._ood()
        settings = {"base": self._settings(held["task"], held["options"], held["split"], e.limit, e.n_end,
                                           held["sampling"]),
                    "base_ood": None if ood is None else self._settings(ood["task"], ood["options"], ood["split"],
                                                                        ood["limit"], ood["n"], ood["sampling"]),
                    "protocols": {q.name: self._settings(held["task"], held["options"], held["split"], e.limit,
                                                         e.n_end, self._protocol(q)) for q in e.protocols}}  # fmt: skip
        settings = self._with_verifier(settings)
        done = _read_json(self.out / BASE)
        if done is not None and done.get("settings") == settings:
            return done  # committed with the results: another machine reuses it, not samples it again
        timing = Timing(self.out / TIMING)
        test = self.evaluate("base", self.out, BASE_NAME, self._base_model(), timing, task=held["task"],
                             options=held["options"], split=held["split"], limit=e.limit, n=e.n_end,
                             sampling=held["sampling"], gguf=True)  # fmt: skip
        out_of = None
        if ood is not None:
            out_of = self.evaluate("base_ood", self.out, BASE_NAME, self._base_model(), timing, task=ood["task"],
                                   options=ood["options"], split=ood["split"], limit=ood["limit"], n=ood["n"],
                                   sampling=ood["sampling"], gguf=True)  # fmt: skip
        protocols = {q.name: self.evaluate(f"base_{q.name}", self.out, BASE_NAME, self._base_model(), timing,
                                           task=held["task"], options=held["options"], split=held["split"],
                                           limit=e.limit, n=e.n_end, sampling=self._protocol(q), gguf=True)
                     for q in e.protocols}  # fmt: skip
        base = {"test": test, "ood": out_of, "protocols": protocols, "settings": settings,
                "path_problems": min(e.path_limit or test["problems"], test["problems"])}  # fmt: skip
        write_json(self.out / BASE, base)
        return base

    def rehearse(self, arm: Arm, indices: list[int] | None) -> Path:
        """DPH-RL's offline stage for ``arm``, once (``rehearsal/<arm>``, finished when it has its summary)."""
        from rlvr_div.trainers.dph.rehearsal_set import SUMMARY

        path = self.out / "rehearsal" / arm.name
        if not (path / SUMMARY).is_file():
            argv = train_argv(self.study, arm, 0, path, indices, path, resume=False)
            with Timing(self.out / TIMING).stage(f"rehearsal_{arm.name}"):
                self.executor("rehearse", argv, self.out / "logs" / f"rehearsal_{arm.name}.log")
        return path

    # ----------------------------------------------------------------------------- one run

    def run_dir(self, run: StudyRun) -> Path:
        return self.out / "runs" / run.arm / f"seed{run.seed}"

    def check_identity(self, run: StudyRun, directory: Path, identity: str) -> None:
        """Record the run's identity at its first start; refuse a directory holding another one."""
        path = directory / IDENTITY
        if path.is_file():
            recorded = json.loads(path.read_text()).get("identity")
            if recorded != identity:
                raise ConfigError(
                    f"{directory} holds run {run.key} of another config (identity {recorded}, now {identity}); "
                    "restore the config or delete that directory to train it again"
                )
            return
        if earlier_run(directory) is not None:
            raise ConfigError(f"{directory} holds a training run this study did not start; move it away")
        directory.mkdir(parents=True, exist_ok=True)
        write_json(path, {"identity": identity, "arm": run.arm, "seed": run.seed})

    def train(self, run: StudyRun, directory: Path, indices: list[int] | None, timing: Timing) -> int:
        """Train the run (resumed when a run is there, skipped when finished); its final step."""
        arm = self.study.arm(run.arm)
        rehearsal = self.rehearse(arm, indices) if arm.rehearsal else None
        earlier = earlier_run(directory)
        if earlier is None or earlier.finished_at is None:
            argv = train_argv(self.study, arm, run.seed, directory, indices, rehearsal, resume=earlier is not None)
            with timing.stage("train"):
                self.executor("train", argv, directory / "logs" / "train.log")
        final = checkpoint_step(directory)
        if final is None:
            raise StageFailed(f"training {run.key} left no final trainer_state.json in {directory}")
        return final

    def run_one(self, run: StudyRun, indices: list[int] | None, base: dict[str, Any]) -> dict[str, Any]:
        """Train and evaluate one run, each stage resumable; its ``result.json``."""
        study, e = self.study, self.study.eval
        arm = study.arm(run.arm)
        directory = self.run_dir(run)
        identity = run_identity(study, arm, run.seed, indices)
        evaluation = json.loads(json.dumps(asdict(e), default=str))
        done = _read_json(directory / RESULT)
        if done is not None and done.get("identity") == identity and done.get("evaluation") == evaluation:
            return done
        self.check_identity(run, directory, identity)
        timing = Timing(directory / TIMING)
        timing.recover(directory)
        final = self.train(run, directory, indices, timing)
        held, ood = self._held_out(), self._ood()
        path = [path_point(0, base["test"], base["path_problems"])]
        for step in sorted(s for s in checkpoints(directory) if s < final):
            counts = self.evaluate(f"step{step}", directory, MODEL, str(directory / f"checkpoint-{step}"), timing,
                                   task=held["task"], options=held["options"], split=held["split"],
                                   limit=e.path_limit, n=e.n_path, sampling=held["sampling"])  # fmt: skip
            path.append(path_point(step, counts, None))
        end = self.evaluate("end", directory, MODEL, str(directory), timing, task=held["task"],
                            options=held["options"], split=held["split"], limit=e.limit, n=e.n_end,
                            sampling=held["sampling"])  # fmt: skip
        path.append(path_point(final, end, base["path_problems"]))
        out_of = None
        if ood is not None:
            out_of = self.evaluate("ood", directory, MODEL, str(directory), timing, task=ood["task"],
                                   options=ood["options"], split=ood["split"], limit=ood["limit"], n=ood["n"],
                                   sampling=ood["sampling"])  # fmt: skip
        protocols = {q.name: self.evaluate(f"end_{q.name}", directory, MODEL, str(directory), timing,
                                           task=held["task"], options=held["options"], split=held["split"],
                                           limit=e.limit, n=e.n_end, sampling=self._protocol(q))
                     for q in e.protocols}  # fmt: skip
        stages = timing.read()["stages"]
        wall = {"train_seconds": _seconds(stages, lambda s: s == "train"),
                "eval_seconds": _seconds(stages, lambda s: s != "train"),
                "interrupted_attempts": sum(v["interrupted"] for v in stages.values()), "stages": stages}  # fmt: skip
        result = {"arm": run.arm, "seed": run.seed, "label": arm.label, "identity": identity, "code": code_commit(),
                  "evaluation": evaluation,
                  "steps": final, "path_ks": list(e.path_ks), "ks": list(e.ks), "path": path, "end": end,
                  "ood": out_of, "protocols": protocols, "train_reward": train_rewards(directory),
                  "wall": wall}  # fmt: skip
        write_json(directory / RESULT, result)
        return result

    # ----------------------------------------------------------------------------- the study

    def preflight(self, runs: list[StudyRun]) -> None:
        """Each arm's training arguments through ``rlvr-div train``'s own checks (recipe keys, values, task, rewards,
        model reference, LoRA targets) before anything runs; a problem is one line naming the arm."""
        from rlvr_div.recipe import parse_recipe, validate

        for name in dict.fromkeys(r.arm for r in runs):
            arm = self.study.arm(name)
            argv = train_argv(self.study, arm, runs[0].seed, self.out / "runs" / name, None, self.out, resume=False)
            try:
                validate(*parse_recipe(argv), check_inputs=False)
            except ConfigError as e:
                raise ConfigError(f"arm {name!r}: {e}") from None

    def run(self, arms: list[str] | None = None, seeds: list[int] | None = None) -> int:
        """Every stage not yet done, under ``out``'s lock; a failed run is one line and the next run goes on.
        Returns the number of failed runs."""
        runs = study_runs(self.study, arms, seeds)
        self.preflight(runs)
        with directory_lock(self.out, "real-math study", "--out"):
            t0 = time.time()
            config = {"config_file": self.config, "machine": machine(), "study": self.study.describe()}
            open_state(self.out, STATE, config, fresh=False)
            Timing(self.out / TIMING).recover(self.out)
            indices = self.train_filter()
            base = self.base()
            failed = 0
            for run in runs:
                try:
                    self.run_one(run, indices, base)
                    print(f"{run.key}: done ({self.run_dir(run) / RESULT})", flush=True)
                    failure = None
                except StageFailed as err:
                    failed += 1
                    failure = str(err)
                    print(f"{run.key}: failed: {err}", flush=True)
                state = json.loads((self.out / STATE).read_text())
                state["invocations"][-1] = time.time() - t0
                failures = state.setdefault("failures", {})
                if failure is None:
                    failures.pop(run.key, None)
                else:
                    failures[run.key] = failure
                write_json(self.out / STATE, state)
        return failed


def _seconds(stages: dict[str, Any], which: Callable[[str], bool]) -> float:
    """Finished attempts plus the lower bounds of interrupted ones, over the stages ``which`` selects."""
    return float(sum(v["seconds"] + v["interrupted_seconds"] for k, v in stages.items() if which(k)))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
