"""NoisyNet (agents/parts/noisy.py NoisyLinear; ``noisy = true`` in DDPG and DQN): factorized
Gaussian noise with sigma0 = 0.5, redrawn per act batch and per learn step, mean weights in eval
mode and for explore=False, and weight sync of the noisy head by role."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.dqn import DQN
from wheeler2.agents.parts.noisy import NoisyLinear, noise_off, resample_noise
from wheeler2.agents.parts.numpy_forward import NumpyForward

from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo
from wheeler2.sync import (
    SyncError,
    SyncPlan,
    WeightClient,
    WeightPublisher,
    check_sync,
    float_state,
    source_shapes,
)

PENDULUM = SpaceInfo(obs_dim=3, act_dim=1, discrete=False)
CARTPOLE = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any):  # noqa: ANN201
    cls = registry.resolve_algo(algo)
    return cls(space, cls.Params(**params), seed=seed)


def f(x: torch.Tensor) -> torch.Tensor:
    return x.sign() * x.abs().sqrt()


def test_init_is_the_papers_factorized_one():
    layer = NoisyLinear(16, 4)
    bound = 1 / math.sqrt(16)
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
    assert torch.allclose(layer.weight_sigma, torch.full((4, 16), 0.5 * bound))
    assert torch.allclose(layer.bias_sigma, torch.full((4,), 0.5 * bound))
    # the noise is no checkpoint or sync material
    assert set(layer.state_dict()) == {"weight", "bias", "weight_sigma", "bias_sigma"}


def test_forward_is_the_factorized_formula_and_resampling_changes_it():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3)
    x = torch.randn(7, 5)
    mean = x @ layer.weight.T + layer.bias
    torch.testing.assert_close(layer(x), mean)  # no noise drawn yet
    gen = torch.Generator().manual_seed(1)
    layer.resample(gen)
    # by hand: eps_in, eps_out ~ f(N(0, 1)) in that order from the generator
    ref = torch.Generator().manual_seed(1)
    e_in, e_out = f(torch.randn(5, generator=ref)), f(torch.randn(3, generator=ref))
    w = layer.weight + layer.weight_sigma * torch.outer(e_out, e_in)
    b = layer.bias + layer.bias_sigma * e_out
    y1 = layer(x)
    torch.testing.assert_close(y1, x @ w.T + b)
    layer.resample(gen)
    y2 = layer(x)
    assert not torch.allclose(y1, y2)
    layer.eval()
    torch.testing.assert_close(layer(x), mean)
    layer.train()
    with noise_off(layer):
        torch.testing.assert_close(layer(x), mean)
    torch.testing.assert_close(layer(x), y2)  # the mode comes back


def test_ddpg_noisy_acts_with_fresh_noise_and_evaluates_on_the_means():
    agent = make("ddpg", PENDULUM, hidden=[32, 32], learning_starts=0, noisy=True)
    assert isinstance(agent.actor.head, NoisyLinear)
    assert isinstance(agent.fast_actor, NumpyForward)  # the one numpy path reads noisy layers
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    a1 = agent.act(obs, explore=True).action
    # exactly the noisy actor's output: no action noise on top (noise = "gaussian" is unused)
    with torch.no_grad():
        torch.testing.assert_close(torch.as_tensor(a1), agent.actor(torch.as_tensor(obs)))
    a2 = agent.act(obs, explore=True).action
    assert not np.allclose(a1, a2)  # redrawn per act batch
    g1, g2 = agent.act(obs, explore=False).action, agent.act(obs, explore=False).action
    np.testing.assert_array_equal(g1, g2)
    head = agent.actor.head
    with torch.no_grad():
        h = agent.actor.trunk(torch.as_tensor(obs))
        mean = torch.tanh(h @ head.weight.T + head.bias)
    np.testing.assert_allclose(g1, mean.numpy(), rtol=1e-5, atol=1e-6)
    assert agent.actor.head.training  # explore=False left the layer in training mode


def _batch(space: SpaceInfo, n: int = 32, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
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


def test_ddpg_noisy_learns_sigma_with_a_new_draw_per_step_and_a_mean_target():
    agent: DDPG = make("ddpg", PENDULUM, hidden=[32, 32], learning_starts=0, noisy=True)
    assert not agent.actor_target.training  # the target actor: mean weights
    sigma0 = agent.actor.head.weight_sigma.detach().clone()
    agent.learn(_batch(PENDULUM))
    eps1 = agent.actor.head.eps_out.clone()
    agent.learn(_batch(PENDULUM, seed=1))
    assert not torch.equal(eps1, agent.actor.head.eps_out)  # redrawn per learn step
    assert not torch.equal(sigma0, agent.actor.head.weight_sigma)  # sigma is learned
    x = torch.randn(5, 3)
    with torch.no_grad():
        t = agent.actor_target
        expect = torch.tanh(t.trunk(x) @ t.head.weight.T + t.head.bias)
        torch.testing.assert_close(t(x), expect)
    # a checkpoint round trip keeps means and scales
    other: DDPG = make("ddpg", PENDULUM, seed=5, hidden=[32, 32], learning_starts=0, noisy=True)
    other.load_state_dict(agent.state_dict())
    for k, v in agent.actor.state_dict().items():
        assert torch.equal(v, other.actor.state_dict()[k]), k


def test_dqn_noisy_has_no_epsilon_and_explores_by_its_head():
    agent: DQN = make("dqn", CARTPOLE, hidden=[16, 16], noisy=True, noisy_sigma0=4.0)
    assert isinstance(agent.q.net.head, NoisyLinear) and agent.epsilon == 0.0
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    greedy = agent.act(obs, explore=False).action
    np.testing.assert_array_equal(greedy, agent.act(obs, explore=False).action)
    with torch.no_grad(), noise_off(agent.q):
        mean_greedy = agent.q(torch.as_tensor(obs)).argmax(-1).numpy()
    np.testing.assert_array_equal(greedy, mean_greedy)
    explored = [agent.act(obs, explore=True).action for _ in range(4)]
    assert any((e != greedy).any() for e in explored)  # a wide sigma flips some argmaxes
    with torch.no_grad():  # each act batch: the greedy action of the noisy net as drawn
        np.testing.assert_array_equal(
            explored[-1], agent.q(torch.as_tensor(obs)).argmax(-1).numpy()
        )
    eps = agent.q.net.head.eps_out.clone()
    out = agent.learn(_batch(CARTPOLE))
    assert out.metrics["epsilon"] == 0.0 and np.isfinite(out.metrics["loss"])
    assert not torch.equal(eps, agent.q.net.head.eps_out)
    assert not torch.equal(agent.q.net.head.eps_out, agent.q_target.net.head.eps_out)


def test_noisy_ddpg_learner_syncs_into_a_noisy_explorer_through_shared_memory():
    learner = make("ddpg", PENDULUM, seed=1, hidden=[32, 32], noisy=True, learning_starts=0)
    explorer = make("ddpg", PENDULUM, seed=2, hidden=[32, 32], noisy=True, learning_starts=0)
    learner.learn(_batch(PENDULUM))  # sigma moves away from its init
    with WeightPublisher.create(learner.actor) as pub:
        client = WeightClient.attach(pub.handle(), explorer.actor, keep=[], alpha=1.0)
        pub.publish(learner.actor)
        assert client.pull() == 1
        synced = set(client.synced)
        client.close()
    assert {"head.weight", "head.bias", "head.weight_sigma", "head.bias_sigma"} <= synced
    for k, v in learner.actor.state_dict().items():
        assert torch.equal(v, explorer.actor.state_dict()[k]), k
    # the explorer still draws its own noise, and explores with it
    resample_noise(explorer.actor, torch.Generator().manual_seed(9))
    obs = np.zeros((2, 3), np.float32)
    assert not np.allclose(explorer.act(obs, True).action, learner.act(obs, False).action)
    np.testing.assert_array_equal(explorer.act(obs, False).action, learner.act(obs, False).action)


def test_a_plain_explorer_keeps_its_head_or_is_refused_naming_the_noise_scales():
    learner = make("ddpg", PENDULUM, seed=1, hidden=[32, 32], noisy=True)
    plain = make("ddpg", PENDULUM, seed=2, hidden=[32, 32])
    with pytest.raises(SyncError, match="head.weight_sigma"):
        check_sync(learner.actor, plain.actor, [], "explorer")
    own_head = {k: v.clone() for k, v in plain.actor.head.state_dict().items()}
    plan = SyncPlan(source_shapes(learner.actor), plain.actor, ["head"], 1.0, "explorer")
    assert all(n.startswith("trunk.") for n in plan.names)
    plan.apply(float_state(learner.actor))
    for k, v in learner.actor.trunk.state_dict().items():
        assert torch.equal(v, plain.actor.trunk.state_dict()[k])
    for k, v in own_head.items():
        assert torch.equal(v, plain.actor.head.state_dict()[k])


TEAM = """
[experiment]
name = "noisy-team"
total_steps = 400
eval_every = 400
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "PendulumNoVel-v1"
stack = 2

[buffer]
capacity = 1000
batch_size = 32

[[team]]
name = "learner"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100
noisy = true
features = "rbf"
rbf_centers = 16

[[team]]
name = "explorer"
algo = "ddpg"
role = "actor"
sync = { every = 50 }
[team.params]
hidden = [16, 16]
learning_starts = 0
noisy = true
features = "rbf"
rbf_centers = 16
"""


def test_a_noisy_rbf_team_runs_and_syncs_through_the_real_run_path(tmp_path):
    import json

    import wheeler2

    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    run_dir = wheeler2.run(path, out=str(tmp_path / "runs"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 400
    team = json.loads((run_dir / "team.json").read_text())
    synced = json.dumps(team)
    for name in ("head.weight_sigma", "trunk.0.centers"):
        assert name in synced, team
