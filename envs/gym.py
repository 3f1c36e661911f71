"""Gymnasium adapter: ``num_envs`` copies of one env id as a :class:`wheeler2.env.VecEnv`.

The copies are stepped in this process by a plain loop: gymnasium's own vector envs merge
per-copy infos into dicts of arrays on every step, which costs more than the loop itself for the
small control envs we run.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wheeler2.env import EnvInfo, EnvReset, EnvStep

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def _is_goal_space(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict) and all(k in space.spaces for k in GOAL_KEYS)


def _flat_dim(space: spaces.Space) -> int:
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    raise TypeError(
        f"unsupported observation space {space!r}: expected Box, Discrete or MultiBinary"
    )


class _ObsFlattener:
    """Turns one copy's raw observation into a flat float32 row (one-hot for Discrete)."""

    def __init__(self, space: spaces.Space) -> None:
        self.discrete = isinstance(space, spaces.Discrete)
        self.dim = _flat_dim(space)

    def __call__(self, raw: Any, out: np.ndarray) -> None:
        if self.discrete:
            out[:] = 0.0
            out[int(raw)] = 1.0
        else:
            out[:] = np.asarray(raw, dtype=np.float32).reshape(-1)


class GymVecEnv:
    """``num_envs`` copies of ``gymnasium.make(env_id, **kwargs)`` with autoreset.

    Continuous actions arrive in ``[-1, 1]`` and are mapped linearly onto the Box bounds (clipped
    first, so an exploring policy can never send an out-of-range action to the env).
    """

    def __init__(self, env_id: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> None:
        self.env_id = env_id
        self.num_envs = num_envs
        self._seed = seed
        self.envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
        obs_space = self.envs[0].observation_space
        act_space = self.envs[0].action_space
        self.goal = _is_goal_space(obs_space)
        if self.goal:
            self._flat = _ObsFlattener(obs_space["observation"])
            goal_dim = _flat_dim(obs_space["desired_goal"])
        else:
            self._flat = _ObsFlattener(obs_space)
            goal_dim = 0
        if isinstance(act_space, spaces.Box):
            self.discrete = False
            act_dim = int(np.prod(act_space.shape))
            self._low = act_space.low.astype(np.float64).reshape(-1)
            self._high = act_space.high.astype(np.float64).reshape(-1)
            if not (np.all(np.isfinite(self._low)) and np.all(np.isfinite(self._high))):
                raise ValueError(
                    f"{env_id}: an unbounded Box action space cannot be scaled from [-1, 1]"
                )
            self._act_shape = act_space.shape
        elif isinstance(act_space, spaces.Discrete):
            self.discrete = True
            act_dim = int(act_space.n)
            self._act_start = int(act_space.start)
        else:
            raise TypeError(
                f"{env_id}: unsupported action space {act_space!r}: expected Box or Discrete"
            )
        spec = self.envs[0].spec
        self.info = EnvInfo(
            obs_dim=self._flat.dim,
            act_dim=act_dim,
            discrete=self.discrete,
            goal_dim=goal_dim,
            max_episode_steps=None if spec is None else spec.max_episode_steps,
        )
        self._obs = np.zeros((num_envs, self._flat.dim), np.float32)
        self._ag = np.zeros((num_envs, goal_dim), np.float32) if self.goal else None
        self._dg = np.zeros((num_envs, goal_dim), np.float32) if self.goal else None
        self.observation_space = obs_space
        self.action_space = act_space

    # -- helpers ---------------------------------------------------------------------------------
    def _store(
        self, i: int, raw: Any, obs: np.ndarray, ag: np.ndarray | None, dg: np.ndarray | None
    ) -> None:
        if self.goal:
            self._flat(raw["observation"], obs[i])
            ag[i] = np.asarray(raw["achieved_goal"], np.float32).reshape(-1)
            dg[i] = np.asarray(raw["desired_goal"], np.float32).reshape(-1)
        else:
            self._flat(raw, obs[i])

    def _to_env_action(self, action: np.ndarray) -> list[Any]:
        if self.discrete:
            return [int(a) + self._act_start for a in np.asarray(action).reshape(self.num_envs)]
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(self.num_envs, -1), -1.0, 1.0)
        scaled = self._low + (a + 1.0) * 0.5 * (self._high - self._low)
        return [row.reshape(self._act_shape).astype(np.float32) for row in scaled]

    # -- VecEnv ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> EnvReset:
        base = self._seed if seed is None else seed
        for i, env in enumerate(self.envs):
            raw, _ = env.reset(seed=base + i)
            env.action_space.seed(base + i)
            self._store(i, raw, self._obs, self._ag, self._dg)
        return EnvReset(
            obs=self._obs.copy(),
            achieved_goal=None if self._ag is None else self._ag.copy(),
            desired_goal=None if self._dg is None else self._dg.copy(),
        )

    def step(self, action: np.ndarray) -> EnvStep:
        n = self.num_envs
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        infos: list[dict[str, Any]] = []
        final_obs = np.empty_like(self._obs)
        final_ag = None if self._ag is None else np.empty_like(self._ag)
        final_dg = None if self._dg is None else np.empty_like(self._dg)
        for i, (env, a) in enumerate(zip(self.envs, self._to_env_action(action))):
            raw, r, term, trunc, info = env.step(a)
            reward[i] = r
            terminated[i] = term
            truncated[i] = trunc and not term
            self._store(i, raw, final_obs, final_ag, final_dg)
            if term or trunc:
                raw, _ = env.reset()
                self._store(i, raw, self._obs, self._ag, self._dg)
            else:
                self._obs[i] = final_obs[i]
                if self.goal:
                    self._ag[i] = final_ag[i]
                    self._dg[i] = final_dg[i]
            infos.append(info)
        return EnvStep(
            obs=self._obs.copy(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
            achieved_goal=None if self._ag is None else self._ag.copy(),
            desired_goal=None if self._dg is None else self._dg.copy(),
            final_achieved_goal=final_ag,
            final_desired_goal=final_dg,
        )

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """The env's own vectorized goal reward (GoalEnv.compute_reward), for HER relabelling."""
        return np.asarray(
            self.envs[0].unwrapped.compute_reward(achieved_goal, desired_goal, info), np.float32
        )

    def close(self) -> None:
        for env in self.envs:
            env.close()
