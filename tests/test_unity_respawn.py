"""Unity agents that come back under a new id: Unity draws an Agent's id when it is enabled, so
a destroyed and re-instantiated (respawned) agent decides under an id the adapter never saw."""

import numpy as np
import pytest

pytest.importorskip(
    "mlagents_envs", reason="needs mlagents-envs==0.28.0 with protobuf==3.20.3 (see docs/envs.md)"
)
from wheeler2.envs import _mock_unity  # noqa: E402
from wheeler2.envs.unity import make  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("quiet_mlagents"),
]


@pytest.fixture
def respawning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted mock's agents start each new episode under a new id (old id + 1000)."""
    restart = _mock_unity._Agent.restart

    def respawn(agent: _mock_unity._Agent) -> None:
        restart(agent)
        agent.id += 1000

    monkeypatch.setattr(_mock_unity._Agent, "restart", respawn)


@pytest.mark.usefixtures("respawning")
def test_a_respawned_agent_takes_the_row_its_predecessor_left() -> None:
    # Agent 0 lags (its successor arrives a step after its terminal step), the others respawn in
    # the same step; 2 copies of 3 agents.
    env = make("mock", {"num_agents": 3, "lagging_agents": [0]}, num_envs=2, seed=0)
    env.reset()
    n = env.num_envs
    ends = 0
    lagging = np.zeros(n, bool)
    for t in range(60):
        action = np.stack([np.full(n, 0.1 * (t % 5)), 0.01 * np.arange(n)], 1).astype(np.float32)
        before = env.active.copy()
        np.testing.assert_array_equal(before, ~lagging)
        step = env.step(action)
        valid = np.array([info["active"] for info in step.infos])
        np.testing.assert_array_equal(valid, before)
        # Each acting row's action reached its own agent (the mock echoes the action's sum).
        np.testing.assert_allclose(step.final_obs[valid, 2], action[valid].sum(1), atol=1e-5)
        ends += int(step.done.sum())
        # A row that ended goes on with its agent's successor (step 0 of a new episode), but
        # for the lagging agent, whose successor comes one step later.
        lagging = step.done & (np.arange(n) % 3 == 0)
        restarted = (step.done & ~lagging) | (~valid)
        assert (step.obs[restarted, 1] == 0).all() and (step.obs[restarted, 0] >= 1000).all()
    assert ends >= 30
    # Before the fix every row went inactive for good once its first agent respawned.
    assert env.active.sum() >= n - 2
    assert (step.obs[:, 0] >= 1000).all()  # every row now holds a successor
    env.close()
