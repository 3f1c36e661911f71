"""The velocity-masked ids (envs/novel.py): the full env's observation without its velocity
entries, step by step under one seed, with the full env's spaces, rewards and time limit."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import wheeler2.envs.novel  # noqa: F401 - registers the ids
from wheeler2.envs.novel import NOVEL_IDS

from wheeler2 import registry
from wheeler2.config.model import EnvConfig

CASES = [
    ("PendulumNoVel-v1", "Pendulum-v1", [0, 1], 230),
    ("CartPoleNoVel-v1", "CartPole-v1", [0, 2], 300),
    ("MountainCarContinuousNoVel-v0", "MountainCarContinuous-v0", [0], 1100),
]


@pytest.mark.parametrize(("novel_id", "full_id", "keep", "steps"), CASES)
def test_masked_obs_is_the_full_obs_without_velocity(novel_id, full_id, keep, steps):
    assert NOVEL_IDS[novel_id] == (full_id, tuple(keep))
    novel, full = gymnasium.make(novel_id), gymnasium.make(full_id)
    assert novel.spec.max_episode_steps == full.spec.max_episode_steps
    assert novel.action_space == full.action_space
    box = full.observation_space
    assert novel.observation_space == gymnasium.spaces.Box(box.low[keep], box.high[keep])
    a_rng = np.random.default_rng(0)
    obs_n, _ = novel.reset(seed=3)
    obs_f, _ = full.reset(seed=3)
    np.testing.assert_array_equal(obs_n, obs_f[keep])
    ends = 0
    for _ in range(steps):
        if isinstance(full.action_space, gymnasium.spaces.Discrete):
            action = int(a_rng.integers(full.action_space.n))
        else:
            action = a_rng.uniform(-1, 1, full.action_space.shape).astype(np.float32)
        obs_n, r_n, term_n, trunc_n, _ = novel.step(action)
        obs_f, r_f, term_f, trunc_f, _ = full.step(action)
        np.testing.assert_array_equal(obs_n, obs_f[keep])
        assert (r_n, term_n, trunc_n) == (r_f, term_f, trunc_f)
        assert obs_n.shape == novel.observation_space.shape
        if term_f or trunc_f:
            ends += 1
            obs_n, _ = novel.reset(seed=10 + ends)
            obs_f, _ = full.reset(seed=10 + ends)
            np.testing.assert_array_equal(obs_n, obs_f[keep])
    assert ends >= 1  # every case runs past at least one episode end (the time limit included)


def test_time_limit_is_the_wrapped_envs_once():
    env = gymnasium.make("PendulumNoVel-v1")
    env.reset(seed=0)
    for t in range(1, 201):
        _, _, term, trunc, _ = env.step(np.zeros(1, np.float32))
        assert not term and trunc == (t == 200)


def test_ids_by_name_through_the_registry():
    registry.check_env_id("CartPoleNoVel-v1")
    env = registry.make_env(EnvConfig(id="PendulumNoVel-v1"), 2, 0)
    try:
        assert (env.info.obs_dim, env.info.act_dim, env.info.discrete) == (2, 1, False)
        assert env.info.max_episode_steps == 200
        assert env.reset(seed=0).obs.shape == (2, 2)
    finally:
        env.close()
