"""Hindsight experience replay at sample time.

A fraction k / (k + 1) of the batch gets a new desired goal: the goal achieved after a later
step of the same episode (future), its last step (final), any of its steps (episode) or any
stored step (random). Producers insert whole episodes, each as part of one block under one
lock hold, so an episode is a contiguous run of absolute numbers ``[j - step, ep_end]`` that
becomes visible all at once: goals are found by offset, and an offset inside
``[max(j - step, oldest stored), ep_end]`` is stored and of the same episode whenever ``j`` is,
with no further lookup (that saves three random gathers per batch, a third of HER's cost).
A step that is no longer stored is never used.
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
    goal: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(desired goal [B, G], indices of the relabelled rows); lock held, ``j0`` validated.

    ``goal`` holds the stored desired goals of ``j0`` and is overwritten where relabelled."""
    a = storage.arrays
    c = storage.capacity
    b = j0.shape[0]
    rows = np.flatnonzero(rng.random(b) < her.fraction)
    if rows.shape[0] == 0:
        return goal, rows
    jr = j0[rows]
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
    if her.strategy == "random":
        ok = storage.valid(g, total)  # another episode: it may be a dead writer's hole
    else:
        # ep_end < j only for a step written without its episode's end (never by a HER
        # writer); the range test is the contiguity argument of the module docstring.
        ok = (end >= jr) & (g >= oldest) & (g < total)
    if not ok.all():
        rows, g = rows[ok], g[ok]
    goal[rows] = storage.gather("next_achieved_goal", g % c)
    return goal, rows


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
