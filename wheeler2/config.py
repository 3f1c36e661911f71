"""An experiment file (TOML) -> a typed, validated, frozen :class:`Config`.

Every mistake a user can make in a file becomes one :class:`ConfigError` naming the file, the table,
the key and what was expected, before any process starts or any network is built. The file format
is the contract of ``../shared/DESIGN.md`` section 3; ``docs/config.md`` lists every key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
import types
import typing
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheeler2 import registry

BACKENDS = ("serial", "local", "ray")
ROLES = ("learner", "explorer")
HER_STRATEGIES = ("future", "final", "episode", "random")

# Old key -> new key, per table. The old name keeps working with a warning, so files written for
# an earlier version still run (DESIGN.md section 3: renames keep the old name working).
RENAMED: dict[str, dict[str, str]] = {
    "buffer": {"ratio": "updates_per_insert"},
}


class ConfigError(Exception):
    """A config mistake, located: ``cfg/x.toml: [buffer] capacity: expected an integer > 0``."""

    def __init__(
        self,
        file: str | Path | None,
        table: str | None,
        key: str | None,
        message: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.file = None if file is None else str(file)
        self.table = table
        self.key = key
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __reduce__(self) -> tuple:
        # Keeps every field when the error crosses a process boundary (local and ray backends).
        args = (self.file, self.table, self.key, self.message, self.line, self.column)
        return (type(self), args)

    def __str__(self) -> str:
        where = " ".join(part for part in (self.table, self.key) if part)
        head = self.file or "<config>"
        if self.line is not None:
            head += f": line {self.line}, column {self.column}"
        return f"{head}: {where}: {self.message}" if where else f"{head}: {self.message}"


class ConfigDeprecationWarning(FutureWarning):
    """An old key name was used; shown to users by default (unlike DeprecationWarning)."""


# ---------------------------------------------------------------------------------------------
# The typed result


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    total_steps: int
    eval_every: int
    seed: int = 0
    eval_episodes: int = 10
    backend: str = "serial"
    out: str = "runs"
    checkpoint_every: int = 0  # filled with eval_every when the file leaves it out
    progress: bool = True
    eval_threshold: float | None = None
    stop_at_threshold: bool = False  # end the run at the first eval above eval_threshold
    ray_address: str | None = None


@dataclass(frozen=True)
class EnvConfig:
    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 1
    # "sync": the copies step in the member's process; "async": one subprocess per copy, for
    # envs slow enough that stepping them in parallel beats the pipe round trips.
    vector: str = "sync"


VECTOR_MODES = ("sync", "async")


@dataclass(frozen=True)
class HeadConfig:
    name: str
    reward: str = "env"  # "env" or "module:function"
    weight: float = 1.0


@dataclass(frozen=True)
class TaskConfig:
    spec: str | None = None
    heads: tuple[HeadConfig, ...] = (HeadConfig("env"),)


@dataclass(frozen=True)
class HerConfig:
    strategy: str = "future"
    k: int = 4


@dataclass(frozen=True)
class BufferConfig:
    capacity: int = 200_000
    batch_size: int = 256
    prioritized: bool = False
    alpha: float = 0.6
    beta: float = 0.4
    n_step: int = 1
    updates_per_insert: float = 1.0
    her: HerConfig | None = None
    checkpoint: bool = False
    chunk: int = 64
    shards: int = 1  # replay shards (ray backend; serial and local keep one buffer)


@dataclass(frozen=True)
class SyncConfig:
    every: int
    keep: tuple[str, ...] = ()
    alpha: float = 1.0


@dataclass(frozen=True)
class MemberConfig:
    name: str
    algo: str
    role: str
    params: Any  # an instance of the algorithm's Params dataclass
    count: int = 1
    sync: SyncConfig | None = None
    agents: tuple[str, ...] | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: dict[str, float] | None = None  # ray custom resources, e.g. {explorer_node = 1}
    agent_class: type | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Config:
    # Equality compares what the experiment is, not where it was read from.
    path: Path = field(compare=False)
    experiment: ExperimentConfig
    env: EnvConfig
    task: TaskConfig
    buffer: BufferConfig
    team: tuple[MemberConfig, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def learner(self) -> MemberConfig:
        return next(m for m in self.team if m.role == "learner")

    @property
    def explorers(self) -> tuple[MemberConfig, ...]:
        return tuple(m for m in self.team if m.role == "explorer")

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain TOML-ready data (defaults filled, ``None`` left out)."""
        task: dict[str, Any] = {"heads": [_plain(h) for h in self.task.heads]}
        if self.task.spec is not None:
            task["spec"] = self.task.spec
        team = []
        for m in self.team:
            member = {"name": m.name, "algo": m.algo, "role": m.role, "count": m.count}
            for key in ("agents", "num_cpus", "num_gpus", "resources", "sync"):
                if getattr(m, key) is not None:
                    member[key] = _plain(getattr(m, key))
            member["params"] = _plain(m.params)
            team.append(member)
        return {
            "experiment": _plain(self.experiment),
            "env": _plain(self.env),
            "task": task,
            "buffer": _plain(self.buffer),
            "team": team,
        }

    def to_toml(self) -> str:
        """The resolved config; ``load`` reads it back into an equal Config (used by resume)."""
        data = self.to_dict()
        try:
            import tomli_w
        except ImportError:
            return dumps_toml(data)
        return tomli_w.dumps(data)


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and dicts -> dicts and lists, dropping ``None`` (TOML has no null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {
            f.name: getattr(value, f.name)
            for f in dataclasses.fields(value)
            if f.name != "agent_class"
        }
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Checks: each turns a raw TOML value into a typed one or raises _Mismatch(what was expected)


class _Mismatch(Exception):
    def __init__(self, expected: str) -> None:
        self.expected = expected


_Check = Callable[[Any], Any]
_REQUIRED = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bound_text(gt: float | None, ge: float | None) -> str:
    if gt is not None:
        return f" > {gt:g}"
    if ge is not None:
        return f" >= {ge:g}"
    return ""


def _integer(gt: int | None = None, ge: int | None = None) -> _Check:
    expected = "an integer" + _bound_text(gt, ge)

    def check(v: Any) -> int:
        if not _is_int(v) or (gt is not None and v <= gt) or (ge is not None and v < ge):
            raise _Mismatch(expected)
        return v

    return check


def _number(gt: float | None = None, ge: float | None = None, le: float | None = None) -> _Check:
    if le is not None:
        low = "(" if gt is not None else "["
        expected = f"a number in {low}{gt if gt is not None else ge:g}, {le:g}]"
    else:
        expected = "a number" + _bound_text(gt, ge)

    def check(v: Any) -> float:
        ok = (_is_int(v) or isinstance(v, float)) and not math.isnan(v)
        if ok:
            ok = not (
                (gt is not None and v <= gt)
                or (ge is not None and v < ge)
                or (le is not None and v > le)
            )
        if not ok:
            raise _Mismatch(expected)
        return float(v)

    return check


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Mismatch("true or false")
    return v


def _string(choices: Iterable[str] | None = None) -> _Check:
    options = tuple(choices or ())
    expected = "one of " + ", ".join(f"'{c}'" for c in options) if options else "a string"

    def check(v: Any) -> str:
        if not isinstance(v, str) or (options and v not in options) or not v:
            raise _Mismatch(expected if options else "a non-empty string")
        return v

    return check


def _any_string(v: Any) -> str:
    # Algorithm parameters may legitimately be empty strings; only the engine's own keys forbid it.
    if not isinstance(v, str):
        raise _Mismatch("a string")
    return v


def _string_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Mismatch("a list of strings")
    return tuple(v)


def _table(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Mismatch("a table")
    return v


def _show(v: Any) -> str:
    """A value as the user wrote it in TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v)


# ---------------------------------------------------------------------------------------------
# Reading tables


class _Reader:
    """Validates tables of one file; knows the file name every error must carry."""

    def __init__(self, file: str) -> None:
        self.file = file

    def error(self, table: str | None, key: str | None, message: str) -> ConfigError:
        return ConfigError(self.file, table, key, message)

    def unknown_key(self, table: str | None, key: str, valid: Iterable[str]) -> ConfigError:
        valid = sorted(valid)
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        if close:
            hint = f"did you mean '{close[0]}'?"
        else:
            hint = "valid keys: " + ", ".join(valid)
        return self.error(table, key, f"unknown key; {hint}")

    def renamed(self, scope: str, table: str, data: dict[str, Any]) -> dict[str, Any]:
        renames = RENAMED.get(scope, {})
        if not any(old in data for old in renames):
            return data
        data = dict(data)
        for old, new in renames.items():
            if old not in data:
                continue
            if new in data:
                raise self.error(table, old, f"old name of '{new}', which is also set; keep one")
            warnings.warn(
                f"{self.file}: {table} '{old}' is deprecated; call it '{new}'",
                ConfigDeprecationWarning,
                stacklevel=2,
            )
            data[new] = data.pop(old)
        return data

    def table(
        self,
        table: str,
        data: Any,
        schema: dict[str, tuple[_Check, Any]],
        scope: str | None = None,
    ) -> dict[str, Any]:
        """Check ``data`` against ``schema`` {key: (check, default or _REQUIRED)}."""
        if not isinstance(data, dict):
            raise self.error(table, None, f"expected a table, got {_show(data)}")
        if scope is not None:
            data = self.renamed(scope, table, data)
        for key in data:
            if key not in schema:
                raise self.unknown_key(table, key, schema)
        values: dict[str, Any] = {}
        for key, (check, default) in schema.items():
            if key not in data:
                if default is _REQUIRED:
                    raise self.error(table, key, f"missing required key ({_expected_of(check)})")
                values[key] = default
                continue
            values[key] = self.value(table, key, data[key], check)
        return values

    def value(self, table: str, key: str, raw: Any, check: _Check) -> Any:
        try:
            return check(raw)
        except _Mismatch as exc:
            raise self.error(table, key, f"expected {exc.expected}, got {_show(raw)}") from None


def _expected_of(check: _Check) -> str:
    # Probing a check with a value no check accepts yields its "expected" text.
    try:
        check(object())
    except _Mismatch as exc:
        return exc.expected
    except Exception:  # noqa: BLE001
        pass
    return "a value"


# ---------------------------------------------------------------------------------------------
# Algorithm parameters: validated against the algorithm's own Params dataclass


def _hint_check(hint: Any) -> _Check:
    """A check for one Params field's type annotation."""
    if hint is Any or hint is None:
        return lambda v: v
    if hint is type(None):

        def none_only(v: Any) -> None:
            raise _Mismatch("nothing (leave the key out)")

        return none_only
    if hint is bool:
        return _boolean
    if hint is int:
        return _integer()
    if hint is float:
        return _number()
    if hint is str:
        return _any_string
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        expected = "one of " + ", ".join(_show(a) for a in args)

        def literal(v: Any) -> Any:
            if v not in args or isinstance(v, bool) != any(isinstance(a, bool) for a in args):
                raise _Mismatch(expected)
            return v

        return literal
    if origin in (typing.Union, types.UnionType):
        checks = [_hint_check(a) for a in args if a is not type(None)]

        def union(v: Any) -> Any:
            expected = []
            for check in checks:
                try:
                    return check(v)
                except _Mismatch as exc:
                    expected.append(exc.expected)
            raise _Mismatch(" or ".join(expected))

        return union
    if origin in (tuple, list):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item_checks: list[_Check] | None = None
            each = _hint_check(args[0])
        elif origin is tuple and args:
            item_checks = [_hint_check(a) for a in args]
            each = None
        else:
            item_checks, each = None, _hint_check(args[0]) if args else (lambda v: v)
        container = tuple if origin is tuple else list

        def sequence(v: Any) -> Any:
            noun = "a list" if item_checks is None else f"a list of {len(item_checks)}"
            if not isinstance(v, list | tuple):
                raise _Mismatch(noun + _of(each, item_checks))
            if item_checks is not None:
                if len(v) != len(item_checks):
                    raise _Mismatch(noun + _of(each, item_checks))
                return container(c(x) for c, x in zip(item_checks, v))
            try:
                return container(each(x) for x in v)
            except _Mismatch:
                raise _Mismatch(noun + _of(each, item_checks)) from None

        return sequence
    if origin is dict or hint is dict:
        return _table
    if isinstance(hint, type):
        cls = hint

        def instance(v: Any) -> Any:
            if not isinstance(v, cls):
                raise _Mismatch(f"a {cls.__name__}")
            return v

        return instance
    return lambda v: v


def _of(each: _Check | None, item_checks: list[_Check] | None) -> str:
    if item_checks is not None:
        return " (" + ", ".join(_expected_of(c) for c in item_checks) + ")"
    if each is None:
        return ""
    inner = _expected_of(each)
    plural = {"an integer": "integers", "a number": "numbers", "a non-empty string": "strings"}
    return " of " + plural.get(inner, inner)


def _params(reader: _Reader, table: str, algo: str, params_cls: type, data: Any) -> Any:
    if not dataclasses.is_dataclass(params_cls):
        raise reader.error(table, None, f"{algo}.Params is not a dataclass")
    if not isinstance(data, dict):
        raise reader.error(table, None, f"expected a table, got {_show(data)}")
    try:
        hints = typing.get_type_hints(params_cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation only loses type checking
        hints = {}
    settable = {f.name: f for f in dataclasses.fields(params_cls) if f.init}
    for key in data:
        if key not in settable:
            raise reader.unknown_key(table, key, settable)
    values = {}
    for name, f in settable.items():
        if name in data:
            values[name] = reader.value(table, name, data[name], _hint_check(hints.get(name)))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise reader.error(table, name, f"missing required key for {algo}")
    try:
        return params_cls(**values)
    except (ValueError, TypeError) as exc:
        raise reader.error(table, None, f"{algo} rejects these parameters: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Overrides from the command line


def apply_override(raw: dict[str, Any], expr: str, file: str = "<config>") -> None:
    """Apply ``table.key=value`` (value in TOML syntax, else taken as a string) to ``raw``.

    Inside arrays of tables (``team``, ``task.heads``) the next part is an index or a name:
    ``team.target.params.gamma=0.9`` and ``team.0.params.gamma=0.9`` are the same.
    """
    path, sep, text = expr.partition("=")
    parts = path.strip().split(".")
    if not sep or len(parts) < 2 or not all(parts):
        raise ConfigError(file, "--set", expr, "expected table.key=value, e.g. buffer.n_step=3")
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = _list_item(node, part, ".".join(parts[:depth]), file, expr)
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise ConfigError(file, "--set", expr, f"'{where}' is a value, not a table")
    last = parts[-1]
    if isinstance(node, list):
        raise ConfigError(file, "--set", expr, f"'{path}' is an array of tables; set a key in it")
    node[last] = value


def _list_item(items: list[Any], part: str, where: str, file: str, expr: str) -> Any:
    if part.isdigit():
        if int(part) < len(items):
            return items[int(part)]
        raise ConfigError(file, "--set", expr, f"'{where}' has {len(items)} entries")
    for item in items:
        if isinstance(item, dict) and item.get("name", item.get("algo")) == part:
            return item
    names = [str(i.get("name", i.get("algo"))) for i in items if isinstance(i, dict)]
    raise ConfigError(
        file, "--set", expr, f"no [[{where}]] named '{part}'; names: {', '.join(names)}"
    )


# ---------------------------------------------------------------------------------------------
# The sections


def _parse_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, None, f"cannot read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        lines = text.splitlines()
        found = re.search(r"\(at line (\d+), column (\d+)\)", message)
        if found is not None:
            line, column = int(found.group(1)), int(found.group(2))
            reason = message[: found.start()].strip()
        else:
            # "(at end of document)": point just past the last line, where the input ran out.
            line = max(len(lines), 1)
            column = len(lines[-1]) + 1 if lines else 1
            reason = re.sub(r"\s*\(at end of document\)", "", message)
        shown = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * (column - 1) + "^"
        raise ConfigError(
            path,
            None,
            None,
            f"TOML syntax error: {reason}\n    {shown}\n    {caret}",
            line=line,
            column=column,
        ) from None


TOP_LEVEL = ("experiment", "env", "task", "buffer", "team")


def load(
    path: str | Path,
    overrides: Iterable[str] = (),
    seed: int | None = None,
    out: str | None = None,
) -> Config:
    """Read, override, and validate an experiment file. Raises :class:`ConfigError`."""
    path = Path(path)
    file = str(path)
    raw = _parse_toml(path)
    for expr in overrides:
        apply_override(raw, expr, file)
    if seed is not None:
        raw.setdefault("experiment", {})["seed"] = seed
    if out is not None:
        raw.setdefault("experiment", {})["out"] = out
    return validate(raw, path)


def validate(raw: dict[str, Any], path: str | Path = "<config>") -> Config:
    """Validate already-parsed TOML data (what ``load`` does after parsing and overrides)."""
    path = Path(path)
    reader = _Reader(str(path))
    for key in raw:
        if key not in TOP_LEVEL:
            raise reader.unknown_key(None, key, TOP_LEVEL)
    for key in ("experiment", "env", "team"):
        if key not in raw:
            what = "[[team]] members" if key == "team" else f"a [{key}] table"
            raise reader.error(None, key, f"missing: the file needs {what}")
    return Config(
        path=path,
        experiment=_experiment(reader, raw["experiment"], path),
        env=_env(reader, raw["env"]),
        task=_task(reader, raw.get("task", {})),
        buffer=_buffer(reader, raw.get("buffer", {})),
        team=_team(reader, raw["team"]),
        raw=raw,
    )


def _experiment(reader: _Reader, data: Any, path: Path) -> ExperimentConfig:
    values = reader.table(
        "[experiment]",
        data,
        {
            "name": (_string(), path.stem),
            "seed": (_integer(ge=0), 0),
            "total_steps": (_integer(gt=0), _REQUIRED),
            "eval_every": (_integer(gt=0), _REQUIRED),
            "eval_episodes": (_integer(gt=0), 10),
            "backend": (_string(BACKENDS), "serial"),
            "out": (_string(), "runs"),
            "checkpoint_every": (_integer(gt=0), None),
            "progress": (_boolean, True),
            "eval_threshold": (_number(), None),
            "stop_at_threshold": (_boolean, False),
            "ray_address": (_string(), None),
        },
        scope="experiment",
    )
    if values["checkpoint_every"] is None:
        values["checkpoint_every"] = values["eval_every"]
    return ExperimentConfig(**values)


def _env(reader: _Reader, data: Any) -> EnvConfig:
    values = reader.table(
        "[env]",
        data,
        {
            "id": (_string(), _REQUIRED),
            "kwargs": (_table, {}),
            "num_envs": (_integer(ge=1), 1),
            "vector": (_string(VECTOR_MODES), "sync"),
        },
        scope="env",
    )
    try:
        registry.check_env_id(values["id"])
    except registry.RegistryError as exc:
        raise reader.error("[env]", "id", str(exc)) from None
    if values["vector"] != "sync" and ":" in values["id"]:
        prefix = values["id"].partition(":")[0]
        if prefix in registry.ENV_ADAPTERS:
            raise reader.error(
                "[env]",
                "vector",
                f"'{values['vector']}' is for gymnasium ids; the {prefix} adapter steps its "
                f'copies itself (leave vector = "sync")',
            )
    return EnvConfig(**values)


def _resolve_spec(reader: _Reader, table: str, key: str, spec: str) -> Any:
    try:
        return registry.resolve_object(spec)
    except registry.RegistryError as exc:
        raise reader.error(table, key, str(exc)) from None


def _task(reader: _Reader, data: Any) -> TaskConfig:
    values = reader.table(
        "[task]", data, {"spec": (_string(), None), "heads": (_list_of_tables, None)}, "task"
    )
    if values["spec"] is not None:
        try:
            task_class = registry.resolve_object(values["spec"])
        except registry.RegistryError as exc:
            message = str(exc)
            if "tasks available" not in message:
                message += f"; {registry.available_tasks_text()}"
            raise reader.error("[task]", "spec", message) from None
        if not isinstance(task_class, type):
            raise reader.error("[task]", "spec", f"'{values['spec']}' is not a class")
    if values["heads"] is None:
        return TaskConfig(spec=values["spec"])
    if not values["heads"]:
        raise reader.error("[task]", "heads", "expected at least one [[task.heads]] entry")
    heads = []
    for i, head in enumerate(values["heads"], start=1):
        label = f"[[task.heads]] #{i}"
        h = reader.table(
            label,
            head,
            {
                "name": (_string(), _REQUIRED),
                "reward": (_string(), "env"),
                "weight": (_number(), 1.0),
            },
            scope="task.heads",
        )
        if h["reward"] != "env":
            if ":" not in h["reward"]:
                got = _show(h["reward"])
                message = f'expected "env" or "module:function", got {got}'
                raise reader.error(label, "reward", message)
            if not callable(_resolve_spec(reader, label, "reward", h["reward"])):
                raise reader.error(label, "reward", f"'{h['reward']}' is not a function")
        heads.append(HeadConfig(**h))
    names = [h.name for h in heads]
    for name in names:
        if names.count(name) > 1:
            raise reader.error("[[task.heads]]", "name", f"'{name}' is used by two heads")
    return TaskConfig(spec=values["spec"], heads=tuple(heads))


def _list_of_tables(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise _Mismatch("an array of tables")
    return v


def _buffer(reader: _Reader, data: Any) -> BufferConfig:
    values = reader.table(
        "[buffer]",
        data,
        {
            "capacity": (_integer(gt=0), 200_000),
            "batch_size": (_integer(gt=0), 256),
            "prioritized": (_boolean, False),
            "alpha": (_number(ge=0), 0.6),
            "beta": (_number(ge=0, le=1), 0.4),
            "n_step": (_integer(ge=1), 1),
            "updates_per_insert": (_number(gt=0), 1.0),
            "her": (_table, None),
            "checkpoint": (_boolean, False),
            "chunk": (_integer(gt=0), 64),
            "shards": (_integer(ge=1), 1),
        },
        scope="buffer",
    )
    if values["her"] is not None:
        her = reader.table(
            "[buffer.her]",
            values["her"],
            {"strategy": (_string(HER_STRATEGIES), "future"), "k": (_integer(ge=1), 4)},
            scope="buffer.her",
        )
        values["her"] = HerConfig(**her)
    return BufferConfig(**values)


def _optional_number_ge0(v: Any) -> float:
    return _number(ge=0)(v)


def _team(reader: _Reader, data: Any) -> tuple[MemberConfig, ...]:
    if not isinstance(data, list):
        raise reader.error(
            None, "team", "expected [[team]] entries (an array of tables), got a single [team]"
        )
    if not data:
        raise reader.error(None, "team", "expected at least one [[team]] member")
    members = []
    for i, entry in enumerate(data, start=1):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = f"[[team]] #{i}" + (f" ({name})" if isinstance(name, str) else "")
        members.append(_member(reader, label, entry))
    names = [m.name for m in members]
    for i, m in enumerate(members, start=1):
        if names.count(m.name) > 1:
            raise reader.error(
                f"[[team]] #{i} ({m.name})", "name", "two members share this name; make them unique"
            )
    learners = [m for m in members if m.role == "learner"]
    if not learners:
        raise reader.error(None, "team", 'no learner: exactly one member needs role = "learner"')
    if len(learners) > 1 or learners[0].count > 1:
        found = ", ".join(f"'{m.name}' (count {m.count})" for m in learners)
        raise reader.error(None, "team", f"exactly one learner allowed, found {found}")
    return tuple(members)


def _resources(v: Any) -> dict[str, float]:
    amount = _number(ge=0)
    try:
        if not isinstance(v, dict):
            raise _Mismatch("")
        return {str(k): amount(x) for k, x in v.items()}
    except _Mismatch:
        raise _Mismatch(
            "a table of resource names to numbers >= 0, e.g. { explorer_node = 1 }"
        ) from None


def _member(reader: _Reader, label: str, entry: Any) -> MemberConfig:
    values = reader.table(
        label,
        entry,
        {
            "name": (_string(), None),
            "algo": (_string(), _REQUIRED),
            "role": (_string(ROLES), _REQUIRED),
            "count": (_integer(ge=1), 1),
            "params": (_table, {}),
            "sync": (_table, None),
            "agents": (_string_list, None),
            "num_cpus": (_optional_number_ge0, None),
            "num_gpus": (_optional_number_ge0, None),
            "resources": (_resources, None),
        },
        scope="team",
    )
    if values["name"] is None:
        values["name"] = values["algo"]
    try:
        agent_class = registry.resolve_algo(values["algo"])
    except registry.RegistryError as exc:
        raise reader.error(label, "algo", str(exc)) from None
    params_cls = getattr(agent_class, "Params", None)
    if params_cls is None:
        raise reader.error(label, "algo", f"{agent_class.__name__} has no Params dataclass")
    values["params"] = _params(
        reader, f"{label}.params", values["algo"], params_cls, values["params"]
    )
    if values["sync"] is not None:
        if values["role"] == "learner":
            raise reader.error(
                label, "sync", "a learner does not sync; only explorers copy the learner's weights"
            )
        sync = reader.table(
            f"{label}.sync",
            values["sync"],
            {
                "every": (_integer(gt=0), _REQUIRED),
                "keep": (_string_list, ()),
                "alpha": (_number(gt=0, le=1), 1.0),
            },
            scope="team.sync",
        )
        values["sync"] = SyncConfig(**sync)
    return MemberConfig(agent_class=agent_class, **values)


# ---------------------------------------------------------------------------------------------
# A small TOML writer, for when tomli_w is not installed


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else _toml_string(k)


def _toml_string(s: str) -> str:
    escaped = (
        s.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
    escaped = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", lambda m: f"\\u{ord(m[0]):04x}", escaped)
    return f'"{escaped}"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps_toml(data: dict[str, Any]) -> str:
    """Write nested dicts as TOML: sub-dicts as [tables], lists of dicts as [[arrays]]."""
    lines: list[str] = []
    _write_table(lines, data, ())
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(lines: list[str], table: dict[str, Any], prefix: tuple[str, ...]) -> None:
    nested = {k: v for k, v in table.items() if isinstance(v, dict) or _is_table_array(v)}
    for k, v in table.items():
        if k not in nested:
            lines.append(f"{_key(k)} = {_toml_value(v)}")
    for k, v in nested.items():
        name = ".".join(_key(p) for p in (*prefix, k))
        if isinstance(v, dict):
            lines.extend(["", f"[{name}]"])
            _write_table(lines, v, (*prefix, k))
        else:
            for item in v:
                lines.extend(["", f"[[{name}]]"])
                _write_table(lines, item, (*prefix, k))
