"""``wheeler2 report``: statistics over seeds from run directories written by hand, checked
against figures worked out by hand; a failed seed counts as unsolved, never dropped."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from wheeler2 import cli, plot, report, stats
from wheeler2.sweep import settings

RESAMPLES = 2_000
# For the tests of what a report holds and how it groups, not of its intervals' digits: at the
# default 10,000 resamples each rliable interval takes seconds.
FEW_RESAMPLES = 200
FEW = ["--resamples", str(FEW_RESAMPLES)]

# Five seeds of one config (threshold 100: the first eval *above* it), seed 4 failed:
#   seed  evals (env_steps: return)     final  best  steps to > 100
#   0     100: 50,  200: 120            120    120   200
#   1     100: 110, 200: 90             90     110   100
#   2     100: 10,  200: 20             20     20    never
#   3     100: 150, 200: 160            160    160   100
#   4     failed                        -      -     never (failed)
SWEEP = {
    0: [50.0, 120.0],
    1: [110.0, 90.0],
    2: [10.0, 20.0],
    3: [150.0, 160.0],
}


def evals(returns: list[float], wall0: float = 1.0) -> list[dict]:
    return [
        {"env_steps": 100 * (i + 1), "wall_s": wall0 + 10.0 * i, "return": r, "success": None}
        for i, r in enumerate(returns)
    ]


def summary(name: str, returns: list[float], threshold: float | None, wall0: float = 1.0) -> dict:
    return {
        "name": name,
        "env_steps": 100 * len(returns),
        "eval_threshold": threshold,
        "interrupted": False,
        "eval": evals(returns, wall0),
        "final_eval_return": returns[-1],
        "best_eval_return": max(returns),
        "members": {"target": {"ended": "finished"}},
    }


def config(name: str, seed: int, gamma: float) -> dict:
    """The tables of a run's config.toml that matter here."""
    return {
        "experiment": {"name": name, "seed": seed, "out": "runs", "eval_threshold": 100.0},
        "team": [{"name": "target", "params": {"gamma": gamma}}],
    }


def write_sweep(root: Path) -> Path:
    sweep = root / "pend-sweep-1"
    seeds = []
    for seed in range(5):
        run_dir = sweep / f"seed-{seed}"
        run_dir.mkdir(parents=True)
        failed = seed not in SWEEP
        if not failed:
            data = summary("pend", SWEEP[seed], 100.0, wall0=1.0 + seed)
            (run_dir / "summary.json").write_text(json.dumps(data))
        seeds.append(
            {
                "seed": seed,
                "run_dir": f"seed-{seed}",
                "status": "failed" if failed else "finished",
                "started": True,
                "error": "RuntimeError: boom" if failed else None,
                "wall_s": 1.0,
            }
        )
    meta = {
        "name": "pend",
        "config_hash": "aaaa",
        "config": settings(config("pend", 0, 0.95)),  # as a sweep writes it: no seed
        "eval_threshold": 100.0,
        "seeds": seeds,
    }
    (sweep / "sweep.json").write_text(json.dumps(meta))
    return sweep


def write_run(root: Path, name: str, seed: int, gamma: float, returns: list[float]) -> Path:
    """A run directory outside any sweep, with the config.toml a run writes."""
    run_dir = root / f"{name}-g{gamma}-s{seed}"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.toml").write_text(tomli_w.dumps(config(name, seed, gamma)))
    (run_dir / "summary.json").write_text(json.dumps(summary(name, returns, 100.0)))
    return run_dir


def test_figures_by_hand_with_a_failed_seed_counted_as_unsolved(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path)
    made = report.write_report([sweep], resamples=RESAMPLES)
    assert [p.name for p in made.files] == ["report.md", "report.json", "report.png"]
    assert all(p.parent == sweep and p.stat().st_size > 0 for p in made.files)
    (config,) = json.loads((sweep / "report.json").read_text())["configs"]
    assert config["label"] == "pend" and config["config_hash"] == "aaaa"
    assert config["seeds"] == {"finished": 4, "failed": 1}
    # Returns over the four finished seeds: finals 20, 90, 120, 160.
    final, best = config["final_return"], config["best_return"]
    assert final["median"]["point"] == 105.0  # (90 + 120) / 2
    assert final["iqm"]["point"] == 105.0  # the middle half: 90 and 120
    assert best["median"]["point"] == 115.0  # bests 20, 110, 120, 160
    assert best["iqm"]["point"] == 115.0
    for figure in (final["median"], final["iqm"], best["median"], best["iqm"]):
        assert figure["lo"] <= figure["point"] <= figure["hi"]
    assert final["median"]["lo"] >= 20.0 and final["median"]["hi"] <= 160.0
    # To threshold over all five seeds, the failed one never: 100, 100, 200, never, never.
    assert config["solved"] == 3 and config["counted"] == 5
    steps = config["steps_to_threshold"]
    assert steps["point"] == 200.0  # dropping the failed seed would give 150
    assert steps["lo"] == 100.0 and steps["hi"] == "inf"  # resamples with 3+ unsolved: never
    wall = config["wall_s_to_threshold"]  # seeds 0, 1, 3 got there at 11.0, 2.0, 4.0 s
    assert wall["point"] == 11.0 and wall["hi"] == "inf"
    failed = [r for r in config["runs"] if r["status"] == "failed"]
    assert failed == [
        {
            "seed": 4,
            "status": "failed",
            "error": "RuntimeError: boom",
            "run_dir": str(sweep / "seed-4"),
            "final_return": None,
            "best_return": None,
            "steps_to_threshold": "inf",
            "wall_s_to_threshold": "inf",
        }
    ]
    md = (sweep / "report.md").read_text()
    assert "| pend | 4 finished, 1 failed | 105.00 [" in md
    assert "| pend | > 100 | 3 of 5 | 200 [100, never] |" in md
    assert "| 4 | failed: RuntimeError: boom | — | — | never | never |" in md


def test_rliable_intervals_match_the_own_bootstrap_on_finite_values() -> None:
    x = [20.0, 90.0, 120.0, 160.0, 75.0, 130.0]
    ours = stats.median_ci(x, resamples=5_000, rng=0)
    theirs = stats.seed_intervals(x, resamples=5_000)["median"]
    assert theirs.point == ours.point == float(np.median(x))
    # Two percentile bootstraps of the same values: the same interval up to resampling noise.
    assert theirs.lo == pytest.approx(ours.lo, abs=15.0)
    assert theirs.hi == pytest.approx(ours.hi, abs=15.0)
    assert stats.seed_intervals(x, resamples=500)["iqm"].point == stats.iqm(x)
    with pytest.raises(ValueError, match="finite"):
        stats.seed_intervals([1.0, math.inf])


def test_configs_grouped_by_hash_and_drawn_in_one_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_sweep(tmp_path / "sweeps")
    for seed in range(3):
        write_run(tmp_path / "single", "pend", seed, 0.99, [120.0 + seed, 130.0])
        write_run(tmp_path / "single", "pend", seed, 0.9, [10.0, 20.0 + seed])
    drawn: list[str] = []
    real = plot.draw_band

    def spy(ax, x, line, lo, hi, label, colour=None):  # noqa: ANN001, ANN202
        drawn.append(label)
        assert np.all(lo <= line) and np.all(line <= hi)
        real(ax, x, line, lo, hi, label, colour)

    monkeypatch.setattr(plot, "draw_band", spy)
    out = tmp_path / "out"
    code = cli.main(["report", str(tmp_path), "-o", str(out), *FEW])
    assert code == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    # Three configs named pend (the sweep's and two others), told apart by the key that differs.
    by_label = {c["label"]: c for c in data["configs"]}
    gamma = "pend (team.target.params.gamma={})"
    assert set(by_label) == {gamma.format(g) for g in (0.95, 0.99, 0.9)}
    assert by_label[gamma.format(0.95)]["seeds"] == {"finished": 4, "failed": 1}
    assert by_label[gamma.format(0.99)]["seeds"] == {"finished": 3}
    assert by_label[gamma.format(0.99)]["solved"] == 3
    assert by_label[gamma.format(0.9)]["solved"] == 0  # never above 100
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(drawn) == 6  # three configs, two panels each
    assert "wrote " in printed and "## To threshold" in printed

    sweeps = str(tmp_path / "sweeps")
    assert cli.main(["report", sweeps, "--by", "sweep", "-o", str(out), *FEW]) == 0
    (only,) = json.loads((out / "report.json").read_text())["configs"]
    assert only["label"] == "pend-sweep-1"


def test_seed_grid_holds_a_finished_run_at_its_last_eval() -> None:
    grid, values = plot.seed_grid([[(1.0, 0.0), (3.0, 2.0)], [(2.0, 10.0), (6.0, 50.0)]])
    assert grid.tolist() == [2.0, 3.0, 6.0]  # from the last first eval on
    assert values.tolist() == [[1.0, 2.0, 2.0], [10.0, 20.0, 50.0]]
    mid, lo, hi = stats.median_band(values, resamples=500)
    assert mid.tolist() == [5.5, 11.0, 26.0]
    assert np.all(lo <= mid) and np.all(mid <= hi)


def test_report_of_nothing_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'missing'}: no such directory\n"
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no runs in" in capsys.readouterr().err


def _plain_run_dir(root: Path, name: str, returns: list, threshold: float | None) -> Path:
    """A run directory with only its summary (no config.toml): grouped by name alone."""
    run_dir = root / f"{name}-{len(list(root.glob('*'))) if root.exists() else 0}"
    run_dir.mkdir(parents=True)
    data = summary(name, [0.0] * len(returns), threshold)
    for e, r in zip(data["eval"], returns, strict=True):
        e["return"] = r  # summary.json writes a NaN eval as null
    (run_dir / "summary.json").write_text(json.dumps(data))
    return run_dir


def test_runs_grouped_together_with_different_thresholds_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Judging both against the first one's would call a seed solved that its own threshold
    says is not: the report asks for --threshold instead."""
    _plain_run_dir(tmp_path, "cp", [150.0], 100.0)
    _plain_run_dir(tmp_path, "cp", [150.0], 200.0)
    assert cli.main(["report", str(tmp_path), *FEW]) == 2
    err = capsys.readouterr().err
    assert "different eval_threshold (100, 200)" in err and "--threshold" in err, err
    assert cli.main(["report", str(tmp_path), "--threshold", "120", *FEW]) == 0
    (only,) = json.loads((tmp_path / "report.json").read_text())["configs"]
    assert only["solved"] == 2 and only["threshold"] == 120


@pytest.mark.parametrize("value", ["nan", "inf", "abc"])
def test_a_threshold_that_is_no_finite_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, value: str
) -> None:
    _plain_run_dir(tmp_path, "cp", [150.0], 100.0)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", str(tmp_path), "--threshold", value, *FEW])
    assert exit_.value.code == 2
    assert "--threshold: expected a" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


def test_a_run_with_a_non_finite_eval_counts_as_failed(tmp_path: Path) -> None:
    _plain_run_dir(tmp_path, "cp", [150.0, 160.0], 100.0)
    _plain_run_dir(tmp_path, "cp", [None, 50.0], 100.0)
    report.write_report([tmp_path], resamples=200)
    (only,) = json.loads((tmp_path / "report.json").read_text())["configs"]
    assert only["seeds"] == {"finished": 1, "failed": 1}
    assert only["solved"] == 1 and only["counted"] == 2
    (failed,) = [r for r in only["runs"] if r["status"] == "failed"]
    assert "not finite" in failed["error"]


def test_a_seed_run_again_counts_once_the_run_that_ended_last(tmp_path: Path) -> None:
    """The same sweep run twice: each seed counts once (pooling would count five seeds as ten
    and narrow every interval), the later runs' figures, and the report says so."""
    import os

    first = write_sweep(tmp_path / "monday")
    second = write_sweep(tmp_path / "tuesday")
    for seed in SWEEP:  # the second sweep's seeds ended later, each 10 higher
        path = second / f"seed-{seed}" / "summary.json"
        data = json.loads(path.read_text())
        data["eval"] = evals([r + 10.0 for r in SWEEP[seed]], 1.0 + seed)
        path.write_text(json.dumps(data))
        later = (first / f"seed-{seed}" / "summary.json").stat().st_mtime + 60
        os.utime(path, (later, later))
    made = report.write_report([tmp_path], output=tmp_path / "out", resamples=FEW_RESAMPLES)
    (config,) = json.loads((tmp_path / "out" / "report.json").read_text())["configs"]
    assert config["counted"] == 5 and config["seeds"] == {"finished": 4, "failed": 1}
    assert config["final_return"]["median"]["point"] == 115.0  # (100 + 130) / 2
    assert config["repeated"] == {str(s): 2 for s in range(5)}
    assert "Seeds run more than once, the run that ended last counted: 0 (2 runs)" in made.markdown


def test_a_sweep_seed_resumed_to_its_end_counts_as_finished(tmp_path: Path) -> None:
    """sweep.json says seed 4 was interrupted; `wheeler2 resume` ran it to its end since, and
    its summary says so: the report believes the summary."""
    sweep = write_sweep(tmp_path)
    meta = json.loads((sweep / "sweep.json").read_text())
    meta["seeds"][4].update(status="interrupted", error=None)
    (sweep / "sweep.json").write_text(json.dumps(meta))
    resumed = {**summary("pend", [60.0, 140.0], 100.0), "stop": {"by": "total_steps"}}
    (sweep / "seed-4" / "summary.json").write_text(json.dumps(resumed))
    report.write_report([sweep], resamples=FEW_RESAMPLES)
    (config,) = json.loads((sweep / "report.json").read_text())["configs"]
    assert config["seeds"] == {"finished": 5} and config["solved"] == 4
    still = {**resumed, "interrupted": True, "stop": {"by": "interrupt"}}
    (sweep / "seed-4" / "summary.json").write_text(json.dumps(still))
    report.write_report([sweep], resamples=FEW_RESAMPLES)
    (config,) = json.loads((sweep / "report.json").read_text())["configs"]
    assert config["seeds"] == {"finished": 4, "interrupted": 1}


def test_a_run_that_failed_in_start_up_or_a_callback_counts_as_failed(tmp_path: Path) -> None:
    """Such a run's summary names no failed member (start-up: none had started) and says
    interrupted; its stop says it failed, and so does the report, not "interrupted"."""
    reasons = {
        "failure": "start-up failed: RuntimeError: no such env",
        "callback_error": "ValueError: a callback raised",
    }
    for by, reason in reasons.items():
        run_dir = _plain_run_dir(tmp_path, "cp", [150.0], 100.0)
        data = json.loads((run_dir / "summary.json").read_text())
        data.update(interrupted=True, stop={"by": by, "reason": reason}, members={})
        (run_dir / "summary.json").write_text(json.dumps(data))
    _plain_run_dir(tmp_path, "cp", [150.0], 100.0)
    report.write_report([tmp_path], resamples=200)
    (only,) = json.loads((tmp_path / "report.json").read_text())["configs"]
    assert only["seeds"] == {"finished": 1, "failed": 2}
    assert sorted(r["error"] for r in only["runs"] if r["status"] == "failed") == sorted(
        reasons.values()
    )
    assert only["solved"] == 1 and only["counted"] == 3


def test_a_seed_that_never_began_in_one_sweep_and_ran_in_another_ran_once(
    tmp_path: Path,
) -> None:
    """Monday's sweep was stopped before seed 2 began; Tuesday's ran it. Seed 2 counts by
    Tuesday's run and is not named as run twice: its not-run entry is no run."""
    first = write_sweep(tmp_path / "monday")
    meta = json.loads((first / "sweep.json").read_text())
    meta["seeds"][2].update(status="interrupted", started=False, error=None)
    (first / "sweep.json").write_text(json.dumps(meta))
    (first / "seed-2" / "summary.json").unlink()
    write_sweep(tmp_path / "tuesday")
    kept, repeated = report.latest_per_seed(report.find_runs([tmp_path]))
    assert repeated == {0: 2, 1: 2, 3: 2, 4: 2}
    (seed_2,) = [r for r in kept if r.seed == 2]
    assert seed_2.status == "finished" and seed_2.sweep == tmp_path / "tuesday" / "pend-sweep-1"
