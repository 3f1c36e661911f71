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
import re
import secrets
import signal
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _multiprocess
import numpy as np

SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE
SEM_VALUE_MAX = 2**31 - 1


def new_prefix() -> str:
    return f"w2r_{os.getpid()}_{secrets.token_hex(4)}"


def _tracker() -> Any:
    try:
        from multiprocess import resource_tracker

        return resource_tracker
    except ImportError:  # pragma: no cover - multiprocess is a hard dependency
        return None


class Segment:
    """One POSIX shared-memory block, exposed as a numpy array over its whole mapping.

    The replay's fields and the weight-sync block are both segments. Only the creating process
    (``owner_pid``) unlinks; attachers only map and unmap.
    """

    def __init__(
        self, name: str, shape: tuple[int, ...], dtype: np.dtype | type, create: bool
    ) -> None:
        self.name = name
        self.owner_pid = os.getpid() if create else None
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
            self.mmap = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            if create:
                self.unlink()
            raise
        os.close(fd)
        self._lock_fd = -1
        self._lock_pid = -1
        self.array = np.ndarray(shape, dtype=dtype, buffer=self.mmap)

    @classmethod
    def attach_bytes(cls, name: str) -> Segment:
        """Map an existing segment whole, as bytes, without knowing its size in advance."""
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        return cls(name, (size,), np.dtype(np.uint8), create=False)

    def lock_fd(self) -> int:
        """A descriptor of this segment for ``flock``, opened once per process: flock belongs to
        the open file description, which a forked child would otherwise share with its parent."""
        if self._lock_pid != os.getpid():
            self._lock_fd = _posixshmem.shm_open("/" + self.name, os.O_RDWR, mode=0o600)
            self._lock_pid = os.getpid()
        return self._lock_fd

    def close(self) -> None:
        self.array = None  # type: ignore[assignment]
        if self._lock_fd >= 0 and self._lock_pid == os.getpid():
            os.close(self._lock_fd)
        self._lock_fd = -1
        try:
            self.mmap.close()
        except BufferError:
            # Someone still holds a view; the mapping goes away with the process.
            pass

    def unlink(self) -> None:
        if self.owner_pid != os.getpid():
            return
        self.owner_pid = None
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


# Every segment and semaphore wheeler2 creates is named <kind>_<creator pid>_<random>: the
# replay's fields (w2r_) and the weight-sync block (w2sync_). POSIX semaphores live beside them
# as sem.<name>.
_STALE_NAME = re.compile(r"^(?:sem\.)?(?:w2r|w2sync)_(\d+)_[0-9a-f]+")
SHM_DIR = Path("/dev/shm")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def stale_entries(shm_dir: Path = SHM_DIR) -> list[Path]:
    """wheeler2's shared-memory entries on this machine whose creating process is gone."""
    if not shm_dir.is_dir():
        return []
    out = []
    for entry in shm_dir.iterdir():
        found = _STALE_NAME.match(entry.name)
        if found is not None and not _pid_alive(int(found.group(1))):
            out.append(entry)
    return out


def sweep_stale(shm_dir: Path = SHM_DIR) -> tuple[int, int]:
    """Remove the entries of dead creators (a run killed with SIGKILL, a Ray actor killed
    without its teardown); returns (entries removed, bytes freed). A live creator's entries are
    never touched, so this is safe while other runs use the machine."""
    removed = freed = 0
    for entry in stale_entries(shm_dir):
        try:
            size = entry.stat().st_size
            entry.unlink()
        except FileNotFoundError:
            continue  # another run's sweep got there first
        except OSError:
            continue
        removed += 1
        freed += size
    return removed, freed


def wheeler2_entries(shm_dir: Path = SHM_DIR) -> set[str]:
    """Names of every wheeler2 entry in ``shm_dir`` (for tests and diagnostics)."""
    if not shm_dir.is_dir():
        return set()
    return {e.name for e in shm_dir.iterdir() if _STALE_NAME.match(e.name)}
