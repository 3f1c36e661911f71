"""The learner half of a member (``runtime.member.Trainer``): it writes the agent's TD errors
back to the replay as priorities, refuses non-finite ones, and averages the metrics."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.agent import LearnOut
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.runtime.member import NonFiniteError, Trainer

ALPHA, EPS = 0.6, 1e-6


class ScriptedAgent:
    """learn() returns a TD error computed from the batch (|td| = 10 * obs[:, 0] + 1)."""

    device = "cpu"

    def __init__(self, scale: float = 10.0) -> None:
        self.scale = scale
        self.batches = []

    def learn(self, batch) -> LearnOut:  # noqa: ANN001
        self.batches.append(batch)
        obs0 = batch.obs[:, 0].numpy().astype(np.float64)
        td = -(self.scale * obs0 + 1.0)  # negative: the priority is |td|
        return LearnOut(metrics={"loss": float(obs0.mean())}, td_error=td)


@pytest.fixture
def replay():
    cfg = ReplayConfig(
        capacity=64,
        batch_size=8,
        prioritized=True,
        alpha=ALPHA,
        eps=EPS,
        updates_per_insert=0,
        min_size=1,
    )
    r = Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9, seed=0)
    w = r.writer(num_envs=1)
    for t in range(20):
        obs = np.array([[t, 0]], np.float32)
        w.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, np.zeros(1, bool), np.zeros(1, bool))
    w.flush()
    yield r
    r.close()


def test_trainer_writes_td_errors_back_as_priorities(replay: Replay) -> None:
    """After each update the sampled items' leaves are (|td| + eps) ** alpha of the TD errors
    the agent returned; the items not sampled keep the max priority new items got."""
    agent = ScriptedAgent()
    trainer = Trainer(agent, replay)
    assert trainer.train_available(max_updates=3) == 3
    assert trainer.updates == 3 and len(agent.batches) == 3
    leaves = replay.sampler.tree.leaves
    sampled = set()
    for batch in agent.batches:
        idx = np.asarray(batch.index) % 64
        sampled |= set(idx.tolist())
    for i in sampled:  # obs[:, 0] of item i is i (inserted in order)
        assert leaves[i] == pytest.approx((10.0 * i + 1.0 + EPS) ** ALPHA, rel=1e-6), i
    untouched = [i for i in range(20) if i not in sampled]
    assert untouched, "a test with every item sampled would not see the difference"
    for i in untouched:
        assert leaves[i] == pytest.approx(1.0), i  # the initial max priority, ** alpha
    assert replay.stats()["max_priority"] == pytest.approx(10.0 * max(sampled) + 1.0 + EPS)
    assert trainer.pop_metrics()["updates"] == 3.0


def test_non_finite_td_error_stops_the_learner(replay: Replay) -> None:
    """A NaN TD error raises NonFiniteError instead of reaching the priorities."""
    trainer = Trainer(ScriptedAgent(scale=float("nan")), replay)
    with pytest.raises(NonFiniteError, match="TD error"):
        trainer.train_available(max_updates=1)
    # Every item still has the priority it was inserted with (the initial max, 1 ** alpha).
    np.testing.assert_array_equal(replay.sampler.tree.leaves[:20], 1.0)
    assert trainer.updates == 0


def test_owed_updates_beat_the_heart_between_chunks() -> None:
    """At the end of the budget the learner takes every update the gate owes; it reports after
    each chunk of them, so a long backlog on a busy machine is not mistaken for a hang."""
    cfg = ReplayConfig(capacity=64, batch_size=4, updates_per_insert=1.0, min_size=1)
    r = Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9, seed=0)
    try:
        w = r.writer(num_envs=1, block=False)
        for t in range(20):
            obs = np.array([[t, 0]], np.float32)
            no = np.zeros(1, bool)
            w.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, no, no)
        w.flush()
        trainer = Trainer(ScriptedAgent(), r)
        beats: list[int] = []
        done = trainer.train_owed(heartbeat=lambda: beats.append(trainer.updates), every=4)
        assert done == trainer.updates and done >= 12  # the gate owed one update per insert
        assert not r.can_sample()  # nothing left owed
        assert beats == list(range(4, done + 1, 4)) + ([done] if done % 4 else [])
    finally:
        r.close()
