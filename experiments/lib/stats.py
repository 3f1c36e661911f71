"""Statistics over seeds for the experiment scripts: the package's own (:mod:`wheeler2.stats`).

One implementation serves the scripts' tables and ``wheeler2 report``: medians, interquartile
means, censored steps to a threshold (a seed that never got there is infinity, not dropped),
percentile bootstrap intervals over seeds (paired across arms), and rliable's intervals for
finite scores. The reasons for each path are in :mod:`wheeler2.stats`.
"""

from __future__ import annotations

from wheeler2.stats import (
    CONFIDENCE,
    RESAMPLES,
    Interval,
    bootstrap,
    censored,
    eval_points,
    first_reach,
    fmt,
    generator,
    iqm,
    iqm_ci,
    mean_sd,
    median,
    median_ci,
    never,
    ratio_ci,
    ratio_of_medians,
    reached,
    seed_intervals,
    solved,
    to_threshold,
)

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "Interval",
    "bootstrap",
    "censored",
    "eval_points",
    "first_reach",
    "fmt",
    "generator",
    "iqm",
    "iqm_ci",
    "mean_sd",
    "median",
    "median_ci",
    "never",
    "ratio_ci",
    "ratio_of_medians",
    "reached",
    "seed_intervals",
    "solved",
    "to_threshold",
]
