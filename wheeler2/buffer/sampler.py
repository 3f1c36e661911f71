"""Which stored transitions a batch draws, and their importance weights.

Only the sampling process keeps the trees; producers never touch them. Before each batch the
sampler reads (under the lock) how many items were inserted since its last look and gives the
slots they landed in the current max priority in one vectorized range update. A sampled slot
is turned into the absolute insert number it held at that sync; the caller re-checks it under
the lock while gathering, because producers may have overwritten it in between.
"""

from __future__ import annotations

import threading

import numpy as np

from .config import ReplayConfig
from .storage import MAX_PRIORITY, SYNCED, Storage
from .sumtree import SumMinTree


def first_valid(storage: Storage, lo: int, total: int) -> int:
    """The oldest valid transition of ``[lo, total)`` (``total`` when none is); lock held.

    An image replay's frame ring can run out before its transition ring (episodes shorter than
    ``1 / frame_slack`` steps add a first frame besides one per step), and a slot whose frames
    are overwritten is no longer valid. Frame numbers grow with transition numbers and a
    transition once invalid stays so, so the samplers keep this bound, move it only forward
    (amortized one check per insert) and draw above it: it never skips a valid transition, and
    the few invalid ones above it (a stack linking back to an older block, a writer that died
    mid-copy) are redrawn as any overwritten slot. It reads only the shared ring, whichever
    producer processes wrote it."""
    n = 64
    while lo < total:
        j = np.arange(lo, min(lo + n, total), dtype=np.int64)
        ok = storage.valid(j, total)
        if ok.any():
            return int(j[int(np.argmax(ok))])
        lo = int(j[-1]) + 1
        n = min(2 * n, 1 << 16)
    return total


class UniformSampler:
    """Uniform over ``[lo, total)``: the ring's oldest slot on, or with images its oldest
    transition whose frames are all still stored (:func:`first_valid`)."""

    prioritized = False

    def __init__(self, storage: Storage, cfg: ReplayConfig, rng: np.random.Generator) -> None:
        self.storage = storage
        self.capacity = cfg.capacity
        self.rng = rng
        self.total = 0
        self.images = bool(storage.images)
        self.lo = 0

    def sync(self, total: int) -> None:
        """Take in the inserts so far (lock held)."""
        self.total = total
        lo = max(self.lo, total - self.capacity, 0)
        if self.images:
            lo = first_valid(self.storage, lo, total)
        self.lo = lo

    def draw(self, batch: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
        """(absolute numbers [B] int64, importance weights [B] float32)."""
        lo = self.lo if self.lo < self.total else max(0, self.total - self.capacity)
        j = self.rng.integers(lo, self.total, batch, dtype=np.int64)
        return j, np.ones(batch, dtype=np.float32)

    def discard(self, j: np.ndarray) -> None:
        """Forget items found broken (a dead writer's half-copied slots)."""

    def update(self, j: np.ndarray, td_error: np.ndarray) -> None:
        pass

    def rebuild(self) -> None:
        self.total = self.lo = 0  # a loaded ring: the next sync finds the bound again


class PrioritizedSampler:
    prioritized = True

    def __init__(self, storage: Storage, cfg: ReplayConfig, rng: np.random.Generator) -> None:
        self.storage = storage
        self.capacity = cfg.capacity
        self.alpha = cfg.alpha
        self.beta0 = cfg.beta
        self.beta_steps = cfg.beta_steps
        self.eps = cfg.eps
        self.rng = rng
        self.tree = SumMinTree(cfg.capacity, storage.arrays["priority"])
        # The tree's kernels release the GIL: a thread that samples ahead (prefetch) and the
        # thread that updates priorities must not run them on the same tree at once.
        self._lock = threading.Lock()
        self.total = int(storage.hdr[SYNCED])
        self.lo = 0  # image replays: the oldest transition whose frames are all stored

    def rebuild(self) -> None:
        with self._lock:
            self.tree.rebuild()
            self.total = int(self.storage.hdr[SYNCED])
            self.lo = 0

    def _drop_stale(self, total: int) -> None:
        """Image replays: zero the leaves of the transitions whose frames the ring has
        overwritten since the last sync (:func:`first_valid`), so they are not drawn and
        redrawn. Lock held, after the new items got their leaves."""
        if not self.storage.images:
            return
        c = self.capacity
        lo = max(self.lo, total - c, 0)
        hi = first_valid(self.storage, lo, total)
        s0, s1 = lo % c, hi % c
        if hi - lo >= c:
            self.tree.set_range(0, c, 0.0)
        elif s0 < s1:
            self.tree.set_range(s0, s1, 0.0)
        elif hi > lo:  # the range wraps around the end of the ring
            self.tree.set_range(s0, c, 0.0)
            self.tree.set_range(0, s1, 0.0)
        self.lo = hi

    def beta(self, updates: int) -> float:
        if not self.beta_steps:
            return self.beta0
        frac = min(1.0, updates / self.beta_steps)
        return self.beta0 + (1.0 - self.beta0) * frac

    def sync(self, total: int) -> None:
        """Give every item inserted since the last sync the max priority (lock held)."""
        with self._lock:
            if total <= self.total:
                return
            c = self.capacity
            start = max(self.total, total - c)
            value = float(self.storage.fhdr[MAX_PRIORITY]) ** self.alpha
            s0, s1 = start % c, total % c
            if total - start >= c:
                self.tree.set_range(0, c, value)
            elif s0 < s1:
                self.tree.set_range(s0, s1, value)
            else:  # the new range wraps around the end of the ring
                self.tree.set_range(s0, c, value)
                self.tree.set_range(0, s1, value)
            self._drop_stale(total)
            self.total = total
            self.storage.hdr[SYNCED] = total

    def _absolute(self, slot: np.ndarray) -> np.ndarray:
        """The absolute number each slot held at the last sync."""
        t = self.total
        return t - 1 - ((t - 1 - slot) % self.capacity)

    def draw(self, batch: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            tree = self.tree
            # w_i = (N P_i)^-beta / max_k w_k, and the max weight belongs to the smallest stored
            # priority (min tree), so w_i = (p_i / p_min)^-beta: N and the total cancel out. The
            # tree draws, weighs and maps slots to absolute numbers in one compiled pass.
            beta = self.beta(updates)
            j, weight, empty = tree.draw(batch, self.rng, beta, self.total)
            if empty:
                # Only an empty tree (a rounding mass lands on the last non-empty leaf): redraw
                # those from the non-empty ones proportionally, without strata.
                bad = weight == 0
                redo = tree.find(self.rng.random(int(bad.sum())) * tree.total * (1 - 1e-12))
                j[bad] = self._absolute(redo)
                p = tree.leaves[redo]
                weight[bad] = (p / tree.min) ** (-beta)
            return j, weight

    def discard(self, j: np.ndarray) -> None:
        with self._lock:
            slot = np.asarray(j, dtype=np.int64) % self.capacity
            self.tree.update(slot, np.zeros(slot.shape[0]))

    def update(self, j: np.ndarray, td_error: np.ndarray) -> None:
        """New priorities ``|td| + eps`` for the items ``j`` that still hold those numbers."""
        with self._lock:
            fhdr = self.storage.fhdr
            # An item overwritten since it was sampled keeps its fresh max priority (the kernel
            # skips numbers older than the ring holds). One NaN leaf would poison every sum above
            # it; a diverging learner's items keep the max priority instead, so they are revisited
            # rather than lost.
            top = self.tree.update_priorities(
                j, td_error, self.eps, self.alpha, float(fhdr[MAX_PRIORITY]), self.total
            )
            if top > fhdr[MAX_PRIORITY]:
                fhdr[MAX_PRIORITY] = top
