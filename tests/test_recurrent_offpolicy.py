"""Recurrent TD3 (issue 15): core = "none" keeps the feedforward numbers, burn-in steps give no
gradient, positions outside the loss mask change nothing, and a short run goes through the
engine (policy state stored with every transition, sequences sampled from the replay)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.cores import RecurrentCore
from agents.recurrent import unroll
from agents.td3 import TD3, Params
from wheeler2.agent import Batch, SequenceBatch, SpaceInfo


def _transition_batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    b = 8
    return dict(
        obs=rng.standard_normal((b, 3)).astype(np.float32),
        action=rng.uniform(-1, 1, (b, 1)).astype(np.float32),
        reward=rng.standard_normal((b, 1)).astype(np.float32),
        next_obs=rng.standard_normal((b, 3)).astype(np.float32),
        discount=np.full(b, 0.98, np.float32),
        weight=np.ones(b, np.float32),
        index=np.arange(b),
    )


def test_core_none_keeps_the_feedforward_numbers() -> None:
    # Recorded with agents/td3.py as it was before the recurrent option (commit 04ae06d).
    torch.set_num_threads(1)
    agent = TD3(SpaceInfo(3, 1, False), Params(hidden=[16, 16], learning_starts=0, noise="none"))
    assert agent.state_dim == 0 and Params().replay_sequence is None
    arrays = _transition_batch()
    for _ in range(2):
        out = agent.learn(Batch.from_numpy(arrays, "cpu"))
    assert out.metrics["critic_loss"] == pytest.approx(0.9090365171432495, rel=1e-5)
    assert out.metrics["actor_loss"] == pytest.approx(0.03785977140069008, rel=1e-5)
    np.testing.assert_allclose(
        out.td_error[:3], [0.33278709650039673, 0.37558645009994507, 0.30357998609542847], 1e-5
    )
    act = agent.act(arrays["obs"][:2], False).action.ravel()
    np.testing.assert_allclose(act, [-0.08328371495008469, -0.06015482172369957], 1e-5)


def test_unroll_cuts_the_gradient_of_burn_in_rows_only() -> None:
    torch.manual_seed(0)
    core = RecurrentCore("gru", 2, 4)
    x = torch.randn(6, 2, 2, requires_grad=True)
    has_burn = torch.tensor([True, False])
    y = unroll(core, x, torch.zeros(2, 4), burn_in=3, has_burn=has_burn)
    y[3:].sum().backward()  # a loss on the positions after the burn-in
    g = x.grad.abs().sum(-1)
    assert (g[:3, 0] == 0).all()  # row 0: its burn-in only rebuilt the state
    assert (g[:3, 1] > 0).all()  # row 1 starts its episode: no burn-in, gradient throughout
    assert (g[3:] > 0).all()
    # The forward values are those of one plain unroll: only the gradient is cut.
    ref, _ = core.sequence(x, torch.zeros(2, 4), torch.zeros(6, 2, dtype=torch.bool))
    torch.testing.assert_close(y, ref)


def _seq_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """Two sequences of T = 3 burn-in + 4: row 0 has a burn-in and ends at position 5, row 1
    starts its episode (no burn-in) and runs through."""
    rng = np.random.default_rng(seed)
    b, t = 2, 7
    alive = np.ones((b, t), bool)
    alive[0, 6:] = False
    mask = alive.copy()
    mask[0, :3] = False
    mask[1, 4:] = False  # length 4 from position 0
    return dict(
        obs=rng.standard_normal((b, t, 2)).astype(np.float32),
        action=rng.uniform(-1, 1, (b, t, 1)).astype(np.float32),
        reward=rng.standard_normal((b, t, 1)).astype(np.float32),
        next_obs=rng.standard_normal((b, t, 2)).astype(np.float32),
        discount=np.full((b, t), 0.98, np.float32),
        boot=np.tile(np.arange(t), (b, 1)),
        alive=alive,
        mask=mask,
        burn=np.array([3, 0]),
        weight=np.ones(b, np.float32),
        index=np.arange(b),
        state=rng.standard_normal((b, 16)).astype(np.float32),
    )


def _agent() -> TD3:
    torch.manual_seed(0)
    p = Params(core="gru", core_size=8, hidden=[16], seq_length=4, seq_burn_in=3, noise="none")
    return TD3(SpaceInfo(2, 1, False), p, seed=0)


def test_burn_in_steps_contribute_no_gradient_to_the_learner() -> None:
    agent = _agent()
    batch = Batch.from_numpy(_seq_arrays(), "cpu")
    assert isinstance(batch, SequenceBatch)
    batch.obs.requires_grad_(True)
    agent.learn(batch)  # the critic's loss is backpropagated into the inputs too
    g = batch.obs.grad.abs().sum(-1)
    assert (g[0, :3] == 0).all()  # row 0's burn-in
    assert (g[0, 3:6] > 0).all()  # its trained positions
    assert (g[0, 6:] == 0).all()  # past its episode's end
    assert (g[1, :4] > 0).all()  # row 1 from its episode's start
    assert (g[1, 4:] == 0).all()  # beyond its length: nothing later feeds earlier outputs


def test_positions_outside_the_mask_change_nothing() -> None:
    base = _seq_arrays()
    out0 = _agent().learn(Batch.from_numpy(base, "cpu"))
    noisy = {k: v.copy() for k, v in base.items()}
    off = ~base["mask"]
    noisy["reward"][off] = 1e3
    noisy["discount"][off] = 0.5
    noisy["action"][off] = -1.0
    noisy["obs"][0, 6:] = 1e3  # after row 0's episode ended
    out1 = _agent().learn(Batch.from_numpy(noisy, "cpu"))
    assert out1.metrics["critic_loss"] == pytest.approx(out0.metrics["critic_loss"], rel=1e-6)
    np.testing.assert_allclose(out1.td_error, out0.td_error, rtol=1e-6)
    # The check can fail: a trained position's reward does move the loss.
    noisy["reward"][0, 4] += 1.0
    out2 = _agent().learn(Batch.from_numpy(noisy, "cpu"))
    assert out2.metrics["critic_loss"] != pytest.approx(out0.metrics["critic_loss"], rel=1e-3)


def test_sequence_priority_comes_back_per_sequence() -> None:
    arrays = _seq_arrays()
    out = _agent().learn(Batch.from_numpy(arrays, "cpu"))
    assert out.td_error.shape == (2,) and (out.td_error > 0).all()


def test_recurrent_act_carries_both_cores_states() -> None:
    agent = _agent()
    obs = np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32)
    out = agent.act(obs, explore=False, state=agent.initial_state(3))
    assert out.state.shape == (3, 16) and np.abs(out.state).sum() > 0
    # The actor's half is the actor core's step, the critic's half the critic core's.
    with torch.no_grad():
        x = torch.as_tensor(obs)
        _, ha = agent.actor_net.core.step(x, torch.zeros(3, 8))
        _, hc = agent.critic.core.step(x, torch.zeros(3, 8))
    np.testing.assert_allclose(out.state, torch.cat([ha, hc], 1).numpy(), rtol=1e-5, atol=1e-6)
    # From another state, another action: the policy reads its memory.
    again = agent.act(obs, explore=False, state=out.state)
    assert not np.allclose(again.action, out.action)


def test_learning_from_transitions_is_refused() -> None:
    arrays = _transition_batch()
    arrays["obs"], arrays["next_obs"] = arrays["obs"][:, :2], arrays["next_obs"][:, :2]
    with pytest.raises(TypeError, match="sequences"):
        _agent().learn(Batch.from_numpy(arrays, "cpu"))


RUN = """
[experiment]
name = "td3-gru"
seed = 1
total_steps = 600
eval_every = 600
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "PendulumNoVel-v1"

[buffer]
capacity = 5_000
batch_size = 8
prioritized = true
n_step = 2
updates_per_insert = 0.05

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
learning_starts = 200
hidden = [16]
core = "gru"
core_size = 8
seq_length = 8
seq_burn_in = 4
"""


def test_a_short_run_trains_on_sequences_with_stored_states(tmp_path, capsys) -> None:  # noqa: ANN001
    from tests.offpolicy_runs import run_text

    seen: list[SequenceBatch] = []
    learn = TD3.learn_sequences

    def spy(self: TD3, batch: SequenceBatch):  # noqa: ANN202
        seen.append(batch)
        return learn(self, batch)

    TD3.learn_sequences = spy  # type: ignore[method-assign]
    try:
        _, summary = run_text(tmp_path, capsys, RUN)
    finally:
        TD3.learn_sequences = learn  # type: ignore[method-assign]
    assert summary["env_steps"] >= 600 and summary["eval"]
    assert len(seen) >= 15  # (600 - 200) * 0.05 updates
    batch = seen[-1]
    assert batch.obs.shape == (8, 12, 2) and batch.next_obs.shape == (8, 13, 2)
    # The engine stored the states the agent acted in: by step 200 they are far from zero,
    # except at the sequences that start an episode (the initial state).
    starts = batch.burn == 0
    norms = batch.state.abs().sum(1)
    assert (norms[~starts] > 0).all()
    assert (norms[starts] == 0).all()
