"""Compiled kernels of the priority tree; ``sumtree.SumMinTree`` is their only caller.

Imported lazily, by the process that samples: producers and members that only write never load
numba. Every kernel works in place on the arrays it is handed (the leaves may be a shared-memory
mapping) and releases the GIL, so a prefetch thread can sample while another thread computes.
Compiled code is cached on disk (``cache=True``): the first process to call a kernel compiles it
(about 2 s for all of them), later processes load it in milliseconds.

Arrays (see ``SumMinTree`` for how they are laid out):

* ``leaves`` [size] float64: ``priority ** alpha`` per slot, 0 = empty;
* ``prefix`` [rows, F] float64: each row holds the inclusive prefix sums of its F children;
* ``nsum``, ``nmin`` [nodes] float64: a row's total and smallest positive child, per level, each
  level padded to a multiple of F (0 and inf) so that its parent row always has F children;
* ``roff``, ``noff`` [levels] int64: where a level starts in ``prefix`` and in ``nsum``/``nmin``;
* ``stamp`` [rows + 1] int64: scratch marks for de-duplicating rows within one update, the
  last entry is the generation counter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import numba
except ImportError as exc:  # pragma: no cover - numba is an install requirement
    raise ImportError(
        "wheeler2's replay needs numba to sample: the priority tree and the HER goal choice "
        "are compiled (pip install 'numba==0.68.1', or reinstall wheeler2 with `make setup`)"
    ) from exc

if getattr(numba.config, "DISABLE_JIT", False):  # pragma: no cover - numba's debug switch
    raise ImportError(
        "NUMBA_DISABLE_JIT is set: the priority tree and the HER goal choice would run as "
        "pure Python, thousands of times slower; unset it to sample a wheeler2 replay"
    )

FANOUT = 32
SHIFT = 5  # log2(FANOUT)

_JIT: dict[str, Any] = {"nogil": True, "cache": True, "boundscheck": False}


@numba.njit(**_JIT)
def _refresh_row(leaves, prefix, nsum, nmin, roff, noff, k, r):  # noqa: ANN001, ANN202
    """Recompute row ``r`` of level ``k`` (prefix sums, total, minimum) from its children."""
    row = roff[k] + r
    acc = 0.0
    low = np.inf
    if k == 0:
        lo = r * FANOUT
        n = min(FANOUT, leaves.shape[0] - lo)
        for c in range(n):
            v = leaves[lo + c]
            acc += v
            prefix[row, c] = acc
            w = v if v > 0.0 else np.inf
            low = min(low, w)
        for c in range(n, FANOUT):  # a ragged last row: padding repeats the total
            prefix[row, c] = acc
    else:
        base = noff[k - 1] + r * FANOUT
        for c in range(FANOUT):
            acc += nsum[base + c]
            prefix[row, c] = acc
            low = min(low, nmin[base + c])
    nsum[noff[k] + r] = acc
    nmin[noff[k] + r] = low


@numba.njit(**_JIT)
def refresh_range(leaves, prefix, nsum, nmin, roff, noff, start, stop):  # noqa: ANN001, ANN202
    """Recompute every row above leaves [start, stop) (stop > start), level by level."""
    levels = roff.shape[0]
    lo = start >> SHIFT
    hi = ((stop - 1) >> SHIFT) + 1
    for k in range(levels):
        for r in range(lo, hi):
            _refresh_row(leaves, prefix, nsum, nmin, roff, noff, k, r)
        lo >>= SHIFT
        hi = ((hi - 1) >> SHIFT) + 1


@numba.njit(**_JIT)
def update(leaves, prefix, nsum, nmin, roff, noff, stamp, capacity, idx, vals):  # noqa: ANN001, ANN202
    """Set ``leaves[idx] = vals`` in order (a repeated index: the last write wins), then
    recompute each touched row once per level. Returns the first index outside
    [0, capacity) without writing anything, or -1."""
    n = idx.shape[0]
    for i in range(n):
        if idx[i] < 0 or idx[i] >= capacity:
            return i
    for i in range(n):
        leaves[idx[i]] = vals[i]
    gen = stamp[-1] + 1
    stamp[-1] = gen
    rows = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        r = idx[i] >> SHIFT
        if stamp[roff[0] + r] != gen:
            stamp[roff[0] + r] = gen
            rows[m] = r
            m += 1
    levels = roff.shape[0]
    sink = 0.0
    for k in range(levels):
        if k == 0:
            for i in range(m):
                lo = rows[i] * FANOUT
                for c in range(0, min(FANOUT, leaves.shape[0] - lo), 8):
                    sink += leaves[lo + c]
        sink += _touch_rows(prefix, roff[k], rows, m)
        for i in range(m):
            _refresh_row(leaves, prefix, nsum, nmin, roff, noff, k, rows[i])
        if k + 1 < levels:
            # Parents of this level's rows, each once (written over the list in place: the
            # write position never passes the read position).
            m2 = 0
            for i in range(m):
                r = rows[i] >> SHIFT
                if stamp[roff[k + 1] + r] != gen:
                    stamp[roff[k + 1] + r] = gen
                    rows[m2] = r
                    m2 += 1
            m = m2
    if sink == -1.0:  # never; keeps the loads of the touch passes alive
        return -2
    return -1


@numba.njit(**_JIT)
def _touch_rows(prefix, base, rows, n):  # noqa: ANN001, ANN202
    """Load one word of every cache line of ``n`` rows before they are used.

    At capacity 1M the level-0 rows (8 MB) and leaves (8 MB) miss the cache on every access; a
    loop that does nothing but load lets the CPU keep dozens of those misses in flight, where the
    real work (a count or a prefix sum per row) would wait for them one row at a time."""
    acc = 0.0
    for i in range(n):
        row = base + rows[i]
        for c in range(0, FANOUT, 8):  # 8 float64 to a 64-byte line
            acc += prefix[row, c]
        acc += prefix[row, FANOUT - 1]
    return acc


@numba.njit(**_JIT)
def find(leaves, prefix, nsum, roff, noff, mass, out):  # noqa: ANN001, ANN202
    """The leaf whose cumulative-mass interval holds each ``mass`` (``mass`` is consumed): in
    each row, the first child whose inclusive prefix sum exceeds the mass left, i.e. numpy's
    ``searchsorted(cumsum(leaves), mass, side="right")``. The batch descends level by level so
    that its row reads overlap."""
    b = mass.shape[0]
    for i in range(b):
        out[i] = 0
    sink = 0.0
    for k in range(roff.shape[0] - 1, -1, -1):
        base = roff[k]
        sink += _touch_rows(prefix, base, out, b)
        for i in range(b):
            r = out[i]
            m = mass[i]
            row = base + r
            j = 0
            for c in range(FANOUT):
                j += prefix[row, c] <= m
            if j == FANOUT:
                # At or past the row's total (rounding): its last non-empty child, and the last
                # non-empty one below that (an infinite mass clamps at every level).
                j = FANOUT - 1
                if k == 0:
                    lo = r * FANOUT
                    while j > 0 and (lo + j >= leaves.shape[0] or leaves[lo + j] <= 0.0):
                        j -= 1
                else:
                    cb = noff[k - 1] + r * FANOUT
                    while j > 0 and nsum[cb + j] <= 0.0:
                        j -= 1
                mass[i] = np.inf
            elif j > 0:
                mass[i] = m - prefix[row, j - 1]
            out[i] = r * FANOUT + j
    size = leaves.shape[0]
    for i in range(b):
        # Only reachable through a torn read (the caller must not update the tree while it
        # descends); keeps every later leaves[slot] read inside the array whatever happens.
        if out[i] >= size:
            out[i] = size - 1
    if sink == -1.0:  # never (sums are >= 0); keeps the loads of _touch_rows alive
        out[0] = 0


@numba.njit(**_JIT)
def draw(  # noqa: ANN201
    leaves,
    prefix,
    nsum,
    nmin,
    roff,
    noff,
    u,
    beta,
    slot,
    weight,
    total,
    capacity,  # noqa: ANN001
):
    """Stratified proportional sample of ``u.shape[0]`` slots (one per equal mass slice, ``u``
    uniform in [0, 1), consumed) and their importance weights ``(p / p_min) ** -beta``
    (float32). Returns how many drawn slots are empty (only when the tree is empty).

    With ``total > 0``, ``slot`` receives instead the absolute insert number each slot holds in
    a ring of ``capacity`` slots that has seen ``total`` inserts (the newest ``capacity``)."""
    top = noff[noff.shape[0] - 1]
    mass = nsum[top]
    low = nmin[top]
    b = u.shape[0]
    step = mass / b
    for i in range(b):
        u[i] = (i + u[i]) * step
    find(leaves, prefix, nsum, roff, noff, u, slot)
    sink = 0.0
    for i in range(b):
        sink += leaves[slot[i]]
    empty = 0
    for i in range(b):
        p = leaves[slot[i]]
        if p > 0.0:
            weight[i] = (p / low) ** -beta
        else:
            weight[i] = 0.0
            empty += 1
    if total > 0:
        newest = total - 1
        base = newest % capacity  # the slot of the newest number
        for i in range(b):
            d = base - slot[i]
            if d < 0:
                d += capacity
            slot[i] = newest - d
    if sink == -1.0:
        empty = -1
    return empty


@numba.njit(**_JIT)
def set_priorities(
    leaves, prefix, nsum, nmin, roff, noff, stamp, capacity, idx, td, eps, alpha, fallback, total
):  # noqa: ANN001, ANN202
    """Leaves ``(|td| + eps) ** alpha`` at ``idx``; a non-finite ``td`` gets ``fallback`` (the
    running max priority) instead. Returns the largest raw priority written (0 if none), or
    -1 for an index outside [0, capacity) (then nothing is written).

    With ``total >= 0``, ``idx`` holds absolute insert numbers of a ring of ``capacity`` slots
    that has seen ``total`` inserts: numbers older than the last ``capacity`` are skipped (their
    slots hold newer items now) and the others are mapped to their slots."""
    n = idx.shape[0]
    slots = np.empty(n, np.int64)
    vals = np.empty(n, np.float64)
    top = 0.0
    m = 0
    if total >= 0:
        oldest = max(0, total - capacity)
        first = oldest % capacity  # the slot of the oldest stored number
    for i in range(n):
        s = idx[i]
        if total >= 0:
            if s < oldest:
                continue
            if s < total:
                s = first + (s - oldest)  # s - oldest < capacity: no division
                if s >= capacity:
                    s -= capacity
            else:
                s %= capacity
        p = abs(td[i]) + eps
        if not np.isfinite(p):
            p = fallback
        top = max(top, p)
        slots[m] = s
        vals[m] = p**alpha
        m += 1
    if update(leaves, prefix, nsum, nmin, roff, noff, stamp, capacity, slots[:m], vals[:m]) >= 0:
        return -1.0
    return top
