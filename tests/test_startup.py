"""How local members start (issue 39, items 4 and 5): forked from a fork server that already
imported torch, taking the coordinator's environment, output and death with them; and heard
from at once, so that a start slowed by load is told apart from one that hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from local_team import TEAM, write_team

from wheeler2 import cli
from wheeler2.config import load
from wheeler2.preload import member_context
from wheeler2.runtime import coordinator as coord
from wheeler2.runtime import run_experiment
from wheeler2.runtime.experiment import MemberFailed
from wheeler2.runtime.local import Inherited, _take_over

ROOT = Path(__file__).resolve().parents[1]


def _what_was_loaded(queue: Any) -> None:
    loaded = ("torch" in sys.modules, "wheeler2.agents.ddpg" in sys.modules)
    queue.put((os.getppid(), *loaded))


def test_members_are_forked_from_a_server_that_imported_torch() -> None:
    ctx = member_context()
    queue = ctx.SimpleQueue()
    proc = ctx.Process(target=_what_was_loaded, args=(queue,))
    proc.start()
    parent, torch_loaded, algorithms = queue.get()
    proc.join(timeout=30)
    # Loaded before the child ran a line of its own: torch (~1.5 s a process here) and the
    # built-in algorithms.
    assert torch_loaded and algorithms
    assert parent != os.getpid()  # the fork server's child, not ours


def _member_like(args: Any) -> None:
    _take_over(args)
    print(f"member sees W2_PROBE={os.environ.get('W2_PROBE')}", flush=True)
    time.sleep(60)  # until the lifeline ends it


def test_a_member_takes_the_coordinators_environment_output_and_death(tmp_path: Path) -> None:
    ctx = member_context()  # started before W2_PROBE exists, as a fork server lives long
    out = tmp_path / "member.out"
    lifeline_r, lifeline_w = os.pipe()
    with open(out, "w") as f:
        args = SimpleNamespace(
            environ={**os.environ, "W2_PROBE": "set after the server started"},
            inherited=Inherited(
                {"stdout": f.fileno(), "stderr": f.fileno(), "lifeline": lifeline_r}
            ),
        )
        proc = ctx.Process(target=_member_like, args=(args,))
        proc.start()
    os.close(lifeline_r)
    deadline = time.monotonic() + 30
    while "W2_PROBE" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == "member sees W2_PROBE=set after the server started\n"
    assert proc.is_alive()
    os.close(lifeline_w)  # what the coordinator's death does, however it dies
    proc.join(timeout=10)
    assert proc.exitcode == -signal.SIGTERM


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except FileNotFoundError:
            continue
        for c in map(int, children):
            out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree")
def test_nothing_outlives_a_killed_main_process(tmp_path: Path) -> None:
    """SIGKILL of `wheeler2 run`: its members and the fork server are gone within seconds."""
    cfg = write_team(tmp_path, total=10_000_000, explorer="ddpg")
    out = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out)],
        stdout=subprocess.PIPE,  # a few lines before the kill; the members' after it
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not list(out.glob("*/members.json")) and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.2)
        members = json.loads(next(out.glob("*/members.json")).read_text())
        tree = _descendants(proc.pid)
        assert set(members.values()) <= tree and len(tree) > len(members)  # the server too
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in tree if _alive(p)], "processes outlived the killed run"
        # They leave quietly: a member that finds its coordinator gone exits without a
        # BrokenPipe traceback (every writer of the pipe is gone, so this read ends).
        output = proc.stdout.read() if proc.stdout else ""
        assert "Traceback" not in output and "BrokenPipe" not in output, output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_stop_while_a_member_starts_is_acted_on_once_the_run_knows_the_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM landing inside a member's start, after the fork server forked it and before its
    pid came back: the run stops (KeyboardInterrupt), and the member is one that the run's
    close ends. Raised there, the stop left a member the run did not know of, which printed a
    traceback when it could not open the run's semaphores (seen when a sweep was stopped)."""
    from multiprocess import forkserver

    import wheeler2
    from wheeler2.runtime.local import LocalTransport

    real_read, real_close = forkserver.read_signed, LocalTransport.close
    forked: list[int] = []
    known: list[int] = []

    def read_then_stop(fd: int) -> int:
        value = real_read(fd)
        if not forked:  # the first member's pid, from the fork server
            forked.append(value)
            os.kill(os.getpid(), signal.SIGTERM)
        return value

    def close(self: LocalTransport) -> None:
        known.extend(proc.pid for proc in self.procs.values())
        real_close(self)

    monkeypatch.setattr(forkserver, "read_signed", read_then_stop)
    monkeypatch.setattr(LocalTransport, "close", close)
    with pytest.raises(KeyboardInterrupt):
        wheeler2.run(write_team(tmp_path, total=100_000), out=str(tmp_path / "runs"))
    assert forked and known == forked  # the stop came before the second member started
    assert not _alive(forked[0])


def _team(tmp_path: Path, explorer_params: str, backend: str = "local") -> Any:
    """A learner and one slow-starting explorer, heartbeat_s at its least (4 s)."""
    text = TEAM.format(
        total=300, explorer="w2_faults:SlowStartDDPG", explorer_params=explorer_params
    )
    cfg = tmp_path / "team.toml"
    cfg.write_text(text.replace("count = 2", "count = 1"))
    overrides = [
        f'experiment.out="{tmp_path / "runs"}"',
        f'experiment.backend="{backend}"',
        "experiment.heartbeat_s=4",
    ]
    return load(cfg, overrides=overrides)


# ray: the same beat through the board (a Ray start, ~40 s on two cores: with -m slow).
RAY_SLOW = pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.timeout(600)])


@pytest.mark.parametrize("backend", ["local", RAY_SLOW])
def test_a_start_slowed_by_load_is_not_taken_for_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray_tmp: str, backend: str
) -> None:
    """An explorer that computes for 6 s while it builds, sending nothing of its own: past both
    heartbeat_s (4 s) and the start grace (cut to 2.5 s here, past a beat's 1 s). Its start-up
    beats, whose CPU time grows, keep it in the team."""
    monkeypatch.setattr(coord, "START_GRACE_S", 2.5)
    monkeypatch.setenv("W2_DRIVER_PID", str(os.getpid()))
    if backend == "ray":
        pytest.importorskip("ray")
        monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
        # Ray's workers find the test algorithm where the test process does.
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    run = run_experiment(_team(tmp_path, "start_burn = 6.0", backend))
    members = json.loads((run / "summary.json").read_text())["members"]
    assert members["explorer"]["ended"] == "finished", members


def test_a_start_that_waits_without_cpu_is_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same explorer waiting instead (a lock, an env that never answers): its beats come,
    its CPU time stands still, and past the start grace it is named, with the stage it was in."""
    monkeypatch.setattr(coord, "START_GRACE_S", 2.0)
    monkeypatch.setenv("W2_DRIVER_PID", str(os.getpid()))
    with pytest.raises(MemberFailed) as failed:
        run_experiment(_team(tmp_path, "start_delay = 60.0"))
    assert failed.value.member == "explorer"
    assert "used no CPU for" in str(failed.value) and "building its agent" in str(failed.value)


def test_a_team_reaches_its_first_step_without_torch_dynamo() -> None:
    """Building, checkpointing and restoring agents imports no torch._dynamo (~1.3 s of a
    member's start); its first optimizer step does, and from then on the optimizer's methods
    are torch's own dynamo-disabled ones. In a fresh interpreter: this one may have it."""
    code = """
import sys
from wheeler2.config import load
from wheeler2.runtime.coordinator import prepare
from pathlib import Path
prepare(load("cfg/default.toml"), Path("unused"), False)  # builds the team's three agents
print("built", "torch._dynamo" in sys.modules)
import torch
from wheeler2.process import defer_dynamo_import
defer_dynamo_import()
net = torch.nn.Linear(2, 2)
opt = torch.optim.Adam(net.parameters())
opt.load_state_dict(opt.state_dict())
opt.zero_grad()
print("before step", "torch._dynamo" in sys.modules)
net(torch.ones(1, 2)).sum().backward()
opt.step()
opt.zero_grad()
cached = getattr(torch.optim.Optimizer.zero_grad.__wrapped__, "__dynamo_disable")
print("after step", "torch._dynamo" in sys.modules, getattr(cached, "__module__", ""))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    built, before, after = out.stdout.splitlines()
    assert built == "built False" and before == "before step False"
    assert after.startswith("after step True torch._dynamo"), after


def test_an_unknown_start_method_is_one_error_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """WHEELER2_START_METHOD=fork (not one of forkserver, spawn) on a local run ended in a
    ValueError traceback from the fork server's early start, before the command ran."""
    monkeypatch.setenv("WHEELER2_START_METHOD", "fork")
    path = write_team(tmp_path, 400)
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: WHEELER2_START_METHOD='fork': expected 'forkserver' (the default) or 'spawn'"
    ]
    assert not out.exists()


def test_a_run_started_while_a_member_imports_the_script_says_to_guard_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script starting a run without `if __name__ == "__main__":` is imported again by each
    member (forkserver, like spawn); each member then started a run of its own and died in
    multiprocessing's bootstrapping traceback, after claiming a run directory."""
    import multiprocess

    monkeypatch.setattr(multiprocess.process.current_process(), "_inheriting", True, raising=False)
    config = load(write_team(tmp_path, 400), out=str(tmp_path / "runs"))
    with pytest.raises(RuntimeError, match=r'under `if __name__ == "__main__":`'):
        run_experiment(config)
    assert not (tmp_path / "runs").exists()


SERIAL = """
[experiment]
name = "startup"
total_steps = 200
eval_every = 200
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 100
hidden = [8]
"""


def test_a_run_counts_its_start_up_from_its_own_start_not_the_process(tmp_path: Path) -> None:
    """startup_s was the process's age: the second of two runs in one process (a seed after
    the first of --seeds, the Python API in a notebook or a test) counted the first run, and
    everything before it, as its start-up."""
    cfg = tmp_path / "startup.toml"
    cfg.write_text(SERIAL)
    out = tmp_path / "runs"
    for seed in (0, 1):
        before = time.monotonic()
        assert cli.main(["run", str(cfg), "--seed", str(seed), "--out", str(out / str(seed))]) == 0
        took = time.monotonic() - before
    [run_dir] = (out / "1").iterdir()
    startup = json.loads((run_dir / "summary.json").read_text())["startup_s"]
    assert 0 < startup <= took, (startup, took)


def test_a_command_process_counts_from_its_start_and_later_runs_from_their_call() -> None:
    from wheeler2.process import mark_command_start, process_age_s, take_run_start

    age = process_age_s()
    if age is None:
        pytest.skip("the process's age is read from /proc (Linux)")
    mark_command_start(at_process_start=True)
    assert take_run_start() == pytest.approx(time.monotonic() - age, abs=0.1)
    assert take_run_start() == pytest.approx(time.monotonic(), abs=0.1)  # the next run: now
