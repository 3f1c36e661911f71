"""Hindsight experience replay at sample time.

A fraction k / (k + 1) of the batch gets a new desired goal: the goal achieved after a later
step of the same episode (future), its last step (final), any of its steps (episode) or any
stored step (random). Producers insert whole episodes when HER is on, so an episode is a
contiguous run of absolute numbers ``[j - step, ep_end]`` and goals are found by offset; a goal
step that is no longer stored is never used (the row then keeps its original goal).
Rewards of every head and every step of the n-step window are recomputed by ``relabel`` for
the new goal before returns are folded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .config import HerConfig
from .storage import Storage

Relabel = Callable[..., np.ndarray]


def choose_goals(
    storage: Storage,
    her: HerConfig,
    j0: np.ndarray,
    total: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(desired goal [B, G], relabelled mask [B]); lock held, ``j0`` already validated."""
    a = storage.arrays
    c = storage.capacity
    slot0 = j0 % c
    goal = np.take(a["desired_goal"], slot0, axis=0)
    b = j0.shape[0]
    relabel = rng.random(b) < her.fraction
    if not relabel.any():
        return goal, relabel
    jr = j0[relabel]
    end = np.take(a["ep_end"], jr % c)
    oldest = max(0, total - c)
    u = rng.random(jr.shape[0])
    if her.strategy == "future":
        g = jr + (u * (end - jr + 1)).astype(np.int64)
    elif her.strategy == "final":
        g = end
    elif her.strategy == "episode":
        start = np.maximum(jr - np.take(a["step"], jr % c), oldest)
        g = start + (u * (end - start + 1)).astype(np.int64)
    else:  # random: any stored transition
        g = oldest + (u * (total - oldest)).astype(np.int64)
    ok = (end >= jr) & storage.valid(g, total)
    if her.strategy != "random":
        ok &= np.take(a["episode"], g % c) == np.take(a["episode"], jr % c)
    rows = np.flatnonzero(relabel)
    relabel[rows[~ok]] = False
    goal[rows[ok]] = np.take(a["next_achieved_goal"], g[ok] % c, axis=0)
    return goal, relabel


def relabel_rewards(
    relabel_fn: Relabel,
    reward: np.ndarray,
    alive: np.ndarray,
    relabelled: np.ndarray,
    goal: np.ndarray,
    extra: dict[str, np.ndarray],
) -> np.ndarray:
    """Replace ``reward`` [n, B, H] of relabelled rows by ``relabel_fn`` for their new goal."""
    mask = alive & relabelled[None, :]
    if not mask.any():
        return reward
    k_idx, b_idx = np.nonzero(mask)
    out = relabel_fn(
        extra["obs"][k_idx, b_idx],
        _action(extra["action"][k_idx, b_idx]),
        extra["next_obs"][k_idx, b_idx],
        extra["next_achieved_goal"][k_idx, b_idx],
        goal[b_idx],
    )
    out = np.asarray(out, dtype=np.float32).reshape(k_idx.shape[0], -1)
    if out.shape[1] != reward.shape[2]:
        raise ValueError(
            f"relabel returned {out.shape[1]} reward heads, expected {reward.shape[2]}"
        )
    reward = reward.copy()
    reward[k_idx, b_idx] = out
    return reward


def _action(a: np.ndarray) -> np.ndarray:
    # Discrete actions are stored [C] and gathered as [m, 1]; hand them back flat.
    return a[:, 0] if a.dtype == np.int64 and a.ndim == 2 and a.shape[1] == 1 else a
