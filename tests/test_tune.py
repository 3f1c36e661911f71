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
    study = tune(_file(tmp_path), out=tmp_path / "runs")
    rows = [r for r in (study / "trials.md").read_text().splitlines() if r.startswith("| ")]
    assert len(rows) == 2 + 3  # header, rule, three trials
    assert len(_runs(study)) == 3 * 2  # every trial ran both seeds
    best = load(study / "best.toml")  # a plain run file: no [tune] left in it
    assert "tune" not in best.raw
    params = best.team[0].params
    assert 1e-4 <= params.lr <= 1e-2 and params.gamma in (0.9, 0.99)
    # A stopped study goes on from its finished trials: one more, not four.
    tune(_file(tmp_path), trials=4, out=tmp_path / "runs")
    assert len(_runs(study)) == 4 * 2


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
