"""Importance weights, alpha applied once, max priority for new items, uniform mode, the
sample's keys and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig


def _fill(replay: Replay, n: int, discrete: bool = False) -> None:
    w = replay.writer(num_envs=1)
    for t in range(n):
        act = np.array([t % 3]) if discrete else np.full((1, 2), t, np.float32)
        w.add(
            np.full((1, 3), t, np.float32),
            act,
            np.full((1, 1), t, np.float32),
            np.full((1, 3), t + 1, np.float32),
            np.array([False]),
            np.array([False]),
            logp=np.array([-float(t)], np.float32),
        )
    w.flush()


@pytest.fixture
def replay():
    cfg = ReplayConfig(
        capacity=8,
        batch_size=64,
        prioritized=True,
        alpha=0.6,
        beta=0.4,
        eps=1e-6,
        updates_per_insert=0,
        min_size=1,
    )
    r = Replay.create(Layout(obs_dim=3, act_dim=2, logp=True), cfg, gamma=0.9, seed=3)
    yield r
    r.close()


def test_importance_weights_by_hand(replay: Replay) -> None:
    _fill(replay, 6)
    replay.sample()  # first sample: the sampler learns of the 6 items
    td = np.array([0.5, -2.0, 0.0, 1.0, 3.0, -0.1])
    replay.update_priorities(np.arange(6), td)
    batch = replay.sample()
    alpha, beta, n = 0.6, 0.4, 6
    p = (np.abs(td) + 1e-6) ** alpha  # alpha once: priorities are |td| + eps
    prob = p / p.sum()
    w_all = (n * prob) ** -beta
    want = w_all[batch["index"]] / w_all.max()
    np.testing.assert_allclose(batch["weight"], want, rtol=1e-5)
    assert batch["weight"].max() <= 1.0
    # The tree holds priority ** alpha, not priority ** (alpha ** 2) or priority itself.
    np.testing.assert_allclose(replay.sampler.tree.leaves[:6], p)


def test_new_items_get_the_max_priority(replay: Replay) -> None:
    _fill(replay, 3)
    replay.sample()
    replay.update_priorities(np.arange(3), np.array([0.2, 4.0, 1.0]))
    _fill(replay, 1)
    replay.sample()
    assert replay.sampler.tree.leaves[3] == pytest.approx((4.0 + 1e-6) ** 0.6)
    # A stale update (its slot was overwritten since) is ignored.
    _fill(replay, 8)
    replay.sample()
    before = replay.sampler.tree.leaves.copy()
    replay.update_priorities(np.array([0]), np.array([100.0]))
    np.testing.assert_array_equal(replay.sampler.tree.leaves, before)


def test_beta_anneals_linearly_to_one() -> None:
    cfg = ReplayConfig(
        capacity=16,
        batch_size=32,
        prioritized=True,
        beta=0.4,
        beta_steps=10,
        updates_per_insert=0,
        min_size=1,
    )
    with Replay.create(Layout(obs_dim=3, act_dim=2, logp=True), cfg, gamma=0.9) as r:
        _fill(r, 4)
        r.sample()
        r.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
        p = (np.arange(1, 5) + 1e-6) ** 0.6
        for _ in range(12):
            batch = r.sample()
            u = r.stats()["updates"]
            beta = 0.4 + 0.6 * min(1.0, u / 10)
            want = (p[batch["index"]] / p.min()) ** -beta
            np.testing.assert_allclose(batch["weight"], want, rtol=1e-5)


@pytest.mark.parametrize("inserted", [14, 6])  # wrapped: items 4..13 stored; not yet: 0..5
def test_uniform_sampling_has_unit_weights_and_uniform_frequencies(inserted: int) -> None:
    cfg = ReplayConfig(
        capacity=10, batch_size=500, prioritized=False, updates_per_insert=0, min_size=1
    )
    with Replay.create(Layout(obs_dim=3, act_dim=2, logp=True), cfg, gamma=0.9) as r:
        _fill(r, inserted)
        oldest = max(0, inserted - 10)
        counts = np.zeros(inserted)
        for _ in range(20):
            batch = r.sample()
            assert np.all(batch["weight"] == 1.0)
            np.add.at(counts, batch["index"], 1)
            np.testing.assert_array_equal(batch["obs"][:, 0], batch["index"])
        assert counts[:oldest].sum() == 0
        assert counts[oldest:].min() > 0.7 * counts[oldest:].mean()


def test_sample_keys_and_dtypes(replay: Replay) -> None:
    _fill(replay, 5)
    b = replay.sample(batch_size=16)
    assert set(b) == {"obs", "action", "reward", "next_obs", "discount", "weight", "index", "logp"}
    assert b["obs"].shape == (16, 3) and b["reward"].shape == (16, 1)
    for key in ("obs", "action", "reward", "next_obs", "discount", "weight", "logp"):
        assert b[key].dtype == np.float32, key
    assert b["index"].dtype == np.int64
    assert all(v.flags.c_contiguous for v in b.values())
    from wheeler2.agent import Batch

    batch = Batch.from_numpy(b, "cpu")  # the learner's view of a sample
    assert batch.obs.shape == (16, 3) and batch.logp is not None
    batch.obs.view(-1)
    np.testing.assert_array_equal(b["reward"][:, 0], b["obs"][:, 0])
    np.testing.assert_array_equal(b["logp"], -b["obs"][:, 0])
    np.testing.assert_allclose(b["discount"], 0.9)


def test_discrete_actions_are_int64() -> None:
    cfg = ReplayConfig(capacity=8, batch_size=8, updates_per_insert=0, min_size=1)
    with Replay.create(Layout(obs_dim=3, act_dim=3, discrete=True, logp=True), cfg, 0.9) as r:
        _fill(r, 6, discrete=True)
        b = r.sample()
        assert b["action"].dtype == np.int64 and b["action"].shape == (8,)
        np.testing.assert_array_equal(b["action"], b["obs"][:, 0].astype(np.int64) % 3)


def test_non_finite_td_errors_do_not_poison_the_tree(replay: Replay) -> None:
    """A NaN or inf TD error gives its item the buffer's max priority (revisited, not lost),
    finite ones their own |td| + eps; the tree's total and the weights stay finite."""
    _fill(replay, 4)
    replay.sample()
    replay.update_priorities(np.arange(4), np.array([5.0, 0.5, 0.5, 0.5]))  # max: 5 + eps
    replay.update_priorities(np.arange(4), np.array([1.0, np.nan, np.inf, 2.0]))
    assert replay.stats()["max_priority"] == pytest.approx(5.0 + 1e-6)
    leaves = replay.sampler.tree.leaves[:4]
    want = np.array([1.0, 5.0, 5.0, 2.0]) + 1e-6
    np.testing.assert_allclose(leaves, want**0.6)
    assert replay.sampler.tree.total == pytest.approx((want**0.6).sum())
    assert np.all(np.isfinite(replay.sample()["weight"]))


def test_the_oldest_live_item_still_takes_its_update(replay: Replay) -> None:
    """The staleness cut is exact: after 12 inserts into 8 slots, item 4 (the oldest still in
    the ring) takes a new priority, item 3 (overwritten by item 11) does not."""
    _fill(replay, 12)
    replay.sample()
    before = replay.sampler.tree.leaves.copy()
    replay.update_priorities(np.array([3]), np.array([100.0]))
    np.testing.assert_array_equal(replay.sampler.tree.leaves, before)
    replay.update_priorities(np.array([4]), np.array([100.0]))
    assert replay.sampler.tree.leaves[4] == pytest.approx((100.0 + 1e-6) ** 0.6)


def test_items_inserted_across_the_ring_end_get_the_max_priority(replay: Replay) -> None:
    """Sync after inserts that wrap around the ring's end (slots 6, 7, 0, 1, 2): exactly those
    slots take the max priority, the others keep their own; then a whole ring of new items
    (8 inserts into 8 slots) resets every slot."""
    _fill(replay, 6)
    replay.sample()
    replay.update_priorities(np.arange(6), np.full(6, 0.5))  # max priority stays 1
    _fill(replay, 5)  # items 6..10 -> slots 6, 7, 0, 1, 2
    replay.sample()  # syncs: the new items take the max priority (1 ** alpha)
    low = (0.5 + 1e-6) ** 0.6
    np.testing.assert_allclose(replay.sampler.tree.leaves, [1, 1, 1, low, low, low, 1, 1])
    replay.update_priorities(np.arange(3, 11), np.full(8, 0.5))
    _fill(replay, 8)  # a whole ring since the last sync
    replay.sample()
    np.testing.assert_allclose(replay.sampler.tree.leaves, np.ones(8))


def test_sampling_and_priority_updates_from_two_threads() -> None:
    """The compiled tree releases the GIL; the sampler serializes its own calls, so a thread
    sampling ahead (prefetch) beside one updating priorities sees a consistent tree."""
    import threading

    cfg = ReplayConfig(
        capacity=5000, batch_size=128, prioritized=True, updates_per_insert=0, min_size=1
    )
    with Replay.create(Layout(obs_dim=3, act_dim=2, logp=True), cfg, gamma=0.9) as r:
        _fill(r, 5000)
        r.sample()
        errors: list[BaseException] = []
        drawn: list[np.ndarray] = []

        def sampler() -> None:
            try:
                for _ in range(300):
                    b = r.sample()
                    drawn.append(b["index"])
                    assert np.all(b["weight"] > 0) and np.all(b["weight"] <= 1.0)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def updater() -> None:
            rng = np.random.default_rng(1)
            try:
                for _ in range(300):
                    r.update_priorities(rng.integers(0, 5000, 128), rng.random(128) * 5)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=sampler), threading.Thread(target=updater)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        idx = np.concatenate(drawn)
        assert idx.min() >= 0 and idx.max() < 5000
        tree = r.sampler.tree
        assert tree.total == pytest.approx(tree.leaves[:5000].sum(), rel=1e-9)


def test_a_draw_on_an_emptied_leaf_is_redrawn_proportionally() -> None:
    """The sampler's redraw, against a naive sampler. A leaf set to 0 behind the inner rows'
    back (what a torn read would show: the rows still count its mass) is drawn by the
    stratified pass, gets weight 0 and the redraw mark, and is redrawn by one proportional draw
    over the same rows; every row then holds the absolute number of its slot (12 inserts into 8
    slots: slots 0-3 hold items 8-11) and weight ``(p / p_min) ** -beta`` of its fresh leaf."""
    cfg = ReplayConfig(
        capacity=8,
        batch_size=16,
        prioritized=True,
        alpha=1.0,  # the leaves are the priorities themselves
        beta=0.5,
        eps=1e-9,
        updates_per_insert=0,
        min_size=1,
    )
    with Replay.create(Layout(obs_dim=3, act_dim=2, logp=True), cfg, gamma=0.9) as r:
        _fill(r, 12)
        r.sample()
        p = np.array([3.0, 1.5, 4.0, 2.0, 5.0, 2.5, 6.0, 3.5])  # by slot; p_min = 1.5
        r.update_priorities(np.arange(4, 12), p[np.arange(4, 12) % 8] - 1e-9)
        tree = r.sampler.tree
        np.testing.assert_allclose(tree.leaves[:8], p)
        tree.leaves[2] = 0.0  # item 10's slot, emptied without refreshing the rows
        r.sampler.rng = np.random.default_rng(0)
        j, weight = r.sampler.draw(16, updates=5)

        naive = np.random.default_rng(0)  # the same stream, spent the same way
        csum = np.cumsum(p)  # the mass the rows still hold
        slot = np.searchsorted(csum, (np.arange(16) + naive.random(16)) * csum[-1] / 16, "right")
        bad = slot == 2
        redo = np.searchsorted(csum, naive.random(int(bad.sum())) * csum[-1], "right")
        assert bad.sum() == 2 and not np.any(redo == 2)  # the case this test is about
        slot[bad] = redo
        fresh = p.copy()
        fresh[2] = 0.0
        np.testing.assert_array_equal(j, np.where(slot < 4, slot + 8, slot))
        np.testing.assert_allclose(weight, (fresh[slot] / 1.5) ** -0.5, rtol=1e-6)


def _first_draw(replay: Replay, j: list[int]) -> list[int]:
    """Make the sampler's next draw return the numbers ``j`` (weight 1) and later draws its
    own; returns the list of batch sizes drawn."""
    sampler = replay.sampler
    draw, sizes = sampler.draw, []

    def fixed_then_own(n: int, updates: int) -> tuple[np.ndarray, np.ndarray]:
        sizes.append(n)
        if len(sizes) == 1:
            return np.array(j, dtype=np.int64), np.ones(len(j), np.float32)
        return draw(n, updates)

    sampler.draw = fixed_then_own
    return sizes


def test_broken_rows_are_discarded_and_overwritten_ones_keep_their_new_priority(
    replay: Replay,
) -> None:
    """Rows that fail the validity check are redrawn. Item 4, the oldest the ring still holds
    (12 inserts into 8 slots), found half-written (a dead writer's slot) is discarded: its leaf
    goes to 0, so it is never drawn again. Item 2 was overwritten by item 10, which is intact:
    its slot keeps item 10's priority."""
    _fill(replay, 12)
    replay.sample()
    replay.update_priorities(np.arange(4, 12), np.arange(1.0, 9.0))
    leaves = replay.sampler.tree.leaves
    before = leaves[:8].copy()
    replay.storage.arrays["abs"][4] = -1  # how a writer that died mid-copy leaves a slot
    sizes = _first_draw(replay, [4, 2, 7])
    batch = replay.sample(batch_size=3)
    assert sizes == [3, 2]  # one redraw, of the two bad rows
    assert leaves[4] == 0.0
    want = before.copy()
    want[4] = 0.0
    np.testing.assert_array_equal(leaves[:8], want)  # item 10's slot 2 untouched
    assert batch["index"][2] == 7 and not np.isin(batch["index"], [2, 4]).any()
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["index"])


@pytest.mark.timeout(15)  # a redraw loop that never gives up fails here
def test_sampling_gives_up_after_the_redraw_limit_when_nothing_is_valid(replay: Replay) -> None:
    """Every stored row half-written: one draw and ``_MAX_REDRAWS`` (8) redraws, then a clear
    error instead of a loop that never ends."""
    from wheeler2.buffer import ReplayError
    from wheeler2.buffer import replay as replay_module

    assert replay_module._MAX_REDRAWS == 8
    _fill(replay, 12)
    replay.sample()
    replay.storage.arrays["abs"][:] = -1
    sizes = _first_draw(replay, [4, 9])
    # Once every leaf is discarded the sampler draws from an empty tree (weight 0 ** -beta).
    with np.errstate(divide="ignore"), pytest.raises(ReplayError, match="could not draw valid"):
        replay.sample(batch_size=2)
    assert sizes == [2] * 9


def test_gamma_from_0_to_1_inclusive() -> None:
    """gamma = 0 (rewards only) and 1 (no discounting) are valid; outside [0, 1] is refused."""
    from wheeler2.buffer import ReplayError

    cfg = ReplayConfig(capacity=8, batch_size=4, updates_per_insert=0, min_size=1)
    layout = Layout(obs_dim=3, act_dim=2, logp=True)
    for gamma in (0.0, 1.0):
        with Replay.create(layout, cfg, gamma=gamma) as r:
            _fill(r, 3)
            np.testing.assert_array_equal(r.sample()["discount"], np.full(4, gamma))
    for gamma in (-0.1, 1.1):
        with pytest.raises(ReplayError, match=r"gamma must lie in \[0, 1\]"):
            Replay.create(layout, cfg, gamma=gamma)
