"""Fewer bootstrap resamples, for tests of what a table or a report says rather than of its
intervals' precision (test_stats and test_experiments_lib's statistics tests check those).

At the default 10,000 resamples one rliable interval (:func:`wheeler2.stats.seed_intervals`)
took ~3 s and one :func:`wheeler2.stats.median_ci` ~0.5 s on a loaded 2-core machine: most of
what such a test spent. The intervals are still computed by the same code, seeded as before;
only their resampling noise is larger, and no test that uses this reads their digits."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import pytest

from wheeler2 import stats

RESAMPLES = 200


def few_resamples(monkeypatch: pytest.MonkeyPatch, resamples: int = RESAMPLES) -> None:
    """Every bootstrap of :mod:`wheeler2.stats` for the rest of the test draws ``resamples`` at
    most, however many its caller asks for: :func:`~wheeler2.stats.bootstrap` (under
    ``median_ci``, ``iqm_ci`` and ``ratio_ci``) and ``seed_intervals``, also where
    ``experiments.lib.stats`` re-exports them (the scripts call them through it)."""

    def capped(real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def call(*args: Any, **kw: Any) -> Any:
            kw["resamples"] = min(int(kw.get("resamples", resamples)), resamples)
            return real(*args, **kw)

        return call

    lib = sys.modules.get("experiments.lib.stats")
    for name in ("bootstrap", "seed_intervals"):
        fewer = capped(getattr(stats, name))
        monkeypatch.setattr(stats, name, fewer)
        if lib is not None:
            monkeypatch.setattr(lib, name, fewer)
