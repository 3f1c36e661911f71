"""experiments/swimmer_population.py's table (issue 37): a table of partial seeds says so above
it, a ratio says over how many seeds it is paired and marks a denominator with seeds not above
0, and each target's verdict carries the ratio's interval."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from few_resamples import few_resamples

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # experiments/ is not installed: its scripts run from the root
    sys.path.insert(0, str(ROOT))

from experiments import swimmer_population as sp  # noqa: E402


def _record(arm: str, seed: int, final: float) -> dict:
    curve = [[250_000, final / 2], [500_000, final]]
    return {"arm": arm, "seed": seed, "steps": 500_000, "env_steps": 500_000, "wall_s": 60.0,
            "interrupted": False, "curve": curve, "final": final, "learner_curve": curve,
            "learner_final": final}  # fmt: skip


def test_partial_seeds_signed_ratios_and_verdicts_with_their_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    few_resamples(monkeypatch)  # the intervals' digits are not what is checked here
    records = [
        _record("td3", 0, 40.0),
        _record("td3", 1, -5.0),  # a denominator seed not above 0
        _record("erl", 0, 90.0),
        _record("erl", 1, 30.0),
        _record("erl", 2, 60.0),  # a seed td3 has not run
    ]
    body = sp.render(
        records, arms=["td3", "erl"], seeds=[0, 1, 2], steps=500_000, date="-", cores=2
    )
    assert "**Partial: not every seed has run** (seeds run: td3 2, of 3)" in body
    row = next(line for line in body.splitlines() if line.startswith("| erl |"))
    # median(90, 30) / median(40, -5) = 60 / 17.5, paired over seeds 0 and 1 only.
    assert "| 3.43x [" in row and "]†, 2 seeds |" in row
    verdict = next(line for line in body.splitlines() if line.startswith("- erl >= 2x td3"))
    assert "2 of 3 seeds, so far" in verdict and "**met** (ratio 3.43x [" in verdict

    complete = [r for r in records if r["seed"] < 2]
    body = sp.render(complete, arms=["td3", "erl"], seeds=[0, 1], steps=500_000, date="-", cores=2)
    assert "Partial" not in body and "so far" not in body
