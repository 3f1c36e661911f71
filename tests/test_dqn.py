"""DQN: the double-Q target by hand, head rewards summed, epsilon, target updates."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from agents.dqn import DQN, Params, double_q_target
from wheeler2.agent import Batch, SpaceInfo


def test_double_q_target_by_hand():
    reward = torch.tensor([1.0, 2.0])
    discount = torch.tensor([0.9, 0.0])
    q_next_online = torch.tensor([[1.0, 3.0], [5.0, 2.0]])  # picks actions 1 and 0
    q_next_target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])  # evaluates them: 20, 30
    y = double_q_target(reward, discount, q_next_online, q_next_target)
    # [1 + .9 * 20, 2 + 0 * 30]; a vanilla max over the target net would give 1 + .9 * 40 = 37
    torch.testing.assert_close(y, torch.tensor([19.0, 2.0]))


def _linear_dqn(**overrides) -> DQN:
    """No hidden layer: Q(s, .) = W s + b, with known weights for online and target nets."""
    space = SpaceInfo(
        obs_dim=2, act_dim=2, discrete=True, heads=("a", "b"), head_weights=(1.0, 0.5)
    )
    agent = DQN(space, Params(hidden=[], lr=0.0, **overrides))
    with torch.no_grad():
        agent.q.net.head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        agent.q.net.head.bias.zero_()
        agent.q_target.net.head.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 3.0]]))
        agent.q_target.net.head.bias.fill_(1.0)
    return agent


def _batch() -> Batch:
    return Batch(
        obs=torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
        action=torch.tensor([1, 0]),
        reward=torch.tensor([[1.0, 2.0], [0.0, -2.0]]),  # weighted sum: [2, -1]
        next_obs=torch.tensor([[2.0, 1.0], [1.0, 4.0]]),
        discount=torch.tensor([0.5, 0.5]),
        weight=torch.tensor([1.0, 3.0]),
        index=np.arange(2),
    )


def test_learn_td_error_and_loss_by_hand():
    agent = _linear_dqn(loss="mse")
    out = agent.learn(_batch())
    # online Q(s') = [[2, 1], [1, 4]] -> argmax [0, 1]; target Q(s') = [[5, 4], [3, 13]] -> [5, 13]
    # y = [2 + .5 * 5, -1 + .5 * 13] = [4.5, 5.5];  Q(s, a) = [2, 3];  td = [2.5, 2.5]
    np.testing.assert_allclose(out.td_error, [2.5, 2.5])
    assert out.metrics["loss"] == pytest.approx((1 * 2.5**2 + 3 * 2.5**2) / 2)
    assert out.metrics["q_mean"] == pytest.approx(2.5)


def test_huber_loss_is_linear_for_large_errors():
    out = _linear_dqn(loss="huber").learn(_batch())
    assert out.metrics["loss"] == pytest.approx((1 * 2.0 + 3 * 2.0) / 2)  # |td| - 1/2 = 2


def test_vanilla_target_when_double_is_off():
    out = _linear_dqn(loss="mse", double=False).learn(_batch())
    # max over the target net is [5, 13] too: with these weights both nets pick the same actions
    np.testing.assert_allclose(out.td_error, [2.5, 2.5])
    agent = _linear_dqn(loss="mse", double=False)
    with torch.no_grad():
        agent.q.net.head.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    out = agent.learn(_batch())
    # Swapped online weights: the vanilla target ignores the online net, y = [4.5, 5.5] still;
    # Q(s, a) = [1, 0] -> td = [3.5, 5.5]
    np.testing.assert_allclose(out.td_error, [3.5, 5.5])
    agent = _linear_dqn(loss="mse", double=True)
    with torch.no_grad():
        agent.q.net.head.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    out = agent.learn(_batch())
    # online Q(s') = [[1, 2], [4, 1]] -> argmax [1, 0]; target picks [4, 3]
    # y = [2 + 2, -1 + 1.5] = [4, 0.5]; Q(s, a) = [1, 0] -> td = [3, 0.5]
    np.testing.assert_allclose(out.td_error, [3.0, 0.5])


def test_epsilon_decay_and_hard_target_update():
    space = SpaceInfo(obs_dim=2, act_dim=3, discrete=True)
    agent = DQN(
        space, Params(hidden=[8], eps_start=1.0, eps_end=0.1, eps_decay_steps=100, target_update=2)
    )
    assert agent.epsilon == pytest.approx(1.0)
    agent.env_steps = 50
    assert agent.epsilon == pytest.approx(0.55)
    agent.env_steps = 1000
    assert agent.epsilon == pytest.approx(0.1)
    action = agent.act(np.zeros((5, 2), np.float32), explore=True).action
    assert action.dtype == np.int64 and action.shape == (5,)

    batch = Batch(
        obs=torch.randn(4, 2),
        action=torch.tensor([0, 1, 2, 0]),
        reward=torch.randn(4, 1),
        next_obs=torch.randn(4, 2),
        discount=torch.full((4,), 0.9),
        weight=torch.ones(4),
        index=np.arange(4),
    )
    target0 = [p.clone() for p in agent.target_params]
    agent.learn(batch)
    assert all(torch.equal(a, b) for a, b in zip(target0, agent.target_params))
    agent.learn(batch)
    assert all(torch.equal(a, b) for a, b in zip(agent.q_params, agent.target_params))


def test_state_dict_round_trip():
    space = SpaceInfo(
        obs_dim=2, act_dim=2, discrete=True, heads=("a", "b"), head_weights=(1.0, 0.5)
    )
    agent = DQN(space, Params(hidden=[8]), seed=0)
    agent.learn(_batch())
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    other = DQN(space, Params(hidden=[8]), seed=1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert agent.learn(_batch()).metrics == other.learn(_batch()).metrics
