"""Vectorized gymnasium stepping: in-process and subprocess copies agree, autoreset keeps the
EnvStep contract, rollouts run on across Member.step calls, and the `[env] vector` key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wheeler2.envs.gym import AsyncGymVecEnv, GymVecEnv

from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.config import ConfigError, load
from wheeler2.runtime.member import Member
from wheeler2.task import Head, RewardHeads

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_async_copies_match_in_process_copies(env_id: str) -> None:
    """Same seeds, same actions: identical obs, final obs, rewards and done flags, through
    terminations (CartPole) and truncations (Pendulum, 200 steps)."""
    sync, asyn = GymVecEnv(env_id, {}, 3, 7), AsyncGymVecEnv(env_id, {}, 3, 7)
    try:
        np.testing.assert_array_equal(sync.reset().obs, asyn.reset().obs)
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(210):
            if sync.info.discrete:
                a = rng.integers(0, sync.info.act_dim, 3)
            else:
                a = rng.uniform(-1, 1, (3, sync.info.act_dim)).astype(np.float32)
            x, y = sync.step(a), asyn.step(a)
            for k in ("obs", "final_obs", "reward", "terminated", "truncated"):
                np.testing.assert_array_equal(getattr(x, k), getattr(y, k), err_msg=k)
            assert len(y.infos) == 3 and all(isinstance(i, dict) for i in y.infos)
            done = x.terminated | x.truncated
            ends += int(done.sum())
            # Autoreset: where a copy ended, obs is the new episode's first, not final_obs.
            assert not np.any(np.all(x.obs[done] == x.final_obs[done], axis=1))
        assert ends >= 3
    finally:
        sync.close()
        asyn.close()


def test_async_bad_kwargs_fail_before_any_worker_starts() -> None:
    # The parent's probe copy raises the env's own error, with its real traceback.
    with pytest.raises(TypeError, match="no_such_kwarg"):
        AsyncGymVecEnv("Pendulum-v1", {"no_such_kwarg": 1}, 2, 0)


class _Uniform:
    uses_replay = True

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def act(self, obs: np.ndarray, explore: bool):  # noqa: ANN201
        from wheeler2.agent import ActOut

        return ActOut(self.rng.uniform(-1, 1, (len(obs), 1)).astype(np.float32))

    def observe(self, step: object) -> None:
        return None


def test_episodes_continue_across_member_step_batches() -> None:
    """Two collection batches of 60 and 70 steps (Pendulum: 200-step episodes): the second
    batch continues the same episodes, step counter and episode ids, without a reset."""
    env = GymVecEnv("Pendulum-v1", {}, 2, 0)
    layout = Layout(obs_dim=3, act_dim=1, discrete=False)
    cfg = ReplayConfig(capacity=1000, prioritized=False, min_size=1, updates_per_insert=0.0)
    replay = Replay.create(layout, cfg, gamma=0.9, relabel=None, seed=0)
    heads = RewardHeads([Head("env", 1.0, None)], None)
    member = Member("m", "explorer", _Uniform(), env, heads, replay.writer(2, block=False), 0)
    try:
        for _ in range(60):
            member.step()
        member.writer.flush()  # what a backend's collection call ends with
        obs_between = member._obs.copy()
        for _ in range(70):
            member.step()
        member.writer.flush()
        idx = np.arange(replay.storage.size())
        step = replay.storage.gather("step", idx)
        episode = replay.storage.gather("episode", idx)
        obs = replay.storage.gather("obs", idx)
        assert len(idx) == 260
        for ep in np.unique(episode):
            assert sorted(step[episode == ep].tolist()) == list(range(130))
        assert len(np.unique(episode)) == 2  # one per copy: nothing restarted
        # Step 60 of each copy acts on exactly the observation batch 1 left behind.
        at60 = obs[step == 60]
        assert sorted(map(tuple, at60)) == sorted(map(tuple, obs_between))
        assert member.stats.episodes == 0
    finally:
        member.close()
        replay.close()


def test_vector_key(tmp_path: Path) -> None:
    base = ROOT / "cfg" / "pendulum_ddpg.toml"
    assert load(base).env.vector == "sync"
    assert load(base, overrides=['env.vector="async"']).env.vector == "async"
    with pytest.raises(ConfigError, match="vector"):
        load(base, overrides=['env.vector="threads"'])
    with pytest.raises(ConfigError, match="vector"):
        load(ROOT / "cfg" / "unity_mock_team.toml", overrides=['env.vector="async"'])


def test_async_team_run_serial(tmp_path: Path) -> None:
    import json

    from wheeler2.runtime import run_experiment

    config = load(
        ROOT / "cfg" / "pendulum_ddpg.toml",
        overrides=[
            'env.vector="async"',
            "env.num_envs=2",
            "experiment.total_steps=400",
            "experiment.eval_every=400",  # one eval of one episode: the acting is what counts
            "experiment.eval_episodes=1",
            "experiment.progress=false",
            "team.0.params.learning_starts=10000",  # acting only: the point is the env
            'experiment.backend="serial"',
        ],
        out=str(tmp_path),
    )
    summary = json.loads((run_experiment(config) / "summary.json").read_text())
    assert summary["env_steps"] >= 400
