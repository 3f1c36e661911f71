"""Reading an experiment file: TOML -> checked tables -> :class:`Config`.

One generic reader (:meth:`Reader.read`) walks a dataclass's fields and checks each key of a
table against the field's annotation and metadata: unknown keys (with the closest valid one),
types, bounds, choices, required keys (fields without a default), old key names. The functions
below it only add what a field cannot say: cross-field rules and registry look-ups.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
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
    is_finite_number,
    required,
    show,
    type_hints,
)

from .errors import ConfigDeprecationWarning, ConfigError
from .files import (
    EXTENDS,
    absolute_spec,
    absolute_value,
    is_code_spec,
    parse_toml,
    sourced,
    with_bases,
)
from .model import (
    DEFAULT_TABLE,
    WRAPPERS_EXPECTED,
    BufferConfig,
    Config,
    CurriculumConfig,
    EnvConfig,
    ExperimentConfig,
    HeadConfig,
    MemberConfig,
    PlayConfig,
    TaskConfig,
    WrapperConfig,
    copy_value,
)
from .overrides import apply_override, set_key
from .relations import check_relations
from .tune import read_tune

if TYPE_CHECKING:
    from wheeler2.agent import Agent

# Old key -> new key, per table. The old name keeps working with a warning, so files written for
# an earlier version still run (DESIGN.md section 3: renames keep the old name working).
RENAMED: dict[str, dict[str, str]] = {
    "buffer": {"ratio": "updates_per_insert"},
}

# Stable-Baselines3's names for keys wheeler2 calls otherwise: a user coming from it writes them
# first, and the nearest spelling misleads ("learning_rate" -> "clip_range"). A bare name is
# suggested where the table has it; "[table] key" names a key of another table.
OTHER_NAMES: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr", "lr_actor", "lr_critic"),
    "net_arch": ("hidden",),
    "exploration_initial_eps": ("eps_start",),
    "exploration_final_eps": ("eps_end",),
    "target_update_interval": ("target_update",),
    "buffer_size": ("capacity", "[buffer] capacity"),
    "n_envs": ("num_envs", "[env] num_envs"),
    "total_timesteps": ("total_steps", "[experiment] total_steps"),
    "gradient_steps": ("updates_per_insert", "[buffer] updates_per_insert"),
}

# [tune] is what `wheeler2 tune` searches (config/tune.py): a run ignores it, `check` checks it.
TOP_LEVEL = ("experiment", "env", "task", "buffer", "team", "play", "curriculum", "tune")


class Reader:
    """Validates tables of one file; knows the file name every error must carry."""

    def __init__(self, file: str) -> None:
        self.file = file

    def error(self, table: str | None, key: str | None, message: str) -> ConfigError:
        return ConfigError(self.file, table, key, message)

    def unknown_key(
        self, table: str | None, key: str, valid: Iterable[str], data: Any = None
    ) -> ConfigError:
        """``key`` is none of ``valid``; ``data``, the table that has it, may say which file
        wrote it (a base file's key, merged by ``extends``, is that file's mistake)."""
        valid = sorted(valid)
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        names = OTHER_NAMES.get(key, ())
        other = [f"'{n}'" for n in names if n in valid] or [n for n in names if n[0] == "["]
        if other:
            hint = f"did you mean {' or '.join(other)}?"
        elif close:
            hint = f"did you mean '{close[0]}'?"
        else:
            hint = "valid keys: " + ", ".join(valid)
        file, flag = self.writer(data, key)
        return ConfigError(file, table, key, f"unknown key; {hint}{flag}")

    def writer(self, data: Any, key: str) -> tuple[str, str]:
        """The file that wrote ``key`` of table ``data`` (a base merged by ``extends``, else
        this one), and for a value a flag wrote (``--set``, ``--seed``: ``load``) the text
        `` (from --set k=v)``: the file alone would send the user to a line that is fine."""
        source = getattr(data, "sources", {}).get(key, self.file)
        if source.startswith("--"):
            return self.file, f" (from {source})"
        return source, ""

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
        written = data
        if scope is not None:
            data = self.renamed(scope, table, data)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        for key in data:
            if key not in fields:
                raise self.unknown_key(table, key, fields, written)
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
            value = self.value(table, name, data[name], field_checker(cls, f, engine), data)
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

    def value(
        self, table: str, key: str, raw: Any, check: Callable[[Any], Any], data: Any = None
    ) -> Any:
        """``check(raw)``; a mismatch names the file that wrote the key (``data``'s sources: a
        base merged by ``extends``), else this one."""
        try:
            return check(raw)
        except Mismatch as exc:
            file, flag = self.writer(data, key)
            message = f"expected {exc.expected}, got {show(raw)}{flag}"
            raise ConfigError(file, table, key, message) from None


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
    if overrides or seed is not None or out is not None:
        # Every table remembers the file that wrote each key, and the flags below mark what they
        # write as theirs: a refused --set value is reported as the --set, not as the file's.
        raw = sourced(raw, file)
    for expr in overrides:
        apply_override(raw, expr, file)
    for flag, key, value in (("--seed", "seed", seed), ("--out", "out", out)):
        if value is not None:
            set_key(raw, ["experiment", key], value, file, flag)
    return validate(raw, path)


def validate(raw: dict[str, Any], path: str | Path = "<config>") -> Config:
    """Validate already-parsed TOML data (what ``load`` does after parsing and overrides)."""
    path = Path(path)
    reader = Reader(str(path))
    raw = with_bases(raw, path)  # data that was not read by parse_toml may still extend a file
    for key in raw:
        if key not in TOP_LEVEL:
            raise reader.unknown_key(None, key, (*TOP_LEVEL, EXTENDS), raw)
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
    if "tune" in raw:
        read_tune(raw, path)
    _check_task_methods(reader, config)
    return config


def _check_task_methods(reader: Reader, config: Config) -> None:
    """Keys that need a method of the [task] class; the class is imported once for them."""
    b = config.buffer
    ends_on_goal = b.her is not None and b.her.terminate_on_goal
    if not ends_on_goal and b.keep >= 1.0:
        return
    task = registry.resolve_object(config.task.spec) if config.task.spec else None
    if ends_on_goal and (task is None or not task.defines_success()):
        raise reader.error(
            "[buffer.her]",
            "terminate_on_goal",
            "needs a [task] spec whose class defines success(achieved_goal, desired_goal), "
            "which says where a relabelled transition reaches its goal",
        )
    if b.keep < 1.0 and (task is None or not task.defines_worth_keeping()):
        # Without flags every row is unflagged: keep would thin the data at random.
        raise reader.error(
            "[buffer]",
            "keep",
            f"got {b.keep:g}, which needs a [task] spec whose class defines "
            "worth_keeping(...): only unflagged rows are dropped, and without that method "
            "every row is unflagged, so the replay would store each with chance "
            f"{b.keep:g} at random; expected 1.0 (the default) without one",
        )


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
    values = reader.read(EnvConfig, "[env]", data, "env", raw=("wrappers",))
    # "./myenv.py:MyEnv-v0" and "./p.py:fn" in kwargs (other_policy) are files next to this one.
    values["id"] = absolute_spec(values["id"], reader.file)
    values["kwargs"] = {k: absolute_value(v, reader.file) for k, v in values["kwargs"].items()}
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
        # envpool builds its own ids (Atari's "Pong-v5"), which gymnasium's registry lacks.
        _check_envpool_id(reader, values["id"])
    else:
        try:
            registry.check_env_id(values["id"])
        except registry.RegistryError as exc:
            raise reader.error("[env]", "id", _registry_text(reader, exc)) from None
    for key, value in values["kwargs"].items():
        if isinstance(value, str) and (key in CODE_KWARGS or is_code_spec(value)):
            _check_code_kwarg(reader, key, value)
    values["wrappers"] = _wrappers(
        reader, values.get("wrappers", []), values["id"], values["vector"]
    )
    return EnvConfig(**values)


WRAPPER_FORM = "'module:Name' (e.g. 'gymnasium.wrappers:ClipAction') or './file.py:Name'"


def _wrappers(reader: Reader, entries: Any, env_id: str, vector: str) -> tuple[WrapperConfig, ...]:
    """``[env] wrappers``, each entry resolved now: a missing module or name, something not
    callable, arguments it does not take, or a file that fails to import is one line naming
    ``wrappers[i]`` (``check`` and ``run`` refuse it before any env is built)."""
    if not isinstance(entries, list):
        raise reader.error(
            "[env]", "wrappers", f"expected {WRAPPERS_EXPECTED}, got {show(entries)}"
        )
    problem = registry.wrappers_problem(env_id, vector) if entries else None
    if problem is not None:
        raise reader.error("[env]", "wrappers", problem)
    out = []
    for i, entry in enumerate(entries):
        key = f"wrappers[{i}]"
        if isinstance(entry, str):
            entry = {"wrapper": entry}
        if not isinstance(entry, dict):
            raise reader.error(
                "[env]",
                key,
                f'expected a "module:Name" string or a {{ wrapper = "module:Name", kwargs = '
                f"{{...}} }} table, got {show(entry)}",
            )
        values = reader.read(WrapperConfig, f"[env] {key}", entry)
        written = values["wrapper"]
        spec = absolute_spec(written, reader.file)
        if ":" not in written:
            raise reader.error("[env]", key, f"expected {WRAPPER_FORM}, got {show(written)}")
        found = _resolve_spec(reader, "[env]", key, spec, f"a wrapper is {WRAPPER_FORM}")
        if not callable(found):
            raise reader.error(
                "[env]",
                key,
                f"'{written}' is not callable: expected a gymnasium.Wrapper class or a function "
                f"that takes the env and returns it wrapped",
            )
        _check_wrapper_arguments(reader, key, written, found, values["kwargs"])
        out.append(WrapperConfig(spec, values["kwargs"]))
    return tuple(out)


def _check_wrapper_arguments(
    reader: Reader, key: str, written: str, wrapper: Callable[..., Any], kwargs: dict[str, Any]
) -> None:
    """A wrapper is called as ``wrapper(env, **kwargs)``: a misspelt or missing argument is
    refused with the file, not when a member builds its env."""
    try:
        signature = inspect.signature(wrapper)
    except (TypeError, ValueError):  # no signature to read (some builtins): the build will tell
        return
    name = written.rpartition(":")[2]
    params = signature.parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for arg in kwargs:
            if arg not in params:
                close = difflib.get_close_matches(arg, list(params), n=1, cutoff=0.5)
                hint = f"did you mean '{close[0]}'? " if close else ""
                takes = ", ".join(list(params)[1:]) or "only the env"
                raise reader.error(
                    "[env]", key, f"{name} takes no argument '{arg}'; {hint}it takes: {takes}"
                )
    try:
        signature.bind(None, **kwargs)
    except TypeError as exc:
        raise reader.error("[env]", key, f"{name}(env, **kwargs): {exc}") from None


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


def _check_code_kwarg(reader: Reader, key: str, spec: str) -> None:
    if ":" not in spec:
        raise reader.error(
            "[env]", f"kwargs.{key}", f"expected 'module:function', got {show(spec)}"
        )
    found = _resolve_spec(reader, "[env]", f"kwargs.{key}", spec)
    if not callable(found):
        raise reader.error("[env]", f"kwargs.{key}", f"'{spec}' is not a function")


def _resolve_spec(reader: Reader, table: str, key: str, spec: str, hint: str | None = None) -> Any:
    try:
        return registry.resolve_object(spec, hint)
    except registry.RegistryError as exc:
        raise reader.error(table, key, _registry_text(reader, exc)) from None


def _list_of_tables(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise Mismatch("an array of tables")
    return v


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
    values["spec"] = absolute_spec(values["spec"], reader.file)
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
        h["reward"] = absolute_spec(h["reward"], reader.file)
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
    if buffer.priority_novelty > 0.0 and not buffer.prioritized:
        raise reader.error(
            "[buffer]",
            "priority_novelty",
            f"expected 0 without prioritized = true (a uniform replay has no priorities), "
            f"got {buffer.priority_novelty}",
        )
    if buffer.priority_td != 1.0 and not buffer.prioritized:
        # It weighs the TD error in the sum tree's priority: a uniform replay has none.
        raise reader.error(
            "[buffer]",
            "priority_td",
            f"expected 1.0 (the default) without prioritized = true (a uniform replay has no "
            f"priorities), got {buffer.priority_td}",
        )
    if buffer.priority_td == 0.0 and buffer.priority_novelty == 0.0:
        raise reader.error(
            "[buffer]",
            "priority_td",
            "expected a number > 0 while priority_novelty is 0 (no priority term is left), got 0",
        )
    if buffer.forget == "priority" and not buffer.prioritized:
        raise reader.error(
            "[buffer]",
            "forget",
            '"priority" needs prioritized = true (a uniform replay has no priorities); '
            'expected "oldest" or "reservoir"',
        )
    if buffer.keep < 1.0 and buffer.admit == "transition" and (buffer.her or buffer.n_step > 1):
        # A refused step would be a hole inside an HER episode or an n-step window.
        raise reader.error(
            "[buffer]",
            "admit",
            'expected "episode" with her or n_step > 1 (a refused step would break its '
            'episode\'s links), got "transition"',
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
    values["algo"] = absolute_spec(values["algo"], reader.file)
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
    if values["evaluate"] and values["role"] == "learner":
        raise reader.error(
            label,
            "evaluate",
            "a learner is always evaluated; evaluate = true is for explorers and actors",
        )
    if values["step_share"] and values["role"] != "learner":
        raise reader.error(
            label,
            "step_share",
            "is a learner's least share of the run's env steps; an explorer or actor takes "
            "what the learner leaves",
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
    written = spec
    spec = _renamed_per_copy(
        reader, table, params_cls, reader.value(label, "per_copy", spec, _table)
    )
    count = int(values["count"])
    fields = {f.name for f in dataclasses.fields(params_cls)}
    out: dict[str, Any] = {}
    for key, entry in spec.items():
        if key not in fields:
            raise reader.unknown_key(table, key, fields, written)
        if isinstance(entry, list):
            if len(entry) != count:
                raise reader.error(
                    table, key, f"expected {count} values (count = {count}), got {len(entry)}"
                )
            out[key] = tuple(entry)
        elif isinstance(entry, dict) and set(entry) <= {"base", "alpha"} and "base" in entry:
            for part, value in entry.items():
                # b ** (1 + a i / (count - 1)): a real power needs a base above 0.
                fine = is_finite_number(value) and (part != "base" or value > 0)
                if not fine:
                    want = "a number > 0" if part == "base" else "a finite number"
                    got = f"expected {want}, got {show(value)}"
                    raise reader.error(table, f"{key}.{part}", got)
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


__all__ = [
    "RENAMED",
    "TOP_LEVEL",
    "Reader",
    "load",
    "read_params",
    "validate",
]
