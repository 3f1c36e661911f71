"""Learning curves from run directories: eval return vs env steps and vs wall-clock time.

Reads ``summary.json`` (its ``eval`` list), or the eval rows of ``metrics.csv`` for a run still
going, so it works on finished, interrupted, running and copied runs alike and never needs the
code that produced them. One line per run (:func:`plot_runs`),
or per config a median over seeds with an interval band (:func:`plot_bands`, what
``wheeler2 report`` draws; :func:`draw_band` is the one place a band is drawn).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402

from wheeler2.log import METRICS_FILE, read_summary  # noqa: E402

CURVE_FILE = "curve.png"
_X_LABELS = {"env_steps": "environment steps", "wall_s": "wall-clock seconds"}


def _eval_points(run_dir: Path) -> list[dict]:
    """The run's evals from summary.json, or from metrics.csv where that goes further: a run
    still going has no summary yet (or a resumed one, the last session's)."""
    try:
        evals = read_summary(run_dir).get("eval") or []
    except FileNotFoundError:
        evals = None
    live = _metrics_evals(run_dir / METRICS_FILE)
    if evals is None and live is None:
        raise FileNotFoundError(
            f"{run_dir}: no summary.json or metrics.csv (is this a run directory?)"
        )
    done = [e for e in evals or [] if e.get("return") is not None]
    if live and (not done or live[-1]["env_steps"] > done[-1]["env_steps"]):
        return live
    return done


def _metrics_evals(path: Path) -> list[dict] | None:
    """The eval returns a run has written to metrics.csv so far; None without the file."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if r["member"] == "eval" and r["key"] == "return"]
    except FileNotFoundError:
        return None
    keys = ("env_steps", "wall_s", "return")
    return [
        dict(zip(keys, (int(r["env_steps"]), float(r["wall_s"]), float(r["value"])))) for r in rows
    ]


def plot_runs(
    run_dirs: Sequence[str | Path],
    out_png: str | Path,
    x: str = "env_steps",
    threshold: float | None = None,
) -> Path:
    """Eval return of each run (one line each, labelled by its directory name) in two panels:
    against ``x`` and against the other axis, env steps or wall-clock."""
    fig, axes, axes_keys = _two_panels(x)
    try:
        for run_dir in map(Path, run_dirs):
            points = _eval_points(run_dir)
            returns = [p["return"] for p in points]
            for ax, key in zip(axes, axes_keys):
                ax.plot([p[key] for p in points], returns, marker=".", label=run_dir.name)
        return _finish(fig, axes, axes_keys, out_png, threshold)
    finally:
        plt.close(fig)


BAND_TEXT = "line: median over seeds; band: {:.0%} bootstrap interval of the median"


def plot_bands(
    configs: Mapping[str, Sequence[Sequence[dict]]],
    out_png: str | Path,
    threshold: float | None = None,
    resamples: int = 2_000,
    confidence: float = 0.95,
) -> Path:
    """Per config (label -> each seed's ``eval`` list), the median eval return over its seeds
    and the bootstrap interval of that median as a band, against env steps and wall-clock,
    every config in the same two panels. Seeds are compared at the same x (see
    :func:`seed_grid`)."""
    from wheeler2.stats import median_band

    fig, axes, axes_keys = _two_panels("env_steps")
    try:
        for i, (label, runs) in enumerate(configs.items()):
            colour = f"C{i % 10}"
            for ax, key in zip(axes, axes_keys):
                curves = [
                    [(e[key], e["return"]) for e in evals if e.get("return") is not None]
                    for evals in runs
                ]
                grid, values = seed_grid([c for c in curves if c])
                if not len(grid):
                    continue
                mid, lo, hi = median_band(values, resamples, confidence)
                draw_band(
                    ax, grid, mid, lo, hi, label=f"{label} ({len(values)} seeds)", colour=colour
                )
        fig.suptitle(BAND_TEXT.format(confidence), fontsize="small")
        return _finish(fig, axes, axes_keys, out_png, threshold)
    finally:
        plt.close(fig)


def seed_grid(
    curves: Sequence[Sequence[tuple[float, float]]],
) -> tuple[np.ndarray, np.ndarray]:
    """Seeds' ``(x, y)`` curves on one grid: every x of any seed from the last of their first
    evals (where every seed has a value) to the last eval of any, each seed's y linearly
    interpolated between its evals and held at its last one after it (a run that ended sooner
    keeps its final return: what matters on the wall-clock axis). Returns ``(grid, seeds x
    grid values)``; both empty without curves."""
    if not curves:
        return np.empty(0), np.empty((0, 0))
    xs = [np.array([p[0] for p in c], float) for c in curves]
    ys = [np.array([p[1] for p in c], float) for c in curves]
    grid = np.unique(np.concatenate(xs))
    grid = grid[grid >= max(x[0] for x in xs)]
    return grid, np.array([np.interp(grid, x, y) for x, y in zip(xs, ys)])


def draw_band(
    ax: Any,
    x: np.ndarray,
    line: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    label: str,
    colour: str | None = None,
) -> None:
    """A line with a shaded band from ``lo`` to ``hi`` around it (a single point: a marker
    with an error bar)."""
    if len(x) == 1:
        ax.errorbar(
            x,
            line,
            yerr=[[line[0] - lo[0]], [hi[0] - line[0]]],
            fmt="o",
            color=colour,
            capsize=3,
            label=label,
        )
        return
    (drawn,) = ax.plot(x, line, color=colour, label=label)
    ax.fill_between(x, lo, hi, color=drawn.get_color(), alpha=0.2, linewidth=0)


def _two_panels(x: str) -> tuple[Any, Any, list[str]]:
    if x not in _X_LABELS:
        raise ValueError(f"x must be one of {sorted(_X_LABELS)}, got {x!r}")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    return fig, axes, [x, *(k for k in _X_LABELS if k != x)]


def _finish(
    fig: Any, axes: Any, axes_keys: list[str], out_png: str | Path, threshold: float | None
) -> Path:
    for ax, key in zip(axes, axes_keys):
        if threshold is not None:
            ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label="threshold")
        ax.set_xlabel(_X_LABELS[key])
        ax.set_ylabel("eval return (mean)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    return out_png


def write_curve(run_dir: str | Path, threshold: float | None = None) -> Path:
    """``run_dir/curve.png`` for one run."""
    return plot_runs([run_dir], Path(run_dir) / CURVE_FILE, threshold=threshold)
