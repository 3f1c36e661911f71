"""Run directories: claimed atomically, so runs started in the same second never share one."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from types import SimpleNamespace

import pytest

from wheeler2.runtime import run_experiment
from wheeler2.runtime.experiment import new_run_dir


def _config(out: Path) -> SimpleNamespace:
    return SimpleNamespace(experiment=SimpleNamespace(out=str(out), name="same", backend="none"))


def _claim(out: str, start, queue) -> None:
    start.wait()
    queue.put(str(new_run_dir(_config(Path(out)))))


def test_runs_started_together_in_other_processes_get_their_own_directories(
    tmp_path: Path,
) -> None:
    # Four processes claim at once (same name, almost surely the same second): before the claim
    # was an atomic mkdir, parallel seeds all picked the same free path and wrote into one.
    ctx = mp.get_context("spawn")
    start, queue = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), start, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    dirs = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert len(set(dirs)) == 4, dirs
    assert all(Path(d).is_dir() for d in dirs)


def test_a_claimed_directory_of_a_run_that_fails_at_start_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with pytest.raises(ValueError, match="unknown backend"):
        run_experiment(_config(out))
    assert not out.exists(), "nothing left behind by a run that never started"
