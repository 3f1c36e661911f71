"""The batch views (agents/parts/batch.py) against a plain reading: priorities come back the
same way from both views, and a recurrent learner's TD errors on sequences sampled from the
replay (burn-in, n-step bootstraps past the trained positions, episode ends) equal those of a
step-by-step rollout of each network's core from the stored state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG, Params
from wheeler2.agents.normalize import IdentityNorm
from wheeler2.agents.parts.batch import SequenceView, StepView

from wheeler2.agent import Batch, SequenceBatch, SpaceInfo
from wheeler2.buffer import Layout, Replay, ReplayConfig


def test_priorities_from_a_td_error_with_gradient_in_both_views() -> None:
    # An update may hand back |y - q| without detaching it: the sequence view always took it.
    b = 3
    arrays = dict(
        obs=np.zeros((b, 2), np.float32),
        action=np.zeros((b, 1), np.float32),
        reward=np.zeros((b, 1), np.float32),
        next_obs=np.zeros((b, 2), np.float32),
        discount=np.ones(b, np.float32),
        weight=np.ones(b, np.float32),
        index=np.arange(b),
    )
    v = StepView.of(Batch.from_numpy(arrays, "cpu"), IdentityNorm())
    td = torch.full((b,), 2.0, requires_grad=True) * 1.0
    np.testing.assert_array_equal(v.priority(td.abs()), [2.0, 2.0, 2.0])


def _rollout(net, state: torch.Tensor, rows: list[np.ndarray]) -> torch.Tensor:  # noqa: ANN001
    """The features of ``net`` after each of ``rows``, one core step at a time."""
    lo, hi = net.state_at
    s, out = state[:, lo:hi], []
    for o in rows:
        f, s = net.step(torch.as_tensor(o[None]), s)
        out.append(f)
    return torch.cat(out)


@pytest.mark.parametrize(("core", "n_step"), [("gru", 3), ("lstm", 2)])
def test_sequence_td_errors_equal_a_step_by_step_rollout(core: str, n_step: int) -> None:
    torch.manual_seed(0)
    p = Params(
        core=core,
        core_size=6,
        hidden=[8],
        seq_length=4,
        seq_burn_in=3,
        seq_stride=2,
        noise="none",
        learning_starts=0,
        gamma=0.9,
    )
    agent = DDPG(SpaceInfo(2, 1, False), p, seed=0)
    with torch.no_grad():  # targets unlike the online nets, so a mix-up shows
        for t in agent.target_params:
            t.add_(0.1 * torch.randn_like(t))
    cfg = ReplayConfig(
        capacity=128,
        batch_size=12,
        min_size=0,
        n_step=n_step,
        prioritized=True,
        updates_per_insert=0,
        sequence=p.replay_sequence,
    )
    rng = np.random.default_rng(1)
    layout = Layout(obs_dim=2, act_dim=1, state_dim=agent.state_dim)
    with Replay.create(layout, cfg, gamma=p.gamma) as replay:
        w = replay.writer(num_envs=1)
        for length, end in [(13, "term"), (9, "trunc"), (17, "term"), (8, None)]:
            state = np.zeros((1, agent.state_dim), np.float32)
            obs = rng.standard_normal((1, 2)).astype(np.float32)
            for s in range(length):
                nxt_state = agent.act(obs, False, state).state
                nxt = rng.standard_normal((1, 2)).astype(np.float32)
                last = s == length - 1
                w.add(
                    obs,
                    rng.uniform(-1, 1, (1, 1)).astype(np.float32),
                    rng.standard_normal(1),
                    nxt,
                    np.array([last and end == "term"]),
                    np.array([last and end == "trunc"]),
                    state=state,
                )
                state, obs = nxt_state, nxt
        w.flush()
        raw = replay.sample()
    batch = Batch.from_numpy(raw, "cpu")
    assert isinstance(batch, SequenceBatch)
    v = SequenceView.of(batch, agent.obs_norm, agent.state_dim, "DDPG", p.seq_burn_in)
    zc = v.read(agent.critic)
    _, (_, td, _) = agent._critic_objective(v, zc, agent.q, agent.mu_target, agent.q_target)
    b_len, t_len = raw["mask"].shape
    assert raw["burn"].max() > 0 and raw["burn"].min() == 0 and raw["mask"].sum() > b_len
    assert raw["boot"].max() >= t_len  # some bootstraps lie past the trained positions
    with torch.no_grad():
        for b in range(b_len):
            state = torch.as_tensor(raw["state"][b : b + 1])
            fc = _rollout(agent.critic, state, list(raw["obs"][b]))
            for t in np.flatnonzero(raw["mask"][b]):
                # s' of position t: o_0 .. o_k along the episode (k its bootstrap position,
                # beyond T for the last n - 1), then next_obs[k].
                k = int(raw["boot"][b, t])
                seq = [
                    raw["obs"][b][j] if j < t_len else raw["next_obs"][b][j - 1]
                    for j in range(k + 1)
                ]
                seq.append(raw["next_obs"][b][k])
                fa = _rollout(agent.actor_target, state, seq)[-1:]
                q_next = agent.q_target(
                    _rollout(agent.critic_target, state, seq)[-1:], agent.mu_target(fa)
                )
                y = torch.as_tensor(raw["reward"][b, t]) + float(raw["discount"][b, t]) * q_next[0]
                q = agent.q(fc[t : t + 1], torch.as_tensor(raw["action"][b, t][None]))[0]
                torch.testing.assert_close(td[t, b], y - q, rtol=1e-5, atol=1e-5)
