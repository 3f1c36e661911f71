"""experiments/a3c_vs_a2c.py's run order: the two arms of each worker count alternate which runs
first from seed to seed, and the page says in which order the stored runs ran.

Rotating the six arms (a2c and a3c at 1, 2 and 4 workers) by one per seed kept a2c-w4 before
a3c-w4 on every one of seeds 0-4, so a drift in a shared machine's load within a seed's block
fell on one arm of that pair only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from few_resamples import few_resamples

from experiments import a3c_vs_a2c
from experiments.lib import arms, report, runs


def fake_run(arm: arms.Arm, task: str, seed: int, steps: int, eval_every: int, out: Path) -> dict:
    algo, workers = arm.name.split("-w")
    curve = [(eval_every * (i + 1), 100.0 * (i + 1)) for i in range(steps // eval_every)]
    return {
        "arm": algo,
        "workers": int(workers),
        "seed": seed,
        "env_steps": steps,
        "final_eval": curve[-1][1],
        "best_eval": curve[-1][1],
        "wall_s": 1.0,
        "run_wall_s": 1.0,
        "curve": curve,
        "curve_s": [float(i + 1) for i in range(len(curve))],
        "members": ["worker"],
    }


def test_each_worker_counts_two_arms_alternate_which_runs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(a3c_vs_a2c, "RESULTS", tmp_path)
    monkeypatch.setattr(a3c_vs_a2c, "run_arm", fake_run)
    few_resamples(monkeypatch)  # the page's intervals are not what is checked here
    seeds = ["0", "1", "2", "3", "4"]
    a3c_vs_a2c.main(["--steps", "3000", "--eval-every", "1000", "--seeds", *seeds])
    capsys.readouterr()
    stored: list[dict[str, Any]] = runs.load(tmp_path / "a3c_vs_a2c_runs.jsonl")
    assert len(stored) == 3 * 2 * 5
    for workers in (1, 2, 4):
        firsts = []
        for seed in range(5):
            at = [i for i, r in enumerate(stored) if r["seed"] == seed and r["workers"] == workers]
            assert at[1] == at[0] + 1  # the pair runs back to back
            firsts.append(stored[at[0]]["arm"])
        assert firsts == ["a2c", "a3c", "a2c", "a3c", "a2c"], (workers, firsts)
    page = report.body_of(tmp_path / "a3c_vs_a2c.md")
    assert (
        "a2c was stored before a3c on 3 of 5 seeds with 1, 3 of 5 seeds with 2, 3 of 5 seeds "
        "with 4 workers" in page
    )


def test_mirror_alternates_every_pair_and_rotate_does_not_with_more_than_two_arms() -> None:
    names = ["a", "b", "c", "d", "e", "f"]

    def first_of_pair(order: list[tuple[int, str]], pair: tuple[str, str]) -> list[str]:
        return [next(a for s, a in order if s == seed and a in pair) for seed in range(5)]

    rotated = arms.interleave(range(5), names, rotate=True)
    assert first_of_pair(rotated, ("e", "f")) == ["e"] * 5  # what the sweep did before
    mirrored = arms.interleave(range(5), names, mirror=True)
    for pair in (("a", "b"), ("c", "d"), ("e", "f")):
        assert first_of_pair(mirrored, pair) == [pair[0], pair[1]] * 2 + [pair[0]]
    # With two arms, mirroring is rotating (compare_sb3's order is unchanged).
    assert arms.interleave(range(4), ["w", "s"], mirror=True) == arms.interleave(
        range(4), ["w", "s"], rotate=True
    )
    with pytest.raises(ValueError, match="not both"):
        arms.interleave(range(2), names, rotate=True, mirror=True)


def test_a_sweep_at_another_budget_stops_before_it_touches_the_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(a3c_vs_a2c, "RESULTS", tmp_path)
    monkeypatch.setattr(a3c_vs_a2c, "run_arm", fake_run)
    jsonl = tmp_path / "a3c_vs_a2c_runs.jsonl"
    stored = fake_run(arms.Arm("a2c-w1"), "cartpole", 3, 30_000, 10_000, tmp_path)
    runs.append(jsonl, stored)
    before = jsonl.read_text()
    with pytest.raises(SystemExit, match=r"seeds \[3\] run at another budget than 3,000"):
        a3c_vs_a2c.main(["--steps", "3000", "--eval-every", "1000", "--seeds", "0"])
    assert jsonl.read_text() == before
