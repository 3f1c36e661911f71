"""Finding algorithms, tasks, reward functions and environments by name.

The engine never imports ``agents/``, ``tasks/`` or ``envs/`` by name in its code paths; it asks
here. Plain names (``"ddpg"``) mean a module of ``wheeler2.agents`` (the repository's ``agents/``
folder, installed under the wheeler2 name); ``"module:Class"`` points at user code anywhere on
``sys.path``, so a new algorithm or task needs no registration step. Specs written for the old
top-level names (``"tasks.reacher:Reach"``) resolve to ``wheeler2.tasks.reacher``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import pkgutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from wheeler2.agent import Agent
from wheeler2.env import AchievedGoalInObs, FrameStack, FrameStackError, VecEnv
from wheeler2.errors import KeepsFields

ALGORITHM_PACKAGE = "wheeler2.agents"
TASK_PACKAGE = "wheeler2.tasks"

# Env ids with one of these prefixes go to an adapter module of the `envs` package, which exposes
# `make(spec, kwargs, num_envs, seed) -> VecEnv`; everything else is a gymnasium id.
# "mo:" is MO-Gymnasium: its ids are gymnasium ids too, but a vector reward needs the adapter
# that turns it into reward heads (envs/mo.py), so the prefix says which one is meant.
ENV_ADAPTERS = {
    "pettingzoo": "wheeler2.envs.pettingzoo",
    "unity": "wheeler2.envs.unity",
    "mo": "wheeler2.envs.mo",
}


class WrapperSpec(Protocol):
    """One ``[env] wrappers`` entry (``config.WrapperConfig`` is one)."""

    @property
    def wrapper(self) -> str: ...

    @property
    def kwargs(self) -> dict[str, Any]: ...


class EnvSpec(Protocol):
    """What :func:`make_env` reads of an ``[env]`` table (``config.EnvConfig`` is one); the
    registry resolves names and imports no config."""

    @property
    def id(self) -> str: ...

    @property
    def kwargs(self) -> dict[str, Any]: ...

    @property
    def vector(self) -> str: ...

    @property
    def achieved_goal_in_obs(self) -> bool: ...

    @property
    def stack(self) -> int: ...

    @property
    def wrappers(self) -> Sequence[WrapperSpec]: ...


class RegistryError(LookupError):
    """A name that does not resolve; the message says what is available instead."""


class CodeError(KeepsFields, RegistryError):
    """A user's code file that fails to import (a SyntaxError, a missing import, an exception at
    its top level) or code of theirs that raised: one line naming the file and its line, as
    ``./mytask.py line 3: SyntaxError: invalid syntax``, instead of a traceback."""

    def __init__(self, path: str | None, line: int | None, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(self.text())

    def text(self, base: Path | None = None) -> str:
        """The line, with the file shown relative to ``base`` (a config file's folder) or the
        working directory where it lies under one of them."""
        if self.path is None:
            return self.reason
        where = shown_path(self.path, base)
        if self.line is not None:
            where += f" line {self.line}"
        return f"{where}: {self.reason}"


def shown_path(path: str | Path, base: Path | None = None) -> str:
    """``path`` as a user would write it: ``./x.py`` under ``base`` (or the working directory),
    else as it is."""
    path = Path(path)
    for folder in (base, Path.cwd()):
        if folder is None:
            continue
        try:
            rel = path.resolve().relative_to(Path(folder).resolve())
        except (ValueError, OSError):
            continue
        return f"./{rel.as_posix()}"
    return str(path)


@functools.cache
def _engine_dirs() -> tuple[str, ...]:
    """Folders whose files are not a user's code: wheeler2's own packages, the standard library
    and installed packages."""
    import sysconfig

    dirs = {str(Path(__file__).resolve().parent)}
    for pkg in INSTALLED_UNDER_WHEELER2:
        spec = importlib.util.find_spec(f"wheeler2.{pkg}")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            dirs.add(str(Path(loc).resolve()))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        found = sysconfig.get_paths().get(key)
        if found:
            dirs.add(str(Path(found).resolve()))
    return tuple(d + "/" for d in dirs)


def _user_frame(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    full = str(Path(path).resolve())
    return not full.startswith(_engine_dirs())


def code_error(exc: BaseException, file: str | Path | None = None) -> CodeError:
    """``exc``, raised by a user's code, as one located line: the deepest frame of the traceback
    that lies in the user's files (else in ``file``, the module that was imported), and the
    exception's type and text. A SyntaxError names its own file and line."""
    import traceback

    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError) and exc.filename:
        return CodeError(exc.filename, exc.lineno, f"{type(exc).__name__}: {exc.msg}")
    frames = traceback.extract_tb(exc.__traceback__)
    wanted = None if file is None else str(Path(file).resolve())
    for frame in reversed(frames):
        if _user_frame(frame.filename) or (wanted and str(Path(frame.filename)) == wanted):
            return CodeError(frame.filename, frame.lineno, reason)
    return CodeError(None if file is None else str(file), None, reason)


def is_user_module(name: str) -> bool:
    """A module the user wrote (a ``.py`` path or a module outside wheeler2): its import errors
    are their mistakes, shown as one line; wheeler2's own keep their traceback (a bug)."""
    return is_path_spec(name) or not installed_module(name).startswith("wheeler2.")


# The repository's top-level folders, installed under the wheeler2 name (setup.cfg package_dir).
INSTALLED_UNDER_WHEELER2 = ("agents", "envs", "tasks")


def installed_module(name: str) -> str:
    """The name to import a spec's module by: ``"tasks.reacher"`` (how specs were written when
    the folders were top-level packages) is ``"wheeler2.tasks.reacher"`` where that exists, so
    old spec strings keep working and name the one module object; any other name as given (a
    user's own ``tasks`` package still wins for modules wheeler2 does not have)."""
    if name.partition(".")[0] in INSTALLED_UNDER_WHEELER2:
        installed = f"wheeler2.{name}"
        try:
            if importlib.util.find_spec(installed) is not None:
                return installed
        except ModuleNotFoundError as exc:
            # Only "wheeler2 has no such module" falls back to the name as given; a missing
            # import inside one of its packages is that package's error, shown as it is.
            if exc.name is None or not installed.startswith(exc.name):
                raise
    return name


def _closest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f"did you mean {_quoted(close)}? " if close else ""


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _package_modules(package: str) -> list[str]:
    try:
        pkg = importlib.import_module(package)
    except ImportError:
        return []
    return sorted(
        f"{package}.{info.name}"
        for info in pkgutil.iter_modules(pkg.__path__)
        if not info.name.startswith("_")
    )


def _agent_class_in(module: ModuleType) -> type[Agent] | None:
    """The one Agent subclass a module defines (imported ones, like the base, do not count)."""
    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Agent)
        and obj is not Agent
        and obj.__module__ == module.__name__
    ]
    if len(found) > 1:
        names = ", ".join(sorted(c.__name__ for c in found))
        raise RegistryError(
            f"module '{module.__name__}' defines several Agent subclasses ({names}); "
            f"name one as '{module.__name__}:Class'"
        )
    return found[0] if found else None


def _import_quietly(module_name: str) -> ModuleType:
    """Import a module only to list what it defines (for a message): what its import prints
    to stderr (gymnasium-robotics' version notice) would break a one-line error."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(module_name)


def algorithms() -> dict[str, type[Agent]]:
    """Every algorithm in the ``agents`` package, by module name (``"ddpg"``).

    A module that fails to import is left out here; resolving it by name shows its error.
    """
    found: dict[str, type[Agent]] = {}
    for module_name in _package_modules(ALGORITHM_PACKAGE):
        try:
            cls = _agent_class_in(_import_quietly(module_name))
        except Exception:  # noqa: BLE001 - a broken file must not hide the others
            continue
        if cls is not None:
            found[module_name.rsplit(".", 1)[1]] = cls
    return found


def _available_algorithms_text() -> str:
    names = sorted(algorithms())
    listed = ", ".join(names) if names else "none found in the 'agents' package"
    return f"available: {listed} (or 'module:Class' for your own)"


def resolve_algo(name: str) -> type[Agent]:
    """``"ddpg"`` -> ``agents.ddpg``'s Agent subclass; ``"pkg.mod:Class"`` -> that class."""
    if ":" in name:
        obj = resolve_object(name, _available_algorithms_text())
        if not (inspect.isclass(obj) and issubclass(obj, Agent)):
            raise RegistryError(f"'{name}' is not an Agent subclass")
        return obj
    module_name = f"{ALGORITHM_PACKAGE}.{name}"
    if not name.isidentifier() or module_name not in _package_modules(ALGORITHM_PACKAGE):
        close = _closest(name, sorted(algorithms()))
        raise RegistryError(f"unknown algorithm '{name}'; {close}{_available_algorithms_text()}")
    # Errors inside an existing algorithm file are the user's to see, not "unknown algorithm".
    cls = _agent_class_in(importlib.import_module(module_name))
    if cls is None:
        raise RegistryError(
            f"'{module_name}' defines no Agent subclass; {_available_algorithms_text()}"
        )
    return cls


def tasks() -> dict[str, type]:
    """Every public class defined in a module of the ``tasks`` package, as ``"module:Class"``."""
    found: dict[str, type] = {}
    for module_name in _package_modules(TASK_PACKAGE):
        try:
            module = _import_quietly(module_name)
        except Exception:  # noqa: BLE001 - list what does import
            continue
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module_name and not attr.startswith("_"):
                found[f"{module_name}:{attr}"] = obj
    return found


def available_tasks_text() -> str:
    """A one-line list of the task classes in the ``tasks`` package, for error messages."""
    names = sorted(tasks())
    return "tasks available: " + (", ".join(names) if names else "none in the 'tasks' package")


def is_path_spec(module_part: str) -> bool:
    """``"./mytask.py"`` or ``"/abs/heads.py"`` name a file; anything else names a module."""
    return module_part.endswith(".py")


def module_name(module_part: str) -> str:
    """The ``sys.modules`` name a spec's module part is imported under: a file gets a name of
    its own, stable for its absolute path (two files called ``task.py`` do not collide)."""
    if not is_path_spec(module_part):
        return module_part
    path = Path(module_part).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"wheeler2_file_{stem}_{digest}"


# Per module loaded from a file: the gymnasium ids its import registered (or re-registered), with
# the specs it registered. Two files may register one id; each file's own stays reachable.
_FILE_IDS: dict[str, dict[str, Any]] = {}


def _gym_registry() -> dict[str, Any]:
    gymnasium = sys.modules.get("gymnasium")
    return dict(gymnasium.registry) if gymnasium is not None else {}


def spec_module_part(module_name: str) -> str:
    """The module part a spec needs to import ``module_name`` again in another process: the
    file's absolute path for a module loaded from a file (its :func:`module_name` is known only
    to the process that loaded it), else the name itself."""
    module = sys.modules.get(module_name)
    if module_name.startswith("wheeler2_file_") and getattr(module, "__file__", None):
        return str(Path(module.__file__).resolve())  # type: ignore[union-attr, arg-type]
    return module_name


def _import_file(module_part: str, spec: str) -> ModuleType:
    name = module_name(module_part)
    if name in sys.modules:
        return sys.modules[name]
    path = Path(module_part).resolve()
    if not path.is_file():
        raise RegistryError(f"no file '{path}' (from '{spec}')")
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise RegistryError(f"cannot import '{path}' (from '{spec}') as Python")
    module = importlib.util.module_from_spec(loader_spec)
    # Registered before running it, as `import` does: classes defined there can be pickled and
    # a second resolution of the same file returns the same module.
    sys.modules[name] = module
    before = _gym_registry()
    try:
        with warnings.catch_warnings():
            # A file that registers a gymnasium id another file (an earlier copy of it, in one
            # process) registered: the file named now is the one meant, said by no warning line.
            warnings.filterwarnings("ignore", message=".*Overriding environment")
            loader_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: one located line, not a traceback
        del sys.modules[name]
        raise code_error(exc, path) from None
    except BaseException:
        del sys.modules[name]
        raise
    after = _gym_registry()
    _FILE_IDS[name] = {k: v for k, v in after.items() if before.get(k) is not v}
    return module


def import_spec_module(module_name: str, spec: str, hint: str | None = None) -> ModuleType:
    """The module of a ``module:attr`` spec: a ``.py`` path or an importable name. A module that
    is missing is a RegistryError (ending in ``hint``, by default the tasks available); a user's
    module that fails to import (SyntaxError, a missing import inside it, an exception at its
    top level) a CodeError naming its file and line; wheeler2's own modules keep their traceback
    (a bug to report)."""
    if is_path_spec(module_name):
        return _import_file(module_name, spec)
    name = installed_module(module_name)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # "This very module is missing" is a lookup error; a missing import inside it is the
        # module's own error.
        if exc.name is not None and name.startswith(exc.name):
            hint = available_tasks_text() if hint is None else hint
            raise RegistryError(f"no module named '{name}' (from '{spec}'); {hint}") from None
        if not is_user_module(name):
            raise
        raise code_error(exc) from None
    except Exception as exc:
        if not is_user_module(name):
            raise
        raise code_error(exc) from None


def resolve_object(spec: str, hint: str | None = None) -> Any:
    """``"module:attr"`` -> the attribute (a task class, a reward function, an agent class, an
    env wrapper). The module part may be a ``.py`` file's path (absolute, or relative to the
    working directory; the config reader makes a file's paths absolute against the file's
    folder). ``hint`` ends the error for a missing module (default: the tasks available)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"expected 'module:name', got '{spec}'; {available_tasks_text()}")
    if module_name.startswith(".") and not is_path_spec(module_name):
        raise RegistryError(
            f"'{spec}' names a relative module; write it from the top ('mypkg.tasks:Name') "
            f"or as a file ('./tasks.py:Name')"
        )
    module = import_spec_module(module_name, spec, hint)
    if is_path_spec(module_name):
        module_name = shown_path(module_name)
    else:
        module_name = installed_module(module_name)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(a for a in vars(module) if not a.startswith("_"))
            close = _closest(part, public)
            raise RegistryError(
                f"module '{module_name}' has no '{attr}'; {close}it defines: {', '.join(public)}"
            )
        obj = getattr(obj, part)
    return obj


def check_env_id(env_id: str) -> None:
    """Fail early, with suggestions, on an environment id that ``make_env`` could not build.

    Adapter-prefixed ids are only checked for their form here: their packages are optional and
    slow to import, and the adapter reports its own errors when the run starts.
    """
    prefix, sep, rest = env_id.partition(":")
    if sep and prefix in ENV_ADAPTERS:
        if not rest:
            raise RegistryError(f"'{env_id}' names no environment after '{prefix}:'")
        if prefix == "pettingzoo" and "." not in rest:
            raise RegistryError(
                f"expected 'pettingzoo:<family>.<env>', e.g. 'pettingzoo:sisl.multiwalker_v9', "
                f"got '{env_id}'"
            )
        if prefix == "mo":  # a light package: a missing one or a typo is named at load time
            problem = importlib.import_module(ENV_ADAPTERS[prefix]).id_problem(rest)
            if problem:
                raise RegistryError(problem)
        return
    import gymnasium

    import_builtin_envs()
    if sep:
        gymnasium_id(env_id)
        return
    if env_id in gymnasium.registry:
        return
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
    hint = f"close registered ids: {', '.join(close)}" if close else "no close registered id"
    raise RegistryError(
        f"unknown environment '{env_id}'; {hint} (ids from other packages: 'module:EnvId'; "
        f"your own env: './myenv.py:EnvId' or './myenv.py:MyEnvClass')"
    )


def gymnasium_id(env_id: str) -> str:
    """The id ``gymnasium.make`` takes for an ``[env] id`` without an adapter prefix.

    A registered id is itself. ``"module:EnvId"`` imports ``module`` first (its import registers
    the id), where ``module`` may be a ``.py`` file's path (the config reader makes it absolute
    against the config file's folder). ``"module:Name"`` naming no registered id but a class or
    factory of that module (``"./myenv.py:MyEnv"``) registers it under an id of its own, so
    kwargs, vector modes and every member process build it the same way.
    """
    import gymnasium

    prefix, sep, rest = env_id.partition(":")
    if not sep:
        return env_id
    if not rest:
        raise RegistryError(f"'{env_id}' names no environment after ':'")
    prefixes = ", ".join(f"'{p}:'" for p in ENV_ADAPTERS)
    cannot = (
        f"cannot import '{prefix}' for '{env_id}' ({{}}); adapter prefixes are {prefixes}, "
        f"anything else before ':' must be an importable module or a .py file"
    )
    try:
        module = import_spec_module(prefix, env_id)
    except CodeError:
        raise
    except RegistryError as exc:
        if is_path_spec(prefix):  # no such file
            raise RegistryError(str(exc)) from None
        raise RegistryError(cannot.format(f"No module named '{prefix}'")) from None
    except ImportError as exc:
        raise RegistryError(cannot.format(exc)) from None
    registered = _FILE_IDS.get(module.__name__, {}).get(rest)
    if registered is not None:
        # The id as this file registered it, under a name of its own: another file that
        # registers the same id later in this process (a notebook running two configs) would
        # otherwise take it over.
        own = f"{module.__name__}/{rest}"
        if own not in gymnasium.registry:
            gymnasium.registry[own] = dataclasses.replace(registered, id=own)
        return own
    if rest in gymnasium.registry:
        return rest
    obj: Any = module
    for part in rest.split("."):
        obj = getattr(obj, part, None)
    if obj is None or not callable(obj):
        where = shown_path(prefix) if is_path_spec(prefix) else prefix
        ids = sorted(i for i, spec in gymnasium.registry.items() if _defined_in(spec, module))
        public = sorted(a for a in vars(module) if not a.startswith("_"))
        close = _closest(rest, ids + public + list(gymnasium.registry))
        raise RegistryError(
            f"unknown environment '{rest}': '{where}' registers no such gymnasium id and defines "
            f"no env class or factory of that name; {close}it registers: {', '.join(ids) or 'none'}"
            f"; it defines: {', '.join(public) or 'nothing'}"
        )
    own = f"{module.__name__}/{rest}"
    if own not in gymnasium.registry:
        gymnasium.register(own, entry_point=obj)
    return own


def _defined_in(spec: Any, module: ModuleType) -> bool:
    entry = spec.entry_point
    if isinstance(entry, str):
        return entry.partition(":")[0] == module.__name__
    return getattr(entry, "__module__", None) == module.__name__


# The adapter of every id without an adapter prefix (gymnasium ids, "module:EnvId").
DEFAULT_ENV_ADAPTER = "wheeler2.envs.gym"
# Modules of `envs` that adapt other packages rather than define envs; importing them for ids
# would pull in optional, slow dependencies.
_ADAPTER_MODULES = {DEFAULT_ENV_ADAPTER, *ENV_ADAPTERS.values()}


def import_builtin_envs() -> None:
    """Our own envs (``envs/bitflip.py``, ...) register their gymnasium ids on import."""
    for module_name in _package_modules("wheeler2.envs"):
        if module_name not in _ADAPTER_MODULES:
            try:
                importlib.import_module(module_name)
            except ImportError:
                continue


def make_env(
    env_cfg: EnvSpec,
    num_envs: int,
    seed: int,
    agents: tuple[str, ...] | list[str] | None = None,
    groups: dict[str, tuple[str, ...]] | None = None,
) -> VecEnv:
    """Build the vectorized adapter for ``env_cfg`` (the adapter modules are imported lazily).

    ``agents`` are a team member's globs (``[[team]] agents``): they select the member's agents
    of a multi-agent env (PettingZoo agent names, Unity behavior names) and replace any
    ``agents`` in ``[env] kwargs``, so each member of one team can drive its own agents.
    """
    env = _make_adapter(env_cfg, num_envs, seed, agents, groups)
    if env_cfg.achieved_goal_in_obs and env.info.goal_dim:
        env = AchievedGoalInObs(env)  # still a goal env: a stack on it is refused below
    if env_cfg.stack > 1:  # [env] stack: the last k observations (FrameStackError if it cannot)
        try:
            return FrameStack(env, env_cfg.stack)
        except FrameStackError:
            env.close()
            raise
    return env


def wrappers_problem(env_id: str, vector: str) -> str | None:
    """Why ``[env] wrappers`` cannot apply to ``env_id`` stepped as ``vector``, or None.

    A gymnasium wrapper wraps one gymnasium env; only the gymnasium adapter (``"sync"`` and
    ``"async"``) builds one per copy. envpool steps its copies in C++, and the other adapters
    build their copies (or a vector reward around them) themselves."""
    prefix, sep, _ = env_id.partition(":")
    if sep and prefix in ENV_ADAPTERS:
        return (
            f"gymnasium wrappers apply to gymnasium ids; '{prefix}:' ids are built by their own "
            f"adapter ({ENV_ADAPTERS[prefix]}), which applies none (leave wrappers out)"
        )
    if vector == "envpool":
        return (
            "gymnasium wrappers cannot wrap envpool's copies, which step in its C++ thread "
            'pool: use vector = "sync" or "async", or leave wrappers out'
        )
    return None


def _make_adapter(
    env_cfg: EnvSpec,
    num_envs: int,
    seed: int,
    agents: tuple[str, ...] | list[str] | None,
    groups: dict[str, tuple[str, ...]] | None = None,
) -> VecEnv:
    prefix, sep, rest = env_cfg.id.partition(":")
    kwargs = dict(env_cfg.kwargs)
    # Plain (spec, kwargs) pairs: they travel to "async" copies' subprocesses by pickle.
    wrappers = tuple((w.wrapper, dict(w.kwargs)) for w in env_cfg.wrappers)
    problem = wrappers_problem(env_cfg.id, env_cfg.vector) if wrappers else None
    if problem is not None:
        raise RegistryError(f"[env] wrappers: {problem}")
    if sep and prefix in ENV_ADAPTERS:
        if agents is not None:
            kwargs["agents"] = list(agents)
        if groups:
            kwargs["groups"] = dict(groups)
        adapter = importlib.import_module(ENV_ADAPTERS[prefix])
        return adapter.make(rest, kwargs, num_envs, seed)
    if agents is not None:
        raise RegistryError(
            f"'{env_cfg.id}' is a single-agent gymnasium env: a team member's 'agents' globs "
            f"only apply to 'pettingzoo:' and 'unity:' ids"
        )
    import_builtin_envs()
    adapter = importlib.import_module(DEFAULT_ENV_ADAPTER)
    return adapter.make(
        env_cfg.id, kwargs, num_envs, seed, vector=env_cfg.vector, wrappers=wrappers
    )
