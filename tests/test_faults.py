"""Faults on every backend, from outside, as a user meets them: a member that dies, raises or
hangs (stuck, or stopped with SIGSTOP), a dead learner, Ctrl-C. Each must end the run with the
right exit code, name the member, leave a checkpoint, and leave no member process and no
/dev/shm entry behind.

The misbehaving members come from ``tests/w2_faults.py`` (on PYTHONPATH for the run, so member
processes and Ray workers import it too).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2.buffer.shm import SHM_DIR, _pid_alive

ROOT = Path(__file__).resolve().parents[1]
HEARTBEAT_S = 8.0  # a healthy member reports every 2 s; 8 s leaves room on a loaded CI machine

TEAM = """
[experiment]
name = "faults"
seed = 2
total_steps = {total}
eval_every = 1_000
eval_episodes = 2
backend = "{backend}"
heartbeat_s = {heartbeat}
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 20_000
batch_size = 32

[[team]]
name = "target"
algo = "w2_faults:FaultyDDPG"
role = "learner"
[team.params]
learning_starts = 200
hidden = [16, 16]
{learner_fault}

[[team]]
name = "explorer"
algo = "w2_faults:FaultyPPO"
role = "explorer"
count = {explorers}
sync = {{ every = 100, keep = ["actor.head"] }}
[team.params]
hidden = [16, 16]
activation = "relu"
n_steps = 64
batch_size = 32
"""

# The second explorer gets the fault: its table is repeated with count = 1 under another name.
FAULTY_EXPLORER = """
[[team]]
name = "bad"
algo = "w2_faults:FaultyPPO"
role = "explorer"
sync = {{ every = 100, keep = ["actor.head"] }}
[team.params]
hidden = [16, 16]
activation = "relu"
n_steps = 64
batch_size = 32
fault = "{fault}"
fault_at = 300
"""


def write_team(
    tmp_path: Path,
    backend: str,
    total: int = 1_000_000,
    explorer_fault: str = "",
    learner_fault: str = "",
    explorers: int = 2,
) -> Path:
    text = TEAM.format(
        total=total,
        backend=backend,
        heartbeat=HEARTBEAT_S,
        explorers=explorers,
        # Its act calls count evals (2 x 200 each, every 1,000 team steps): 600 is past its
        # learning_starts and its first eval, so it has reported and producers wait on its
        # updates, seconds into the run. (2,000 took 80 s: the gate lets it act about 1/s.)
        learner_fault=f'fault = "{learner_fault}"\nfault_at = 600' if learner_fault else "",
    )
    if explorer_fault:
        text += FAULTY_EXPLORER.format(fault=explorer_fault)
    path = tmp_path / "team.toml"
    path.write_text(text)
    return path


class Run:
    """``wheeler2 run`` in a subprocess with its own RAY_TMPDIR, watched from outside."""

    def __init__(self, cfg: Path, out: Path, ray_tmp: str) -> None:
        self.out = out
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
            RAY_TMPDIR=ray_tmp,
        )
        self.shm_before = _shm()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
            start_new_session=True,  # Ctrl-C from a terminal reaches the whole process group
        )
        self.members: dict[str, int] = {}
        self.run_dir: Path | None = None

    def wait_members(self, names: set[str], timeout: float = 180) -> None:
        """Until every named member has started and reported figures once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(self.proc.stdout.read())
            for path in self.out.glob("*/members.json"):
                self.run_dir = path.parent
                try:
                    self.members = json.loads(path.read_text())
                except json.JSONDecodeError:
                    continue  # caught mid-write
                metrics = path.parent / "metrics.csv"
                rows = metrics.read_text().splitlines()[1:] if metrics.exists() else []
                if names <= set(self.members) and names <= {r.split(",")[2] for r in rows}:
                    return
            time.sleep(0.2)
        raise AssertionError(f"members {names} never reported")

    def finish(self, timeout: float = 120) -> str:
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        return output

    def assert_clean(self) -> None:
        """No member process and no new /dev/shm entry of a process that is gone."""
        deadline = time.monotonic() + 20  # Ray reaps its workers shortly after the driver
        while time.monotonic() < deadline:
            alive = [n for n, pid in self.members.items() if _alive(pid)]
            if not alive:
                break
            time.sleep(0.25)
        assert not alive, f"member processes left behind: {alive}"
        leaked = {e for e in _shm() - self.shm_before if not _creator_alive(e)}
        assert not leaked, f"shared memory left behind: {sorted(leaked)}"


def _shm() -> set[str]:
    kinds = ("w2r", "sem.w2r", "w2sync")
    return {e.name for e in SHM_DIR.iterdir() if e.name.split("_")[0] in kinds}


def _creator_alive(name: str) -> bool:
    # Entries of other runs on this machine (their creators are alive) are not this run's.
    return _pid_alive(int(name.split("_")[1]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


MULTI = ["local", "ray"]
# The default run covers each fault on serial and local and the commonest ones on ray; these
# ray variants (each a ~40 s Ray start on two cores) run with `-m slow`.
RAY_SLOW = pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.timeout(600)])
LOCAL_SLOW = pytest.param("local", marks=[pytest.mark.slow, pytest.mark.timeout(600)])
SERIAL_SLOW = pytest.param("serial", marks=[pytest.mark.slow, pytest.mark.timeout(600)])
MULTI_SLOW_RAY = ["local", RAY_SLOW]
ALL_SLOW_RAY = ["serial", "local", RAY_SLOW]
# A faulty explorer beside one healthy explorer and the learner: the run still has members to
# stop and checkpoint, and one member process fewer to start (a torch import each) than two.
EXPLORERS_BESIDE_FAULT = 1


def _skip_without_ray(backend: str) -> None:
    if backend == "ray":
        pytest.importorskip("ray", reason="backend ray needs the optional extra")


# ray: slow; the default run has test_backends_agree.py's ray run to its end (the budget spent
# exactly, counted by ray's Board) and this file's Ctrl-C on ray (a Ray started by the CLI,
# closed on every path by the same `finally`, no member process or /dev/shm entry left).
# serial: slow; a serial run starts no member process, test_backends_agree.py spends its budget
# exactly, and test_buffer_lifecycle.py has its replay's owner unlink every segment however it
# ends.
@pytest.mark.parametrize("backend", [SERIAL_SLOW, "local", RAY_SLOW])
def test_normal_run_leaves_nothing_behind(tmp_path: Path, ray_tmp: str, backend: str) -> None:
    _skip_without_ray(backend)
    run = Run(write_team(tmp_path, backend, total=1_500), tmp_path / "runs", ray_tmp)
    output = run.finish(timeout=240)
    assert run.proc.returncode == 0, output
    run.members = json.loads(next(run.out.glob("*/members.json")).read_text())
    summary = json.loads(next(run.out.glob("*/summary.json")).read_text())
    assert summary["env_steps"] == 1_500, "the budget is spent exactly"
    run.assert_clean()


# Both slow. ray: the default run has test_ray.py's killed explorer actor. local: the default
# run has test_local.py::test_killed_explorer_stops_team_with_exit_1 (a member process gone:
# named as died, exit 1, a checkpoint, no member process or shared memory left).
@pytest.mark.parametrize("backend", [LOCAL_SLOW, RAY_SLOW])
def test_member_that_dies_is_named_and_the_run_exits_1(
    tmp_path: Path, ray_tmp: str, backend: str
) -> None:
    _skip_without_ray(backend)
    cfg = write_team(tmp_path, backend, explorer_fault="exit", explorers=EXPLORERS_BESIDE_FAULT)
    run = Run(cfg, tmp_path / "runs", ray_tmp)
    output = run.finish(timeout=240)
    assert run.proc.returncode == 1, output
    assert "member 'bad' died" in output, output
    assert (run.run_dir or next(run.out.glob("*"))).joinpath("checkpoints/latest.pt").exists()
    run.members = json.loads(next(run.out.glob("*/members.json")).read_text())
    run.assert_clean()


# serial: slow; the default run has test_finite_guard.py's serial run, whose member raises
# through the same path (SerialTransport catches it, `failed` sends it, the coordinator names
# it, exit 1), and this test on local carries the traceback across a process.
@pytest.mark.parametrize("backend", [SERIAL_SLOW, "local", RAY_SLOW])
def test_member_that_raises_is_named_with_its_traceback(
    tmp_path: Path, ray_tmp: str, backend: str
) -> None:
    _skip_without_ray(backend)
    cfg = write_team(tmp_path, backend, explorer_fault="raise", explorers=EXPLORERS_BESIDE_FAULT)
    run = Run(cfg, tmp_path / "runs", ray_tmp)
    output = run.finish(timeout=240)
    assert run.proc.returncode == 1, output
    assert "member 'bad' raised" in output and "injected fault" in output, output
    run.members = json.loads(next(run.out.glob("*/members.json")).read_text())
    run.assert_clean()


# The heartbeat is the coordinator's, the same on every backend; serial's (an alarm in the one
# process) runs by default. local and ray: slow; the default run has the stopped member below on
# local (the same coordinator heartbeat, message and SIGKILL of the silent member process).
@pytest.mark.parametrize("backend", ["serial", LOCAL_SLOW, RAY_SLOW])
def test_member_stuck_in_a_step_is_caught_by_the_heartbeat(
    tmp_path: Path, ray_tmp: str, backend: str
) -> None:
    _skip_without_ray(backend)
    cfg = write_team(tmp_path, backend, explorer_fault="hang", explorers=EXPLORERS_BESIDE_FAULT)
    run = Run(cfg, tmp_path / "runs", ray_tmp)
    output = run.finish(timeout=240)
    assert run.proc.returncode == 1, output
    assert (
        "member 'bad' hangs" in output
        and f"heartbeat_s = {HEARTBEAT_S:g}" in output
        or (backend == "serial" and "member 'bad'" in output and "hangs" in output)
    ), output
    run.members = json.loads(next(run.out.glob("*/members.json")).read_text())
    run.assert_clean()


@pytest.mark.parametrize("backend", MULTI_SLOW_RAY)
def test_stopped_member_is_caught_by_the_heartbeat(
    tmp_path: Path, ray_tmp: str, backend: str
) -> None:
    _skip_without_ray(backend)
    run = Run(write_team(tmp_path, backend), tmp_path / "runs", ray_tmp)
    run.wait_members({"target", "explorer-0", "explorer-1"})
    os.kill(run.members["explorer-1"], signal.SIGSTOP)
    t0 = time.monotonic()
    output = run.finish(timeout=240)
    took = time.monotonic() - t0
    assert run.proc.returncode == 1, output
    assert "member 'explorer-1' hangs" in output, output
    assert f"heartbeat_s = {HEARTBEAT_S:g}" in output, output
    # Detection takes heartbeat_s after the last report (<= 2 s before the stop), then the
    # stop, the drain of the others and the final checkpoint; 45 s is a loaded machine's bound.
    assert took < HEARTBEAT_S + 45, f"a stopped member ended the run only after {took:.0f} s"
    run.assert_clean()


@pytest.mark.parametrize("backend", MULTI_SLOW_RAY)
def test_learner_that_dies_frees_producers(tmp_path: Path, ray_tmp: str, backend: str) -> None:
    """The explorers wait on the ratio gate for a learner that is gone: the stop must let them
    go, so that each sends its final state within the stop's grace. Held in the gate (a gate
    that ignores the release), they send nothing until its 60 s timeout, far past the 10 s
    grace, and end "cut off". An event, not a clock: on a loaded machine the run itself may
    take minutes before the learner reaches its fault."""
    _skip_without_ray(backend)
    run = Run(write_team(tmp_path, backend, learner_fault="exit"), tmp_path / "runs", ray_tmp)
    run.wait_members({"target"})
    output = run.finish(timeout=240)
    assert run.proc.returncode == 1, output
    assert "member 'target' died" in output, output
    assert "sent no final state" not in output, output
    members = json.loads((run.run_dir / "summary.json").read_text())["members"]
    ended = {name: figures["ended"] for name, figures in members.items()}
    assert ended == {"target": "failed", "explorer-0": "finished", "explorer-1": "finished"}
    run.assert_clean()


# local: slow; the default run has the Ctrl-C to the whole group on local during start-up
# (below: members ignore it, exit 130) and test_local.py's SIGTERM of a running local team
# (the coordinator's same interrupt path: members stop, a resumable checkpoint, nothing left).
@pytest.mark.parametrize("backend", ["serial", LOCAL_SLOW, "ray"])
def test_ctrl_c_exits_130_with_a_resumable_checkpoint(
    tmp_path: Path, ray_tmp: str, backend: str
) -> None:
    _skip_without_ray(backend)
    run = Run(write_team(tmp_path, backend, total=200_000), tmp_path / "runs", ray_tmp)
    run.wait_members({"target", "explorer-0", "explorer-1"})
    os.killpg(run.proc.pid, signal.SIGINT)
    output = run.finish(timeout=120)
    assert run.proc.returncode == 130, output
    # The user is told where the run is, at the start and with the command that continues it.
    assert f"run directory: {run.run_dir}" in output, output
    assert f"continue with: wheeler2 resume {run.run_dir}" in output, output
    payload = ckpt.load(run.run_dir / "checkpoints" / "latest.pt")
    assert set(payload["members"]) == {"target", "explorer-0", "explorer-1"}
    assert 0 < payload["run"]["env_steps"] < 200_000
    run.assert_clean()


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path, ray_tmp: str) -> None:
    """Ctrl-C while members are still building: exit 130, no traceback."""
    cfg = write_team(tmp_path, "local", total=200_000)
    # The explorers' builds take a minute (forked from the preloaded server, the learner is up
    # in well under a second): the Ctrl-C lands while they build.
    text = cfg.read_text().replace('activation = "relu"', 'activation = "relu"\nbuild_delay = 60.0')
    cfg.write_text(text)
    run = Run(cfg, tmp_path / "runs", ray_tmp)
    deadline = time.monotonic() + 120
    # The run directory appears once the team is built, right before the members are started.
    while not list(run.out.glob("*/config.toml")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)
    started = list(run.out.glob("*/members.json"))
    assert run.proc.poll() is None
    assert not started or "explorer-0" not in json.loads(started[0].read_text())
    os.killpg(run.proc.pid, signal.SIGINT)
    output = run.finish(timeout=120)
    assert run.proc.returncode == 130, output
    assert "Traceback" not in output, output
    # The run says how it ended, as at any other stop (no member had a state to checkpoint).
    (summary,) = [json.loads(p.read_text()) for p in run.out.glob("*/summary.json")]
    assert summary["interrupted"] and summary["stop"]["by"] == "interrupt"
    if run.run_dir is None:
        found = list(run.out.glob("*/members.json"))
        run.members = json.loads(found[0].read_text()) if found else {}
    run.assert_clean()


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), RuntimeError("no env here")])
def test_a_run_stopped_while_its_members_start_says_so_in_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException
) -> None:
    """Ctrl-C (or a failure) before any member ran: summary.json says how the run ended and
    its log is closed, as at any other stop; there is no state to checkpoint."""
    import wheeler2
    from wheeler2.runtime.serial import SerialTransport

    def start(self, run_dir: Path, next_eval: int) -> None:  # noqa: ANN001
        raise raised

    monkeypatch.setattr(SerialTransport, "start", start)
    cfg = write_team(tmp_path, "serial", total=1_000)
    with pytest.raises(type(raised)):
        wheeler2.run(cfg, out=str(tmp_path / "runs"))
    (summary,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/summary.json")]
    assert summary["interrupted"] and summary["env_steps"] == 0
    if isinstance(raised, KeyboardInterrupt):
        assert summary["stop"]["by"] == "interrupt"
    else:
        assert summary["stop"] == {
            "by": "failure",
            "reason": "start-up failed: RuntimeError: no env here",
        }


# Slow: the default run has test_startup.py::test_nothing_outlives_a_killed_main_process, the
# same SIGKILL of a local run's main process, its members (and fork server) gone within
# seconds and no traceback in their output.
@pytest.mark.slow
def test_members_leave_quietly_when_the_main_process_is_killed(
    tmp_path: Path, ray_tmp: str
) -> None:
    """The coordinator SIGKILLed: members notice at their next report and exit without a
    BrokenPipe traceback; the next run's sweep frees the shared memory the dead owner left."""
    run = Run(write_team(tmp_path, "local"), tmp_path / "runs", ray_tmp)
    run.wait_members({"target", "explorer-0", "explorer-1"})
    os.kill(run.proc.pid, signal.SIGKILL)
    output = run.finish(timeout=60)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in run.members.values()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not [n for n, pid in run.members.items() if _alive(pid)], "members outlived the run"
    assert "Traceback" not in output and "BrokenPipe" not in output, output


def test_a_run_that_fails_at_start_leaves_no_run_directory(tmp_path: Path, ray_tmp: str) -> None:
    cfg = write_team(tmp_path, "local")
    # A kwarg Pendulum does not take: the team fails while it is built, before any member.
    cfg.write_text(
        cfg.read_text().replace('id = "Pendulum-v1"', 'id = "Pendulum-v1"\nkwargs = { x = 1 }')
    )
    run = Run(cfg, tmp_path / "runs", ray_tmp)
    output = run.finish(timeout=120)
    assert run.proc.returncode != 0, output
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir()), output


def test_one_receive_takes_every_message_a_member_queued_before_it_exited() -> None:
    """A member that raised sends its Failed behind its last figures and exits; reading one
    message per member per receive left the Failed unread, and the run said only "its process
    is gone" (a CI failure on a loaded machine)."""
    from multiprocessing import Pipe
    from types import SimpleNamespace

    from wheeler2.runtime.local import LocalTransport
    from wheeler2.runtime.messages import Alive, Failed

    reader, writer = Pipe(duplex=False)
    for k in range(3):
        writer.send(Alive("m", cpu_s=float(k)))
    writer.send(Failed("m", "non-finite value: reward head 'bonus' is nan", how="raised"))
    writer.close()
    transport = SimpleNamespace(conns={reader: "m"})
    got = LocalTransport.receive(transport, 0.5)  # type: ignore[arg-type]
    assert [type(m).__name__ for m in got] == ["Alive"] * 3 + ["Failed"]
    assert "bonus" in got[-1].detail
