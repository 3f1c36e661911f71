"""FetchReach-v4 (gymnasium-robotics) as a task: the sparse goal reward, and a dense variant.

Both heads read only the goals, so HER recomputes them for relabelled goals. Importing this
module registers the gymnasium-robotics envs, so ``id = "FetchReach-v4"`` works after it; the
configs use ``"gymnasium_robotics:FetchReach-v4"``, which gymnasium imports by itself.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from wheeler2.task import Task, reward_head

try:  # the ``robotics`` extra; the task's reward functions do not need it
    import gymnasium_robotics

    gymnasium.register_envs(gymnasium_robotics)
except ImportError:  # pragma: no cover - only without the extra
    gymnasium_robotics = None

# gymnasium-robotics' Fetch tasks count a goal reached within 5 cm.
DISTANCE_THRESHOLD = 0.05


def _distance(achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)


class Reach(Task):
    """One head by default, ``reach``: 0 at the goal, -1 elsewhere (FetchReach's own reward)."""

    @reward_head(weight=1.0)
    def reach(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray,
        desired_goal: np.ndarray,
        info: Any,
    ) -> np.ndarray:
        return -(_distance(achieved_goal, desired_goal) > DISTANCE_THRESHOLD).astype(np.float32)

    def dense(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray,
        desired_goal: np.ndarray,
        info: Any,
    ) -> np.ndarray:
        """-distance to the goal; name it in a ``[[task.heads]]`` table to use it."""
        return -_distance(achieved_goal, desired_goal)

    def success(self, achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
        return _distance(achieved_goal, desired_goal) <= DISTANCE_THRESHOLD
