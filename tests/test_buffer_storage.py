"""The ring's bookkeeping in one process: episode links as stored, and the repair of slots a
writer was copying into when it died (the multi-process death itself is in
test_buffer_lifecycle.py; here the lock's repair flag is raised by hand)."""

from __future__ import annotations

import numpy as np

from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.buffer.storage import REPAIR, RESERVED, TOTAL


def _steps(w, first: int, count: int, end_last: bool) -> None:  # noqa: ANN001
    """``count`` steps of one env copy with obs = step code ``first + t``; the last one
    terminates its episode when ``end_last``."""
    for t in range(count):
        obs = np.full((1, 3), first + t, np.float32)
        done = np.array([end_last and t == count - 1])
        w.add(obs, np.zeros((1, 1)), np.zeros((1, 1)), obs + 1, done, np.zeros(1, bool))


def test_links_point_to_the_next_step_and_minus_1_where_there_is_none() -> None:
    """Chunks of 3, written by hand: an episode of 5 steps (numbers 0-4, flushed as 0-2 then
    3-4 at its end), then 2 steps of the next episode, flushed by hand. Each step's ``next``
    is the number of its successor; the last step of an episode and the last step written so
    far have none (-1); the first chunk's last step was patched when 3-4 arrived."""
    cfg = ReplayConfig(capacity=16, batch_size=4, updates_per_insert=0, min_size=1, chunk=3)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        w = replay.writer(num_envs=1)
        _steps(w, 0, 3, end_last=False)
        a = replay.storage.arrays
        np.testing.assert_array_equal(a["next"][:3], [1, 2, -1])  # 3 is not written yet
        _steps(w, 3, 2, end_last=True)
        _steps(w, 5, 2, end_last=False)
        w.flush()
        # Slots never written hold no number and no link (-1), never one that could pass.
        np.testing.assert_array_equal(a["abs"], [*range(7)] + [-1] * 9)
        np.testing.assert_array_equal(a["next"], [1, 2, 3, 4, -1, 6, -1] + [-1] * 9)
        np.testing.assert_array_equal(a["step"][:7], [0, 1, 2, 3, 4, 0, 1])
        assert a["episode"][4] == a["episode"][0] != a["episode"][5]


def test_repair_forgets_the_slots_a_dead_writer_was_copying_into() -> None:
    """10 inserts into 8 slots (items 2-9), then a writer that reserved 3 more rows (numbers
    10-12, slots 2, 3, 4) died inside the lock: the next holder marks exactly those slots
    unreadable, takes the reservation back and clears the flag; the rest stays valid."""
    cfg = ReplayConfig(capacity=8, batch_size=4, updates_per_insert=0, min_size=1, chunk=1)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        _steps(replay.writer(num_envs=1), 0, 10, end_last=False)
        st = replay.storage
        st.hdr[RESERVED] = 13
        st.hdr[REPAIR] = 1
        st.acquire()
        st.release()
        assert st.hdr[RESERVED] == st.hdr[TOTAL] == 10 and st.hdr[REPAIR] == 0
        np.testing.assert_array_equal(st.arrays["abs"], [8, 9, -1, -1, -1, 5, 6, 7])
        np.testing.assert_array_equal(
            st.valid(np.arange(2, 10), 10), [False, False, False, True, True, True, True, True]
        )
