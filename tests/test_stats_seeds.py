"""wheeler2.stats against rliable and the experiments' own rules (the review's checks)."""

import warnings

import numpy as np
import pytest

pytest.importorskip("rliable", reason="needs rliable (pip install 'wheeler2[report]')")
from rliable import library, metrics  # noqa: E402

from wheeler2 import stats  # noqa: E402


def test_rliable_intervals_are_reproducible_and_leave_the_global_rng_alone() -> None:
    x = np.random.default_rng(5).normal(100.0, 30.0, 10)
    np.random.seed(1)
    first = stats.seed_intervals(x, resamples=2_000, rng=3)
    after = np.random.random()
    np.random.seed(2)  # another global state: rliable draws its resamples from it
    again = stats.seed_intervals(x, resamples=2_000, rng=3)
    assert again == first
    np.random.seed(1)
    stats.seed_intervals(x, resamples=2_000, rng=3)
    assert np.random.random() == after  # the caller's global stream goes on as it would have
    assert stats.seed_intervals(x, resamples=2_000, rng=4) != first


def test_rliable_intervals_are_rliables_own_for_one_task() -> None:
    x = np.random.default_rng(7).normal(0.0, 1.0, 12)
    ours = stats.seed_intervals(x, resamples=2_000, rng=0)

    def aggregates(s: np.ndarray) -> np.ndarray:
        return np.array([np.median(s), metrics.aggregate_iqm(s)])

    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        points, intervals = library.get_interval_estimates(
            {"x": x.reshape(-1, 1)},
            aggregates,
            reps=2_000,
            random_state=np.random.RandomState(0),
        )
    for i, key in enumerate(("median", "iqm")):
        assert ours[key].point == pytest.approx(points["x"][i])
        assert (ours[key].lo, ours[key].hi) == pytest.approx(tuple(intervals["x"][:, i]))
