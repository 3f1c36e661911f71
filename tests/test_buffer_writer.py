"""The writer in one process: what it refuses, absent rows, staging of long HER episodes and
how the ring's rows come out of it (step codes written by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig, ReplayError


def _cfg(**kw) -> ReplayConfig:  # noqa: ANN003
    return ReplayConfig(capacity=64, batch_size=4, updates_per_insert=0, min_size=1, **kw)


def _zeros(n: int) -> tuple[np.ndarray, ...]:
    obs = np.zeros((n, 3), np.float32)
    return obs, np.zeros((n, 1), np.float32), np.zeros(n, np.float32), obs, np.zeros(n, bool)


def test_missing_or_misshaped_inputs_are_refused_by_name() -> None:
    with Replay.create(Layout(obs_dim=3, act_dim=1, logp=True), _cfg(), gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        obs, act, rew, nxt, no = _zeros(2)
        with pytest.raises(ReplayError, match="stores logp"):
            w.add(obs, act, rew, nxt, no, no)
        with pytest.raises(ReplayError, match="action has 1 rows, the writer has 2 envs"):
            w.add(obs, act[:1], rew, nxt, no, no, logp=np.zeros(2))
        with pytest.raises(ReplayError, match="logp has 3 rows"):
            w.add(obs, act, rew, nxt, no, no, logp=np.zeros(3))
    goals = Layout(obs_dim=3, act_dim=1, goal_dim=2)
    with Replay.create(goals, _cfg(), gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        g = np.zeros((2, 2), np.float32)
        with pytest.raises(ReplayError, match="pass achieved_goal, desired_goal"):
            w.add(obs, act, rew, nxt, no, no, achieved_goal=g, desired_goal=g)


def test_absent_rows_are_left_out_and_the_episode_continues_over_them() -> None:
    """Two copies, chunk 1; copy 1 is absent at t = 1 (and its done flag there is ignored).
    Rows are stored in copy order per step: t0 (c0, c1), t1 (c0), t2 (c0, c1). Copy 1's t2
    continues its episode at step 1, linked from its t0 row; copy 0 runs steps 0, 1, 2."""
    with Replay.create(Layout(obs_dim=3, act_dim=1), _cfg(chunk=1), gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        for t in range(3):
            obs = np.array([[t, 0, 0], [t, 1, 0]], np.float32)
            done = np.array([False, t == 1])  # copy 1's done at its absent step
            valid = np.array([True, t != 1])
            w.add(
                obs,
                np.zeros((2, 1)),
                np.array([t, 10 + t]),
                obs,
                done,
                np.zeros(2, bool),
                valid=valid,
            )
        a = replay.storage.arrays
        assert int(replay.storage.hdr[0]) == 5
        np.testing.assert_array_equal(a["obs"][:5, :2], [[0, 0], [0, 1], [1, 0], [2, 0], [2, 1]])
        np.testing.assert_array_equal(a["reward"][:5, 0], [0, 10, 1, 2, 12])
        np.testing.assert_array_equal(a["step"][:5], [0, 0, 1, 2, 1])
        np.testing.assert_array_equal(a["next"][:5], [2, 4, 3, -1, -1])
        ep = a["episode"][:5]
        assert ep[0] == ep[2] == ep[3] and ep[1] == ep[4] and ep[0] != ep[1]
        assert not a["terminated"][:5].any()


def test_a_one_dimensional_reward_is_one_head() -> None:
    """Rewards [N] are read as one head, [N, 1]; the writer counts the rows it inserted."""
    with Replay.create(Layout(obs_dim=3, act_dim=1), _cfg(chunk=2), gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        obs, act, _, nxt, no = _zeros(2)
        w.add(obs, act, np.array([1.5, -2.0]), nxt, no, no)
        assert w.inserted == 0  # staged, not inserted
        w.add(obs, act, np.array([[3.0], [4.0]]), nxt, no, no)
        np.testing.assert_array_equal(replay.storage.arrays["reward"][:4, 0], [1.5, 3, -2, 4])
        assert w.inserted == 4


def test_a_her_episode_longer_than_the_staging_is_stored_whole_and_in_order() -> None:
    """With HER only whole episodes are inserted: a 150-step episode outgrows the 64 staged
    rows (twice) and must come out as one run, steps 0-149 in order, nothing inserted before
    its end."""
    layout = Layout(obs_dim=3, act_dim=1, goal_dim=1)
    relabel = lambda o, a, n, ag, g: np.zeros(o.shape[0], np.float32)  # noqa: E731
    cfg = ReplayConfig(
        capacity=256,
        batch_size=4,
        updates_per_insert=0,
        min_size=1,
        chunk=8,
        her=HerConfig("future", k=4),
    )
    with Replay.create(layout, cfg, gamma=0.9, relabel=relabel) as replay:
        w = replay.writer(num_envs=1)
        g = np.zeros((1, 1), np.float32)
        for t in range(150):
            obs = np.full((1, 3), t, np.float32)
            end = np.array([t == 149])
            w.add(
                obs,
                np.zeros((1, 1)),
                np.zeros(1),
                obs + 1,
                end,
                np.zeros(1, bool),
                achieved_goal=g,
                desired_goal=g,
                next_achieved_goal=g,
            )
            if t < 149:
                assert int(replay.storage.hdr[0]) == 0
        a = replay.storage.arrays
        assert int(replay.storage.hdr[0]) == 150
        np.testing.assert_array_equal(a["obs"][:150, 0], np.arange(150))
        np.testing.assert_array_equal(a["step"][:150], np.arange(150))
        np.testing.assert_array_equal(a["ep_end"][:150], np.full(150, 149))
        np.testing.assert_array_equal(a["next"][:150], [*range(1, 150), -1])


def test_flushing_while_a_copy_has_nothing_staged_leaves_its_links_alone() -> None:
    """Chunks long enough that only ``flush()`` inserts. t0: both copies (numbers 0, 1);
    t1: copy 0 only (2), flushed while copy 1 has nothing staged; t2: both (3, 4). Each copy's
    steps link to its own next step: 0 -> 2 -> 3 and 1 -> 4."""
    with Replay.create(Layout(obs_dim=3, act_dim=1), _cfg(chunk=16), gamma=0.9) as replay:
        w = replay.writer(num_envs=2)
        obs, act, rew, nxt, no = _zeros(2)
        for valid in ([True, True], [True, False], [True, True]):
            w.add(obs, act, rew, nxt, no, no, valid=np.array(valid))
            w.flush()
        a = replay.storage.arrays
        np.testing.assert_array_equal(a["next"][:5], [2, 4, 3, -1, -1])
        np.testing.assert_array_equal(a["step"][:5], [0, 0, 1, 2, 1])
