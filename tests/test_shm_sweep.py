"""The start-up sweep: shared memory whose creator process is gone is freed, live runs' is not."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wheeler2 import cli
from wheeler2.buffer import shm
from wheeler2.buffer.shm import SHM_DIR, Segment, stale_entries, sweep_stale, wheeler2_entries


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True)  # fmt: skip
    return int(proc.stdout)


def _leak(shm_dir: Path, name: str, nbytes: int) -> None:
    """An entry as a SIGKILLed owner leaves it: created, never unlinked, nobody tracking it."""
    with open(shm_dir / name, "wb") as f:
        f.truncate(nbytes)


# Both tests sweep a folder of their own, not /dev/shm: every run on the machine sweeps
# /dev/shm as it starts, so under pytest-xdist a run on the other worker would take a dead
# creator's entries (the very job of the sweep) before this test could count them.


def test_sweep_frees_dead_creators_entries_and_keeps_live_ones(tmp_path: Path) -> None:
    dead = _dead_pid()
    leaked = [f"w2r_{dead}_0badc0de_obs", f"w2sync_{dead}_0badc0de", f"sem.w2r_{dead}_0badc0de"]
    for name in leaked:
        _leak(tmp_path, name, 4096)
    live = f"w2r_{os.getpid()}_5afe5afe_obs"
    _leak(tmp_path, live, 1024)
    unrelated = f"other_{dead}_0badc0de"  # not wheeler2's: never touched
    _leak(tmp_path, unrelated, 4096)
    assert {p.name for p in stale_entries(tmp_path)} == set(leaked)
    assert sweep_stale(tmp_path) == (3, 3 * 4096)
    assert {p.name for p in tmp_path.iterdir()} == {live, unrelated}
    assert sweep_stale(tmp_path) == (0, 0)


def test_stale_names_are_the_ones_shared_memory_gets() -> None:
    """The sweep's pattern matches what a replay and a sync block really create in /dev/shm."""
    segment = Segment(f"w2r_{os.getpid()}_5afe5afe_obs", (16,), np.dtype(np.float32), create=True)
    try:
        assert segment.name in wheeler2_entries(SHM_DIR)
        assert segment.name not in {p.name for p in stale_entries(SHM_DIR)}  # its creator lives
    finally:
        segment.close()
        segment.unlink()


def test_a_run_reports_what_it_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    name = f"w2r_{_dead_pid()}_0badc0de_obs"
    _leak(shm_dir, name, 3 * 2**20)
    monkeypatch.setattr(shm, "sweep_stale", functools.partial(sweep_stale, shm_dir))
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        '[experiment]\nname = "t"\ntotal_steps = 20\neval_every = 20\neval_episodes = 1\n'
        'progress = false\n[env]\nid = "CartPole-v1"\n'
        '[[team]]\nname = "pg"\nalgo = "ppo"\nrole = "learner"\n'
        "[team.params]\nn_steps = 8\nbatch_size = 8\nhidden = [8]\n"
    )
    assert cli.main(["run", str(cfg), "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "freed 3.0 MiB of shared memory left by dead runs (1 entry in /dev/shm)" in out, out
    assert not (shm_dir / name).exists()
