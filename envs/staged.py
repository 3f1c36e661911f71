"""``wheeler2/StagedReach-v0``: a 1-D reach task whose target moves farther out stage by stage,
the built-in env of ``[curriculum]`` (docs/envs.md, "Curriculum") and of its tests.

A point starts at 0 and moves by ``speed * action`` per step (action in [-1, 1]); the target
sits at ``+d`` or ``-d`` (drawn per episode), with ``d = (k + 1) / stages`` at stage ``k``: a
third of the way at stage 0 of 3, all the way at the last. The observation is ``[position,
target]``; each step costs the distance left, and reaching the target (within ``tolerance``)
ends the episode with ``is_success``. A new stage takes effect at each copy's next episode, so
an episode in progress keeps its target.

An optimal policy's return is about -0.2, -1.2 and -2.9 at stages 0, 1 and 2 of 3 (at the
default speed); one that stays put scores ``-d`` per step for the whole time limit (-8.3 at
stage 0 over 25 steps).

```python
import gymnasium, wheeler2.envs.staged
env = gymnasium.make("wheeler2/StagedReach-v0", stages=3)
env.unwrapped.set_curriculum_stage(2)
```
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

ENV_ID = "wheeler2/StagedReach-v0"
MAX_EPISODE_STEPS = 25


class StagedReachEnv(gymnasium.Env):
    """Reach ``±(k + 1) / stages`` from 0 at stage ``k`` (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, stages: int = 3, speed: float = 0.15, tolerance: float = 0.05) -> None:
        if stages < 1 or speed <= 0 or tolerance <= 0:
            raise ValueError(
                f"expected stages >= 1, speed > 0 and tolerance > 0, got {stages}, {speed} "
                f"and {tolerance}"
            )
        self.stages = int(stages)
        self.speed = float(speed)
        self.tolerance = float(tolerance)
        self.stage = 0
        self.observation_space = spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._x = 0.0
        self._target = self.distance

    @property
    def distance(self) -> float:
        """How far the target is at the current stage."""
        return (self.stage + 1) / self.stages

    def set_curriculum_stage(self, stage: int) -> None:
        """Stage ``stage`` from the next episode on; one this env lacks is a ValueError (which
        ``wheeler2 check`` reports against ``[curriculum] stages``)."""
        if not 0 <= int(stage) < self.stages:
            raise ValueError(
                f"stage {stage} is not one of this env's stages 0..{self.stages - 1} "
                f"(kwargs stages = {self.stages})"
            )
        self.stage = int(stage)

    def _obs(self) -> np.ndarray:
        return np.array([self._x, self._target], np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._x = 0.0
        side = 1.0 if self.np_random.random() < 0.5 else -1.0
        self._target = side * self.distance
        return self._obs(), {"stage": self.stage}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = float(np.clip(np.asarray(action, np.float64).reshape(-1)[0], -1.0, 1.0))
        self._x = float(np.clip(self._x + self.speed * a, -1.5, 1.5))
        left = abs(self._target - self._x)
        reached = left <= self.tolerance
        reward = 0.0 if reached else -left
        return self._obs(), reward, reached, False, {"is_success": reached, "stage": self.stage}


def register() -> None:
    """Register ``wheeler2/StagedReach-v0``; idempotent."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID,
            entry_point="wheeler2.envs.staged:StagedReachEnv",
            max_episode_steps=MAX_EPISODE_STEPS,
        )


register()
