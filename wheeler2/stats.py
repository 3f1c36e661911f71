"""Statistics over seeds: medians, interquartile means, bootstrap intervals, thresholds.

Two interval paths, each for the values it is right for:

* **returns** (finite values: final or best eval return per seed): :func:`seed_intervals`,
  through rliable (Agarwal et al., NeurIPS 2021; ``rliable.library.get_interval_estimates``,
  percentile bootstrap over seeds, ``rliable.metrics.aggregate_iqm``). It needs the ``report``
  extra (``pip install 'wheeler2[report]'``).
* **steps or seconds to a threshold** (censored: a seed that never got there has no value):
  :func:`bootstrap` below, in numpy. A run that never reached the threshold is censored, not
  missing: :func:`never` turns its ``None`` into infinity, so it ranks after every run that
  did, a median over at least half unsolved seeds is infinite, and an interval's upper end is
  infinite ("never") when enough resamples are. rliable cannot take these values: an infinite
  score turns its interval into nan. The same bootstrap pairs two arms (a resample draws the
  same seeds from each, as seed s of every arm runs on the same env seeds), which rliable's
  interval code does not.

Both are Efron's percentile bootstrap over seeds; ``iqm`` is rliable's ``aggregate_iqm``
(``scipy.stats.trim_mean(x, 0.25)``) for one task. experiments/ imports this module
(experiments/lib/stats.py re-exports it), so the scripts' tables and ``wheeler2 report`` use
the same code.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95


class Interval(NamedTuple):
    """A point estimate and its confidence interval; ``lo``/``hi`` are nan when no resample
    gave a defined value."""

    point: float
    lo: float
    hi: float

    def cell(self, spec: str = ".2f") -> str:
        """``point [lo, hi]`` for a table cell; "—" for what is not defined."""
        if math.isnan(self.lo):
            return fmt(self.point, spec)
        return f"{fmt(self.point, spec)} [{fmt(self.lo, spec)}, {fmt(self.hi, spec)}]"


def fmt(x: float | int | None, spec: str = "", none: str = "—", inf: str = "never") -> str:
    """``format(x, spec)``, with "—" for None or nan and "never" for infinity."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return none
    if isinstance(x, float) and math.isinf(x):
        return inf
    return format(x, spec)


# -- censoring and thresholds --------------------------------------------------------------------


def never(x: float | int | None) -> float:
    """A run that never reached the threshold (None) ranks after every run that did: inf."""
    return math.inf if x is None else float(x)


def censored(values: Iterable[float | int | None]) -> np.ndarray:
    """:func:`never` over ``values``, as a float array."""
    return np.array([never(v) for v in values], float)


def first_reach(points: Iterable[Sequence[Any]], threshold: float, *, strict: bool) -> Any | None:
    """The x of the first ``(x, y)`` with ``y > threshold`` (``strict``, the rule of a run's
    ``eval_threshold``) or ``y >= threshold``; None when no point reaches it; points whose y is
    None are skipped. Callers name the rule: a success rate of exactly 0.9 is common, so the
    two rules give different answers there."""
    for x, y, *_ in points:
        if y is not None and (y > threshold if strict else y >= threshold):
            return x
    return None


def eval_points(evals: Iterable[dict], key: str = "return", x: str = "env_steps") -> list[tuple]:
    """``summary.json``'s eval list as ``(x, value)`` points: ``x`` is ``env_steps`` or
    ``wall_s``, ``key`` is ``return`` or ``success``."""
    return [(e[x], e.get(key)) for e in evals]


def to_threshold(
    evals: list[dict], threshold: float, key: str = "return", *, strict: bool
) -> tuple[Any, Any]:
    """``(env steps, seconds)`` at the first eval above ``threshold`` (``strict``) or at or
    above it; ``(None, None)`` when no eval reached it."""
    hit = next(
        (e for e in evals if e.get(key) is not None and reached(e[key], threshold, strict)), None
    )
    return (None, None) if hit is None else (hit["env_steps"], hit["wall_s"])


def reached(value: float, threshold: float, strict: bool) -> bool:
    return value > threshold if strict else value >= threshold


def solved(values: Iterable[float | int | None]) -> int:
    """How many of ``values`` (steps or seconds to a threshold) are not None or infinite."""
    return sum(v is not None and math.isfinite(v) for v in values)


# -- point statistics ----------------------------------------------------------------------------


def median(x: Iterable[float]) -> float:
    """The median; infinite where at least half the values are (of an even count, the mean of
    the two middle ones, infinite when the upper one is)."""
    return float(np.median(np.asarray(list(x) if not isinstance(x, np.ndarray) else x, float)))


def iqm(x: Iterable[float]) -> float:
    """Interquartile mean (Agarwal et al., 2021): the mean of the middle half after sorting, a
    quarter cut from each end (``floor(n / 4)`` values, as ``scipy.stats.trim_mean(x, 0.25)``);
    infinite where an unsolved (infinite) value is in the middle half."""
    x = np.sort(np.asarray(list(x) if not isinstance(x, np.ndarray) else x, float))
    n = len(x)
    lo, hi = int(math.floor(n * 0.25)), int(math.ceil(n * 0.75))
    mid = x[lo:hi] if hi > lo else x
    return float(np.mean(mid))


def mean_sd(x: Sequence[float], spec: str = ".1f") -> str:
    """``mean ± sd`` (the sample standard deviation; 0 for one value)."""
    a = np.asarray(x, float)
    sd = float(np.std(a, ddof=1)) if len(a) > 1 else 0.0
    return f"{float(np.mean(a)):{spec}} ± {sd:{spec}}"


def ratio_of_medians(a: np.ndarray, b: np.ndarray, unsolved: str = "drop") -> float:
    """``median(a) / median(b)``. Where a median is infinite (at least half the seeds never
    reached the threshold), ``unsolved`` says what the ratio is:

    * ``"drop"``: nan (undefined), so a bootstrap leaves such resamples out;
    * ``"rank"``: an unsolved side is the slower one: 0 where only ``b``'s median is
      infinite, inf where only ``a``'s is, nan where both are.
    """
    ma, mb = float(np.median(a)), float(np.median(b))
    if unsolved == "rank":
        if math.isinf(mb):
            return 0.0 if not math.isinf(ma) else math.nan
        return ma / mb
    if unsolved != "drop":
        raise ValueError(f"unsolved={unsolved!r}: expected 'drop' or 'rank'")
    if not (math.isfinite(ma) and math.isfinite(mb)) or mb <= 0:
        return math.nan
    return ma / mb


# -- intervals -----------------------------------------------------------------------------------


def generator(rng: int | np.random.Generator) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def bootstrap(
    statistic: Callable[..., float],
    *samples: Sequence[float],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    rng: int | np.random.Generator = 0,
) -> Interval:
    """``statistic(*samples)`` and its percentile bootstrap interval over seeds.

    Each of ``resamples`` resamples draws n seeds with replacement (the same seeds from every
    sample: paired) and computes the statistic on them; resamples where it is nan (undefined)
    are left out, infinite ones kept. ``rng`` is a seed or a Generator (a Generator is advanced,
    so several intervals drawn from one stay reproducible in order).
    """
    arrays = [np.asarray(s, float) for s in samples]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"paired samples need equal lengths, got {[len(a) for a in arrays]}")
    if n == 0:
        raise ValueError("no values to bootstrap")
    idx = generator(rng).integers(0, n, (resamples, n))
    values = np.array([statistic(*(a[i] for a in arrays)) for i in idx], float)
    point = float(statistic(*arrays))
    kept = values[~np.isnan(values)]
    if not kept.size:
        return Interval(point, math.nan, math.nan)
    tail = 100 * (1 - confidence) / 2
    with np.errstate(invalid="ignore"):  # between two infinite resamples: inf - inf
        bounds = np.percentile(kept, [tail, 100 - tail])
    # A bound between two infinite resamples is that infinity ("never": more than the tail's
    # share of resamples never reached the threshold), not undefined.
    nearest = np.percentile(kept, [tail, 100 - tail], method="nearest")
    lo, hi = np.where(np.isnan(bounds), nearest, bounds)
    return Interval(point, float(lo), float(hi))


def median_band(
    curves: np.ndarray,
    resamples: int = 2_000,
    confidence: float = CONFIDENCE,
    rng: int | np.random.Generator = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The median over seeds at each point of ``curves`` (seeds x points) and its percentile
    bootstrap interval: ``(median, lo, hi)``. A resample draws whole seeds, the same at every
    point, so the band is that of curves, not of independent points."""
    curves = np.asarray(curves, float)
    n = len(curves)
    if n == 0:
        raise ValueError("no curves to bootstrap")
    gen = generator(rng)
    # In chunks: a resample holds seeds x points values, all of them ~10^7 at once otherwise.
    step = max(1, 2_000_000 // curves.size)
    medians = np.concatenate(
        [
            np.median(curves[gen.integers(0, n, (min(step, resamples - i), n))], axis=1)
            for i in range(0, resamples, step)
        ]
    )
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(medians, [tail, 100 - tail], axis=0)
    return np.median(curves, axis=0), lo, hi


def median_ci(x: Sequence[float], **kw: Any) -> Interval:
    """The median with its bootstrap interval."""
    return bootstrap(lambda a: float(np.median(a)), x, **kw)


def iqm_ci(x: Sequence[float], **kw: Any) -> Interval:
    """The interquartile mean with its bootstrap interval."""
    return bootstrap(iqm, x, **kw)


def ratio_ci(a: Sequence[float], b: Sequence[float], unsolved: str = "drop", **kw: Any) -> Interval:
    """``median(a) / median(b)`` with a paired bootstrap interval over seeds (``a[i]`` and
    ``b[i]`` are the same seed); ``unsolved`` as in :func:`ratio_of_medians`."""
    return bootstrap(lambda x, y: ratio_of_medians(x, y, unsolved), a, b, **kw)


# -- rliable: finite values (returns) ------------------------------------------------------------


def seed_intervals(
    values: Sequence[float],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    rng: int = 0,
) -> dict[str, Interval]:
    """``{"median": ..., "iqm": ...}`` of one score per seed, with rliable's percentile
    bootstrap intervals over seeds (``get_interval_estimates``, one task).

    The median is ``np.median`` of the seeds: rliable's ``aggregate_median`` is the median over
    tasks of each task's mean over runs, which for one task is the mean. No value may be
    infinite or nan (rliable's interval turns nan): steps to a threshold go through
    :func:`median_ci` instead. No values: both are nan ("—")."""
    x = np.asarray(values, float)
    if not x.size:
        return {k: Interval(math.nan, math.nan, math.nan) for k in ("median", "iqm")}
    if not np.all(np.isfinite(x)):
        raise ValueError(f"rliable intervals need finite scores, got {x.tolist()}")
    library, metrics = _rliable()

    def aggregates(scores: np.ndarray) -> np.ndarray:
        return np.array([np.median(scores), metrics.aggregate_iqm(scores)])

    # rliable's StratifiedBootstrap draws its resamples from numpy's global RNG
    # (np.random.choice in update_indices), not from the random_state it is handed: unseeded,
    # the same scores and rng gave another interval on every call. Seed it for the call and
    # put the caller's state back.
    global_state = np.random.get_state()
    np.random.seed(rng)
    try:
        with warnings.catch_warnings():
            # arch (rliable's bootstrap) deprecates the RandomState rliable hands it; same draws.
            warnings.simplefilter("ignore", FutureWarning)
            points, intervals = library.get_interval_estimates(
                {"x": x.reshape(-1, 1)},  # rliable's layout: runs x tasks
                aggregates,
                reps=int(resamples),
                confidence_interval_size=confidence,
                random_state=np.random.RandomState(rng),
            )
    finally:
        np.random.set_state(global_state)
    point, (lo, hi) = points["x"], intervals["x"]
    return {
        k: Interval(float(point[i]), float(lo[i]), float(hi[i]))
        for i, k in enumerate(("median", "iqm"))
    }


def _rliable() -> tuple[Any, Any]:
    """rliable's ``library`` and ``metrics`` modules (~1.5 s to import: only when asked)."""
    try:
        from rliable import library, metrics
    except ImportError as exc:
        from wheeler2.errors import UsageError

        raise UsageError(
            f"intervals over seeds need rliable ({exc}): pip install 'wheeler2[report]' "
            "(`make setup` installs it)"
        ) from None
    return library, metrics
