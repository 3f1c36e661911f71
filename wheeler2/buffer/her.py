"""Hindsight experience replay at sample time.

A fraction k / (k + 1) of the batch gets a new desired goal: the goal achieved after the
step itself or a later step of the same episode, uniformly (future: the achieved goals of
states t + 1 .. T, as in the paper and SB3), its last step (final), any of its steps (episode)
or any stored step (random). Producers insert whole episodes, each as part of one block under
one lock hold, so an episode is a contiguous run of absolute numbers ``[j - step, ep_end]`` that
becomes visible all at once: goals are found by offset, and an offset inside
``[max(j - step, oldest stored), ep_end]`` is stored and of the same episode whenever ``j`` is,
with no further lookup (that saves three random gathers per batch, a third of HER's cost).
A step that is no longer stored is never used.
Rewards of every head and every step of the n-step window are recomputed by ``relabel`` for
the new goal before returns are folded.

Nothing here loops over rows in Python: the goal choice is one compiled pass over the batch
(``herjit``, numba, imported by the sampling process only), and ``relabel`` is called once per
sample with every relabelled row at once ([m, ...] arrays, possibly column views of the
batch's packed gather), as gymnasium-robotics' vectorized ``compute_reward`` expects.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np

from .config import HerConfig
from .storage import Storage

Relabel = Callable[..., np.ndarray]
# HER with terminate_on_goal: (next achieved goal, goal) -> [B] bool, the goal was reached.
Reached = Callable[[np.ndarray, np.ndarray], np.ndarray]


def choose_goals(
    storage: Storage,
    her: HerConfig,
    j0: np.ndarray,
    slot0: np.ndarray,
    total: int,
    rng: np.random.Generator,
    rows0: np.ndarray,
) -> np.ndarray:
    """Indices of the relabelled rows; lock held, ``j0`` (in slots ``slot0``) validated.

    ``rows0`` is the batch's private copy of its packed rows ([B, width], see
    ``storage.packed_columns``): the desired-goal columns of the relabelled rows are overwritten
    there with their new goals, in one compiled pass (``herjit``) with no per-row Python."""
    b = j0.shape[0]
    kernels = _kernels()
    a = storage.arrays
    cols = storage.columns
    src, src_hi = cols["next_achieved_goal"]
    rows = np.empty(b, dtype=np.int64)  # the kernel compacts into it: room for every row
    n, _ = kernels.choose(
        kernels.STRATEGIES[her.strategy],
        her.fraction,
        rng.random(2 * b),  # which rows, then where in the episode
        j0,
        slot0,
        total,
        a["ep_end"],
        a["step"],
        a["abs"],
        storage.packed,
        src,
        rows0,
        cols["desired_goal"][0],
        src_hi - src,
        rows,
    )
    return rows[:n]


_HERJIT: ModuleType | None = None


def _kernels() -> ModuleType:
    """The compiled goal choice (imports numba on first use, like the priority tree)."""
    global _HERJIT
    if _HERJIT is None:
        from . import herjit

        _HERJIT = herjit
    return _HERJIT


def call_relabel(
    relabel_fn: Relabel,
    obs: np.ndarray,
    action: np.ndarray,
    next_obs: np.ndarray,
    next_achieved_goal: np.ndarray,
    goal: np.ndarray,
    heads: int,
) -> np.ndarray:
    """``relabel_fn`` on m rows, checked and shaped [m, heads] float32."""
    out = relabel_fn(obs, _action(action), next_obs, next_achieved_goal, goal)
    out = np.asarray(out, dtype=np.float32).reshape(obs.shape[0], -1)
    if out.shape[1] != heads:
        raise ValueError(f"relabel returned {out.shape[1]} reward heads, expected {heads}")
    return out


def relabel_rewards(
    relabel_fn: Relabel,
    reward: np.ndarray,
    alive: np.ndarray,
    rows: np.ndarray,
    goal: np.ndarray,
    extra: dict[str, np.ndarray],
) -> np.ndarray:
    """Replace ``reward`` [n, B, H] of the relabelled ``rows`` by ``relabel_fn`` for their new
    goal, at every step of their windows."""
    mask = np.zeros_like(alive)
    mask[:, rows] = alive[:, rows]
    if not mask.any():
        return reward
    k_idx, b_idx = np.nonzero(mask)
    out = call_relabel(
        relabel_fn,
        extra["obs"][k_idx, b_idx],
        extra["action"][k_idx, b_idx],
        extra["next_obs"][k_idx, b_idx],
        extra["next_achieved_goal"][k_idx, b_idx],
        goal[b_idx],
        reward.shape[2],
    )
    reward = reward.copy()
    reward[k_idx, b_idx] = out
    return reward


def _action(a: np.ndarray) -> np.ndarray:
    # Discrete actions are stored [C] and gathered as [m, 1]; hand them back flat.
    return a[:, 0] if a.dtype == np.int64 and a.ndim == 2 and a.shape[1] == 1 else a
