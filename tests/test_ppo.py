"""PPO: GAE and the clipped objective by hand, rollout bookkeeping, and a CartPole check."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
from wheeler2.agents.onpolicy import Rollout
from wheeler2.agents.ppo import PPO, Params, clipped_surrogate, gae

from wheeler2.agent import ActOut, SpaceInfo, Transitions


def test_gae_by_hand_with_terminated_and_truncated_steps():
    gamma, lam = 0.9, 0.8
    # Column 0: step 1 terminated, step 2 truncated (its final obs is worth 7, the reset obs
    # that follows is worth values[3] = 2: bootstrapping from the reset obs would be wrong).
    # Column 1: no episode end, so the recursion runs through all four steps.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]])
    next_values = torch.tensor([[1.0, 0.0], [9.0, 0.0], [7.0, 0.0], [3.0, 0.0]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [1, 0], [0, 0]], dtype=torch.bool)

    adv = gae(rewards, values, next_values, terminated, terminated | truncated, gamma, lam)

    # delta_0 = 1 + .9 * 1 - .5 = 1.4   delta_1 = 2 - 1 = 1 (no bootstrap)
    # delta_2 = 3 + .9 * 7 - 1.5 = 7.8  delta_3 = 4 + .9 * 3 - 2 = 4.7
    # A_3 = 4.7; A_2 = 7.8 (episode ended); A_1 = 1.0; A_0 = 1.4 + .72 * 1.0 = 2.12
    # column 1: delta = 1 everywhere; A_3 = 1, A_2 = 1.72, A_1 = 2.2384, A_0 = 2.611648
    expected = torch.tensor([[2.12, 2.611648], [1.0, 2.2384], [7.8, 1.72], [4.7, 1.0]])
    torch.testing.assert_close(adv, expected)


def test_clipped_surrogate_by_hand():
    ratio = torch.tensor([0.5, 1.1, 1.5, 0.5, 1.1, 1.5], requires_grad=True)
    adv = torch.tensor([2.0, 2.0, 2.0, -1.0, -1.0, -1.0])
    # A > 0: min(r A, clip(r) A) = [min(1, 1.6), 2.2, min(3, 2.4)] = [1, 2.2, 2.4]
    # A < 0: [min(-.5, -.8), -1.1, min(-1.5, -1.2)] = [-.8, -1.1, -1.5]
    per_sample = [1.0, 2.2, 2.4, -0.8, -1.1, -1.5]
    for i, want in enumerate(per_sample):
        got = clipped_surrogate(ratio[i : i + 1], adv[i : i + 1], 0.2)
        assert got.item() == pytest.approx(want), i
    objective = clipped_surrogate(ratio, adv, 0.2)
    assert objective.item() == pytest.approx(sum(per_sample) / 6)
    objective.backward()
    # Where the clipped term is the minimum the sample gives no gradient: that is the point.
    expected_grad = torch.tensor([2.0, 2.0, 0.0, 0.0, -1.0, -1.0]) / 6
    torch.testing.assert_close(ratio.grad, expected_grad)


def _step(agent: PPO, obs: np.ndarray, rng: np.random.Generator, n: int) -> Transitions:
    out = agent.act(obs, explore=True)
    nxt = rng.normal(size=obs.shape).astype(np.float32)
    term = rng.random(n) < 0.1
    trunc = ~term & (rng.random(n) < 0.1)
    reset = np.where((term | trunc)[:, None], rng.normal(size=obs.shape), nxt).astype(np.float32)
    reward = rng.normal(size=(n, agent.space.num_heads)).astype(np.float32)
    return Transitions(obs, out.action, reward, nxt, term, trunc, reset, out)


@pytest.mark.parametrize("discrete", [False, True])
def test_rollout_update_cycle(discrete):
    space = SpaceInfo(
        obs_dim=3, act_dim=2, discrete=discrete, heads=("a", "b"), head_weights=(1.0, 0.5)
    )
    agent = PPO(space, Params(n_steps=8, batch_size=16, n_epochs=2, hidden=[16], log_std_init=1.0))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    results = []
    for _ in range(16):
        step = _step(agent, obs, rng, 4)
        if not discrete:
            assert np.abs(step.action).max() <= 1.0
            assert np.abs(step.act_out.extras["raw_action"]).max() > 1.0  # clipped for the env
        assert step.act_out.extras["value"].shape == (4,)
        results.append(agent.observe(step))
        obs = step.reset_obs
    updates = [i for i, m in enumerate(results) if m is not None]
    assert updates == [7, 15]  # after n_steps vector steps, twice
    assert agent.env_steps == 64 and agent.updates == 2
    assert {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"} <= set(results[7])
    after = list(agent.actor.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


def test_first_epoch_ratio_is_one():
    """The stored behaviour log-prob (of the unclipped sample) matches the policy before the
    first gradient step: with one epoch of one minibatch nothing is clipped."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    params = Params(n_steps=8, batch_size=32, n_epochs=1, hidden=[16], log_std_init=1.0)
    agent = PPO(space, params)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    metrics = None
    while metrics is None:
        step = _step(agent, obs, rng, 4)
        metrics = agent.observe(step)
        obs = step.reset_obs
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["clip_fraction"] == 0.0


def test_linear_schedules():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    with pytest.raises(ValueError):
        PPO(space, Params(lr_schedule="linear"))
    PPO(space, Params(hidden=[8], clip_schedule="linear", total_steps=1))  # any budget will do
    params = Params(
        n_steps=4,
        batch_size=8,
        n_epochs=1,
        hidden=[8],
        lr=1e-3,
        lr_schedule="linear",
        clip_schedule="linear",
        total_steps=32,
    )
    agent = PPO(space, params)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    seen = []
    for _ in range(16):
        step = _step(agent, obs, rng, 2)
        m = agent.observe(step)
        obs = step.reset_obs
        if m is not None:
            seen.append((m["lr"], m["clip_range"]))
    # progress measured after each rollout, as in SB3: 1 - 8/32, 1 - 16/32, ...
    np.testing.assert_allclose(seen, [(1e-3 * f, 0.2 * f) for f in (0.75, 0.5, 0.25, 0.0)])


def test_state_dict_round_trip():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    params = Params(n_steps=4, batch_size=8, n_epochs=1, hidden=[8])
    agent = PPO(space, params, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    for _ in range(8):
        step = _step(agent, obs, rng, 2)
        agent.observe(step)
        obs = step.reset_obs
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    other = PPO(space, params, seed=1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    for (n, a), (_, b) in zip(
        agent.state_dict()["policy"].items(), other.state_dict()["policy"].items()
    ):
        assert torch.equal(a, b), n
    assert other.env_steps == 16 and other.updates == 2
    # Adam's moments and step counts, exactly (not through a 4-decimal str()).
    _assert_same(other.opt.state_dict(), agent.opt.state_dict())
    assert agent.opt.state_dict()["state"]  # there were moments to restore
    # Same state -> same next rollout update, bit for bit (the state is RNG-free by contract:
    # both sampling generators are seeded alike here).
    agent.gen.manual_seed(7)
    other.gen.manual_seed(7)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(4):
        m_a = agent.observe(_step(agent, obs, rng_a, 2))
        m_b = other.observe(_step(other, obs, rng_b, 2))
    assert m_a is not None and m_a == m_b
    _assert_same(agent.state_dict(), other.state_dict())


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


def test_truncated_step_stores_and_bootstraps_from_the_final_observation(monkeypatch):
    """A time-limit truncation: the rollout stores the env's final observation of the episode
    (``next_obs``), not the reset observation the agent acts on next, and GAE bootstraps that
    step from V(final obs), while the step is still a done (no advantage leaks across)."""
    import wheeler2.agents.ppo as ppo_module

    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = PPO(space, Params(n_steps=2, batch_size=4, n_epochs=1, hidden=[8]), seed=0)
    seen = {}
    real_gae = ppo_module.gae

    def spy(reward, values, next_values, terminated, dones, gamma, lam):  # noqa: ANN001
        seen.update(next_values=next_values.clone(), terminated=terminated, dones=dones)
        return real_gae(reward, values, next_values, terminated, dones, gamma, lam)

    monkeypatch.setattr(ppo_module, "gae", spy)
    obs = np.array([[0.1, 0.2, 0.3]], np.float32)
    final = np.array([[5.0, -5.0, 5.0]], np.float32)
    reset = np.array([[-3.0, 3.0, -3.0]], np.float32)
    with torch.no_grad():
        v_final = agent.critic(torch.as_tensor(final)).item()
        v_reset = agent.critic(torch.as_tensor(reset)).item()
    assert v_final != pytest.approx(v_reset, abs=1e-4)  # the two choices are distinguishable
    out = agent.act(obs, explore=True)
    no, yes = np.zeros(1, bool), np.ones(1, bool)
    reward = np.ones((1, 1), np.float32)
    assert agent.observe(Transitions(obs, out.action, reward, final, no, yes, reset, out)) is None
    np.testing.assert_array_equal(agent.rollout.next_obs[0].numpy(), final)
    out = agent.act(reset, explore=True)
    nxt = reset + 0.5
    assert agent.observe(Transitions(reset, out.action, reward, nxt, no, no, nxt, out)) is not None
    assert seen["next_values"][0, 0].item() == pytest.approx(v_final, abs=1e-6)
    assert seen["terminated"][0, 0] == 0 and seen["dones"][0, 0] == 1


# ------------------------------------------------------------------------------------------
# learning check


def run_cartpole(seed: int, total: int = 100_000, num_envs: int = 8) -> tuple[int, float]:
    """rl-zoo CartPole-v1 PPO hyperparameters; evaluate 10 greedy episodes every 8 updates.

    Returns (env steps when the eval mean first reached 475 or -1, training wall seconds).
    """
    import time

    import gymnasium as gym

    params = Params(
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        lr=1e-3,
        lr_schedule="linear",
        clip_range=0.2,
        clip_schedule="linear",
        total_steps=total,
    )
    agent = PPO(SpaceInfo(obs_dim=4, act_dim=2, discrete=True), params, seed=seed)
    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    eval_env = gym.make("CartPole-v1")
    obs = np.stack([e.reset(seed=seed * 100 + i)[0] for i, e in enumerate(envs)])
    obs = obs.astype(np.float32)

    def evaluate() -> float:
        returns = []
        for i in range(10):
            o, _ = eval_env.reset(seed=10_000 + i)
            done, ret = False, 0.0
            while not done:
                a = agent.act(o[None].astype(np.float32), explore=False).action[0]
                o, r, term, trunc, _ = eval_env.step(int(a))
                ret, done = ret + r, term or trunc
            returns.append(ret)
        return float(np.mean(returns))

    steps, wall, start = 0, 0.0, time.perf_counter()
    while steps < total:
        out = agent.act(obs, explore=True)
        nxt, reset = np.empty_like(obs), np.empty_like(obs)
        reward = np.zeros((num_envs, 1), np.float32)
        term, trunc = np.zeros(num_envs, bool), np.zeros(num_envs, bool)
        for i, env in enumerate(envs):
            o, reward[i, 0], term[i], trunc[i], _ = env.step(int(out.action[i]))
            nxt[i] = o
            reset[i] = env.reset()[0] if term[i] or trunc[i] else o
        metrics = agent.observe(Transitions(obs, out.action, reward, nxt, term, trunc, reset, out))
        obs, steps = reset, steps + num_envs
        if metrics is not None and agent.updates % 8 == 0:
            wall += time.perf_counter() - start
            if evaluate() >= 475:
                return steps, wall
            start = time.perf_counter()
    return -1, wall


@pytest.mark.slow
def test_ppo_solves_cartpole():
    steps, wall = run_cartpole(seed=0)
    print(f"PPO CartPole-v1: eval >= 475 at {steps} env steps, {wall:.1f} s training")
    assert 0 < steps <= 100_000


@pytest.mark.parametrize("absent", [True, False])
@pytest.mark.parametrize("clip_range_vf", [0.05, 0.0])
def test_update_matches_the_ppo_loss_written_out(absent, clip_range_vf):
    """Two epochs of one minibatch equal two Adam steps on the PPO loss written out here:
    advantages from GAE, normalized per minibatch with the sample std (1/(n-1), as SB3's;
    over the real rows only when a row is absent, as the same rows would be unmasked), the
    clipped surrogate, the value loss (pessimistically clipped when clip_range_vf > 0), the
    entropy bonus, all masked means over active rows, and the gradient clipped to
    max_grad_norm. The gradients themselves, the reported metrics (each the mean over the two
    minibatches) and the explained variance are compared too."""
    from wheeler2.agents.parts.distributions import evaluate_actions

    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    params = Params(
        n_steps=4,
        batch_size=12,
        n_epochs=2,
        hidden=[8],
        clip_range=0.1,
        clip_range_vf=clip_range_vf,
        ent_coef=0.02,
        vf_coef=0.7,
        lr=3e-2,
    )
    agent, ref = PPO(space, params, seed=0), PPO(space, params, seed=0)
    opt = torch.optim.Adam(ref.params_list, lr=3e-2, eps=1e-5)  # SB3's PPO optimizer
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(3, 3)).astype(np.float32)
    metrics = None
    for t in range(4):
        step = _step(agent, obs, rng, 3)
        if t == 2 and absent:
            step.active = np.array([True, False, True])
        metrics = agent.observe(step)
        obs = step.reset_obs
    assert metrics is not None
    buf = agent.rollout  # the rollout the update used (kept until the next one starts)
    T, n = 4, 3
    with torch.no_grad():
        values = ref.critic(buf.obs.flatten(0, 1)).view(T, n)
        next_values = ref.critic(buf.next_obs.flatten(0, 1)).view(T, n)
        adv = gae(buf.reward, values, next_values, buf.terminated, buf.done, 0.99, 0.95).flatten()
    returns = adv + values.flatten()
    old_v, w = values.flatten(), buf.valid.flatten()
    assert w.sum() == (11 if absent else 12)  # the absent row is masked

    def mmean(x):  # noqa: ANN001, ANN202
        return (x * w).sum() / w.sum()

    mu = mmean(adv)
    a = (adv - mu) / ((((adv - mu) ** 2) * w).sum() / (w.sum() - 1)).sqrt()  # 1e-8 aside
    obs_all, act_all = buf.obs.flatten(0, 1), buf.action.flatten(0, 1)
    stats = np.zeros(5)
    for _ in range(2):
        logp, ent = evaluate_actions(ref.policy, obs_all, act_all)
        log_ratio = logp - buf.logp.flatten()
        ratio = log_ratio.exp()
        surr = torch.min(ratio * a, ratio.clamp(0.9, 1.1) * a)
        v = ref.critic(obs_all)
        v_err = (v - returns) ** 2
        if clip_range_vf > 0:
            v_clip = old_v + (v - old_v).clamp(-clip_range_vf, clip_range_vf)
            v_err = torch.max(v_err, (v_clip - returns) ** 2)
        loss = -mmean(surr) + 0.7 * mmean(v_err) - 0.02 * mmean(ent)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.params_list, 0.5)
        opt.step()
        kl = mmean(ratio - 1 - log_ratio)
        clipped = mmean(((ratio - 1).abs() > 0.1).float())
        terms = (-mmean(surr), mmean(v_err), mmean(ent), kl, clipped)
        stats += np.array([x.item() for x in terms]) / 2
    # Adam's steps are nearly sign(gradient) * lr, blind to most changes of the loss: the
    # (clipped) gradients of the second step are compared as well.
    for x, y in zip(agent.params_list, ref.params_list):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
    assert not torch.equal(agent.params_list[0], PPO(space, params, seed=0).params_list[0])
    keys = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
    np.testing.assert_allclose([metrics[k] for k in keys], stats, rtol=1e-5, atol=1e-7)
    assert stats[3] > 1e-4 and stats[4] > 0  # the second epoch moved and clipped something
    # Explained variance of the values the advantages came from, over every stored row.
    explained = 1 - (returns - old_v).var() / returns.var()
    assert metrics["explained_variance"] == pytest.approx(float(explained), rel=1e-5)


def test_actions_not_drawn_by_act_are_scored_under_the_current_policy():
    """A step whose action came from elsewhere (no behaviour log-prob in its ActOut) stores the
    log-prob of that action under the policy as it is: log softmax(logits)[a]."""
    agent = PPO(SpaceInfo(obs_dim=3, act_dim=3, discrete=True), Params(n_steps=4, hidden=[8]))
    obs = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], np.float32)
    action = np.array([2, 0])
    z = np.zeros(2, bool)
    step = Transitions(obs, action, np.ones((2, 1), np.float32), obs, z, z, obs, ActOut(action))
    assert agent.observe(step) is None
    with torch.no_grad():
        logp_all = torch.log_softmax(agent.policy(torch.as_tensor(obs)), -1)
    torch.testing.assert_close(agent.rollout.logp[0], logp_all[[0, 1], [2, 0]])


# One row has no variance: the explained variance's var() warns (and the agent reports 0).
@pytest.mark.filterwarnings(r"ignore:var\(\):UserWarning")
def test_a_one_row_minibatch_keeps_its_advantage_unnormalized():
    """normalize_advantage needs two rows: one row's advantage is used as it is (normalizing
    it would divide 0 by a std that does not exist). One step of one copy: ratio 1, so the
    policy loss is -A = -(r + gamma V(s') - V(s))."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    agent = PPO(space, Params(n_steps=1, batch_size=1, n_epochs=1, hidden=[8]), seed=0)
    obs, nxt = np.array([[0.5, -1.0, 2.0]], np.float32), np.array([[1.0, 1.0, 0.0]], np.float32)
    with torch.no_grad():
        v, v_next = agent.critic(torch.as_tensor(obs)).item(), agent.critic(torch.as_tensor(nxt))
    adv = 2.0 + 0.99 * v_next.item() - v
    out = agent.act(obs, explore=True)
    z = np.zeros(1, bool)
    metrics = agent.observe(Transitions(obs, out.action, np.full((1, 1), 2.0), nxt, z, z, nxt, out))
    assert metrics["policy_loss"] == pytest.approx(-adv, rel=1e-5)


@pytest.mark.parametrize("constant", [True, False])
def test_explained_variance_by_hand_with_gamma_zero(constant):
    """gamma = 0: every return is the step's reward, so the explained variance is
    1 - Var[r - V] / Var[r] with V as the critic says before the update. Rewards of one value
    and a critic that says 0 everywhere leave it without a denominator: it is reported as 0.
    Otherwise the rewards are small (Var[r] < 1) and the critic the initial one."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    agent = PPO(space, Params(n_steps=2, batch_size=4, n_epochs=1, hidden=[8], gamma=0.0))
    if constant:
        with torch.no_grad():
            for p in agent.critic.parameters():
                p.zero_()
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    z = np.zeros(2, bool)
    metrics, rewards, values = None, [], []
    for t in range(2):
        out = agent.act(obs, explore=True)
        nxt = rng.normal(size=(2, 3)).astype(np.float32)
        r = np.ones((2, 1)) if constant else 0.1 * np.array([[t], [t + 2.5]])
        with torch.no_grad():
            values.append(agent.critic(torch.as_tensor(obs)).numpy())
        rewards.append(r[:, 0])
        step = Transitions(obs, out.action, r.astype(np.float32), nxt, z, z, nxt, out)
        metrics = agent.observe(step)
        obs = nxt
    assert metrics is not None
    if constant:
        assert metrics["explained_variance"] == 0.0
    else:
        r, v = np.concatenate(rewards), np.concatenate(values).astype(np.float64)
        assert 0 < r.var(ddof=1) < 1
        expected = 1 - (r - v).var(ddof=1) / r.var(ddof=1)
        assert metrics["explained_variance"] == pytest.approx(expected, rel=1e-4)


def test_load_state_dict_restarts_the_rollout():
    """The rollout in progress is not in the state: after a load the next update comes after
    a whole n_steps of new steps, not after what was left of the old rollout."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    agent = PPO(space, Params(n_steps=4, batch_size=8, n_epochs=1, hidden=[8]))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    updated = []
    for i in range(2 + 4):
        if i == 2:  # halfway through the first rollout
            agent.load_state_dict(agent.state_dict())
        step = _step(agent, obs, rng, 2)
        updated.append(agent.observe(step) is not None)
        obs = step.reset_obs
    assert updated == [False, False, False, False, False, True]
    assert agent.updates == 1


@pytest.mark.parametrize(
    ("core", "batch_size", "sizes"),
    [
        ("none", 5, [5, 5, 2]),  # steps: T * n = 12 rows
        ("gru", 3, [1, 1, 1]),  # whole copies, batch_size // T a minibatch, at least one
        ("gru", 10, [2, 1]),
    ],
)
def test_minibatches_take_every_row_once(core, batch_size, sizes):
    T, n = 4, 3
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    agent = PPO(space, Params(n_steps=T, batch_size=batch_size, core=core, core_size=4))
    agent.rollout = Rollout.empty(T, n, space, agent.state_dim, agent.device)
    mbs = agent.minibatches(batch_size)
    whole = [m.rows if m.copies is None else m.copies for m in mbs]  # steps, or env copies
    assert [len(m) for m in whole] == sizes
    assert sorted(torch.cat(whole).tolist()) == list(range(T * n if core == "none" else n))
    # Either way every flat step [t * n + copy] once; a copy's rows are its whole sequence.
    assert sorted(torch.cat([m.rows for m in mbs]).tolist()) == list(range(T * n))
    for m in mbs:
        if m.copies is not None:
            assert sorted((m.rows % n).unique().tolist()) == sorted(m.copies.tolist())


@pytest.mark.parametrize("batch_size", [5, 10])  # one or two env copies per minibatch
def test_recurrent_update_replays_what_the_policy_did(batch_size):
    """Recurrent PPO stores each chunk's initial state and episode starts: replaying them
    gives back, step by step, the behaviour log-probs and values, and the bootstrap value
    of the chunk's last step is the critic's in the state after it. With one epoch at a
    vanishing step size the ratio of every minibatch is then 1 (no KL, nothing clipped)."""
    T, n = 5, 4
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    params = Params(
        core="gru", core_size=4, hidden=[8], n_steps=T, batch_size=batch_size, n_epochs=1
    )
    params.lr = 1e-12
    agent = PPO(space, params, seed=0)
    seen = []
    update = agent.update

    def spy() -> dict[str, float]:
        buf = agent.rollout
        with torch.no_grad():
            logp, v = agent.log_probs()[0], agent.values()
            sc0 = buf.state0[:, agent.actor_state_dim :]
            _, after = agent.critic.sequence(buf.obs, sc0, buf.starts)
            v_last = agent.critic.step(buf.next_obs[-1], after)[0]
        seen.append({"logp": logp.view(T, n), "v": v.view(T, n), "v_last": v_last})
        seen[-1]["buf"] = copy.deepcopy(buf)
        seen[-1]["metrics"] = update()
        return seen[-1]["metrics"]

    agent.update = spy
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    state = agent.initial_state(n)
    z = np.zeros(n, bool)
    for _ in range(2 * T):
        out = agent.act(obs, explore=True, state=state)
        nxt = rng.normal(size=(n, 3)).astype(np.float32)
        term = rng.random(n) < 0.2
        reward = np.ones((n, 1), np.float32)
        agent.observe(Transitions(obs, out.action, reward, nxt, term, z, nxt, out, state=state))
        obs, state = nxt, out.state.copy()
        state[term] = 0.0  # as the engine does at an episode end
    assert len(seen) == 2
    for s in seen:
        buf = s["buf"]
        torch.testing.assert_close(s["logp"], buf.logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(s["v"], buf.value, atol=1e-5, rtol=0)
        torch.testing.assert_close(buf.next_value[-1], s["v_last"], atol=1e-5, rtol=0)
        assert s["metrics"]["approx_kl"] < 1e-9 and s["metrics"]["clip_fraction"] == 0.0
    # The second chunk goes on from the first: its states are not the initial ones, and a
    # copy whose episode ended at the first chunk's last step starts a new one.
    first, second = seen[0]["buf"], seen[1]["buf"]
    assert second.state0.abs().sum() > 0
    torch.testing.assert_close(second.starts[0], first.done[-1].bool())
    assert first.starts.any() and second.starts.any()


def test_a_minibatch_with_one_active_row_averages_over_that_row():
    """Masked means divide by the number of active rows: with one row present and one absent
    the losses are that row's own, -A and A^2 (ratio 1, advantages not normalized)."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    params = Params(n_steps=1, batch_size=2, n_epochs=1, hidden=[8], normalize_advantage=False)
    agent = PPO(space, params, seed=0)
    obs = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 1.0]], np.float32)
    nxt = np.array([[1.0, 1.0, 0.0], [2.0, -2.0, 0.0]], np.float32)
    with torch.no_grad():
        v, v_next = agent.critic(torch.as_tensor(obs)), agent.critic(torch.as_tensor(nxt))
    adv = (2.0 + 0.99 * v_next[0] - v[0]).item()
    out = agent.act(obs, explore=True)
    z = np.zeros(2, bool)
    step = Transitions(obs, out.action, np.full((2, 1), 2.0), nxt, z, z, nxt, out)
    step.active = np.array([True, False])
    metrics = agent.observe(step)
    assert metrics["policy_loss"] == pytest.approx(-adv, rel=1e-5)
    assert metrics["value_loss"] == pytest.approx(adv**2, rel=1e-5)


def test_the_on_policy_base_is_no_algorithm_of_its_own():
    # agents/onpolicy.py sits among the algorithm files; its base is not an Agent, so the
    # registry, which offers each module's Agent subclass, does not offer algo = "onpolicy".
    from wheeler2 import registry

    algos = registry.algorithms()
    assert "onpolicy" not in algos and "cores" not in algos
    assert {"ppo", "a2c", "pg"} <= set(algos)


def test_schedules_are_checked_when_the_agent_is_built():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    with pytest.raises(ValueError, match="lr_schedule = 'linear' needs total_steps > 0"):
        PPO(space, Params(lr_schedule="linear"))
    with pytest.raises(ValueError, match="clip_schedule must be 'constant' or 'linear'"):
        PPO(space, Params(clip_schedule="cosine", total_steps=10))
    PPO(space, Params(lr_schedule="linear", clip_schedule="linear", total_steps=10))


def test_for_run_fills_the_schedule_length_unless_the_file_names_one() -> None:
    # The engine asks the algorithm (Agent.for_run) instead of writing Params.total_steps itself.
    from wheeler2.agents.ddpg import DDPG

    assert PPO.for_run(Params(), 5_000).total_steps == 5_000
    assert PPO.for_run(Params(total_steps=10), 5_000).total_steps == 10
    ddpg = DDPG.Params()
    assert DDPG.for_run(ddpg, 5_000) is ddpg


def test_each_update_reports_the_count_the_live_tables_upd_s_reads():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = PPO(space, Params(n_steps=4, batch_size=16, n_epochs=1, hidden=[8]))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    seen = []
    for _ in range(8):
        step = _step(agent, obs, rng, 4)
        metrics = agent.observe(step)
        obs = step.reset_obs
        if metrics is not None:
            seen.append(metrics["updates"])
    assert seen == [1.0, 2.0]  # one per rollout of 4 vector steps
