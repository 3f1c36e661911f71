"""The ratio gate: learner gradient steps per inserted transition, counted from ``min_size``.

The learner may take update ``u + 1`` once ``u <= r * (inserts - min_size)``; producers may
insert while ``inserts - min_size <= updates / r + tolerance``. Both sides wait on shared
conditions (woken by the other side's progress) rather than polling, and give up with a
:class:`ReplayTimeout` that names the likely culprit when the other side makes no progress for
``timeout_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .config import ReplayConfig, ReplayTimeout
from .locks import SharedCondition
from .storage import CARRIED, LAST_INSERT, LAST_UPDATE, RELEASED, TOTAL, UPDATES, Storage

_WAIT_SLICE_S = 1.0  # wake up now and then to check the progress clocks


class RatioGate:
    def __init__(self, storage: Storage, cfg: ReplayConfig) -> None:
        self.storage = storage
        self.ratio = cfg.updates_per_insert
        self.min_size = cfg.min_size
        self.tolerance = cfg.gate_tolerance
        self.timeout_s = cfg.timeout_s

    @property
    def enabled(self) -> bool:
        return self.ratio > 0

    def _inserts(self) -> int:
        hdr = self.storage.hdr
        return int(hdr[TOTAL]) - int(hdr[CARRIED])  # rows carried forward are not new

    def learner_may_update(self) -> bool:
        """Read under the lock (or racily, for a non-blocking peek)."""
        inserts = self._inserts()
        if inserts < max(self.min_size, 1):
            return False
        if not self.enabled:
            return True
        return int(self.storage.hdr[UPDATES]) <= self.ratio * (inserts - self.min_size)

    def owed(self) -> int | None:
        """How many updates :meth:`learner_may_update` allows now, before any more inserts
        (a racy read: producers may add to it); None for a disabled gate, which holds nothing."""
        if not self.enabled:
            return None
        inserts = self._inserts()
        if inserts < max(self.min_size, 1):
            return 0
        allowed = math.floor(self.ratio * (inserts - self.min_size)) + 1  # updates 0 .. floor
        return max(0, allowed - int(self.storage.hdr[UPDATES]))

    def producer_may_insert(self) -> bool:
        hdr = self.storage.hdr
        if not self.enabled or hdr[RELEASED]:
            return True
        ahead = int(hdr[TOTAL]) - int(hdr[CARRIED]) - self.min_size
        return ahead <= int(hdr[UPDATES]) / self.ratio + self.tolerance

    def wait_learner(self, timeout: float | None) -> None:
        """With the lock held: block until the learner may update (the lock is kept)."""
        if self.learner_may_update():
            return
        why = "a producer may have died"
        self._wait(
            self.learner_may_update, self.storage.inserted, LAST_INSERT, timeout, "insert", why
        )

    def wait_producer(self, beat: Callable[[], None] | None = None) -> None:
        """With the lock held: block until producers may insert again; ``beat`` is called
        between waits (about every second), the waiting process's sign of life."""
        if self.producer_may_insert():
            return
        self._wait(
            self.producer_may_insert,
            self.storage.updated,
            LAST_UPDATE,
            None,
            "update",
            "the learner may have died or stopped sampling",
            beat,
        )

    def _wait(
        self,
        ready: Callable[[], bool],
        cond: SharedCondition,
        clock: int,
        timeout: float | None,
        what: str,
        why: str,
        beat: Callable[[], None] | None = None,
    ) -> None:
        limit = self.timeout_s if timeout is None else timeout
        fhdr = self.storage.fhdr
        started = time.time()
        while not ready():
            # Time out on silence, not on total waiting: slow but steady peers are fine.
            last = max(started, float(fhdr[clock]))
            left = limit - (time.time() - last)
            if left <= 0:
                raise ReplayTimeout(f"no {what} for {limit:.0f} s: {why}")
            cond.wait(min(left, _WAIT_SLICE_S))
            if beat is not None:
                beat()
