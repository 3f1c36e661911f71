"""The ratio gate's rules in one process (fast): a disabled gate, the first insert a learner
needs, and a held producer let in by the update that makes room for it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayTimeout
from wheeler2.buffer.storage import LEARNER_PID


def _one_step(writer) -> None:  # noqa: ANN001
    obs = np.zeros((1, 3), np.float32)
    writer.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, np.zeros(1, bool), np.zeros(1, bool))


def test_a_disabled_gate_holds_neither_side() -> None:
    """``updates_per_insert = 0`` turns the gate off: past ``min_size`` the learner samples as
    often as it likes (20 samples from 3 inserts), and producers far ahead of a learner that
    never samples are never held."""
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=0, min_size=3, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        for _ in range(2):
            _one_step(w)
        assert not replay.can_sample()  # the gate is off, min_size still holds
        _one_step(w)
        for _ in range(20):
            assert replay.can_sample()
            replay.sample(timeout=1)
        assert replay.stats()["updates"] == 20
        replay.storage.hdr[LEARNER_PID] = 1  # a learner elsewhere, so producers would honour it
        for _ in range(60):
            _one_step(w)
            assert replay.gate.producer_may_insert()


def test_with_min_size_0_the_learner_still_waits_for_one_insert() -> None:
    """``min_size = 0`` is a valid setting; an empty buffer has nothing to sample all the same,
    so the first update needs one insert (and with ratio 1 the second needs another)."""
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=1.0, min_size=0, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        assert not replay.can_sample()
        _one_step(w)
        assert replay.can_sample()  # u = 0 <= 1 * (1 - 0)
        replay.sample()
        assert replay.can_sample()  # u = 1 <= 1
        replay.sample()
        assert not replay.can_sample()  # u = 2 > 1


def test_a_held_producer_is_let_in_by_the_update_that_makes_room() -> None:
    """A producer waiting on the gate (ratio 1, tolerance 2, 3 inserts past ``min_size``) is
    let in by the one learner update that brings the bound to 3, long before its timeout (30 s),
    and is held again by the next insert."""
    cfg = ReplayConfig(
        capacity=100,
        batch_size=4,
        updates_per_insert=1.0,
        min_size=10,
        gate_tolerance=2,
        chunk=1,
        timeout_s=30,
    )
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        free = replay.writer(num_envs=1, block=False)
        for _ in range(12):
            _one_step(free)
        assert replay.gate.producer_may_insert()  # ahead = 2 <= 0 + 2
        _one_step(free)
        assert not replay.gate.producer_may_insert()  # ahead = 3 > 2
        replay.storage.hdr[LEARNER_PID] = 1
        gated = replay.writer(num_envs=1, block=True)
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                _one_step(gated)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            time.sleep(0.3)
            assert replay.stats()["inserts"] == 13, "the producer should be held by the gate"
            replay.sample()  # updates = 1: ahead = 3 <= 1 + 2
            thread.join(timeout=20)
            assert not thread.is_alive(), "the update did not let the producer in"
            assert not errors, errors
            assert replay.stats()["inserts"] == 14 and replay.stats()["updates"] == 1
            assert not replay.gate.producer_may_insert()  # ahead = 4 > 3
        finally:
            if thread.is_alive():  # after a failed assert: free the held producer
                replay.release()
            thread.join()


def test_a_learner_waits_its_whole_timeout_before_giving_up() -> None:
    """The timeout counts from the last sign of life (here: the start of the wait, no insert
    ever came): the learner gives up no sooner than ``timeout`` seconds."""
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=1.0, min_size=10)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        started = time.time()
        with pytest.raises(ReplayTimeout, match="no insert for"):
            replay.sample(timeout=0.3)
        assert time.time() - started >= 0.3


@pytest.mark.parametrize("ratio", [0.3, 1.0, 2.5])
def test_owed_is_the_number_of_updates_the_gate_lets_through(ratio: float) -> None:
    """``RatioGate.owed()`` counts exactly the samples ``can_sample`` allows before the next
    insert (0 below ``min_size``), and is None for a disabled gate."""
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=ratio, min_size=5, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        for _ in range(12):
            _one_step(w)
            owed = replay.gate.owed()
            taken = 0
            while replay.can_sample():
                replay.sample()
                taken += 1
            assert owed == taken, replay.stats()
            assert replay.gate.owed() == 0
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=0, min_size=3, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        assert replay.gate.owed() is None
