"""Bit flipping, the toy goal task of the Hindsight Experience Replay paper (Andrychowicz et al.
2017, section 3.1).

The state is ``n`` bits, an action flips one of them, and the reward is 0 when the state equals
the goal and -1 otherwise. With a random goal per episode and ``n`` beyond ~13 an agent without
HER essentially never sees a 0 reward, which is what makes it a clean test of relabelling.

Importing this module registers ``wheeler2/BitFlip-v0`` with gymnasium::

    import wheeler2.envs.bitflip, gymnasium
    env = gymnasium.make("wheeler2/BitFlip-v0", n_bits=15)

No gymnasium-robotics dependency: ``GoalEnv`` is only a convention (dict observation with
``observation`` / ``achieved_goal`` / ``desired_goal`` plus ``compute_reward``), followed here by
hand.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

ENV_ID = "wheeler2/BitFlip-v0"


class BitFlipEnv(gymnasium.Env):
    """``n_bits`` bits; observation and achieved goal are the bits, the goal is a target pattern.

    * ``fixed_goal=True`` makes the goal all ones (Stable-Baselines3's variant, easier);
      the default draws a new goal every episode (the HER paper's task).
    * ``terminate_on_success=False`` keeps the episode running after the goal is hit (then only
      truncation ends it), for algorithms that prefer fixed-length episodes.
    * ``max_steps`` defaults to ``n_bits``: every goal is reachable in at most ``n_bits`` flips.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        n_bits: int = 10,
        max_steps: int | None = None,
        fixed_goal: bool = False,
        terminate_on_success: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if n_bits < 1:
            raise ValueError(f"n_bits must be >= 1, got {n_bits}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.n_bits = int(n_bits)
        self.max_steps = int(max_steps) if max_steps is not None else self.n_bits
        self.fixed_goal = fixed_goal
        self.terminate_on_success = terminate_on_success
        self.render_mode = render_mode

        bits = spaces.Box(0.0, 1.0, shape=(self.n_bits,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = spaces.Discrete(self.n_bits)

        self._state = np.zeros(self.n_bits, dtype=np.float32)
        self._goal = np.ones(self.n_bits, dtype=np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        # Copies: callers (replay buffers) keep these arrays while the env mutates its state.
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if self.fixed_goal:
            self._goal = np.ones(self.n_bits, dtype=np.float32)
        else:
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        # An episode that starts solved has no transition to learn from and reset() cannot
        # report success, so such a start is drawn again.
        while True:
            self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
            if not np.array_equal(self._state, self._goal):
                break
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(
        self, action: int | np.integer | np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        a = int(np.asarray(action).reshape(()))
        if not 0 <= a < self.n_bits:
            raise ValueError(f"action must be in [0, {self.n_bits}), got {a}")
        self._state[a] = 1.0 - self._state[a]
        self._steps += 1
        obs = self._obs()
        success = bool(np.array_equal(self._state, self._goal))
        info = {"is_success": success}
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], info))
        terminated = success and self.terminate_on_success
        truncated = not terminated and self._steps >= self.max_steps
        return obs, reward, terminated, truncated, info

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """0 where the goal is reached, else -1; for one goal ``[n]`` or a batch ``[B, n]``.

        HER relabelling calls this with whole batches, so it must not look at ``info``.
        """
        miss = np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1)
        return -miss.astype(np.float32)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        state = "".join(str(int(b)) for b in self._state)
        goal = "".join(str(int(b)) for b in self._goal)
        return f"state {state}  goal {goal}  step {self._steps}/{self.max_steps}"


def register() -> None:
    """Register ``wheeler2/BitFlip-v0``; idempotent, so re-imports and reloads are harmless."""
    if ENV_ID not in gymnasium.registry:
        # No TimeLimit wrapper: the horizon depends on n_bits and the env truncates by itself.
        gymnasium.register(
            id=ENV_ID, entry_point="wheeler2.envs.bitflip:BitFlipEnv", kwargs={"n_bits": 10}
        )


register()
