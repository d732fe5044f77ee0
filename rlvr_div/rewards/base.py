"""The reward interface shared by training (as a TRL reward function) and evaluation (batch API).

A reward turns (completion, dataset row) into a score in [0, 1] or ``None`` (cannot be judged, e.g. an unparsable
gold answer; TRL skips it, evaluation counts it apart). A completion is *valid* when its score is 1.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Sequence
from typing import Any

from rlvr_div.errors import ConfigError


def completion_text(completion: Any) -> str:
    """The text of one completion: a string (plain prompts) or a list of chat messages (chat prompts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


def check_validity_reward_index(index: int, rewards: Sequence[str]) -> None:
    """One line when ``validity_reward_index`` (the reward whose score 1 makes a completion valid) names none of
    ``rewards`` (their names, in order)."""
    if not 0 <= index < len(rewards):
        raise ConfigError(
            f"validity_reward_index={index} but the rewards are {list(rewards)} (indices start at 0, one per reward)"
        )


ANY_SETTINGS = "accepts_any_kwargs"  # a reward's attribute: True when its **kwargs takes settings it does not name


def named_settings(target: Any) -> tuple[list[str], bool]:
    """The keyword parameters a reward function or factory, or a reward class's ``__init__`` (following ``**kwargs``
    up to the base class that names them), takes by name, and whether it also takes any other keyword (a ``**kwargs``
    that no base class's ``__init__`` resolves)."""
    classes = target.__mro__ if inspect.isclass(target) else (None,)
    named: list[str] = []
    open_ = False
    for klass in classes:
        init = target if klass is None else klass.__dict__.get("__init__")
        if init is None or klass is object:  # object.__init__ names nothing: a **kwargs above it stays open
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # a builtin: nothing to read, left to the call itself
            return named, False
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        named += [p.name for p in params if p.kind in kinds and p.name != "self" and p.name not in named]
        open_ = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        if not open_:
            break
    return named, open_


def check_settings(name: str, target: Any, settings: dict[str, Any], allowed: Sequence[str] | None = None) -> None:
    """One line for a setting of reward ``name`` that ``target`` (its function, factory or class) does not name
    (``allowed``: the names it takes, when not all its named parameters). A target that takes ``**kwargs`` would
    swallow a misspelt setting silently, so it too must name every setting, unless it declares
    ``accepts_any_kwargs = True``; one without ``**kwargs`` is left to Python's own TypeError."""
    if not settings or getattr(target, ANY_SETTINGS, False):
        return
    named, takes_any = named_settings(target)
    if allowed is None and not takes_any:
        return
    names = list(allowed) if allowed is not None else named
    unknown = [k for k in settings if k not in names]
    if unknown:
        raise ConfigError(
            f"reward {name!r} takes no setting {unknown[0]!r}; its settings: {', '.join(names) or 'none'} (a reward "
            f"whose **kwargs takes any setting declares {ANY_SETTINGS} = True)"
        )


class Reward:
    """Base class: subclasses set ``name`` and ``columns`` and implement :meth:`score` and :meth:`extract`.

    ``columns`` names the dataset columns the verifier reads; both APIs receive them as keyword lists aligned
    with ``completions``.
    """

    name: str = "reward"
    columns: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # TRL logs a reward function under its __name__
        return self.name

    def settings(self) -> dict[str, Any]:
        """The settings this reward was built with (written into evaluation results)."""
        return {}

    def extract(self, completion: str) -> str | None:
        """The final answer the verifier reads from ``completion`` (for majority vote and diversity), or None."""
        return completion.strip() or None

    def score(self, completions: Sequence[str], **columns: Sequence[Any]) -> list[float | None]:
        """Batch API: one score per completion; ``columns[c][i]`` is column ``c`` of completion i's row."""
        raise NotImplementedError

    def batch_metrics(self) -> dict[str, float]:
        """Numbers about the last :meth:`score` call that training logs at every step (none by default)."""
        return {}

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        """TRL reward-function API: ``completions`` plus every dataset column as keyword lists. With TRL's
        ``log_metric`` (TRL >= 1.0 passes it), each of :meth:`batch_metrics` is logged as ``rewards/NAME/KEY``: TRL
        averages it over the logging interval (and processes) into the step's metrics (``metrics.jsonl``)."""
        texts = [completion_text(c) for c in completions]
        missing = [c for c in self.columns if c not in kwargs]
        if missing:
            raise KeyError(f"reward {self.name!r} needs dataset column(s) {missing}")
        scores = self.score(texts, **{c: kwargs[c] for c in self.columns})
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for key, value in self.batch_metrics().items():
                log_metric(f"rewards/{self.name}/{key}", value)
        return scores


def build(name: str, factory: Any, settings: dict[str, Any], type_error: str | None = None) -> Any:
    """``factory(**settings)`` for reward ``name``: the reward's own checks speak first (they say more, e.g. the
    range); a TypeError (a number setting given as text, compared with a number) and a NaN or infinity that passed
    them are one line naming the setting (:func:`check_numbers`); any other TypeError is one line after
    ``type_error`` (default: "bad settings for reward NAME")."""
    try:
        built = factory(**settings)
    except TypeError as e:
        check_numbers(name, factory, settings)
        raise ConfigError(f"{type_error or f'bad settings for reward {name!r}'}: {e}") from None
    check_numbers(name, factory, settings)
    return built


def check_numbers(name: str, target: Any, settings: dict[str, Any]) -> None:
    """One line for a setting of reward ``name`` that ``target`` (its function, factory or class) takes as a number
    (annotated ``int``/``float``, optionally ``| None``, or unannotated with a number default) but that is given as
    anything else, infinity or NaN: ``--reward-arg deadline=nan`` is the text ``"nan"``, which the reward would
    otherwise compare with a number and fail on in a line that names no setting."""
    params = _parameters(target)
    for key, value in settings.items():
        kind = _number_kind(params, key)
        if kind is None or (value is None and kind[1]):
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and math.isfinite(value) and (kind[0] is float or float(value).is_integer()):
            continue
        what = "a finite number" if kind[0] is float else "an integer"
        raise ConfigError(f"reward {name!r} setting {key}={value!r} is not {what}" + (" (or null)" if kind[1] else ""))


def _parameters(target: Any) -> dict[str, tuple[inspect.Parameter, Any]]:
    """The named parameters of ``target`` (a function, or a class's ``__init__`` up its MRO, the first one that
    names each), with their resolved annotation (``inspect.Parameter.empty`` where it does not resolve)."""
    out: dict[str, tuple[inspect.Parameter, Any]] = {}
    inits = [target] if not inspect.isclass(target) else [k.__dict__.get("__init__") for k in target.__mro__]
    for init in inits:
        if init is None or init is object.__init__:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):  # a builtin
            continue
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # an annotation that does not resolve here: the default's type decides
            hints = {}
        for p in params.values():
            if p.name not in out:
                out[p.name] = (p, hints.get(p.name, inspect.Parameter.empty))
    return out


def _number_kind(params: dict[str, tuple[inspect.Parameter, Any]], key: str) -> tuple[type, bool] | None:
    """(int or float, whether None is allowed) when the reward's parameters ``params`` (:func:`_parameters`) take
    setting ``key`` as a number, else None."""
    found = params.get(key)
    if found is None:
        return None
    param, hint = found
    if hint is inspect.Parameter.empty or hint is Any:
        return (float, False) if type(param.default) in (int, float) else None  # any finite number
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = {a for a in args if a is not type(None)}
    if not kinds or not kinds <= {int, float}:
        return None
    return (float if float in kinds else int), type(None) in args or param.default is None
