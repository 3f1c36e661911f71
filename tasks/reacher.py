"""Reacher-v5 split into reward heads: how far the fingertip is from the target, and effort.

Reacher-v5's own reward is ``reward_dist + reward_ctrl`` with both weights 1, so with the
default weights the heads sum to exactly the env reward: a multi-head learner optimizes the same
objective as a single-head one, and the two can be compared on the env's return.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wheeler2.task import Task, reward_head

# Reacher-v5 observation layout: cos q (2), sin q (2), target xy (2), joint velocities (2),
# fingertip - target xy (2). Read from the end: with ``[env] stack = k`` the observation is k
# of them side by side, oldest first, and the last two entries are the newest frame's.
FINGERTIP_TO_TARGET = slice(-2, None)


class Reacher(Task):
    """Two heads: ``distance`` (-|fingertip - target|) and ``effort`` (-|a|^2)."""

    @reward_head(weight=1.0)
    def distance(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: Any,
        desired_goal: Any,
        info: Any,
    ) -> np.ndarray:
        # The env scores the state reached by the action, hence next_obs.
        return -np.linalg.norm(next_obs[:, FINGERTIP_TO_TARGET], axis=-1)

    @reward_head(weight=1.0)
    def effort(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: Any,
        desired_goal: Any,
        info: Any,
    ) -> np.ndarray:
        # Actions reach the env scaled from [-1, 1] onto Box(-1, 1): the same numbers.
        return -np.square(action).sum(-1)

    def distance_x(self, obs: Any, action: Any, next_obs: np.ndarray, *goals_info: Any) -> Any:
        """Optional finer split of ``distance`` by axis, for ``[[task.heads]]`` tables (its sum
        with ``distance_y`` is an L1 distance, not the env's L2 one)."""
        return -np.abs(next_obs[:, -2])

    def distance_y(self, obs: Any, action: Any, next_obs: np.ndarray, *goals_info: Any) -> Any:
        return -np.abs(next_obs[:, -1])

    def success(
        self, achieved_goal: Any, desired_goal: Any, info: Any = None, next_obs: Any = None
    ) -> np.ndarray | None:
        """Within 2 cm of the target (Reacher-v5 reports no success itself)."""
        if next_obs is None:
            return None
        return np.linalg.norm(next_obs[:, FINGERTIP_TO_TARGET], axis=-1) < 0.02
