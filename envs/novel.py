"""Velocity-masked classic control tasks, the partially observed ids of the SB3 zoo (issue 15).

=====================================  ======================  ===============================
id                                     wraps                   observation kept
=====================================  ======================  ===============================
``PendulumNoVel-v1``                   ``Pendulum-v1``         cos θ, sin θ (θ̇ dropped)
``CartPoleNoVel-v1``                   ``CartPole-v1``         x, θ (ẋ and θ̇ dropped)
``MountainCarContinuousNoVel-v0``      ``MountainCarContinuous-v0``  position (velocity dropped)
=====================================  ======================  ===============================

The ids are registered in gymnasium's default namespace, under the very names the zoo uses, so
``[env] id = "PendulumNoVel-v1"`` works as written (the registry imports this module for every
plain gymnasium id; ``import envs.novel`` does it by hand). Each id is registered only where no
other package (rl_zoo3) has registered it first.

Everything but the observation is the wrapped env's own: the action space, rewards, seeding and
the time limit (the id is registered with the wrapped id's ``max_episode_steps`` and wraps the
inner env without its own ``TimeLimit``, so the horizon is applied once, by the outer spec).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

# id -> (wrapped id, indices of the observation that are kept)
NOVEL_IDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "PendulumNoVel-v1": ("Pendulum-v1", (0, 1)),
    "CartPoleNoVel-v1": ("CartPole-v1", (0, 2)),
    "MountainCarContinuousNoVel-v0": ("MountainCarContinuous-v0", (0,)),
}


class MaskVelocity(gymnasium.ObservationWrapper):
    """Keep the observation entries at ``keep`` (a flat Box observation), drop the rest."""

    def __init__(self, env: gymnasium.Env, keep: tuple[int, ...] | list[int]) -> None:
        super().__init__(env)
        box = env.observation_space
        if not isinstance(box, spaces.Box) or len(box.shape) != 1:
            raise TypeError(f"MaskVelocity needs a flat Box observation, got {box!r}")
        self.keep = np.asarray(keep, dtype=np.int64)
        self.observation_space = spaces.Box(
            low=box.low[self.keep], high=box.high[self.keep], dtype=box.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def make_novel(env_id: str, keep: tuple[int, ...] | list[int], **kwargs: Any) -> gymnasium.Env:
    """The entry point of the registered ids: ``env_id`` built without its time limit (the
    outer spec applies the same one), then masked."""
    inner = gymnasium.make(env_id, max_episode_steps=None, disable_env_checker=True, **kwargs)
    # gymnasium.make adds a TimeLimit only for a spec's max_episode_steps; drop it if present.
    while isinstance(inner, gymnasium.wrappers.TimeLimit):
        inner = inner.env
    return MaskVelocity(inner, keep)


def register() -> None:
    """Register the NoVel ids; idempotent, and a no-op for ids another package registered."""
    for novel_id, (base_id, keep) in NOVEL_IDS.items():
        if novel_id in gymnasium.registry:
            continue
        base = gymnasium.spec(base_id)
        gymnasium.register(
            id=novel_id,
            entry_point="wheeler2.envs.novel:make_novel",
            max_episode_steps=base.max_episode_steps,
            reward_threshold=base.reward_threshold,
            kwargs={"env_id": base_id, "keep": keep},
        )


register()
