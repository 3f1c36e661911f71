"""Compiled HER goal choice; ``her.choose_goals`` is its only caller.

Imported lazily by the sampling process, like the tree's kernels (``treejit``, which also
raises the clear ImportError when numba or its JIT is missing). One pass over the batch picks
each relabelled row's goal step by the strategy, checks it is stored, and copies that step's
next achieved goal over the row's desired goal in the batch's packed gather: about fifteen
numpy calls of the vectorized version, each with its temporaries, become one.
"""

from __future__ import annotations

import numpy as np

# numba through treejit, whose ImportError says what is missing when numba (or its JIT) is not.
from .treejit import _JIT, numba

FUTURE, FINAL, EPISODE, RANDOM = 0, 1, 2, 3
STRATEGIES = {"future": FUTURE, "final": FINAL, "episode": EPISODE, "random": RANDOM}


@numba.njit(**_JIT)
def choose(  # noqa: ANN201
    strategy,  # noqa: ANN001
    fraction,  # noqa: ANN001
    u,  # noqa: ANN001
    j0,  # noqa: ANN001
    slot0,  # noqa: ANN001
    total,  # noqa: ANN001
    ep_end,  # noqa: ANN001
    step,  # noqa: ANN001
    abs_,  # noqa: ANN001
    packed,  # noqa: ANN001
    src,  # noqa: ANN001
    out,  # noqa: ANN001
    dst,  # noqa: ANN001
    width,  # noqa: ANN001
    rows,  # noqa: ANN001
):
    """Rows ``i`` with ``u[i] < fraction`` get a goal step ``g`` drawn with ``u[B + i]`` (``u``
    holds 2 B uniforms in [0, 1)); where ``g`` is stored,
    ``out[i, dst:dst + width] = packed[g % c, src:src + width]`` and ``i`` is appended to
    ``rows`` (as long as ``j0``). Returns (how many rows were relabelled, a number to ignore).

    Separate passes, so that the random reads (``ep_end`` of the sampled steps, then the goal
    steps' packed rows) of different rows are in flight together instead of one after
    another: the first computes every goal step's slot, the last checks and copies."""
    c = packed.shape[0]
    oldest = max(0, total - c)
    m = 0
    b = j0.shape[0]
    for i in range(b):
        rows[m] = i
        m += u[i] < fraction
    goal = np.empty(m, np.int64)
    slot = np.empty(m, np.int64)
    for k in range(m):
        i = rows[k]
        x = u[b + i]
        j = j0[i]
        if strategy == RANDOM:
            g = oldest + np.int64(x * (total - oldest))
            s = g % c
        else:
            end = ep_end[slot0[i]]
            if strategy == FUTURE:
                g = j + np.int64(x * (end - j + 1))
            elif strategy == FINAL:
                g = end
            else:
                start = max(j - step[slot0[i]], oldest)
                g = start + np.int64(x * (end - start + 1))
            # g - j lies within (-c, c) whenever g is usable: no division for the slot.
            s = slot0[i] + (g - j)
            if s >= c:
                s -= c
            elif s < 0:
                s += c
            if end < j:
                # ep_end < j only for a step written without its episode's end (never by a
                # HER writer); the range test below is the contiguity argument of her.py.
                g = -1
        goal[k] = g
        slot[k] = s
    # Load each goal row once before copying: a loop of bare loads keeps many of these misses
    # (the packed rows span the whole ring) in flight; the copy loop alone waits for each.
    sink = 0.0
    for k in range(m):
        sink += packed[slot[k], src]
    n = 0
    for k in range(m):
        g = goal[k]
        s = slot[k]
        if g < oldest or g >= total or s < 0 or s >= c:
            continue
        # A random goal step is in another episode: it may be a dead writer's hole.
        if strategy == RANDOM and abs_[s] != g:
            continue
        i = rows[k]
        for d in range(width):
            out[i, dst + d] = packed[s, src + d]
        rows[n] = i
        n += 1
    return n, sink  # the sink keeps the loads above (the caller ignores it)
