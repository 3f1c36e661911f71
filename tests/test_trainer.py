"""The learner half of a member (``runtime.member.Trainer``): it writes the agent's TD errors
back to the replay as priorities, refuses non-finite ones, and averages the metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import wheeler2
from wheeler2.agent import LearnOut
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.runtime.trainer import NonFiniteError, Trainer

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


def _filled(inserts: int, seed: int = 0) -> Replay:
    """A PER buffer of capacity 64 holding ``inserts`` items; item i's obs[:, 0] is i."""
    cfg = ReplayConfig(
        capacity=64,
        batch_size=8,
        prioritized=True,
        alpha=ALPHA,
        eps=EPS,
        updates_per_insert=0,
        min_size=1,
    )
    r = Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9, seed=seed)
    w = r.writer(num_envs=1)
    for t in range(inserts):
        obs = np.array([[t, 0]], np.float32)
        w.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, np.zeros(1, bool), np.zeros(1, bool))
    w.flush()
    return r


@pytest.fixture
def replay():
    r = _filled(20)
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


# -- prefetch ([buffer] prefetch) ----------------------------------------------------------


def _td(sample: dict) -> np.ndarray:
    return -(10.0 * sample["obs"][:, 0].astype(np.float64) + 1.0)  # ScriptedAgent's TD error


def test_prefetch_draws_each_batch_before_the_last_priorities_are_written() -> None:
    """With prefetch, batch t + 1 is drawn before batch t's priorities are written, every time:
    the batches equal those of that order done by hand on a twin buffer (same seed, same
    contents), and differ from the plain order's, whose draws see every priority."""
    steps = 12
    by_hand = _filled(40)
    try:
        expected = [by_hand.sample()]
        for t in range(steps - 1):
            expected.append(by_hand.sample())
            by_hand.update_priorities(expected[t]["index"], _td(expected[t]))
    finally:
        by_hand.close()
    plain_replay, plain = _filled(40), []
    try:
        for _ in range(steps):
            s = plain_replay.sample()
            plain.append(s)
            plain_replay.update_priorities(s["index"], _td(s))
    finally:
        plain_replay.close()
    replay = _filled(40)
    agent = ScriptedAgent()
    trainer = Trainer(agent, replay, prefetch=True)
    try:
        assert trainer.train_available(max_updates=steps) == steps
    finally:
        trainer.close()
        replay.close()
    got = [np.asarray(b.index) for b in agent.batches]
    assert len(got) == steps
    for t in range(steps):
        np.testing.assert_array_equal(got[t], expected[t]["index"], err_msg=f"batch {t}")
    assert any(not np.array_equal(got[t], plain[t]["index"]) for t in range(steps)), (
        "the two orders drew the same batches: this test would not tell them apart"
    )


class _Watched:
    """A replay whose ``sample`` records the thread it ran in and signals that it started."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.threads: list[str] = []
        self.started = [threading.Event() for _ in range(64)]
        self.fail_at: int | None = None

    def can_sample(self) -> bool:
        return self.replay.can_sample()

    def sample(self) -> dict:
        k = len(self.threads)
        self.threads.append(threading.current_thread().name)
        self.started[k].set()
        if k == self.fail_at:
            raise OSError(f"sample {k} failed")
        return self.replay.sample()

    def update_priorities(self, index: np.ndarray, td: np.ndarray) -> None:
        self.replay.update_priorities(index, td)


class _WaitingAgent(ScriptedAgent):
    """learn() of each of the first ``waits`` updates k returns only once sample k + 1 has
    started (or 10 s passed: a wait for an event, far longer than a sample takes)."""

    def __init__(self, watched: _Watched, waits: int) -> None:
        super().__init__()
        self.watched = watched
        self.waits = waits
        self.overlapped: list[bool] = []

    def learn(self, batch) -> LearnOut:  # noqa: ANN001
        k = len(self.batches)
        if k < self.waits:
            self.overlapped.append(self.watched.started[k + 1].wait(timeout=10.0))
        return super().learn(batch)


def test_prefetch_samples_the_next_batch_in_another_thread_during_the_step(
    replay: Replay,
) -> None:
    """Sample k + 1 starts, in the prefetch thread, while update k is still learning; the last
    update of a call samples nothing ahead (the member acts and inserts between calls)."""
    watched = _Watched(replay)
    agent = _WaitingAgent(watched, waits=3)
    trainer = Trainer(agent, watched, prefetch=True)
    try:
        assert trainer.train_available(max_updates=4) == 4
    finally:
        trainer.close()
    assert agent.overlapped == [True, True, True]
    assert watched.threads[0] == threading.current_thread().name
    assert all(name.startswith("w2-prefetch") for name in watched.threads[1:])
    assert len(watched.threads) == 4  # nothing drawn ahead past the call's last update


def test_prefetch_off_samples_in_the_caller_only(replay: Replay) -> None:
    watched = _Watched(replay)
    trainer = Trainer(ScriptedAgent(), watched, prefetch=False)
    assert trainer.train_available(max_updates=3) == 3
    assert watched.threads == [threading.current_thread().name] * 3


def test_a_failed_prefetch_raises_in_the_learner_and_close_ends_the_thread(
    replay: Replay,
) -> None:
    """The prefetch thread's error reaches the caller as itself, after the update before it
    was taken; close() then leaves no prefetch thread behind."""
    watched = _Watched(replay)
    watched.fail_at = 2
    agent = ScriptedAgent()
    trainer = Trainer(agent, watched, prefetch=True)
    with pytest.raises(OSError, match="sample 2 failed"):
        trainer.train_available(max_updates=5)
    assert trainer.updates == 2 and len(agent.batches) == 2
    trainer.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("w2-prefetch")]


def test_close_waits_for_a_prefetch_left_by_a_failed_step(replay: Replay) -> None:
    """A step that raises (a NaN TD error) leaves the next batch in flight; close() lets it
    finish and ends the thread."""
    trainer = Trainer(ScriptedAgent(scale=float("nan")), replay, prefetch=True)
    with pytest.raises(NonFiniteError):
        trainer.train_available(max_updates=3)
    assert trainer._ahead is not None  # the case this test is about
    trainer.close()
    assert trainer._ahead is None
    assert not [t for t in threading.enumerate() if t.name.startswith("w2-prefetch")]


SERIAL_TEAM = """
[experiment]
name = "repro"
seed = 3
total_steps = 200
eval_every = 200
eval_episodes = 1
backend = "serial"

[env]
id = "Pendulum-v1"
num_envs = 2

[buffer]
capacity = 2000
batch_size = 32
prioritized = true
updates_per_insert = 2.0
prefetch = {prefetch}

[[team]]
name = "learner"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 50

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
[team.params]
hidden = [16, 16]
"""


def _learner_state(tmp_path: Path, tag: str, prefetch: bool) -> dict:
    path = tmp_path / f"{tag}.toml"
    path.write_text(SERIAL_TEAM.format(prefetch=str(prefetch).lower()))
    run_dir = wheeler2.run(path, out=str(tmp_path / tag))
    ckpt = torch.load(Path(run_dir) / "checkpoints" / "latest.pt", weights_only=True)
    return ckpt["members"]["learner"]


def test_a_serial_run_with_prefetch_is_reproducible_from_its_seed(tmp_path: Path) -> None:
    """Two serial runs of a PER team with the learner prefetching end with the same learner
    weights to the bit: the fixed order (no draw races a priority write or an insert). The
    run without prefetch ends elsewhere (its draws see every priority): the runs did learn
    from prioritized batches, so the comparison could have failed."""
    first = _learner_state(tmp_path, "a", prefetch=True)
    second = _learner_state(tmp_path, "b", prefetch=True)
    plain = _learner_state(tmp_path, "c", prefetch=False)
    # A few hundred prioritized updates: enough for the run without prefetch to end elsewhere.
    assert first["updates"] == second["updates"] > 200
    for net in ("actor", "critic"):
        for name, value in first[net].items():
            torch.testing.assert_close(second[net][name], value, rtol=0, atol=0, msg=name)
    assert any(
        not torch.equal(plain["critic"][name], value) for name, value in first["critic"].items()
    )
