"""The local backend's lifecycle, from outside, as a user meets it: a member killed, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_team import TEAM, write_team

from wheeler2 import checkpoint as ckpt


def start(cfg: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


# A wait for an event, not a speed bound: a team that never reports fails here. 240 s (under
# the 300 s per-test limit) because a loaded two-core machine took over 120 s to bring up a
# ray team (experiments/stress_tests.sh, 2026-11-25).
def wait_running(out: Path, proc: subprocess.Popen, timeout: float = 240) -> tuple[Path, dict]:
    """Until every member has reported figures at least once (they import torch first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        runs = list(out.glob("*/members.json"))
        if runs:
            run = runs[0].parent
            members = json.loads(runs[0].read_text())
            rows = (
                (run / "metrics.csv").read_text().splitlines()[1:]
                if (run / "metrics.csv").exists()
                else []
            )
            if {r.split(",")[2] for r in rows} >= set(members):
                return run, members
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("members never reported")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for every purpose that matters here.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def leftover_shm(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if f"_{pid}_" in n]


def test_killed_explorer_stops_team_with_exit_1(tmp_path: Path) -> None:
    """Issue 11: a member that dies is named at once and the run exits 1. Asserted by events,
    not by a clock (issue 19; a stress run saw the exit take 12 s at load 9): the death is seen
    through the member's process (its pipe's EOF), not its heartbeat, and every other member
    then sends its final state within the stop's grace, so nothing waits on a timeout."""
    out = tmp_path / "runs"
    proc = start(write_team(tmp_path, total=1_000_000), out)
    run, members = wait_running(out, proc)
    os.kill(members["explorer-1"], signal.SIGKILL)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, output
    assert "member 'explorer-1' died; stopping the team" in output, output
    assert "its process is gone" in output and "heartbeat_s" not in output, output
    assert "sent no final state" not in output, output
    ended = {
        n: m["ended"] for n, m in json.loads((run / "summary.json").read_text())["members"].items()
    }
    assert ended == {"target": "finished", "explorer-0": "finished", "explorer-1": "failed"}
    assert not [n for n, pid in members.items() if alive(pid)], "member processes left behind"
    assert leftover_shm(proc.pid) == []
    assert (run / "checkpoints" / "latest.pt").exists()


@pytest.mark.slow  # the default run covers it: test_faults.py's member that raises, on local
@pytest.mark.timeout(600)
def test_member_that_raises_is_named_with_its_traceback(tmp_path: Path) -> None:
    cfg = write_team(tmp_path, total=1_000_000)
    # An env kwarg Pendulum does not take: every member raises while building its env.
    cfg.write_text(
        cfg.read_text().replace('id = "Pendulum-v1"', 'id = "Pendulum-v1"\nkwargs = { g = "x" }')
    )
    out = tmp_path / "runs"
    proc = start(cfg, out)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, output
    assert "failed" in output and "Traceback" in output
    assert leftover_shm(proc.pid) == []


def test_no_member_steps_before_the_slowest_has_started(tmp_path: Path, monkeypatch) -> None:
    """The team's start line: an explorer that takes 3 s to come up (a Unity build's launch,
    say) still gets its share, because nobody claims a step before every member has reported
    Started. Without the line the learner spends the whole 300-step budget (well under 3 s of
    Pendulum even on a loaded machine) before the explorer exists."""
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    text = TEAM.format(
        total=300, explorer="w2_faults:SlowStartDDPG", explorer_params="start_delay = 3.0"
    )
    cfg = tmp_path / "team.toml"
    cfg.write_text(text.replace("count = 2", "count = 1").replace("learning_starts = 200", ""))
    monkeypatch.setenv("W2_DRIVER_PID", str(os.getpid()))
    run = run_experiment(load(cfg, overrides=[f'experiment.out="{tmp_path / "runs"}"']))
    members = json.loads((run / "summary.json").read_text())["members"]
    assert members["explorer"]["env_steps"] > 0, members
    assert members["target"]["env_steps"] + members["explorer"]["env_steps"] == 300


# SIGINT alone: test_faults.py's Ctrl-C on every backend. SIGTERM runs here; resuming the local
# backend's interrupted run is slow (test_resume_runtime.py resumes in the default run).
@pytest.mark.parametrize(
    "sig, code, resume",
    [
        pytest.param(signal.SIGINT, 130, True, marks=[pytest.mark.slow, pytest.mark.timeout(600)]),
        pytest.param(signal.SIGTERM, 130, True, marks=[pytest.mark.slow, pytest.mark.timeout(600)]),
        (signal.SIGTERM, 130, False),
    ],
)
def test_interrupt_checkpoints_and_resumes(
    tmp_path: Path, sig: int, code: int, resume: bool
) -> None:
    out = tmp_path / "runs"
    proc = start(write_team(tmp_path, total=6_000), out)
    run, members = wait_running(out, proc)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, output
    # Each member stopped on its own and sent its final state within the stop's 10 s grace (an
    # event, not a clock: issue 19); none was left to be ended from outside.
    assert "sent no final state" not in output, output
    assert not [n for n, pid in members.items() if alive(pid)], "member processes left behind"
    assert leftover_shm(proc.pid) == []
    payload = ckpt.load(run / "checkpoints" / "latest.pt")
    assert set(payload["members"]) == set(members)
    stopped_at = payload["run"]["env_steps"]
    assert 0 < stopped_at < 6_000
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert {m["ended"] for m in summary["members"].values()} == {"finished"}, summary["members"]
    if not resume:
        return

    res = subprocess.run(
        [sys.executable, "-m", "wheeler2", "resume", str(run)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 6_000
    assert summary["interrupted"] is False
    assert summary["eval"], "the resumed run evaluated the learner"
