"""`run` refuses what `check` refuses, before it takes any memory or writes a run directory."""

from __future__ import annotations

import os
from pathlib import Path

from wheeler2 import cli
from wheeler2.buffer.shm import wheeler2_entries

ROOT = Path(__file__).resolve().parents[1]


def test_run_refuses_a_buffer_larger_than_memory(tmp_path: Path, capsys) -> None:
    before = {e for e in wheeler2_entries() if f"_{os.getpid()}_" in e}
    code = cli.main(
        [
            "run",
            str(ROOT / "cfg" / "pendulum_ddpg.toml"),
            "--set",
            "buffer.capacity=1_000_000_000_000",
            "--out",
            str(tmp_path / "runs"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "[buffer] capacity" in err and "bytes" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists(), "no run directory for a run that never started"
    after = {e for e in wheeler2_entries() if f"_{os.getpid()}_" in e}
    assert after == before, "no shared memory was taken"
