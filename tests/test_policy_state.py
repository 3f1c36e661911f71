"""The engine carries a recurrent agent's policy state (issue 15, docs/architecture.md).

A scripted env whose observation is the step count inside the current episode, and a fake
recurrent agent whose state counts the steps it has acted since its state was last reset: if the
engine passes the state back each step and resets exactly the rows whose episode ended, the
state an observation is seen in equals the observation, on every copy and every step.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from torch import nn

from wheeler2.agent import ActOut, Agent, SpaceInfo, Transitions
from wheeler2.env import EnvInfo, EnvReset, EnvStep
from wheeler2.runtime.evaluation import evaluate
from wheeler2.runtime.member import Member
from wheeler2.sync import WeightClient, WeightPublisher
from wheeler2.task import Head, RewardHeads

# Per copy, the episodes it plays: (length, how it ends). Copies end at different steps, by
# termination and by truncation, and copy 2 ends two episodes in a row after one step each.
SCRIPT = [
    [(3, "terminated"), (4, "truncated"), (50, "terminated")],
    [(5, "truncated"), (2, "terminated"), (50, "truncated")],
    [(1, "terminated"), (1, "truncated"), (4, "terminated"), (50, "terminated")],
]


class ScriptedEnv:
    """``obs[i] = [steps taken in copy i's current episode]``; episodes end as SCRIPT says."""

    def __init__(self, script: list[list[tuple[int, str]]] = SCRIPT) -> None:
        self.script = script
        self.num_envs = len(script)
        self.info = EnvInfo(obs_dim=1, act_dim=1, discrete=False)
        self.t = np.zeros(self.num_envs, np.int64)
        self.episode = np.zeros(self.num_envs, np.int64)

    def _obs(self) -> np.ndarray:
        return self.t[:, None].astype(np.float32)

    def reset(self, seed: int | None = None) -> EnvReset:
        self.t[:] = 0
        self.episode[:] = 0
        return EnvReset(self._obs())

    def step(self, action: np.ndarray) -> EnvStep:
        n = self.num_envs
        self.t += 1
        term, trunc = np.zeros(n, bool), np.zeros(n, bool)
        for i in range(n):
            length, kind = self.script[i][self.episode[i]]
            if self.t[i] == length:
                (term if kind == "terminated" else trunc)[i] = True
        final = self._obs()
        done = term | trunc
        self.t[done] = 0
        self.episode[done] += 1
        return EnvStep(
            obs=self._obs(),
            reward=np.ones(n, np.float32),
            terminated=term,
            truncated=trunc,
            final_obs=final,
            infos=[{} for _ in range(n)],
        )

    def close(self) -> None:
        pass


class WeightActor(nn.Module):
    """The action is this layer's weight, so a sync shows in the actions."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.trunk = nn.Linear(1, 1, bias=False)
        nn.init.constant_(self.trunk.weight, value)


class Counter(Agent):
    """state = [steps acted since the reset, 7]: the constant column shows the reset rows
    come from ``initial_state`` and not from zeros."""

    Params = dict
    uses_replay = False
    state_dim = 2

    def __init__(self) -> None:
        super().__init__(SpaceInfo(1, 1, False), {})
        self.net = WeightActor(0.5)
        self.acted: list[np.ndarray] = []  # the state given to each act
        self.observed: list[Transitions] = []
        self._out = np.zeros((0, 2), np.float32)

    @property
    def actor(self) -> nn.Module:
        return self.net

    def initial_state(self, n: int) -> np.ndarray:
        return np.tile(np.array([0.0, 7.0], np.float32), (n, 1))

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        assert state is not None
        self.acted.append(state.copy())
        # The agent hands back one buffer it overwrites on every call: the engine must copy it.
        if self._out.shape != state.shape:
            self._out = np.zeros_like(state)
        self._out[:] = state
        self._out[:, 0] += 1.0
        w = float(self.net.trunk.weight.detach()[0, 0])
        return ActOut(action=np.full((len(obs), 1), w, np.float32), state=self._out)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.observed.append(step)
        return None


def heads() -> RewardHeads:
    return RewardHeads([Head("env", 1.0, None)], None)


def run(member: Member, agent: Counter, steps: int) -> list[np.ndarray]:
    seen = []
    for _ in range(steps):
        seen.append(member._obs[:, 0].copy())
        member.step()
    return seen


def test_the_state_is_passed_back_and_reset_exactly_at_episode_ends() -> None:
    agent = Counter()
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), None, 0)
    seen = run(member, agent, 12)
    ends = 0
    for obs, state, step in zip(seen, agent.acted, agent.observed):
        # The state each observation is acted on in counts exactly that episode's steps so far.
        np.testing.assert_array_equal(state[:, 0], obs)
        np.testing.assert_array_equal(state[:, 1], 7.0)
        ends += int((step.terminated | step.truncated).sum())
    # Both kinds of episode end happened, on several copies.
    terms = np.array([s.terminated for s in agent.observed])
    truncs = np.array([s.truncated for s in agent.observed])
    assert terms.any(axis=0).sum() == 3 and truncs.any(axis=0).sum() == 3
    assert ends == 7
    # Row 2 ended at steps 1 and 2: it acted in the initial state three times in a row.
    np.testing.assert_array_equal([s[2, 0] for s in agent.acted[:4]], [0, 0, 0, 1])


def test_observe_gets_the_state_the_obs_was_seen_in() -> None:
    agent = Counter()
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), None, 0)
    run(member, agent, 6)
    for acted, step in zip(agent.acted, agent.observed):
        np.testing.assert_array_equal(step.state, acted)
        # ... and not the state after the step, which the agent returned.
        assert not np.array_equal(step.state, step.act_out.state)
        np.testing.assert_array_equal(step.obs[:, 0], step.state[:, 0])


def test_the_state_is_kept_across_a_weight_sync() -> None:
    agent = Counter()
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), None, 0)
    learner = WeightActor(-0.25)
    with WeightPublisher.create(learner) as pub:
        client = WeightClient.attach(pub.handle(), agent.actor, keep=[], alpha=1.0)
        run(member, agent, 2)
        pub.publish(learner)
        assert client.pull() == 1
        seen = run(member, agent, 3)
        client.close()
    # The pull took the learner's weights (the actions changed) ...
    assert agent.observed[1].action[0, 0] == 0.5 and agent.observed[2].action[0, 0] == -0.25
    # ... and the state went on counting: copy 1's episode is 5 steps long, so after two steps
    # its state is 2, 3 and 4 on the steps after the pull; a reset would have put 0 there.
    np.testing.assert_array_equal([s[1, 0] for s in agent.acted[2:]], [2, 3, 4])
    for obs, state in zip(seen, agent.acted[2:]):
        np.testing.assert_array_equal(state[:, 0], obs)


class Feedforward(Agent):
    Params = dict
    uses_replay = False

    def __init__(self) -> None:
        super().__init__(SpaceInfo(1, 1, False), {})
        self.observed: list[Transitions] = []

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:  # the pre-issue-15 signature
        return ActOut(action=np.zeros((len(obs), 1), np.float32))

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.observed.append(step)
        return None


def test_a_feedforward_agent_is_called_as_before_and_sees_no_state() -> None:
    agent = Feedforward()
    assert agent.state_dim == 0 and agent.initial_state(3).shape == (3, 0)
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), None, 0)
    for _ in range(4):
        member.step()
    assert all(step.state is None for step in agent.observed)


class FakeWriter:
    def __init__(self, **layout: Any) -> None:
        self.layout = SimpleNamespace(logp=False, **layout)
        self.calls: list[dict[str, Any]] = []

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(kwargs)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("width", [None, 2, 3])
def test_the_writer_gets_the_state_only_when_the_buffer_has_the_column(width: int | None) -> None:
    layout = {} if width is None else {"state_dim": width}
    writer = FakeWriter(**layout)
    agent = Counter()
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), writer, 0)
    run(member, agent, 4)
    for call, acted in zip(writer.calls, agent.acted):
        if width is None:
            assert "state" not in call
        elif width == 2:
            np.testing.assert_array_equal(call["state"], acted)
        else:  # another member's width: zeros, which the sequence learner's burn-in refreshes
            np.testing.assert_array_equal(call["state"], np.zeros((3, 3), np.float32))


def test_a_member_whose_state_means_something_else_writes_zeros() -> None:
    writer = FakeWriter(state_dim=2)  # the width of Counter's state
    agent = Counter()
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), writer, 0, shares_state=False)
    run(member, agent, 4)
    assert any(acted.any() for acted in agent.acted)
    for call in writer.calls:
        np.testing.assert_array_equal(call["state"], np.zeros((3, 2), np.float32))


def test_a_feedforward_member_writes_zeros_into_a_state_column() -> None:
    writer = FakeWriter(state_dim=4)
    member = Member("m", "explorer", Feedforward(), ScriptedEnv(), heads(), writer, 0)
    member.step()
    np.testing.assert_array_equal(writer.calls[0]["state"], np.zeros((3, 4), np.float32))


def test_a_wrong_state_shape_from_act_is_refused() -> None:
    agent = Counter()
    agent.act = lambda obs, explore, state=None: ActOut(np.zeros((3, 1), np.float32))  # type: ignore[method-assign]
    member = Member("m", "explorer", agent, ScriptedEnv(), heads(), None, 0)
    with pytest.raises(RuntimeError, match="ActOut.state"):
        member.step()


def test_evaluation_carries_the_state_per_copy() -> None:
    agent = Counter()
    env = ScriptedEnv(
        [[(3, "terminated"), (50, "truncated")], [(5, "truncated"), (50, "truncated")]]
    )
    result = evaluate(agent, env, seed=0)
    assert result.returns == [3.0, 5.0]
    np.testing.assert_array_equal([s[:, 0] for s in agent.acted], [[i, i] for i in range(5)])
