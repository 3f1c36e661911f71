"""Atomic checkpoints that load with ``torch.load(weights_only=True)``.

A checkpoint is a nested dict of weights_only-safe values only: tensors, Python scalars, strings,
``None``, lists, tuples and dicts. Loading never runs pickled code, so a run directory from
someone else is safe to open. Numpy arrays and RNG states are not safe as such; :func:`to_safe`
and :func:`from_safe` convert them (numpy arrays become tagged tensors) and back.

Files are written next to their destination and renamed over it, so a crash, a full disk or a
Ctrl-C in the middle of a save leaves the previous checkpoint intact and no temporary file.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"
BEST = "best.pt"

_NDARRAY_TAG = "__ndarray__"


def checkpoint_path(run_dir: str | Path, which: str = "latest") -> Path:
    """``run_dir/checkpoints/latest.pt`` or ``.../best.pt``."""
    names = {"latest": LATEST, "best": BEST}
    if which not in names:
        raise ValueError(f"which must be 'latest' or 'best', got {which!r}")
    return Path(run_dir) / CHECKPOINT_DIR / names[which]


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same dir, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _interrupts_held():
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)


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
    """Read a checkpoint written by :func:`save`, without unpickling arbitrary objects."""
    return torch.load(Path(path), map_location=map_location, weights_only=True)


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
