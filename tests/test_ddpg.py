"""DDPG: multi-head targets and losses by hand, soft updates, noise, checkpoints, Pendulum."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from recurrent_seq import SEQ, positions
from wheeler2.agents.ddpg import DDPG, Params

from wheeler2.agent import ActOut, Batch, SpaceInfo, Transitions

TWO_HEADS = SpaceInfo(
    obs_dim=2, act_dim=1, discrete=False, heads=("a", "b"), head_weights=(1.0, 0.5)
)
C = np.array([1.0, 0.5])  # the head weights

# Linear nets (no hidden layers): mu(s) = tanh(W s + b), Q_h(s, a) = w_h . [s, a] + b_h.
ACTOR = ([1.0, 0.0], 0.0)
ACTOR_T = ([0.5, -0.5], 0.0)
Q = (([0.5, 0.5, 0.5], 0.0), ([1.0, -1.0, 0.0], 0.2))
Q_T = (([1.0, 0.0, 2.0], 0.1), ([0.0, 1.0, -1.0], 0.0))


def _set(linear: torch.nn.Linear, weight: list[float], bias: float) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([weight]))
        linear.bias.fill_(bias)


def _linear_agent(space: SpaceInfo = TWO_HEADS, **overrides) -> DDPG:
    """Two heads, no hidden layers: mu(s) = tanh(W s + b), Q_h(s, a) = w_h . [s, a] + b_h."""
    params = Params(hidden=[], learning_starts=0, **overrides)
    agent = DDPG(space, params)
    _set(agent.actor_net.head, *ACTOR)
    _set(agent.actor_target.head, *ACTOR_T)
    for h in (0, 1):
        _set(agent.critic.nets[h].head, *Q[h])
        _set(agent.critic_target.nets[h].head, *Q_T[h])
    return agent


def _batch() -> Batch:
    return Batch(
        obs=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        action=torch.tensor([[0.5], [-0.5]]),
        reward=torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
        next_obs=torch.tensor([[1.0, 1.0], [2.0, 0.0]]),
        discount=torch.tensor([0.9, 0.0]),
        weight=torch.tensor([1.0, 2.0]),
        index=np.arange(2),
    )


def test_two_head_critic_targets_and_loss_by_hand():
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0)
    out = agent.learn(_batch())
    # mu'(s') = tanh(.5 s1 - .5 s2) = [0, tanh(1)];  Q'_a(s'_1) = 1.1, Q'_b(s'_1) = 1
    # y = [[1 + .9 * 1.1, 0 + .9 * 1], [0, 2]] (second sample: discount 0, no bootstrap)
    # Q(s, a) = [[.75, 1.2], [.25, -.8]]  ->  td = [[1.24, -.3], [-.25, 2.8]]
    # head losses (importance weights 1, 2): a: (1.5376 + 2 * .0625) / 2, b: (.09 + 2 * 7.84) / 2
    assert out.metrics["critic_loss/a"] == pytest.approx(0.8313, abs=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(7.885, abs=1e-5)
    assert out.metrics["critic_loss"] == pytest.approx(0.8313 + 7.885, abs=1e-5)
    assert out.metrics["q_mean"] == pytest.approx((0.75 + 1.2 + 0.25 - 0.8) / 4, abs=1e-6)
    # priorities: head-weighted mean of |td|: [(1.24 + .5 * .3) / 1.5, (.25 + .5 * 2.8) / 1.5]
    np.testing.assert_allclose(out.td_error, [1.39 / 1.5, 1.65 / 1.5], rtol=1e-5)
    assert out.td_error.shape == (2,)


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # td = [[1.24, -.3], [-.25, 2.8]] as above; a cost head (negative weight) counts by its
        # size: (1, -0.5) gives the priorities of (1, 0.5), not (|td_a| - .5 |td_b|) / .5.
        ((1.0, -0.5), [1.39 / 1.5, 1.65 / 1.5]),
        # Weights that sum to 0 gave inf (the buffer then kept every sample at the max).
        ((1.0, -1.0), [(1.24 + 0.3) / 2, (0.25 + 2.8) / 2]),
        ((0.0, 0.0), [(1.24 + 0.3) / 2, (0.25 + 2.8) / 2]),  # all 0: the plain mean
    ],
)
def test_priorities_weigh_the_heads_by_the_size_of_their_weights(weights, expected):
    space = dataclasses.replace(TWO_HEADS, head_weights=weights)
    out = _linear_agent(space, lr_critic=0.0, lr_actor=0.0).learn(_batch())
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)


def test_actor_loss_is_the_weighted_sum_of_head_values():
    agent = _linear_agent(lr_critic=0.0)  # the critic stays as set, so the loss is checkable
    out = agent.learn(_batch())
    # mu(s) = tanh(s1) = [tanh(1), 0]
    # s_1: Q_a = .5 + .5 tanh(1), Q_b = 1 + .2;  s_2: Q_a = .5, Q_b = -1 + .2
    t = np.tanh(1.0)
    q_a = np.array([0.5 + 0.5 * t, 0.5])
    q_b = np.array([1.2, -0.8])
    assert out.metrics["actor_loss"] == pytest.approx(-np.mean(1.0 * q_a + 0.5 * q_b), abs=1e-6)
    # The same quantity through the agent's nets after the step, with autograd's gradient on W:
    # dL/dW = -mean_i (sum_h c_h dQ_h/da) (1 - mu^2) s_i = -mean_i (.5 + 0) (1 - mu_i^2) s_i
    grad_w0 = -0.5 * (0.5 * (1 - t**2) * 1.0)
    assert agent.actor_net.head.weight.grad[0, 0].item() == pytest.approx(grad_w0, abs=1e-6)


def test_actor_loss_sums_the_heads_and_averages_the_samples():
    """Three samples and two heads: -mean_i sum_h c_h Q_h(s_i, mu(s_i)) (with as many samples
    as heads, summing over the samples and averaging over the heads gives the same number)."""
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0)
    s = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, -1.0]])
    batch = Batch(
        obs=torch.tensor(s, dtype=torch.float32),
        action=torch.zeros(3, 1),
        reward=torch.zeros(3, 2),
        next_obs=torch.zeros(3, 2),
        discount=torch.zeros(3),
        weight=torch.ones(3),
        index=np.arange(3),
    )
    out = agent.learn(batch)
    expected = -(_q(Q, s, _mu(ACTOR, s)) * C).sum(-1).mean()
    assert out.metrics["actor_loss"] == pytest.approx(expected, rel=1e-6)


def test_shared_critic_has_one_output_per_head():
    agent = DDPG(TWO_HEADS, Params(hidden=[8], critic="shared"))
    assert len(agent.critic.nets) == 1 and agent.critic.nets[0].head.out_features == 2
    out = agent.learn(_batch())
    assert {"critic_loss/a", "critic_loss/b"} <= set(out.metrics)


def test_soft_update_formula():
    tau = 0.1
    agent = DDPG(TWO_HEADS, Params(hidden=[8], tau=tau))
    with torch.no_grad():  # targets different from the online nets, so the blend is visible
        for p in agent.target_params:
            p.add_(1.0)
    old_target = [p.detach().clone() for p in agent.target_params]
    agent.learn(_batch())
    online = agent.online_params
    assert len(online) == len(old_target)
    for target, old, new in zip(agent.target_params, old_target, online):
        torch.testing.assert_close(target, (1 - tau) * old + tau * new.detach())


def test_policy_delay():
    agent = DDPG(TWO_HEADS, Params(hidden=[8], policy_delay=2))
    actor0 = [p.detach().clone() for p in agent.actor_params]
    out = agent.learn(_batch())
    assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))
    assert out.metrics["actor_loss"] == 0.0  # no actor step yet, so no actor loss
    agent.learn(_batch())
    assert any(not torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))


def test_a_policy_delay_below_one_is_refused():
    with pytest.raises(ValueError, match="policy_delay must be >= 1, got 0"):
        DDPG(TWO_HEADS, Params(hidden=[8], policy_delay=0))


def test_random_actions_until_learning_starts_and_noise():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = DDPG(space, Params(hidden=[8], learning_starts=6, noise="ou", noise_std=0.5))
    obs = np.zeros((3, 3), np.float32)
    greedy = agent.act(obs, explore=False).action
    first = agent.act(obs, explore=True).action
    assert first.dtype == np.float32 and first.shape == (3, 2)
    assert not np.allclose(first, greedy)  # uniform, not the policy
    step = Transitions(
        obs,
        first,
        np.zeros((3, 1), np.float32),
        obs,
        np.zeros(3, bool),
        np.zeros(3, bool),
        obs,
        ActOut(first),
    )
    agent.observe(step)
    agent.observe(step)  # 6 env steps: the policy acts from now on, with OU noise
    assert agent.env_steps == 6
    noisy = agent.act(obs, explore=True).action
    assert np.abs(noisy).max() <= 1.0
    assert agent.noise.state is not None and np.abs(agent.noise.state).sum() > 0
    done = Transitions(
        obs,
        noisy,
        np.zeros((3, 1), np.float32),
        obs,
        np.array([True, False, False]),
        np.array([False, False, True]),
        obs,
        ActOut(noisy),
    )
    agent.observe(done)
    assert np.all(agent.noise.state[[0, 2]] == 0) and np.all(agent.noise.state[1] != 0)


def _assert_same(a, b, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_checkpoint_round_trip_restores_weights_and_optimizers():
    params = Params(hidden=[8, 8], normalize_heads=True, learning_starts=0)
    agent = DDPG(TWO_HEADS, params, seed=0)
    for _ in range(3):
        agent.learn(_batch())
    agent.env_steps = 123
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    restored = DDPG(TWO_HEADS, params, seed=1)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    _assert_same(agent.state_dict(), restored.state_dict())
    assert restored.actor_opt.state_dict()["state"]  # Adam moments really came back
    # Same state -> same next step, bit for bit.
    out_a, out_b = agent.learn(_batch()), restored.learn(_batch())
    assert out_a.metrics == out_b.metrics
    _assert_same(agent.state_dict(), restored.state_dict())


def test_normalize_heads_balances_scales():
    """normalize_heads: the running mean / mean square of each head's Q(s, mu(s)) follow the
    observed head values (EMA with head_norm_decay from 0 and 1), and the actor loss divides
    each head by the running std computed from them."""
    d = 0.5
    # Learning rates ~0: the nets stay put, so every update observes the same head values.
    agent = _linear_agent(normalize_heads=True, head_norm_decay=d, lr_actor=1e-12, lr_critic=1e-12)
    batch = _batch()
    with torch.no_grad():
        q_pi = agent.critic(batch.obs, agent.actor_net(batch.obs))  # [B, H]
    mean, sq = q_pi.mean(0), q_pi.pow(2).mean(0)
    assert not torch.allclose(sq, torch.ones(2), atol=0.1)  # the statistic has to move
    for n in range(1, 6):
        out = agent.learn(batch)
        torch.testing.assert_close(agent.head_q_mean, (1 - d**n) * mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(agent.head_q_sq, d**n + (1 - d**n) * sq, rtol=1e-5, atol=1e-6)
    std = (agent.head_q_sq - agent.head_q_mean.pow(2)).clamp_min(0).sqrt().clamp_min(1e-3)
    expected = -(q_pi / std * torch.tensor([1.0, 0.5])).sum(-1).mean()
    assert out.metrics["actor_loss"] == pytest.approx(float(expected), rel=1e-5)


def _q(table: tuple, s: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Q_h(s, a) of the linear critic ``table``, ``[N, H]``, in numpy."""
    x = np.concatenate([s, a], axis=1)
    return np.stack([x @ np.array(w) + b for w, b in table], axis=-1)


def _mu(weights: tuple, s: np.ndarray) -> np.ndarray:
    return np.tanh(s @ np.array(weights[0]) + weights[1])[:, None]


def _recurrent_linear_agent(**overrides) -> DDPG:
    """``_linear_agent``'s nets behind GRU cores whose weights are all 0: from the zero state
    every core output is 0, so the MLPs on [core output, obs] see the feedforward inputs."""
    params = Params(
        hidden=[], learning_starts=0, core="gru", core_size=2, seq_length=2, seq_burn_in=0
    )
    agent = DDPG(TWO_HEADS, dataclasses.replace(params, **overrides))
    with torch.no_grad():
        for net in (agent.actor_net, agent.actor_target, agent.critic, agent.critic_target):
            for w in net.core.parameters():
                w.zero_()
    silent = [0.0, 0.0]  # the weights of the core's two outputs
    _set(agent.actor_net.mlp.head, silent + ACTOR[0], ACTOR[1])
    _set(agent.actor_target.mlp.head, silent + ACTOR_T[0], ACTOR_T[1])
    for h in (0, 1):
        _set(agent.critic.q.nets[h].head, silent + Q[h][0], Q[h][1])
        _set(agent.critic_target.q.nets[h].head, silent + Q_T[h][0], Q_T[h][1])
    return agent


def test_recurrent_losses_and_priorities_by_hand_per_position():
    """The DDPG losses over the 3 trained positions of two sequences (the padded one left out),
    and one priority per sequence: 0.9 max + 0.1 mean of its positions' |TD|."""
    agent = _recurrent_linear_agent(lr_critic=0.0, lr_actor=0.0)
    out = agent.learn(Batch.from_numpy(SEQ, "cpu"))
    s, a, r, s2 = (positions(k) for k in ("obs", "action", "reward", "next_obs"))
    discount, w = positions("discount"), np.array([1.0, 2.0, 1.0])  # (t, b) = 00, 01, 10
    y = r + discount[:, None] * _q(Q_T, s2, _mu(ACTOR_T, s2))
    q = _q(Q, s, a)
    head_losses = (w[:, None] * (y - q) ** 2).sum(0) / 3
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    assert out.metrics["critic_loss"] == pytest.approx(head_losses.sum(), rel=1e-5)
    assert out.metrics["q_mean"] == pytest.approx(q.mean(), rel=1e-5)
    actor_loss = -(_q(Q, s, _mu(ACTOR, s)) * C).sum(-1).mean()
    assert out.metrics["actor_loss"] == pytest.approx(actor_loss, rel=1e-5)
    abs_td = (np.abs(y - q) * C).sum(-1) / C.sum()
    first = abs_td[[0, 2]]  # the first sequence's two positions; the second has one
    expected = [0.9 * first.max() + 0.1 * first.mean(), abs_td[1]]
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)


def test_recurrent_normalize_heads_takes_statistics_of_trained_positions_only():
    d = 0.5
    agent = _recurrent_linear_agent(
        normalize_heads=True, head_norm_decay=d, lr_critic=0.0, lr_actor=0.0
    )
    out = agent.learn(Batch.from_numpy(SEQ, "cpu"))
    s = positions("obs")  # the padded position (t = 1 of sequence 1) is not among them
    q_pi = _q(Q, s, _mu(ACTOR, s))  # [3, H]
    mean, sq = q_pi.mean(0), (q_pi**2).mean(0)
    # One EMA step from mean 0 and mean square 1.
    np.testing.assert_allclose(agent.head_q_mean.numpy(), (1 - d) * mean, rtol=1e-5)
    np.testing.assert_allclose(agent.head_q_sq.numpy(), d + (1 - d) * sq, rtol=1e-5)
    std = np.sqrt(d + (1 - d) * sq - ((1 - d) * mean) ** 2)
    actor_loss = -(q_pi / std * C).sum(-1).mean()
    assert out.metrics["actor_loss"] == pytest.approx(actor_loss, rel=1e-5)


def test_normalize_heads_floors_the_scale_of_a_head_with_no_spread():
    """A head whose Q is the same everywhere has running std 0 with head_norm_decay = 0 (the
    statistics are the last batch's): its scale is floored at 1e-3, not divided by 0."""
    agent = _linear_agent(normalize_heads=True, head_norm_decay=0.0, lr_critic=0.0, lr_actor=0.0)
    _set(agent.critic.nets[0].head, [0.0, 0.0, 0.0], 0.5)
    _set(agent.critic.nets[1].head, [0.0, 0.0, 0.0], -0.25)
    out = agent.learn(_batch())
    np.testing.assert_array_equal(agent.head_q_mean.numpy(), [0.5, -0.25])
    assert out.metrics["actor_loss"] == pytest.approx(-(0.5 * 1.0 - 0.25 * 0.5) / 1e-3)


@pytest.mark.parametrize("core", ["none", "gru"])
def test_actions_before_learning_starts_are_uniform_over_the_action_box(core):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = DDPG(space, Params(hidden=[8], learning_starts=10**6, core=core, core_size=4))
    a = agent.act(np.zeros((2000, 3), np.float32), explore=True).action
    assert a.shape == (2000, 2) and a.min() >= -1.0 and a.max() <= 1.0
    # The whole box, half the draws on each side of 0 (the count's std is ~32 of 4000).
    assert a.min() < -0.99 and a.max() > 0.99
    assert abs((a > 0).mean() - 0.5) < 0.05


@pytest.mark.parametrize("core", ["none", "gru"])
def test_ou_noise_is_added_to_the_greedy_action_step_by_step(core):
    """Ornstein-Uhlenbeck, x_{k+1} = x_k - theta x_k dt + std sqrt(dt) N(0, 1) from x_0 = 0, its
    normal draws replayed from the noise's seed (the agent's seed + 1), added to mu(s)."""
    # theta dt = 0.5: the pull toward 0 is plain to see; std 5: some actions leave [-1, 1].
    std, theta, dt = 5.0, 5.0, 0.1
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    params = Params(
        hidden=[8], learning_starts=0, noise="ou", noise_std=std, ou_theta=theta, ou_dt=dt
    )
    agent = DDPG(space, dataclasses.replace(params, core=core, core_size=4), seed=0)
    obs = np.array([[0.1, -0.2, 0.3], [1.0, 0.5, -1.0]], np.float32)
    greedy = agent.act(obs, explore=False).action
    draws = np.random.default_rng(1)
    x, unclipped = np.zeros((2, 2)), []
    for _ in range(4):
        x = x - theta * x * dt + std * draws.normal(0.0, np.sqrt(dt), (2, 2))
        got = agent.act(obs, explore=True).action
        np.testing.assert_allclose(got, np.clip(greedy + x, -1.0, 1.0), atol=1e-6)
        unclipped.append(greedy + x)
    # Both ends clipped somewhere, and some actions inside the box.
    u = np.stack(unclipped)
    assert (u > 1).any() and (u < -1).any() and (np.abs(u) < 1).any()


@pytest.mark.parametrize("core", ["none", "gru"])
def test_the_policy_acts_from_exactly_learning_starts_env_steps(core):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    params = Params(hidden=[8], learning_starts=4, noise="none", core=core, core_size=4)
    agent = DDPG(space, params)
    obs = np.array([[0.1, -0.2, 0.3], [1.0, 0.5, -1.0]], np.float32)
    greedy = agent.act(obs, explore=False).action
    z = np.zeros(2, bool)
    for steps in (2, 4):
        a = agent.act(obs, explore=True).action
        step = Transitions(obs, a, np.zeros((2, 1), np.float32), obs, z, z, obs, ActOut(a))
        assert not np.allclose(a, greedy)  # 0 and 2 env steps: uniform actions
        agent.observe(step)
        assert agent.env_steps == steps
    np.testing.assert_array_equal(agent.act(obs, explore=True).action, greedy)


def test_a_detached_explorer_trains_its_actor_from_exactly_learning_starts():
    params = Params(hidden=[8], learning_starts=4, head="a", head_updates=1.0, head_batch=2)
    agent = DDPG(TWO_HEADS, params)
    obs = np.array([[0.1, -0.2], [1.0, 0.5]], np.float32)
    a, z = np.zeros((2, 1), np.float32), np.zeros(2, bool)
    step = Transitions(obs, a, np.zeros((2, 2), np.float32), obs, z, z, obs, ActOut(a))
    assert agent.observe(step) is None  # 2 env steps
    metrics = agent.observe(step)  # 4: two updates of the head's actor, one per step
    assert metrics is not None and metrics["head_q"] == -metrics["head_actor_loss"]


def test_a_core_with_an_option_it_does_not_combine_with_is_refused_by_name():
    with pytest.raises(ValueError, match='^features: features = "rbf" encodes one observation'):
        DDPG(TWO_HEADS, Params(hidden=[8], core="gru", features="rbf"))


def test_the_weight_views_follow_steps_and_loads():
    """compile = true reads the nets through views made once; optimizer steps, target updates
    and checkpoint loads, all in place, must show through them."""
    agent = DDPG(TWO_HEADS, Params(hidden=[8], learning_starts=0), seed=1)
    other = DDPG(TWO_HEADS, Params(hidden=[8], learning_starts=0), seed=2)
    obs = torch.randn(5, 2, generator=torch.Generator().manual_seed(0))
    act = torch.rand(5, 1, generator=torch.Generator().manual_seed(1))

    def same_as_modules(a: DDPG) -> None:
        with torch.no_grad():
            for name in ("critic", "critic_target"):
                torch.testing.assert_close(a._bound(name)(obs, act), getattr(a, name)(obs, act))
            for name in ("actor_net", "actor_target"):
                torch.testing.assert_close(a._bound(name)(obs), getattr(a, name)(obs))

    before = agent._bound("critic")(obs, act).detach()
    agent.learn(_batch())
    same_as_modules(agent)
    agent.load_state_dict(other.state_dict())
    same_as_modules(agent)
    assert not torch.allclose(agent.critic(obs, act), before)  # what they read did change


def test_a_recurrent_core_refuses_compile_by_name():
    with pytest.raises(ValueError, match="^compile: compile = true compiles the feedforward"):
        DDPG(TWO_HEADS, Params(hidden=[8], core="gru", compile=True))


def _random_batch(g: torch.Generator, size: int = 16) -> Batch:
    return Batch(
        obs=torch.randn(size, 2, generator=g),
        action=torch.rand(size, 1, generator=g) * 2 - 1,
        reward=torch.randn(size, 2, generator=g),
        next_obs=torch.randn(size, 2, generator=g),
        discount=torch.where(torch.rand(size, generator=g) < 0.2, 0.0, 0.99),
        weight=torch.rand(size, generator=g) + 0.5,
        index=np.arange(size),
    )


def _assert_same_run(ref: DDPG, other: DDPG, steps: int = 4, tol: float = 1e-5) -> None:
    """``steps`` learn calls on the same batches leave both agents with the same weights,
    priorities, metrics and running head statistics."""
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        batch = _random_batch(g)
        a, b = ref.learn(batch), other.learn(batch)
        np.testing.assert_allclose(b.td_error, a.td_error, rtol=tol, atol=tol / 10)
        assert b.metrics.keys() == a.metrics.keys()
        for k in a.metrics:
            assert b.metrics[k] == pytest.approx(a.metrics[k], rel=tol, abs=tol / 10), (step, k)
    for net in ("actor_net", "critic", "actor_target", "critic_target"):
        for (name, x), y in zip(
            getattr(ref, net).named_parameters(), getattr(other, net).parameters()
        ):
            torch.testing.assert_close(y, x, rtol=tol, atol=tol / 10, msg=f"{net}.{name}")
    torch.testing.assert_close(other.head_q_sq, ref.head_q_sq, rtol=tol, atol=tol / 10)
    assert other.updates == ref.updates == steps


COMPILE_CASE = dict(hidden=[8, 8], normalize_heads=True, policy_delay=2, learning_starts=0)


@pytest.mark.parametrize("normalize_heads", [True, False])
def test_the_step_on_functional_gradients_is_the_autograd_step(normalize_heads: bool):
    """compile = true takes the losses' gradients with torch.func over weight views and steps
    on them; run here untraced (the same functions the compiler traces), it must be the
    autograd step, with the actor branch (policy_delay) and normalize_heads."""
    case = {**COMPILE_CASE, "normalize_heads": normalize_heads}
    eager = DDPG(TWO_HEADS, Params(**case), seed=3)
    functional = DDPG(TWO_HEADS, Params(**case), seed=3)
    functional._compiled = (functional._critic_grads, functional._actor_grads)
    _assert_same_run(eager, functional)


@pytest.mark.slow  # inductor compiles C++ kernels: about a minute on two busy cores
@pytest.mark.timeout(900)
def test_the_compiled_step_is_the_eager_step():
    eager = DDPG(TWO_HEADS, Params(**COMPILE_CASE), seed=3)
    compiled = DDPG(TWO_HEADS, Params(compile=True, **COMPILE_CASE), seed=3)
    assert compiled._compiled is not None
    _assert_same_run(eager, compiled)


# ------------------------------------------------------------------------------------------
# learning check


def run_pendulum(seed: int, total: int, learning_starts: int, eval_every: int = 2000):
    """DDPG with zoo hyperparameters on Pendulum-v1, one env, a tiny uniform numpy buffer.

    Returns a list of (env steps, mean return of 10 greedy episodes, training wall seconds).
    """
    import time

    import gymnasium as gym

    env, eval_env = gym.make("Pendulum-v1"), gym.make("Pendulum-v1")
    agent = DDPG(SpaceInfo(3, 1, False), Params(learning_starts=learning_starts), seed=seed)
    gamma, batch_size = agent.params.gamma, 256
    store = {
        "obs": np.zeros((total, 3), np.float32),
        "action": np.zeros((total, 1), np.float32),
        "reward": np.zeros((total, 1), np.float32),
        "next_obs": np.zeros((total, 3), np.float32),
        "discount": np.zeros(total, np.float32),
    }
    ones = np.ones(batch_size, np.float32)
    rng = np.random.default_rng(seed)

    def evaluate() -> float:
        returns = []
        for i in range(10):
            o, _ = eval_env.reset(seed=10_000 + i)
            done, ret = False, 0.0
            while not done:
                a = agent.act(o[None].astype(np.float32), explore=False).action[0]
                o, r, term, trunc, _ = eval_env.step(2.0 * a)  # [-1, 1] -> Box [-2, 2]
                ret, done = ret + r, term or trunc
            returns.append(ret)
        return float(np.mean(returns))

    curve, wall = [], 0.0
    obs, _ = env.reset(seed=seed)
    start = time.perf_counter()
    for t in range(total):
        out = agent.act(obs[None].astype(np.float32), explore=True)
        nxt, r, term, trunc, _ = env.step(2.0 * out.action[0])
        for key, value in (
            ("obs", obs),
            ("action", out.action[0]),
            ("reward", r),
            ("next_obs", nxt),
            ("discount", gamma * (1.0 - term)),
        ):
            store[key][t] = value
        agent.observe(
            Transitions(
                obs[None],
                out.action,
                np.array([[r]], np.float32),
                nxt[None],
                np.array([term]),
                np.array([trunc]),
                nxt[None],
                out,
            )
        )
        obs = env.reset()[0] if term or trunc else nxt
        if t + 1 >= learning_starts:
            idx = rng.integers(0, t + 1, batch_size)
            sample = {k: v[idx] for k, v in store.items()} | {"weight": ones, "index": idx}
            agent.learn(Batch.from_numpy(sample, "cpu"))
        if (t + 1) % eval_every == 0:
            wall += time.perf_counter() - start
            curve.append((t + 1, evaluate(), wall))
            start = time.perf_counter()
    return curve


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ddpg_learns_pendulum():
    curve = run_pendulum(seed=0, total=12_000, learning_starts=1000)
    for steps, ret, wall in curve:
        print(f"DDPG Pendulum-v1: {steps} env steps, eval {ret:.1f}, {wall:.1f} s training")
    assert max(ret for _, ret, _ in curve) > -400
