"""Bit flipping (``wheeler2/BitFlip-v0``) as a task: 0 when every bit matches the goal, else -1."""

from __future__ import annotations

from typing import Any

import numpy as np

from wheeler2.task import Task, reward_head


class BitFlip(Task):
    @reward_head(weight=1.0)
    def match(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray,
        desired_goal: np.ndarray,
        info: Any,
    ) -> np.ndarray:
        # Goals are 0/1 floats: compare rounded bits so float noise never breaks equality.
        same = np.all(np.rint(achieved_goal) == np.rint(desired_goal), axis=-1)
        return same.astype(np.float32) - 1.0

    def success(self, achieved_goal: Any, desired_goal: Any, info: Any = None) -> np.ndarray:
        return np.all(np.rint(achieved_goal) == np.rint(desired_goal), axis=-1)
