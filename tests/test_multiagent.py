"""Multi-agent teams end to end: the active mask through Member, the replay writer and PPO/A2C;
per-member agent globs; reward modes; PettingZoo's own API test on the envs the configs use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from wheeler2.agent import ActOut, SpaceInfo, Transitions
from wheeler2.buffer import Layout, Replay, ReplayConfig

ROOT = Path(__file__).resolve().parents[1]


def _replay(obs_dim: int, act_dim: int, num_heads: int = 1, chunk: int = 4) -> Replay:
    layout = Layout(obs_dim=obs_dim, act_dim=act_dim, discrete=False, num_heads=num_heads)
    cfg = ReplayConfig(
        capacity=4096, batch_size=4, prioritized=False, min_size=4, chunk=chunk,
        updates_per_insert=0.0,
    )  # fmt: skip
    return Replay.create(layout, cfg, gamma=0.9, relabel=None, seed=0)


def _stored(replay: Replay) -> dict[str, np.ndarray]:
    idx = np.arange(replay.storage.size())
    return {k: replay.storage.gather(k, idx) for k in ("obs", "episode", "step", "terminated")}


# -- writer ----------------------------------------------------------------------------------


def test_writer_valid_mask_skips_rows_and_keeps_episode_bookkeeping() -> None:
    """Row 1 leaves at t=1 (done), is absent for t=2..3, comes back at t=4: its absent steps are
    not stored, and its next valid step starts a new episode at step 0."""
    replay = _replay(obs_dim=1, act_dim=1, chunk=64)
    try:
        w = replay.writer(num_envs=2, block=False)
        for t in range(6):
            valid = np.array([True, not (2 <= t <= 3)])
            term = np.array([False, t == 1])
            obs = np.array([[t], [100 + t]], np.float32)
            w.add(obs, np.zeros((2, 1), np.float32), np.ones(2), obs, term, np.zeros(2, bool),
                  valid=valid)  # fmt: skip
        w.flush()
        s = _stored(replay)
        row1 = s["obs"][:, 0] >= 100
        assert sorted(s["obs"][row1, 0].tolist()) == [100, 101, 104, 105]
        by_obs = {
            int(o): (int(e), int(k)) for o, e, k in zip(s["obs"][:, 0], s["episode"], s["step"])
        }
        assert by_obs[100][1] == 0 and by_obs[101][1] == 1
        assert by_obs[104][1] == 0 and by_obs[105][1] == 1  # a new episode after the absence
        assert by_obs[104][0] != by_obs[101][0]
        # Row 0 never left: one episode, steps 0..5.
        assert [by_obs[t][1] for t in range(6)] == list(range(6))
        assert len({by_obs[t][0] for t in range(6)}) == 1
    finally:
        replay.close()


def test_writer_all_valid_mask_equals_no_mask() -> None:
    stored = []
    for mask in (None, np.ones(3, bool)):
        replay = _replay(obs_dim=1, act_dim=1)
        try:
            w = replay.writer(num_envs=3, block=False)
            for t in range(9):
                obs = np.arange(3, dtype=np.float32)[:, None] + 10 * t
                w.add(obs, np.zeros((3, 1), np.float32), np.ones(3), obs,
                      np.array([t == 4, False, False]), np.zeros(3, bool), valid=mask)  # fmt: skip
            w.flush()
            stored.append(_stored(replay))
        finally:
            replay.close()
    for k in stored[0]:
        np.testing.assert_array_equal(stored[0][k], stored[1][k])


# -- PPO / A2C ---------------------------------------------------------------------------------


def _rollout_steps(algo: str, garbage: float, seed: int = 0) -> dict[str, torch.Tensor]:
    """Feed an on-policy agent one rollout where row 1 is absent for the last steps, with
    ``garbage`` as its stale data there; return the agent's parameters after the update."""
    import importlib

    mod = importlib.import_module(f"agents.{algo}")
    space = SpaceInfo(obs_dim=2, act_dim=1, discrete=False)
    params = mod.Params(n_steps=6, **({"batch_size": 12, "n_epochs": 2} if algo == "ppo" else {}))
    agent = getattr(mod, algo.upper())(space, params, seed=seed)
    rng = np.random.default_rng(0)
    for t in range(6):
        active = np.array([True, t < 3])
        obs = rng.normal(size=(2, 2)).astype(np.float32)
        nxt = rng.normal(size=(2, 2)).astype(np.float32)
        act = rng.uniform(-1, 1, size=(2, 1)).astype(np.float32)
        rew = rng.normal(size=(2, 1)).astype(np.float32)
        term = np.array([False, t == 2])
        if t >= 3:  # row 1 absent: zeros / stale values, which must not matter
            obs[1] = nxt[1] = garbage
            act[1] = np.clip(garbage, -1, 1)
            rew[1] = 0.0
        out = ActOut(action=act, logp=np.full(2, -1.0, np.float32), extras={"raw_action": act})
        agent.observe(Transitions(obs, act, rew, nxt, term, np.zeros(2, bool), nxt, out, active))
    return {k: v.detach().clone() for k, v in agent.actor.state_dict().items()}


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_on_policy_agents_give_absent_steps_zero_weight(algo: str) -> None:
    a = _rollout_steps(algo, garbage=0.0)
    b = _rollout_steps(algo, garbage=7.0)
    for k in a:
        torch.testing.assert_close(a[k], b[k])


# -- PettingZoo through the engine -------------------------------------------------------------


def test_parallel_api_test_on_team_envs() -> None:
    pytest.importorskip("pettingzoo.sisl", reason="pip install 'pettingzoo[sisl]'")
    pytest.importorskip("mpe2", reason="pip install mpe2")
    from pettingzoo.test import parallel_api_test
    from wheeler2.envs.pettingzoo import make_parallel_env

    parallel_api_test(make_parallel_env("mpe2.simple_spread_v3", {"continuous_actions": True}),
                      num_cycles=50)  # fmt: skip
    parallel_api_test(make_parallel_env("sisl.multiwalker_v9", {"terminate_on_fall": False}),
                      num_cycles=50)  # fmt: skip


def _member_from_config(path: Path, sets: list[str], member: int = 0):  # noqa: ANN202
    from wheeler2.config import load
    from wheeler2.runtime.heads import make_heads, make_task
    from wheeler2.runtime.member import Member
    from wheeler2.runtime.parts import make_agent, make_env, space_info
    from wheeler2.runtime.plan import plan_team

    config = load(path, overrides=sets)
    plans = plan_team(config)
    plan = plans[member]
    env = make_env(config, int(config.env.num_envs), 0, plan)
    heads = make_heads(config, env, make_task(config))
    agent = make_agent(config, plan, space_info(env.info, heads), 0)
    return config, env, heads, agent, Member


def test_multiwalker_fallen_walkers_are_masked_end_to_end() -> None:
    """Walkers fall under random actions and their rows go inactive: Member passes the mask to
    the agent and the writer, and no row of an absent walker reaches the replay."""
    pytest.importorskip("pettingzoo.sisl", reason="pip install 'pettingzoo[sisl]'")
    config, env, heads, agent, Member = _member_from_config(
        ROOT / "cfg" / "multiwalker_team.toml",
        [
            "env.num_envs=2",
            "team.0.params.n_steps=16",
            "team.0.params.batch_size=96",
            "team.0.params.n_epochs=1",
        ],
    )
    seen: list[np.ndarray | None] = []
    observe = agent.observe

    def spy(step: Transitions):  # noqa: ANN202
        seen.append(None if step.active is None else step.active.copy())
        return observe(step)

    agent.observe = spy  # type: ignore[method-assign]
    replay = _replay(env.info.obs_dim, env.info.act_dim, chunk=8)
    from wheeler2.buffer import Layout

    replay.close()
    replay = Replay.create(
        Layout(obs_dim=env.info.obs_dim, act_dim=env.info.act_dim, discrete=False, logp=True),
        ReplayConfig(capacity=20_000, batch_size=4, prioritized=False, min_size=4, chunk=8,
                     updates_per_insert=0.0),  # fmt: skip
        gamma=0.99, relabel=None, seed=0,
    )  # fmt: skip
    try:
        member = Member("walkers", "learner", agent, env, heads,
                        replay.writer(num_envs=env.num_envs, block=False), seed=0)  # fmt: skip
        total = 0
        for _ in range(200):
            total += member.step()
        member.writer.flush()
        masks = [m for m in seen if m is not None]
        assert masks, "no walker ever fell in 200 steps"
        expected = sum(6 if m is None else int(m.sum()) for m in seen)
        assert total == expected == replay.storage.size()
        assert agent.updates >= 1
    finally:
        member.close()
        replay.close()


def test_member_globs_select_agents_and_reward_modes() -> None:
    pytest.importorskip("mpe2", reason="pip install mpe2")
    from wheeler2.config import load
    from wheeler2.runtime import parts
    from wheeler2.runtime.plan import plan_team

    path = ROOT / "cfg" / "simple_spread_team.toml"
    config = load(path, overrides=['team.0.agents=["agent_0", "agent_2"]', "env.num_envs=2"])
    plan = plan_team(config)[0]
    env = parts.make_env(config, 2, 0, plan)
    try:
        assert env.agent_names == ["agent_0", "agent_2"] and env.num_envs == 4
        assert env.other_agents == ["agent_1"]
    finally:
        env.close()
    from wheeler2.registry import make_env

    # The same seed and actions under each reward mode: "row" gives each agent its own reward,
    # "sum" gives every agent of a copy the sum of its copy's row rewards, "heads" keeps the
    # row rewards and lists every agent's reward of the copy in infos["head_rewards"].
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (5, 6, 5)).astype(np.float32)  # 5 steps, 2 copies x 3 agents
    got = {}
    for mode in ("row", "sum", "heads"):
        cfg = load(path, overrides=[f'env.kwargs.reward_mode="{mode}"'])
        env = make_env(cfg.env, 2, 0)
        try:
            env.reset(seed=0)
            steps = [env.step(a) for a in actions]
            got[mode] = (np.stack([st.reward for st in steps]), [st.infos for st in steps])
        finally:
            env.close()
    row = got["row"][0]  # [5, 6]
    assert np.all(np.abs(row) > 1e-3)  # so that a copy's sum (3 rows) differs from a row
    team = row.reshape(5, 2, 3).sum(-1)  # [5, copies]
    np.testing.assert_allclose(got["sum"][0], np.repeat(team, 3, axis=1), rtol=1e-5)
    np.testing.assert_allclose(got["heads"][0], row)
    for t, infos in enumerate(got["heads"][1]):
        for i, info in enumerate(infos):
            copy = slice(3 * (i // 3), 3 * (i // 3) + 3)
            np.testing.assert_allclose(info["head_rewards"], row[t, copy])


def test_simple_spread_team_runs_serial() -> None:
    pytest.importorskip("mpe2", reason="pip install mpe2")
    import json
    import tempfile

    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    with tempfile.TemporaryDirectory() as out:
        config = load(
            ROOT / "cfg" / "simple_spread_team.toml",
            overrides=[
                "experiment.total_steps=1200",
                "experiment.eval_every=600",
                "experiment.progress=false",
                "env.num_envs=2",
                "experiment.eval_episodes=2",
            ],  # fmt: skip
            out=out,
        )
        summary = json.loads((run_experiment(config) / "summary.json").read_text())
        assert summary["env_steps"] >= 1200 and len(summary["eval"]) >= 2


@pytest.mark.slow
def test_simple_spread_team_beats_random() -> None:
    pytest.importorskip("mpe2", reason="pip install mpe2")
    import tempfile

    from experiments.marl_teams import ENVS, run_one

    with tempfile.TemporaryDirectory() as out:
        r = run_one(ENVS["simple_spread"], 0, 60_000, Path(out), "serial")
    assert r["final"] > r["random"] + 3.0, r
