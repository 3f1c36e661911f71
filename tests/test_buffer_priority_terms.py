"""Priority terms (``[buffer] priority_td``, ``priority_novelty``; wheeler2/buffer/priority.py):
the mixed priority is what the sum tree samples by, and the importance weights are those of
that very distribution, checked against P_i and (N P_i)^-beta computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayError

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
N = 8


def _replay(**keys: float) -> Replay:
    cfg = ReplayConfig(
        capacity=16,
        batch_size=4096,
        prioritized=True,
        alpha=ALPHA,
        beta=BETA,
        eps=EPS,
        min_size=1,
        updates_per_insert=0,
        **keys,
    )
    replay = Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9, seed=4)
    w = replay.writer(num_envs=1)
    for k in range(N):
        obs = np.array([[k, 0.0]], np.float32)
        nxt = np.array([[k + 1.0, 0.0]], np.float32)  # next_obs[0] = k + 1: the novelty below
        w.add(
            obs,
            np.zeros((1, 1), np.float32),
            np.zeros((1, 1)),
            nxt,
            np.array([k == N - 1]),
            np.array([False]),
        )
    w.flush()
    replay.sample(4)  # the sampler's first sync: every row at the max priority
    return replay


def _check_weights_are_those_of(replay: Replay, p_raw: np.ndarray) -> None:
    """Draws a large batch: each row's weight is (N P_j)^-beta / max_k (N P_k)^-beta with
    P = p^alpha / sum p^alpha, and the rows come up with frequencies P."""
    prob = p_raw**ALPHA / (p_raw**ALPHA).sum()
    w_all = (N * prob) ** -BETA
    want = w_all / w_all.max()
    b = replay.sample(4096)
    j = b["index"]
    np.testing.assert_allclose(b["weight"], want[j], rtol=1e-5)
    freq = np.bincount(j, minlength=N) / j.shape[0]
    np.testing.assert_allclose(freq, prob, atol=0.02)


def test_importance_weights_match_the_mixed_distribution_by_hand() -> None:
    with _replay(priority_td=0.7, priority_novelty=0.5) as replay:
        terms = replay._terms
        assert terms is not None
        # A novelty known by hand: the stored next observation's first value (1 .. N). The
        # replay must take it from the rows it stores, as it does the RND's input.
        terms.novelty = lambda next_obs: np.asarray(next_obs[:, 0], np.float64)  # type: ignore[method-assign]
        td = np.array([0.1, -2.0, 0.0, 0.5, 3.0, -0.2, 0.05, 1.0])
        replay.update_priorities(np.arange(N), td)
        novelty = np.arange(1, N + 1, dtype=np.float64)
        mixed = 0.7 * np.abs(td) + 0.5 * novelty + EPS
        _check_weights_are_those_of(replay, mixed)
        # And not those of the TD term alone, which differ for this td.
        td_only = np.abs(td) + EPS
        assert not np.allclose(mixed / mixed.sum(), td_only / td_only.sum(), atol=0.02)


def test_td_only_default_is_unchanged() -> None:
    with _replay() as replay:
        assert replay._terms is None
        td = np.array([0.1, -2.0, 0.0, 0.5, 3.0, -0.2, 0.05, 1.0])
        replay.update_priorities(np.arange(N), td)
        _check_weights_are_those_of(replay, np.abs(td) + EPS)


def test_rnd_novelty_is_the_priority_and_trains_on_what_was_replayed() -> None:
    with _replay(priority_td=0.0, priority_novelty=1.0) as replay:
        terms = replay._terms
        assert terms is not None
        seen: list[np.ndarray] = []
        rnd_novelty = terms.novelty

        def recorded(next_obs: np.ndarray) -> np.ndarray:
            value = rnd_novelty(next_obs)
            seen.append(value)
            return value

        terms.novelty = recorded  # type: ignore[method-assign]
        replay.update_priorities(np.arange(N), np.full(N, 5.0))  # TD has weight 0 here
        (novelty,) = seen
        assert novelty.shape == (N,) and np.isfinite(novelty).all() and novelty.std() > 0
        assert terms._rnd.steps == 1  # the predictor took one step on the replayed batch
        for _ in range(4):  # and one more on every 4th batch after it (priority.TRAIN_EVERY)
            terms.novelty(np.ones((3, 2), np.float32))
        assert terms._rnd.steps == 2
        leaves = replay.sampler.tree.leaves[:N]
        np.testing.assert_allclose(leaves, (novelty + EPS) ** ALPHA, rtol=1e-9)
        _check_weights_are_those_of(replay, novelty + EPS)


def test_novelty_without_priorities_is_refused() -> None:
    cfg = ReplayConfig(capacity=16, min_size=1, priority_novelty=1.0)
    with pytest.raises(ReplayError, match="priority_novelty needs prioritized = true"):
        Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9)
