"""Sum tree and min tree over ``priority ** alpha``, vectorized over a batch.

Layout: a wide tree (fan-out 32) whose rows store the *inclusive prefix sums* of their 32
siblings, so descending one level is one row gather and one compare, with no per-sample
cumulative sum. The top level is kept short (<= 4096 nodes) and searched through a fresh global
cumulative sum, which replaces the upper levels: for a million leaves a batch descends 2 rows
instead of 20 binary levels, which is what makes pure numpy competitive with cpprb's C++ tree.

Row prefix sums are one small matmul with an upper-triangular ones matrix and row minima are
taken on a transposed copy, because numpy's ``cumsum``/``min`` along a short last axis cost
2-4x more (measured on [256, 32]: cumsum 30 us, matmul 14 us; min 14 us, transposed 8 us).
torch was tried and rejected: ``torch.searchsorted`` goes multi-threaded and took milliseconds
on a loaded 2-core machine.

Every parent is recomputed from its children (never updated by deltas): duplicate indices in a
batch are harmless and float error never accumulates.
"""

from __future__ import annotations

import numpy as np

FANOUT = 32
_SHIFT = 5  # log2(FANOUT)
_UPPER = np.triu(np.ones((FANOUT, FANOUT)))  # rows @ _UPPER = inclusive row prefix sums
TOP_MAX = 4096  # the top level is scanned with a global cumsum per batch


def tree_shape(capacity: int) -> tuple[int, int]:
    """(number of prefix levels, padded leaf count) for ``capacity`` leaves."""
    levels = 0
    while -(-capacity // FANOUT**levels) > TOP_MAX:
        levels += 1
    block = FANOUT**levels
    return levels, -(-capacity // block) * block


def padded_size(capacity: int) -> int:
    return tree_shape(capacity)[1]


def _row_min(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows.T).min(axis=0)


class SumMinTree:
    """Leaves hold ``priority ** alpha`` (0 = empty slot, never sampled).

    ``leaves`` (float64, ``padded_size(capacity)`` long) may live in shared memory so that a
    checkpoint taken by any process sees the learner's priorities; the inner levels are private.
    """

    def __init__(self, capacity: int, leaves: np.ndarray | None = None) -> None:
        self.capacity = capacity
        self.levels, size = tree_shape(capacity)
        if leaves is None:
            leaves = np.zeros(size, dtype=np.float64)
        if leaves.shape != (size,) or leaves.dtype != np.float64:
            raise ValueError(f"leaves must be float64 [{size}]")
        self.leaves = leaves
        # prefix[k]: [rows, FANOUT] inclusive prefix sums of level-k values within each row;
        # level-(k+1) values are the row totals prefix[k][:, -1].
        self.prefix: list[np.ndarray] = []
        # mins[k]: level-k minima (inf = empty); mins[0] mirrors the leaves.
        self.mins: list[np.ndarray] = [np.full(size, np.inf)]
        # vals[k]: contiguous level-k node values (vals[0] is the leaves), for row gathers.
        self.vals: list[np.ndarray] = [leaves]
        n = size
        for _ in range(self.levels):
            self.prefix.append(np.zeros((n // FANOUT, FANOUT)))
            n //= FANOUT
            self.mins.append(np.full(n, np.inf))
            self.vals.append(np.zeros(n))
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute every level from the leaves (after a load or an attach)."""
        self.leaves[self.capacity :] = 0.0
        np.copyto(self.mins[0], np.where(self.leaves > 0, self.leaves, np.inf))
        self._refresh_range(0, self.capacity)

    def set_range(self, start: int, stop: int, value: float) -> None:
        """Set leaves [start, stop) (no wrap) to ``value``: the new-items path, kept cheap."""
        if stop <= start:
            return
        self.leaves[start:stop] = value
        self.mins[0][start:stop] = value if value > 0 else np.inf
        self._refresh_range(start, stop)

    def _refresh_range(self, start: int, stop: int) -> None:
        for k in range(self.levels):
            start >>= _SHIFT
            stop = ((stop - 1) >> _SHIFT) + 1
            lo, hi = start * FANOUT, stop * FANOUT
            rows = self.vals[k][lo:hi].reshape(-1, FANOUT)
            self.prefix[k][start:stop] = np.cumsum(rows, axis=1)
            self.vals[k + 1][start:stop] = self.prefix[k][start:stop, -1]
            self.mins[k + 1][start:stop] = self.mins[k][lo:hi].reshape(-1, FANOUT).min(axis=1)

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set scattered leaves; duplicates in ``index`` are fine (last write wins)."""
        idx = np.asarray(index, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        self.leaves[idx] = values
        self.mins[0][idx] = np.where(values > 0, values, np.inf)
        for k in range(self.levels):
            idx = idx >> _SHIFT
            rows = np.take(self.vals[k].reshape(-1, FANOUT), idx, axis=0) @ _UPPER
            self.prefix[k][idx] = rows
            self.vals[k + 1][idx] = rows[:, -1]
            self.mins[k + 1][idx] = _row_min(np.take(self.mins[k].reshape(-1, FANOUT), idx, 0))

    @property
    def total(self) -> float:
        return float(self.vals[-1].sum())

    @property
    def min(self) -> float:
        """Smallest non-zero leaf (inf when empty)."""
        return float(self.mins[-1].min())

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaf index whose cumulative-sum interval contains each ``mass`` in [0, total).

        A mass at or past the total (rounding) lands on the last slot of a row, which may be
        empty: callers check ``leaves[i] > 0``.
        """
        m = np.array(mass, dtype=np.float64)
        top = self.vals[-1]
        csum = np.cumsum(top)
        idx = np.searchsorted(csum, m, side="right")
        np.minimum(idx, top.shape[0] - 1, out=idx)
        m -= csum[idx] - top[idx]
        base = np.arange(m.shape[0]) * FANOUT
        for k in range(self.levels - 1, -1, -1):
            rows = np.take(self.prefix[k], idx, axis=0)
            above = rows > m[:, None]
            j = np.argmax(above, axis=1)
            # No prefix above the mass only happens through rounding: take the last child.
            j[~above[:, -1]] = FANOUT - 1
            flat = rows.reshape(-1)
            pos = base + j
            m -= np.where(j > 0, flat[pos - 1], 0.0)
            idx = (idx << _SHIFT) + j
        return idx

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified proportional sampling: one draw from each of ``batch`` equal mass slices."""
        total = self.total
        u = (np.arange(batch) + rng.random(batch)) * (total / batch)
        return self.find(u)
