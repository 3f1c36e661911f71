"""Lifecycle: dead producers (SIGKILL, even inside the lock) never hang the learner, members
never unlink, the owner leaves nothing in /dev/shm on close, error, Ctrl-C or SIGTERM, the
handle pickles, and a checkpoint round-trips through torch.load(weights_only=True)."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dill
import multiprocess
import numpy as np
import pytest
import torch

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayTimeout
from wheeler2.buffer.storage import HOLDER, LOCK_GEN, RESERVED, TOTAL

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = Layout(obs_dim=2, act_dim=1)


def _shm(prefix: str) -> list[str]:
    return [f for f in os.listdir("/dev/shm") if prefix in f]


def _add(w, t: int, n: int = 1) -> None:  # noqa: ANN001
    """Step t of every copy; obs = (t, copy) so a sample can be checked against its index."""
    obs = np.stack([np.full(n, t), np.arange(n)], 1).astype(np.float32)
    w.add(
        obs,
        np.zeros((n, 1)),
        np.full((n, 1), t),
        obs + [1, 0],
        np.zeros(n, bool),
        np.zeros(n, bool),
    )


def die_holding_the_lock(handle, ready) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    st = replay.storage
    st.acquire()
    total = int(st.hdr[TOTAL])
    st.hdr[RESERVED] = total + 5  # a chunk reserved and half copied...
    slots = np.arange(total, total + 5) % replay.cfg.capacity
    st.arrays["abs"][slots] = -1
    st.arrays["obs"][slots] = -999.0
    ready.set()
    time.sleep(600)  # ...when SIGKILL arrives


def die_before_naming_itself(handle, ready) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    replay.storage.lock._sem.acquire()  # killed before the holder pid is written
    ready.set()
    time.sleep(600)


def test_holder_killed_before_writing_its_pid_is_recovered() -> None:
    cfg = ReplayConfig(capacity=64, batch_size=32, min_size=1, updates_per_insert=0, timeout_s=30)
    ctx = multiprocess.get_context("spawn")
    with Replay.create(LAYOUT, cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        for t in range(10):
            _add(w, t, 2)
        w.flush()
        ready = ctx.Event()
        p = ctx.Process(target=die_before_naming_itself, args=(replay.handle(), ready))
        p.start()
        assert ready.wait(30)
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        t0 = time.monotonic()
        _check_batch(replay.sample())
        assert time.monotonic() - t0 < 10.0


def test_a_wait_that_cannot_take_the_lock_back_leaves_the_holders_lock_alone() -> None:
    """A gate wait releases the lock, sleeps, and takes it back; when another member holds
    it past ``timeout_s`` the wait raises, and the caller's ``finally`` (Replay.insert's,
    sample's) still calls release. That release once freed the other member's lock: holder
    cleared, semaphore at 1 while it was inside, then 2 once it released in turn, so two
    members could be inside at once for the rest of the run."""
    cfg = ReplayConfig(capacity=8, min_size=1, updates_per_insert=0, timeout_s=0.5)
    with Replay.create(LAYOUT, cfg, gamma=0.9) as replay:
        st = replay.storage
        sem, other = st.lock._sem, os.getppid()  # another live process takes it next

        class Asleep:  # the wait's sleep: no notify comes, and the other member goes in
            def acquire(self, block: bool, timeout: float) -> bool:
                assert sem.acquire(False), "the wait did not let the lock go"
                st.hdr[HOLDER], st.hdr[LOCK_GEN] = other, st.hdr[LOCK_GEN] + 1
                return False

        st.updated._sem = Asleep()  # type: ignore[assignment]
        st.acquire()
        try:
            with pytest.raises(ReplayTimeout):
                st.updated.wait(0.05)
        finally:
            st.release()
        assert int(st.hdr[HOLDER]) == other and sem.value() == 0, "freed the holder's lock"
        st.hdr[HOLDER] = 0  # the other member leaves
        sem.release()
        st.acquire(1.0)  # and the lock works as before
        st.release()
        assert sem.value() == 1


def keep_inserting(handle, seed: int) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    w = replay.writer(num_envs=4)
    t = 0
    while True:
        _add(w, 10_000 * (seed + 1) + t, 4)
        t += 1


def _check_batch(b: dict) -> None:
    assert np.all(b["obs"] > -999), "a half-written slot was sampled"
    np.testing.assert_array_equal(b["next_obs"][:, 0], b["obs"][:, 0] + 1)
    np.testing.assert_array_equal(b["reward"][:, 0], b["obs"][:, 0])


def test_producer_killed_inside_the_lock_does_not_hang_the_learner() -> None:
    cfg = ReplayConfig(
        capacity=64, batch_size=128, min_size=1, updates_per_insert=0, chunk=4, timeout_s=20
    )
    ctx = multiprocess.get_context("spawn")
    with Replay.create(LAYOUT, cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        for t in range(40):  # wraps: 80 inserts into 64 slots
            _add(w, t, 2)
        w.flush()
        replay.sample()
        ready = ctx.Event()
        p = ctx.Process(target=die_holding_the_lock, args=(replay.handle(), ready))
        p.start()
        assert ready.wait(30)
        os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.2)  # not reaped yet: a zombie holds the lock
        t0 = time.monotonic()
        for _ in range(20):
            _check_batch(replay.sample())
        assert time.monotonic() - t0 < 5.0
        p.join()
        # The buffer goes on: inserts land where the dead chunk was, samples stay consistent.
        for t in range(40, 60):
            _add(w, t, 2)
        w.flush()
        for _ in range(20):
            _check_batch(replay.sample())
        assert replay.stats()["inserts"] == 120


def test_producers_killed_at_random_moments_leave_the_buffer_usable() -> None:
    cfg = ReplayConfig(
        capacity=2048, batch_size=64, min_size=64, updates_per_insert=0, chunk=8, timeout_s=20
    )
    ctx = multiprocess.get_context("spawn")
    rng = np.random.default_rng(0)
    with Replay.create(LAYOUT, cfg, gamma=0.9) as replay:
        survivor = ctx.Process(target=keep_inserting, args=(replay.handle(), 0))
        survivor.start()
        try:
            for i in range(4):
                victim = ctx.Process(target=keep_inserting, args=(replay.handle(), i + 1))
                victim.start()
                replay.sample(timeout=30)
                time.sleep(rng.uniform(0.05, 0.3))
                os.kill(victim.pid, signal.SIGKILL)
                before = replay.stats()["inserts"]
                t0 = time.monotonic()
                for _ in range(50):
                    _check_batch(replay.sample(timeout=10))
                assert time.monotonic() - t0 < 10.0
                victim.join()
            deadline = time.monotonic() + 10
            while replay.stats()["inserts"] <= before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert replay.stats()["inserts"] > before, "the surviving producer got stuck"
        finally:
            survivor.kill()
            survivor.join()


def attach_and_exit(handle) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    w = replay.writer(num_envs=1)
    _add(w, 7)
    w.flush()
    replay.close()


def test_members_never_unlink_and_owner_close_leaves_nothing() -> None:
    cfg = ReplayConfig(capacity=16, batch_size=4, min_size=1, updates_per_insert=0)
    replay = Replay.create(LAYOUT, cfg, gamma=0.9)
    prefix = replay.handle().prefix
    before = sorted(_shm(prefix))
    assert before
    ctx = multiprocess.get_context("spawn")
    p = ctx.Process(target=attach_and_exit, args=(replay.handle(),))
    p.start()
    p.join()
    assert p.exitcode == 0
    # The member attached, wrote and closed: every segment is still in /dev/shm, by name.
    assert sorted(_shm(prefix)) == before
    assert replay.stats()["inserts"] == 1  # what the member wrote is readable by the owner
    replay.sample()
    replay.close()
    assert _shm(prefix) == []


OWNER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {root!r})
    from wheeler2.buffer import Layout, Replay, ReplayConfig
    r = Replay.create(Layout(obs_dim=2, act_dim=1), ReplayConfig(capacity=32), gamma=0.9)
    print(r.handle().prefix, flush=True)
    how = sys.argv[1]
    if how == "error":
        raise RuntimeError("boom")
    if how == "sigint":
        # A job started in the background (CI, nohup, `cmd &`) inherits SIGINT ignored: the
        # owner would then sleep out its 30 s and exit normally, testing nothing.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "forgotten":
        del r
        time.sleep(0.1)
        sys.exit(0)
    time.sleep(30)
""")


@pytest.mark.parametrize("how", ["normal", "error", "sigint", "sigterm", "forgotten"])
def test_owner_exit_unlinks_every_segment(how: str) -> None:
    """However the owner process ends, nothing of its replay is left in /dev/shm."""
    script = OWNER.format(root=str(ROOT))
    if how == "normal":
        script = script.replace("time.sleep(30)", "sys.exit(0)")
    proc = subprocess.run(
        [sys.executable, "-c", script, how], capture_output=True, text=True, timeout=60
    )
    prefix = proc.stdout.split()[0]
    assert prefix.startswith("w2r_")
    if how in ("error", "sigint"):  # the owner really ended by the exception, not by its sleep
        assert ("RuntimeError" if how == "error" else "KeyboardInterrupt") in proc.stderr
    assert _shm(prefix) == [], proc.stderr


def test_handle_pickles_with_pickle_and_dill() -> None:
    cfg = ReplayConfig(capacity=16, batch_size=4, min_size=1, updates_per_insert=0)
    with Replay.create(LAYOUT, cfg, gamma=0.9) as replay:
        for dumps, loads in ((pickle.dumps, pickle.loads), (dill.dumps, dill.loads)):
            member = Replay.attach(loads(dumps(replay.handle())))
            w = member.writer(num_envs=1)
            _add(w, 3)
            w.flush()
            member.close()
        assert replay.stats()["inserts"] == 2
        with pytest.raises(TypeError):
            pickle.dumps(replay)


def test_checkpoint_round_trip_through_weights_only_load() -> None:
    cfg = ReplayConfig(
        capacity=32, batch_size=16, prioritized=True, min_size=1, updates_per_insert=0, n_step=2
    )
    with Replay.create(LAYOUT, cfg, gamma=0.9, seed=5) as a:
        w = a.writer(num_envs=2)
        for t in range(25):  # wraps
            _add(w, t, 2)
        w.flush()
        b = a.sample()
        a.update_priorities(b["index"], np.arange(16.0))
        buf = io.BytesIO()
        torch.save(a.state_dict(), buf)
        state = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
        with Replay.create(LAYOUT, cfg, gamma=0.9, seed=5) as c:
            c.load_state_dict(state)
            assert c.stats() == a.stats()
            np.testing.assert_array_equal(c.sampler.tree.leaves, a.sampler.tree.leaves)
            assert c.sampler.tree.total == pytest.approx(a.sampler.tree.total)
            # Every stored field (obs, reward, links, episode ids, priorities...) came back.
            assert set(c.storage.arrays) == set(a.storage.arrays)
            assert {"obs", "reward", "next_obs", "abs", "next", "priority"} <= set(a.storage.arrays)
            # Headers hold clocks, the lock and stats; the episodes left open end at the save.
            for key in set(a.storage.arrays) - {"hdr", "fhdr", "truncated"}:
                np.testing.assert_array_equal(c.storage.arrays[key], a.storage.arrays[key], key)
            np.testing.assert_array_equal(c.storage.packed, a.storage.packed)
            # Writers after a load continue episodes' ids without collisions and links work.
            w2 = c.writer(num_envs=2)
            for t in range(25, 30):
                _add(w2, t, 2)
            w2.flush()
            s = c.sample()
            k = np.round(np.log(s["discount"]) / np.log(0.9)).astype(int)
            np.testing.assert_array_equal(s["next_obs"][:, 0], s["obs"][:, 0] + k)
            assert np.all((k >= 1) & (k <= 2))


def test_a_loaded_replay_ends_the_episodes_left_open_and_never_links_across_the_resume() -> None:
    """A resumed run's envs start new episodes: each open episode's last saved row becomes a
    truncation (so a sequence start in its tail is dropped, not redrawn as if more steps were
    coming), and no n-step window runs from a saved row into a row written after the load."""
    cfg = ReplayConfig(capacity=64, batch_size=32, min_size=1, updates_per_insert=0, n_step=3)
    with Replay.create(LAYOUT, cfg, gamma=0.5, seed=3) as a:
        w = a.writer(num_envs=2)
        for t in range(10):  # two copies, both mid-episode at the save
            _add(w, t, 2)
        w.flush()
        state = a.state_dict()
    with Replay.create(LAYOUT, cfg, gamma=0.5, seed=3) as c:
        c.load_state_dict(state)
        a_ = c.storage.arrays
        kept = a_["abs"] >= 0
        last = kept & (a_["obs"][:, 0] == 9)
        assert last.sum() == 2 and a_["truncated"][last].all()
        assert not a_["truncated"][kept & ~last].any() and not a_["terminated"].any()
        w2 = c.writer(num_envs=2)
        for t in range(100, 110):  # codes far from the saved ones: a stitched window shows
            _add(w2, t, 2)
        w2.flush()
        for _ in range(20):
            s = c.sample()
            k = np.round(np.log(s["discount"]) / np.log(0.5)).astype(int)
            np.testing.assert_array_equal(s["next_obs"][:, 0], s["obs"][:, 0] + k)
            old = s["obs"][:, 0] < 100
            # Saved rows' windows end at step 9: the last of them bootstraps after one step.
            np.testing.assert_array_equal(k[old], np.minimum(3, 10 - s["obs"][old, 0]))


def test_a_sequence_start_in_a_saved_open_episode_tail_is_dropped_after_a_load() -> None:
    from wheeler2.buffer import SequenceConfig

    seq = SequenceConfig(length=2, burn_in=2, stride=1)
    cfg = ReplayConfig(
        capacity=64, batch_size=16, prioritized=True, min_size=1, updates_per_insert=0, sequence=seq
    )
    with Replay.create(LAYOUT, cfg, gamma=0.9, seed=1) as a:
        w = a.writer(num_envs=2)
        for t in range(10):
            _add(w, t, 2)
        w.flush()
        state = a.state_dict()
    with Replay.create(LAYOUT, cfg, gamma=0.9, seed=1) as c:
        c.load_state_dict(state)
        for _ in range(30):
            c.sample()
        leaves = c.sampler.tree.leaves[:20]
        step = c.storage.arrays["obs"][:20, 0]
        # Starts at steps 8 and 9 have only burn-in left: nothing will ever follow them.
        assert (leaves[step >= 8] == 0).all() and (leaves[step < 8] > 0).all()
