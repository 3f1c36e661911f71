"""Named shared-memory segments and semaphores that only their owner unlinks.

Python 3.11's ``SharedMemory`` registers every *attached* segment with the resource tracker, which
unlinks it when the attaching process exits (and spawned members share the owner's tracker, so an
``unregister`` there would also drop the owner's safety net). So segments are opened with
``shm_open`` + ``mmap`` directly: members never touch the tracker; the owner registers what it
creates (the tracker then cleans up even after a SIGKILL of the owner) and unregisters on close.

Semaphores are created by name for the same reason: a ``multiprocess.Lock`` can only be pickled
while spawning a process, but the replay handle must travel through dill, queues or Ray.
"""

from __future__ import annotations

import _posixshmem
import atexit
import mmap
import os
import secrets
import signal
import threading
import weakref
from collections.abc import Callable

import _multiprocess
import numpy as np

SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE
SEM_VALUE_MAX = 2**31 - 1


def new_prefix() -> str:
    return f"w2r_{os.getpid()}_{secrets.token_hex(4)}"


def _tracker() -> object | None:
    try:
        from multiprocess import resource_tracker

        return resource_tracker
    except ImportError:  # pragma: no cover - multiprocess is a hard dependency
        return None


class Segment:
    """One POSIX shared-memory block exposed as a numpy array."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, create: bool) -> None:
        self.name = name
        self.owner = create
        dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                os.ftruncate(fd, nbytes)
                tracker = _tracker()
                if tracker is not None:
                    tracker.register("/" + name, "shared_memory")
            self._mmap = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            if create:
                self.unlink()
            raise
        os.close(fd)
        self.array = np.ndarray(shape, dtype=dtype, buffer=self._mmap)

    def close(self) -> None:
        self.array = None  # type: ignore[assignment]
        try:
            self._mmap.close()
        except BufferError:
            # Someone still holds a view; the mapping goes away with the process.
            pass

    def unlink(self) -> None:
        try:
            _posixshmem.shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass
        tracker = _tracker()
        if tracker is not None:
            try:
                tracker.unregister("/" + self.name, "shared_memory")
            except Exception:  # noqa: BLE001 - the tracker may already be gone at exit
                pass


class NamedSemaphore:
    """A counting semaphore that any process can open by name."""

    def __init__(self, name: str, value: int, create: bool) -> None:
        self.name = name
        self.owner = create
        if create:
            self._sem = _multiprocess.SemLock(SEMAPHORE, value, SEM_VALUE_MAX, "/" + name, False)
            tracker = _tracker()
            if tracker is not None:
                tracker.register("/" + name, "semaphore")
        else:
            self._sem = _multiprocess.SemLock._rebuild(0, SEMAPHORE, SEM_VALUE_MAX, "/" + name)
        self.acquire = self._sem.acquire
        self.release = self._sem.release

    def value(self) -> int:
        return self._sem._get_value()

    def unlink(self) -> None:
        try:
            _multiprocess.sem_unlink("/" + self.name)
        except FileNotFoundError:
            pass
        tracker = _tracker()
        if tracker is not None:
            try:
                tracker.unregister("/" + self.name, "semaphore")
            except Exception:  # noqa: BLE001
                pass


# Owners whose segments must go on exit, Ctrl-C or SIGTERM: key -> (creating pid, cleanup).
_cleanups: dict[int, tuple[int, Callable[[], None]]] = {}
_cleanup_lock = threading.Lock()
_installed = False
_previous_sigterm: object = None


def _run_cleanups() -> None:
    with _cleanup_lock:
        pending = list(_cleanups.values())
        _cleanups.clear()
    pid = os.getpid()
    for owner_pid, fn in pending:
        # A forked child inherits this table; only the creating process may unlink.
        if owner_pid != pid:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _on_sigterm(signum: int, frame: object) -> None:
    _run_cleanups()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    else:
        # Default action: die from the signal, as if we had never caught it.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _run_one(key: int) -> None:
    with _cleanup_lock:
        entry = _cleanups.pop(key, None)
    if entry is not None and entry[0] == os.getpid():
        entry[1]()


def register_cleanup(owner: object, fn: Callable[[], None]) -> int:
    """Run ``fn`` at exit (normal, error, Ctrl-C), on SIGTERM, or when ``owner`` is collected.

    ``fn`` must not reference ``owner``. Returns the key for :func:`unregister_cleanup`.
    """
    global _installed, _previous_sigterm
    key = id(owner)
    with _cleanup_lock:
        _cleanups[key] = (os.getpid(), fn)
        first = not _installed
        _installed = True
    if first:
        atexit.register(_run_cleanups)
        # SIGTERM skips atexit by default; only take it over when nobody else handles it.
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGTERM)
            if current in (signal.SIG_DFL, None):
                _previous_sigterm = current
                signal.signal(signal.SIGTERM, _on_sigterm)
    weakref.finalize(owner, _run_one, key)
    return key


def unregister_cleanup(key: int) -> None:
    with _cleanup_lock:
        _cleanups.pop(key, None)
