"""`wheeler2 tune` (issue 38, item 2): a declared space searched with Optuna, trials that can
be pruned on their evals, a study that goes on where it stopped, and the best config written
as a file that runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("optuna")

from wheeler2.config import ConfigError, load  # noqa: E402
from wheeler2.config.tune import read_tune  # noqa: E402
from wheeler2.tune import tune  # noqa: E402

BASE = """
[experiment]
name = "tunetest"
seed = 0
total_steps = 300
eval_every = 100
eval_episodes = 2
backend = "serial"
progress = false

[env]
id = "CartPole-v1"

[[team]]
name = "pg"
algo = "ppo"
role = "learner"
[team.params]
n_steps = 32
batch_size = 32
hidden = [8]
"""

SPACE = """
[tune]
trials = 3
seeds = [0, 1]
sampler = "random"
{extra}

[tune.space]
"team.pg.params.lr" = {{ range = [1e-4, 1e-2], log = true }}
"team.pg.params.n_epochs" = {{ range = [1, 3] }}
"team.pg.params.gamma" = {{ choices = [0.9, 0.99] }}
"""


def _file(tmp_path: Path, extra: str = "", space: str | None = None) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(BASE + (SPACE.format(extra=extra) if space is None else space))
    return path


def _runs(study: Path) -> list[Path]:
    return sorted(study.glob("trial-*/tunetest-*"))


def test_a_study_runs_its_trials_and_writes_a_best_file_that_runs(tmp_path: Path) -> None:
    # Two trials, not the file's three: each trial is two real runs, and two show as much.
    study = tune(_file(tmp_path), trials=2, out=tmp_path / "runs")
    rows = [r for r in (study / "trials.md").read_text().splitlines() if r.startswith("| ")]
    assert len(rows) == 2 + 2  # header, rule, two trials
    assert len(_runs(study)) == 2 * 2  # every trial ran both seeds
    best = load(study / "best.toml")  # a plain run file: no [tune] left in it
    assert "tune" not in best.raw
    params = best.team[0].params
    assert 1e-4 <= params.lr <= 1e-2 and params.gamma in (0.9, 0.99)
    # A stopped study goes on from its finished trials: one more, not three.
    tune(_file(tmp_path), trials=3, out=tmp_path / "runs")
    assert len(_runs(study)) == 3 * 2


def test_a_trial_the_pruner_stops_ends_at_that_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pruner that stops every trial at its first report: the first seed's run ends at its
    first eval (not its budget), the second seed never runs, the trial counts as pruned."""
    import json

    import optuna

    monkeypatch.setattr(
        optuna.pruners, "MedianPruner", lambda: optuna.pruners.ThresholdPruner(lower=1e9)
    )
    study = tune(_file(tmp_path), trials=1, out=tmp_path / "runs")
    assert "| 0 | pruned |" in (study / "trials.md").read_text()
    (run,) = _runs(study)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] < 300 and "pruned" in summary["stop"]["reason"]


@pytest.mark.parametrize(
    "space, key",
    [
        ('[tune.space]\n"buffer.batch_size" = { range = [64, 32] }\n', 'space."buffer.batch_size"'),
        (
            '[tune.space]\n"team.pg.params.lr" = { range = [0, 1], log = true }\n',
            'space."team.pg.params.lr"',
        ),
        ('[tune.space]\n"x" = { choices = [] }\n', 'space."x"'),
        ('[tune]\ntrails = 3\n[tune.space]\n"buffer.batch_size" = { choices = [32] }\n', "trails"),
        ('[tune]\nseeds = [-1]\n[tune.space]\n"buffer.batch_size" = { choices = [32] }\n', "seeds"),
        ("[tune]\ntrials = 3\n", "space"),
    ],
)
def test_a_bad_space_is_refused_by_key(tmp_path: Path, space: str, key: str) -> None:
    path = _file(tmp_path, space=space if space.startswith("[tune]") else "[tune]\n" + space)
    with pytest.raises(ConfigError) as err:
        load(path)  # what `check` and `run` read: [tune] is checked with the file
    assert f"[tune] {key}" in str(err.value), str(err.value)


def test_a_space_key_the_file_does_not_take_is_named(tmp_path: Path) -> None:
    path = _file(
        tmp_path, space='[tune]\n[tune.space]\n"team.pg.params.lrr" = { range = [0.1, 0.2] }\n'
    )
    with pytest.raises(ConfigError) as err:
        tune(path, out=tmp_path / "runs")
    assert '[tune] space."team.pg.params.lrr"' in str(err.value), str(err.value)
    assert read_tune(load(path).raw, path).space[0].key == "team.pg.params.lrr"


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ('"team.pg.params.lrr" = { range = [0.1, 0.2] }', "unknown key"),
        ('"buffer.alpha" = { choices = [0.5, 7] }', "at 7: expected a number in [0, 1]"),
    ],
)
def test_check_refuses_a_space_key_as_tune_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, said: str
) -> None:
    # `check` read [tune] for its shape only and said "ok" to a space `tune` then refused.
    from wheeler2 import cli

    path = _file(tmp_path, space=f"[tune]\n[tune.space]\n{entry}\n")
    assert cli.main(["check", str(path)]) == cli.EXIT_INVALID
    err = capsys.readouterr().err
    key = entry.split(" = ")[0]
    assert f"[tune] space.{key}" in err and said in err, err


def test_tune_takes_the_tune_table_as_set_changes_it(tmp_path: Path) -> None:
    # The study re-read [tune] from the file alone, so --set tune.* (which check applied)
    # was dropped without a word.
    from wheeler2.tune import check_space

    path = _file(tmp_path)
    overrides = ["tune.trials=7"]
    spec = check_space(path, load(path, overrides), overrides)
    assert spec.trials == 7 and read_tune(load(path).raw, path).trials != 7


def test_integer_ends_on_a_key_that_takes_any_number_are_refused(tmp_path: Path) -> None:
    space = '[tune]\n[tune.space]\n"team.pg.params.gae_lambda" = { range = [0, 1] }\n'
    with pytest.raises(ConfigError) as err:
        tune(_file(tmp_path, space=space), out=tmp_path / "runs")
    message = str(err.value)
    assert '[tune] space."team.pg.params.gae_lambda"' in message, message
    assert "draws integers only" in message and "write [0.0, 1.0]" in message, message


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            # The command may hold spaces and parentheses: the fields after its last ")".
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):  # not a process, or it ended while we looked
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status is left to collect


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers in /proc")
def test_parallel_workers_stop_when_the_tune_process_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"  # trials that would run for hours
    path.write_text(
        BASE.replace("total_steps = 300", "total_steps = 10_000_000") + SPACE.format(extra="")
    )
    repo = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "wheeler2", "tune", str(path), "--parallel", "2"]
    cmd += ["--out", str(tmp_path / "runs")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until both workers are in a trial's run
            if len(list((tmp_path / "runs").glob("tune-*/trial-*/tunetest-*/metrics.csv"))) >= 2:
                break
            time.sleep(0.2)
        workers = _children(proc.pid)  # the two workers, and multiprocess's resource tracker
        assert len(workers) >= 2
        proc.kill()  # SIGKILL: the tune process can tell its workers nothing
        proc.wait()
        deadline = time.monotonic() + 90
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers), "a tune worker outlived its study"
    finally:
        proc.kill()
        for pid in workers:  # without the watch they would run their trials on
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fake_run(script: list[Any]) -> Any:
    """A stand-in for ``wheeler2.api.run``: each call takes the next entry of ``script``,
    raising it if it is an exception, else writing a run whose final eval return it is."""
    import itertools
    import json

    calls = iter(script)
    count = itertools.count()

    def run(path: Any, callbacks: Any = None, **overrides: Any) -> Path:
        what = next(calls)
        if isinstance(what, BaseException):
            raise what
        run_dir = Path(overrides["out"]) / f"tunetest-{next(count)}"
        run_dir.mkdir(parents=True)
        summary = {"final_eval_return": what, "best_eval_return": what}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return run_dir

    return run


def _rows(study: Path) -> list[str]:
    return [r for r in (study / "trials.md").read_text().splitlines() if r[2:3].isdigit()]


def test_a_trial_whose_run_fails_counts_and_the_study_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diverging trial (a member failed) is a result of the search: it is marked failed with
    its error line, counts towards the total, and the other trials still run."""
    import wheeler2.api
    from wheeler2.runtime.experiment import MemberFailed

    failed = MemberFailed("pg", "Traceback ...\nNonFiniteError: loss 'policy' is nan")
    monkeypatch.setattr(wheeler2.api, "run", _fake_run([failed, 1.0, 2.0, 3.0, 4.0]))
    study = tune(_file(tmp_path), trials=3, out=tmp_path / "runs")
    rows = _rows(study)
    assert len(rows) == 3
    assert rows[0].startswith("| 0 | fail | — |") and "loss 'policy' is nan" in rows[0]
    assert [r.split(" | ")[2] for r in rows[1:]] == ["1.5", "3.5"]  # the mean over two seeds


def test_a_trial_stopped_by_ctrl_c_is_run_again_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wheeler2.api

    monkeypatch.setattr(wheeler2.api, "run", _fake_run([1.0, 1.0, KeyboardInterrupt()]))
    with pytest.raises(KeyboardInterrupt):
        tune(_file(tmp_path), trials=2, out=tmp_path / "runs")
    # Ctrl-C is how a study is cut short: what ended is written, the best file with it.
    cut = tmp_path / "runs" / "tune-tunetest"
    assert [r.split(" | ")[1] for r in _rows(cut)] == ["complete", "fail"]
    assert (cut / "best.toml").is_file()
    monkeypatch.setattr(wheeler2.api, "run", _fake_run([5.0, 5.0]))
    study = tune(_file(tmp_path), trials=2, out=tmp_path / "runs")
    states = [r.split(" | ")[1] for r in _rows(study)]
    assert states == ["complete", "fail", "complete"]  # two trials count, as asked
    assert "stopped before it ended: not counted" in _rows(study)[1]


def test_a_trial_left_running_by_a_killed_process_is_closed_and_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its heartbeat stops; the next trial to start marks it failed, and it does not count."""
    import optuna

    import wheeler2.api
    import wheeler2.tune

    monkeypatch.setattr(wheeler2.tune, "HEARTBEAT_S", 1)
    where = tmp_path / "runs" / "tune-tunetest"
    where.mkdir(parents=True)
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{where / 'study.db'}", heartbeat_interval=1, grace_period=3
    )
    left = optuna.create_study(study_name="tunetest", storage=storage, direction="maximize")
    trial = left.ask()  # a process asked for it, then was killed
    storage.record_heartbeat(trial._trial_id)
    time.sleep(4.5)  # past the 3 s grace in SQLite's whole seconds, whatever the phase
    monkeypatch.setattr(wheeler2.api, "run", _fake_run([2.0, 2.0]))
    study = tune(_file(tmp_path), trials=1, out=tmp_path / "runs")
    states = [r.split(" | ")[1] for r in _rows(study)]
    assert states == ["fail", "complete"]


def test_a_study_of_another_search_in_the_same_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study directory is named after the experiment alone: another metric, space or --set
    under that name would find the first study's trials done and write its best as its own."""
    import wheeler2.api
    from wheeler2.errors import UsageError

    monkeypatch.setattr(wheeler2.api, "run", _fake_run([1.0, 1.0]))
    out = tmp_path / "runs"
    study = tune(_file(tmp_path), trials=1, out=out)
    tune(_file(tmp_path), trials=1, out=out)  # the same search: goes on (nothing left to run)
    wider = SPACE.format(extra="").replace("1e-2", "1e-1")
    for made, overrides, what in [
        ({"extra": 'metric = "best"'}, [], "metric"),
        ({"space": wider}, [], "space"),
        ({}, ["experiment.total_steps=600"], "config hash"),
    ]:
        with pytest.raises(UsageError, match=f"another {what} "):
            tune(_file(tmp_path, **made), trials=2, out=out, overrides=overrides)
    assert len(_rows(study)) == 1


def test_a_space_key_also_given_by_set_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        tune(_file(tmp_path), out=tmp_path / "runs", overrides=["team.pg.params.gamma=0.9"])
    message = str(err.value)
    assert '[tune] space."team.pg.params.gamma"' in message and "--set" in message, message


def test_a_space_key_set_by_its_index_is_refused_too(tmp_path: Path) -> None:
    """``team.0.params.gamma`` is ``team.pg.params.gamma``: each trial would set the searched
    value over it, and the --set would be lost without a word."""
    with pytest.raises(ConfigError) as err:
        tune(_file(tmp_path), out=tmp_path / "runs", overrides=["team.0.params.gamma=0.9"])
    assert '[tune] space."team.pg.params.gamma"' in str(err.value)


def test_set_name_or_out_moves_the_study_to_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--set experiment.name=b` is another study: its own directory, not a second study in
    the file's study.db whose trial-0/, trials.md and best.toml it would share. No trial runs."""
    import wheeler2.tune as tune_module

    monkeypatch.setattr(tune_module, "_optimize", lambda plan: None)
    runs = tmp_path / "runs"
    where = tune(_file(tmp_path), out=runs, overrides=["experiment.name=other"])
    assert where == runs / "tune-other" and (where / "study.db").is_file()
    assert not (runs / "tune-tunetest").exists()
    elsewhere = tmp_path / "elsewhere"
    where = tune(_file(tmp_path), overrides=[f"experiment.out={elsewhere}"])
    assert where == elsewhere / "tune-tunetest" and (where / "study.db").is_file()


class _Trial:
    def __init__(self) -> None:
        self.reports: list[tuple[float, int]] = []
        self.asked: list[int] = []

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        self.asked.append(self.reports[-1][1])
        return False


def test_evals_are_reported_at_their_eval_every_mark_once_and_never_pruned_at_the_budget() -> None:
    """A team's evals fire at whatever total its members reached (348, 620, ...): Optuna
    compares trials only at equal steps, so each is reported at its mark; the closing eval at
    a mark already reported is not reported again, and the budget's eval is not pruned."""
    from types import SimpleNamespace

    from wheeler2.tune import _Prune

    trial = _Trial()
    prune = _Prune(trial, eval_every=300, total_steps=1200)
    for steps, ret in [(348, 1.0), (620, 2.0), (948, 3.0), (1200, 4.0), (1203, 5.0)]:
        assert prune.on_eval(SimpleNamespace(lead=True, env_steps=steps, mean_return=ret)) is None
    prune.on_eval(SimpleNamespace(lead=False, env_steps=1500, mean_return=9.0))  # not the lead
    assert trial.reports == [(1.0, 300), (2.0, 600), (3.0, 900), (4.0, 1200)]
    assert trial.asked == [300, 600, 900]
