"""CrossQ (agents/crossq.py), the worked example of docs/adding_an_algorithm.md: its critic loss
computed by hand (one batch-normalized pass over s and s' stacked), no target networks, the
actor on running statistics, the policy delay, checkpoints, and a learning check (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.crossq import CrossQ, Params
from wheeler2.agents.parts.distributions import squashed_log_prob

from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo
from wheeler2.config import load

ROOT = Path(__file__).resolve().parents[1]
SPACE = SpaceInfo(obs_dim=2, act_dim=1, discrete=False)
B = 4


def _agent(**kw: object) -> CrossQ:
    base = dict(hidden=[4], critic_hidden=[5], learn_alpha=False, alpha_init=0.5) | kw
    return CrossQ(SPACE, Params(**base), seed=3)  # type: ignore[arg-type]


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return dict(
        obs=rng.standard_normal((B, 2)).astype(np.float32),
        action=rng.uniform(-1, 1, (B, 1)).astype(np.float32),
        reward=rng.standard_normal((B, 1)).astype(np.float32),
        next_obs=rng.standard_normal((B, 2)).astype(np.float32),
        discount=np.array([0.99, 0.0, 0.5, 0.99], np.float32),
        weight=np.array([1.0, 2.0, 0.5, 1.0], np.float32),
        index=np.arange(B),
    )


def _q_by_hand(net: torch.nn.Sequential, x: np.ndarray) -> np.ndarray:
    """One critic of the pair in train mode, in float64: batch norm on the batch's own mean and
    (biased) variance, then Linear, batch norm, ReLU per hidden layer, then the last Linear."""

    def bn(m: torch.nn.BatchNorm1d, h: np.ndarray) -> np.ndarray:
        w, b = m.weight.detach().double().numpy(), m.bias.detach().double().numpy()
        return (h - h.mean(0)) / np.sqrt(h.var(0) + m.eps) * w + b

    def lin(m: torch.nn.Linear, h: np.ndarray) -> np.ndarray:
        return h @ m.weight.detach().double().numpy().T + m.bias.detach().double().numpy()

    bn_in, lin1, bn1, _, lin2 = net
    h = np.maximum(bn(bn1, lin(lin1, bn(bn_in, x))), 0.0)
    return lin(lin2, h)[:, 0]


def test_the_critic_loss_by_hand() -> None:
    agent = _agent()
    arrays = _arrays()
    s2 = torch.as_tensor(arrays["next_obs"])
    # a', logp' as the agent draws them: its generator (seed + 3), on the next observations.
    gen = torch.Generator().manual_seed(3 + 3)
    with torch.no_grad():
        mean, log_std = agent.actor_net.mean_log_std(s2)
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=gen)
        a2, logp2 = torch.tanh(u), squashed_log_prob(u, mean, log_std)
    x = np.concatenate(
        [np.concatenate([arrays["obs"], arrays["action"]], 1), np.concatenate([s2, a2], 1)]
    ).astype(np.float64)
    q1, q2 = (_q_by_hand(net, x) for net in agent.critic.nets)  # [2B] each: s then s'
    soft = np.minimum(q1[B:], q2[B:]) - 0.5 * logp2.double().numpy()
    y = arrays["reward"][:, 0] + arrays["discount"] * soft
    w = arrays["weight"]
    expected = np.mean(w * (y - q1[:B]) ** 2) + np.mean(w * (y - q2[:B]) ** 2)

    out = agent.learn(Batch.from_numpy(arrays, "cpu"))
    assert out.metrics["critic_loss"] == pytest.approx(expected, rel=1e-5)
    td = (np.abs(y - q1[:B]) + np.abs(y - q2[:B])) / 2
    np.testing.assert_allclose(out.td_error, td, rtol=1e-4, atol=1e-6)

    # The joint pass matters: s' normalized by its own statistics gives another bootstrap.
    alone = np.minimum(*(_q_by_hand(n, x[B:]) for n in agent.critic.nets))
    assert not np.allclose(alone, np.minimum(q1[B:], q2[B:]), atol=1e-3)


def test_no_target_networks_and_the_actor_reads_running_statistics() -> None:
    agent = _agent(policy_delay=1)
    assert agent.target_params == [] and not any("target" in k for k in agent.state_dict())
    arrays = _arrays()
    before = [p.detach().clone() for p in agent.actor_params]
    agent.learn(Batch.from_numpy(arrays, "cpu"))
    assert any(not torch.equal(p, q) for p, q in zip(before, agent.actor_params))
    # The input batch norm moved once, by the critic's pass over [s, a; s', a'] (momentum
    # 0.01 from zeros): the actor's pass ran on the running statistics and moved nothing.
    bn_in = agent.critic.nets[0][0]
    assert int(bn_in.num_batches_tracked) == 1
    s_all = np.concatenate([arrays["obs"], arrays["next_obs"]])
    seen = bn_in.running_mean.numpy()[:2]  # (the observation columns; the action's is a, a')
    np.testing.assert_allclose(seen, 0.01 * s_all.mean(0), rtol=1e-4)


def test_the_actor_steps_every_policy_delay_critic_steps() -> None:
    agent = _agent(policy_delay=3)
    batch = Batch.from_numpy(_arrays(), "cpu")
    first = [p.detach().clone() for p in agent.actor_params]
    for _ in range(2):
        agent.learn(batch)
    assert all(torch.equal(p, q) for p, q in zip(first, agent.actor_params))
    agent.learn(batch)
    assert agent.updates == 3
    assert any(not torch.equal(p, q) for p, q in zip(first, agent.actor_params))


def test_checkpoints_round_trip_and_the_registry_finds_it() -> None:
    assert registry.resolve_algo("crossq") is CrossQ
    agent = _agent()
    for seed in range(3):
        agent.learn(Batch.from_numpy(_arrays(seed), "cpu"))
    twin = _agent()
    twin.load_state_dict(agent.state_dict())
    obs = np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32)
    np.testing.assert_array_equal(agent.act(obs, False).action, twin.act(obs, False).action)
    for k, v in agent.critic.state_dict().items():
        assert torch.equal(v, twin.critic.state_dict()[k]), k
    assert twin.updates == 3


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_crossq_learns_pendulum(tmp_path: Path) -> None:
    from wheeler2.runtime import run_experiment

    overrides = [
        "experiment.progress=false",
        "experiment.total_steps=12000",
        "experiment.stop_at_threshold=true",
    ]
    config = load(ROOT / "cfg" / "pendulum_crossq.toml", overrides=overrides, out=str(tmp_path))
    summary = json.loads((run_experiment(config) / "summary.json").read_text())
    for e in summary["eval"]:
        print(f"CrossQ Pendulum-v1: {e['env_steps']} env steps, eval {e['return']:.1f}")
    assert summary["best_eval_return"] > -400
