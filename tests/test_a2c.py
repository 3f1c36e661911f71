"""A2C: n-step returns by hand, rollouts that run on across updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.a2c import A2C, Params, nstep_returns
from wheeler2.agent import SpaceInfo, Transitions


def test_nstep_returns_by_hand_with_episode_ends():
    gamma = 0.9
    # Column 0: step 1 terminated (no bootstrap), step 2 truncated (bootstrap from its final
    # obs, worth 30), step 3 is the rollout's last (bootstrap from the next obs, worth 40).
    # Column 1: no episode end: one 4-step return plus 3-, 2-, 1-step returns.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    next_values = torch.tensor([[10.0, 5.0], [20.0, 5.0], [30.0, 5.0], [40.0, 5.0]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    dones = torch.tensor([[0, 0], [1, 0], [1, 0], [0, 0]], dtype=torch.bool)

    returns = nstep_returns(rewards, next_values, terminated, dones, gamma)

    # R_3 = 4 + .9 * 40 = 40;  R_2 = 3 + .9 * 30 = 30;  R_1 = 2;  R_0 = 1 + .9 * 2 = 2.8
    # column 1: R_3 = 1 + 4.5 = 5.5; R_2 = 5.95; R_1 = 6.355; R_0 = 6.7195
    expected = torch.tensor([[2.8, 6.7195], [2.0, 6.355], [30.0, 5.95], [40.0, 5.5]])
    torch.testing.assert_close(returns, expected)


@pytest.mark.parametrize("discrete", [False, True])
def test_updates_every_n_steps_without_reset(discrete):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=discrete)
    agent = A2C(space, Params(n_steps=5, hidden=[16]))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    updated = []
    for t in range(12):
        out = agent.act(obs, explore=True)
        nxt = rng.normal(size=obs.shape).astype(np.float32)
        term = np.array([t == 3, False, False, False])
        trunc = np.array([False, t == 6, False, False])
        step = Transitions(obs, out.action, np.ones((4, 1), np.float32), nxt, term, trunc, nxt, out)
        metrics = agent.observe(step)
        updated.append(metrics is not None)
        obs = nxt
    assert [i for i, u in enumerate(updated) if u] == [4, 9]
    assert len(agent.steps) == 2  # the third rollout has begun, nothing was reset
    assert agent.env_steps == 48 and agent.updates == 2
    assert any(not torch.equal(b, a) for b, a in zip(before, agent.actor.parameters()))


def test_update_matches_the_a2c_loss():
    """One update equals one RMSprop step on the loss written out here from the paper."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    params = Params(n_steps=3, hidden=[8], ent_coef=0.01)
    agent, ref = A2C(space, params, seed=0), A2C(space, params, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 2, 3)).astype(np.float32)
    nxt = rng.normal(size=(3, 2, 3)).astype(np.float32)
    actions = np.array([[0, 1], [1, 1], [0, 0]])
    rewards = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 2.0]], np.float32)
    term = np.array([[False, False], [False, True], [False, False]])
    for t in range(3):
        out = agent.act(obs[t], explore=True)
        out.action = actions[t]
        step = Transitions(
            obs[t], actions[t], rewards[t, :, None], nxt[t], term[t], np.zeros(2, bool), nxt[t], out
        )
        agent.observe(step)

    o = torch.as_tensor(obs).flatten(0, 1)
    with torch.no_grad():
        v_next = ref.critic(torch.as_tensor(nxt))
    g = params.gamma
    R = torch.zeros(3, 2)
    R[2] = torch.as_tensor(rewards[2]) + g * v_next[2]
    R[1, 0] = float(rewards[1, 0]) + g * R[2, 0]
    R[1, 1] = float(rewards[1, 1])  # terminated
    R[0] = torch.as_tensor(rewards[0]) + g * R[1]
    R = R.flatten()
    logits = ref.policy(o)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, torch.as_tensor(actions).flatten()[:, None]).squeeze(-1)
    v = ref.critic(o)
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    loss = -((R - v.detach()) * logp).mean() + 0.5 * (R - v).pow(2).mean() - 0.01 * entropy
    ref.opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.params_list, params.max_grad_norm)
    ref.opt.step()
    # RMSprop's first step is nearly sign(gradient) * lr / sqrt(1 - alpha), blind to most
    # changes of the loss: compare the (clipped) gradients themselves as well.
    for a, b in zip(agent.params_list, ref.params_list):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(a, b)


def _assert_same(a, b, where: str = "") -> None:
    """Exact equality of nested state (tensors bit for bit, plain values with ==)."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def _rollout(agent: A2C, rng: np.random.Generator, steps: int) -> list:
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    metrics = []
    for _ in range(steps):
        out = agent.act(obs, explore=True)
        nxt = rng.normal(size=obs.shape).astype(np.float32)
        done = rng.random(2) < 0.2
        reward = rng.normal(size=(2, 1)).astype(np.float32)
        z = np.zeros(2, bool)
        metrics.append(agent.observe(Transitions(obs, out.action, reward, nxt, done, z, nxt, out)))
        obs = nxt
    return metrics


@pytest.mark.parametrize("discrete", [False, True])
def test_state_dict_round_trip(discrete):
    """state_dict -> torch.load(weights_only=True) -> a fresh agent: the same weights, RMSprop
    state and counters, so the same greedy actions and, from alike-seeded samplers, the same
    next update bit for bit."""
    import io

    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=discrete)
    params = Params(n_steps=5, hidden=[8])
    agent = A2C(space, params, seed=0)
    _rollout(agent, np.random.default_rng(0), 10)  # two updates, no partial rollout left
    assert agent.updates == 2
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    other = A2C(space, params, seed=1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    _assert_same(other.state_dict(), agent.state_dict())
    assert other.opt.state_dict()["state"]  # the optimizer's running averages came back
    assert other.env_steps == 20 and other.updates == 2
    obs = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        other.act(obs, explore=False).action, agent.act(obs, explore=False).action
    )
    agent.gen.manual_seed(3)
    other.gen.manual_seed(3)
    m_a = _rollout(agent, np.random.default_rng(2), 5)[-1]
    m_b = _rollout(other, np.random.default_rng(2), 5)[-1]
    assert m_a is not None and m_a == m_b
    _assert_same(other.state_dict(), agent.state_dict())
