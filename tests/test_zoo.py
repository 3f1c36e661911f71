"""``python -m experiments zoo``: a row per experiment file, its sweep's figures through
``wheeler2 report``'s code; a failed seed counts as failed and unsolved, a file that fails
``check`` is "not run" with its reason, one never tried is "not run yet"; a finished file is not
rerun; ``--only-table`` rebuilds the same table without running anything."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from few_resamples import few_resamples
from test_sweep import FLAKY, STOPS_ONCE, TINY  # FLAKY: a PPO whose build fails in seed 1's run

from experiments import zoo
from experiments.__main__ import main as experiments_main
from experiments.lib import report, runs


def write(folder: Path, name: str, env: str = "CartPole-v1", algo: str = "ppo") -> Path:
    """test_sweep's tiny PPO file under another name and env; threshold 0, so every finished
    seed's first eval is above it and "solved" counts the seeds that finished."""
    text = TINY.format(steps=200, algo=algo)
    for old, new in (
        ('name = "tiny"', f'name = "{name}"'),
        ("eval_threshold = 30.0", "eval_threshold = 0.0"),
        ('id = "CartPole-v1"', f'id = "{env}"'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def rows(table: Path) -> dict[str, list[str]]:
    """The zoo table's rows by their file's name (``a.toml``)."""
    out = {}
    for line in report.body_of(table).splitlines():
        if line.startswith("| ") and ".toml" in line:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[Path(cells[0].rstrip(" †").strip("`")).name] = cells
    return out


def test_zoo_rows_failed_seeds_refused_files_and_only_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    few_resamples(monkeypatch)  # the rows' intervals are not what is checked here
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "flaky.py").write_text(FLAKY)
    write(cfg, "flaky", algo="./flaky.py:SeedOneFails")
    write(cfg, "missing", env="no_such_package_here:Thing-v0")  # check refuses it
    write(cfg, "later")  # covered by the table, not run this time
    results, table, sweeps = tmp_path / "results", tmp_path / "docs" / "zoo.md", tmp_path / "runs"
    where = ["--shipped", str(cfg / "*.toml"), "--results", str(results), "--table", str(table)]
    where += ["--runs", str(sweeps)]
    ran = [str(cfg / "flaky.toml"), str(cfg / "missing.toml")]
    assert experiments_main(["zoo", "--configs", *ran, "--seeds", "0-1", *where]) == 0

    got = rows(table)
    assert list(got) == ["flaky.toml", "later.toml", "missing.toml"]  # every covered file
    flaky = got["flaky.toml"]
    assert flaky[1:4] == ["CartPole-v1", "SeedOneFails learner", "200"]
    assert flaky[4] == "1 finished, 1 failed"
    assert flaky[6] == "1 of 2 (> 0)"  # the failed seed counts, as unsolved
    assert flaky[5] != "—" and flaky[7].endswith(" s")
    assert "(during: mean " in flaky[8]  # the load while the sweep ran, not only at its start
    assert got["later.toml"][4] == "not run yet" and got["later.toml"][5:] == ["—"] * 4
    missing = got["missing.toml"][4]
    assert missing.startswith("not run: [env] id: cannot import 'no_such_package_here'")
    assert "of 3 files run, 1 could not run here, 1 not run yet" in table.read_text()

    # What the table was made from: the sweep of one file, its report.json, a record each.
    (sweep_dir,) = (sweeps / "flaky").glob("flaky-sweep-*")
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    assert [s["status"] for s in meta["seeds"]] == ["finished", "failed"]
    assert not (sweeps / "missing").exists()
    kept = json.loads((results / "zoo" / "flaky.report.json").read_text())
    assert kept["configs"][0]["seeds"] == {"finished": 1, "failed": 1}
    records = runs.load(results / zoo.RUNS_FILE)
    assert [(r["config"], r["status"]) for r in records] == [
        (str(cfg / "flaky.toml"), "ran"),
        (str(cfg / "missing.toml"), "not run"),
    ]
    body = report.body_of(table)

    # Run again: the finished file is not rerun; --only-table rebuilds the same table.
    capsys.readouterr()
    assert experiments_main(["zoo", "--configs", ran[0], "--seeds", "0-1", *where]) == 0
    assert "done before (--force reruns it)" in capsys.readouterr().out
    assert len(list((sweeps / "flaky").glob("flaky-sweep-*"))) == 1
    table.write_text(table.read_text().replace("1 finished", "5 finished"))  # a hand edit goes
    assert experiments_main(["zoo", "--only-table", *where]) == 0
    assert report.body_of(table) == body
    assert len(runs.load(results / zoo.RUNS_FILE)) == 2
    report.regenerate(table)  # `python -m experiments regen` reads the same stored figures
    assert report.body_of(table) == body

    # The file as written decides "changed", not its resolved config: a new comment or a
    # resolved-config hash that moved (an algorithm gaining a default) is not a change...
    flaky = cfg / "flaky.toml"
    flaky.write_text("# a comment added later\n" + flaky.read_text())
    (record,) = [r for r in runs.load(results / zoo.RUNS_FILE) if r["status"] == "ran"]
    assert not zoo.changed({**record, "config_hash": "0000000000"}, zoo.describe(flaky))
    assert experiments_main(["zoo", "--only-table", *where]) == 0
    assert "†" not in table.read_text()
    # ... a value the file sets is, and the row says so.
    flaky.write_text(flaky.read_text().replace("total_steps = 200", "total_steps = 300"))
    assert zoo.changed(record, zoo.describe(flaky))
    assert experiments_main(["zoo", "--only-table", *where]) == 0
    assert rows(table)["flaky.toml"][0].endswith(" †")
    assert "the file changed since this row's sweep ran" in table.read_text()


def test_a_zoo_stopped_in_a_file_goes_on_with_that_files_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped in seed 1 (as by Ctrl-C, once), the file stays "not run yet"; the next zoo
    resumes that sweep (seed 0 kept, seed 1 from its checkpoint) instead of starting anew."""
    few_resamples(monkeypatch)
    monkeypatch.setenv("W2_STOP_MARK", str(tmp_path / "stopped"))
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "stops.py").write_text(STOPS_ONCE)
    path = write(cfg, "stops", algo="./stops.py:SeedOneStopsOnce")
    path.write_text(path.read_text().replace("total_steps = 200", "total_steps = 300"))
    results, table, sweeps = tmp_path / "results", tmp_path / "docs" / "zoo.md", tmp_path / "runs"
    where = ["--shipped", str(path), "--results", str(results), "--table", str(table)]
    where += ["--runs", str(sweeps), "--seeds", "0-1"]
    assert experiments_main(["zoo", *where]) == 130
    assert rows(table)["stops.toml"][4] == "not run yet"
    (stopped,) = (sweeps / "stops").glob("stops-sweep-*")
    seed0 = (stopped / "seed-0" / "summary.json").read_text()
    capsys.readouterr()

    assert experiments_main(["zoo", *where]) == 0
    assert f"going on with the stopped sweep {stopped}" in capsys.readouterr().out
    assert list((sweeps / "stops").glob("stops-sweep-*")) == [stopped]
    assert (stopped / "seed-0" / "summary.json").read_text() == seed0
    row = rows(table)["stops.toml"]
    assert row[4] == "2 finished" and "resumed after a stop" in row[8], row
    summary = json.loads((stopped / "seed-1" / "summary.json").read_text())
    assert summary["env_steps"] == 300 and not summary["interrupted"]


def test_team_text() -> None:
    class Member:
        def __init__(self, algo: str, role: str, count: int) -> None:
            self.algo, self.role, self.count = algo, role, count

    team = [Member("ddpg", "learner", 1), Member("ppo", "explorer", 2)]
    assert zoo.team_text(team) == "ddpg learner + 2 ppo explorers"


def test_the_load_is_read_while_a_sweep_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep that starts on a quiet machine and has work start beside it: the row's load
    figures say so, where the load at its start alone said 0.5."""
    loads = iter([0.5, 2.0])
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads, 3.5), 0.0, 0.0))
    with zoo.LoadWatch(every_s=0.001) as watch:
        deadline = time.monotonic() + 10.0
        while len(watch.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
    n = len(watch.samples)
    assert n >= 3 and watch.samples[:3] == [0.5, 2.0, 3.5]
    figures = watch.figures()
    assert figures is not None and figures["max"] == 3.5
    assert figures["mean"] == round((0.5 + 2.0 + 3.5 * (n - 2)) / n, 1)
    count = len(watch.samples)
    time.sleep(0.01)
    assert len(watch.samples) == count  # it stopped with the sweep
