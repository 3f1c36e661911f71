"""Samples stay consistent while two producer processes overwrite a small ring underneath the
learner: n-step windows and HER goals never mix episodes, even on the redraw path (which the
race reaches now and then; ``test_rows_overwritten_between_draw_and_gather_are_redrawn`` forces
it deterministically)."""

from __future__ import annotations

import time

import multiprocess
import numpy as np

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig

GAMMA = 0.5


def relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN201
    return np.ones((obs.shape[0], 1), np.float32)


def produce(handle, seed: int, seconds: float) -> None:  # noqa: ANN001
    replay = Replay.attach(handle)
    rng = np.random.default_rng(seed)
    n = 4
    w = replay.writer(num_envs=n)
    episode = (seed * 1_000_000 + np.arange(n)).astype(np.float32)
    step = np.zeros(n, np.float32)
    next_id = seed * 1_000_000 + n
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        done = rng.random(n) < 0.1
        term = done & (rng.random(n) < 0.5)
        obs = np.stack([episode, step], 1)
        nxt = np.stack([episode, step + 1], 1)
        w.add(
            obs,
            np.zeros((n, 1)),
            np.ones((n, 1)),
            nxt,
            term,
            done & ~term,
            achieved_goal=obs,
            desired_goal=np.full_like(obs, -1.0),
            next_achieved_goal=nxt,
        )
        step += 1
        for c in np.flatnonzero(done):
            episode[c] = next_id
            next_id += 1
            step[c] = 0
    replay.close()


def test_consistent_samples_under_concurrent_overwrites() -> None:
    cfg = ReplayConfig(
        capacity=300,
        batch_size=64,
        n_step=3,
        min_size=100,
        updates_per_insert=0,
        her=HerConfig("future", k=4),
        timeout_s=30,
    )
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
    ctx = multiprocess.get_context("spawn")
    with Replay.create(layout, cfg, GAMMA, relabel=relabel) as replay:
        redraws = _count_redraws(replay)
        procs = [ctx.Process(target=produce, args=(replay.handle(), i + 1, 3.0)) for i in (0, 1)]
        for p in procs:
            p.start()
        batches = 0
        try:
            replay.sample(timeout=30)
            start = replay.stats()["inserts"]
            while any(p.is_alive() for p in procs):
                b = replay.sample()
                batches += 1
                ep, t = b["obs"][:, 0], b["obs"][:, 1]
                np.testing.assert_array_equal(b["next_obs"][:, 0], ep)
                k = np.round(np.log1p(-b["reward"][:, 0] * (1 - GAMMA)) / np.log(GAMMA))
                np.testing.assert_array_equal(b["next_obs"][:, 1], t + k)
                g = b["obs"][:, 2:]
                new = g[:, 0] != -1.0
                np.testing.assert_array_equal(g[new, 0], ep[new])
                assert np.all(g[new, 1] >= t[new] + 1)
        finally:
            for p in procs:
                p.join(timeout=30)
        assert all(p.exitcode == 0 for p in procs)
        # The ring turned over many times while we sampled.
        assert replay.stats()["inserts"] - start > 10 * cfg.capacity
        assert batches > 100
        print(f"{batches} batches, {redraws[0]} redraws")  # the race: usually dozens of redraws


def _count_redraws(replay: Replay) -> list[int]:
    """Counts the sampler's ``discard`` calls, which ``Replay.sample`` makes only on its redraw
    path (rows overwritten between the draw and the gather)."""
    sampler, calls = replay.sampler, [0]
    discard = sampler.discard

    def counted(j):  # noqa: ANN001, ANN202
        calls[0] += 1
        return discard(j)

    sampler.discard = counted
    return calls


def _add_steps(w, episode: float, first: int, steps: int) -> None:  # noqa: ANN001
    """``steps`` steps of one episode ``episode`` (obs = [episode, t]), ended by truncation."""
    for t in range(first, first + steps):
        obs = np.array([[episode, t]], np.float32)
        end = np.array([t == first + steps - 1])
        w.add(
            obs,
            np.zeros((1, 1)),
            np.ones((1, 1)),
            obs + [0, 1],
            np.zeros(1, bool),
            end,
            achieved_goal=obs,
            desired_goal=np.full_like(obs, -1.0),
            next_achieved_goal=obs + [0, 1],
        )


def test_rows_overwritten_between_draw_and_gather_are_redrawn() -> None:
    """The redraw path, deterministically: the ring is overwritten (by another episode) right
    after the sampler drew, so every drawn row is stale; the batch must hold only rows of the
    new episode, with consistent n-step windows and HER goals."""
    cfg = ReplayConfig(
        capacity=50,
        batch_size=32,
        n_step=3,
        min_size=10,
        updates_per_insert=0,
        her=HerConfig("future", k=4),
        chunk=1,
    )
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
    with Replay.create(layout, cfg, GAMMA, relabel=relabel) as replay:
        w = replay.writer(num_envs=1)
        _add_steps(w, 1.0, 0, 50)
        w.flush()
        sampler = replay.sampler
        redraws = _count_redraws(replay)
        draw, draws = sampler.draw, []

        def draw_then_overwrite(n, updates):  # noqa: ANN001, ANN202
            out = draw(n, updates)
            draws.append(n)
            if len(draws) == 1:  # the first draw (lock free): another episode overwrites the ring
                _add_steps(w, 2.0, 0, 50)
                w.flush()
            return out

        sampler.draw = draw_then_overwrite
        b = replay.sample()
        assert redraws[0] >= 1 and len(draws) >= 2  # the rows drawn first were all stale
        np.testing.assert_array_equal(b["obs"][:, 0], 2.0)  # none of the overwritten episode
        assert np.all(b["index"] >= 50)  # absolute insert numbers of the new episode
        k = np.round(np.log1p(-b["reward"][:, 0] * (1 - GAMMA)) / np.log(GAMMA))
        np.testing.assert_array_equal(b["next_obs"][:, 1], b["obs"][:, 1] + k)
        np.testing.assert_array_equal(b["next_obs"][:, 0], 2.0)
        g = b["obs"][:, 2:]
        new = g[:, 0] != -1.0
        np.testing.assert_array_equal(g[new, 0], 2.0)
