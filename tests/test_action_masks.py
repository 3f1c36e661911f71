"""Legal-action masks (issue 36, item 2): DQN, PPO, A2C and PG act, explore and learn over the
legal actions only, read from the last ``act_dim`` observation columns; every other algorithm
refuses a masked space; normalization leaves the mask raw.

The masks are random over many rows, so an agent that ignored them would pick an illegal action
somewhere with overwhelming probability; the targets, log-probs and entropies are computed by
hand from the networks' raw outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wheeler2.agents import dqn as dqn_module
from wheeler2.agents.a2c import A2C
from wheeler2.agents.a2c import Params as A2CParams
from wheeler2.agents.crossq import CrossQ
from wheeler2.agents.crossq import Params as CrossQParams
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.ddpg import Params as DDPGParams
from wheeler2.agents.dqn import DQN
from wheeler2.agents.dqn import Params as DQNParams
from wheeler2.agents.normalize import RunningNorm
from wheeler2.agents.parts.batch import StepView
from wheeler2.agents.parts.distributions import evaluate_outputs, sample_outputs
from wheeler2.agents.parts.masks import legal_actions, legal_actions_np, random_legal
from wheeler2.agents.pg import PG
from wheeler2.agents.pg import Params as PGParams
from wheeler2.agents.ppo import PPO
from wheeler2.agents.ppo import Params as PPOParams
from wheeler2.agents.sac import SAC
from wheeler2.agents.sac import Params as SACParams
from wheeler2.agents.td3 import TD3
from wheeler2.agents.td3 import Params as TD3Params

from wheeler2.agent import Batch, SpaceInfo, Transitions
from wheeler2.env import EnvInfo
from wheeler2.runtime.parts import space_info
from wheeler2.task import Head, RewardHeads

OBS, ACT = 4, 6  # game columns, actions (the mask's columns)
SPACE = SpaceInfo(obs_dim=OBS + ACT, act_dim=ACT, discrete=True, action_mask=True)


def masked_rows(rng: np.random.Generator, n: int, empty: int = 0) -> np.ndarray:
    """``n`` masked rows: random game columns, then a random mask (about a third legal, at
    least one per row), the last ``empty`` rows with no legal action (placeholders)."""
    game = rng.normal(size=(n, OBS)).astype(np.float32) * 3.0
    mask = rng.random((n, ACT)) < 0.35
    mask[np.arange(n), rng.integers(0, ACT, n)] = True
    if empty:
        mask[n - empty :] = False
    return np.concatenate([game, mask.astype(np.float32)], axis=1)


def assert_legal(action: np.ndarray, obs: np.ndarray) -> None:
    legal = legal_actions_np(obs, ACT)
    action = np.asarray(action)
    assert action.shape == (len(obs),) and action.dtype == np.int64
    bad = ~legal[np.arange(len(obs)), action]
    assert not bad.any(), f"{int(bad.sum())} illegal actions of {len(obs)}"


# -- the mask itself -----------------------------------------------------------------------------


def test_a_row_without_a_legal_action_counts_every_action_legal() -> None:
    obs = masked_rows(np.random.default_rng(0), 5, empty=2)
    legal = legal_actions(torch.as_tensor(obs), ACT).numpy()
    np.testing.assert_array_equal(legal[:3], obs[:3, OBS:] > 0.5)
    assert legal[3:].all()
    np.testing.assert_array_equal(legal_actions_np(obs, ACT), legal)


def test_random_legal_draws_uniformly_among_the_legal_actions() -> None:
    legal = np.zeros((30_000, 4), bool)
    legal[:, [0, 2, 3]] = True
    a = random_legal(np.random.default_rng(1), legal)
    counts = np.bincount(a, minlength=4)
    assert counts[1] == 0
    np.testing.assert_allclose(counts[[0, 2, 3]] / len(a), 1 / 3, atol=0.02)


# -- DQN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("core", ["none", "gru"])
def test_dqn_greedy_and_epsilon_greedy_actions_are_legal(core: str) -> None:
    rng = np.random.default_rng(2)
    obs = masked_rows(rng, 400, empty=10)
    greedy = DQN(SPACE, DQNParams(hidden=[32], core=core, core_size=8), seed=3)
    state = greedy.initial_state(len(obs)) if core != "none" else None
    out = greedy.act(obs, explore=False, state=state)
    assert_legal(out.action, obs)
    if core != "none":  # the state moves on along the episode as before
        assert out.state is not None and out.state.shape == state.shape
        assert_legal(greedy.act(obs, explore=False, state=out.state).action, obs)
    # epsilon = 1: every action a random one, still legal, and every legal action drawn
    p = DQNParams(hidden=[32], core=core, core_size=8, eps_start=1.0, eps_end=1.0)
    explorer = DQN(SPACE, p, seed=4)
    draws = np.stack([explorer.act(obs, explore=True, state=state).action for _ in range(20)])
    for a in draws:
        assert_legal(a, obs)
    legal = legal_actions_np(obs, ACT)
    assert_legal(explorer.uniform(len(obs), legal), obs)  # the base's warm-up draws
    seen = np.zeros_like(legal)
    np.put_along_axis(seen, draws.T, True, axis=1)
    assert (seen == legal).mean() > 0.98


def _linear_dqn(double: bool) -> DQN:
    """Q(s, .) = W s + b with known online and target weights (no hidden layer, lr 0)."""
    agent = DQN(SPACE, DQNParams(hidden=[], lr=0.0, double=double, loss="mse"), seed=0)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for net in (agent.q, agent.q_target):
            net.net.head.weight.copy_(torch.randn(ACT, OBS + ACT, generator=g))
            net.net.head.bias.copy_(torch.randn(ACT, generator=g))
    return agent


def _masked_batch(rng: np.random.Generator, b: int = 64) -> Batch:
    nxt = masked_rows(rng, b, empty=4)
    discount = np.full(b, 0.9, np.float32)
    discount[-4:] = 0.0  # terminal next observations: no legal action, no bootstrap
    return Batch.from_numpy(
        dict(
            obs=masked_rows(rng, b),
            action=rng.integers(0, ACT, b),
            reward=rng.normal(size=(b, 1)).astype(np.float32),
            next_obs=nxt,
            discount=discount,
            weight=np.ones(b, np.float32),
            index=np.arange(b),
        ),
        "cpu",
    )


@pytest.mark.parametrize("double", [True, False])
def test_dqn_target_maximizes_over_the_legal_actions_of_the_next_observation(
    double: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _linear_dqn(double)
    batch = _masked_batch(np.random.default_rng(6))
    seen: list[torch.Tensor] = []
    target = dqn_module.double_q_target

    def spy(*args: torch.Tensor) -> torch.Tensor:
        seen.append(target(*args))
        return seen[-1]

    monkeypatch.setattr(dqn_module, "double_q_target", spy)
    agent.learn(batch)

    x = batch.next_obs.double().numpy()
    w_on, b_on = (
        t.detach().double().numpy() for t in (agent.q.net.head.weight, agent.q.net.head.bias)
    )
    w_t = agent.q_target.net.head.weight.detach().double().numpy()
    b_t = agent.q_target.net.head.bias.detach().double().numpy()
    q_on, q_t = x @ w_on.T + b_on, x @ w_t.T + b_t
    legal = legal_actions_np(batch.next_obs.numpy(), ACT)
    want, unmasked = [], []
    for i in range(len(x)):
        pick = q_on[i] if double else q_t[i]
        best = max(np.flatnonzero(legal[i]), key=lambda a: pick[a])
        want.append(q_t[i, best])
        unmasked.append(q_t[i, int(np.argmax(pick))])
    r, d = batch.reward[:, 0].double().numpy(), batch.discount.double().numpy()
    np.testing.assert_allclose(seen[0].numpy(), r + d * np.array(want), rtol=1e-5, atol=1e-5)
    # (the masks matter on this batch: an unmasked target is another one)
    assert not np.allclose(r + d * np.array(unmasked), r + d * np.array(want))


def test_recurrent_dqn_targets_bootstrap_from_legal_actions(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(7)
    agent = DQN(SPACE, DQNParams(hidden=[16], core="gru", core_size=8, seq_burn_in=0), seed=8)
    b, t, n = 16, 6, 2  # sequences, steps, n-step (next_obs runs n - 1 further)
    obs = masked_rows(rng, b * t).reshape(b, t, -1)
    nxt = masked_rows(rng, b * (t + n - 1), empty=3).reshape(b, t + n - 1, -1)
    boot = np.minimum(np.arange(t)[None] + rng.integers(0, n, (b, t)), t + n - 2)
    batch = Batch.from_numpy(
        dict(
            obs=obs,
            action=rng.integers(0, ACT, (b, t)),
            reward=rng.normal(size=(b, t, 1)).astype(np.float32),
            next_obs=nxt,
            discount=np.full((b, t), 0.9, np.float32),
            boot=boot,
            alive=np.ones((b, t), bool),
            mask=np.ones((b, t), bool),
            burn=np.zeros(b, np.int64),
            state=np.zeros((b, agent.state_dim), np.float32),
            weight=np.ones(b, np.float32),
            index=np.arange(b),
        ),
        "cpu",
    )
    seen: list[tuple[torch.Tensor, ...]] = []
    target = dqn_module.double_q_target

    def spy(*args: torch.Tensor) -> torch.Tensor:
        seen.append(args)
        return target(*args)

    monkeypatch.setattr(dqn_module, "double_q_target", spy)
    out = agent.learn(batch)
    assert np.isfinite(out.td_error).all()
    q_online = seen[0][2]  # [T, B, A]: what the argmax ran over
    best = q_online.argmax(-1).numpy().T  # [B, T]
    legal = legal_actions_np(nxt.reshape(-1, OBS + ACT), ACT).reshape(b, t + n - 1, ACT)
    at_boot = np.take_along_axis(legal, boot[:, :, None], axis=1)  # [B, T, A]
    assert np.take_along_axis(at_boot, best[:, :, None], axis=2).all()


def test_dqn_with_normalized_inputs_keeps_the_mask_raw() -> None:
    rng = np.random.default_rng(9)
    agent = DQN(SPACE, DQNParams(hidden=[16], normalize_obs=True, obs_clip=0.3), seed=1)
    obs = masked_rows(rng, 300, empty=5)
    agent.observe(
        Transitions(obs, np.zeros(300, np.int64), np.zeros((300, 1), np.float32), obs,
                    np.zeros(300, bool), np.zeros(300, bool), obs, agent.act(obs, False))
    )  # fmt: skip
    assert agent.obs_norm.count == 300
    assert_legal(agent.act(obs, explore=False).action, obs)
    batch = _masked_batch(rng)
    view = StepView.of(batch, agent.obs_norm)
    # the game columns are normalized (clipped to 0.3), the mask columns read as they came
    assert view.next_obs[:, :OBS].abs().max() <= 0.3 + 1e-6
    torch.testing.assert_close(view.next_obs[:, OBS:], batch.next_obs[:, OBS:])
    np.testing.assert_array_equal(
        view.next_legal(ACT).numpy(), legal_actions_np(batch.next_obs.numpy(), ACT)
    )
    assert np.isfinite(agent.learn(batch).td_error).all()


def test_running_norm_leaves_the_last_columns_alone_and_the_rest_as_before() -> None:
    x = np.random.default_rng(10).normal(size=(50, 5)).astype(np.float32) * 4
    plain, keep = RunningNorm(5, clip=1.0), RunningNorm(5, clip=1.0, keep_last=2)
    plain.update(x)
    keep.update(x)
    t = torch.as_tensor(x)
    torch.testing.assert_close(keep.normalize(t)[:, :3], plain.normalize(t)[:, :3])
    torch.testing.assert_close(keep.normalize(t)[:, 3:], t[:, 3:])


# -- PPO, A2C, PG -----------------------------------------------------------------------------

ON_POLICY = {
    "ppo": (PPO, PPOParams, dict(batch_size=8, n_epochs=2, ent_coef=0.05)),
    "a2c": (A2C, A2CParams, dict(ent_coef=0.05)),
    "pg": (PG, PGParams, dict(ent_coef=0.05, vf_iters=1)),
}


def _on_policy(algo: str, n_steps: int = 50, **kw: object):  # noqa: ANN202
    cls, params, extra = ON_POLICY[algo]
    # A wide last layer (no orthogonal init) makes the policy far from uniform, so that the
    # greedy action of an unmasked policy is often illegal.
    return cls(
        SPACE, params(n_steps=n_steps, hidden=[32], ortho_init=False, **extra, **kw), seed=11
    )


def _hand_distribution(logits: torch.Tensor, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log-probs [N, A] with -inf at illegal actions, entropy [N]) of the renormalised
    legal distribution, in float64."""
    z = logits.detach().double().numpy()
    legal = legal_actions_np(obs, ACT)
    z = np.where(legal, z, -np.inf)
    logp = (
        z
        - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
        - z.max(1, keepdims=True)
    )
    p = np.exp(logp)
    entropy = -np.where(legal, p * np.where(legal, logp, 0.0), 0.0).sum(1)
    return logp, entropy


def test_masked_categorical_log_probs_and_entropy_by_hand() -> None:
    rng = np.random.default_rng(12)
    obs = masked_rows(rng, 200, empty=6)
    logits = torch.as_tensor(rng.normal(size=(200, ACT)) * 4, dtype=torch.float32)
    logits.requires_grad_(True)
    legal = legal_actions(torch.as_tensor(obs), ACT)
    everything = torch.arange(ACT).expand(200, ACT)
    logp_all = torch.stack(
        [evaluate_outputs(logits, None, everything[:, a], legal)[0] for a in range(ACT)], 1
    )
    entropy = evaluate_outputs(logits, None, everything[:, 0], legal)[1]
    want_logp, want_entropy = _hand_distribution(logits, obs)
    ok = legal.numpy()
    np.testing.assert_allclose(logp_all.detach().numpy()[ok], want_logp[ok], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(logp_all).all()
    assert (logp_all.detach().numpy()[~ok] < -1e30).all()
    assert (logp_all.detach().exp().numpy()[~ok] == 0.0).all()
    np.testing.assert_allclose(entropy.detach().numpy(), want_entropy, rtol=1e-5, atol=1e-5)
    # gradients stay finite through the masked entries
    (entropy.sum() + logp_all[ok].sum()).backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[~legal] == 0).all()
    # sampling and the mode keep to the legal actions
    gen = torch.Generator().manual_seed(0)
    for explore in (True, False):
        action, _, logp = sample_outputs(logits.detach(), None, explore, gen, legal)
        assert_legal(action.numpy(), obs)
        assert torch.isfinite(logp).all()


@pytest.mark.parametrize("algo", sorted(ON_POLICY))
@pytest.mark.parametrize("core", ["none", "gru"])
def test_on_policy_acts_legally_and_scores_the_rollout_under_the_mask(algo: str, core: str):
    if algo == "pg" and core != "none":
        pytest.skip("PG is feedforward only")
    kw = {"core": core, "core_size": 8} if core != "none" else {}
    agent = _on_policy(algo, **kw)
    rng = np.random.default_rng(13)
    n = 64
    obs = masked_rows(rng, n, empty=4)
    state = agent.initial_state(n) if agent.state_dim else None
    greedy = agent.act(obs, explore=False, state=state)
    assert_legal(greedy.action, obs)
    for _ in range(3):  # a few rollout steps: every drawn action legal, scored again by hand
        out = agent.act(obs, explore=True, state=state)
        assert_legal(out.action, obs)
        assert np.isfinite(out.logp).all()
        nxt = masked_rows(rng, n, empty=4)
        no = np.zeros(n, bool)
        reward = rng.normal(size=(n, 1)).astype(np.float32)
        agent.observe(Transitions(obs, out.action, reward, nxt, no, no, nxt, out, state=state))
        obs, state = nxt, out.state
    many = np.stack([agent.act(obs, explore=True, state=state).action for _ in range(30)])
    for a in many:
        assert_legal(a, obs)
    # The update's log-probs are the behaviour ones (the policy has not moved), its entropy
    # that of the renormalised legal distribution.
    logp, entropy = agent.log_probs()
    r = agent.rollout
    t = r.t
    np.testing.assert_allclose(
        logp.detach().view(-1, n)[:t].numpy(), r.logp[:t].numpy(), rtol=1e-5, atol=1e-5
    )
    if core == "none":
        logits = agent.policy(r.obs[:t].flatten(0, 1))
        _, want = _hand_distribution(logits, r.obs[:t].flatten(0, 1).numpy())
        got = entropy.detach().view(-1, n)[:t].flatten().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(entropy).all()


@pytest.mark.parametrize("algo", sorted(ON_POLICY))
def test_on_policy_updates_stay_finite_with_masks(algo: str) -> None:
    agent = _on_policy(algo, n_steps=4)
    rng = np.random.default_rng(14)
    n = 8
    obs = masked_rows(rng, n, empty=2)
    metrics = None
    for _ in range(4):
        out = agent.act(obs, explore=True)
        nxt = masked_rows(rng, n, empty=2)
        term = rng.random(n) < 0.2
        reward = rng.normal(size=(n, 1)).astype(np.float32)
        metrics = agent.observe(
            Transitions(obs, out.action, reward, nxt, term, np.zeros(n, bool), nxt, out)
        )
        obs = nxt
    assert metrics is not None and all(np.isfinite(v) for v in metrics.values())
    assert all(torch.isfinite(p).all() for p in agent.policy.parameters())
    assert_legal(agent.act(obs, explore=False).action, obs)


def test_ppo_with_normalized_inputs_keeps_the_mask_raw_in_the_rollout() -> None:
    agent = _on_policy("ppo", normalize_obs=True, obs_clip=0.3)
    rng = np.random.default_rng(15)
    n = 64
    obs = masked_rows(rng, n, empty=3)
    for _ in range(3):
        out = agent.act(obs, explore=True)
        assert_legal(out.action, obs)
        nxt = masked_rows(rng, n, empty=3)
        no = np.zeros(n, bool)
        reward = np.zeros((n, 1), np.float32)
        agent.observe(Transitions(obs, out.action, reward, nxt, no, no, nxt, out))
        obs = nxt
    r = agent.rollout
    assert r.obs[: r.t, :, :OBS].abs().max() <= 0.3 + 1e-6
    assert set(np.unique(r.obs[: r.t, :, OBS:].numpy())) <= {0.0, 1.0}
    logp, _ = agent.log_probs()
    np.testing.assert_allclose(logp.detach().view(-1, n)[: r.t].numpy(), r.logp[: r.t].numpy(),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


# -- refusals ----------------------------------------------------------------------------------

CONTINUOUS = {
    "DDPG": (DDPG, DDPGParams),
    "TD3": (TD3, TD3Params),
    "SAC": (SAC, SACParams),
    "CrossQ": (CrossQ, CrossQParams),
}


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
@pytest.mark.parametrize("discrete", [True, False])
def test_algorithms_without_masks_refuse_a_masked_space(name: str, discrete: bool) -> None:
    cls, params = CONTINUOUS[name]
    space = SpaceInfo(obs_dim=OBS + ACT, act_dim=ACT, discrete=discrete, action_mask=True)
    with pytest.raises(ValueError, match=rf"^{name} cannot honour an action mask; use dqn, ppo"):
        cls(space, params())


def test_a_detached_ddpg_explorer_refuses_a_masked_space() -> None:
    space = SpaceInfo(
        OBS + ACT, ACT, False, heads=("a", "b"), head_weights=(1, 1), action_mask=True
    )
    with pytest.raises(ValueError, match="DDPG cannot honour an action mask"):
        DDPG(space, DDPGParams(head="a"))


def test_a_masked_continuous_space_is_refused_by_the_on_policy_agents() -> None:
    space = SpaceInfo(obs_dim=OBS + ACT, act_dim=ACT, discrete=False, action_mask=True)
    with pytest.raises(ValueError, match="action mask needs a discrete action space"):
        PPO(space, PPOParams())


def test_space_info_passes_the_mask_on_and_refuses_goals_after_it() -> None:
    heads = RewardHeads([Head("env", 1.0, None)])
    info = EnvInfo(obs_dim=OBS + ACT, act_dim=ACT, discrete=True, action_mask=True)
    assert space_info(info, heads).action_mask
    assert not space_info(EnvInfo(obs_dim=3, act_dim=2, discrete=True), heads).action_mask
    with_goals = EnvInfo(
        obs_dim=OBS + ACT, act_dim=ACT, discrete=True, goal_dim=3, action_mask=True
    )
    with pytest.raises(ValueError, match="cannot have goals"):
        space_info(with_goals, heads)
