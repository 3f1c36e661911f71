"""Property: however the ring wraps over episodes, chunks and env copies, a sample never mixes
two episodes (n-step windows and HER goals included)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig

GAMMA = 0.5


def relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN201
    return np.ones((obs.shape[0], 1), np.float32)  # keeps "reward 1 per step" after relabelling


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(3, 40),
    num_envs=st.integers(1, 3),
    chunk=st.integers(1, 6),
    n_step=st.integers(1, 4),
    her=st.sampled_from([None, "future", "final", "episode"]),
    prioritized=st.booleans(),
    ends=st.lists(st.integers(0, 9), min_size=10, max_size=120),
    seed=st.integers(0, 2**16),
)
def test_samples_never_mix_episodes(
    capacity, num_envs, chunk, n_step, her, prioritized, ends, seed
) -> None:
    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=64,
        n_step=n_step,
        chunk=chunk,
        min_size=1,
        updates_per_insert=0,
        prioritized=prioritized,
        her=HerConfig(her, k=4) if her else None,
    )
    goal_dim = 2 if her else 0
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=goal_dim)
    rng = np.random.default_rng(seed)
    with Replay.create(layout, cfg, GAMMA, relabel=relabel if her else None, seed=seed) as r:
        w = r.writer(num_envs)
        episode = np.arange(num_envs, dtype=np.float32)
        step = np.zeros(num_envs, np.float32)
        next_id = num_envs
        lengths: dict[int, int] = {}
        for i, e in enumerate(ends):
            done = np.zeros(num_envs, bool)
            done[(i + e) % num_envs] = e < 3  # episodes of varied lengths
            term = done & (rng.random(num_envs) < 0.5)
            trunc = done & ~term
            obs = np.stack([episode, step], 1)
            nxt = np.stack([episode, step + 1], 1)
            goals = {}
            if her:
                goals = dict(
                    achieved_goal=obs, desired_goal=np.full_like(obs, -1.0), next_achieved_goal=nxt
                )
            w.add(obs, np.zeros((num_envs, 1)), np.ones((num_envs, 1)), nxt, term, trunc, **goals)
            step += 1
            for c in np.flatnonzero(done):
                lengths[int(episode[c])] = int(step[c])
                episode[c] = next_id
                next_id += 1
                step[c] = 0
        w.flush()
        if r.stats()["inserts"] == 0 or not r.can_sample():
            return
        for _ in range(3):
            b = r.sample()
            ep, t = b["obs"][:, 0], b["obs"][:, 1]
            nep, nt = b["next_obs"][:, 0], b["next_obs"][:, 1]
            assert np.all(ep == nep), "a window crossed into another episode"
            # reward 1 per step: the return tells how many steps the window took.
            k = np.round(np.log1p(-b["reward"][:, 0] * (1 - GAMMA)) / np.log(GAMMA)).astype(int)
            assert np.all((k >= 1) & (k <= n_step))
            np.testing.assert_array_equal(nt, t + k)
            cut = b["discount"] == 0
            np.testing.assert_allclose(b["discount"][~cut], GAMMA ** k[~cut])
            for e_, t_, k_ in zip(ep, t, k):
                if int(e_) in lengths:
                    assert t_ + k_ <= lengths[int(e_)]
            if her:
                g = b["obs"][:, 2:]
                new = g[:, 0] != -1.0
                assert np.all(g[new, 0] == ep[new]), "HER goal from another episode"
                if her == "future":
                    assert np.all(g[new, 1] >= t[new] + 1)
                if her == "final":
                    assert all(g_[1] == lengths[int(e_)] for g_, e_ in zip(g[new], ep[new]))
