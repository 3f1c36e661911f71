"""Tasks and reward heads, as the engine sees them.

A task declares reward heads; each head is a name, a weight and a vectorized function over a
batch of transitions::

    fn(obs, action, next_obs, achieved_goal, desired_goal, info) -> reward array [B]

The head ``reward = "env"`` is the environment's own reward; for goal environments it is
recomputed with the env's ``compute_reward`` when HER relabels a goal. A head's ``reward`` may
also name a method of the task class or a ``"module:function"`` anywhere on the import path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RewardFn = Callable[..., np.ndarray]


class Task:
    """Base class of user tasks (``tasks/*.py``). Subclasses add reward methods and ``success``."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def success(
        self, achieved_goal: np.ndarray | None, desired_goal: np.ndarray | None, info: Any = None
    ) -> np.ndarray | None:
        """Per-row success flags at episode end, or None when the task has no notion of it."""
        return None


@dataclass(frozen=True)
class Head:
    name: str
    weight: float
    fn: RewardFn | None  # None: the env's own reward


class RewardHeads:
    """Computes the ``[N, H]`` reward matrix of a vector step, and relabelled rewards for HER."""

    def __init__(self, heads: Sequence[Head], goal_reward: RewardFn | None = None) -> None:
        if not heads:
            raise ValueError("a task needs at least one reward head")
        self.heads = tuple(heads)
        self.names = tuple(h.name for h in heads)
        self.weights = tuple(float(h.weight) for h in heads)
        self._goal_reward = goal_reward

    def __len__(self) -> int:
        return len(self.heads)

    def compute(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
        env_reward: np.ndarray,
    ) -> np.ndarray:
        n = len(env_reward)
        out = np.empty((n, len(self.heads)), np.float32)
        for j, head in enumerate(self.heads):
            if head.fn is None:
                out[:, j] = env_reward
            else:
                out[:, j] = _checked(
                    head, head.fn(obs, action, next_obs, achieved_goal, desired_goal, info), n
                )
        return out

    def relabel(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray,
        desired_goal: np.ndarray,
    ) -> np.ndarray:
        """Rewards of every head for new desired goals (HER); the env head uses compute_reward."""
        n = len(obs)
        out = np.empty((n, len(self.heads)), np.float32)
        for j, head in enumerate(self.heads):
            if head.fn is None:
                if self._goal_reward is None:
                    raise ValueError(
                        f"reward head {head.name!r} is the env reward, which cannot be "
                        "recomputed for a new goal: the env has no compute_reward"
                    )
                out[:, j] = _checked(head, self._goal_reward(achieved_goal, desired_goal, None), n)
            else:
                out[:, j] = _checked(
                    head, head.fn(obs, action, next_obs, achieved_goal, desired_goal, None), n
                )
        return out


def _checked(head: Head, value: Any, n: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float32)
    if arr.shape != (n,):
        arr = arr.reshape(-1) if arr.size == n else arr
        if arr.shape != (n,):
            raise ValueError(
                f"reward head {head.name!r} returned shape {np.shape(value)} for a batch of "
                f"{n}; expected ({n},): one reward per transition"
            )
    return arr
