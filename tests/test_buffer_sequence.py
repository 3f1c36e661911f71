"""Sequence replay (issue 15): the policy-state column, sequences cut on a stride with burn-in,
their masks at episode ends and at the ring's write head, sequence priorities, and HER with one
goal per sequence. Expected values are worked out by hand from steps whose observations encode
(episode, step)."""

from __future__ import annotations

import multiprocess
import numpy as np

from wheeler2.buffer import Layout, Replay, ReplayConfig


def _write_states(handle, value: float) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    w = replay.writer(num_envs=2)
    for t in range(3):
        obs = np.full((2, 1), t, np.float32)
        state = np.stack([np.full(4, value + t), np.full(4, -value - t)]).astype(np.float32)
        w.add(
            obs,
            np.zeros((2, 1)),
            np.zeros(2),
            obs + 1,
            np.zeros(2, bool),
            np.zeros(2, bool),
            state=state,
        )
    w.flush()
    replay.close()


def test_state_written_in_one_process_is_read_back_in_another() -> None:
    cfg = ReplayConfig(capacity=16, batch_size=4, min_size=0, chunk=64)
    with Replay.create(Layout(obs_dim=1, act_dim=1, state_dim=4), cfg, gamma=0.9) as replay:
        ctx = multiprocess.get_context("spawn")
        p = ctx.Process(target=_write_states, args=(replay.handle(), 5.0))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        st = replay.storage
        assert int(st.hdr[0]) == 6
        # The writer flushes copy 0's run, then copy 1's: slots 0-2 then 3-5.
        expect = np.array([[5, 6, 7, -5, -6, -7]], np.float32).T * np.ones((1, 4), np.float32)
        np.testing.assert_array_equal(st.arrays["state"][:6], expect)


def test_state_defaults_to_zeros_and_needs_no_column() -> None:
    cfg = ReplayConfig(capacity=8, batch_size=2, min_size=0)
    with Replay.create(Layout(obs_dim=1, act_dim=1, state_dim=3), cfg, gamma=0.9) as replay:
        st = replay.storage
        st.arrays["state"][:] = 7.0  # what an earlier lap of the ring left there
        w = replay.writer(num_envs=1)
        obs = np.zeros((1, 1), np.float32)
        w.add(obs, np.zeros((1, 1)), np.zeros(1), obs, np.ones(1, bool), np.zeros(1, bool))
        np.testing.assert_array_equal(st.arrays["state"][0], np.zeros(3, np.float32))
    with Replay.create(Layout(obs_dim=1, act_dim=1), cfg, gamma=0.9) as replay:
        assert "state" not in replay.storage.arrays
        w = replay.writer(num_envs=1)
        # A recurrent explorer writing into a feedforward learner's buffer: the state is dropped.
        w.add(
            obs,
            np.zeros((1, 1)),
            np.zeros(1),
            obs,
            np.ones(1, bool),
            np.zeros(1, bool),
            state=np.ones((1, 5), np.float32),
        )
        assert int(replay.storage.hdr[0]) == 1
