"""The start-up sweep: shared memory whose creator process is gone is freed, live runs' is not."""

from __future__ import annotations

import _posixshmem
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from wheeler2.buffer.shm import SHM_DIR, Segment, stale_entries, sweep_stale


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True)  # fmt: skip
    return int(proc.stdout)


def _leak(name: str, nbytes: int) -> None:
    """A segment as a SIGKILLed owner leaves it: created, never unlinked, nobody tracking it."""
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=0o600)
    try:
        os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)


def test_sweep_frees_dead_creators_entries_and_keeps_live_ones() -> None:
    dead = _dead_pid()
    leaked = [f"w2r_{dead}_0badc0de_obs", f"w2sync_{dead}_0badc0de"]
    for name in leaked:
        _leak(name, 4096)
    live = Segment(f"w2r_{os.getpid()}_5afe5afe_obs", (1024,), np.dtype(np.float32), create=True)
    unrelated = f"other_{dead}_0badc0de"  # not wheeler2's: never touched
    _leak(unrelated, 4096)
    try:
        stale = {p.name for p in stale_entries()}
        assert set(leaked) <= stale
        assert live.name not in stale
        removed, freed = sweep_stale()
        assert removed >= 2 and freed >= 2 * 4096
        names = {p.name for p in SHM_DIR.iterdir()}
        assert not set(leaked) & names
        assert live.name in names and unrelated in names
    finally:
        live.close()
        live.unlink()
        for name in [*leaked, unrelated]:
            Path(SHM_DIR / name).unlink(missing_ok=True)


def test_a_run_reports_what_it_swept(tmp_path: Path) -> None:
    dead = _dead_pid()
    name = f"w2r_{dead}_0badc0de_obs"
    _leak(name, 3 * 2**20)
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        '[experiment]\nname = "t"\ntotal_steps = 20\neval_every = 20\neval_episodes = 1\n'
        'progress = false\n[env]\nid = "CartPole-v1"\n'
        '[[team]]\nname = "pg"\nalgo = "ppo"\nrole = "learner"\n'
        "[team.params]\nn_steps = 8\nbatch_size = 8\nhidden = [8]\n"
    )
    try:
        res = subprocess.run(
            [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(tmp_path / "runs")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert "MiB of shared memory left by dead runs" in res.stdout, res.stdout
        assert not (SHM_DIR / name).exists()
    finally:
        (SHM_DIR / name).unlink(missing_ok=True)
