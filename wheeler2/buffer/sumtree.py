"""Sum tree and min tree over ``priority ** alpha``, compiled with numba.

Layout: a wide tree (fan-out 32) whose rows store the *inclusive prefix sums* of their 32
children, so descending one level is one contiguous row read and a branch-free count of the
prefix sums at or below the mass. For a million leaves that is 4 rows per sample instead of 20
binary levels, and an update recomputes 4 rows per touched leaf, each row once per batch however
many of the batch's leaves fall under it. Every row is recomputed from its children (never
updated by deltas): duplicate indices in a batch are harmless (the last write wins) and float
error never accumulates.

Why numba (``treejit.py``) rather than a C extension or numpy:

* the leaves live in shared memory and are read by other processes (checkpoints, a second
  sampler). numba kernels take the numpy arrays as they are, in place, with no copy and no
  buffer-protocol glue, and release the GIL;
* nothing to compile on the user's machine: numba ships as a wheel and compiles the kernels
  itself on first use, caching the machine code on disk (``cache=True``), where a C extension
  needs a compiler and build step at install time or a wheel per platform;
* the vectorized numpy version (the previous design, same rows: row gathers, a [256, 32]
  prefix matmul, row minima per level) pays a numpy call and a temporary per step of every
  level. Tree alone, capacity 1M, a stratified draw of 256 with weights plus their priority
  update, interleaved rounds on a loaded 2-core machine: 412 us numpy, 182 us compiled. What
  is left is memory latency (the level-0 rows and the leaves, 8 MB each, miss the cache), so
  the kernels load all of a batch's rows in a bare loop first (``_touch_rows``) to keep many
  misses in flight. Fan-outs 16 and 8 (fewer bytes per row, more levels) measured slower.

numba is required: without it (or with ``NUMBA_DISABLE_JIT`` set) building a tree raises an
ImportError that says so, rather than running a pure-Python tree thousands of times slower. It
is imported when the first tree is built, so processes that only write never load it.

``leaves`` (float64, ``padded_size(capacity)`` long) may live in shared memory so that a
checkpoint taken by any process sees the learner's priorities; the inner levels are private to
the sampling process and are rebuilt from the leaves on attach or load.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

FANOUT = 32
_SHIFT = 5  # log2(FANOUT)
TOP_MAX = 4096  # fixes the padded leaf count (shared-memory and checkpoint layout); see tree_shape


def tree_shape(capacity: int) -> tuple[int, int]:
    """(levels, padded leaf count) for ``capacity`` leaves.

    The padded count is part of the shared-memory layout and of replay checkpoints, so it is
    kept from the numpy tree this one replaced (whose top level held at most ``TOP_MAX``
    nodes): ``capacity`` rounded up to a multiple of ``FANOUT ** levels``."""
    levels = 0
    while -(-capacity // FANOUT**levels) > TOP_MAX:
        levels += 1
    block = FANOUT**levels
    return levels, -(-capacity // block) * block


def padded_size(capacity: int) -> int:
    return tree_shape(capacity)[1]


_KERNELS: ModuleType | None = None


def kernels() -> ModuleType:
    """The compiled kernels (imports numba on first use; raises ImportError without it)."""
    global _KERNELS
    if _KERNELS is None:
        from . import treejit

        _KERNELS = treejit
    return _KERNELS


class SumMinTree:
    """Leaves hold ``priority ** alpha`` (0 = empty slot, never sampled).

    Rows: level 0 has one row per ``FANOUT`` leaves, level k + 1 one row per ``FANOUT`` rows of
    level k, up to a single top row. ``prefix`` stacks every level's rows; ``nsum``/``nmin``
    hold each row's total and smallest positive child, level by level, each level padded with
    (0, inf) to a multiple of ``FANOUT`` so every parent row has exactly ``FANOUT`` children.

    Not thread-safe: the kernels release the GIL, so two threads must not use one tree at once
    (``PrioritizedSampler`` serializes its own calls with a lock).
    """

    def __init__(self, capacity: int, leaves: np.ndarray | None = None) -> None:
        self._k = kernels()
        self.capacity = capacity
        _, size = tree_shape(capacity)
        if leaves is None:
            leaves = np.zeros(size, dtype=np.float64)
        if leaves.shape != (size,) or leaves.dtype != np.float64:
            raise ValueError(f"leaves must be float64 [{size}]")
        if not (leaves.flags.c_contiguous and leaves.flags.writeable):
            raise ValueError(
                "leaves must be a writeable, contiguous array (it is updated in place)"
            )
        self.leaves = leaves
        fan = self._k.FANOUT  # the kernels' fan-out (FANOUT above only fixes the padded size)
        rows = [-(-size // fan)]
        while rows[-1] > 1:
            rows.append(-(-rows[-1] // fan))
        self.levels = len(rows)
        padded = [-(-r // fan) * fan for r in rows[:-1]] + [1]
        self.roff = np.cumsum([0] + rows[:-1]).astype(np.int64)
        self.noff = np.cumsum([0] + padded[:-1]).astype(np.int64)
        self.prefix = np.zeros((sum(rows), fan))
        self.nsum = np.zeros(sum(padded))
        self.nmin = np.full(sum(padded), np.inf)
        self.stamp = np.zeros(sum(rows) + 1, dtype=np.int64)
        self._top = int(self.noff[-1])
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute every level from the leaves (after a load or an attach)."""
        self.leaves[self.capacity :] = 0.0
        self._refresh(0, self.leaves.shape[0])

    def _refresh(self, start: int, stop: int) -> None:
        self._k.refresh_range(
            self.leaves, self.prefix, self.nsum, self.nmin, self.roff, self.noff, start, stop
        )

    def set_range(self, start: int, stop: int, value: float) -> None:
        """Set leaves [start, stop) (no wrap) to ``value``: the new-items path, kept cheap."""
        if stop <= start:
            return
        if start < 0 or stop > self.capacity:
            raise IndexError(f"leaf range [{start}, {stop}) outside [0, {self.capacity})")
        self.leaves[start:stop] = value
        self._refresh(start, stop)

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set scattered leaves; duplicates in ``index`` are fine (last write wins)."""
        idx = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
        vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        if idx.shape != vals.shape:
            raise ValueError(f"{idx.shape[0]} indices but {vals.shape[0]} values")
        bad = self._k.update(
            self.leaves,
            self.prefix,
            self.nsum,
            self.nmin,
            self.roff,
            self.noff,
            self.stamp,
            self.capacity,
            idx,
            vals,
        )
        if bad >= 0:
            raise IndexError(f"leaf index {idx[bad]} outside [0, {self.capacity})")

    def update_priorities(
        self,
        index: np.ndarray,
        td: np.ndarray,
        eps: float,
        alpha: float,
        fallback: float,
        total: int | None = None,
    ) -> float:
        """Leaves ``(|td| + eps) ** alpha`` (``fallback ** alpha`` where that is not finite);
        returns the largest raw priority ``|td| + eps`` written (0.0 if none).

        ``index``: slots; or, with ``total`` (inserts so far into a ring of ``capacity``
        slots), absolute insert numbers, of which those no longer stored are skipped."""
        idx = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
        td = np.ascontiguousarray(td, dtype=np.float64).reshape(-1)
        if idx.shape != td.shape:
            raise ValueError(f"{idx.shape[0]} indices but {td.shape[0]} errors")
        top = self._k.set_priorities(
            self.leaves,
            self.prefix,
            self.nsum,
            self.nmin,
            self.roff,
            self.noff,
            self.stamp,
            self.capacity,
            idx,
            td,
            float(eps),
            float(alpha),
            float(fallback),
            -1 if total is None else int(total),
        )
        if top < 0:
            bad = idx[(idx < 0) | (idx >= self.capacity)][0]
            raise IndexError(f"leaf index {bad} outside [0, {self.capacity})")
        return top

    @property
    def total(self) -> float:
        return float(self.nsum[self._top])

    @property
    def min(self) -> float:
        """Smallest non-zero leaf (inf when empty)."""
        return float(self.nmin[self._top])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaf index whose cumulative-sum interval contains each ``mass`` in [0, total).

        A mass at or past the total (rounding) lands on the last non-empty leaf; only an empty
        tree returns an empty slot: callers check ``leaves[i] > 0``.
        """
        m = np.array(mass, dtype=np.float64).reshape(-1)  # the kernel consumes it
        out = np.empty(m.shape[0], dtype=np.int64)
        self._k.find(self.leaves, self.prefix, self.nsum, self.roff, self.noff, m, out)
        return out

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified proportional sampling: one draw from each of ``batch`` equal mass slices."""
        return self.draw(batch, rng, 0.0)[0]

    def draw(
        self, batch: int, rng: np.random.Generator, beta: float, total: int = 0
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Stratified sample of ``batch`` slots with importance weights ``(p / p_min) ** -beta``
        (float32; 0 for an empty slot) and the number of empty slots drawn.

        With ``total`` > 0 (inserts so far into a ring of ``capacity`` slots), the absolute
        insert numbers the drawn slots hold instead of the slots."""
        u = rng.random(batch)
        slot = np.empty(batch, dtype=np.int64)
        weight = np.empty(batch, dtype=np.float32)
        empty = self._k.draw(
            self.leaves,
            self.prefix,
            self.nsum,
            self.nmin,
            self.roff,
            self.noff,
            u,
            float(beta),
            slot,
            weight,
            int(total),
            self.capacity,
        )
        return slot, weight, int(empty)
