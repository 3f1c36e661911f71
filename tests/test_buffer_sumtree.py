"""Sum/min tree: proportional sampling and its agreement with a naive sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wheeler2.buffer.sumtree import SumMinTree, tree_shape


@pytest.mark.parametrize("capacity", [7, 5000, 200_000])
def test_find_matches_naive_proportional_sampler(capacity: int) -> None:
    rng = np.random.default_rng(0)
    tree = SumMinTree(capacity)
    p = rng.random(capacity) * (rng.random(capacity) < 0.8)  # a fifth are empty slots
    tree.update(np.arange(capacity), p)
    for _ in range(3):
        # Scattered updates with duplicates: the last write wins, as in numpy.
        idx = rng.integers(0, capacity, 300)
        vals = rng.random(300)
        tree.update(idx, vals)
        p[idx] = vals
        tree.set_range(capacity // 3, capacity // 2, 0.25)
        p[capacity // 3 : capacity // 2] = 0.25
        csum = np.cumsum(p)
        mass = rng.random(20_000) * csum[-1] * (1 - 1e-12)
        np.testing.assert_array_equal(tree.find(mass), np.searchsorted(csum, mass, side="right"))
        assert tree.total == pytest.approx(p.sum(), rel=1e-12)
        assert tree.min == p[p > 0].min()
    assert np.all(p[tree.sample(4096, rng)] > 0)


def chisquare_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    """Upper tail of Pearson's chi-square (Wilson-Hilferty normal approximation: within 1e-3
    of the exact tail for 30+ degrees of freedom), so the test needs no scipy."""
    stat = float(((observed - expected) ** 2 / expected).sum())
    k = observed.shape[0] - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_chisquare_helper_rejects_a_wrong_distribution() -> None:
    expected = np.full(34, 1000.0)
    assert chisquare_pvalue(expected, expected) > 0.99
    skewed = expected * np.linspace(0.8, 1.2, 34)
    assert chisquare_pvalue(skewed, expected) < 1e-6


def test_stratified_sampling_frequencies_match_priorities() -> None:
    rng = np.random.default_rng(1)
    k = 40
    tree = SumMinTree(k)
    p = rng.uniform(0.1, 3.0, k)
    p[::7] = 0.0  # empty slots must never be drawn
    tree.update(np.arange(k), p)
    counts = np.zeros(k)
    for _ in range(400):
        np.add.at(counts, tree.sample(256, rng), 1)
    assert counts[p == 0].sum() == 0
    nz = p > 0
    expected = counts.sum() * p[nz] / p[nz].sum()
    assert chisquare_pvalue(counts[nz], expected) > 1e-3
    # The same counts against the wrong priorities (alpha applied twice) are rejected.
    wrong = counts.sum() * p[nz] ** 2 / (p[nz] ** 2).sum()
    assert chisquare_pvalue(counts[nz], wrong) < 1e-6


def test_rebuild_and_shared_leaves() -> None:
    levels, size = tree_shape(100_000)
    assert levels >= 1 and size >= 100_000
    leaves = np.zeros(size)
    a = SumMinTree(100_000, leaves)
    rng = np.random.default_rng(2)
    a.update(rng.integers(0, 100_000, 1000), rng.random(1000))
    b = SumMinTree(100_000, leaves.copy())  # a second process mapping the same leaves
    assert b.total == pytest.approx(a.total) and b.min == a.min
    mass = rng.random(500) * a.total
    np.testing.assert_array_equal(a.find(mass), b.find(mass))


# -- the compiled kernels (wheeler2/buffer/treejit.py) ----------------------------------------


def _naive_find(p: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Proportional retrieval by a plain cumulative sum: the first leaf whose prefix exceeds
    the mass."""
    return np.searchsorted(np.cumsum(p), mass, side="right")


@pytest.mark.parametrize("capacity", [4, 40, 5000, 70_000])
def test_exact_prefix_retrieval_on_hand_built_trees(capacity: int) -> None:
    """Integer priorities keep every sum exact, so masses on the boundaries themselves (where
    rounding could go either way) must land exactly where the cumulative sum says: a mass equal
    to a prefix belongs to the next non-empty leaf; empty leaves are never returned."""
    p = (np.arange(capacity) % 5).astype(np.float64)  # 0, 1, 2, 3, 4, 0, 1, ...: a fifth empty
    tree = SumMinTree(capacity)
    tree.update(np.arange(capacity), p)
    csum = np.cumsum(p)
    assert tree.total == csum[-1] and tree.min == 1.0
    inner = np.unique(np.concatenate([[0.0], csum[:-1]]))  # every boundary below the total
    mass = np.concatenate([inner, inner + 0.5])
    mass = mass[mass < csum[-1]]
    got = tree.find(mass)
    np.testing.assert_array_equal(got, _naive_find(p, mass))
    assert np.all(p[got] > 0)


def test_mass_at_or_past_the_total_lands_on_the_last_non_empty_leaf() -> None:
    p = np.array([1.0, 2.0, 0.0, 3.0, 0.0, 0.0])
    tree = SumMinTree(6)
    tree.update(np.arange(6), p)
    np.testing.assert_array_equal(tree.find(np.array([5.999, 6.0, 7.0, np.inf])), [3, 3, 3, 3])
    # The same across rows and levels: only leaf 40 of 5000 (row 1 of level 0) is non-empty.
    big = SumMinTree(5000)
    big.update(np.array([40]), np.array([2.0]))
    np.testing.assert_array_equal(big.find(np.array([0.0, 1.9, 2.0, 1e9])), [40] * 4)


def test_repeated_indices_in_one_update_last_write_wins() -> None:
    tree = SumMinTree(5000)
    idx = np.array([7, 3000, 7, 7, 31, 32, 3000])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0])
    tree.update(idx, vals)
    want = np.zeros(5000)
    want[idx] = vals  # numpy's fancy assignment: the last write wins as well
    np.testing.assert_array_equal(tree.leaves[:5000], want)
    assert tree.total == want.sum() and tree.min == 4.0
    mass = np.arange(0.0, want.sum(), 0.25)
    np.testing.assert_array_equal(tree.find(mass), _naive_find(want, mass))
    # Through update_priorities too: raw priorities |td| + eps, raised to alpha.
    top = tree.update_priorities(np.array([9, 9, 9]), np.array([5.0, -1.0, 2.0]), 0.5, 0.5, 1.0)
    assert tree.leaves[9] == pytest.approx(2.5**0.5) and top == 5.5


def test_update_priorities_replaces_non_finite_errors_by_the_fallback() -> None:
    tree = SumMinTree(100)
    top = tree.update_priorities(
        np.array([1, 2, 3]), np.array([np.nan, np.inf, 1.0]), 1e-6, 0.6, 8.0
    )
    assert top == 8.0
    np.testing.assert_allclose(tree.leaves[1:4], [8.0**0.6, 8.0**0.6, (1.0 + 1e-6) ** 0.6])
    assert np.isfinite(tree.total)


def test_out_of_range_indices_raise_and_write_nothing() -> None:
    tree = SumMinTree(100)
    size = tree.leaves.shape[0]
    for bad in (-1, 100, size):
        with pytest.raises(IndexError):
            tree.update(np.array([5, bad]), np.array([1.0, 1.0]))
        with pytest.raises(IndexError):
            tree.update_priorities(np.array([5, bad]), np.array([1.0, 1.0]), 0.1, 0.6, 1.0)
    with pytest.raises(IndexError):
        tree.set_range(90, 101, 1.0)
    assert tree.total == 0.0 and not tree.leaves.any()


@pytest.mark.parametrize("capacity", [40, 40_000])
def test_draw_frequencies_and_weights_against_a_naive_sampler(capacity: int) -> None:
    """``draw`` (one compiled pass: stratified slots and weights): frequencies per group of
    leaves against p / sum(p) by chi-square, and every weight equal to (N P(i))^-beta / max_k
    (N P(k))^-beta computed from the priorities directly."""
    rng = np.random.default_rng(4)
    groups = 40
    # Priorities that differ between groups of leaves, so that the per-group counts tell the
    # right distribution from a wrong one.
    scale = 1.0 + (np.arange(capacity) * groups // capacity) % 5
    p = rng.uniform(0.05, 2.0, capacity) * scale
    p[rng.random(capacity) < 0.2] = 0.0
    tree = SumMinTree(capacity)
    tree.update(np.arange(capacity), p)
    beta, n = 0.4, int((p > 0).sum())
    prob = p / p.sum()
    w_all = np.where(p > 0, n * prob, np.inf) ** -beta
    w_max = w_all[p > 0].max()
    edges = np.linspace(0, capacity, groups + 1).astype(int)
    counts = np.zeros(groups)
    for _ in range(400):
        slot, weight, empty = tree.draw(256, rng, beta)
        assert empty == 0 and np.all(p[slot] > 0)
        np.testing.assert_allclose(weight, w_all[slot] / w_max, rtol=1e-5)
        counts += np.bincount(np.searchsorted(edges, slot, side="right") - 1, minlength=groups)
    expected = counts.sum() * np.add.reduceat(prob, edges[:-1])
    live = expected > 0
    assert counts[~live].sum() == 0
    assert chisquare_pvalue(counts[live], expected[live]) > 1e-3
    wrong = counts.sum() * np.add.reduceat(p**2 / (p**2).sum(), edges[:-1])
    assert chisquare_pvalue(counts[live], wrong[live]) < 1e-6


def test_tree_works_in_place_on_shared_memory_leaves() -> None:
    """The leaves a tree is given (here a shared-memory segment, as the replay's priorities
    are) are the very array it writes: no copy. A second tree over the same mapping, as in
    another process, rebuilds its inner levels from them and agrees."""
    from wheeler2.buffer.shm import Segment, new_prefix

    capacity = 70_000
    size = tree_shape(capacity)[1]
    name = new_prefix() + "_tree"
    seg = Segment(name, (size,), np.dtype(np.float64), create=True)
    other = Segment(name, (size,), np.dtype(np.float64), create=False)
    try:
        a = SumMinTree(capacity, seg.array)
        assert a.leaves is seg.array
        rng = np.random.default_rng(5)
        idx, vals = rng.integers(0, capacity, 3000), rng.random(3000)
        a.update(idx, vals)
        a.set_range(100, 200, 0.5)
        b = SumMinTree(capacity, other.array)  # the other mapping: sees a's writes
        assert b.total == pytest.approx(a.total, rel=1e-12) and b.min == a.min
        mass = rng.random(2000) * a.total * (1 - 1e-12)
        np.testing.assert_array_equal(a.find(mass), b.find(mass))
        np.testing.assert_array_equal(a.find(mass), _naive_find(other.array, mass))
    finally:
        other.close()
        seg.close()
        seg.unlink()


def test_read_only_or_strided_leaves_are_refused() -> None:
    size = tree_shape(100)[1]
    ro = np.zeros(size)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        SumMinTree(100, ro)
    with pytest.raises(ValueError, match="writeable"):
        SumMinTree(100, np.zeros(2 * size)[::2])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("import sys; sys.modules['numba'] = None", "needs numba"),
        ("import os; os.environ['NUMBA_DISABLE_JIT'] = '1'", "NUMBA_DISABLE_JIT"),
    ],
)
def test_without_the_jit_a_tree_fails_clearly(setup: str, message: str) -> None:
    """No silent pure-Python fallback: building a tree without numba's JIT raises, and says
    why; a process that only imports the buffer (a producer) does not need numba at all."""
    import subprocess
    import sys

    code = (
        f"{setup}\n"
        "import wheeler2.buffer.storage\n"  # the producer's side imports fine
        "from wheeler2.buffer.sumtree import SumMinTree\n"
        "try:\n"
        "    SumMinTree(10)\n"
        "except ImportError as exc:\n"
        "    print('ERR', exc)\n"
        "from wheeler2.buffer import her\n"  # the HER goal choice says the same
        "try:\n"
        "    her._kernels()\n"
        "except ImportError as exc:\n"
        "    print('HER', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "ERR" in out.stdout and message in out.stdout, out.stdout + out.stderr
    assert "HER" in out.stdout and out.stdout.count(message) == 2, out.stdout + out.stderr


def test_absolute_numbers_in_draw_and_update() -> None:
    """Given the ring's insert count, ``draw`` returns the absolute insert number each drawn
    slot holds (the newest ``capacity`` numbers) and ``update_priorities`` maps numbers back to
    slots, skipping numbers the ring no longer holds."""
    capacity = 50
    tree = SumMinTree(capacity)
    tree.update(np.arange(capacity), np.arange(1.0, capacity + 1))
    for total in (7, 50, 168, 10**12 + 3):
        slot, w_slot, _ = tree.draw(512, np.random.default_rng(total), 0.5)
        j, w, empty = tree.draw(512, np.random.default_rng(total), 0.5, total)
        assert empty == 0
        np.testing.assert_array_equal(j % capacity, slot)
        np.testing.assert_array_equal(w, w_slot)
        assert j.max() < total and j.min() >= total - capacity
    total = 168
    before = tree.leaves.copy()
    numbers = np.array([total - capacity - 1, total - 1, total - capacity, 5])
    top = tree.update_priorities(numbers, np.array([9.0, 1.0, 2.0, 9.0]), 0.0, 1.0, 1.0, total)
    want = before.copy()
    want[(total - 1) % capacity], want[(total - capacity) % capacity] = 1.0, 2.0
    np.testing.assert_array_equal(tree.leaves, want)  # the stale numbers changed nothing
    assert top == 2.0 and tree.total == pytest.approx(want.sum())


def test_an_empty_tree_draws_empty_slots_marked_by_weight_0() -> None:
    """An empty tree (never filled, or every leaf set back to 0) has total 0 and min inf; a
    draw from it lands on slot 0 with weight 0, the mark by which the sampler finds and redraws
    such rows, and counts every row as empty. Given 13 inserts into the 8-slot ring, slot 0
    holds insert number 8."""
    tree = SumMinTree(8)
    for fill in (None, "update", "set_range"):
        if fill == "update":
            tree.update(np.arange(8), np.arange(1.0, 9.0))
            assert tree.total == 36.0 and tree.min == 1.0
            tree.update(np.arange(8), np.zeros(8))
        elif fill == "set_range":
            tree.set_range(2, 5, 0.5)
            assert tree.total == 1.5 and tree.min == 0.5
            tree.set_range(0, 8, 0.0)
        assert tree.total == 0.0 and tree.min == math.inf
        for beta in (0.0, 0.4):
            slot, weight, empty = tree.draw(5, np.random.default_rng(0), beta)
            np.testing.assert_array_equal(slot, np.zeros(5))
            np.testing.assert_array_equal(weight, np.zeros(5))
            assert empty == 5
            number, weight, empty = tree.draw(5, np.random.default_rng(0), beta, total=13)
            np.testing.assert_array_equal(number, np.full(5, 8))
            assert empty == 5 and not weight.any()


def test_mismatched_index_and_value_counts_are_refused_by_name() -> None:
    tree = SumMinTree(10)
    with pytest.raises(ValueError, match="3 indices but 2 values"):
        tree.update(np.array([1, 2, 3]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="2 indices but 3 errors"):
        tree.update_priorities(np.array([1, 2]), np.array([1.0, 2.0, 3.0]), 0.1, 0.6, 1.0)
    assert tree.total == 0.0


@pytest.mark.parametrize("bad", [-1, 100, 130])
def test_out_of_range_errors_name_the_offending_index(bad: int) -> None:
    tree = SumMinTree(100)
    message = rf"leaf index {bad} outside \[0, 100\)"
    with pytest.raises(IndexError, match=message):
        tree.update(np.array([0, 5, bad, 99]), np.ones(4))
    with pytest.raises(IndexError, match=message):
        tree.update_priorities(np.array([0, 5, bad, 99]), np.ones(4), 0.1, 0.6, 1.0)
