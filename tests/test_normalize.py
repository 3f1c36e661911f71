"""Observation normalization: exact running statistics, frozen in evaluation, checkpointed."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.ddpg import Params as DDPGParams
from wheeler2.agents.dqn import DQN
from wheeler2.agents.dqn import Params as DQNParams
from wheeler2.agents.normalize import IdentityNorm, RunningNorm

from wheeler2.agent import Transitions

SPACE_C = dict(obs_dim=3, act_dim=2, discrete=False, heads=("env",), head_weights=(1.0,))


def test_running_stats_match_numpy_over_uneven_batches() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal([1.0, -50.0, 1e3], [0.1, 10.0, 300.0], (1000, 3))
    norm = RunningNorm(3)
    start = 0
    for size in (1, 7, 300, 2, 690):
        norm.update(data[start : start + size])
        start += size
    np.testing.assert_allclose(norm.mean, data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.std, data.std(0), rtol=1e-10)
    x = torch.as_tensor(data[:5], dtype=torch.float32)
    expected = np.clip((data[:5] - data.mean(0)) / data.std(0), -5, 5)
    np.testing.assert_allclose(norm.normalize(x).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_clipping_and_constant_dimensions() -> None:
    norm = RunningNorm(2, clip=5.0)
    norm.update(np.array([[0.0, 3.0], [2.0, 3.0]]))  # second dimension never varies
    out = norm.normalize(torch.tensor([[100.0, 3.5]])).numpy()
    assert out[0, 0] == 5.0  # clipped
    # std 0 is floored at eps = 1e-2: 0.5 / 1e-2 = 50, clipped to 5, never inf or nan
    assert out[0, 1] == 5.0


def _transitions(obs: np.ndarray, discrete: bool) -> Transitions:
    n = len(obs)
    action = np.zeros(n, np.int64) if discrete else np.zeros((n, 2), np.float32)
    return Transitions(
        obs=obs,
        action=action,
        reward=np.zeros((n, 1), np.float32),
        next_obs=obs,
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        reset_obs=obs,
        act_out=None,
    )


@pytest.mark.parametrize("algo", ["ddpg", "dqn"])
def test_agent_updates_from_observed_data_only_and_round_trips(algo: str) -> None:
    from wheeler2.agent import SpaceInfo

    if algo == "ddpg":
        space = SpaceInfo(**SPACE_C)
        agent = DDPG(space, DDPGParams(hidden=[8], learning_starts=0, normalize_obs=True))
    else:
        space = SpaceInfo(**{**SPACE_C, "discrete": True})
        agent = DQN(space, DQNParams(hidden=[8], normalize_obs=True))
    rng = np.random.default_rng(1)
    seen = rng.normal(10.0, 3.0, (64, 3)).astype(np.float32)
    agent.observe(_transitions(seen, space.discrete))
    mean, std = agent.obs_norm.mean.copy(), agent.obs_norm.std.copy()
    np.testing.assert_allclose(mean, seen.astype(np.float64).mean(0), rtol=1e-6)

    # Evaluation acts (explore=False) and exploring acts never move the statistics.
    agent.act(rng.normal(-100.0, 50.0, (16, 3)).astype(np.float32), explore=False)
    agent.act(rng.normal(-100.0, 50.0, (16, 3)).astype(np.float32), explore=True)
    np.testing.assert_array_equal(agent.obs_norm.mean, mean)
    np.testing.assert_array_equal(agent.obs_norm.std, std)

    # The actor sees normalized inputs: shifting the stats changes its output.
    probe = seen[:4]
    before = agent.act(probe, explore=False).action.copy()

    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    fresh = (
        DDPG(space, DDPGParams(hidden=[8], learning_starts=0, normalize_obs=True))
        if algo == "ddpg"
        else DQN(space, DQNParams(hidden=[8], normalize_obs=True))
    )
    assert fresh.obs_norm.count == 0
    # weights_only=True, as wheeler2.checkpoint.load reads it: numpy arrays in the state would
    # fail here (they did, and `wheeler2 eval` / `resume` failed on every normalize_obs run).
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    assert fresh.obs_norm.count == 64
    np.testing.assert_array_equal(fresh.obs_norm.mean, mean)
    np.testing.assert_array_equal(fresh.obs_norm.std, std)
    np.testing.assert_array_equal(fresh.act(probe, explore=False).action, before)

    # Same weights, other statistics: the actor's output (DDPG's action, DQN's Q values; an
    # argmax may not flip) moves, so the network really reads the restored statistics.
    def output() -> np.ndarray:
        with torch.no_grad():
            return fresh.actor(fresh.obs_norm.normalize(torch.as_tensor(probe))).numpy()

    restored = output()
    fresh.obs_norm.update(rng.normal(-40.0, 0.5, (256, 3)))
    assert not np.allclose(output(), restored)


def test_off_policy_statistics_skip_the_rows_of_absent_agents() -> None:
    """A multi-agent row whose agent was absent repeats a stale observation (``active`` False):
    on-policy agents already left it out of the statistics, off-policy ones counted it."""
    from dataclasses import replace

    from wheeler2.agent import SpaceInfo

    agent = DDPG(
        SpaceInfo(**SPACE_C), DDPGParams(hidden=[8], learning_starts=0, normalize_obs=True)
    )
    rows = np.random.default_rng(2).normal(0.0, 1.0, (8, 3)).astype(np.float32)
    rows[4:] = 1e3  # the absent agents' stale rows
    active = np.arange(8) < 4
    agent.observe(replace(_transitions(rows, False), active=active))
    assert agent.obs_norm.count == 4
    np.testing.assert_allclose(agent.obs_norm.mean, rows[:4].astype(np.float64).mean(0), rtol=1e-6)


def test_state_is_tensors_and_plain_numbers() -> None:
    norm = RunningNorm(2)
    norm.update(np.array([[1.0, 2.0], [3.0, 5.0]]))
    state = norm.state_dict()
    assert type(state["count"]) is int
    for key in ("mean", "m2"):
        assert isinstance(state[key], torch.Tensor) and state[key].dtype == torch.float64
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    back = RunningNorm(2)
    back.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(back.mean, norm.mean)
    np.testing.assert_array_equal(back.m2, norm.m2)
    # The saved tensors are copies: later updates must not change an earlier state.
    norm.update(np.array([[100.0, 100.0]]))
    np.testing.assert_array_equal(back.mean, state["mean"].numpy())


def test_off_by_default() -> None:
    from wheeler2.agent import SpaceInfo

    agent = DDPG(SpaceInfo(**SPACE_C), DDPGParams(hidden=[8]))
    assert isinstance(agent.obs_norm, IdentityNorm)
    assert agent.state_dict()["obs_norm"] == {}


def _vecnormalize(batches: list[np.ndarray], x: np.ndarray, clip: float) -> np.ndarray:
    """SB3 VecNormalize's normalization of ``x`` after folding in ``batches`` (population
    variance over every row seen; RunningNorm's std floor of 1e-2 in place of its epsilon)."""
    rows = np.concatenate(batches).astype(np.float64)
    std = np.maximum(rows.std(0), 1e-2)
    return np.clip((x - rows.mean(0)) / std, -clip, clip).astype(np.float32)


def test_ppo_folds_each_batch_in_before_normalizing_it_as_vecnormalize_does() -> None:
    """The first acting batch is normalized by its own statistics (not by empty ones), the
    stored rows are what the policy saw, next_obs and the next acting batch use statistics that
    include it, and evaluation never moves them (sb3-contrib's RecurrentPPO on VecNormalize,
    experiments/results/notes/rppo_update_vs_sb3.md)."""
    from wheeler2.agents.ppo import PPO
    from wheeler2.agents.ppo import Params as PPOParams

    from wheeler2.agent import ActOut, SpaceInfo

    agent = PPO(SpaceInfo(**SPACE_C), PPOParams(hidden=[8], n_steps=4, normalize_obs=True), seed=0)
    seen: list[torch.Tensor] = []
    agent.policy.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    rng = np.random.default_rng(0)
    obs0, obs1, final = (rng.normal(5.0, 2.0, (4, 3)).astype(np.float32) for _ in range(3))
    agent.act(rng.normal(-50.0, 9.0, (4, 3)).astype(np.float32), explore=False)
    assert agent.obs_norm.count == 0  # evaluation folds nothing in
    seen.clear()
    out = agent.act(obs0, explore=True)
    np.testing.assert_allclose(seen[0].numpy(), _vecnormalize([obs0], obs0, 10.0), atol=1e-5)
    # Copy 2 ended: its next_obs is the true last one, and it acts on obs1[2] next.
    next_obs = obs1.copy()
    next_obs[2] = final[2]
    done = np.array([False, False, True, False])
    agent.observe(
        Transitions(
            obs=obs0,
            action=out.action,
            reward=np.zeros((4, 1), np.float32),
            next_obs=next_obs,
            terminated=done,
            truncated=np.zeros(4, bool),
            reset_obs=obs1,
            act_out=ActOut(out.action, out.logp, out.extras),
        )
    )
    buf = agent.rollout
    np.testing.assert_allclose(buf.obs[0].numpy(), seen[0].numpy(), atol=1e-6)
    expected_next = _vecnormalize([obs0, obs1], next_obs, 10.0)
    np.testing.assert_allclose(buf.next_obs[0].numpy(), expected_next, atol=1e-5)
    seen.clear()
    agent.act(obs1, explore=True)
    np.testing.assert_allclose(seen[0].numpy(), _vecnormalize([obs0, obs1], obs1, 10.0), atol=1e-5)
    assert agent.obs_norm.count == 8  # the first batch was not folded in twice
