"""experiments/'s shared library: statistics, stored runs, reports and their regeneration, and
the scripts' hygiene (no ``sys.path`` edits; every script imports and answers ``--help``)."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from few_resamples import few_resamples

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # experiments/ is not installed: its scripts run from the root
    sys.path.insert(0, str(ROOT))

from experiments.lib import RESULTS, arms, report, runs, stats  # noqa: E402

EXPERIMENTS = ROOT / "experiments"
SCRIPTS = sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.stem != "__init__")


# -- statistics --------------------------------------------------------------------------------


def test_bootstrap_of_two_values_by_hand() -> None:
    # Resamples of [0, 1]: (0, 0) with p 1/4, mean 0; (0, 1) or (1, 0) with p 1/2, mean 0.5;
    # (1, 1) with p 1/4, mean 1. So the 2.5th and 97.5th percentiles are 0 and 1.
    ci = stats.bootstrap(np.mean, [0.0, 1.0], resamples=4_000, rng=1)
    assert ci == (0.5, 0.0, 1.0)
    ci = stats.bootstrap(np.mean, [0.0, 1.0], confidence=0.4, resamples=4_000, rng=1)
    assert ci == (0.5, 0.5, 0.5)  # the middle 40% of that distribution is all 0.5
    assert stats.median_ci([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)


def test_bootstrap_mean_interval_matches_the_normal_one() -> None:
    # For the mean of n = 400 normal draws the percentile interval is mean +- 1.96 s / sqrt(n),
    # up to the bootstrap's own noise (about 3% of the half-width at 10,000 resamples).
    x = np.random.default_rng(0).normal(2.0, 3.0, 400)
    point, lo, hi = stats.bootstrap(np.mean, x, rng=0)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert point == pytest.approx(x.mean())
    assert lo == pytest.approx(x.mean() - half, abs=0.06 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.06 * half)


def test_bootstrap_is_paired_and_reproducible() -> None:
    a = [10.0, 20.0, 30.0, 40.0, 50.0]
    # Paired: every resample draws the same seeds from both, so a ratio of equal samples is 1.
    assert stats.ratio_ci(a, a, resamples=500) == (1.0, 1.0, 1.0)
    assert stats.ratio_ci(a, [x / 2 for x in a], resamples=500) == (2.0, 2.0, 2.0)
    once = stats.ratio_ci(a, a[::-1], resamples=500, rng=3)
    assert once == stats.ratio_ci(a, a[::-1], resamples=500, rng=3)
    # A Generator is advanced, so intervals drawn from one in turn reproduce in that order.
    b = [12.0, 18.0, 33.0, 41.0, 47.0]
    draws = []
    for _ in range(2):
        gen = np.random.default_rng(3)
        draws.append([stats.ratio_ci(a, b, resamples=500, confidence=0.5, rng=gen) for _ in "12"])
    assert draws[0] == draws[1] and draws[0][0] != draws[0][1]
    with pytest.raises(ValueError, match="equal lengths"):
        stats.ratio_ci(a, a[:3])


def test_bootstrap_draws_are_the_per_resample_draws_of_the_old_scripts() -> None:
    # compare_sb3 and recurrent_ppo_vs_sb3 drew rng.integers(0, n, n) once per resample; one
    # (resamples, n) draw gives the same indices, so their tables came out unchanged.
    w, s = [5.0, 7.0, 6.0, 9.0, 4.0], [6.0, 6.0, 8.0, 7.0, 5.0]
    rng = np.random.default_rng(0)
    loop = []
    for _ in range(2_000):
        i = rng.integers(0, 5, 5)
        loop.append(np.median(np.array(w)[i]) / np.median(np.array(s)[i]))
    lo, hi = np.percentile(loop, [2.5, 97.5])
    assert stats.ratio_ci(w, s, resamples=2_000)[1:] == pytest.approx((lo, hi))


def test_ratio_of_medians_with_unsolved_seeds() -> None:
    inf = math.inf
    solved, never = np.array([1.0, 2.0, 3.0]), np.array([inf, inf, inf])
    assert stats.ratio_of_medians(solved, np.array([2.0, 4.0, 6.0])) == 0.5
    assert math.isnan(stats.ratio_of_medians(solved, never))  # "drop": undefined
    assert stats.ratio_of_medians(solved, never, "rank") == 0.0  # only the baseline never
    assert stats.ratio_of_medians(never, solved, "rank") == inf
    assert math.isnan(stats.ratio_of_medians(never, never, "rank"))
    point, lo, hi = stats.ratio_ci(never, never, resamples=200)
    assert math.isnan(point) and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="unsolved"):
        stats.ratio_of_medians(solved, solved, "skip")


def test_iqm_on_known_arrays() -> None:
    from scipy.stats import trim_mean

    assert stats.iqm(range(1, 9)) == 4.5  # mean of 3, 4, 5, 6
    assert stats.iqm([5.0, 1.0, 100.0, 2.0, -50.0]) == pytest.approx((1 + 2 + 5) / 3)
    for n in (1, 2, 3, 5, 7, 10, 13):
        x = np.random.default_rng(n).normal(size=n)
        assert stats.iqm(x) == pytest.approx(trim_mean(x, 0.25))  # rliable's aggregate_iqm
    assert stats.iqm([1.0, 2.0, 3.0, math.inf]) == 2.5  # an unsolved seed in the cut quarter
    assert stats.iqm([1.0, 2.0, math.inf, math.inf]) == math.inf  # one in the middle half


def test_steps_to_threshold_and_seeds_solved_on_hand_made_curves() -> None:
    curve = [(1_000, -900.0), (2_000, -200.0), (3_000, -150.0), (4_000, -300.0)]
    assert stats.first_reach(curve, -200.0, strict=False) == 2_000
    assert stats.first_reach(curve, -200.0, strict=True) == 3_000  # "above", not "at or above"
    assert stats.first_reach(curve, 0.0, strict=False) is None
    assert (
        stats.first_reach([(1, None), (2, 0.95)], 0.9, strict=True) == 2
    )  # success None: no episodes
    evals = [
        {"env_steps": 500, "wall_s": 1.5, "return": -50.0, "success": 0.1},
        {"env_steps": 1_000, "wall_s": 3.0, "return": -20.0, "success": 0.9},
        {"env_steps": 1_500, "wall_s": 4.5, "return": -10.0, "success": 1.0},
    ]
    assert stats.to_threshold(evals, 0.9, key="success", strict=False) == (1_000, 3.0)
    assert stats.to_threshold(evals, -10.0, strict=False) == (1_500, 4.5)
    assert stats.to_threshold(evals, -10.0, strict=True) == (None, None)
    assert stats.eval_points(evals, "success") == [(500, 0.1), (1_000, 0.9), (1_500, 1.0)]
    steps = [1_000, None, 3_000, None]
    assert stats.solved(steps) == 2
    assert stats.solved([1.0, math.inf]) == 1
    assert list(stats.censored(steps)) == [1_000, math.inf, 3_000, math.inf]
    assert stats.median(stats.censored(steps)) == math.inf  # half unsolved: the median is never
    assert stats.median(stats.censored([1_000, None, 3_000])) == 3_000


def test_cells() -> None:
    assert stats.fmt(None) == stats.fmt(math.nan) == "—"
    assert stats.fmt(math.inf) == "never"
    assert stats.fmt(12_611, ",") == "12,611"
    assert stats.Interval(0.59, 0.28, 0.84).cell() == "0.59 [0.28, 0.84]"
    assert stats.Interval(1.0, math.nan, math.nan).cell() == "1.00"
    assert stats.mean_sd([1.0, 3.0]) == "2.0 ± 1.4"


# -- arms and stored runs ----------------------------------------------------------------------


def test_interleave_runs_every_arm_of_a_seed_before_the_next_seed() -> None:
    assert arms.interleave([0, 1], ["a", "b", "c"]) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c"),
    ]  # fmt: skip
    # rotate: two arms alternate which runs first (compare_sb3's order).
    assert arms.interleave([0, 1, 2], ["w", "s"], rotate=True) == [
        (0, "w"), (0, "s"), (1, "s"), (1, "w"), (2, "w"), (2, "s"),
    ]  # fmt: skip


def test_sweep_appends_each_run_as_it_finishes(tmp_path: Path) -> None:
    log = tmp_path / "x_runs.jsonl"
    seen = []

    def run(arm: str, seed: int) -> dict:
        seen.append(len(runs.load(log)))  # the earlier runs are on disk already
        return {"arm": arm, "seed": seed}

    done = arms.sweep([0, 1], ["a", "b"], run, log, describe=str)
    assert seen == [0, 1, 2, 3]
    assert runs.load(log) == done == [
        {"arm": "a", "seed": 0}, {"arm": "b", "seed": 0},
        {"arm": "a", "seed": 1}, {"arm": "b", "seed": 1},
    ]  # fmt: skip
    runs.append(log, {"arm": "a", "seed": 0, "rerun": True})
    latest = runs.latest(runs.load(log), lambda r: (r["arm"], r["seed"]))
    assert latest[("a", 0)]["rerun"] and len(latest) == 4
    assert runs.load(tmp_path / "missing_runs.jsonl") == []


def test_ctrl_c_on_a_serial_sweep_keeps_what_finished_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x_runs.jsonl"

    def run(arm: str, seed: int) -> dict:
        if seed == 1:  # a wheeler2 run closes on Ctrl-C, then raises it
            raise KeyboardInterrupt
        return {"arm": arm, "seed": seed}

    with pytest.raises(SystemExit) as stop:
        arms.sweep([0, 1, 2], ["a", "b"], run, log, describe=str)
    assert stop.value.code == 130
    assert runs.load(log) == [{"arm": "a", "seed": 0}, {"arm": "b", "seed": 0}]  # no seed 2
    out = capsys.readouterr().out
    assert f"interrupted: 2 run(s) finished and stored in {log}" in out
    assert "Traceback" not in out


def test_parse_set_reads_toml_values() -> None:
    assert arms.parse_set("team.0.params.gamma=0.95") == ("team.0.params.gamma", 0.95)
    assert arms.parse_set('env.id="Pendulum-v1"') == ("env.id", "Pendulum-v1")
    assert arms.parse_set("env.kwargs={step_ms=2.0}") == ("env.kwargs", {"step_ms": 2.0})
    assert arms.parse_set("team.target.params.hidden=[64, 64]")[1] == [64, 64]
    with pytest.raises(ValueError, match="TABLE.KEY=VALUE"):
        arms.parse_set("gamma")


# -- reports and regeneration ------------------------------------------------------------------


def test_a_generated_page_of_the_repository_links_its_note_and_a_scratch_table_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    notes = repo / "experiments" / "results" / "notes"
    notes.mkdir(parents=True)
    (notes / "zoo.md").write_text("why rows are not run\n")
    monkeypatch.setattr(report, "ROOT", repo)
    monkeypatch.setattr(report, "NOTES", notes)
    assert report.notes_link(repo / "docs" / "zoo.md") == (
        " Notes: [../experiments/results/notes/zoo.md](../experiments/results/notes/zoo.md)."
    )
    assert report.notes_link(repo / "experiments" / "results" / "zoo.md") == (
        " Notes: [notes/zoo.md](notes/zoo.md)."
    )
    assert report.notes_link(scratch / "zoo.md") == ""  # a smoke run's copy
    assert report.notes_link(repo / "docs" / "other.md") == ""  # no note of that name


def test_regenerate_a_result_file_from_its_stored_runs(tmp_path: Path) -> None:
    # compare_sb3_sac.md and its runs, copied: the table is rebuilt from the runs alone.
    for name in ("compare_sb3_sac.md", "compare_sb3_sac_runs.jsonl"):
        shutil.copy(RESULTS / name, tmp_path / name)
    md = tmp_path / "compare_sb3_sac.md"
    committed = report.body_of(md)
    meta = report.read_meta(md)
    md.write_text(md.read_text().replace("| 1.00 |", "| 9.99 |"))  # a hand edit: it goes
    report.regenerate(md, now="2030-01-01 00:00 UTC")
    assert report.body_of(md) == committed
    rebuilt = report.read_meta(md)
    assert rebuilt["rebuilt"] == "2030-01-01 00:00 UTC"
    assert {k: rebuilt[k] for k in meta if k != "rebuilt"} == {
        k: v for k, v in meta.items() if k != "rebuilt"
    }  # command, date, params, runs kept
    assert "rebuilt from them on 2030-01-01" in md.read_text()


def test_regenerate_rebuilds_a_modules_other_table_with_its_own_render(tmp_path: Path) -> None:
    # team_vs_solo writes its best-solo selection with select_render; a rebuild through
    # module.render replaced that ranking with the per-arm table under the same name.
    for name in ("team_vs_solo_pendulum_select.md", "team_vs_solo_pendulum_select_runs.jsonl"):
        shutil.copy(RESULTS / name, tmp_path / name)
    md = tmp_path / "team_vs_solo_pendulum_select.md"
    committed = report.body_of(md)
    assert report.read_meta(md)["render"] == "select_render"
    report.regenerate(md)
    assert report.body_of(md) == committed
    assert "Chosen as `best-solo`" in committed


def test_write_and_regenerate_round_trip(tmp_path: Path) -> None:
    # A small table through a real script's render (her_parity: steps to 0.9 per arm and seed).
    from experiments import her_parity

    log = tmp_path / "toy_runs.jsonl"
    for arm, seed, steps in (
        ("sb3", 0, 4_000),
        ("w2", 0, 6_000),
        ("sb3", 1, None),
        ("w2", 1, 5_000),
    ):
        runs.append(log, {"arm": arm, "seed": seed, "steps": steps, "curve": []})
    params = {"max_steps": 10_000, "eval_every": 1_000}
    md = report.write(
        tmp_path / "toy.md",
        her_parity.render(runs.load(log), **params),
        render=her_parity.render,
        params=params,
        runs_file=log,
        command="python -m experiments.her_parity --table --jsonl toy_runs.jsonl",
        date="2026-01-01 00:00 UTC",
    )
    meta = report.read_meta(md)
    assert meta["module"] == "experiments.her_parity" and meta["runs"] == "toy_runs.jsonl"
    body = report.body_of(md)
    assert "| sb3 | 4,000 | — | 7,500 | 1/2 |" in body  # unsolved: counted as 11,000
    assert "| w2 | 6,000 | 5,000 | 5,500 | 2/2 |" in body
    report.regenerate(md)
    assert report.body_of(md) == body


def test_a_sweeps_table_and_plot_come_from_its_stored_runs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # many_tasks' ending: the plot and the table from the .jsonl, regenerable to the same body.
    from experiments import many_tasks as mt

    few_resamples(monkeypatch)  # the table's interval is not what is checked here

    log = tmp_path / "m_runs.jsonl"
    for arm, seed, final in (("team", 0, -150.0), ("team", 1, -300.0), ("td3", 0, -900.0)):
        curve = [[1000, -1200.0], [2000, final]]
        runs.append(
            log,
            {"task": "pendulum", "arm": arm, "seed": seed, "steps": 2000, "threshold": -200.0,
             "curve": curve, "final": final, "learner_curve": curve, "learner_final": final,
             "wall_s": 1.0},
        )  # fmt: skip
    # One arm shown (rliable's interval takes seconds a cell); the td3 run is left out of it.
    params = {"tasks": ["pendulum"], "arms": ["team"], "seeds": [0, 1], "steps": 2000,
              "date": "2026-01-01", "cores": 2}  # fmt: skip
    md = tmp_path / "m.md"
    text = report.write_from_runs(md, log, mt.render, mt.plot, params, ["--table"])
    assert (tmp_path / "m.png").stat().st_size > 0
    assert report.read_meta(md)["plots"] == ["m.png"]
    body = report.body_of(md)
    assert body.strip() == text.strip()
    assert "not solved: -225.0" in body  # the median of -150 and -300, below -200
    assert "td3" not in body
    report.regenerate(md)
    assert report.body_of(md) == body


def test_every_result_file_is_generated_and_names_what_rebuilds_it() -> None:
    """Under results/ (notes/ aside) every markdown file carries the generated header; where it
    is rebuildable, its module has render() and its runs files are there."""
    tables = [p for p in RESULTS.rglob("*.md") if "notes" not in p.relative_to(RESULTS).parts]
    assert tables
    for path in tables:
        assert report.is_generated(path), f"{path}: hand-written? move it to results/notes/"
        try:
            meta = report.read_meta(path)
        except report.NotGenerated:
            continue  # written before its script stored runs (marked so in its header)
        module = importlib.import_module(meta["module"])
        assert callable(module.render), meta["module"]
        files = meta["runs"] if isinstance(meta["runs"], dict) else {"": meta["runs"]}
        for name in files.values():
            assert (path.parent / name).is_file(), f"{path}: runs file {name} is missing"
        for plot in meta["plots"]:
            assert callable(module.plot) and (path.parent / plot).is_file(), (path, plot)
        json.dumps(meta["params"])


def test_not_generated_files_say_so(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# A reading\n")
    with pytest.raises(report.NotGenerated, match="no regen header"):
        report.regenerate(note)
    report.mark_legacy(note, "experiments.x", "python experiments/x.py")
    assert report.is_generated(note) and report.body_of(note) == "# A reading\n"
    with pytest.raises(report.NotGenerated):
        report.read_meta(note)


# -- the scripts -------------------------------------------------------------------------------


def test_no_sys_path_edits_in_experiments() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(EXPERIMENTS.rglob("*"))
        if p.suffix in (".py", ".sh") and p.is_file()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bsys\.path\b", line)
    ]
    assert not offenders, "scripts run as python -m experiments.<name>: " + ", ".join(offenders)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_answers_help(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"experiments.{name}")
    assert module.__doc__, f"experiments/{name}.py has no docstring"
    if name == "__main__":
        return
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_regen_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.__main__ import main

    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "experiments/results/her_parity.md: generated by experiments.her_parity" in listed
    assert "experiments/results/notes/her_parity.md: hand-written" in listed
    with pytest.raises(SystemExit, match="no such result file"):
        main(["regen", "results/nothing_here.md"])


def test_the_best_single_learner_is_ranked_by_seeds_solved_then_steps() -> None:
    """team_vs_solo's --select: more seeds solved beats fewer steps; among equals the
    seeds still solved at the end, then the median steps to the threshold decide."""
    from experiments.team_vs_solo import arm_raw, rank_solos, solo_noise

    def run(arm: str, seed: int, steps: int | None, stays: bool = True) -> dict:
        return {
            "task": "mountaincar", "arm": arm, "seed": seed, "solved": steps is not None,
            "steps_to": steps, "stays": stays and steps is not None, "auc": 1.0,
        }  # fmt: skip

    rs = [
        *(run("solo-gaussian-0.1", s, 5_000 if s == 0 else None) for s in range(3)),  # fast, 1/3
        *(run("solo-pink-0.6", s, 20_000) for s in range(3)),  # 3/3, slower
        *(run("solo-ou-0.5", s, 10_000, stays=s != 2) for s in range(3)),  # 3/3, one falls back
        *(run("solo-pink-1", s, 30_000) for s in range(3)),
    ]
    order = [x["arm"] for x in rank_solos(rs)]
    assert order == ["solo-pink-0.6", "solo-pink-1", "solo-ou-0.5", "solo-gaussian-0.1"]
    assert solo_noise("solo-pink-0.6") == ("pink", 0.6) and solo_noise("solo-x-1") is None
    raw = {
        "experiment": {"name": "m"},
        "team": [
            {"algo": "ddpg", "role": "learner", "params": {"noise_std": 0.1}},
            {"role": "actor"},
        ],
    }
    best = arm_raw(raw, "best-solo", "solo-ou-0.5")
    assert best["team"] == [
        {"algo": "ddpg", "role": "learner", "params": {"noise_std": 0.5, "noise": "ou"}}
    ]
    assert best["experiment"]["backend"] == "serial"
    with pytest.raises(ValueError, match="run --select first"):
        arm_raw(raw, "best-solo", None)


def test_sweep_skips_the_pairs_a_previous_sweep_finished() -> None:
    ran: list[tuple[int, str]] = []

    def run(arm: str, seed: int) -> dict:
        ran.append((seed, arm))
        return {"arm": arm, "seed": seed}

    arms.sweep([0, 1], ["a", "b"], run, skip={(0, "a"), (1, "b")})
    assert ran == [(0, "b"), (1, "a")]


def _pid_record(seed: int, arm: str, scale: int = 1) -> dict[str, Any]:
    return {"seed": seed, "arm": arm, "value": seed * scale, "pid": os.getpid()}


def test_run_parallel_runs_each_task_in_a_process_of_its_own_and_stores_it(
    tmp_path: Path,
) -> None:
    log = tmp_path / "x_runs.jsonl"
    todo = [(seed, arm) for seed in (0, 1) for arm in ("a", "b")]
    done = arms.run_parallel(todo, 2, _pid_record, log, scale=10)
    stored = runs.load(log)
    assert sorted((r["seed"], r["arm"]) for r in stored) == sorted(todo)
    assert {r["seed"]: r["value"] for r in stored} == {0: 0, 1: 10}
    assert len({r["pid"] for r in done}) == 4 and os.getpid() not in {r["pid"] for r in done}


def _flaky_record(seed: int, arm: str) -> dict[str, Any]:
    if arm == "bad":
        raise ValueError(f"no such arm on seed {seed}")
    return {"seed": seed, "arm": arm, "interrupted": arm == "cut"}


def test_run_parallel_stores_neither_a_failed_nor_a_cut_short_run_and_names_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs that finished are stored though one failed; a run that reports itself
    interrupted is printed but not stored (the next sweep runs it again); the failure is
    raised at the end with its task."""
    log = tmp_path / "x_runs.jsonl"
    todo = [(0, "a"), (0, "bad"), (0, "cut"), (1, "a")]
    with pytest.raises(RuntimeError, match=r"1 run\(s\) failed: \(0, 'bad'\): ValueError"):
        arms.run_parallel(todo, 2, _flaky_record, log)
    assert sorted((r["seed"], r["arm"]) for r in runs.load(log)) == [(0, "a"), (1, "a")]
    out = capsys.readouterr()
    assert "(interrupted: not stored)" in out.out
    assert "no such arm on seed 0" in out.err  # the run's own traceback


def test_run_parallel_calls_after_store_once_a_record_is_stored_and_only_then(
    tmp_path: Path,
) -> None:
    """What a run kept to go on from is removed by ``after_store``: it must see its record
    already in the file, and never be called for a run that failed or was cut short (those
    go on from what they kept)."""
    log = tmp_path / "x_runs.jsonl"
    seen: list[tuple[int, str, bool]] = []

    def after_store(record: dict[str, Any]) -> None:
        in_file = any(
            r["arm"] == record["arm"] and r["seed"] == record["seed"] for r in runs.load(log)
        )
        seen.append((record["seed"], record["arm"], in_file))

    todo = [(0, "a"), (0, "bad"), (0, "cut"), (1, "a")]
    with pytest.raises(RuntimeError):
        arms.run_parallel(todo, 2, _flaky_record, log, after_store=after_store)
    assert sorted(seen) == [(0, "a", True), (1, "a", True)]


CTRL_C_SWEEP = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from experiments.lib import arms

def job(i):
    try:
        time.sleep(0.2 if i == 0 else 60)
    except KeyboardInterrupt:
        time.sleep(0.5)  # a resumable run writing its checkpoint
        return {"i": i, "interrupted": True}
    return {"i": i}

if __name__ == "__main__":
    import signal
    # As from a terminal, even where the test runs in the background (a shell's `&` starts
    # it with SIGINT ignored, which Python and its spawned runs would keep).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    arms.run_parallel([(i,) for i in range(4)], 2, job, sys.argv[2])
"""


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_on_a_parallel_sweep_waits_for_its_runs_and_exits_130_cleanly(
    tmp_path: Path, stop: str
) -> None:
    """Ctrl-C at the terminal (SIGINT to the process group), or SIGTERM to the sweep's own
    process alone (``kill``; the runs must hear of it from the sweep): no traceback, the run
    that finished before it is stored, the runs it cut short are not, no process is left."""
    import signal
    import subprocess
    import time

    script = tmp_path / "sweep.py"
    script.write_text(CTRL_C_SWEEP)
    log = tmp_path / "x_runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ROOT), str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:  # job 0 done, jobs 1 and 2 running
        time.sleep(0.05)
    time.sleep(1.0)
    if stop == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "interrupted: waiting for 2 running run(s)" in out
    assert [r["i"] for r in runs.load(log)] == [0]
    assert out.count("(interrupted: not stored)") == 2
    deadline = time.monotonic() + 10  # multiprocessing's resource tracker leaves last
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("a process of the sweep outlived it")


TINY = {
    "experiment": {"name": "tiny", "total_steps": 300, "eval_every": 100, "eval_episodes": 1},
    "env": {"id": "Pendulum-v1"},
    "buffer": {"capacity": 1_000, "batch_size": 16},
    "team": [
        {
            "name": "target",
            "algo": "ddpg",
            "role": "learner",
            "params": {"learning_starts": 50, "hidden": [8]},
        }
    ],
}


def test_a_resumable_run_stopped_short_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    """The run a session left unfinished continues in the same run directory (its env steps
    and eval curve carried on, not restarted); a finished one is not run again; another
    request in the same folder starts afresh."""
    import wheeler2

    work = tmp_path / "work"
    first = arms.run_resumable(TINY, [], 3, work, callbacks=[lambda e: wheeler2.STOP])
    assert first.summary["env_steps"] < 300 and len(first.summary["eval"]) == 1
    resumed = arms.run_resumable(TINY, [], 3, work)
    assert resumed.run_dir == first.run_dir
    assert resumed.summary["env_steps"] == 300
    assert [e["env_steps"] for e in resumed.summary["eval"]][:1] == [
        first.summary["eval"][0]["env_steps"]
    ]
    assert len(resumed.summary["eval"]) == 3
    again = arms.run_resumable(TINY, [], 3, work)
    assert again.run_dir == first.run_dir and again.call_s == 0.0
    other = arms.run_resumable(TINY, [], 4, work)
    # Not a path comparison: a fresh run started in the same second may take the old name.
    assert [d.name for d in work.glob("*/")] == [other.run_dir.name]
    assert tomllib.loads((other.run_dir / "config.toml").read_text())["experiment"]["seed"] == 4
    assert other.call_s > 0.0 and other.summary["env_steps"] == 300
