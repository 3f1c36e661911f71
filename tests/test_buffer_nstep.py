"""n-step returns against values computed by hand, across chunk links, terminals and
truncations inside the window."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig

GAMMA = 0.5


def _episode_steps():
    """Two copies, interleaved. obs[0] = a unique step code, obs[1] = reward.

    copy 0: rewards 1, 2, 3, 4, 5 then terminated; then 6, 7 (staged, flushed at the end)
    copy 1: rewards 10, 20, 30 then truncated; then 40, 50, 60, 70 then terminated
    """
    eps0 = [([1, 2, 3, 4, 5], "term"), ([6, 7], None)]
    eps1 = [([10, 20, 30], "trunc"), ([40, 50, 60, 70], "term")]
    return [
        sum(([(r, i == len(rs) - 1 and end) for i, r in enumerate(rs)] for rs, end in eps), [])
        for eps in (eps0, eps1)
    ]


def _fill(replay: Replay) -> None:
    w = replay.writer(num_envs=2)
    seqs = _episode_steps()
    for t in range(max(len(s) for s in seqs)):
        obs = np.zeros((2, 2), np.float32)
        nxt = np.zeros((2, 2), np.float32)
        rew = np.zeros((2, 1), np.float32)
        term = np.zeros(2, bool)
        trunc = np.zeros(2, bool)
        for e, seq in enumerate(seqs):
            r, end = seq[t] if t < len(seq) else (-1, "pad")
            obs[e] = (r, r)
            nxt[e] = (1000 + r, r)  # next_obs encodes which step it follows
            rew[e] = r
            term[e] = end in ("term", "pad")
            trunc[e] = end == "trunc"
        w.add(obs, np.zeros((2, 1), np.float32), rew, nxt, term, trunc)
    w.flush()


# Expected (return, discount, next_obs code) for n = 3, gamma = 0.5, by hand.
EXPECTED = {
    1: (1 + 0.5 * 2 + 0.25 * 3, 0.125, 1003),
    2: (2 + 0.5 * 3 + 0.25 * 4, 0.125, 1004),
    3: (3 + 0.5 * 4 + 0.25 * 5, 0.0, 1005),  # terminal at the window's last step
    4: (4 + 0.5 * 5, 0.0, 1005),  # terminal inside the window: cut, no bootstrap
    5: (5.0, 0.0, 1005),
    6: (6 + 0.5 * 7, 0.25, 1007),  # the ring has no step after 7 yet: a 2-step target
    7: (7.0, 0.5, 1007),
    10: (10 + 0.5 * 20 + 0.25 * 30, 0.125, 1030),  # truncated at the last step: bootstrap
    20: (20 + 0.5 * 30, 0.25, 1030),  # truncation inside: bootstrap from step 30 with gamma^2
    30: (30.0, 0.5, 1030),
    40: (40 + 0.5 * 50 + 0.25 * 60, 0.125, 1060),
    50: (50 + 0.5 * 60 + 0.25 * 70, 0.0, 1070),
    60: (60 + 0.5 * 70, 0.0, 1070),
    70: (70.0, 0.0, 1070),
}


@pytest.mark.parametrize("chunk", [1, 2, 64])
@pytest.mark.parametrize("prioritized", [True, False])
def test_nstep_returns_by_hand(chunk: int, prioritized: bool) -> None:
    cfg = ReplayConfig(
        capacity=64,
        batch_size=256,
        n_step=3,
        chunk=chunk,
        min_size=1,
        updates_per_insert=0,
        prioritized=prioritized,
    )
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA) as replay:
        _fill(replay)
        seen = set()
        for _ in range(4):
            b = replay.sample()
            for code, ret, disc, nxt in zip(
                b["obs"][:, 0], b["reward"][:, 0], b["discount"], b["next_obs"][:, 0]
            ):
                if code < 0:
                    continue  # padding step of copy 0
                want = EXPECTED[int(code)]
                assert (ret, disc, nxt) == pytest.approx(want), int(code)
                seen.add(int(code))
        assert seen == set(EXPECTED)


def test_window_stops_where_the_ring_overwrote_the_episode() -> None:
    # One long episode in a tiny ring: windows near the newest step are cut short, and no
    # window ever reads a slot that now holds a later part of the ring.
    cfg = ReplayConfig(
        capacity=5,
        batch_size=200,
        n_step=4,
        chunk=2,
        min_size=1,
        updates_per_insert=0,
        prioritized=False,
    )
    with Replay.create(Layout(obs_dim=1, act_dim=1), cfg, gamma=GAMMA) as replay:
        w = replay.writer(num_envs=1)
        for t in range(12):
            w.add(
                np.array([[t]], np.float32),
                np.zeros((1, 1)),
                np.ones((1, 1)),
                np.array([[t + 1]], np.float32),
                np.array([False]),
                np.array([False]),
            )
        w.flush()
        b = replay.sample()
        start = b["obs"][:, 0]
        k = np.round(np.log(b["discount"]) / np.log(GAMMA)).astype(int)
        assert np.all(start >= 7)
        np.testing.assert_array_equal(b["next_obs"][:, 0], start + k)
        np.testing.assert_array_equal(k, np.minimum(4, 12 - start))
        np.testing.assert_allclose(b["reward"][:, 0], (1 - GAMMA**k) / (1 - GAMMA))
