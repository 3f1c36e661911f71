import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from wheeler2.envs.bitflip import ENV_ID, BitFlipEnv


@pytest.mark.parametrize("fixed_goal", [False, True])
def test_env_checker_passes(fixed_goal):
    check_env(BitFlipEnv(n_bits=8, fixed_goal=fixed_goal), skip_render_check=True)


def test_registered_id_builds_with_n_bits():
    env = gymnasium.make(ENV_ID, n_bits=15)
    obs, info = env.reset(seed=0)
    assert env.unwrapped.n_bits == 15
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert all(v.shape == (15,) and v.dtype == np.float32 for v in obs.values())
    assert env.action_space == gymnasium.spaces.Discrete(15)
    assert info == {"is_success": False}


def test_compute_reward_by_hand_single_and_batched():
    env = BitFlipEnv(n_bits=3)
    a = np.array([1, 0, 1], dtype=np.float32)
    assert env.compute_reward(a, a, {}) == 0.0
    assert env.compute_reward(a, np.array([1, 1, 1], np.float32), {}) == -1.0
    achieved = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1], [0, 1, 0]], dtype=np.float32)
    desired = np.array([[0, 0, 0], [1, 1, 0], [1, 0, 1], [1, 0, 1]], dtype=np.float32)
    reward = env.compute_reward(achieved, desired, None)
    np.testing.assert_array_equal(reward, [0.0, -1.0, 0.0, -1.0])
    assert reward.dtype == np.float32


def test_flipping_the_differing_bits_succeeds_and_terminates():
    env = BitFlipEnv(n_bits=6)
    obs, _ = env.reset(seed=3)
    wrong = np.flatnonzero(obs["observation"] != obs["desired_goal"])
    assert len(wrong) > 0  # never starts solved
    for k, bit in enumerate(wrong):
        obs, reward, terminated, truncated, info = env.step(bit)
        last = k == len(wrong) - 1
        assert reward == (0.0 if last else -1.0) and isinstance(reward, float)
        assert terminated is last and info["is_success"] is last
        assert truncated is False
        assert reward == env.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)


def test_truncates_after_n_steps_and_keeps_going_without_termination():
    env = BitFlipEnv(n_bits=4, terminate_on_success=False)
    obs, _ = env.reset(seed=0)
    flags = []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(0)
        flags.append((terminated, truncated))
    assert flags == [(False, False)] * 3 + [(False, True)]


def test_fixed_goal_is_all_ones_and_random_goal_varies():
    env = BitFlipEnv(n_bits=10, fixed_goal=True)
    for s in range(5):
        obs, _ = env.reset(seed=s)
        np.testing.assert_array_equal(obs["desired_goal"], np.ones(10))
    env = BitFlipEnv(n_bits=10)
    goals = {tuple(env.reset(seed=s)[0]["desired_goal"]) for s in range(10)}
    assert len(goals) > 1


def test_same_seed_same_episode():
    a, b = BitFlipEnv(n_bits=12), BitFlipEnv(n_bits=12)
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    for k in oa:
        np.testing.assert_array_equal(oa[k], ob[k])
