"""Learning curves from run directories: eval return vs env steps and vs wall-clock time.

Reads only ``summary.json`` (its ``eval`` list), so it works on finished, interrupted and copied
runs alike and never needs the code that produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402

from wheeler2.log import read_summary  # noqa: E402

CURVE_FILE = "curve.png"
_X_LABELS = {"env_steps": "environment steps", "wall_s": "wall-clock seconds"}


def _eval_points(run_dir: Path) -> list[dict]:
    try:
        evals = read_summary(run_dir).get("eval") or []
    except FileNotFoundError:
        raise FileNotFoundError(f"{run_dir}: no summary.json (is this a run directory?)") from None
    return [e for e in evals if e.get("return") is not None]


def plot_runs(
    run_dirs: Sequence[str | Path],
    out_png: str | Path,
    x: str = "env_steps",
    threshold: float | None = None,
) -> Path:
    """Eval return of each run (one line each, labelled by its directory name) in two panels:
    against ``x`` and against the other axis, env steps or wall-clock."""
    if x not in _X_LABELS:
        raise ValueError(f"x must be one of {sorted(_X_LABELS)}, got {x!r}")
    axes_keys = [x, *(k for k in _X_LABELS if k != x)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    try:
        for run_dir in map(Path, run_dirs):
            points = _eval_points(run_dir)
            returns = [p["return"] for p in points]
            for ax, key in zip(axes, axes_keys):
                ax.plot([p[key] for p in points], returns, marker=".", label=run_dir.name)
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
    finally:
        plt.close(fig)
    return out_png


def write_curve(run_dir: str | Path, threshold: float | None = None) -> Path:
    """``run_dir/curve.png`` for one run."""
    return plot_runs([run_dir], Path(run_dir) / CURVE_FILE, threshold=threshold)
