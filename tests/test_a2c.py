"""A2C: n-step returns by hand, rollouts that run on across updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wheeler2.agents.a2c import A2C, Params, nstep_returns

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
    assert agent.rollout.t == 2  # the third rollout has begun, nothing was reset
    assert agent.env_steps == 48 and agent.updates == 2
    assert any(not torch.equal(b, a) for b, a in zip(before, agent.actor.parameters()))


@pytest.mark.parametrize(
    ("normalize_advantage", "absent"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_update_matches_the_a2c_loss(normalize_advantage, absent):
    """One update equals one RMSprop step, written out, on the loss written out here from the
    paper: means over the active rows only (one row absent at one step, where ``absent``),
    advantages normalized with the mean and sample std (1/(n-1), as SB3's) of those rows where
    asked."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    params = Params(n_steps=3, hidden=[8], ent_coef=0.01, normalize_advantage=normalize_advantage)
    agent, ref = A2C(space, params, seed=0), A2C(space, params, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 2, 3)).astype(np.float32)
    nxt = rng.normal(size=(3, 2, 3)).astype(np.float32)
    actions = np.array([[0, 1], [1, 1], [0, 0]])
    rewards = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 2.0]], np.float32)
    term = np.array([[False, False], [False, True], [False, False]])
    metrics = None
    for t in range(3):
        out = agent.act(obs[t], explore=True)
        out.action = actions[t]
        step = Transitions(
            obs[t], actions[t], rewards[t, :, None], nxt[t], term[t], np.zeros(2, bool), nxt[t], out
        )
        if absent and t == 2:
            step.active = np.array([False, True])
        metrics = agent.observe(step)
    assert metrics is not None

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
    w = torch.ones(6)
    if absent:
        w[4] = 0.0  # row (t = 2, copy 0): still in the returns, out of every mean
    logits = ref.policy(o)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, torch.as_tensor(actions).flatten()[:, None]).squeeze(-1)
    v = ref.critic(o)
    adv = (R - v).detach()
    if normalize_advantage:
        mu = (adv * w).sum() / w.sum()
        adv = (adv - mu) / (((adv - mu) ** 2 * w).sum() / (w.sum() - 1)).sqrt()  # sample std
    policy_loss = -(adv * logp * w).sum() / w.sum()
    value_loss = ((R - v) ** 2 * w).sum() / w.sum()
    entropy = (-(logp_all.exp() * logp_all).sum(-1) * w).sum() / w.sum()
    loss = policy_loss + 0.5 * value_loss - 0.01 * entropy
    ref.opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.params_list, params.max_grad_norm)
    for a, b in zip(agent.params_list, ref.params_list):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)
        # RMSprop's first step from a zero square average (alpha 0.99, eps 1e-5, lr 7e-4).
        step = 7e-4 * b.grad / ((0.01 * b.grad**2).sqrt() + 1e-5)
        torch.testing.assert_close(a, b.detach() - step)
    expected = [policy_loss.item(), value_loss.item(), entropy.item()]
    got = [metrics[k] for k in ("policy_loss", "value_loss", "entropy")]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_one_row_keeps_its_advantage_unnormalized():
    """normalize_advantage needs two rows; a rollout of one step of one copy uses its
    advantage as it is: policy loss -(R - V(s)) log pi(a|s), value loss (R - V(s))^2, with
    R = r + gamma V(s'), each divided by its one active row; the two heads' rewards summed
    with their weights."""
    space = SpaceInfo(3, 2, True, heads=("a", "b"), head_weights=(1.0, 0.5))
    agent = A2C(space, Params(n_steps=1, hidden=[8], normalize_advantage=True), seed=0)
    obs, nxt = np.array([[0.5, -1.0, 2.0]], np.float32), np.array([[1.0, 1.0, 0.0]], np.float32)
    out = agent.act(obs, explore=True)
    with torch.no_grad():
        v, v_next = agent.critic(torch.as_tensor(obs)).item(), agent.critic(torch.as_tensor(nxt))
        logits = agent.policy(torch.as_tensor(obs))
        logp = torch.log_softmax(logits, -1)[0, int(out.action[0])].item()
    adv = 4.0 + 0.99 * v_next.item() - v  # two heads: r = 2 + 0.5 * 4
    z = np.zeros(1, bool)
    reward = np.array([[2.0, 4.0]], np.float32)
    metrics = agent.observe(Transitions(obs, out.action, reward, nxt, z, z, nxt, out))
    assert metrics["policy_loss"] == pytest.approx(-adv * logp, rel=1e-5)
    assert metrics["value_loss"] == pytest.approx(adv**2, rel=1e-5)


@pytest.mark.parametrize("critic_core", [True, False])
def test_recurrent_rollout_replays_the_behaviour_log_probs_and_values(critic_core):
    """Recurrent A2C keeps each rollout's initial state and episode starts: replaying them
    gives back the log-probs the policy drew its actions with and the values seen while
    acting, and the last step's bootstrap value is the critic's in the state after it."""
    T, n = 4, 3
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    # core_size 5: a state [n, 5] has another size than the values [T, n]
    params = Params(core="gru", core_size=5, hidden=[8], n_steps=T, critic_core=critic_core)
    agent = A2C(space, params, seed=0)
    seen = []
    update = agent.update

    def spy() -> dict[str, float]:
        r = agent.rollout
        obs, starts, nxt = r.obs, r.starts, r.next_obs
        sa, sc = r.state0[:, : agent.actor_state_dim], r.state0[:, agent.actor_state_dim :]
        with torch.no_grad():
            out, _ = agent.policy.sequence(obs, sa, starts)
            logp = agent.policy.evaluate(out, r.action.long())[0]
            if critic_core:
                v, after = agent.critic.sequence(obs, sc, starts)
                v_last = agent.critic.step(nxt[-1], after)[0]
            else:
                v, v_last = agent.critic(obs), agent.critic(nxt[-1])
        seen.append({"logp": logp, "v": v, "v_last": v_last, "starts": starts.clone()})
        seen[-1] |= {"done": r.done.clone(), "value": r.value.clone()}
        seen[-1]["next_value"] = r.next_value.clone()
        return update()

    agent.update = spy
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    state = agent.initial_state(n)
    z = np.zeros(n, bool)
    behaviour = []
    for _ in range(2 * T):
        out = agent.act(obs, explore=True, state=state)
        behaviour.append(out.logp)
        nxt = rng.normal(size=(n, 3)).astype(np.float32)
        term = rng.random(n) < 0.25
        reward = np.ones((n, 1), np.float32)
        agent.observe(Transitions(obs, out.action, reward, nxt, term, z, nxt, out, state=state))
        obs, state = nxt, out.state.copy()
        state[term] = 0.0  # as the engine does at an episode end
    assert len(seen) == 2
    for k, s in enumerate(seen):
        drawn = torch.as_tensor(np.stack(behaviour[k * T : (k + 1) * T]))
        torch.testing.assert_close(s["logp"], drawn, atol=1e-5, rtol=0)
        torch.testing.assert_close(s["v"], s["value"], atol=1e-5, rtol=0)
        torch.testing.assert_close(s["next_value"][-1], s["v_last"], atol=1e-5, rtol=0)
        torch.testing.assert_close(s["starts"][1:], s["done"][:-1].bool())
    first, second = seen
    torch.testing.assert_close(second["starts"][0], first["done"][-1].bool())
    assert first["starts"].any() and second["starts"].any()
    assert agent.rollout.state0.abs().sum() > 0  # the second rollout went on from the first


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
