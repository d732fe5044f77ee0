"""Score-only evaluation: completions read from a sample log (``--samples NAME=FILE``), scored, measured, reported.

No model is loaded. Each problem's completions are scored with the run's reward and its settings by the same
function that scores sampled completions (:func:`eval.scoring.score_completions`), written to ``OUT/NAME/
samples.jsonl`` in our format, and measured by the same :func:`eval.metrics.compute_metrics`: a file and a sampled run
holding the same completions give the same numbers. A scored source can be the base or any compared model, beside
sampled ones.

The verifier's columns of a problem come, in this order, from: the file's own values of those columns (our
``columns``, a plain line's keys); the task's row of the same index (``--task``; formats that carry an index: ours,
lm-eval's ``doc_id``, plain lines with ``index``); lm-eval's ``doc``; the format's single reference answer (verl
``gts``, lm-eval ``target``, plain ``answer``) when the reward reads one column. A problem for which none gives a
column is a one-line error before anything is scored, and so is a column read from a plain file whose lines of one
problem disagree on it (two golds for one prompt). A gold answer (column ``answer``) that is not a bare answer (a
worked solution: several lines, ``####``, or over :data:`BARE_ANSWER_CHARS` characters) is scored as it is, and named
in one ``warning:`` line on stderr: the verifier may read the wrong number from it.

The reward's settings for a log come, key by key, from the user's (``--reward-arg``), then the log's style (a
GSM8K-style log, :func:`eval.sample_formats.gsm8k_style`: :data:`LOG_STYLE_SETTINGS`, lm-eval's answer rule for
GSM8K), then the task's defaults; a log whose settings differ from the run's gets a reward of its own
(:func:`log_reward_settings`, ``eval.runner.prepare``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.metrics import compute_metrics, package_versions
from eval.records import SAMPLES_FILE, append_line, write_json
from eval.resume import CONFIG_FILE
from eval.sample_formats import SAMPLE_FORMATS, SampleFile, read_sample_file
from eval.scoring import score_completions
from rlvr_div.errors import ConfigError

# the reward settings a sample log's style (eval.sample_formats.gsm8k_style) brings, under the ones the user gives: a
# GSM8K-style log's answer is read as lm-eval reads GSM8K's, strict-match ("The answer is 18", "#### 18") and then its
# flexible-extract (the last number)
LOG_STYLE_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "gsm8k": {"math_accuracy": {"extract": "gsm8k", "fallback": "last_number"}},
}
SCORED_FILE = "scored_from.json"  # in OUT/NAME: where the scored completions came from (instead of config.json)
# what a sampled run's config says about how the completions were made, carried into a re-scored run's results
_SAMPLED_KEYS = ("model", "adapter", "n", "temperature", "top_p", "max_new_tokens", "seed", "backend", "chat_template")
GOLD_COLUMN = "answer"  # the column that holds a reference answer (math, arith); checked for being a bare answer
BARE_ANSWER_CHARS = 200


@dataclass
class ScoredSource:
    """One ``--samples NAME=FILE``: the sample log read, and (our own format) the settings it was sampled with."""

    name: str
    given: str
    file: SampleFile
    sampled_with: dict[str, Any] | None = None


def read_source(name: str, given: str) -> ScoredSource:
    """Read ``given`` (a sample log, or an evaluation directory) for ``--samples NAME=...``; one-line errors."""
    try:
        sample_file = read_sample_file(given)
    except ConfigError as e:
        raise ConfigError(f"--samples {name}: {e}") from None
    sampled_with = None
    results = sample_file.path.parent / "results.json"
    if SAMPLE_FORMATS.get(sample_file.format).made_here and results.is_file():
        config = _read_results(results).get("config") or {}
        if "scored_from" in config:  # scored before: carry what that run knew about the sampling
            sampled_with = config.get("sampled_with")
        else:
            sampled_with = {k: config[k] for k in _SAMPLED_KEYS if k in config}
    return ScoredSource(name, given, sample_file, sampled_with)


def _read_results(path: Path) -> dict[str, Any]:
    """The ``results.json`` beside our own samples (a byte-order mark is skipped); one-line errors."""
    remedy = "fix or delete it (it only records how the samples were made)"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte at offset {e.start}); {remedy}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno} is not valid JSON ({e.msg}); {remedy}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object; {remedy}")
    return data


def log_reward_settings(source: ScoredSource, reward: str) -> dict[str, Any]:
    """The settings of reward ``reward`` that the style of ``source``'s log brings (:data:`LOG_STYLE_SETTINGS`),
    ``{}`` for a log without a style or a reward the style does not name."""
    return dict(LOG_STYLE_SETTINGS.get(source.file.style or "", {}).get(reward, {}))


def problem_columns(problem: Any, reward: Any, row: dict[str, Any] | None, fmt: str) -> dict[str, Any]:
    """The verifier's columns of one problem (see the module docstring for the order of sources)."""
    out: dict[str, Any] = {}
    for column in reward.columns:
        if SAMPLE_FORMATS.get(fmt).own_fields and column in problem.fields:
            _agreed(problem, column)
            out[column] = problem.fields[column]
        elif row is not None and column in row:
            out[column] = row[column]
        elif column in problem.fields:
            out[column] = problem.fields[column]
        elif len(reward.columns) == 1 and problem.gold is not None:
            _agreed(problem, "answer")  # a plain line's gold is its answer
            out[column] = problem.gold
        else:
            raise ConfigError(
                f"problem {problem.index} gives no value for the reward's column {column!r}: add it to the file, or "
                "pass --task so it is read from the task's row of the same index"
            )
    return out


def _agreed(problem: Any, name: str) -> None:
    """One line when the lines of ``problem`` disagree on field ``name`` (read as a verifier column)."""
    conflict = problem.conflicts.get(name)
    if conflict is not None:
        raise ConfigError(conflict)


def is_bare_answer(gold: Any) -> bool:
    """Whether a gold answer is a final answer rather than a worked solution: not text, or one line without GSM8K's
    ``####`` of at most :data:`BARE_ANSWER_CHARS` characters."""
    if not isinstance(gold, str):
        return True
    text = gold.strip()
    return "\n" not in text and "####" not in text and len(text) <= BARE_ANSWER_CHARS


def check_columns(source: ScoredSource, reward: Any, dataset: Any, limit: int | None) -> None:
    """Every problem of ``source`` (the first ``limit``) has the reward's columns and, where it is matched by index,
    a task row; before anything is scored. Gold answers that are not bare answers are named in one warning line."""
    not_bare = []
    for problem in _problems(source, limit):
        try:
            columns = problem_columns(problem, reward, _row(source, dataset, problem.index), source.file.format)
        except ConfigError as e:
            if str(e).startswith("--samples "):
                raise
            raise ConfigError(f"--samples {source.name}: {e}") from None
        if not is_bare_answer(columns.get(GOLD_COLUMN)):
            not_bare.append((problem, columns[GOLD_COLUMN]))
    if not_bare:
        problem, gold = not_bare[0]
        more = f" (and {len(not_bare) - 1} more)" if len(not_bare) > 1 else ""
        print(
            f"warning: --samples {source.name}: the gold {GOLD_COLUMN!r} of problem {problem.index} "
            f"({_cut(problem.prompt)}) is not a bare answer{more}: {_cut(gold)}; it is scored as it is, and the "
            "verifier may read the wrong number from it: give final answers, or pass --task to read them from the task",
            file=sys.stderr,
        )


def _cut(value: Any, limit: int = 60) -> str:
    """``value`` (text, or JSON for chat messages) on one line, cut to ``limit`` characters, quoted."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _problems(source: ScoredSource, limit: int | None) -> list[Any]:
    problems = source.file.problems
    return problems if limit is None else problems[:limit]


def _row(source: ScoredSource, dataset: Any, index: int) -> dict[str, Any] | None:
    if dataset is None or not SAMPLE_FORMATS.get(source.file.format).indexed:
        return None
    if not 0 <= index < len(dataset):
        raise ConfigError(
            f"--samples {source.name}: problem index {index} is not a row of the task ({len(dataset)} rows); "
            "pass the task and split the completions were made for"
        )
    return dataset[index]


def score_source(
    source: ScoredSource,
    reward: Any,
    dataset: Any,
    out_dir: Path,
    settings: Any,
    task: str | None,
    split: str | None,
    progress: bool = True,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score every problem of ``source`` (the first ``settings.limit``), write ``out_dir/samples.jsonl`` (replacing
    what was there), and return the results (what :func:`eval.runner.run` writes to ``results.json``, once) and the
    records. ``settings``: an :class:`eval.settings.EvalSettings` for the metrics (seed, bootstrap, maj subsets,
    cover τ)."""
    from tqdm.auto import tqdm

    problems = _problems(source, settings.limit)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    records = []
    tmp = out_dir / (SAMPLES_FILE + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for p in tqdm(problems, desc=f"{source.name}: scoring", disable=not progress, mininterval=0.5):
                columns = problem_columns(p, reward, _row(source, dataset, p.index), source.file.format)
                record = score_completions(
                    p.index, p.prompt, columns, p.completions, reward, p.num_tokens, p.finish_reasons, p.prompt_text
                )
                append_line(f, record)
                records.append(record)
    except BaseException:  # a failure, or Ctrl-C: no half-written samples.jsonl.tmp is left behind
        tmp.unlink(missing_ok=True)
        raise
    (out_dir / CONFIG_FILE).unlink(missing_ok=True)  # these samples were not made by a sampling run into out_dir
    tmp.replace(out_dir / SAMPLES_FILE)
    config = {
        "name": source.name,
        "model_given": source.given,
        "scored_from": source.file.describe(),
        "sampled_with": source.sampled_with,
        "task": task,
        "split": split,
        "limit": settings.limit,
        "reward": settings.reward,
        "reward_settings": settings.reward_settings,
        "n": min(r["n"] for r in records),
        "seed": settings.seed,
        "bootstrap": settings.bootstrap,
        "maj_subsets": settings.maj_subsets,
        "cover_taus": list(settings.cover_taus),
        "versions": package_versions(),
    }
    write_json(out_dir / SCORED_FILE, config["scored_from"])
    results = {
        "config": config,
        "metrics": compute_metrics(records, settings),
        "timing": {
            "problems_scored": len(records),
            "scoring_seconds": round(time.perf_counter() - t0, 3),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    }
    return results, sorted(records, key=lambda r: r["index"])
