"""`[env] vector = "envpool"`: envpool's pool behind the EnvStep contract (a copy that ends is
reset in the same step, actions scaled from [-1, 1], truncation kept apart from termination,
seeded resets repeat), the config check of the ids it covers, and a run through the engine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from wheeler2.config import ConfigError, load

envpool_vec = pytest.importorskip("wheeler2.envs.envpool_vec", reason="envpool is not installed")
ROOT = Path(__file__).resolve().parents[1]


def test_a_copy_that_ends_is_reset_in_the_same_step() -> None:
    """envpool itself resets on the next step (reward 0, action ignored): that ghost step must
    never reach the engine. CartPole pushed left always ends within a few dozen steps."""
    env = envpool_vec.EnvpoolVecEnv("CartPole-v1", {}, 3, 0)
    try:
        env.reset()
        ended = 0
        for _ in range(60):
            st = env.step(np.array([0, 0, 1]))
            done = st.terminated | st.truncated
            assert st.reward.tolist() == [1.0, 1.0, 1.0]  # every step a real one, no ghost
            assert not st.truncated.any()
            if done.any():
                ended += int(done.sum())
                x, theta = st.final_obs[done, 0], st.final_obs[done, 2]
                # The true last observation is past CartPole's bounds ...
                assert np.all((np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * math.pi / 360))
                # ... and obs is the next episode's first (uniform in +-0.05).
                assert np.all(np.abs(st.obs[done]) <= 0.05)
            np.testing.assert_array_equal(st.obs[~done], st.final_obs[~done])
            assert st.infos[0]["elapsed_step"] >= 1
        assert ended >= 3
    finally:
        env.close()


def test_box_actions_are_scaled_and_pendulums_step_is_its_own() -> None:
    """Action 0.5 in [-1, 1] is torque 1.0 on Pendulum's [-2, 2]; 3.0 is clipped to 2.0. The
    reward and the next angular velocity follow from the observation before the step."""
    env = envpool_vec.EnvpoolVecEnv("Pendulum-v1", {}, 2, 3)
    try:
        obs = env.reset().obs
        assert obs.dtype == np.float32 and obs.shape == (2, 3)
        st = env.step(np.array([[0.5], [3.0]]))
        u = np.array([1.0, 2.0])
        th = np.arctan2(obs[:, 1], obs[:, 0])
        thdot = obs[:, 2].astype(np.float64)
        expected = -(th**2 + 0.1 * thdot**2 + 0.001 * u**2)
        np.testing.assert_allclose(st.reward, expected, rtol=1e-5, atol=1e-5)
        # g = 10, m = l = 1, dt = 0.05 (gymnasium's Pendulum-v1 defaults).
        new_thdot = np.clip(thdot + (3 * 10.0 / 2 * np.sin(th) + 3.0 * u) * 0.05, -8, 8)
        np.testing.assert_allclose(st.final_obs[:, 2], new_thdot, rtol=1e-5, atol=1e-5)
    finally:
        env.close()


def test_the_time_limit_truncates_and_resets() -> None:
    env = envpool_vec.EnvpoolVecEnv("Pendulum-v1", {}, 2, 0)
    try:
        assert env.info.max_episode_steps == 200
        env.reset()
        for t in range(1, 201):
            st = env.step(np.zeros((2, 1)))
            assert st.truncated.all() == (t == 200)
            assert not st.terminated.any()
        assert not np.any(np.all(st.obs == st.final_obs, axis=1))
        assert env.step(np.zeros((2, 1))).infos[0]["elapsed_step"] == 1
    finally:
        env.close()


def test_a_seeded_reset_repeats_its_episodes() -> None:
    env = envpool_vec.EnvpoolVecEnv("Pendulum-v1", {}, 2, 0)
    other = envpool_vec.EnvpoolVecEnv("Pendulum-v1", {}, 2, 5)
    try:
        first = env.reset(seed=5).obs
        env.step(np.zeros((2, 1)))
        np.testing.assert_array_equal(env.reset(seed=5).obs, first)
        np.testing.assert_array_equal(other.reset().obs, first)
        assert not np.array_equal(env.reset(seed=6).obs, first)
    finally:
        env.close()
        other.close()


def test_atari_stacks_reach_the_image_replay_as_single_frames() -> None:
    """envpool's Atari observation is 4 gray frames: the adapter says so (stack 4), so the
    image replay stores each frame once, not the whole stack per transition (4x the bytes),
    and every stored row still reads back as it was inserted, across episode ends."""
    from wheeler2.buffer import Layout, Replay, ReplayConfig

    env = envpool_vec.EnvpoolVecEnv("Pong-v5", {"max_episode_steps": 60}, 2, 0)
    info = env.info
    assert info.stack == 4 and info.frame_shape == (1, 84, 84)
    layout = Layout(info.obs_dim, info.act_dim, True, frame_shape=info.frame_shape, stack=4)
    cfg = ReplayConfig(capacity=256, batch_size=32, min_size=1, updates_per_insert=0)
    rng = np.random.default_rng(0)
    inserted = set()
    try:
        with Replay.create(layout, cfg, gamma=0.99) as replay:
            writer = replay.writer(num_envs=2)
            obs = env.reset().obs
            for _ in range(150):  # two 60-step episodes and more, per copy
                action = rng.integers(0, 6, 2)
                st = env.step(action)
                writer.add(
                    obs, action, st.reward[:, None], st.final_obs, st.terminated, st.truncated
                )
                inserted |= {o.tobytes() + n.tobytes() for o, n in zip(obs, st.final_obs)}
                obs = st.obs
            writer.flush()
            storage = replay.storage
            slots = np.arange(cfg.capacity)
            stored = zip(storage.gather("obs", slots), storage.gather("next_obs", slots))
            assert all(o.tobytes() + n.tobytes() in inserted for o, n in stored)
            frame_bytes = 84 * 84
            assert storage.frames.nbytes / cfg.capacity < 1.3 * frame_bytes
    finally:
        env.close()


def test_load_policy_takes_envpools_own_stacks_whole() -> None:
    """The engine does not stack an envpool Atari observation ([env] stack stays 1): a policy
    takes the pool's (4, 84, 84) as one observation, not as four frames to stack again."""
    from types import SimpleNamespace

    from wheeler2.api import LoadedRun, Policy

    env = envpool_vec.EnvpoolVecEnv("Pong-v5", {}, 1, 0)
    seen = []

    def act(flat: np.ndarray, explore: bool) -> SimpleNamespace:
        seen.append(flat)
        return SimpleNamespace(action=np.zeros(len(flat), np.int64))

    agent = SimpleNamespace(act=act, state_dim=0)
    config = load(ROOT / "cfg" / "atari_pong.toml", overrides=["env.stack=1"])
    run = LoadedRun(Path("."), config, Path("."), agent, "dqn", env.info, env.observation_space,
                    env.action_space)  # fmt: skip
    try:
        obs = env.reset().obs.reshape(1, 4, 84, 84)
        policy = Policy(run)
        assert policy(obs[0]) == 0 and policy(obs).shape == (1,)
        np.testing.assert_array_equal(seen[0], obs.reshape(1, -1))
    finally:
        env.close()


def test_config_takes_only_the_ids_envpool_builds() -> None:
    base = ROOT / "cfg" / "pendulum_ddpg.toml"
    assert load(base, overrides=['env.vector="envpool"']).env.vector == "envpool"
    with pytest.raises(ConfigError) as err:
        load(base, overrides=['env.vector="envpool"', 'env.id="CartPoleNoVel-v1"'])
    text = str(err.value)
    assert "pendulum_ddpg.toml" in text and "[env]" in text and "vector" in text, text
    assert "'CartPoleNoVel-v1' is not one of them" in text and "CartPole-v1" in text, text
    # envpool's own ids, which gymnasium's registry lacks (Atari's "Pong-v5"), are taken.
    assert load(base, overrides=['env.vector="envpool"', 'env.id="Pong-v5"']).env.id == "Pong-v5"
    with pytest.raises(ConfigError, match="steps its copies itself"):
        load(ROOT / "cfg" / "unity_mock_team.toml", overrides=['env.vector="envpool"'])


def test_a_team_runs_on_envpool(tmp_path: Path) -> None:
    from wheeler2.runtime import run_experiment

    config = load(
        ROOT / "cfg" / "pendulum_ddpg.toml",
        overrides=[
            'env.vector="envpool"',
            "env.num_envs=2",
            "experiment.total_steps=400",
            "experiment.eval_every=400",
            "experiment.eval_episodes=2",
            "experiment.progress=false",
            "team.0.params.learning_starts=200",
            'experiment.backend="serial"',
        ],
        out=str(tmp_path),
    )
    summary = json.loads((run_experiment(config) / "summary.json").read_text())
    assert summary["env_steps"] == 400
    assert summary["members"]["target"]["updates"] > 0
    # Two eval copies of 200 steps each: Pendulum's return is at most 0 and at least -16.3/step.
    assert -16.3 * 200 <= summary["eval"][0]["return"] <= 0.0
