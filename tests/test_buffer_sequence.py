"""Sequence replay (issue 15): the policy-state column, sequences cut on a stride with burn-in,
their masks at episode ends and at the ring's write head, sequence priorities, and HER with one
goal per sequence. Expected values are worked out by hand from steps whose observations encode
(episode, step)."""

from __future__ import annotations

import multiprocess
import numpy as np
import pytest

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig, ReplayError, SequenceConfig
from wheeler2.buffer.sequence import sequence_priority


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


# -- sequences ------------------------------------------------------------------------------


def _add(w, ep: int, steps: range, end: str | None, goal: bool = False) -> None:  # noqa: ANN001
    """Steps of episode ``ep`` with obs = 100 ep + step, reward = step + 1, state = obs.

    ``end`` ("term" / "trunc" / None) flags the last of ``steps``."""
    for s in steps:
        code = np.array([[100.0 * ep + s]], np.float32)
        last = s == steps[-1]
        extra = {}
        if goal:
            extra = dict(
                achieved_goal=code, desired_goal=np.full((1, 1), -1.0), next_achieved_goal=code + 1
            )
        w.add(
            code,
            np.array([[s / 10]], np.float32),
            np.array([s + 1.0]),
            code + 1,
            np.array([last and end == "term"]),
            np.array([last and end == "trunc"]),
            state=np.repeat(code, 2, axis=1),
            **extra,
        )


def _seq_replay(
    capacity: int = 64,
    n_step: int = 1,
    prioritized: bool = False,
    length: int = 4,
    burn_in: int = 2,
    stride: int = 2,
    **kw,
) -> Replay:  # noqa: ANN003
    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=8,
        min_size=0,
        n_step=n_step,
        prioritized=prioritized,
        updates_per_insert=0,
        beta=0.5,
        sequence=SequenceConfig(length=length, burn_in=burn_in, stride=stride),
        **kw,
    )
    layout = Layout(obs_dim=1, act_dim=1, state_dim=2, goal_dim=1 if "her" in kw else 0)
    return Replay.create(layout, cfg, gamma=0.5, relabel=_relabel if "her" in kw else None)


def _relabel(obs, action, next_obs, next_achieved_goal, goal):  # noqa: ANN001, ANN202
    return (next_achieved_goal == goal).astype(np.float32)


def _by_start(replay: Replay, draws: int = 40) -> dict[float, dict[str, np.ndarray]]:
    """One sampled row per distinct first observation (= 100 episode + step of the start)."""
    seen: dict[float, dict[str, np.ndarray]] = {}
    for _ in range(draws):
        out = replay.sample()
        for b in range(out["index"].shape[0]):
            seen[float(out["obs"][b, 0, 0])] = {k: v[b] for k, v in out.items()}
    return seen


def test_sequences_stop_at_episode_ends_and_at_the_write_head() -> None:
    with _seq_replay() as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(7), "term")  # starts at steps 0, 2, 4, 6
        _add(w, 2, range(5), "trunc")  # 0, 2, 4
        _add(w, 3, range(3), None)  # 0, 2; unfinished
        w.flush()
        rows = _by_start(replay)
        # Step 6 of ep 1 and step 4 of ep 2 start sequences that end inside their burn-in, and
        # step 2 of ep 3 has no trained step yet: none is ever handed out.
        assert sorted(rows) == [100, 102, 104, 200, 202, 300]
        T = 6  # burn-in 2 + length 4
        F, T_ = False, True
        expect = {  # start: (alive, mask)
            100: ([T_] * 6, [T_] * 4 + [F] * 2),  # the episode's first sequence has no burn-in
            102: ([T_] * 5 + [F], [F, F, T_, T_, T_, F]),  # steps 2..6, 6 terminal
            104: ([T_] * 3 + [F] * 3, [F, F, T_, F, F, F]),
            200: ([T_] * 5 + [F], [T_] * 4 + [F, F]),  # truncated after step 4
            202: ([T_] * 3 + [F] * 3, [F, F, T_, F, F, F]),
            300: ([T_] * 3 + [F] * 3, [T_] * 3 + [F] * 3),  # stops at the write head
        }
        for start, (alive, mask) in expect.items():
            row = rows[start]
            assert row["obs"].shape == (T, 1)
            np.testing.assert_array_equal(row["alive"], alive, err_msg=str(start))
            np.testing.assert_array_equal(row["mask"], mask, err_msg=str(start))
            k = int(np.sum(alive))
            np.testing.assert_array_equal(row["obs"][:k, 0], start + np.arange(k))
            np.testing.assert_array_equal(row["state"], [start, start])  # stored at the start
        # More of episode 3 arrives: its sequences now run on through the patched link.
        _add(w, 3, range(3, 9), "term")
        rows = _by_start(replay)
        assert 302 in rows and 304 in rows
        np.testing.assert_array_equal(rows[300]["obs"][:, 0], 300 + np.arange(6))
        np.testing.assert_array_equal(rows[302]["mask"], [F, F, T_, T_, T_, T_])


def test_every_step_is_trained_when_burn_in_and_stride_exceed_the_length() -> None:
    """burn_in 4 + stride 2 > length 4: the episode's first sequence trains on up to where the
    next start's trained steps begin (position 6), else steps 4 and 5 would never be trained."""
    with _seq_replay(length=4, burn_in=4, stride=2) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(12), "term")
        rows = _by_start(replay)
        F, T_ = False, True
        np.testing.assert_array_equal(rows[100]["mask"], [T_] * 6 + [F] * 2)
        np.testing.assert_array_equal(rows[102]["mask"], [F] * 4 + [T_] * 4)  # steps 6..9
        trained = set()
        for r in rows.values():
            trained |= set(r["obs"][r["mask"], 0].astype(int).tolist())
        assert trained == set(range(100, 112))
    with _seq_replay(length=4, burn_in=2, stride=2) as replay:  # 2 + 2 <= 4: length positions
        w = replay.writer(num_envs=1)
        _add(w, 1, range(12), "term")
        np.testing.assert_array_equal(_by_start(replay)[100]["mask"], [T_] * 4 + [F] * 2)


def test_sequences_across_the_ring_end_and_over_overwritten_starts() -> None:
    with _seq_replay(capacity=8) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(6), "term")  # abs 0..5
        _add(w, 2, range(5), "trunc")  # abs 6..10: slots 6, 7, 0, 1, 2 (ep 1's first three gone)
        rows = _by_start(replay)
        # Ep 1's starts at steps 0 and 2 are overwritten, step 4's ends in its burn-in.
        assert sorted(rows) == [200, 202]
        np.testing.assert_array_equal(rows[200]["obs"][:5, 0], [200, 201, 202, 203, 204])
        np.testing.assert_array_equal(rows[200]["alive"], [True] * 5 + [False])
        np.testing.assert_array_equal(rows[202]["obs"][:3, 0], [202, 203, 204])


def test_nstep_returns_per_position() -> None:
    with _seq_replay(n_step=3, length=4, burn_in=0, stride=4) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(6), "term")  # rewards 1..6, terminal at step 5
        _add(w, 2, range(8), "trunc")
        rows = _by_start(replay)
        r = rows[100]  # steps 0..3 trained, n-step windows reach step 5
        g = 0.5
        np.testing.assert_allclose(
            r["reward"][:, 0],
            [
                1 + 2 * g + 3 * g * g,
                2 + 3 * g + 4 * g * g,
                3 + 4 * g + 5 * g * g,
                4 + 5 * g + 6 * g * g,
            ],
        )
        np.testing.assert_allclose(r["discount"], [g**3, g**3, g**3, 0.0])  # step 5 terminal
        np.testing.assert_array_equal(r["boot"], [2, 3, 4, 5])
        assert r["next_obs"].shape == (4 + 3 - 1, 1)
        np.testing.assert_array_equal(r["next_obs"][r["boot"], 0], [103, 104, 105, 106])
        r = rows[104]  # steps 4, 5: the windows stop at the terminal
        np.testing.assert_allclose(r["reward"][:2, 0], [5 + 6 * g, 6])
        np.testing.assert_allclose(r["discount"][:2], [0.0, 0.0])
        r = rows[204]  # ep 2 steps 4..7, truncated at 7: shorter windows bootstrap, gamma^k
        np.testing.assert_allclose(r["discount"], [g**3, g**3, g**2, g])
        np.testing.assert_array_equal(r["boot"], [2, 3, 3, 3])
        np.testing.assert_allclose(
            r["reward"][:, 0], [5 + 6 * g + 7 * g * g, 6 + 7 * g + 8 * g * g, 7 + 8 * g, 8]
        )


def test_sequence_priority_formula() -> None:
    td = np.array([[1.0, -3.0, 2.0, 100.0], [0.5, 0.0, 0.0, 0.0]])
    mask = np.array([[True, True, True, False], [True, False, False, False]])
    got = sequence_priority(td, mask, eta=0.9)
    # Row 0: max 3, mean 2 over the three trained steps; row 1: one step of 0.5.
    np.testing.assert_allclose(got, [0.9 * 3 + 0.1 * 2, 0.5], rtol=1e-6)
    np.testing.assert_allclose(sequence_priority(td, mask, eta=0.0), [2.0, 0.5], rtol=1e-6)


def test_sampling_frequencies_follow_sequence_priorities() -> None:
    with _seq_replay(prioritized=True, alpha=1.0) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(8), "term")  # starts 0, 2, 4 (6 ends in its burn-in)
        replay.sample()  # gives every start the max priority, drops step 6's
        st = replay.storage
        index = np.array([0, 2, 4], np.int64)  # abs numbers of the starts
        prio = np.array([1.0, 3.0, 6.0])
        replay.update_priorities(index, prio)
        leaves = st.arrays["priority"][:8]
        eps = replay.cfg.eps
        np.testing.assert_allclose(leaves[[0, 2, 4]], prio + eps)
        assert leaves[[1, 3, 5, 6, 7]].sum() == 0  # only sequence starts carry mass
        counts = dict.fromkeys((100.0, 102.0, 104.0), 0)
        weights = {}
        for _ in range(500):
            out = replay.sample()
            for s, wt in zip(out["obs"][:, 0, 0], out["weight"]):
                counts[float(s)] += 1
                weights[float(s)] = wt
        n = sum(counts.values())
        freq = np.array([counts[100.0], counts[102.0], counts[104.0]]) / n
        np.testing.assert_allclose(freq, prio / prio.sum(), atol=0.02)
        # w = (p / p_min) ** -beta with beta = 0.5 (no annealing without beta_steps)
        np.testing.assert_allclose(
            [weights[100.0], weights[102.0], weights[104.0]], (prio / 1.0) ** -0.5, rtol=1e-4
        )


def test_uniform_sequences_weigh_one() -> None:
    with _seq_replay() as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(8), "term")
        counts: dict[float, int] = {}
        for _ in range(300):
            out = replay.sample()
            assert (out["weight"] == 1).all()
            for s in out["obs"][:, 0, 0]:
                counts[float(s)] = counts.get(float(s), 0) + 1
        assert sorted(counts) == [100.0, 102.0, 104.0]
        freq = np.array(list(counts.values())) / sum(counts.values())
        np.testing.assert_allclose(freq, 1 / 3, atol=0.03)


def test_her_relabels_a_whole_sequence_with_one_future_goal() -> None:
    with _seq_replay(her=HerConfig(strategy="future", k=4)) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 1, range(12), "trunc", goal=True)
        _add(w, 2, range(9), "term", goal=True)
        relabelled = 0
        for _ in range(60):
            out = replay.sample()
            for b in range(out["index"].shape[0]):
                alive, obs = out["alive"][b], out["obs"][b]
                goal = obs[alive, 1]
                assert (goal == goal[0]).all()  # one goal along the sequence
                code = obs[alive, 0]
                if goal[0] == -1.0:
                    # The env's own rewards (step + 1), untouched.
                    np.testing.assert_array_equal(out["reward"][b][alive, 0], code % 100 + 1)
                    continue
                relabelled += 1
                ep, first = int(code[0]) // 100, int(code[0])
                burn = 0 if first % 100 == 0 else 2
                # A future goal: an achieved goal of this episode after the first trained step.
                assert int(goal[0]) // 100 == ep and goal[0] >= first + burn + 1
                # Every alive step's reward recomputed for it: 1 exactly where next_ag == goal.
                np.testing.assert_array_equal(
                    out["reward"][b][alive, 0], (code + 1 == goal[0]).astype(np.float32)
                )
                assert (out["next_obs"][b][alive, 1] == goal[0]).all()
        assert 0.6 < relabelled / (60 * 8) < 0.95  # k = 4: 80% relabelled


def test_sequence_settings_refused_with_random_her_goals() -> None:
    with pytest.raises(ReplayError, match="future, final or episode"):
        _seq_replay(her=HerConfig(strategy="random"))


@pytest.mark.timeout(15)  # a redraw loop that never gives up fails here
@pytest.mark.parametrize("prioritized", [False, True])
def test_sequence_sampling_gives_up_after_the_redraw_limit(prioritized: bool) -> None:
    """Every stored step half-written (a dead writer's slots): one draw and 8 redraws, then a
    clear error, never a batch gathered from rows that failed the check."""
    with _seq_replay(prioritized=prioritized) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 0, range(20), "term")
        w.flush()
        replay.sample()
        replay.storage.arrays["abs"][:] = -1
        sampler = replay.sampler
        draw, sizes = sampler.draw, []

        def counted(n: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
            sizes.append(n)
            return draw(n, updates)

        sampler.draw = counted
        with np.errstate(divide="ignore"), pytest.raises(ReplayError, match="valid sequences"):
            replay.sample()
        assert sizes == [8] * 9


def test_broken_sequence_starts_are_discarded_and_overwritten_ones_keep_their_slot() -> None:
    """20 steps into 16 slots (steps 4-19 stored), every step a start. Start 4, the oldest
    stored, found half-written (a dead writer's slot), is discarded: its leaf goes to 0. Start
    2 was overwritten by step 18, which is intact: slot 2 keeps its leaf."""
    with _seq_replay(capacity=16, prioritized=True, length=2, burn_in=0, stride=1) as replay:
        w = replay.writer(num_envs=1)
        _add(w, 0, range(20), None)
        w.flush()
        replay.sample()
        leaves = replay.sampler.tree.leaves
        before = leaves[:16].copy()
        assert np.all(before > 0)
        replay.storage.arrays["abs"][4] = -1
        sampler = replay.sampler
        draw, sizes = sampler.draw, []

        def fixed_then_own(n: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
            sizes.append(n)
            if len(sizes) == 1:
                return np.array([4, 2, 6, 8, 10, 12, 14, 16]), np.ones(8, np.float32)
            return draw(n, updates)

        sampler.draw = fixed_then_own
        batch = replay.sample()
        assert sizes == [8, 2]
        want = before.copy()
        want[4] = 0.0
        np.testing.assert_array_equal(leaves[:16], want)
        np.testing.assert_array_equal(batch["index"][2:], [6, 8, 10, 12, 14, 16])
        assert not np.isin(batch["index"], [2, 4]).any()
