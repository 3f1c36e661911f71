"""TD(lambda) value targets: lambda-returns by hand, their limits, GAE + V, and the critics of
A2C and PG that train on them (``td_lambda``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wheeler2.agents.a2c import A2C, nstep_returns
from wheeler2.agents.a2c import Params as A2CParams
from wheeler2.agents.pg import PG
from wheeler2.agents.pg import Params as PGParams
from wheeler2.agents.ppo import gae as ppo_gae
from wheeler2.agents.returns import gae, lambda_returns

from wheeler2.agent import SpaceInfo, Transitions

# A [T=4, N=2] rollout. Column 0: step 1 terminated (no bootstrap), step 2 truncated (bootstrap
# from its final observation, worth 30), step 3 is the rollout's last (bootstrap from the next
# observation, worth 40). Column 1: one episode running through the whole rollout.
REWARDS = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
NEXT_VALUES = torch.tensor([[10.0, 2.0], [20.0, 4.0], [30.0, 6.0], [40.0, 8.0]])
TERMINATED = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
DONES = torch.tensor([[0, 0], [1, 0], [1, 0], [0, 0]], dtype=torch.bool)
GAMMA = 0.9


def returns(lam: float) -> torch.Tensor:
    return lambda_returns(REWARDS, NEXT_VALUES, TERMINATED, DONES, GAMMA, lam)


def test_lambda_returns_by_hand_with_a_termination_and_a_truncation():
    # lambda = 0.5, G_t = r_t + .9 (1 - term_t) (.5 V(s'_t) + .5 G_{t+1}), backwards:
    # column 0: G_3 = 4 + .9 * 40 = 40            (rollout end: V only)
    #           G_2 = 3 + .9 * 30 = 30            (truncated: V of the final obs only)
    #           G_1 = 2                           (terminated: nothing after it)
    #           G_0 = 1 + .9 (.5 * 10 + .5 * 2) = 6.4
    # column 1: G_3 = 1 + .9 * 8 = 8.2
    #           G_2 = 1 + .9 (.5 * 6 + .5 * 8.2)    = 7.39
    #           G_1 = 1 + .9 (.5 * 4 + .5 * 7.39)   = 6.1255
    #           G_0 = 1 + .9 (.5 * 2 + .5 * 6.1255) = 4.656475
    expected = torch.tensor([[6.4, 4.656475], [2.0, 6.1255], [30.0, 7.39], [40.0, 8.2]])
    torch.testing.assert_close(returns(0.5), expected)


def test_lambda_return_is_the_weighted_average_of_n_step_returns():
    """The forward view (Sutton & Barto eq. 12.9, cut at the rollout end): column 1's G_0 from
    its n-step returns G^(n) = 1 + .9 + ... + .9^(n-1) + .9^n V(s_n)."""
    lam = 0.5
    g1 = 1 + 0.9 * 2  # 2.8
    g2 = 1 + 0.9 + 0.81 * 4  # 5.14
    g3 = 1 + 0.9 + 0.81 + 0.729 * 6  # 7.084
    g4 = 1 + 0.9 + 0.81 + 0.729 + 0.6561 * 8  # 8.6878: the longest the rollout holds
    forward = (1 - lam) * (g1 + lam * g2 + lam**2 * g3) + lam**3 * g4
    assert forward == pytest.approx(4.656475)
    assert returns(lam)[0, 1].item() == pytest.approx(forward, rel=1e-6)


def test_lambda_zero_is_one_step_td():
    # r_t + .9 (1 - term_t) V(s'_t)
    expected = torch.tensor([[10.0, 2.8], [2.0, 4.6], [30.0, 6.4], [40.0, 8.2]])
    torch.testing.assert_close(returns(0.0), expected)


def test_lambda_one_is_monte_carlo_to_the_episode_or_rollout_end():
    # column 0: G_0 = 1 + .9 * 2 (the episode terminated at step 1); column 1: the 4-, 3-, 2-
    # and 1-step returns to the rollout end, 8.6878, 8.542, 8.38, 8.2.
    expected = torch.tensor([[2.8, 8.6878], [2.0, 8.542], [30.0, 8.38], [40.0, 8.2]])
    torch.testing.assert_close(returns(1.0), expected)
    torch.testing.assert_close(
        returns(1.0), nstep_returns(REWARDS, NEXT_VALUES, TERMINATED, DONES, GAMMA)
    )


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_a_one_step_rollout_is_one_step_td_whatever_lambda(lam):
    """n_steps = 1: each rollout is one vector step, so G = r + .9 (1 - term) V(s') and
    A = G - V(s) for every lambda; column 1 terminated."""
    rewards, next_values = torch.tensor([[1.0, 2.0]]), torch.tensor([[10.0, 20.0]])
    terminated = torch.tensor([[False, True]])
    values = torch.tensor([[3.0, 4.0]])
    target = lambda_returns(rewards, next_values, terminated, terminated, GAMMA, lam)
    torch.testing.assert_close(target, torch.tensor([[10.0, 2.0]]))
    adv = gae(rewards, values, next_values, terminated, terminated, GAMMA, lam)
    torch.testing.assert_close(adv, torch.tensor([[7.0, -2.0]]))


def _consistent_rollout(T: int, n: int, seed: int):
    """Random rewards, values and episode ends where V(s'_t) = V(s_{t+1}) inside an episode
    (the next observation is the next step's observation), as in a real rollout."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, n, generator=g)
    values = torch.randn(T, n, generator=g)
    dones = torch.rand(T, n, generator=g) < 0.25
    terminated = dones & (torch.rand(T, n, generator=g) < 0.5)
    next_values = torch.randn(T, n, generator=g)  # where done: V of the final observation
    next_values[:-1] = torch.where(dones[:-1], next_values[:-1], values[1:])
    return rewards, values, next_values, terminated, dones


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.95, 1.0])
def test_gae_plus_value_is_the_lambda_return(lam):
    """PPO's value target V + A^GAE(lambda) is the lambda-return (TD(lambda) and GAE are the
    same estimate), including across terminations and truncations."""
    rewards, values, next_values, terminated, dones = _consistent_rollout(16, 5, seed=int(lam * 10))
    assert dones.any() and terminated.any() and (dones & ~terminated).any()
    target = lambda_returns(rewards, next_values, terminated, dones, 0.97, lam)
    adv = gae(rewards, values, next_values, terminated, dones, 0.97, lam)
    torch.testing.assert_close(adv + values, target)
    assert ppo_gae is gae  # PPO computes its advantages with this very function


def test_gae_plus_value_differs_when_next_values_are_not_the_next_states():
    """The identity needs V(s'_t) = V(s_{t+1}) inside an episode: it is not a tautology."""
    rewards, values, next_values, terminated, dones = _consistent_rollout(8, 3, seed=1)
    next_values = next_values + 1.0
    target = lambda_returns(rewards, next_values, terminated, dones, 0.97, 0.5)
    adv = gae(rewards, values, next_values, terminated, dones, 0.97, 0.5)
    assert not torch.allclose(adv + values, target)


# -- the critics that train on them ----------------------------------------------------------


def _feed(agent, obs, nxt, rewards, term, trunc) -> dict[str, float]:
    metrics = None
    for t in range(len(obs)):
        out = agent.act(obs[t], explore=True)
        step = Transitions(
            obs[t], out.action, rewards[t, :, None], nxt[t], term[t], trunc[t], nxt[t], out
        )
        metrics = agent.observe(step)
    assert metrics is not None
    return metrics


@pytest.mark.parametrize("algo", ["a2c", "pg"])
@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_critic_trains_on_the_td_lambda_target(algo, lam):
    """The value loss an update reports is the squared error to the lambda-return of
    ``td_lambda``, computed here from the critic before the update."""
    rng = np.random.default_rng(0)
    T, n = 4, 2
    obs = rng.normal(size=(T, n, 3)).astype(np.float32)
    nxt = rng.normal(size=(T, n, 3)).astype(np.float32)
    obs[1:] = nxt[:-1]  # the env copies run on
    rewards = rng.normal(size=(T, n)).astype(np.float32)
    term = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
    trunc = np.array([[0, 0], [0, 0], [1, 0], [0, 0]], bool)
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    if algo == "a2c":
        agent = A2C(space, A2CParams(n_steps=T, hidden=[8], td_lambda=lam, gamma=0.9))
    else:
        agent = PG(space, PGParams(n_steps=T, hidden=[8], td_lambda=lam, gamma=0.9, vf_iters=1))
    with torch.no_grad():
        v = agent.critic(torch.as_tensor(obs))
        v_next = agent.critic(torch.as_tensor(nxt))
    t_ = torch.as_tensor
    target = lambda_returns(t_(rewards), v_next, t_(term), t_(term | trunc), 0.9, lam)
    expected = (target - v).pow(2).mean().item()
    metrics = _feed(agent, obs, nxt, rewards, term, trunc)
    assert metrics["value_loss"] == pytest.approx(expected, rel=1e-5)
    if lam < 1.0:  # a target other than the Monte Carlo / n-step one
        mc = lambda_returns(t_(rewards), v_next, t_(term), t_(term | trunc), 0.9, 1.0)
        assert (mc - v).pow(2).mean().item() != pytest.approx(expected, rel=1e-3)
