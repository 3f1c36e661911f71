"""Dataclass fields as a checked schema: each default written once, bounds in field metadata.

A config dataclass (``ExperimentConfig``, ``BufferConfig``, an algorithm's ``Params``) states each
key once: its type in the annotation, its default in the field, and its bounds or choices in the
field's metadata through :func:`setting`, :func:`bounded`, :func:`choice` or :func:`sizes`::

    @dataclass
    class Params:
        gamma: float = bounded(0.99, ge=0, le=1)
        noise: str = choice("gaussian", ("gaussian", "ou", "none"))
        hidden: list[int] = sizes(400, 300)

:func:`checker` turns one field into a check that converts a raw TOML value into the typed one or
raises :class:`Mismatch` carrying the "expected ..." text that config errors quote. Floats reject
``nan`` and ``inf`` unless the field says ``finite=False``.

Standard library only, on purpose: ``wheeler2.buffer`` and ``agents/`` import it, and the config
package imports them, so it must not import the config package back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass
from typing import Any

KEY = "wheeler2"  # the metadata key a field's Spec lives under

Check = Callable[[Any], Any]


class Mismatch(Exception):
    """A value a check refuses; ``expected`` completes "expected ..., got <value>"."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass(frozen=True)
class Spec:
    """What a field accepts beyond its annotation. Bounds apply to numbers, and to the items of a
    list or the values of a table of numbers."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    choices: tuple[Any, ...] | None = None
    finite: bool = True  # floats: refuse nan and +-inf
    nonempty: bool = False  # strings and lists: refuse empty ones
    rule: Callable[[Any], str | None] | None = None  # extra rule: a problem text, or None
    expected: str | None = None  # replaces the generated "expected" text

    def range_text(self) -> str:
        low = self.gt if self.gt is not None else self.ge
        high = self.lt if self.lt is not None else self.le
        if low is not None and high is not None:
            left = "(" if self.gt is not None else "["
            right = ")" if self.lt is not None else "]"
            return f" in {left}{_bound(low)}, {_bound(high)}{right}"
        if self.gt is not None:
            return f" > {_bound(self.gt)}"
        if self.ge is not None:
            return f" >= {_bound(self.ge)}"
        if self.lt is not None:
            return f" < {_bound(self.lt)}"
        if self.le is not None:
            return f" <= {_bound(self.le)}"
        return ""

    def in_range(self, v: float) -> bool:
        return not (
            (self.gt is not None and v <= self.gt)
            or (self.ge is not None and v < self.ge)
            or (self.lt is not None and v >= self.lt)
            or (self.le is not None and v > self.le)
        )


NO_SPEC = Spec()


def _bound(b: float) -> str:
    """A bound as written: ``0.5``, ``1000``, and large whole numbers in full
    (``4_294_967_296``, not ``4.29497e+09``)."""
    if float(b).is_integer() and abs(b) >= 1e6:
        return f"{int(b):_}"
    return f"{b:g}"


def setting(
    default: Any = MISSING,
    *,
    default_factory: Any = MISSING,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    choices: Sequence[Any] | None = None,
    finite: bool = True,
    nonempty: bool = False,
    rule: Callable[[Any], str | None] | None = None,
    expected: str | None = None,
) -> Any:
    """A dataclass field with its checks; no default (and no factory) means required."""
    spec = Spec(
        gt=gt,
        ge=ge,
        lt=lt,
        le=le,
        choices=None if choices is None else tuple(choices),
        finite=finite,
        nonempty=nonempty,
        rule=rule,
        expected=expected,
    )
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEY: spec})


def bounded(
    default: Any = MISSING,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    finite: bool = True,
) -> Any:
    """A number (or optional number) field with bounds: ``bounded(0.99, ge=0, le=1)``."""
    return setting(default, gt=gt, ge=ge, lt=lt, le=le, finite=finite)


def choice(default: Any, options: Sequence[Any]) -> Any:
    """A field that takes one of ``options``; ``default=MISSING`` makes it required."""
    if default is not MISSING and default not in options:
        raise ValueError(f"default {default!r} is not one of {tuple(options)}")
    return setting(default, choices=options)


def sizes(*default: int) -> Any:
    """Layer widths: a non-empty list of integers > 0 (``sizes(64, 64)``)."""
    return setting(default_factory=lambda: list(default), gt=0, nonempty=True)


def spec_of(f: dataclasses.Field) -> Spec:
    return f.metadata.get(KEY, NO_SPEC)


def required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved annotations; {} where one cannot be resolved (only loses checking)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - e.g. a name imported only under TYPE_CHECKING
        return {}


# ---------------------------------------------------------------------------------------------
# Showing values as the user wrote them


def show(v: Any) -> str:
    """A value as the user wrote it in TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(show(x) for x in v) + "]"
    if is_int(v) and not in_int64(v):
        return f"an integer of {len(str(abs(v)))} digits"
    return repr(v)


def expected_of(check: Check) -> str:
    """A check's "expected" text, found by probing it with a value no check accepts."""
    try:
        check(_PROBE)
    except Mismatch as exc:
        return exc.expected
    except Exception:  # noqa: BLE001
        pass
    return "a value"


class _Probe:
    pass


_PROBE = _Probe()


# ---------------------------------------------------------------------------------------------
# Checks for one annotation plus its Spec


def is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


# TOML's integers are 64-bit, and Python's tomllib reads any size: a larger one passed every
# range check and overflowed a float conversion later, with a traceback.
INT64_TEXT = "TOML integers are 64-bit"


def in_int64(v: Any) -> bool:
    return not is_int(v) or -(2**63) <= v < 2**63


def is_finite_number(v: Any) -> bool:
    return is_number(v) and in_int64(v) and math.isfinite(v)


def _integer(spec: Spec) -> Check:
    expected = spec.expected or "an integer" + spec.range_text()

    def check(v: Any) -> int:
        if not in_int64(v):
            raise Mismatch(f"{expected} ({INT64_TEXT})")
        if not is_int(v) or not spec.in_range(v):
            raise Mismatch(expected)
        return int(v)

    return check


def _number(spec: Spec) -> Check:
    expected = spec.expected or "a number" + spec.range_text()
    # Said only when the value was nan or inf, where "a number > 0" alone would puzzle.
    finite_expected = spec.expected or "a finite number" + spec.range_text()

    def check(v: Any) -> float:
        if not in_int64(v):
            raise Mismatch(f"{expected} ({INT64_TEXT})")
        if not is_number(v) or math.isnan(v):
            raise Mismatch(finite_expected if is_number(v) else expected)
        if spec.finite and math.isinf(v):
            raise Mismatch(finite_expected)
        if not spec.in_range(v):
            raise Mismatch(expected)
        return float(v)

    return check


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Mismatch("true or false")
    return v


def _string(spec: Spec, nonempty: bool) -> Check:
    if spec.choices:
        expected = "one of " + ", ".join(f"'{c}'" for c in spec.choices)
    else:
        expected = "a non-empty string" if nonempty else "a string"
    expected = spec.expected or expected

    def check(v: Any) -> str:
        if not isinstance(v, str) or (spec.choices and v not in spec.choices):
            raise Mismatch(expected)
        if nonempty and not v:
            raise Mismatch(expected)
        return v

    return check


def _table(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Mismatch("a table")
    return v


_PLURAL = {
    "an integer": "integers",
    "a number": "numbers",
    "a non-empty string": "strings",
    "a string": "strings",
}


def _plural(inner: str) -> str:
    for single, many in _PLURAL.items():
        if inner.startswith(single):
            return many + inner[len(single) :]
    return inner


def checker(hint: Any, spec: Spec = NO_SPEC, nonempty_strings: bool = False) -> Check:
    """A check for a value of type ``hint`` with ``spec``'s bounds, choices and rule.

    ``nonempty_strings``: the engine's own string keys refuse ""; algorithm parameters may
    legitimately be empty strings.
    """
    check = _checker(hint, spec, nonempty_strings)
    if spec.rule is None:
        return check
    rule = spec.rule

    def with_rule(v: Any) -> Any:
        value = check(v)
        problem = rule(value)
        if problem is not None:
            raise Mismatch(problem)
        return value

    return with_rule


def _checker(hint: Any, spec: Spec, nonempty_strings: bool) -> Check:
    if hint is Any or hint is None:
        return lambda v: v
    if hint is type(None):

        def none_only(v: Any) -> None:
            raise Mismatch("nothing (leave the key out)")

        return none_only
    if hint is bool:
        return _boolean
    if hint is int:
        return _integer(spec)
    if hint is float:
        return _number(spec)
    if hint is str:
        return _string(spec, nonempty_strings or spec.nonempty)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        expected = spec.expected or "one of " + ", ".join(show(a) for a in args)

        def literal(v: Any) -> Any:
            if v not in args or isinstance(v, bool) != any(isinstance(a, bool) for a in args):
                raise Mismatch(expected)
            return v

        return literal
    if origin in (typing.Union, types.UnionType):
        checks = [_checker(a, spec, nonempty_strings) for a in args if a is not type(None)]

        def union(v: Any) -> Any:
            expected = []
            for check in checks:
                try:
                    return check(v)
                except Mismatch as exc:
                    expected.append(exc.expected)
            raise Mismatch(spec.expected or " or ".join(expected))

        return union
    if origin in (tuple, list) or hint in (tuple, list):
        return _sequence(origin or hint, args, spec)
    if origin is dict or hint is dict:
        return _mapping(args, spec)
    if isinstance(hint, type):
        cls = hint
        if dataclasses.is_dataclass(cls):
            # Nested tables are read field by field by the config reader; here only their form.
            return _table

        def instance(v: Any) -> Any:
            if not isinstance(v, cls):
                raise Mismatch(f"a {cls.__name__}")
            return v

        return instance
    return lambda v: v


def _sequence(container: type, args: tuple[Any, ...], spec: Spec) -> Check:
    # Bounds and choices in the spec are the items' (e.g. hidden sizes > 0).
    item_spec = dataclasses.replace(spec, nonempty=False, rule=None, expected=None)
    if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        item_checks = [_checker(a, item_spec, False) for a in args]
        expected = f"a list of {len(args)} (" + ", ".join(map(expected_of, item_checks)) + ")"

        def fixed(v: Any) -> Any:
            if not isinstance(v, list | tuple) or len(v) != len(item_checks):
                raise Mismatch(spec.expected or expected)
            return tuple(c(x) for c, x in zip(item_checks, v))

        return fixed
    each = _checker(args[0], item_spec, False) if args else (lambda v: v)
    noun = "a non-empty list" if spec.nonempty else "a list"
    expected = spec.expected or (noun + (" of " + _plural(expected_of(each)) if args else ""))

    def sequence(v: Any) -> Any:
        if not isinstance(v, list | tuple) or (spec.nonempty and not v):
            raise Mismatch(expected)
        try:
            return container(each(x) for x in v)
        except Mismatch:
            raise Mismatch(expected) from None

    return sequence


def _mapping(args: tuple[Any, ...], spec: Spec) -> Check:
    if len(args) != 2 or args[1] is Any:
        return _table
    each = _checker(args[1], dataclasses.replace(spec, rule=None, expected=None), False)
    expected = spec.expected or "a table of " + _plural(expected_of(each))

    def mapping(v: Any) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise Mismatch(expected)
        try:
            return {str(k): each(x) for k, x in v.items()}
        except Mismatch:
            raise Mismatch(expected) from None

    return mapping


def field_checker(cls: type, f: dataclasses.Field, nonempty_strings: bool = False) -> Check:
    """The check for field ``f`` of dataclass ``cls``: its annotation plus its metadata."""
    return checker(type_hints(cls).get(f.name), spec_of(f), nonempty_strings)


def describe(cls: type, f: dataclasses.Field, nonempty_strings: bool = False) -> str:
    """What field ``f`` accepts, as ``docs/config.md`` states it: "integer > 0", "number in
    [0, 1]", "one of 'serial', 'local', 'ray'" (the expected text without its article)."""
    text = expected_of(field_checker(cls, f, nonempty_strings))
    for article in ("a ", "an "):
        if text.startswith(article):
            return text[len(article) :]
    return text


def problems(obj: Any, skip: Sequence[str] = ()) -> list[str]:
    """``name: expected ..., got ...`` for each field of dataclass ``obj`` its schema refuses.

    For code that builds a config dataclass directly, not from a file (the file reader reports
    each key itself, with the file and table).
    """
    found = []
    for f in dataclasses.fields(obj):
        if f.name in skip or not f.init:
            continue
        value = getattr(obj, f.name)
        if value is None and not required(f) and f.default is None:
            continue
        cls: type = type(obj)
        hint = type_hints(cls).get(f.name)
        nested = [
            a
            for a in (hint, *typing.get_args(hint))
            if isinstance(a, type) and dataclasses.is_dataclass(a)
        ]
        if nested:
            # Code passes the dataclass itself (checked by its own __post_init__), not a table.
            if not isinstance(value, tuple(nested)):
                found.append(f"{f.name}: expected a {nested[0].__name__}, got {show(value)}")
            continue
        try:
            field_checker(type(obj), f)(value)
        except Mismatch as exc:
            found.append(f"{f.name}: expected {exc.expected}, got {show(value)}")
    return found
