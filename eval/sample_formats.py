"""Completions made elsewhere, read back for scoring: four sample-log formats, one shape.

``rlvr-div eval --samples NAME=FILE`` scores completions that already exist instead of sampling them. A file (or a
directory holding ``samples.jsonl``) is read into :class:`ProblemCompletions`, one per problem, whatever wrote it:

- ``rlvr_div`` — our own ``samples.jsonl`` (a line per problem with ``index``, ``prompt``, ``completions`` and the
  verifier ``columns``; see :mod:`eval.records`).
- ``lm_eval`` — lm-evaluation-harness ``--log_samples`` JSONL: a line per document (and per filter) with ``doc_id``,
  ``doc``, ``target``, ``arguments`` (the rendered prompt as ``arguments.gen_args_0.arg_0``, or ``[[prompt,
  kwargs]]`` in older versions) and ``resps`` (``[[completion, ...]]``: the raw generations; ``filtered_resps`` are
  the filter's extracted answers, not completions, and are not read). Lines repeated per filter are read once.
  A GSM8K log (its ``task_name`` or file name says ``gsm8k``, or its ``doc.answer`` holds ``####``) has its gold, the
  doc's ``answer`` and ``target``, read by GSM8K's own rule (:func:`gsm8k_gold`): lm-eval logs the whole worked
  solution there, whose last number is not always the answer.
- ``verl`` — verl's validation dumps (``trainer.validation_data_dir``): a line per sample with ``input`` (the rendered
  prompt), ``output``, ``gts`` (ground truth), ``score`` and ``step``; lines are grouped by ``input`` in file order;
  with several ``step`` values (dumps concatenated, in any order) the highest step is read, and the report names
  it and the other steps in the file; steps that are not all numbers are a one-line error. The file is streamed
  (two passes, a line at a time): only the completions of the step read are held.
- ``plain`` — a line per problem ``{"prompt": ..., "completions": [...]}`` or a line per sample ``{"prompt": ...,
  "completion": ...}`` (grouped by prompt in file order), with the verifier's fields (``answer``, ``target``, …) and
  optionally ``index``. Lines of one problem that disagree on a field are recorded (``conflicts``); reading that
  field as a verifier column is then refused (:mod:`eval.score_only`).

A log made elsewhere may be GSM8K-style (:func:`gsm8k_style`): its answers are then read as lm-eval reads GSM8K's
(:data:`eval.score_only.LOG_STYLE_SETTINGS`).

Each format is one :class:`SampleFormat` registered in :data:`SAMPLE_FORMATS` (its reader, the keys that tell it,
the keys every line needs, what its indices and fields mean); adding one is that declaration alone
(docs/evaluation.md, "Adding a sample format"). The format is recognised from the first line's keys. Indices:
``index`` / ``doc_id`` where the file has them (whole numbers >= 0), else the order of first appearance. Files are
UTF-8 JSONL (a leading byte-order mark is skipped); a line that is not UTF-8, not a JSON object, lacks its format's
keys, or holds text that is not Unicode (a lone UTF-16 surrogate such as ``"\\ud800"``, which could not be written
back) is a one-line :class:`ConfigError` naming the file and line. Nothing here scores: :mod:`eval.score_only` does.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.records import SAMPLES_FILE
from rlvr_div.errors import ConfigError
from rlvr_div.registry import Registry
from rlvr_div.rewards.math import GSM8K_MARK, gsm8k_answer

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # JSON's escape of half a UTF-16 pair
# GSM8K's answer mark in a prompt: after a worked example's answer ("#### 72", lm-eval's few-shot GSM8K) or named by
# an instruction ('output the final answer after "####"', verl's GSM8K data); not a markdown heading ("#### Step 1")
_GSM8K_PROMPT_MARK = re.compile(r'####(?:[ \t]*-?\d|["\'`])')
LM_EVAL_FILE = "samples_lm_eval.jsonl"  # --lm-eval-log: a model's samples in lm-eval's schema


@dataclass
class ProblemCompletions:
    """One problem's completions as a sample log holds them.

    ``fields``: the problem's own values by name (our ``columns``, lm-eval's ``doc``, a plain line's extra keys);
    ``gold``: the format's single reference answer (verl ``gts``, lm-eval ``target``, plain ``answer``), used for a
    one-column reward when ``fields`` and the task do not give that column; ``num_tokens``/``finish_reasons``: when
    the file records them (only our own format does); ``conflicts``: the fields on which two lines of this problem
    (plain, a line per sample) disagree, each with the error to raise when that field is read; ``line``: the file
    line the problem starts on."""

    index: int
    prompt: Any
    completions: list[str]
    prompt_text: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    gold: Any = None
    num_tokens: list[int] | None = None
    finish_reasons: list[str] | None = None
    conflicts: dict[str, str] = field(default_factory=dict)  # field -> one line: two lines of the problem disagree
    line: int = 0
    gsm8k: bool = False  # an lm-eval line of GSM8K (its gold read by GSM8K's rule)


@dataclass
class SampleFile:
    """A read sample log: its path, format, problems by index, (verl) the step read and, when the file holds
    several, all its steps (ascending), and ``style``: ``"gsm8k"`` for a GSM8K-style log made elsewhere
    (:func:`gsm8k_style`), whose answers are read as lm-eval reads GSM8K's, else None."""

    path: Path
    format: str
    problems: list[ProblemCompletions]
    step: Any = None
    steps: list[Any] = field(default_factory=list)
    style: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": str(self.path), "format": self.format, "problems": len(self.problems)}
        if self.step is not None:
            out["step"] = self.step
        if len(self.steps) > 1:
            out["steps_in_file"] = list(self.steps)
        if self.style is not None:
            out["style"] = self.style
        return out


Reader = Callable[[Path, "SampleFormat"], tuple[list[ProblemCompletions], Any, list[Any]]]


@dataclass(frozen=True)
class SampleFormat:
    """One sample-log format, declared in one place (:data:`SAMPLE_FORMATS`): its name and ``title`` (what writes it);
    ``marks``, the keys of a first
    line that tell it (with one of ``one_of`` when given; the format whose marks a line matches most wins);
    ``required``, the keys every line needs (with one of ``one_of``); ``read(path, fmt)`` → (problems, the step read
    or None, the file's steps); ``indexed``: its problem indices are the task's row indices; ``own_fields``: its
    problems' fields are read as verifier columns before the task's row; ``made_here``: rlvr-div's own samples (their
    ``results.json`` says how they were made; never a log style)."""

    name: str
    title: str
    marks: tuple[str, ...]
    required: tuple[str, ...]
    read: Reader
    one_of: tuple[str, ...] = ()
    indexed: bool = True
    own_fields: bool = False
    made_here: bool = False

    def matches(self, keys: set[str]) -> int:
        """How many of this format's marks a first line with ``keys`` has (0 when it is not this format)."""
        if not set(self.marks) <= keys or (self.one_of and not set(self.one_of) & keys):
            return 0
        return len(self.marks) + bool(self.one_of)

    def check_line(self, obj: dict[str, Any], path: Path, lineno: int) -> None:
        """Line ``lineno`` has this format's keys."""
        missing = [k for k in self.required if k not in obj]
        if self.one_of and not set(self.one_of) & set(obj):
            missing.append(self.one_of[0])
        if missing:
            wanted = self.required + ((" or ".join(self.one_of),) if self.one_of else ())
            raise ConfigError(
                f"{path}:{lineno} has no {missing[0]!r}; every line of this {self.name} sample file needs "
                + ", ".join(wanted)
            )


SAMPLE_FORMATS: Registry[SampleFormat] = Registry("sample format")


def resolve_sample_path(text: str) -> Path:
    """A ``--samples`` path: a JSONL file, or an evaluation directory holding ``samples.jsonl``."""
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / SAMPLES_FILE).is_file():
            raise ConfigError(f"--samples directory {text!r} holds no {SAMPLES_FILE}; give the JSONL file itself")
        return path / SAMPLES_FILE
    if not path.is_file():
        raise ConfigError(f"--samples file {text!r} does not exist")
    return path


def iter_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a UTF-8 JSONL file with their line numbers, read one line at a time (blank lines skipped,
    a leading byte-order mark ignored); one-line errors naming the line. An empty file yields nothing."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            yield lineno, _parse_line(raw, path, lineno)


def _parse_line(raw: bytes, path: Path, lineno: int) -> Any:
    """One line of a JSONL file as a JSON object (None for a blank line); one-line errors naming the line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}:{lineno} is not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); convert the "
            "file to UTF-8"
        ) from None
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise ConfigError(f"{path}:{lineno} is not valid JSON (one JSON object per line expected)") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}:{lineno} is not a JSON object")
    if _SURROGATE_ESCAPE.search(line):
        bad = _lone_surrogate(obj)
        if bad is not None:
            raise ConfigError(
                f"{path}:{lineno} holds a lone surrogate {bad} (half of a UTF-16 pair), which is not Unicode text "
                "and cannot be written back: fix or drop the line"
            )
    return obj


def _objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_lines` without the blank lines."""
    return ((lineno, obj) for lineno, obj in iter_lines(path) if obj is not None)


def _first(path: Path) -> dict[str, Any]:
    """The first JSON object of a sample file (read no further); one line when there is none."""
    for _, obj in _objects(path):
        return obj
    raise ConfigError(f"sample file {str(path)!r} is empty")


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in a parsed JSON value, as its escape (``\\ud800``), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"\\u{ord(value[e.start]):04x}"
        return None
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
    for item in items:
        found = _lone_surrogate(item)
        if found is not None:
            return found
    return None


def _checked_lines(path: Path, fmt: SampleFormat) -> list[tuple[int, dict[str, Any]]]:
    """Every line of a sample file, each with the keys of format ``fmt``."""
    lines = list(_objects(path))
    for lineno, obj in lines:
        fmt.check_line(obj, path, lineno)
    return lines


def _index(value: Any, path: Path, lineno: int, key: str = "index") -> int:
    """A problem index from a file: a whole number >= 0 (not text, a fraction, a boolean or null)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{path}:{lineno}: {key} {value!r} is not a problem index (a whole number >= 0)")
    return value


def detect_format(first: dict[str, Any], path: Path) -> SampleFormat:
    """The format of a sample log from the keys of its first line: the registered format whose marks it matches most
    (see the module docstring)."""
    keys = set(first)
    found = max(((SAMPLE_FORMATS.get(n).matches(keys), n) for n in SAMPLE_FORMATS), default=(0, ""))
    if found[0]:
        return SAMPLE_FORMATS.get(found[1])
    expected = [f"{f.title} ({', '.join(f.marks + ((' or '.join(f.one_of),) if f.one_of else ()))})"
                for f in map(SAMPLE_FORMATS.get, SAMPLE_FORMATS)]  # fmt: skip
    raise ConfigError(f"{path}: cannot tell the sample format from its keys {sorted(keys)[:8]}; expected "
                      f"{', '.join(expected[:-1])} or {expected[-1]}")  # fmt: skip


def read_sample_file(text: str) -> SampleFile:
    """Read any registered sample log (:data:`SAMPLE_FORMATS`) into problems sorted by index; one-line errors. A verl
    dump is streamed (two passes, a line at a time: only the completions of the step read are held); the other
    formats are read a line at a time into their lines' objects."""
    path = resolve_sample_path(text)
    fmt = detect_format(_first(path), path)
    problems, step, steps = fmt.read(path, fmt)
    seen: dict[int, int] = {}
    for p in problems:  # in file order
        if p.index in seen:
            raise ConfigError(f"{path}:{p.line}: problem index {p.index} appears twice (first on line {seen[p.index]})")
        seen[p.index] = p.line
        if not p.completions:
            raise ConfigError(f"{path}:{p.line}: problem {p.index} has no completions")
    problems.sort(key=lambda p: p.index)
    return SampleFile(path, fmt.name, problems, step, steps, gsm8k_style(fmt, problems))


def _strings(values: Any, path: Path, lineno: int, where: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(c, str) for c in values):
        raise ConfigError(f"{path}:{lineno}: {where} must be a list of strings (completions)")
    return list(values)


def _text(value: Any, path: Path, lineno: int, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{path}:{lineno}: {key} must be a string (a completion)")
    return value


def _from_ours(obj: dict[str, Any], path: Path, lineno: int) -> ProblemCompletions:
    index = _index(obj["index"], path, lineno)
    columns = obj.get("columns") or {}
    if not isinstance(columns, dict):
        raise ConfigError(f"{path}:{lineno}: columns must be a mapping of the verifier's columns to values")
    return ProblemCompletions(
        index=index,
        prompt=obj.get("prompt"),
        completions=_strings(obj["completions"], path, lineno, f"problem {index}'s completions"),
        prompt_text=obj.get("prompt_text"),
        fields=dict(columns),
        num_tokens=obj.get("num_tokens"),
        finish_reasons=obj.get("finish_reasons"),
        line=lineno,
    )


def _lm_eval_prompt(arguments: Any) -> str | None:
    """The rendered prompt of an lm-eval sample line: ``{"gen_args_0": {"arg_0": text, ...}}`` or ``[[text, ...]]``."""
    if isinstance(arguments, dict) and arguments:
        first = arguments.get("gen_args_0", next(iter(arguments.values())))
        if isinstance(first, dict):
            return first.get("arg_0")
    if isinstance(arguments, list) and arguments and isinstance(arguments[0], list) and arguments[0]:
        return arguments[0][0]
    return None


def gsm8k_gold(answer: Any) -> Any:
    """GSM8K's gold by the dataset's own rule (as ``--task gsm8k`` reads it): the text after the last ``####``,
    stripped, commas removed (``"... #### 1,234"`` -> ``"1234"``); a non-string is returned as it is."""
    return gsm8k_answer(answer) if isinstance(answer, str) else answer


def _is_gsm8k(task: Any, doc: dict[str, Any]) -> bool:
    """Whether an lm-eval line is GSM8K's: its task name says so, or its doc's ``answer`` is a worked solution."""
    if isinstance(task, str) and "gsm8k" in task.lower():
        return True
    return isinstance(doc.get("answer"), str) and GSM8K_MARK in doc["answer"]


def _from_lm_eval(lines: list[tuple[int, dict[str, Any]]], path: Path) -> list[ProblemCompletions]:
    out: dict[int, ProblemCompletions] = {}
    file_task = path.name if "gsm8k" in path.name.lower() else None  # lm-eval names it samples_<task>_<time>.jsonl
    for lineno, obj in lines:
        index = _index(obj["doc_id"], path, lineno, "doc_id")
        if index in out:  # the same document logged once per filter: the raw generations are the same
            continue
        resps = obj["resps"]
        if not isinstance(resps, list) or not resps:
            raise ConfigError(f"{path}:{lineno}: doc_id {index} has no resps (a list of lists of completions)")
        flat = [c for group in resps for c in (group if isinstance(group, list) else [group])]
        text = _lm_eval_prompt(obj.get("arguments"))
        doc = obj.get("doc") if isinstance(obj.get("doc"), dict) else {}
        fields, gold = dict(doc), obj.get("target")
        gsm8k = _is_gsm8k(obj.get("task_name") or file_task, doc)
        if gsm8k:
            if "answer" in fields:
                fields["answer"] = gsm8k_gold(fields["answer"])
            gold = gsm8k_gold(gold)
        out[index] = ProblemCompletions(
            index=index,
            prompt=text,
            prompt_text=text,
            completions=_strings(flat, path, lineno, f"doc_id {index}'s resps"),
            fields=fields,
            gold=gold,
            line=lineno,
            gsm8k=gsm8k,
        )
    return list(out.values())


def gsm8k_style(fmt: SampleFormat, problems: Sequence[ProblemCompletions]) -> str | None:
    """``"gsm8k"`` when a sample log made elsewhere is GSM8K-style: an lm-eval log of GSM8K (a line's ``task_name``
    or the file name says ``gsm8k``, or its ``doc.answer`` holds ``####``), or an lm-eval, verl or plain log whose
    prompts carry GSM8K's answer mark (``#### 72`` after a worked example, or ``"####"`` named by an instruction, as
    verl's GSM8K data asks); else None. Our own ``samples.jsonl`` is never: it was made with a task's prompts, whose
    settings apply. A GSM8K-style log's answers are read as lm-eval reads GSM8K's (:mod:`eval.score_only`)."""
    if fmt.made_here:
        return None
    if any(p.gsm8k for p in problems):
        return "gsm8k"
    for p in problems:
        text = p.prompt_text if isinstance(p.prompt_text, str) else json.dumps(p.prompt, ensure_ascii=False)
        if _GSM8K_PROMPT_MARK.search(text):
            return "gsm8k"
    return None


def _verl_steps(path: Path, fmt: SampleFormat) -> list[Any]:
    """The distinct ``step`` values of a verl dump, ascending (first pass, streamed; every line's keys checked);
    one-line error when there are several and they are not all numbers (a line without one among steps, a step in
    text), since the latest cannot be told."""
    first_line: dict[Any, int] = {}  # each distinct step and the first line that has it (file order)
    odd_line = None  # the first line whose step is not a number
    for lineno, obj in _objects(path):
        fmt.check_line(obj, path, lineno)
        value = obj.get("step")
        first_line.setdefault(value, lineno)
        if odd_line is None and (isinstance(value, bool) or not isinstance(value, int | float)):
            odd_line = (lineno, value)
    steps = list(first_line)
    if len(steps) <= 1:
        return steps
    if odd_line is not None:
        lineno, value = odd_line
        raise ConfigError(
            f"{path}:{lineno}: step {value!r} is not a number, but the file holds several steps "
            f"({', '.join(map(repr, steps[:5]))}{', …' if len(steps) > 5 else ''}); cannot tell the latest: keep "
            "one step's lines"
        )
    return sorted(steps)


def _from_verl(path: Path, fmt: SampleFormat) -> tuple[list[ProblemCompletions], Any, list[Any]]:
    """The problems of a verl dump at its highest step (dumps of several steps may be concatenated in any order),
    that step, and all the file's steps. Streamed: a first pass finds the steps, a second keeps only the prompts,
    golds and completions of the step read (a 100k-line dump is never held as parsed lines)."""
    steps = _verl_steps(path, fmt)
    step = steps[-1]
    groups: dict[str, ProblemCompletions] = {}
    for lineno, obj in _objects(path):
        if obj.get("step") != step:
            continue
        prompt = obj["input"]
        if not isinstance(prompt, str):
            raise ConfigError(f"{path}:{lineno}: input must be the rendered prompt (a string)")
        if prompt not in groups:
            groups[prompt] = ProblemCompletions(
                index=len(groups), prompt=prompt, prompt_text=prompt, completions=[], gold=obj.get("gts"), line=lineno
            )
        elif obj.get("gts") != groups[prompt].gold:
            raise ConfigError(
                f"{path}:{lineno}: input {_short(prompt)} has other gts than on line {groups[prompt].line}; cannot "
                "group its samples"
            )
        groups[prompt].completions.append(_text(obj["output"], path, lineno, "output"))
    return list(groups.values()), step, steps


def _short(prompt: Any, limit: int = 80) -> str:
    """A prompt as it is named in a one-line message (messages as JSON; cut to ``limit`` characters)."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _from_plain(lines: list[tuple[int, dict[str, Any]]], path: Path) -> list[ProblemCompletions]:
    groups: dict[str, ProblemCompletions] = {}
    for lineno, obj in lines:
        if "index" in obj:
            key = f"#{_index(obj['index'], path, lineno)}"
        else:
            key = json.dumps(obj["prompt"], sort_keys=True)
        extra = {k: v for k, v in obj.items() if k not in ("prompt", "completions", "completion", "index")}
        if "completions" in obj:
            new = _strings(obj["completions"], path, lineno, "completions")
        else:
            new = [_text(obj["completion"], path, lineno, "completion")]
        if key not in groups:
            index = obj["index"] if "index" in obj else len(groups)
            text = obj["prompt"] if isinstance(obj["prompt"], str) else None
            groups[key] = ProblemCompletions(index, obj["prompt"], [], text, extra, obj.get("answer"), line=lineno)
        else:
            _record_conflicts(groups[key], extra, path, lineno, groups[key].line)
        groups[key].completions += new
    return list(groups.values())


_ABSENT = object()


def _record_conflicts(problem: ProblemCompletions, extra: dict[str, Any], path: Path, lineno: int, first: int) -> None:
    """Note each field on which line ``lineno`` disagrees with the problem's first line (``first``)."""
    for name in dict.fromkeys([*problem.fields, *extra]):
        was, now = problem.fields.get(name, _ABSENT), extra.get(name, _ABSENT)
        if was == now or name in problem.conflicts:
            continue
        here = "no value" if now is _ABSENT else f"{name}={_cut(now)}"
        there = "no value" if was is _ABSENT else f"{name}={_cut(was)}"
        problem.conflicts[name] = (
            f"{path}:{lineno}: prompt {_short(problem.prompt)} has {here} here but {there} on line {first}; the "
            f"lines of one prompt are one problem and must agree on its {name!r} (give each problem its own prompt "
            "or index, or fix the gold)"
        )


def _cut(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------- writing lm-eval's


def _read_ours(path: Path, fmt: SampleFormat) -> tuple[list[ProblemCompletions], Any, list[Any]]:
    return [_from_ours(obj, path, lineno) for lineno, obj in _checked_lines(path, fmt)], None, []


def _read_lm_eval(path: Path, fmt: SampleFormat) -> tuple[list[ProblemCompletions], Any, list[Any]]:
    return _from_lm_eval(_checked_lines(path, fmt), path), None, []


def _read_plain(path: Path, fmt: SampleFormat) -> tuple[list[ProblemCompletions], Any, list[Any]]:
    return _from_plain(_checked_lines(path, fmt), path), None, []


def register_sample_format(fmt: SampleFormat) -> SampleFormat:
    """Make ``fmt`` readable by ``rlvr-div eval --samples`` (docs/evaluation.md, "Adding a sample format")."""
    return SAMPLE_FORMATS.add(fmt.name, fmt)


register_sample_format(SampleFormat("rlvr_div", "our samples.jsonl", marks=("index", "completions", "columns"),
                                    required=("index", "completions"), read=_read_ours, own_fields=True,
                                    made_here=True))  # fmt: skip
register_sample_format(SampleFormat("lm_eval", "lm-eval --log_samples", marks=("doc_id", "resps"),
                                    required=("doc_id", "resps"), read=_read_lm_eval))  # fmt: skip
register_sample_format(SampleFormat("verl", "verl dumps", marks=("input", "output"), required=("input", "output"),
                                    read=_from_verl, indexed=False))  # fmt: skip
register_sample_format(SampleFormat("plain", "plain JSONL", marks=("prompt",), required=("prompt",),
                                    one_of=("completions", "completion"), read=_read_plain,
                                    own_fields=True))  # fmt: skip


def to_lm_eval(record: dict[str, Any], task: str) -> dict[str, Any]:
    """One of our ``samples.jsonl`` records in lm-eval's ``--log_samples`` schema: ``doc_id``, ``doc`` (the
    verifier columns), ``target``, ``arguments`` (the rendered prompt), ``resps`` (the completions), ``filtered_resps``
    (the extracted answers) and ``acc`` (the fraction correct, c/n)."""
    columns = record.get("columns") or {}
    prompt = record.get("prompt_text") or (record["prompt"] if isinstance(record["prompt"], str) else "")
    return {
        "doc_id": record["index"],
        "doc": {"prompt": record["prompt"], **columns},
        "target": next(iter(columns.values()), None) if len(columns) == 1 else columns,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {}}},
        "resps": [list(record["completions"])],
        "filtered_resps": [a if a is not None else "[invalid]" for a in record["answers"]],
        "filter": "rlvr_div",
        "metrics": ["acc"],
        "acc": record["c"] / record["n"],
        "task_name": task,
    }


def write_lm_eval(records: Sequence[dict[str, Any]], path: Path, task: str) -> None:
    """Write ``records`` (ours) as an lm-eval ``--log_samples`` JSONL file (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(to_lm_eval(record, task), ensure_ascii=False, default=str) + "\n")
