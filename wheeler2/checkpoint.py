"""Atomic checkpoints that load with ``torch.load(weights_only=True)``.

A checkpoint is a nested dict of weights_only-safe values only: tensors, Python scalars, strings,
``None``, lists, tuples and dicts. Loading never runs pickled code, so a run directory from
someone else is safe to open. Numpy arrays and RNG states are not safe as such; :func:`to_safe`
and :func:`from_safe` convert them (numpy arrays become tagged tensors) and back.

Files are written next to their destination and renamed over it, so a crash, a full disk or a
Ctrl-C in the middle of a save leaves the previous checkpoint intact and no temporary file.

:func:`save` refuses any other value (naming its key path), so a state that ``load`` could not
read back fails when it is written, in the run that wrote it, not later in ``eval`` or ``resume``.
:func:`load` turns a missing, truncated, foreign or unsafe file into one :class:`CheckpointError`
line, and :func:`check_matches` compares a checkpoint with the agents a config builds.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import random
import re
import signal
import threading
import warnings
import zipfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wheeler2.log import temp_file_beside

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"
BEST = "best.pt"

_NDARRAY_TAG = "__ndarray__"

# Exactly these types (not subclasses: numpy's float64 is a float, and would be pickled as a numpy
# scalar that weights_only refuses) plus tensors. OrderedDict is what nn.Module.state_dict returns.
_PLAIN_SCALARS = (int, float, str, bool, type(None))
_PLAIN_CONTAINERS = (dict, collections.OrderedDict, list, tuple)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, unreadable, unsafe, or not this run's.

    The message is one line naming the file; the CLI prints it and exits 2.
    """


def check_plain(obj: Any, where: str = "state") -> None:
    """Raise ``TypeError`` naming the key path of the first value a weights_only load refuses."""
    kind = type(obj)
    if kind in _PLAIN_SCALARS or isinstance(obj, torch.Tensor):
        return
    if kind in (dict, collections.OrderedDict):
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise TypeError(
                    f"checkpoint value {where} has a key {key!r} of type "
                    f"{_type_name(key)}; keys must be str or int"
                )
            check_plain(value, f"{where}.{key}")
        return
    if kind in (list, tuple):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
        return
    raise TypeError(
        f"checkpoint value {where} is a {_type_name(obj)}; a checkpoint holds only tensors, "
        "int, float, str, bool, None and dicts / lists / tuples of them (convert it in the "
        "state_dict that returns it, e.g. torch.from_numpy for an array)"
    )


def _type_name(obj: Any) -> str:
    kind = type(obj)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def checkpoint_path(run_dir: str | Path, which: str = "latest") -> Path:
    """``run_dir/checkpoints/latest.pt`` or ``.../best.pt``."""
    names = {"latest": LATEST, "best": BEST}
    if which not in names:
        raise ValueError(f"which must be 'latest' or 'best', got {which!r}")
    return Path(run_dir) / CHECKPOINT_DIR / names[which]


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same dir, fsync, rename."""
    path = Path(path)
    # Before any byte is written: a bad value must not replace a good previous checkpoint.
    check_plain(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _interrupts_held():
        fd, tmp_name = temp_file_beside(path)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            # BaseException: KeyboardInterrupt must clean up too. After os.replace the temp name
            # is gone, hence the suppress.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(path.parent)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM for the moments of a write, then deliver them.

    A KeyboardInterrupt raised inside ``torch.save`` leaves its zip writer half-done, and the
    writer's own cleanup then raises a RuntimeError in place of the interrupt: the run would exit
    1 with a torch traceback instead of 130 with its final checkpoint. Python handlers run in the
    main thread only, so elsewhere there is nothing to hold.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler not in (signal.SIG_IGN, None):  # None: set outside Python; leave it be
            previous[sig] = handler
            signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every filesystem lets a directory be opened.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`, without unpickling arbitrary objects.

    Raises :class:`CheckpointError` (one line naming the file) when the file is missing, cut
    short, not a torch file, not a dict, or holds a pickled global other than numpy's arrays.
    Torch's own message is not passed on: it spans many lines and advises ``weights_only=False``,
    which would run whatever code the file carries.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint there (missing file)")
    try:
        state = _torch_load(path, map_location)
    except pickle.UnpicklingError as exc:
        found = _unsafe_global(str(exc))
        if found is None:  # no object to build, just bytes the unpickler cannot read
            operand = re.search(r"Unsupported operand \S+", str(exc))
            raise CheckpointError(
                f"{path}: not a readable torch checkpoint (another format, or corrupt)"
                + (f": {operand.group(0)}" if operand else "")
            ) from None
        if not found.startswith("numpy."):
            raise CheckpointError(
                f"{path}: refused: it holds pickled global {found}; a wheeler2 checkpoint holds "
                "only tensors and plain values, and loading this one could run code it carries"
            ) from None
        # Checkpoints of normalize_obs runs written before the statistics became tensors hold
        # plain numpy arrays: allow exactly the globals that rebuild a numeric array.
        try:
            with torch.serialization.safe_globals(_numpy_array_globals()):
                state = _torch_load(path, map_location)
        except Exception as again:  # noqa: BLE001 - anything else numpy-ish is refused too
            found = _unsafe_global(str(again))
            what = f"pickled global {found}" if found else "numpy data other than plain arrays"
            raise CheckpointError(
                f"{path}: refused: it holds {what}; a wheeler2 checkpoint holds only tensors and "
                "plain values, and loading this one could run code it carries"
            ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, zipfile.BadZipFile, OSError) as exc:
        detail = _first_line(exc)
        raise CheckpointError(
            f"{path}: not a readable torch checkpoint (truncated, corrupt or another format)"
            + (f": {detail}" if detail else "")
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {_type_name(state)}, not a wheeler2 checkpoint")
    return state


def _torch_load(path: Path, map_location: str | torch.device) -> Any:
    # A foreign pickle makes torch warn about its protocol before failing; the error says it all.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location=map_location, weights_only=True)


def _unsafe_global(message: str) -> str | None:
    """The global (function or class) a refused pickle names, from torch's message."""
    match = re.search(r"GLOBAL ([\w.]+)|but got <class '([\w.]+)'>", message)
    return (match.group(1) or match.group(2)) if match else None


def _first_line(exc: BaseException) -> str:
    """The first sentence of an error, on one line (torch's span several, with advice after)."""
    text = " ".join(str(exc).split())
    return text.split(". ")[0][:300]


def _numpy_array_globals() -> list[Any]:
    multiarray = getattr(np, "_core", None) or np.core
    dtype_classes = [type(np.dtype(c)) for c in "?bhilqBHILQefdg"]
    core = multiarray.multiarray
    return [core._reconstruct, core.scalar, np.ndarray, np.dtype, *dtype_classes]


def check_matches(
    path: str | Path,
    payload: Mapping[str, Any],
    agents: Mapping[str, Any],
    algos: Mapping[str, str],
    subset: bool = False,
    required: Collection[str] = (),
) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint that is not the run ``agents`` make.

    ``agents`` maps member names to freshly built agents of the run's config and ``algos`` their
    algorithm names. Every member the checkpoint names (states and ``member_steps``) must be in
    ``agents`` (``subset``: the checkpoint may hold more, as ``eval`` needs the learner only): a
    renamed member would otherwise start fresh and its steps be lost. A member of ``agents`` the
    checkpoint does not name starts fresh (a local run's checkpoint taken before it reported),
    unless it is in ``required``. Every tensor of a fresh agent's state must be in the saved one
    with the same shape, and the saved state must load into the fresh agent. The fresh agents
    are loaded as a side effect; they are meant to be thrown away.
    """
    members = payload.get("members")
    if not isinstance(members, dict) or not all(isinstance(v, dict) for v in members.values()):
        raise CheckpointError(f"{path}: holds no member states; not a wheeler2 run checkpoint")
    steps = payload.get("member_steps")
    saved_names = list(dict.fromkeys([*members, *(steps if isinstance(steps, dict) else {})]))
    missing = [name for name in required if name not in members]
    extra = [] if subset else [name for name in saved_names if name not in agents]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no state for {_names(missing)}")
        if extra:
            parts.append(f"{_names(extra)} not in the config")
        raise CheckpointError(
            f"{path}: saved by members {_names(saved_names)}, but the config declares "
            f"{_names(list(agents))} ({'; '.join(parts)}); a checkpoint resumes only the "
            "members that wrote it"
        )
    for name, agent in agents.items():
        if name not in members:
            continue
        saved = members[name]
        algo = algos.get(name)
        fresh = agent.state_dict()
        # Agents tag their state with their algorithm ("algo"); PPO's and A2C's states are
        # otherwise alike. Older checkpoints have no tag and are compared by structure only.
        saved_algo, fresh_algo = saved.get("algo"), fresh.get("algo")
        if saved_algo is not None and fresh_algo is not None and saved_algo != fresh_algo:
            raise CheckpointError(
                f"{path}: member {name!r} was saved by algo {saved_algo!r}, "
                f"the config says {algo or fresh_algo!r}"
            )
        problem = _mismatch(saved, fresh, name)
        if problem is None:
            try:
                agent.load_state_dict(saved)
            except Exception as exc:  # noqa: BLE001 - any refusal of the state is a mismatch
                problem = f"its state does not load: {_first_line(exc)}"
        if problem is not None:
            member = f"{algo} member {name!r}" if algo else f"member {name!r}"
            raise CheckpointError(f"{path}: does not match the config's {member}: {problem}")


def _names(names: list[str]) -> str:
    return "[" + ", ".join(repr(n) for n in names) + "]"


# Agent state keys that checkpoints written before them lack, and that load without them: the
# random streams (``streams``: generator states, action-noise processes), which a resumed
# agent of such a checkpoint restarts from its seed.
_ADDED_LATER = frozenset({"streams"})


def _mismatch(saved: Any, fresh: Any, where: str) -> str | None:
    """The first place where ``saved`` lacks or reshapes a tensor of ``fresh``, or None."""
    if isinstance(fresh, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            return f"{where} is a {_type_name(saved)}, expected a tensor"
        if saved.shape != fresh.shape:
            return (
                f"{where} has shape {list(saved.shape)}, the config's network has "
                f"{list(fresh.shape)}"
            )
        return None
    if isinstance(fresh, dict):
        # An empty fresh dict (an optimizer's state before its first step, a disabled
        # normalizer) says nothing about what a trained one holds.
        if not fresh:
            return None
        if not isinstance(saved, dict):
            return f"{where} is a {_type_name(saved)}, expected a dict"
        for key, value in fresh.items():
            if key not in saved:
                if _holds_tensor(value) and key not in _ADDED_LATER:
                    return f"{where}.{key} is missing"
                continue
            problem = _mismatch(saved[key], value, f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(fresh, list | tuple) and _holds_tensor(fresh):
        if not isinstance(saved, list | tuple):
            return f"{where} is a {_type_name(saved)}, expected a list"
        if len(saved) != len(fresh):
            return f"{where} has {len(saved)} entries, expected {len(fresh)}"
        for i, (s, f) in enumerate(zip(saved, fresh)):
            problem = _mismatch(s, f, f"{where}[{i}]")
            if problem is not None:
                return problem
    return None


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_tensor(v) for v in value)
    return False


def to_safe(obj: Any) -> Any:
    """Convert numpy arrays and scalars (also inside dicts, lists, tuples) to safe values."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"cannot store a numpy array of dtype {obj.dtype} in a checkpoint")
        return {
            _NDARRAY_TAG: torch.from_numpy(np.ascontiguousarray(obj)).clone(),
            "dtype": obj.dtype.str,
        }
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: to_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_safe(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_safe(v) for v in obj)
    if obj is None or isinstance(obj, bool | int | float | str | torch.Tensor):
        return obj
    raise TypeError(
        f"cannot store a {type(obj).__name__} in a weights_only checkpoint; "
        "use tensors, numpy arrays, numbers, strings, lists and dicts"
    )


def from_safe(obj: Any) -> Any:
    """Undo :func:`to_safe`: tagged tensors become numpy arrays of their original dtype again."""
    if isinstance(obj, dict):
        if _NDARRAY_TAG in obj:
            return obj[_NDARRAY_TAG].numpy().astype(np.dtype(obj["dtype"]), copy=False)
        return {k: from_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_safe(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(from_safe(v) for v in obj)
    return obj


def rng_state() -> dict[str, Any]:
    """The global RNGs of Python, numpy and torch (and CUDA when present), checkpoint-safe."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": to_safe(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured, so the next random numbers repeat."""
    version, internal, gauss = state["python"]
    # setstate wants tuples; a round trip through some writers turns them into lists.
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state(tuple(from_safe(state["numpy"])))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's state (``bit_generator.state``), checkpoint-safe."""
    return to_safe(generator.bit_generator.state)


def set_generator_state(generator: np.random.Generator, state: dict[str, Any]) -> None:
    generator.bit_generator.state = from_safe(state)
