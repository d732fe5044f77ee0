"""Math rewards: answer accuracy verified by math-verify, and an optional format reward.

``math_accuracy`` (reads column ``answer``): the final answer is the content of the completion's last ``\\boxed{…}``
(the prompts of the math tasks ask for it), or with ``extract="answer_is"`` the number after the first "The answer
is" (the answer of a few-shot completion-style prompt, whose completion goes on with more "Q:" lines), or with
``extract="gsm8k"`` the number after the first "The answer is" or ``####`` (lm-eval's strict-match for GSM8K; the
default for a GSM8K-style sample log scored by ``rlvr-div eval --samples``, with ``fallback="last_number"``, its
flexible-extract); the score is

    r(completion, gold) = 1  if math-verify judges the answer equal to the gold answer (gold first:
                             ``verify(parse(gold), parse(answer))``), 0 otherwise,
    r = None                 if the gold answer cannot be parsed (TRL skips it; evaluation counts it apart).

Extraction is plain string scanning in the calling process, linear in the completion and capped at
``max_answer_chars`` (an overlong or unbalanced box has no answer: 0). Parsing and verification run in a
:class:`~rlvr_div.rewards.workers.DeadlinePool` with a hard per-item deadline, because math-verify's own timeouts use
``signal.alarm`` (main thread only, and blind to long C calls). A batch (one ``score`` call) also has an overall
budget, ``batch_budget`` seconds (default :data:`BATCH_BUDGET_S`; ``None``: none): answers not verified when it runs
out are unscored (None, like an unparseable gold: not judged wrong) and counted in one warning, so a batch of hostile
answers costs one budget instead of one deadline each. An evaluation counts them in ``unjudged_samples`` of its
``results.json``; in training TRL turns None into NaN, which its sum over reward functions skips, and every step's
metrics count them as ``rewards/math_accuracy/over_budget`` (TRL's ``log_metric``). Results are cached
by (gold, extracted answer), so the duplicate answers of a collapsed policy are verified once; answers stopped by
the budget are not cached, and a later batch verifies them.

math-verify's own log lines (``Timeout during parsing: <the whole input>``, from its ``math_verify.*`` loggers, in
the workers) are cut to one line of at most :data:`MAX_LOGGED_CHARS` characters of the input, and dropped altogether
after :func:`set_quiet` (``rlvr-div eval --quiet``).

``math_format`` (no columns): 1 when the completion has a non-empty, balanced ``\\boxed{…}`` of at most
``max_answer_chars`` characters, else 0.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward
from rlvr_div.rewards.workers import DeadlinePool

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 1000
BATCH_BUDGET_S = 60.0  # seconds of verification per score() call; recorded in settings() only when changed
CACHE_SIZE = 200_000
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character never opens or closes a group
_BARE_TOKEN = re.compile(r"[^\s$]+")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_SPACES = re.compile(r"\s+")
FALLBACKS = ("none", "last_number")
EXTRACTS = ("boxed", "answer_is", "gsm8k")
_ANSWER_IS = re.compile(r"the answer is", re.IGNORECASE)
GSM8K_MARK = "####"  # GSM8K's worked solutions end with "#### <answer>"
_GSM8K_MARKS = re.compile(r"the answer is|" + re.escape(GSM8K_MARK), re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"[\s:=$]*(-?\d[\d,]*(?:\.\d+)?)")
MAX_LOGGED_CHARS = 80  # of a hostile input echoed by one of math-verify's log lines
# math-verify's loggers (a filter on a logger does not see its children's records, so each gets one)
MATH_VERIFY_LOGGERS = ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.metric",
                       "math_verify.utils", "math_verify.tasks")  # fmt: skip
_quiet = False  # this process's math-verify lines are dropped (set_quiet; carried to the workers by the pool)


class _ShortMathVerifyLines(logging.Filter):
    """math-verify's log lines, cut to one line that echoes at most :data:`MAX_LOGGED_CHARS` characters of its input
    (its timeout lines quote the whole input, a hostile answer of any length); none after :func:`set_quiet`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _quiet and record.levelno < logging.ERROR:
            return False
        message = record.getMessage()
        head, sep, tail = message.partition(": ")
        if not sep or len(head) > MAX_LOGGED_CHARS:
            head, tail = "", message
        tail = tail.replace("\r", "\\r").replace("\n", "\\n")
        if len(tail) > MAX_LOGGED_CHARS:
            tail = f"{tail[:MAX_LOGGED_CHARS]}... ({len(tail)} characters)"
        record.msg, record.args = f"{head}{sep}{tail}", ()
        return True


_SHORT_LINES = _ShortMathVerifyLines()
for _name in MATH_VERIFY_LOGGERS:
    if _SHORT_LINES not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_SHORT_LINES)


def set_quiet(quiet: bool = True) -> bool:
    """Drop math-verify's warnings (its timeout lines) in this process and in the workers of every math_accuracy
    pool used afterwards (``rlvr-div eval --quiet``); returns the previous setting."""
    global _quiet
    was, _quiet = _quiet, bool(quiet)
    return was


def _clean(answer: str) -> str | None:
    answer = _SPACES.sub(" ", answer).strip().strip("$").strip()
    return answer or None


def extract_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The content of the last ``\\boxed{…}`` (or ``\\fbox{…}``, or ``\\boxed 5``) in ``text``, whitespace
    collapsed; None when there is none, it is unbalanced, empty, or longer than ``max_chars``.

    Cost is O(len(text)) for the search plus O(max_chars) for the brace scan, whatever the input."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    j = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    window = text[j : j + max_chars + 64].lstrip(" ")
    if not window:
        return None
    if window[0] != "{":
        m = _BARE_TOKEN.match(window)
        return _clean(m.group(0)) if m and len(m.group(0)) <= max_chars else None
    depth = 0
    for m in _BRACE_TOKENS.finditer(window, 0, max_chars + 2):
        tok = m.group(0)
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return _clean(window[1 : m.start()])
    return None


def last_number(text: str, tail: int = 500) -> str | None:
    """The last number in the final ``tail`` characters of ``text`` (commas removed), or None."""
    numbers = _NUMBER.findall(text[-tail:])
    return numbers[-1].replace(",", "") if numbers else None


def answer_is(text: str) -> str | None:
    """The number right after the first "The answer is" in ``text`` (case-insensitive; ``:``, ``=`` and ``$`` may
    come between), commas removed; None when there is no such phrase or no number follows it. "The answer is 1,200."
    -> ``"1200"``; a sentence's final period is no decimal point (``"6."`` -> ``"6"``, ``"6.5"`` -> ``"6.5"``)."""
    found = _ANSWER_IS.search(text)
    if found is None:
        return None
    m = _LEADING_NUMBER.match(text, found.end(), found.end() + 64)
    return m.group(1).replace(",", "") if m else None


def gsm8k_marked(text: str) -> str | None:
    """The number after the first "The answer is" or ``####`` in ``text`` that a number follows (whichever comes
    first; case-insensitive; ``:``, ``=`` and ``$`` may come between), commas removed, else None: lm-eval's
    ``strict-match`` answer of its ``gsm8k-cot`` ("The answer is 18.") and ``gsm8k`` ("#### 18") tasks. Linear in
    ``text``: each mark is followed by at most 64 characters of scanning."""
    for found in _GSM8K_MARKS.finditer(text):
        m = _LEADING_NUMBER.match(text, found.end(), found.end() + 64)
        if m:
            return m.group(1).replace(",", "")
    return None


def gold_text(gold: Any) -> str:
    """A gold answer as text: ``27.0`` -> ``"27"``, strings stripped of surrounding ``$``, None -> ``""``."""
    if gold is None:
        return ""
    if isinstance(gold, float) and gold.is_integer():
        return str(int(gold))
    return str(gold).strip().strip("$").strip()


def gsm8k_answer(solution: str) -> str:
    """GSM8K's gold by the dataset's own rule: the text after the last ``####``, stripped, commas removed
    (``"... #### 1,234"`` -> ``"1234"``); the one rule both ``--task gsm8k`` and score-only files use."""
    return solution.split(GSM8K_MARK)[-1].strip().replace(",", "")


# --------------------------------------------------------------------------------------------- worker side


def _configs() -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


@lru_cache(maxsize=8192)
def _parse_gold(gold: str, timeout: int) -> Any:
    from math_verify import parse

    text = gold if "\\boxed" in gold else f"\\boxed{{{gold}}}"
    return parse(text, _configs(), parsing_timeout=timeout)


def verify_answer(gold: str, answer: str | None, timeout: int = 5) -> float | None:
    """1.0 if ``answer`` equals ``gold`` under math-verify (gold parsed first), 0.0 if not or if there is no
    answer, None if the gold cannot be parsed. Runs math-verify's own ``signal.alarm`` timeouts (``timeout`` s per
    parse and per comparison), so call it in a main thread: in a worker of :class:`DeadlinePool`, or in a script."""
    from math_verify import parse, verify

    if not gold:
        return None
    gold_parsed = _parse_gold(gold, timeout)
    if not gold_parsed:
        return None
    if answer is None:
        return 0.0
    pred = parse(f"\\boxed{{{answer}}}", _configs(), parsing_timeout=timeout)
    if not pred:
        return 0.0
    return 1.0 if verify(gold_parsed, pred, timeout_seconds=timeout) else 0.0


def warm_up() -> None:
    """Verify a few typical answers (numbers, fractions, roots, tuples, intervals, polynomials) so that the import
    and sympy caches are warm; the worker zygote runs this once and every forked worker inherits the result."""
    for gold, answer in (
        ("18", "18.0"),
        ("\\frac{1}{2}", "0.5"),
        ("\\sqrt{2}", "2^{1/2}"),
        ("(1, 2)", "(1,2)"),
        ("[1, 3)", "[1,3)"),
        ("x^2+1", "1+x^2"),
        ("\\pi", "3.14"),
        ("10\\%", "0.1"),
    ):
        verify_answer(gold, answer, 5)


def _verify_item(timeout: int, item: tuple[str, str | None], quiet: bool = False) -> float | None:
    global _quiet
    _quiet = quiet  # the parent's set_quiet, in this worker
    return verify_answer(item[0], item[1], timeout)


# --------------------------------------------------------------------------------------------- rewards


class MathAccuracy(Reward):
    """``math_accuracy``: 1 when the last ``\\boxed{}`` answer equals column ``answer`` (math-verify), else 0;
    None for an unparsable gold answer.

    Settings: ``deadline`` (s per verification, hard: the worker is killed), ``batch_budget`` (s for all the
    verifications of one ``score`` call; the answers not verified by then score 0, with a warning counting them;
    ``None``: no budget), ``workers`` (processes; default one per core), ``max_answer_chars``, ``extract``
    (``"boxed"``: the last ``\\boxed{}``; ``"answer_is"``: the number after the first "The answer is", the answer of
    the math tasks' ``format: fewshot`` prompts, which select it; ``"gsm8k"``: the number after the first "The answer
    is" or ``####``, lm-eval's strict-match for GSM8K, the default when scoring a GSM8K-style sample log),
    ``fallback`` (when the extraction finds nothing; ``"none"``: no answer; ``"last_number"``: the last number of the
    completion is the answer, as lm-eval's flexible-extract for GSM8K), ``memory_mb`` (per worker).
    """

    name = "math_accuracy"
    columns = ("answer",)

    def __init__(
        self,
        deadline: float = 5.0,
        workers: int | None = None,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        fallback: str = "none",
        memory_mb: int | None = 4096,
        cache_size: int = CACHE_SIZE,
        batch_budget: float | None = BATCH_BUDGET_S,
        extract: str = "boxed",
    ) -> None:
        if deadline <= 0:
            raise ConfigError(f"math_accuracy deadline must be > 0 seconds, got {deadline}")
        if batch_budget is not None and (
            isinstance(batch_budget, bool) or not isinstance(batch_budget, (int, float)) or not 0 < batch_budget < 1e9
        ):
            raise ConfigError(
                f"math_accuracy batch_budget must be a number of seconds > 0 (or null for none), got {batch_budget!r}"
            )
        if fallback not in FALLBACKS:
            raise ConfigError(f"math_accuracy fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
        if extract not in EXTRACTS:
            raise ConfigError(f"math_accuracy extract must be one of {', '.join(EXTRACTS)}, got {extract!r}")
        if workers is not None and workers < 1:
            raise ConfigError(f"math_accuracy workers must be >= 1, got {workers}")
        self.deadline = float(deadline)
        self.workers = workers
        self.max_answer_chars = int(max_answer_chars)
        self.fallback = fallback
        self.extract_mode = extract  # (``extract`` is the method)
        self.memory_mb = memory_mb
        self.cache_size = int(cache_size)
        self.batch_budget = None if batch_budget is None else float(batch_budget)
        self.stats = {"scored": 0, "verified": 0, "timeouts": 0, "errors": 0, "over_budget": 0}
        self.last_over_budget = 0  # completions of the last score() call that the batch budget left unscored
        self._cache: OrderedDict[tuple[str, str | None], float | None] = OrderedDict()
        self._pool: DeadlinePool | None = None

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "deadline": self.deadline,
            "max_answer_chars": self.max_answer_chars,
            "fallback": self.fallback,
        }
        if self.batch_budget != BATCH_BUDGET_S:  # the default is left out: evaluations made before it still resume
            out["batch_budget"] = self.batch_budget
        if self.extract_mode != "boxed":  # likewise: the default is left out
            out["extract"] = self.extract_mode
        return out

    @property
    def pool(self) -> DeadlinePool:
        """The worker pool (started on first use, and again when :func:`set_quiet` changed since)."""
        if self._pool is not None and getattr(self, "_pool_quiet", _quiet) != _quiet:
            self._pool.close()
            self._pool = None
        if self._pool is None:
            inner = max(1, int(0.6 * self.deadline))  # math-verify's own alarm: a cheaper first line of defence
            func = partial(_verify_item, inner, quiet=_quiet)
            self._pool_quiet = _quiet  # what this pool's workers were started with
            self._pool = DeadlinePool(func, workers=self.workers, deadline=self.deadline, memory_mb=self.memory_mb)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        if self._pool is not None:
            self._pool.close()

    def extract(self, completion: str) -> str | None:
        if self.extract_mode == "answer_is":
            answer = answer_is(completion)
        elif self.extract_mode == "gsm8k":
            answer = gsm8k_marked(completion)
        else:
            answer = extract_boxed(completion, self.max_answer_chars)
        if answer is None and self.fallback == "last_number":
            answer = last_number(completion)
        return answer

    def score(self, completions: Sequence[str], answer: Sequence[Any]) -> list[float | None]:
        keys = [(gold_text(g), self.extract(c)) for c, g in zip(completions, answer)]
        known: dict[tuple[str, str | None], float | None] = {}
        todo: list[tuple[str, str | None]] = []
        for k in dict.fromkeys(keys):
            if k in self._cache:
                self._cache.move_to_end(k)
                known[k] = self._cache[k]
            else:
                todo.append(k)
        stopped: set[tuple[str, str | None]] = set()
        if todo:
            for k, (status, value) in zip(todo, self.pool.run(todo, budget=self.batch_budget)):
                if status == "budget":  # not verified: unscored now, not cached
                    stopped.add(k)
                    known[k] = None
                    continue
                if status != "ok":
                    self.stats["timeouts" if status == "timeout" else "errors"] += 1
                    logger.debug("math verification %s for %r: %s", status, k, value)
                known[k] = value if status == "ok" else 0.0
                self._cache[k] = known[k]
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        self.stats["scored"] += len(keys)
        self.stats["verified"] += len(todo) - len(stopped)
        self.last_over_budget = sum(k in stopped for k in keys)
        if stopped:
            count = self.last_over_budget
            self.stats["over_budget"] += count
            logger.warning(
                "math_accuracy: %d of %d completions were not verified within the batch budget of %g s "
                "(batch_budget); they are unscored (None)",
                count,
                len(keys),
                self.batch_budget,
            )
        return [known[k] for k in keys]

    def batch_metrics(self) -> dict[str, float]:
        """``over_budget``: how many completions of the last batch the batch budget left unscored (their reward is
        lost to training: TRL skips a None); logged at every training step as ``rewards/math_accuracy/over_budget``."""
        return {"over_budget": float(self.last_over_budget)}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_cache": OrderedDict()}


class MathFormat(Reward):
    """``math_format``: 1 when the completion ends its reasoning with a usable ``\\boxed{…}`` answer (non-empty,
    balanced, at most ``max_answer_chars`` characters), else 0. Reads no column."""

    name = "math_format"
    columns = ()

    def __init__(self, max_answer_chars: int = MAX_ANSWER_CHARS) -> None:
        self.max_answer_chars = int(max_answer_chars)

    def settings(self) -> dict[str, Any]:
        return {"max_answer_chars": self.max_answer_chars}

    def extract(self, completion: str) -> str | None:
        return extract_boxed(completion, self.max_answer_chars)

    def score(self, completions: Sequence[str], **_: Sequence[Any]) -> list[float | None]:
        return [float(self.extract(c) is not None) for c in completions]


REWARDS.add("math_accuracy", MathAccuracy)
REWARDS.add("math_format", MathFormat)
