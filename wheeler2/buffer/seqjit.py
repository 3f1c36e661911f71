"""Compiled walk along an episode's links for sequence replay; ``sequence`` is its only caller.

Imported lazily by the sampling process, like the tree's kernels (``treejit`` raises the clear
ImportError when numba or its JIT is missing). A numpy walk costs a dozen calls per time step,
each on a [B] vector: for 32 sequences of 60 steps that is ~700 calls, where one pass over the
[B, T] grid in compiled code is a few microseconds.
"""

from __future__ import annotations

# numba through treejit, whose ImportError says what is missing when numba (or its JIT) is not.
from .treejit import _JIT, numba


@numba.njit(**_JIT)
def walk(  # noqa: ANN201
    j0,  # noqa: ANN001
    total,  # noqa: ANN001
    capacity,  # noqa: ANN001
    next_,  # noqa: ANN001
    episode,  # noqa: ANN001
    step,  # noqa: ANN001
    abs_,  # noqa: ANN001
    terminated,  # noqa: ANN001
    truncated,  # noqa: ANN001
    slots,  # noqa: ANN001
    alive,  # noqa: ANN001
):
    """Fill ``slots`` / ``alive`` [B, T] from the stored first steps ``j0`` [B].

    Step t + 1 is taken only after a step that neither terminated nor was truncated, through a
    link to a number still stored (below ``total``, not overwritten), holding the same episode's
    next step; once a row stops, the rest of it repeats its last slot with ``alive`` False, so a
    sequence never crosses an episode boundary or the ring's write head."""
    b_n, t_n = slots.shape
    lo = total - capacity
    for b in range(b_n):
        s = j0[b] % capacity
        live = True
        slots[b, 0] = s
        alive[b, 0] = True
        for t in range(1, t_n):
            if live:
                link = next_[s]
                if terminated[s] or truncated[s] or link < 0 or link < lo or link >= total:
                    live = False
                else:
                    ns = link % capacity
                    if abs_[ns] != link or episode[ns] != episode[s] or step[ns] != step[s] + 1:
                        live = False
                    else:
                        s = ns
            slots[b, t] = s
            alive[b, t] = live
