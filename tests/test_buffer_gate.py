"""The ratio gate with two producer processes: updates per insert held at the target."""

from __future__ import annotations

import multiprocess
import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayTimeout

TARGET = 0.5
MIN_SIZE = 500
PER_PRODUCER = 12_000


def produce(handle, seed: int) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    rng = np.random.default_rng(seed)
    w = replay.writer(num_envs=4)
    obs = np.zeros((4, 3), np.float32)
    while w.inserted < PER_PRODUCER:
        done = rng.random(4) < 0.02
        w.add(obs, np.zeros((4, 1), np.float32), np.zeros((4, 1)), obs, done, np.zeros(4, bool))
    replay.close()


def test_gate_holds_updates_per_insert_with_two_producers() -> None:
    """The gate's two invariants at every sample, however the processes are scheduled (no
    timing in the asserts): the learner never runs ahead (``updates <= r * (inserts - min_size)
    + 1``) and producers never run further ahead than the tolerance plus one block (a producer
    passes the gate, then inserts up to ``chunk`` steps of its 4 copies). After the producers
    finish, the learner takes exactly the updates the gate owes."""
    cfg = ReplayConfig(
        capacity=50_000,
        batch_size=32,
        updates_per_insert=TARGET,
        min_size=MIN_SIZE,
        chunk=16,
        gate_tolerance=128,
        timeout_s=30,
    )
    block = cfg.chunk * 4  # the most one insert adds (produce() writes 4 copies)
    ctx = multiprocess.get_context("spawn")
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        procs = [ctx.Process(target=produce, args=(replay.handle(), i)) for i in range(2)]
        for p in procs:
            p.start()
        checked = 0
        try:
            while any(p.is_alive() for p in procs) or replay.can_sample():
                if not any(p.is_alive() for p in procs) and not replay.can_sample():
                    break
                try:
                    replay.sample(timeout=2.0)
                except ReplayTimeout:
                    continue  # producers finished (or are slow): check again, no assert here
                s = replay.stats()  # inserts read first: only ours move updates
                ahead = s["inserts"] - MIN_SIZE
                assert s["updates"] <= TARGET * ahead + 1, "learner ran ahead"
                assert ahead <= s["updates"] / TARGET + cfg.gate_tolerance + block, (
                    "producers ran ahead"
                )
                checked += 1
        finally:
            for p in procs:
                p.join(timeout=30)
        assert all(p.exitcode == 0 for p in procs)
        s = replay.stats()
        assert 2 * PER_PRODUCER <= s["inserts"] < 2 * (PER_PRODUCER + block)
        # The learner drained what the gate owed: one update past r * (inserts - min_size).
        assert s["updates"] == int(TARGET * (s["inserts"] - MIN_SIZE)) + 1
        assert checked == s["updates"]  # every update was checked against both invariants


def test_learner_times_out_clearly_without_producers() -> None:
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=1.0, min_size=10)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        assert not replay.can_sample()
        with pytest.raises(ReplayTimeout, match="no insert for .*producer may have died"):
            replay.sample(timeout=0.3)


def test_serial_writer_never_blocks_on_its_own_learner() -> None:
    # The serial backend writes and samples from one process: flushes must not wait on the gate.
    cfg = ReplayConfig(
        capacity=1000,
        batch_size=4,
        updates_per_insert=0.01,
        min_size=10,
        gate_tolerance=0,
        chunk=1,
        timeout_s=1,
    )
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1)
        obs = np.zeros((1, 3), np.float32)
        for _ in range(300):
            w.add(
                obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, np.zeros(1, bool), np.zeros(1, bool)
            )
            if replay.can_sample():
                replay.sample()
        assert replay.stats()["inserts"] == 300


def _one_step(writer) -> None:  # noqa: ANN001
    """One non-terminal vector step of a single env copy."""
    obs = np.zeros((1, 3), np.float32)
    writer.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs, np.zeros(1, bool), np.zeros(1, bool))


def _ahead_of_the_learner(timeout_s: float) -> ReplayConfig:
    """A gate that holds producers once 5 inserts past min_size have no update to match."""
    return ReplayConfig(
        capacity=1000,
        batch_size=4,
        updates_per_insert=1.0,
        min_size=10,
        gate_tolerance=5,
        chunk=1,
        timeout_s=timeout_s,
    )


def test_blocking_writer_waits_for_the_learner_and_times_out_clearly() -> None:
    from wheeler2.buffer.storage import LEARNER_PID

    cfg = _ahead_of_the_learner(timeout_s=0.5)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        replay.storage.hdr[LEARNER_PID] = 1  # a learner elsewhere that never samples
        free = replay.writer(num_envs=1, block=False)
        for _ in range(50):
            _one_step(free)
        assert replay.stats()["inserts"] == 50
        gated = replay.writer(num_envs=1)
        with pytest.raises(ReplayTimeout, match="no update for .*learner may have died"):
            _one_step(gated)


def test_a_learner_that_lives_but_does_not_sample_keeps_producers_waiting() -> None:
    """An eval longer than ``timeout_s``: the learner's heartbeat (``alive``) holds the gate's
    producers, who insert once it samples again. Without it they died of ReplayTimeout."""
    import threading
    import time

    from wheeler2.buffer.storage import LEARNER_PID

    cfg = _ahead_of_the_learner(timeout_s=0.6)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        replay.storage.hdr[LEARNER_PID] = 1  # a learner elsewhere
        free = replay.writer(num_envs=1, block=False)
        for _ in range(50):
            _one_step(free)
        errors: list[BaseException] = []

        def produce_once() -> None:
            try:
                _one_step(replay.writer(num_envs=1))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        producer = threading.Thread(target=produce_once)
        producer.start()
        for _ in range(8):  # 1.6 s of eval, a heartbeat every 0.2 s
            replay.alive()
            time.sleep(0.2)
        assert not errors, errors
        while producer.is_alive() and not errors:
            replay.sample()  # the eval is over: updates let the producer in
            producer.join(0.05)
        assert not errors, errors


def _wait_to_insert(handle, done) -> None:  # noqa: ANN001
    """A producer far ahead of a learner that never samples: waits on the gate to insert."""
    replay = Replay.attach(handle)
    _one_step(replay.writer(num_envs=1, block=True))
    done.set()
    replay.close()


def test_release_lets_a_waiting_producer_insert_at_once() -> None:
    """A run that stops: the learner no longer samples, and a producer that waits on the gate
    must see the stop at once rather than after ``timeout_s``."""
    cfg = _ahead_of_the_learner(timeout_s=60)
    ctx = multiprocess.get_context("spawn")
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        free = replay.writer(num_envs=1, block=False)
        for _ in range(50):  # 40 past min_size with no update: far beyond the tolerance
            _one_step(free)
        done = ctx.Event()
        proc = ctx.Process(target=_wait_to_insert, args=(replay.handle(), done))
        proc.start()
        try:
            assert not done.wait(3.0), "the producer should be held by the gate"
            replay.release()
            # Without release the producer stays held until timeout_s (60 s) and then fails
            # with ReplayTimeout (no insert, exit code 1); 30 s is a wide margin for a loaded
            # machine and still well short of timeout_s. The proof is the insert below.
            assert done.wait(30.0), "release did not let the producer go"
            proc.join(timeout=30)
        finally:
            if proc.is_alive():
                proc.kill()
        assert proc.exitcode == 0
        assert replay.stats()["inserts"] == 51


def test_learner_starts_at_exactly_min_size_and_counts_its_updates() -> None:
    """The first sample is allowed at ``min_size`` inserts, not one before or after; each
    sample counts one update, and with ``updates_per_insert = 1`` the learner may take update
    ``u + 1`` while ``u <= inserts - min_size``."""
    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=1.0, min_size=10, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        for _ in range(9):
            _one_step(w)
        assert replay.stats()["inserts"] == 9 and not replay.can_sample()
        _one_step(w)
        assert replay.can_sample()  # inserts == min_size: update 1 (u = 0 <= 0)
        replay.sample()
        assert replay.stats()["updates"] == 1 and not replay.can_sample()
        for _ in range(3):
            _one_step(w)  # inserts - min_size = 3: updates 2, 3 and 4 are owed
        taken = 0
        while replay.can_sample():
            replay.sample()
            taken += 1
        assert taken == 3 and replay.stats()["updates"] == 4


def test_learner_waits_for_a_late_insert_instead_of_timing_out() -> None:
    """A slow but live producer is waited for: the learner blocked on the gate is woken by the
    insert and samples, no ReplayTimeout (its timeout, 30 s, is far beyond the 0.5 s delay)."""
    import threading
    import time

    cfg = ReplayConfig(capacity=100, batch_size=4, updates_per_insert=1.0, min_size=10, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        for _ in range(9):
            _one_step(w)

        def late() -> None:
            time.sleep(0.5)
            _one_step(w)

        thread = threading.Thread(target=late)
        thread.start()
        try:
            batch = replay.sample(timeout=30)
        finally:
            thread.join()
        assert batch["obs"].shape == (4, 3)
        assert replay.stats()["inserts"] == 10 and replay.stats()["updates"] == 1


def test_producers_may_insert_up_to_exactly_the_tolerance_ahead() -> None:
    """Producers are let in while ``inserts - min_size <= updates / ratio + tolerance`` and not
    one insert later; each learner update (ratio 2: half an insert's worth) moves the bound,
    and release() lifts it. A stricter or looser gate fails here."""
    cfg = ReplayConfig(
        capacity=100, batch_size=4, updates_per_insert=2.0, min_size=5, chunk=1, gate_tolerance=3
    )
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1, block=False)
        gate = replay.gate
        for _ in range(8):  # ahead = 3 = 0 / 2 + 3: still allowed
            _one_step(w)
        assert gate.producer_may_insert()
        _one_step(w)  # ahead = 4 > 3
        assert not gate.producer_may_insert()
        replay.sample()  # updates = 1: 4 <= 0.5 + 3 is still false
        assert not gate.producer_may_insert()
        replay.sample()  # updates = 2: 4 <= 1 + 3
        assert gate.producer_may_insert()
        _one_step(w)  # ahead = 5 > 4
        assert not gate.producer_may_insert()
        replay.release()
        assert gate.producer_may_insert()
