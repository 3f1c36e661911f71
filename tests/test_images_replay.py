"""The byte-lean image replay (wheeler2/buffer/frames.py): each uint8 frame stored once, stacks
rebuilt from each episode's own frames, with n-step, PER and sequences; the memory check.

Frames are tiny (2 channels of 3x3) and every pixel of a frame holds one value that names its
episode and step, so a rebuilt stack can be read back frame by frame.
"""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayError
from wheeler2.buffer.frames import frame_capacity
from wheeler2.buffer.storage import FRAMES, TOTAL, field_specs
from wheeler2.needs import SequenceConfig

K = 4  # frames per observation
SHAPE = (2, 3, 3)
SIZE = 18


def frame(episode: int, t: int) -> np.ndarray:
    return np.full(SIZE, (episode * 16 + t) % 256, np.uint8)


def layout(stack: int = K) -> Layout:
    return Layout(obs_dim=stack * SIZE, act_dim=3, discrete=True, frame_shape=SHAPE, stack=stack)


def replay(capacity: int = 200, stack: int = K, **cfg) -> Replay:
    config = ReplayConfig(capacity=capacity, batch_size=16, min_size=1, updates_per_insert=0, **cfg)
    return Replay.create(layout(stack), config, gamma=0.5, seed=0)


class Episodes:
    """``n`` env copies of episodes of given lengths, stacked as wheeler2.env.FrameStack does:
    the first frame repeated at a start, the true last frame in the final stack."""

    def __init__(self, lengths: list[list[int]], stack: int = K) -> None:
        self.lengths = lengths
        self.k = stack
        self.n = len(lengths)
        self.episode = [0] * self.n
        self.t = [0] * self.n
        self.ids = [i * 100 for i in range(self.n)]  # episode id per copy (frame values)
        self.hist = [[frame(self.ids[i], 0)] * stack for i in range(self.n)]
        self.steps = 0

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        obs = np.stack([np.concatenate(h) for h in self.hist])
        nxt_hist, done = [], np.zeros(self.n, bool)
        for i in range(self.n):
            nxt_hist.append([*self.hist[i][1:], frame(self.ids[i], self.t[i] + 1)])
            length = self.lengths[i][self.episode[i] % len(self.lengths[i])]
            done[i] = self.t[i] + 1 == length
        nxt = np.stack([np.concatenate(h) for h in nxt_hist])
        for i in range(self.n):
            self.t[i] += 1
            if done[i]:
                self.episode[i] += 1
                self.ids[i] += 1
                self.t[i] = 0
                self.hist[i] = [frame(self.ids[i], 0)] * self.k
            else:
                self.hist[i] = nxt_hist[i]
        self.steps += self.n
        return obs, nxt, done

    def run(self, rb: Replay, steps: int, **kw) -> None:
        w = rb.writer(num_envs=self.n, **kw)
        for _ in range(steps):
            obs, nxt, done = self.step()
            w.add(
                obs, np.zeros(self.n, np.int64), np.ones(self.n), nxt, done, np.zeros(self.n, bool)
            )
        w.flush()


def values(rows: np.ndarray, stack: int = K) -> np.ndarray:
    """[B, stack] frame values of flat stacked rows (each frame holds one value)."""
    return rows.reshape(len(rows), stack, SIZE)[:, :, 0].astype(int)


def check_stacks(obs: np.ndarray, nxt: np.ndarray) -> None:
    """Every stack holds consecutive frames of one episode, a start's first frame repeated."""
    for o, n in zip(values(obs), values(nxt)):
        seq = [*o, n[-1]]
        assert list(n) == seq[1:]  # next_obs is obs shifted by one new frame
        ep = {v // 16 for v in seq}
        assert len(ep) == 1, f"stack {seq} mixes episodes"
        steps = [v % 16 for v in seq]
        first = steps[0]
        expect = [max(first, s) for s in steps]
        assert steps == expect
        diffs = np.diff(steps)
        assert set(diffs.tolist()) <= {0, 1}
        # Repeats only at the episode's first frame.
        assert all(s == 0 for s, d in zip(steps, [1, *diffs]) if d == 0)


def test_each_frame_is_stored_once():
    # 3 copies, episodes of 5, 7 and 11 steps: one frame per transition plus each episode's
    # first frame (repeated k times in its first stack, stored once).
    env = Episodes([[5], [7], [11]])
    with replay() as rb:
        env.run(rb, 40)
        st = rb.storage
        transitions = int(st.hdr[TOTAL])
        episodes_started = sum(1 + (40 - 1) // L for L in (5, 7, 11))
        assert transitions == 120
        assert int(st.hdr[FRAMES]) == transitions + episodes_started


def test_frames_go_on_across_flushes_without_copies():
    # chunk 3: a copy's stacks continue across blocks from the frames already stored.
    env = Episodes([[13], [15]])
    with replay(chunk=3) as rb:
        env.run(rb, 30)
        assert int(rb.storage.hdr[FRAMES]) == 60 + 3 + 2
        b = rb.sample(64)
        check_stacks(b["obs"], b["next_obs"])


def test_stacks_never_cross_an_episode_start():
    env = Episodes([[2, 3, 6], [4], [1, 9]])
    with replay() as rb:
        env.run(rb, 60)
        for _ in range(5):
            b = rb.sample(64)
            assert b["obs"].dtype == np.uint8 and b["obs"].shape == (64, K * SIZE)
            check_stacks(b["obs"], b["next_obs"])


def test_a_start_whose_first_frame_equals_the_last_one_still_starts_fresh():
    # The next episode's first frame equals the final frame of the one before (value 0 at both
    # ends); the writer must not link the new stack to the old episode's frames.
    lay = layout()
    with Replay.create(lay, ReplayConfig(capacity=50, min_size=1, updates_per_insert=0), 0.9) as rb:
        w = rb.writer(num_envs=1)
        f = [np.full(SIZE, v, np.uint8) for v in (0, 7, 9, 0)]
        stacks = [[f[0]] * 4, [f[0], f[0], f[0], f[1]], [f[0], f[0], f[1], f[2]]]
        final = [f[0], f[1], f[2], f[3]]
        seq = [*stacks, final]
        for t in range(3):
            w.add(
                np.concatenate(seq[t])[None],
                np.zeros(1, np.int64),
                np.ones(1),
                np.concatenate(seq[t + 1])[None],
                np.array([t == 2]),
                np.zeros(1, bool),
            )
        start = np.concatenate([f[3]] * 4)[None]
        nxt = np.concatenate([f[3], f[3], f[3], np.full(SIZE, 5, np.uint8)])[None]
        w.add(start, np.zeros(1, np.int64), np.ones(1), nxt, np.zeros(1, bool), np.zeros(1, bool))
        w.flush()
        got = rb.storage.gather("obs", np.array([3]))
        assert values(got).tolist() == [[0, 0, 0, 0]]
        # The start's frames: its own first frame, not the old episode's 0, 7, 9.
        refs = rb.storage.arrays["refs"][3]
        assert len(set(refs[:K].tolist())) == 1


def test_a_row_that_does_not_continue_its_copy_stores_its_own_frame():
    # Stack 1, a multi-agent style copy that was absent for a step (valid = False): its next
    # observation is not the next_obs stored last, so the writer stores it instead of linking.
    with replay(stack=1) as rb:
        w = rb.writer(num_envs=1)
        one = np.ones(1)
        no = np.zeros(1, bool)
        act = np.zeros(1, np.int64)
        w.add(frame(0, 0)[None], act, one, frame(0, 1)[None], no, no)
        w.add(frame(0, 1)[None], act, one, frame(0, 2)[None], no, no, valid=np.array([False]))
        w.add(frame(0, 5)[None], act, one, frame(0, 6)[None], no, no)
        w.flush()
        st = rb.storage
        assert values(st.gather("obs", np.arange(2)), 1)[:, 0].tolist() == [0, 5]
        assert values(st.gather("next_obs", np.arange(2)), 1)[:, 0].tolist() == [1, 6]


def test_a_left_out_row_whose_newest_frame_repeats_still_stores_its_own_frames():
    # Stack 4: the copy is absent for a step (valid = False) while its frames move on, and the
    # frame it sees next repeats the last one stored (a still screen). Its newest frame alone
    # matches, the older ones do not: linking back rebuilt [0, 1, 2, 3] for [1, 2, 3, 3].
    with replay() as rb:
        w = rb.writer(num_envs=1)
        one, no, act = np.ones(1), np.zeros(1, bool), np.zeros(1, np.int64)
        f = [frame(0, t) for t in range(5)]
        rows = [[f[0], f[0], f[1], f[2]], [f[0], f[1], f[2], f[3]]]
        rows += [[f[1], f[2], f[3], f[3]], [f[2], f[3], f[3], f[4]]]
        stacks = [np.concatenate(r)[None] for r in rows]
        w.add(stacks[0], act, one, stacks[1], no, no)
        w.add(stacks[1], act, one, stacks[2], no, no, valid=np.array([False]))
        w.add(stacks[2], act, one, stacks[3], no, no)
        w.flush()
        st = rb.storage
        np.testing.assert_array_equal(st.gather("obs", np.arange(2)), np.concatenate(stacks[::2]))
        np.testing.assert_array_equal(st.gather("next_obs", np.array([1])), stacks[3])


def test_nstep_windows_and_next_stacks_stay_in_their_episode():
    env = Episodes([[5], [5]])
    with replay(n_step=3) as rb:
        env.run(rb, 40)
        b = rb.sample(128)
        o, n = values(b["obs"]), values(b["next_obs"])
        for i in range(128):
            ep = o[i, -1] // 16
            assert n[i, -1] // 16 == ep
            k = n[i, -1] % 16 - o[i, -1] % 16
            assert 1 <= k <= 3
            terminal = n[i, -1] % 16 == 5  # the window reached the episode's last step
            assert b["discount"][i] == pytest.approx(0.0 if terminal else 0.5**k)
            assert b["reward"][i, 0] == pytest.approx(sum(0.5**j for j in range(k)))


def test_prioritized_sampling_reads_frames():
    env = Episodes([[6]])
    with replay(prioritized=True) as rb:
        env.run(rb, 30)
        b = rb.sample(16)
        check_stacks(b["obs"], b["next_obs"])
        rb.update_priorities(b["index"], np.linspace(0.1, 5, 16))
        b = rb.sample(16)
        check_stacks(b["obs"], b["next_obs"])
        assert (b["weight"] <= 1.0 + 1e-6).all() and b["weight"].min() < 1.0


def test_sequences_rebuild_stacks_per_step():
    env = Episodes([[12], [9]])
    seq = SequenceConfig(length=4, burn_in=2, stride=2)
    with replay(sequence=seq) as rb:
        env.run(rb, 40)
        b = rb.sample(8)
        assert b["obs"].shape == (8, 6, K * SIZE) and b["obs"].dtype == np.uint8
        for row in range(8):
            alive = b["alive"][row]
            obs = b["obs"][row][alive]
            nxt = b["next_obs"][row][: len(obs)]
            check_stacks(obs, nxt)
            # Consecutive positions are consecutive steps of one episode.
            last = values(obs)[:, -1]
            assert (np.diff(last) == 1).all()


def test_overwritten_frames_invalidate_their_slots_not_the_batch():
    # Episodes of 1 step store 2 frames each: the frame ring (capacity + slack) runs out before
    # the slot ring, so the oldest slots lose frames and are redrawn, never read torn.
    env = Episodes([[1], [2]])
    with replay(capacity=64, frame_slack=0.5) as rb:
        env.run(rb, 200)
        for _ in range(10):
            b = rb.sample(32)
            check_stacks(b["obs"], b["next_obs"])


def test_bytes_per_transition_are_near_one_frame():
    # 84x84 frames stacked 4, the target: <= 1.1x one uint8 frame per transition.
    lay = Layout(obs_dim=4 * 84 * 84, act_dim=6, discrete=True, frame_shape=(1, 84, 84), stack=4)
    cfg = ReplayConfig(capacity=100_000, prioritized=True)
    specs = field_specs(lay, cfg)
    total = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in specs.values())
    per = total / cfg.capacity
    assert per <= 1.1 * 84 * 84, per
    assert frame_capacity(lay, cfg) < 1.07 * cfg.capacity
    # No float32 observation columns at all.
    assert specs["packed"][0][1] <= 4


def test_replay_state_round_trips_frames():
    env = Episodes([[5], [7]])
    with replay() as rb:
        env.run(rb, 20)
        state = rb.state_dict()
        total, frames = int(rb.storage.hdr[TOTAL]), int(rb.storage.hdr[FRAMES])
    with replay() as rb2:
        rb2.load_state_dict(state)
        assert int(rb2.storage.hdr[FRAMES]) == frames and int(rb2.storage.hdr[TOTAL]) == total
        b = rb2.sample(32)
        check_stacks(b["obs"], b["next_obs"])
    # Another frame_slack sizes another frame ring: named, not a numpy broadcast error.
    with replay(frame_slack=0.5) as rb3, pytest.raises(ReplayError, match="frame_slack"):
        rb3.load_state_dict(state)


def _record_draws(rb: Replay) -> list[np.ndarray]:
    """Every batch of absolute numbers the sampler draws (first draws and redraws)."""
    sampler, drawn = rb.sampler, []
    draw = sampler.draw

    def recorded(batch: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
        j, weight = draw(batch, updates)
        drawn.append(j.copy())
        return j, weight

    sampler.draw = recorded  # type: ignore[method-assign]
    return drawn


@pytest.mark.parametrize("length", [1, 2])
def test_short_episodes_sample_uniformly_from_the_frames_still_stored(length: int):
    # Episodes shorter than 1 / frame_slack (16 steps at the default slack) add a first frame
    # each besides one per step: the frame ring runs out first and the oldest slots lose their
    # frames (about half of them for 1-step episodes). The uniform sampler used to draw them
    # anyway and give up after its redraws ("could not draw valid transitions"); it now draws
    # only from the oldest transition whose frames are all stored on, and reaches every one.
    env = Episodes([[length]])
    with replay(capacity=2000) as rb:
        env.run(rb, 6000)
        st = rb.storage
        total = int(st.hdr[TOTAL])
        stored = np.flatnonzero(st.valid(np.arange(total - 2000, total), total)) + total - 2000
        assert len(stored) < (0.75 if length == 1 else 0.85) * 2000  # the frames ran out
        drawn = _record_draws(rb)
        seen = []
        for _ in range(40):
            b = rb.sample(256)
            check_stacks(b["obs"], b["next_obs"])
            seen.append(b["index"])
        j = np.concatenate(drawn)
        assert st.valid(j, total).all()  # nothing drawn that had to be redrawn
        seen_set = np.unique(np.concatenate(seen))
        assert set(seen_set.tolist()) <= set(stored.tolist())
        assert len(seen_set) > 0.95 * len(stored)  # uniform over all of them


def test_short_episodes_of_two_writers_sharing_the_ring():
    # Two writers (producers) flush small blocks in turn into one ring: frame numbers still
    # grow with transition numbers, so the bound holds across producers.
    cfg = ReplayConfig(capacity=500, batch_size=64, min_size=1, updates_per_insert=0, chunk=3)
    with Replay.create(layout(), cfg, gamma=0.5, seed=0) as rb:
        envs = [Episodes([[1], [2]]), Episodes([[1, 3]])]
        envs[1].ids = [7]
        envs[1].hist = [[frame(7, 0)] * K]
        writers = [rb.writer(num_envs=e.n) for e in envs]
        drawn = _record_draws(rb)
        for step in range(1500):
            for env, w in zip(envs, writers):
                obs, nxt, done = env.step()
                w.add(
                    obs, np.zeros(env.n, np.int64), np.ones(env.n), nxt, done, np.zeros(env.n, bool)
                )
            if step > 100 and step % 10 == 0:
                b = rb.sample()
                check_stacks(b["obs"], b["next_obs"])
        for w in writers:
            w.flush()
        del drawn[:]
        for _ in range(20):
            b = rb.sample()
            check_stacks(b["obs"], b["next_obs"])
        total = int(rb.storage.hdr[TOTAL])
        assert rb.storage.valid(np.concatenate(drawn), total).mean() > 0.99


@pytest.mark.parametrize("length", [1, 2])
def test_short_episodes_uniform_sequences(length: int):
    # The uniform sequence sampler (a tree with alpha 0) zeroes the starts whose frames are
    # gone as the bound moves, instead of drawing them and finding out.
    env = Episodes([[length], [length + 1]])
    seq = SequenceConfig(length=4, burn_in=0, stride=1)
    with replay(capacity=1000, sequence=seq) as rb:
        env.run(rb, 2000)
        st = rb.storage
        total = int(st.hdr[TOTAL])
        drawn = _record_draws(rb)
        for _ in range(20):
            b = rb.sample(64)
            for row in range(64):
                alive = b["alive"][row]
                obs = b["obs"][row][alive]
                check_stacks(obs, b["next_obs"][row][: len(obs)])
        assert st.valid(np.concatenate(drawn), total).mean() > 0.99
