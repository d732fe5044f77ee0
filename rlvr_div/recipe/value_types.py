"""The value types of recipe keys, read from the config classes' annotations: whether a YAML value has its field's
type (a YAML value is not converted by the command-line parser), how to name a type in a one-line error, and which
scalar types a field admits."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from typing import Any

from rlvr_div.errors import ConfigError


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    return typing.get_args(tp) if origin is typing.Union or origin is types.UnionType else None


BOOL_TEXT = ("true", "false")  # the text a boolean key takes (any case), on the command line or quoted in YAML


def accepts(value: Any, tp: Any, text_converts: bool = False) -> bool:
    """Whether ``value`` (from YAML) is of type ``tp`` (a field annotation). ``text_converts``: a string is also
    accepted where the command-line parser converts it (int and float scalars: YAML reads ``1e-4`` as text; bool: only
    ``true``/``false``, any case)."""
    if tp is Any or tp is object:
        return True
    union = _union_args(tp)
    if union is not None:
        return any(accepts(value, a, text_converts) for a in union)
    if tp is type(None):
        return value is None
    if isinstance(value, str) and text_converts and tp is bool:
        return value.lower() in BOOL_TEXT  # as the command line: true or false, not yes/1/on
    if isinstance(value, str) and text_converts and tp in (int, float):
        return True
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(accepts(v, inner) for v in value)
    if tp is dict or origin is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or value in [m.value for m in tp]
    if isinstance(tp, type):
        return isinstance(value, tp)  # a config object: nothing YAML writes is one
    return True  # an annotation this check does not know: left to the class itself


def describe_type(tp: Any) -> str:
    """``list[str] | None`` → "a list of strings, or null"."""
    union = _union_args(tp)
    if union is not None:
        parts = [describe_type(a) for a in union if a is not type(None)]
        return " or ".join(dict.fromkeys(parts)) + (", or null" if type(None) in union else "")
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", dict: "a mapping"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        inner = {str: "strings", int: "whole numbers", float: "numbers"}.get(args[0] if args else None, "values")
        return f"a list of {inner}"
    if origin is dict:
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp))


def field_types(*classes: type) -> dict[str, Any]:
    """The annotated type of every field of the dataclasses ``classes`` (the first class that has a key wins)."""
    out: dict[str, Any] = {}
    for cls in classes:
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):  # base classes first: a subclass whose annotations do not resolve
            try:  # here leaves its bases' fields checked
                hints.update(typing.get_type_hints(klass))
            except Exception:
                continue
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, hints.get(f.name, Any))
    return out


# list-typed keys whose consumer also reads one string (peft: "all-linear", or a regular expression of module names)
TEXT_FOR_LIST = frozenset({"lora_target_modules"})


def check_recipe_types(recipe: dict[str, Any], types_: dict[str, Any], where: str = "recipe") -> None:
    """Every value of a recipe mapping has its field's type (``types_``: :func:`field_types` of the config classes),
    before the parser and the classes see it (a YAML value is not converted by the command-line parser, so
    ``max_steps: 5.5`` or ``rewards: arith_exact`` would reach the trainer and fail there, after the model loaded)."""
    for key, value in recipe.items():
        tp = types_.get(key)
        if tp is None or accepts(value, tp, text_converts=True):
            continue
        if key in TEXT_FOR_LIST and isinstance(value, str):
            continue
        hint = ""
        if isinstance(value, str) and accepts([value], tp):
            hint = f" (a list: [{value}])"
        raise ConfigError(f"{where} key {key}={value!r} has the wrong type: it must be {describe_type(tp)}{hint}")


def scalar_kinds(tp: Any) -> set[Any]:
    """The scalar types a field annotation admits (``float | None`` -> {float, NoneType}; lists: their items')."""
    union = _union_args(tp)
    if union is not None:
        return set().union(*(scalar_kinds(a) for a in union))
    origin = typing.get_origin(tp)
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        return scalar_kinds(args[0]) if args else {Any}
    return {tp}
