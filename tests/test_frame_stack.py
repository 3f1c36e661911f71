"""``[env] stack = k`` (wheeler2.env.FrameStack): the last k observations side by side, the
first observation repeated at an episode start, and the stacked true final observation stored
for a transition that ended the episode (truncations included)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import wheeler2.envs.novel  # noqa: F401 - registers the NoVel ids
from wheeler2.envs.gym import GymVecEnv

import wheeler2
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.config import ConfigError, load
from wheeler2.env import FrameStack, FrameStackError
from wheeler2.runtime.member import Member
from wheeler2.runtime.probe import check_with_env
from wheeler2.task import Head, RewardHeads

K = 3


def _raw_copies(env_id: str, n: int, seed: int) -> tuple[list, list[np.ndarray]]:
    envs = [gymnasium.make(env_id) for _ in range(n)]
    first = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    return envs, first


def _hand_stack(frames: list[np.ndarray]) -> np.ndarray:
    """The last K raw frames, oldest first; the first one repeated to fill an episode start."""
    frames = [frames[0]] * (K - len(frames)) + frames[-K:]
    return np.concatenate(frames)


def test_stack_after_reset_and_k_plus_1_steps_is_the_hand_stacked_raw_obs():
    n = 2
    env = FrameStack(GymVecEnv("PendulumNoVel-v1", {}, n, 7), K)
    assert env.info.obs_dim == 2 * K
    assert env.observation_space.shape == (2 * K,)
    raw, first = _raw_copies("PendulumNoVel-v1", n, 7)
    # gymnasium's own stacker, flattened, as a second reference (padding = the first obs)
    oracle = [
        gymnasium.wrappers.FrameStackObservation(gymnasium.make("PendulumNoVel-v1"), K)
        for _ in range(n)
    ]
    hist = [[f] for f in first]
    obs = env.reset(seed=7).obs
    for i in range(n):
        np.testing.assert_array_equal(obs[i], _hand_stack(hist[i]))
        np.testing.assert_array_equal(obs[i], oracle[i].reset(seed=7 + i)[0].reshape(-1))
    rng = np.random.default_rng(0)
    for _ in range(K + 1):
        a = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
        st = env.step(a)
        for i in range(n):
            raw_obs = raw[i].step(2.0 * a[i])[0]  # the adapter maps [-1, 1] onto [-2, 2]
            hist[i].append(raw_obs)
            np.testing.assert_array_equal(st.obs[i], _hand_stack(hist[i]))
            np.testing.assert_array_equal(st.final_obs[i], st.obs[i])
            np.testing.assert_array_equal(st.obs[i], oracle[i].step(2.0 * a[i])[0].reshape(-1))
    # after K + 1 steps no frame of the reset is left
    assert not np.isin(obs[0][:2], st.obs[0]).all()


def test_truncation_final_obs_is_the_stacked_true_last_obs_and_the_next_starts_over():
    env = FrameStack(GymVecEnv("PendulumNoVel-v1", {}, 1, 3), K)
    raw, first = _raw_copies("PendulumNoVel-v1", 1, 3)
    hist = [first[0]]
    env.reset(seed=3)
    a = np.zeros((1, 1), np.float32)
    for t in range(1, 201):
        st = env.step(a)
        hist.append(raw[0].step(2.0 * a[0])[0])
        assert st.truncated[0] == (t == 200)
    np.testing.assert_array_equal(st.final_obs[0], _hand_stack(hist))
    # the reset observation, repeated: nothing of the old episode in the new stack
    new_first = st.obs[0][:2]
    np.testing.assert_array_equal(st.obs[0], np.tile(new_first, K))
    assert not np.array_equal(st.final_obs[0], st.obs[0])


def test_stored_next_obs_at_a_truncation_is_the_stacked_final_obs():
    env = FrameStack(GymVecEnv("PendulumNoVel-v1", {}, 2, 0), K)
    layout = Layout(obs_dim=2 * K, act_dim=1, discrete=False)
    cfg = ReplayConfig(capacity=1000, prioritized=False, min_size=1, updates_per_insert=0.0)
    replay = Replay.create(layout, cfg, gamma=0.9, relabel=None, seed=0)
    heads = RewardHeads([Head("env", 1.0, None)], None)

    class Zero:
        def act(self, obs, explore):  # noqa: ANN001, ANN201
            from wheeler2.agent import ActOut

            return ActOut(np.zeros((len(obs), 1), np.float32))

        def observe(self, step):  # noqa: ANN001, ANN201
            return None

    raw, first = _raw_copies("PendulumNoVel-v1", 2, 0)
    hist = [[f] for f in first]
    member = Member("m", "explorer", Zero(), env, heads, replay.writer(2, block=False), 0)
    try:
        for _ in range(203):
            member.step()
            for i in range(2):
                hist[i].append(raw[i].step(np.zeros(1, np.float32))[0])
                if len(hist[i]) == 201:  # the truncation: the raw env restarts, as the adapter
                    hist[i] = [_hand_stack(hist[i])]  # keep the stacked final obs aside
        member.writer.flush()
        idx = np.arange(replay.storage.size())
        trunc = replay.storage.gather("truncated", idx)
        step = replay.storage.gather("step", idx)
        next_obs = replay.storage.gather("next_obs", idx)
        obs = replay.storage.gather("obs", idx)
        assert trunc.sum() == 2 and set(step[trunc]) == {199}
        finals = sorted(map(tuple, next_obs[trunc]))
        assert finals == sorted(tuple(h[0]) for h in hist)
        # the first stored step of each new episode acts on a repeated frame
        for row in obs[step == 0]:
            np.testing.assert_array_equal(row, np.tile(row[:2], K))
    finally:
        member.close()
        replay.close()


CFG = """
[experiment]
name = "stack"
total_steps = 400
eval_every = 200
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "{env}"
stack = 3
{extra}

[buffer]
capacity = 1000
batch_size = 32

[[team]]
name = "learner"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100
"""


def test_a_run_with_stack_3_on_pendulum_novel(tmp_path: Path):
    path = tmp_path / "stack.toml"
    path.write_text(CFG.format(env="PendulumNoVel-v1", extra=""))
    run_dir = wheeler2.run(path, out=str(tmp_path / "runs"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 400 and len(summary["eval"]) == 2
    policy = wheeler2.load_policy(run_dir)
    assert policy.input_dim == 6  # the stacked observation is the policy's input
    assert np.asarray(policy(np.zeros(6, np.float32))).shape == (1,)


@pytest.mark.parametrize("goal_in_obs", [False, True])
def test_stack_refuses_a_goal_env_naming_the_key(tmp_path: Path, goal_in_obs: bool):
    """With achieved_goal_in_obs the stack was skipped without a word (the env was returned
    before it was stacked)."""
    extra = "kwargs = { n_bits = 4 }" + ("\nachieved_goal_in_obs = true" if goal_in_obs else "")
    path = tmp_path / "goal.toml"
    path.write_text(CFG.format(env="wheeler2/BitFlip-v0", extra=extra))
    text = path.read_text().replace('algo = "ddpg"', 'algo = "dqn"')
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        check_with_env(load(path))  # what `wheeler2 check` and every run build first
    err = info.value
    assert (err.table, err.key) == ("[env]", "stack")
    assert "goal env" in err.message and str(path) in str(err)


def test_stack_refuses_observations_of_several_axes_that_are_not_images():
    # Images (uint8 / bool Box, reported in EnvInfo.obs_shape) stack along their channels
    # (tests/test_images_envs.py); a float grid does not.
    class Grid:
        num_envs = 1
        info = GymVecEnv("CartPole-v1", {}, 1, 0).info
        observation_space = gymnasium.spaces.Box(0, 1, (8, 8, 3), np.float32)

    with pytest.raises(FrameStackError, match=r"\(8, 8, 3\)"):
        FrameStack(Grid(), 2)


def test_a_stack_of_stacks_is_refused():
    """The image replay rebuilds stacks from single frames: a stack of stacks is no sliding
    window of them, and would be rebuilt as another observation than the agent saw."""
    inner = FrameStack(GymVecEnv("PendulumNoVel-v1", {}, 1, 0), 2)
    inner.info = dataclasses.replace(inner.info, stack=2)  # as an image stack reports it
    with pytest.raises(FrameStackError, match="stacked already"):
        FrameStack(inner, 2)


def test_stack_key_is_bounded(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text(CFG.format(env="PendulumNoVel-v1", extra="").replace("stack = 3", "stack = 0"))
    with pytest.raises(ConfigError, match="stack: expected an integer >= 1, got 0"):
        load(path)
