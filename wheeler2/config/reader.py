"""Reading an experiment file: TOML -> checked tables -> :class:`Config`.

One generic reader (:meth:`Reader.read`) walks a dataclass's fields and checks each key of a
table against the field's annotation and metadata: unknown keys (with the closest valid one),
types, bounds, choices, required keys (fields without a default), old key names. The functions
below it only add what a field cannot say: cross-field rules and registry look-ups.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2 import registry
from wheeler2.schema import (
    Mismatch,
    default_of,
    expected_of,
    field_checker,
    required,
    show,
    type_hints,
)

from .errors import ConfigDeprecationWarning, ConfigError
from .model import (
    DEFAULT_TABLE,
    BufferConfig,
    Config,
    CurriculumConfig,
    EnvConfig,
    ExperimentConfig,
    HeadConfig,
    MemberConfig,
    PlayConfig,
    TaskConfig,
    copy_value,
)
from .overrides import apply_override
from .relations import check_relations

if TYPE_CHECKING:
    from wheeler2.agent import Agent

# Old key -> new key, per table. The old name keeps working with a warning, so files written for
# an earlier version still run (DESIGN.md section 3: renames keep the old name working).
RENAMED: dict[str, dict[str, str]] = {
    "buffer": {"ratio": "updates_per_insert"},
}

TOP_LEVEL = ("experiment", "env", "task", "buffer", "team", "play", "curriculum")


class Reader:
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
                stacklevel=3,
            )
            data[new] = data.pop(old)
        return data

    def read(
        self,
        cls: type,
        table: str,
        data: Any,
        scope: str | None = None,
        *,
        raw: Iterable[str] = (),
        fallback: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
        engine: bool = True,
    ) -> dict[str, Any]:
        """Check table ``data`` against dataclass ``cls``; return {field: typed value}.

        ``raw``: keys taken unchecked (the caller checks them: a member's ``params``).
        ``fallback``: for keys the file may leave out although the dataclass requires them,
        a function of the values read so far (``[[team]] name`` defaults to ``algo``).
        ``engine``: the engine's own tables refuse empty strings; algorithm ``Params`` may not.
        Nested dataclass fields (``her``, ``sync``) are read as sub-tables the same way.
        """
        if not isinstance(data, dict):
            raise self.error(table, None, f"expected a table, got {show(data)}")
        if scope is not None:
            data = self.renamed(scope, table, data)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        for key in data:
            if key not in fields:
                raise self.unknown_key(table, key, fields)
        raw, fallback = set(raw), fallback or {}
        values: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in data:
                if name in raw or name in fallback:
                    continue
                if required(f):
                    expected = expected_of(field_checker(cls, f, engine))
                    raise self.error(table, name, f"missing required key ({expected})")
                values[name] = default_of(f)
                continue
            if name in raw:
                values[name] = data[name]
                continue
            value = self.value(table, name, data[name], field_checker(cls, f, engine))
            nested = _dataclass_of(type_hints(cls).get(name))
            if nested is not None and isinstance(value, dict):
                sub = _sub_table(table, name)
                sub_scope = None if scope is None else f"{scope}.{name}"
                value = nested(**self.read(nested, sub, value, sub_scope, engine=engine))
            values[name] = value
        for name, compute in fallback.items():
            if name not in values:
                # Checked like a written value: a file called "../x.toml" is no plain name.
                check = field_checker(cls, fields[name], engine)
                values[name] = self.value(table, name, compute(values), check)
        return values

    def value(self, table: str, key: str, raw: Any, check: Callable[[Any], Any]) -> Any:
        try:
            return check(raw)
        except Mismatch as exc:
            raise self.error(table, key, f"expected {exc.expected}, got {show(raw)}") from None


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass in ``hint`` (``HerConfig | None`` -> HerConfig), if any."""
    for candidate in (hint, *getattr(hint, "__args__", ())):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _sub_table(table: str, key: str) -> str:
    # "[buffer]" + "her" -> "[buffer.her]"; "[[team]] #2 (explorer)" + "sync" -> "... .sync"
    if table.startswith("[") and not table.startswith("[[") and table.endswith("]"):
        return f"{table[:-1]}.{key}]"
    return f"{table}.{key}"


# ---------------------------------------------------------------------------------------------
# The file


def parse_toml(path: Path) -> dict[str, Any]:
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


def load(
    path: str | Path,
    overrides: Iterable[str] = (),
    seed: int | None = None,
    out: str | None = None,
) -> Config:
    """Read, override, and validate an experiment file. Raises :class:`ConfigError`."""
    path = Path(path)
    file = str(path)
    raw = parse_toml(path)
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
    reader = Reader(str(path))
    for key in raw:
        if key not in TOP_LEVEL:
            raise reader.unknown_key(None, key, TOP_LEVEL)
    for key in ("experiment", "env", "team"):
        if key not in raw:
            what = "[[team]] members" if key == "team" else f"a [{key}] table"
            raise reader.error(None, key, f"missing: the file needs {what}")
    config = Config(
        path=path,
        experiment=_experiment(reader, raw["experiment"], path),
        env=_env(reader, raw["env"]),
        task=_task(reader, raw.get("task", {})),
        buffer=_buffer(reader, raw.get("buffer", {})),
        team=_team(reader, raw["team"]),
        raw=raw,
        play=PlayConfig(**reader.read(PlayConfig, "[play]", raw.get("play", {}), "play")),
        curriculum=_curriculum(reader, raw.get("curriculum")),
    )
    check_relations(config)
    her = config.buffer.her
    if her is not None and her.terminate_on_goal:
        task = registry.resolve_object(config.task.spec) if config.task.spec else None
        if task is None or not task.defines_success():
            raise reader.error(
                "[buffer.her]",
                "terminate_on_goal",
                "needs a [task] spec whose class defines success(achieved_goal, desired_goal), "
                "which says where a relabelled transition reaches its goal",
            )
    return config


# ---------------------------------------------------------------------------------------------
# The tables: what a field cannot say


def _experiment(reader: Reader, data: Any, path: Path) -> ExperimentConfig:
    values = reader.read(
        ExperimentConfig,
        "[experiment]",
        data,
        "experiment",
        fallback={"name": lambda _: path.stem},
    )
    return ExperimentConfig(**values)


def _curriculum(reader: Reader, data: Any) -> CurriculumConfig | None:
    if data is None:
        return None
    values = reader.read(CurriculumConfig, "[curriculum]", data, "curriculum")
    need = values["stages"] - 1
    if len(values["advance_at"]) != need:
        raise reader.error(
            "[curriculum]",
            "advance_at",
            f"expected {need} values (one per advance of {values['stages']} stages), "
            f"got {len(values['advance_at'])}",
        )
    return CurriculumConfig(**values)


def _env(reader: Reader, data: Any) -> EnvConfig:
    values = reader.read(EnvConfig, "[env]", data, "env")
    # "./myenv.py:MyEnv-v0" and "./p.py:fn" in kwargs (other_policy) are files next to this one.
    values["id"] = _absolute(values["id"], reader.file)
    values["kwargs"] = {k: _absolute_value(v, reader.file) for k, v in values["kwargs"].items()}
    try:
        registry.check_env_id(values["id"])
    except registry.RegistryError as exc:
        raise reader.error("[env]", "id", _registry_text(reader, exc)) from None
    for key, value in values["kwargs"].items():
        if isinstance(value, str) and (key in CODE_KWARGS or _is_path_spec(value)):
            _check_code_kwarg(reader, key, value)
    if values["vector"] != "sync" and ":" in values["id"]:
        prefix = values["id"].partition(":")[0]
        if prefix in registry.ENV_ADAPTERS:
            raise reader.error(
                "[env]",
                "vector",
                f"'{values['vector']}' is for gymnasium ids; the {prefix} adapter steps its "
                f'copies itself (leave vector = "sync")',
            )
    if values["vector"] == "envpool":
        _check_envpool_id(reader, values["id"])
    return EnvConfig(**values)


def _check_envpool_id(reader: Reader, env_id: str) -> None:
    try:
        import envpool
    except ImportError:
        raise reader.error(
            "[env]",
            "vector",
            "\"envpool\" needs envpool: pip install 'wheeler2[envpool]' (`make setup` installs it)",
        ) from None
    ids = set(envpool.list_all_envs())
    if env_id not in ids:
        near = difflib.get_close_matches(env_id, ids, n=3)
        hint = f"; close ones it builds: {', '.join(near)}" if near else ""
        raise reader.error(
            "[env]",
            "vector",
            f'"envpool" covers only the ids envpool builds, and {env_id!r} is not one of them'
            f'{hint} (leave vector = "sync" for it)',
        )


# [env] kwargs that name code ("module:function"): resolved when the file is read, so a missing
# file, a bad name or a file that fails to import is one line naming the key.
CODE_KWARGS = ("other_policy",)


def _base(reader: Reader) -> Path:
    """The folder a file's relative code paths are read against."""
    return Path(reader.file).parent if reader.file != "<config>" else Path.cwd()


def _registry_text(reader: Reader, exc: registry.RegistryError) -> str:
    """A registry error's text; a code file's own error names it as written (``./x.py``)."""
    if isinstance(exc, registry.CodeError):
        return exc.text(_base(reader))
    return str(exc)


def _is_path_spec(value: str) -> bool:
    module, sep, attr = value.partition(":")
    return bool(sep and attr) and registry.is_path_spec(module)


def _absolute_value(value: Any, config_path: str) -> Any:
    return (
        _absolute(value, config_path) if isinstance(value, str) and _is_path_spec(value) else value
    )


def _check_code_kwarg(reader: Reader, key: str, spec: str) -> None:
    if ":" not in spec:
        raise reader.error(
            "[env]", f"kwargs.{key}", f"expected 'module:function', got {show(spec)}"
        )
    found = _resolve_spec(reader, "[env]", f"kwargs.{key}", spec)
    if not callable(found):
        raise reader.error("[env]", f"kwargs.{key}", f"'{spec}' is not a function")


def _resolve_spec(reader: Reader, table: str, key: str, spec: str) -> Any:
    try:
        return registry.resolve_object(spec)
    except registry.RegistryError as exc:
        raise reader.error(table, key, _registry_text(reader, exc)) from None


def _list_of_tables(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise Mismatch("an array of tables")
    return v


def _absolute(spec: str | None, config_path: str) -> str | None:
    """A spec whose module part is a ``.py`` path, made absolute against the config file's
    folder, so the run directory's config.toml works from anywhere (eval, resume)."""
    if spec is None:
        return None
    module, sep, attr = spec.partition(":")
    if not sep or not registry.is_path_spec(module) or Path(module).is_absolute():
        return spec
    base = Path(config_path).parent if config_path != "<config>" else Path.cwd()
    return f"{(base / module).resolve()}:{attr}"


def _declared_heads_changed(
    reader: Reader, spec: str | None, task_class: Any, changes: dict[str, Any]
) -> list[dict[str, Any]]:
    """The heads a ``[task] spec`` class declares (``@reward_head``) as ``[[task.heads]]``
    entries, with ``changes`` (head name -> {key: value}) applied to them."""
    declared = task_class.declared_heads() if hasattr(task_class, "declared_heads") else []
    if not declared:
        whose = f"'{spec}' declares none" if spec else "there is no [task] spec"
        raise reader.error(
            "[task]",
            "heads",
            f"a table of head names ({', '.join(changes)}) changes the heads a [task] spec class "
            f"declares with @reward_head, and {whose}: write [[task.heads]] entries (name, "
            f"reward, weight) instead",
        )
    entries = [
        {"name": name, "reward": f"{spec}.{method}", "weight": weight}
        for name, method, weight in declared
    ]
    names = [e["name"] for e in entries]
    for name, change in changes.items():
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise reader.error(
                "[task]",
                f"heads.{name}",
                f"no head '{name}'; {hint}the task class declares: {', '.join(names)}",
            )
        if not isinstance(change, dict):
            raise reader.error(
                "[task]",
                f"heads.{name}",
                f"expected a table of the head's keys (e.g. heads.{name}.weight = 0.5), got "
                f"{show(change)}",
            )
        if "name" in change and change["name"] != name:
            raise reader.error("[task]", f"heads.{name}.name", "a declared head keeps its name")
        entries[names.index(name)].update(change)
    return entries


def _task(reader: Reader, data: Any) -> TaskConfig:
    values = reader.read(TaskConfig, "[task]", data, "task", raw=("heads",))
    values["spec"] = _absolute(values["spec"], reader.file)
    task_class: Any = None
    if values["spec"] is not None:
        try:
            task_class = registry.resolve_object(values["spec"])
        except registry.RegistryError as exc:
            message = _registry_text(reader, exc)
            if "tasks available" not in message and not isinstance(exc, registry.CodeError):
                message += f"; {registry.available_tasks_text()}"
            raise reader.error("[task]", "spec", message) from None
        if not isinstance(task_class, type):
            raise reader.error("[task]", "spec", f"'{values['spec']}' is not a class")
    if "heads" not in values:
        return TaskConfig(spec=values["spec"])
    if isinstance(values["heads"], dict):
        # `--set task.heads.effort.weight=0.01` (or [task.heads.effort]) with no [[task.heads]]
        # written: it changes a head the task class declares.
        values["heads"] = _declared_heads_changed(
            reader, values["spec"], task_class if values["spec"] else None, values["heads"]
        )
    entries = reader.value("[task]", "heads", values["heads"], _list_of_tables)
    if not entries:
        raise reader.error("[task]", "heads", "expected at least one [[task.heads]] entry")
    heads = []
    for i, head in enumerate(entries, start=1):
        label = f"[[task.heads]] #{i}"
        h = reader.read(HeadConfig, label, head, "task.heads")
        h["reward"] = _absolute(h["reward"], reader.file)
        if h["reward"] != "env":
            if ":" not in h["reward"]:
                got = show(h["reward"])
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


def _buffer(reader: Reader, data: Any) -> BufferConfig:
    buffer = BufferConfig(**reader.read(BufferConfig, "[buffer]", data, "buffer"))
    if buffer.her is not None and buffer.her.terminate_on_goal and buffer.n_step != 1:
        # A relabelled n-step window would have to end at the first step that reaches the goal.
        raise reader.error(
            "[buffer.her]",
            "terminate_on_goal",
            f"needs n_step = 1 (the file has n_step = {buffer.n_step})",
        )
    return buffer


def _team(reader: Reader, data: Any) -> tuple[MemberConfig, ...]:
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
    for table in dict.fromkeys(m.table for m in members):
        _one_learner(reader, table, [m for m in members if m.table == table])
    return tuple(members)


def _one_learner(reader: Reader, table: str, members: list[MemberConfig]) -> None:
    """Each replay table has exactly one learner: the one its members feed and sync from."""
    where = "" if table == DEFAULT_TABLE else f" of table {table!r}"
    learners = [m for m in members if m.role == "learner"]
    if not learners:
        names = ", ".join(f"'{m.name}'" for m in members)
        raise reader.error(
            None,
            "team",
            f'no learner{where}: exactly one member needs role = "learner" (members: {names})',
        )
    if len(learners) > 1 or learners[0].count > 1:
        found = ", ".join(f"'{m.name}' (count {m.count})" for m in learners)
        hint = "" if len(learners) == 1 else '; give each its own table = "..."'
        raise reader.error(None, "team", f"exactly one learner allowed{where}, found {found}{hint}")


def _table(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Mismatch("a table")
    return v


def _member(reader: Reader, label: str, entry: Any) -> MemberConfig:
    values = reader.read(
        MemberConfig,
        label,
        entry,
        "team",
        raw=("params", "per_copy"),
        fallback={"name": lambda v: v["algo"]},
    )
    params = reader.value(label, "params", values.get("params", {}), _table)
    values["algo"] = _absolute(values["algo"], reader.file)
    try:
        agent_class = registry.resolve_algo(values["algo"])
    except registry.RegistryError as exc:
        raise reader.error(label, "algo", _registry_text(reader, exc)) from None
    params_cls = getattr(agent_class, "Params", None)
    if params_cls is None:
        raise reader.error(label, "algo", f"{agent_class.__name__} has no Params dataclass")
    values["params"] = read_params(reader, f"{label}.params", values["algo"], params_cls, params)
    if values["sync"] is not None and values["role"] == "learner":
        raise reader.error(
            label, "sync", "a learner does not sync; only explorers copy the learner's weights"
        )
    if values["role"] == "actor":
        _check_actor(reader, label, values, agent_class)
    values["per_copy"] = _per_copy(reader, label, values, params, params_cls)
    return MemberConfig(**values)


def _check_actor(
    reader: Reader, label: str, values: dict[str, Any], agent_class: type[Agent]
) -> None:
    """An actor acts with the learner's synced weights and never learns (Ape-X's actors)."""
    if values["sync"] is None:
        raise reader.error(
            label,
            "sync",
            'role = "actor" acts with the learner\'s weights: set sync = { every = ... } '
            "(keep = [] copies the whole actor)",
        )
    if not agent_class.uses_replay:
        raise reader.error(
            label,
            "role",
            f"{values['algo']!r} learns from its own rollouts, and an actor never learns: use an "
            f'off-policy algorithm (ddpg, td3, sac, dqn) or role = "explorer"',
        )


def _renamed_per_copy(
    reader: Reader, table: str, params_cls: type, spec: dict[str, Any]
) -> dict[str, Any]:
    """``per_copy`` with retired keys (``Params.renamed_keys``) written the new way: each copy's
    value translated as in ``[team.params]``, with the same warning and errors."""
    renames: dict[str, tuple[str, dict[Any, Any]]] = getattr(params_cls, "renamed_keys", {})
    spec = dict(spec)
    for old in [key for key in spec if key in renames]:
        new = renames[old][0]
        if new in spec:
            raise reader.error(table, old, f"old name of '{new}', which is also set; keep one")
        entry = spec.pop(old)
        each = [renamed_values(reader, table, params_cls, {old: v})[new] for v in _listed(entry)]
        spec[new] = each if isinstance(entry, list) else each[0]
    return spec


def _listed(entry: Any) -> list[Any]:
    return entry if isinstance(entry, list) else [entry]


def _per_copy(
    reader: Reader, label: str, values: dict[str, Any], params: dict[str, Any], params_cls: type
) -> dict[str, Any] | None:
    """``per_copy`` checked: keys are Params fields, a list has one value per copy, a spread
    has a base; every copy's Params is read through the same checks as ``params``."""
    spec = values.get("per_copy")
    if spec is None:
        return None
    table = f"{label}.per_copy"
    spec = _renamed_per_copy(
        reader, table, params_cls, reader.value(label, "per_copy", spec, _table)
    )
    count = int(values["count"])
    fields = {f.name for f in dataclasses.fields(params_cls)}
    out: dict[str, Any] = {}
    for key, entry in spec.items():
        if key not in fields:
            raise reader.unknown_key(table, key, fields)
        if isinstance(entry, list):
            if len(entry) != count:
                raise reader.error(
                    table, key, f"expected {count} values (count = {count}), got {len(entry)}"
                )
            out[key] = tuple(entry)
        elif isinstance(entry, dict) and set(entry) <= {"base", "alpha"} and "base" in entry:
            out[key] = dict(entry)
        else:
            raise reader.error(
                table,
                key,
                f"expected a list of {count} values (one per copy) or a table "
                f"{{ base = b, alpha = a }} (Ape-X: b ** (1 + a i / (count - 1))), got "
                f"{show(entry)}",
            )
    for copy in range(count):
        copy_values = {k: copy_value(v, copy, count) for k, v in out.items()}
        read_params(
            reader,
            f"{table} (copy {copy})",
            values["algo"],
            params_cls,
            {
                **params,
                **copy_values,
            },
        )
    return out


def renamed_values(reader: Reader, table: str, params_cls: type, data: dict[str, Any]) -> dict:
    """``data`` with the keys ``params_cls.renamed_keys`` retires (old key -> (new key, the new
    value of each old value)) written the new way, each with a deprecation warning: a file
    written for an earlier version still runs."""
    renames: dict[str, tuple[str, dict[Any, Any]]] = getattr(params_cls, "renamed_keys", {})
    if not any(old in data for old in renames):
        return data
    data = dict(data)
    for old, (new, values) in renames.items():
        if old not in data:
            continue
        if new in data:
            raise reader.error(table, old, f"old name of '{new}', which is also set; keep one")
        value = data.pop(old)
        # The retired keys are switches: a value of another type is refused, not guessed.
        if not isinstance(value, bool) or value not in values:
            expected = " or ".join(show(v) for v in values)
            raise reader.error(table, old, f"expected {expected}, got {show(value)}")
        warnings.warn(
            f"{reader.file}: {table} '{old} = {show(value)}' is deprecated; call it "
            f"'{new} = {show(values[value])}'",
            ConfigDeprecationWarning,
            stacklevel=3,
        )
        data[new] = values[value]
    return data


def read_params(reader: Reader, table: str, algo: str, params_cls: type, data: Any) -> Any:
    """``[team.params]`` checked against the algorithm's ``Params`` dataclass: the same reader
    as the engine's tables, so bounds in a Params field's metadata are enforced too."""
    if not dataclasses.is_dataclass(params_cls):
        raise reader.error(table, None, f"{algo}.Params is not a dataclass")
    if isinstance(data, dict):
        data = renamed_values(reader, table, params_cls, data)
    values = reader.read(params_cls, table, data, engine=False)
    try:
        return params_cls(**values)
    except (ValueError, TypeError) as exc:
        raise reader.error(table, None, f"{algo} rejects these parameters: {exc}") from None


__all__ = ["RENAMED", "TOP_LEVEL", "Reader", "load", "read_params", "validate"]
