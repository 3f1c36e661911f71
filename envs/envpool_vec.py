"""envpool adapter (``[env] vector = "envpool"``): the copies of a gymnasium id stepped by
envpool's C++ thread pool, as a :class:`wheeler2.env.VecEnv`.

envpool resets a finished copy on the *next* step (that step's action is ignored and its reward
is 0). The engine's contract resets in the same step: ``final_obs`` is the true last observation
and ``obs`` the next episode's first. So the copies that ended are reset at once with
``reset(env_id=...)``, and the next step is a real step for every copy: no transition is lost
and none is made up.

envpool seeds its pool when it is built, not on ``reset``; a seeded ``reset`` (each eval does
one) therefore builds a new pool, so that the same seed always gives the same episodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from wheeler2.envs.spaces import (
    box_bounds,
    channels_last,
    image_bytes,
    image_shape,
    scale_box_action,
)

from wheeler2.env import EnvInfo, EnvReset, EnvStep

# Per-copy keys of envpool's info that say nothing about the transition.
_POOL_KEYS = frozenset({"env_id", "players"})


def _envpool() -> Any:
    try:
        import envpool
    except ImportError as exc:
        raise ImportError(
            "[env] vector = \"envpool\" needs envpool: pip install 'wheeler2[envpool]' "
            "(`make setup` installs it)"
        ) from exc
    return envpool


class EnvpoolVecEnv:
    """``num_envs`` copies of ``env_id`` in one envpool pool, stepped together."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> None:
        envpool = _envpool()
        if env_id not in envpool.list_all_envs():
            raise ValueError(f"{env_id}: not an envpool id (envpool.list_all_envs() lists them)")
        self.env_id = env_id
        self.num_envs = num_envs
        self._kwargs = dict(kwargs)
        self._make = envpool.make_gymnasium
        self._pool = self._build(seed)
        self._seed = seed
        self._fresh = True  # built with self._seed and never stepped
        obs_space, act_space = self._pool.observation_space, self._pool.action_space
        if not isinstance(obs_space, spaces.Box):
            raise TypeError(f"{env_id}: envpool observation space {obs_space!r}: expected a Box")
        if isinstance(act_space, spaces.Box):
            self.discrete = False
            act_dim = int(np.prod(act_space.shape))
            self._low, self._high = box_bounds(env_id, act_space)
        elif isinstance(act_space, spaces.Discrete):
            self.discrete = True
            act_dim = int(act_space.n)
        else:
            raise TypeError(
                f"{env_id}: unsupported action space {act_space!r}: expected Box or Discrete"
            )
        config = getattr(self._pool.spec, "config", None)
        # Atari ids give uint8 frames: image rows as every adapter gives them (envs/spaces.py),
        # so that the encoders read and scale them, not an MLP on float32 0..255 columns.
        self._image = image_shape(obs_space)
        self._hwc = bool(self._image) and channels_last(tuple(obs_space.shape))
        self._bool = obs_space.dtype == np.bool_
        self.info = EnvInfo(
            obs_dim=int(np.prod(obs_space.shape)),
            act_dim=act_dim,
            discrete=self.discrete,
            max_episode_steps=getattr(config, "max_episode_steps", None),
            obs_shape=self._image,
            stack=_gray_stack(self._image, config),
        )
        self.observation_space = obs_space
        self.action_space = act_space

    def _build(self, seed: int) -> Any:
        try:
            return self._make(
                self.env_id,
                num_envs=self.num_envs,
                batch_size=self.num_envs,
                seed=seed,
                **self._kwargs,
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{self.env_id}: envpool could not build it: {exc}") from exc

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        if not self._image:
            return np.asarray(obs, dtype=np.float32).reshape(obs.shape[0], -1)
        img = image_bytes(np.asarray(obs), self._hwc, self._bool)
        return np.ascontiguousarray(img, dtype=np.uint8).reshape(len(img), -1)

    def reset(self, seed: int | None = None) -> EnvReset:
        if not self._fresh or (seed is not None and seed != self._seed):
            self.close()
            self._seed = self._seed if seed is None else seed
            self._pool = self._build(self._seed)
        self._fresh = False
        obs, _ = self._pool.reset()
        return EnvReset(obs=self._flat(obs))

    def step(self, action: np.ndarray) -> EnvStep:
        if self.discrete:
            act = np.asarray(action).reshape(self.num_envs).astype(np.int32)
        else:
            act = scale_box_action(action, self._low, self._high)
        raw, reward, term, trunc, info = self._pool.step(act)
        final_obs = self._flat(raw)
        terminated = np.asarray(term, bool)
        truncated = np.asarray(trunc, bool) & ~terminated
        infos = _per_copy(info, self.num_envs)
        obs = final_obs
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            first, reset_info = self._pool.reset(ended.astype(np.int32))
            obs = final_obs.copy()
            obs[np.asarray(reset_info["env_id"])] = self._flat(first)
        return EnvStep(
            obs=obs,
            reward=np.asarray(reward, np.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
        )

    def close(self) -> None:
        close = getattr(self._pool, "close", None)
        if close is not None:
            close()


def _per_copy(info: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """envpool's info (a dict of [N] arrays) as the contract's one dict per copy, so that a
    reward head reads ``info["reward_run"]`` as it would from gymnasium."""
    keys = [k for k in info if k not in _POOL_KEYS]
    return [{k: info[k][i] for k in keys} for i in range(n)]


def _gray_stack(image: tuple[int, ...], config: Any) -> int:
    """Frames per observation of envpool's gray Atari stack (``stack_num`` one-channel frames
    along the first axis), so the image replay stores each frame once, not the whole stack per
    transition (4x the bytes). Colour stacks (3 channels a frame) and other envs: 1."""
    k = int(getattr(config, "stack_num", 1) or 1)
    return k if k > 1 and len(image) == 3 and image[0] == k else 1
