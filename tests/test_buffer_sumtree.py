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
