"""RBF features (agents/parts/encoders.py RBFEncoder; ``features = "rbf"`` in DDPG and DQN): the
Gaussian kernel by hand, seeded centers kept in the state dict, the critic's action passed through,
and sync of the encoder with the trunk."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from wheeler2.agents.parts.encoders import RBFEncoder
from wheeler2.agents.parts.numpy_forward import NumpyForward

from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo
from wheeler2.sync import SyncError, SyncPlan, check_sync, float_state, source_shapes

PENDULUM = SpaceInfo(obs_dim=3, act_dim=1, discrete=False)
CARTPOLE = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any):  # noqa: ANN201
    cls = registry.resolve_algo(algo)
    return cls(space, cls.Params(**params), seed=seed)


def test_two_centers_by_hand():
    enc = RBFEncoder(in_dim=2, num_centers=2, width=0.5, seed=0, passthrough=1)
    enc.centers.copy_(torch.tensor([[0.0, 0.0], [1.0, -1.0]]))
    x = torch.tensor([[0.0, 0.0, 7.0], [1.0, 1.0, -3.0], [0.5, -0.5, 0.25]])
    w = 0.5
    expect = []
    for row in x.tolist():
        z, a = np.array(row[:2]), row[2]
        d0 = np.sum((z - np.array([0.0, 0.0])) ** 2)
        d1 = np.sum((z - np.array([1.0, -1.0])) ** 2)
        expect.append([np.exp(-d0 / (2 * w * w)), np.exp(-d1 / (2 * w * w)), a])
    np.testing.assert_allclose(enc(x).numpy(), np.array(expect), rtol=1e-6, atol=1e-7)
    assert enc(x)[0, 0] == 1.0 and enc.out_dim == 3


def test_centers_come_from_the_seed_and_default_width_is_sqrt_in_dim():
    a, b, c = RBFEncoder(3, 8, seed=4), RBFEncoder(3, 8, seed=4), RBFEncoder(3, 8, seed=5)
    assert torch.equal(a.centers, b.centers) and not torch.equal(a.centers, c.centers)
    assert torch.equal(a.centers, torch.randn(8, 3, generator=torch.Generator().manual_seed(4)))
    assert float(a.width) == pytest.approx(3**0.5)
    assert set(a.state_dict()) == {"centers", "width"}


def test_ddpg_rbf_actor_and_critic_see_the_same_features():
    agent = make("ddpg", PENDULUM, hidden=[16], learning_starts=0, features="rbf", rbf_centers=10)
    enc = agent.actor.trunk[0]
    assert isinstance(enc, RBFEncoder) and enc.passthrough == 0
    assert isinstance(NumpyForward.of(agent.actor, squash=True), NumpyForward)
    crit = agent.critic.nets[0].trunk[0]
    assert isinstance(crit, RBFEncoder) and crit.passthrough == 1
    assert torch.equal(enc.centers, crit.centers)
    obs = torch.randn(5, 3)
    act = torch.rand(5, 1) * 2 - 1
    with torch.no_grad():
        phi = torch.exp(-torch.cdist(obs, enc.centers).pow(2) / (2 * enc.width**2))
        by_hand = torch.tanh(agent.actor.head(agent.actor.trunk[1:](phi)))
        torch.testing.assert_close(agent.actor(obs), by_hand)
        net = agent.critic.nets[0]
        q = net.head(net.trunk[1:](torch.cat([phi, act], -1)))
        torch.testing.assert_close(agent.critic(obs, act), q)
    out = agent.act(obs.numpy(), explore=True).action
    assert out.shape == (5, 1)


def _batch(space: SpaceInfo, n: int = 16) -> Batch:
    rng = np.random.default_rng(0)
    if space.discrete:
        action = torch.as_tensor(rng.integers(0, space.act_dim, n))
    else:
        action = torch.as_tensor(rng.uniform(-1, 1, (n, space.act_dim)), dtype=torch.float32)
    return Batch(
        obs=torch.as_tensor(rng.normal(size=(n, space.obs_dim)), dtype=torch.float32),
        action=action,
        reward=torch.as_tensor(rng.normal(size=(n, 1)), dtype=torch.float32),
        next_obs=torch.as_tensor(rng.normal(size=(n, space.obs_dim)), dtype=torch.float32),
        discount=torch.full((n,), 0.98),
        weight=torch.ones(n),
        index=np.arange(n),
    )


@pytest.mark.parametrize(("algo", "space"), [("ddpg", PENDULUM), ("dqn", CARTPOLE)])
def test_rbf_learns_and_a_checkpoint_restores_the_centers(algo, space):
    agent = make(algo, space, hidden=[16], features="rbf", rbf_centers=12, normalize_obs=True)
    obs = np.random.default_rng(2).normal(size=(4, space.obs_dim)).astype(np.float32)
    agent.act(obs, explore=False)
    out = agent.learn(_batch(space))
    assert all(np.isfinite(v) for v in out.metrics.values())
    other = make(algo, space, hidden=[16], features="rbf", rbf_centers=12, rbf_seed=9)
    key = "trunk.0.centers" if algo == "ddpg" else "net.trunk.0.centers"
    assert not torch.equal(other.actor.state_dict()[key], agent.actor.state_dict()[key])
    other.load_state_dict(agent.state_dict())
    for k, v in agent.actor.state_dict().items():
        assert torch.equal(v, other.actor.state_dict()[k]), k


def test_rbf_centers_sync_with_the_trunk_and_a_plain_explorer_is_refused():
    learner = make("ddpg", PENDULUM, seed=1, hidden=[16], features="rbf", rbf_centers=8)
    explorer = make("ddpg", PENDULUM, seed=2, hidden=[16], features="rbf", rbf_centers=8)
    plan = SyncPlan(source_shapes(learner.actor), explorer.actor, [], 1.0, "explorer")
    assert "trunk.0.centers" in plan.names and "trunk.1.weight" in plan.names
    plan.apply(float_state(learner.actor))
    for k, v in learner.actor.state_dict().items():
        assert torch.equal(v, explorer.actor.state_dict()[k]), k
    plain = make("ddpg", PENDULUM, seed=2, hidden=[16])
    with pytest.raises(SyncError, match="trunk"):
        check_sync(learner.actor, plain.actor, [], "explorer")


def test_the_numpy_acting_path_computes_what_torch_does():
    from wheeler2.agents.parts.noisy import resample_noise

    for params in ({"features": "rbf"}, {"noisy": True}, {"features": "rbf", "noisy": True}):
        agent = make("ddpg", PENDULUM, hidden=[32, 16], learning_starts=0, **params)
        assert isinstance(agent.fast_actor, NumpyForward)
        resample_noise(agent.actor, torch.Generator().manual_seed(3))
        obs = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
        for mode in (True, False):
            agent.actor.train(mode)
            with torch.no_grad():
                ref = agent.actor(torch.as_tensor(obs)).numpy()
            np.testing.assert_allclose(agent.fast_actor(obs), ref, rtol=1e-5, atol=1e-6)
