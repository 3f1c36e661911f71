"""DQN: the double-Q target by hand, head rewards summed, epsilon, target updates."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from recurrent_seq import SEQ, positions
from wheeler2.agents.dqn import DQN, Params, double_q_target

from wheeler2.agent import Batch, SpaceInfo


def test_double_q_target_by_hand():
    reward = torch.tensor([1.0, 2.0])
    discount = torch.tensor([0.9, 0.0])
    q_next_online = torch.tensor([[1.0, 3.0], [5.0, 2.0]])  # picks actions 1 and 0
    q_next_target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])  # evaluates them: 20, 30
    y = double_q_target(reward, discount, q_next_online, q_next_target)
    # [1 + .9 * 20, 2 + 0 * 30]; a vanilla max over the target net would give 1 + .9 * 40 = 37
    torch.testing.assert_close(y, torch.tensor([19.0, 2.0]))


def _linear_dqn(negamax: float | None = None, **overrides) -> DQN:
    """No hidden layer: Q(s, .) = W s + b, with known weights for online and target nets."""
    space = SpaceInfo(
        obs_dim=2,
        act_dim=2,
        discrete=True,
        heads=("a", "b"),
        head_weights=(1.0, 0.5),
        negamax=negamax,
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


def test_greedy_actions_are_the_argmax_and_epsilon_zero_acts_greedily():
    agent = _linear_dqn(eps_start=0.0, eps_end=0.0)
    obs = np.array([[1.0, 2.0], [3.0, 0.0], [-1.0, -2.0]], np.float32)  # Q(s, .) = s here
    np.testing.assert_array_equal(agent.act(obs, explore=False).action, [1, 0, 0])
    np.testing.assert_array_equal(agent.act(obs, explore=True).action, [1, 0, 0])


def test_epsilon_one_draws_every_action_alike():
    space = SpaceInfo(obs_dim=2, act_dim=3, discrete=True)
    agent = DQN(space, Params(hidden=[8], eps_start=1.0, eps_end=1.0))
    action = agent.act(np.zeros((3000, 2), np.float32), explore=True).action
    # Each action a third of the time (the count's std is ~26 of 3000).
    np.testing.assert_allclose(np.bincount(action, minlength=3) / 3000, [1 / 3] * 3, atol=0.04)


def test_a_noisy_q_network_explores_without_epsilon():
    space = SpaceInfo(obs_dim=2, act_dim=2, discrete=True, heads=("a", "b"), head_weights=(1, 1))
    agent = DQN(space, Params(hidden=[8], noisy=True, eps_start=1.0, eps_end=1.0))
    assert agent.epsilon == 0.0
    assert agent.learn(_batch()).metrics["epsilon"] == 0.0


@pytest.mark.parametrize("max_grad_norm", [0.0, 0.5])
def test_gradient_by_hand_clipped_unless_max_grad_norm_is_zero(max_grad_norm):
    agent = _linear_dqn(loss="mse", max_grad_norm=max_grad_norm)
    agent.learn(_batch())
    # dL/dQ(s_i, a_i) = w_i (Q - y) = [1, 3] * -2.5 (see test_learn_td_error_and_loss_by_hand);
    # sample 0 (s = [1, 2], a = 1) and sample 1 (s = [3, 0], a = 0) each fill one row.
    grad_w = np.array([[-22.5, 0.0], [-2.5, -5.0]])
    grad_b = np.array([-7.5, -2.5])
    norm = np.sqrt(600.0)  # sqrt(22.5^2 + 2.5^2 + 5^2 + 7.5^2 + 2.5^2)
    scale = 1.0 if max_grad_norm == 0 else max_grad_norm / (norm + 1e-6)
    head = agent.q.net.head
    np.testing.assert_allclose(head.weight.grad.numpy(), scale * grad_w, rtol=1e-5)
    np.testing.assert_allclose(head.bias.grad.numpy(), scale * grad_b, rtol=1e-5)


def test_update_counter_and_polyak_target_every_target_update_steps():
    agent = _linear_dqn(target_update=3, tau=0.5)  # lr 0: the online net stays at W = I, b = 0
    for k in range(1, 7):
        agent.learn(_batch())
        assert agent.updates == k
        if k == 2:  # not yet
            np.testing.assert_array_equal(agent.q_target.net.head.weight.numpy(), [[2, 0], [0, 3]])
        if k == 3:  # halfway from W' = diag(2, 3), b' = 1 toward W = I, b = 0
            np.testing.assert_array_equal(
                agent.q_target.net.head.weight.numpy(), [[1.5, 0], [0, 2]]
            )
            np.testing.assert_array_equal(agent.q_target.net.head.bias.numpy(), [0.5, 0.5])
    np.testing.assert_array_equal(agent.q_target.net.head.weight.numpy(), [[1.25, 0], [0, 1.5]])
    assert agent.state_dict()["updates"] == 6


def test_a_core_with_an_option_it_does_not_combine_with_is_refused_by_name():
    space = SpaceInfo(obs_dim=2, act_dim=2, discrete=True)
    with pytest.raises(ValueError, match='^features: features = "rbf" encodes one observation'):
        DQN(space, Params(hidden=[8], core="gru", features="rbf"))


# Recurrent DQN: two sequences of T = 2 steps (the second one's position 1 is padding), batch
# first; the observations, rewards and discounts of tests/recurrent_seq.py with two actions.
C = np.array([1.0, 0.5])  # the head weights
SEQ_DQN = SEQ | {"action": np.array([[1, 0], [0, 1]])}
W, W_T = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 0.0], [0.0, 3.0]])  # b = 0, b' = 1


def _recurrent_linear_dqn(**overrides) -> DQN:
    """``_linear_dqn``'s nets behind GRU cores whose weights are all 0: from the zero state every
    core output is 0, so the layer on [core output, obs] sees the feedforward input."""
    space = SpaceInfo(
        obs_dim=2, act_dim=2, discrete=True, heads=("a", "b"), head_weights=(1.0, 0.5)
    )
    params = Params(
        hidden=[], lr=0.0, core="gru", core_size=2, seq_length=2, seq_burn_in=0, **overrides
    )
    agent = DQN(space, params)
    silent = np.zeros((2, 2))  # the weights of the core's two outputs
    with torch.no_grad():
        for net, w, b in ((agent.q, W, 0.0), (agent.q_target, W_T, 1.0)):
            for p in net.core.parameters():
                p.zero_()
            net.mlp.head.weight.copy_(torch.as_tensor(np.hstack([silent, w])))
            net.mlp.head.bias.fill_(b)
    return agent


@pytest.mark.parametrize("loss", ["mse", "huber"])
@pytest.mark.parametrize("double", [True, False])
def test_recurrent_target_loss_and_priorities_by_hand_per_position(loss, double):
    agent = _recurrent_linear_dqn(loss=loss, double=double)
    out = agent.learn(Batch.from_numpy(SEQ_DQN, "cpu"))
    s, s2 = positions("obs"), positions("next_obs")
    a = SEQ_DQN["action"].T.reshape(4)[:3]  # time-major, like positions(): [1, 0, 0]
    r, discount = positions("reward") @ C, positions("discount")
    w = np.array([1.0, 2.0, 1.0])  # (t, b) = 00, 01, 10: each sequence's importance weight
    q_next_target = s2 @ W_T.T + 1.0  # [[3, 4], [5, 1], [1, 7]]
    # The online net picks [0, 0, 1] (the tie at s' = [1, 1] goes to the first action), so the
    # double target evaluates 3 where the vanilla max takes 4.
    best = (s2 @ W.T).argmax(-1) if double else q_next_target.argmax(-1)
    y = r + discount * q_next_target[np.arange(3), best]
    q = (s @ W.T)[np.arange(3), a]
    d = q - y
    per = d**2 if loss == "mse" else np.where(np.abs(d) < 1, 0.5 * d**2, np.abs(d) - 0.5)
    assert out.metrics["loss"] == pytest.approx((w * per).sum() / 3, rel=1e-5)
    assert out.metrics["q_mean"] == pytest.approx(q.mean(), rel=1e-6)
    td = np.abs(d)
    first = td[[0, 2]]  # the first sequence's two positions; the second has one
    np.testing.assert_allclose(
        out.td_error, [0.9 * first.max() + 0.1 * first.mean(), td[1]], rtol=1e-5
    )
