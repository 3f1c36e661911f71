"""A cross-process mutex that survives a holder's death, and a condition built on it.

``multiprocessing.Lock`` stays locked forever when its holder is SIGKILLed, and
``multiprocessing.Condition.notify`` waits without a timeout for every sleeper to wake, so a
member that dies inside ``wait`` hangs the notifier. Both are rebuilt here from named semaphores:

* the lock records its holder's pid in shared memory; a waiter that cannot get the lock checks
  whether the holder still lives and, if not, releases the lock on its behalf and flags a repair
  (the storage then discards the half-written chunk). A holder killed in the instant between
  taking the semaphore and writing its pid (or clearing it and releasing) leaves no name: the
  lock then looks held by nobody, and after ``_ORPHAN_S`` without any acquisition it is taken
  back the same way (a live holder needs microseconds for that step, not seconds);
* the condition counts its sleepers in shared memory and ``notify_all`` releases that many
  semaphore tokens without waiting for anybody; tokens left over by a dead or timed-out sleeper
  only cause a spurious wake-up, which every waiter tolerates by re-checking its predicate.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from .config import ReplayTimeout
from .shm import NamedSemaphore

_SLICE_S = 0.25  # how often a blocked acquirer looks for a dead holder
_ORPHAN_S = 3.0  # held by nobody known for this long, with no acquisition: the holder is gone


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # unknown holder: assume alive, the timeout will speak
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # A SIGKILLed child nobody reaped yet is a zombie: dead for our purposes.
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RobustLock:
    """Mutex over a named semaphore; ``state[holder]`` is the holder's pid, ``state[gen]``
    counts acquisitions, ``state[repair]`` is set to 1 when the lock was taken back from a dead
    holder."""

    def __init__(
        self,
        sem: NamedSemaphore,
        guard: NamedSemaphore,
        state: np.ndarray,
        holder: int,
        gen: int,
        repair: int,
        timeout_s: float,
    ) -> None:
        self._sem = sem
        self._guard = guard  # serialises the rescue so the dead holder's lock is released once
        self._state = state
        self._holder = holder
        self._gen = gen
        self._repair = repair
        self.timeout_s = timeout_s
        self._owner: int | None = None  # the thread of this process that holds it, if any

    def acquire(self, timeout: float | None = None) -> None:
        if not self._sem.acquire(False):
            self._acquire_slow(self.timeout_s if timeout is None else timeout)
        state = self._state
        state[self._holder] = os.getpid()
        state[self._gen] += 1
        self._owner = threading.get_ident()

    def _acquire_slow(self, timeout: float) -> None:
        now = time.monotonic()
        deadline = now + timeout
        seen = (int(self._state[self._holder]), int(self._state[self._gen]))
        seen_since = now
        while True:
            if self._sem.acquire(True, _SLICE_S):
                return
            holder, gen = int(self._state[self._holder]), int(self._state[self._gen])
            now = time.monotonic()
            if (holder, gen) != seen:
                seen, seen_since = (holder, gen), now
            if holder > 0 and not pid_alive(holder):
                self._rescue(holder, gen)
                continue
            if holder == 0 and now - seen_since > _ORPHAN_S:
                self._rescue(0, gen)
                seen_since = now
                continue
            if now > deadline:
                raise ReplayTimeout(
                    f"replay lock held for more than {timeout:.0f} s by pid {holder}: "
                    "a producer or the learner may be stuck or have died"
                )

    def _rescue(self, dead: int, gen: int) -> None:
        if not self._guard.acquire(True, 5.0):
            return
        try:
            # Re-check under the guard: another waiter may have rescued the lock already, or
            # somebody may have acquired it since (the generation moved).
            state = self._state
            if (
                int(state[self._holder]) == dead
                and int(state[self._gen]) == gen
                and self._sem.value() == 0
            ):
                self._state[self._holder] = 0
                self._state[self._repair] = 1
                self._sem.release()
        finally:
            self._guard.release()

    def release(self) -> None:
        # Only the holder lets go. A SharedCondition.wait that cannot take the lock back raises
        # without it, and its caller's ``finally`` still calls release: that must not free the
        # lock another member holds (its semaphore would count 2 once that member released).
        if self._owner != threading.get_ident() or int(self._state[self._holder]) != os.getpid():
            return
        self._owner = None
        self._state[self._holder] = 0
        self._sem.release()

    def __enter__(self) -> RobustLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SharedCondition:
    """Condition variable on a :class:`RobustLock`; ``state[sleepers]`` counts waiting processes."""

    def __init__(self, lock: RobustLock, sem: NamedSemaphore, state: np.ndarray, sleepers: int):
        self.lock = lock
        self._sem = sem
        self._state = state
        self._sleepers = sleepers

    def wait(self, timeout: float) -> bool:
        """Call with the lock held; returns with it held. False if no notify came in time."""
        self._state[self._sleepers] += 1
        self.lock.release()
        try:
            woken = self._sem.acquire(True, max(0.0, timeout))
        finally:
            self.lock.acquire()
        if not woken and self._state[self._sleepers] > 0:
            self._state[self._sleepers] -= 1
        return woken

    def notify_all(self) -> None:
        """Call with the lock held. Never blocks, whatever happened to the sleepers."""
        n = int(self._state[self._sleepers])
        if n > 0:
            self._state[self._sleepers] = 0
            for _ in range(n):
                self._sem.release()
