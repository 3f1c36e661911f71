"""A team on the Unity mock through the engine: cfg/unity_mock_team.toml's members, each on the
behavior its `agents` glob selects, stepped by Member for 1,000 vector steps with terminal and
interrupted agents and a lagging agent whose rows go inactive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "mlagents_envs", reason="needs mlagents-envs==0.28.0 with protobuf==3.20.3 (see docs/envs.md)"
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("quiet_mlagents"),
]
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("num_steps", [1000])
def test_unity_mock_team_steps_through_members(num_steps: int) -> None:
    from wheeler2.agent import Transitions
    from wheeler2.buffer import Replay
    from wheeler2.config import load
    from wheeler2.runtime.heads import make_heads, make_task
    from wheeler2.runtime.member import Member
    from wheeler2.runtime.parts import make_agent, make_env, replay_layout, space_info
    from wheeler2.runtime.plan import learner_plan, needs_of, plan_team
    from wheeler2.runtime.replays import replay_config
    from wheeler2.runtime.seeds import member_seed

    # A learning_starts beyond the test keeps DDPG on its cheap random actions.
    config = load(
        ROOT / "cfg" / "unity_mock_team.toml",
        overrides=["team.0.params.learning_starts=100000", "env.num_envs=1"],
    )
    plans = plan_team(config)
    lead = learner_plan(plans)
    probe = make_env(config, 1, 0, lead)
    heads = make_heads(config, probe, make_task(config))
    layout = replay_layout(probe.info, heads, logp=True)
    probe.close()
    replay = Replay.create(
        layout, replay_config(config, needs_of(lead), chunk=16), gamma=0.98,
        relabel=None, seed=0,
    )  # fmt: skip
    members: list[Member] = []
    seen: dict[str, list[Transitions]] = {p.name: [] for p in plans}
    try:
        for p in plans:
            env = make_env(config, int(config.env.num_envs), member_seed(config, p), p)
            agent = make_agent(config, p, space_info(env.info, heads), 0)
            observe = agent.observe

            def spy(step: Transitions, _o=observe, _s=seen[p.name]):  # noqa: ANN001, ANN202
                _s.append(step)
                return _o(step)

            agent.observe = spy  # type: ignore[method-assign]
            writer = replay.writer(num_envs=env.num_envs, block=False)
            members.append(Member(p.name, p.role, agent, env, heads, writer, 0))
        assert [m.env.behavior for m in members] == ["Runner", "Helper"]
        counted = 0
        for _ in range(num_steps):
            for m in members:
                counted += m.step()
        for m in members:
            m.writer.flush()
            taken = seen[m.name]
            assert len(taken) == num_steps
            term = sum(int(s.terminated.sum()) for s in taken)
            trunc = sum(int(s.truncated.sum()) for s in taken)
            absent = sum(0 if s.active is None else int((~s.active).sum()) for s in taken)
            assert term > 0 and trunc > 0, (m.name, term, trunc)
            assert absent > 0, "the lagging agent's rows never went inactive"
            for s in taken:  # absent rows never carry a done flag or a reward
                if s.active is not None:
                    assert not (s.terminated | s.truncated)[~s.active].any()
                    assert np.all(s.reward[~s.active] == 0)
            assert m.stats.episodes == term + trunc
        assert counted == replay.storage.size()  # only valid rows reached the replay
        assert members[1].agent.updates > 0  # PPO learned from its masked rollouts
    finally:
        for m in members:
            m.close()
        replay.close()
