import numpy as np
import pytest

pytest.importorskip(
    "mlagents_envs", reason="needs mlagents-envs==0.28.0 with protobuf==3.20.3 (see docs/envs.md)"
)
from wheeler2.envs.unity import UnityVecEnv, make  # noqa: E402

EPISODE_LENGTH = 8  # the scripted mock's default: agent k's episodes last 8 + k steps
INTERRUPT_EVERY = 3


# mlagents-envs 0.28 uses distutils versions and legacy protobuf descriptors.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("quiet_mlagents"),
]


class MockModel:
    """What the scripted mock must do, tracked independently per row."""

    def __init__(self, agents_per_copy: int, copies: int, lagging: set[int]):
        self.a = agents_per_copy
        n = agents_per_copy * copies
        self.length = np.array([EPISODE_LENGTH + i % agents_per_copy for i in range(n)])
        self.lagging = np.array([i % agents_per_copy in lagging for i in range(n)])
        self.t = np.zeros(n, int)
        self.episode = np.zeros(n, int)
        self.active = np.ones(n, bool)


def _run(env: UnityVecEnv, steps: int, lagging: set[int], rng: np.random.Generator):
    m = MockModel(env.agents_per_copy, env.num_copies, lagging)
    n = env.num_envs
    ends = interruptions = masked = 0
    for _ in range(steps):
        if env.info.discrete:
            action = rng.integers(0, env.info.act_dim, n)
            code = action.astype(float)  # the mock echoes b0 * 2 + b1, the flat index itself
        else:
            action = rng.uniform(-1.3, 1.3, (n, env.info.act_dim)).astype(np.float32)
            code = np.clip(action, -1, 1).sum(axis=1)
        assert (env.active == m.active).all()
        step = env.step(action)
        assert step.obs.shape == (n, 4) and step.final_obs.shape == (n, 4)
        assert [i["active"] for i in step.infos] == m.active.tolist()
        for i in range(n):
            if not m.active[i]:  # a lagging agent comes back: masked transition, fresh obs
                masked += 1
                assert step.reward[i] == 0 and not step.done[i]
                m.active[i] = True
                m.t[i] = 0
                m.episode[i] += 1
                np.testing.assert_allclose(step.obs[i, 1:], [0, 0, m.episode[i]])
                continue
            m.t[i] += 1
            np.testing.assert_allclose(step.final_obs[i, 1:3], [m.t[i], code[i]], atol=1e-5)
            assert step.final_obs[i, 3] == m.episode[i]
            if m.t[i] < m.length[i]:
                assert not step.done[i] and step.reward[i] == pytest.approx(0.1)
                np.testing.assert_array_equal(step.obs[i], step.final_obs[i])
                continue
            ends += 1
            interrupted = (m.episode[i] + 1) % INTERRUPT_EVERY == 0
            interruptions += interrupted
            assert step.truncated[i] == interrupted and step.terminated[i] == (not interrupted)
            assert step.reward[i] == pytest.approx(0.1 if interrupted else 1.0)
            if m.lagging[i]:
                m.active[i] = False
            else:
                m.t[i] = 0
                m.episode[i] += 1
                np.testing.assert_allclose(step.obs[i, 1:], [0, 0, m.episode[i]])
        assert (env.active == m.active).all()
    return ends, interruptions, masked


def test_continuous_mock_1000_steps_with_terminal_and_lagging_agents():
    env = make("mock", {"num_agents": 3, "lagging_agents": [0]}, num_envs=2, seed=0)
    assert env.num_envs == 6 and env.agents_per_copy == 3
    assert env.info.obs_dim == 4 and env.info.act_dim == 2 and not env.info.discrete
    out = env.reset()
    np.testing.assert_array_equal(out.obs[:, 0], [0, 1, 2, 0, 1, 2])  # rows sorted by agent id
    ends, interruptions, masked = _run(env, 1000, {0}, np.random.default_rng(0))
    assert ends > 200 and 0 < interruptions < ends and masked > 0
    env.close()


def test_discrete_mock_1000_steps_folds_branches():
    env = make("mock", {"discrete_action": True, "num_agents": 2}, num_envs=1, seed=0)
    assert env.info.discrete and env.info.act_dim == 6 and env.branches == (3, 2)
    env.reset()
    ends, interruptions, masked = _run(env, 1000, set(), np.random.default_rng(1))
    assert ends > 100 and interruptions > 0 and masked == 0
    env.close()


def test_stock_mock_communicator_runs():
    # mlagents' own MockCommunicator: agents 0 and 1 decide, agent 2 is done on every step and
    # never asks to act, so it gets no row and its terminal steps are ignored.
    env = make("mock", {"stock": True}, num_envs=2, seed=0)
    assert env.behavior == "RealFakeBrain" and env.num_envs == 4 and env.info.obs_dim == 3
    env.reset()
    for _ in range(1000):
        step = env.step(np.zeros((4, 2), np.float32))
    np.testing.assert_allclose(step.obs, [[1, 2, 3]] * 4)
    np.testing.assert_allclose(step.reward, 1.0)
    assert not step.done.any() and env.active.all()
    env.close()


def test_behavior_is_picked_by_name():
    kwargs = {"behaviors": ["Walker", "Crawler"], "num_agents": 2}
    env = make("mock", {**kwargs, "behavior": "Crawler"}, 1, 0)
    assert env.behavior_names == ["Walker", "Crawler"]
    out = env.reset()
    np.testing.assert_array_equal(out.obs[:, 0], [100, 101])
    step = env.step(np.full((2, 2), 0.5, np.float32))
    np.testing.assert_allclose(step.obs[:, 2], [1.0, 1.0])  # our actions went to Crawler
    assert make("mock", kwargs, 1, 0).behavior == "Walker"  # default: the first
    with pytest.raises(ValueError, match="Walker"):
        make("mock", {**kwargs, "behavior": "Hopper"}, 1, 0)


def test_agent_without_decision_is_a_clear_error():
    env = make("mock", {"num_agents": 2}, 1, 0)
    env.reset()
    mock = env.copies[0].mock
    step_behavior = mock._step_behavior

    def drop_agent_1(b, actions):  # as if agent 1 had a DecisionRequester period > 1
        infos = step_behavior(b, actions)
        mock._decision_order[b] = [a for a in mock._decision_order[b] if a.id != 1]
        return [info for info in infos if info.id != 1]

    mock._step_behavior = drop_agent_1
    with pytest.raises(RuntimeError, match=r"agents \[1\].*one decision per step"):
        env.step(np.zeros((2, 2), np.float32))
