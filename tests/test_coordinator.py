"""The coordinator's judgement of silent members, on a clock the test moves: a member building
stage by stage is not hung, one stuck in a stage is (named with the stage), and time in which
the coordinator itself could not listen is not counted against anyone. And the member side: a
member reports each stage of its build before it says it has started."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from wheeler2.config import load
from wheeler2.runtime import coordinator as coord
from wheeler2.runtime.coordinator import POLL_S, STALL_S, START_GRACE_S, Coordinator, prepare
from wheeler2.runtime.messages import Alive, Building, Figures, Message, Started
from wheeler2.runtime.serial import SerialTransport

HEARTBEAT_S = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class FakeTransport:
    """Messages the test queues; a receive may take ``block`` seconds of the clock (a transport
    call that blocked, or a coordinator that was not scheduled)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queue: list[Message] = []
        self.block = 0.0
        self.killed: list[str] = []

    def receive(self, timeout: float) -> list[Message]:
        self.clock.now += self.block or timeout
        self.block = 0.0
        out, self.queue = self.queue, []
        return out

    def failures(self) -> dict[str, str]:
        return {}

    def env_steps(self) -> int:
        return 0

    def kill(self, name: str) -> None:
        self.killed.append(name)

    def open(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(coord, "time", clock)
    return clock


def coordinator(tmp_path: Path, clock: Clock) -> tuple[Coordinator, FakeTransport]:
    transport = FakeTransport(clock)
    config = SimpleNamespace(experiment=SimpleNamespace(heartbeat_s=HEARTBEAT_S, backend="local"))
    recorder = SimpleNamespace(
        run_dir=tmp_path, report=lambda name, steps, values: values, team_started=lambda: None
    )
    names = ["target", "explorer"]
    c = Coordinator(config, recorder, transport, names, {"target": "main"}, {})  # type: ignore[arg-type]
    return c, transport


def look(c: Coordinator, transport: FakeTransport, *messages: Message) -> str | None:
    """One turn of the coordinator's loop (supervise's order) with these messages arriving."""
    transport.queue.extend(messages)
    c._receive(POLL_S)
    c._discount_stall()
    return c._find_failure()


def started(name: str) -> Started:
    return Started(member=name, pid=1, agents=None, synced=())


def pass_time(c: Coordinator, transport: FakeTransport, seconds: float, *beats: str) -> None:
    """``seconds`` of normal loops, or fewer if a member is found failed; the members in
    ``beats`` send a heartbeat each loop."""
    end = transport.clock.now + seconds
    while transport.clock.now < end:
        if look(c, transport, *(Figures(n, {}) for n in beats)) is not None:
            return


def test_each_stage_of_a_slow_start_gets_the_start_grace(tmp_path: Path, clock: Clock) -> None:
    c, transport = coordinator(tmp_path, clock)
    stages = ["building its envs", "building its agent", "attaching the replay"]
    # Three stages of 100 s each: 300 s without Started, far past one grace, is not a hang.
    for stage in stages:
        pass_time(c, transport, 100, "explorer")
        assert look(c, transport, Building("target", stage)) is None
    pass_time(c, transport, START_GRACE_S - 5, "explorer")
    assert not transport.killed
    # Stuck in the last stage: caught once a grace has passed since it said so, named.
    pass_time(c, transport, 10, "explorer")
    assert transport.killed == ["target"]
    detail = c.errors["target"].detail
    assert "while attaching the replay" in detail and c.errors["target"].how == "hangs", detail


def test_a_member_that_never_says_anything_is_caught_after_the_grace(
    tmp_path: Path, clock: Clock
) -> None:
    c, transport = coordinator(tmp_path, clock)
    pass_time(c, transport, START_GRACE_S + 1, "explorer")
    assert transport.killed == ["target"]
    assert "while starting up" in c.errors["target"].detail


def test_time_the_coordinator_did_not_listen_is_not_silence(tmp_path: Path, clock: Clock) -> None:
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("target"), started("explorer")) is None
    pass_time(c, transport, 10, "target", "explorer")
    # One receive blocked for 200 s (a starved driver, a transport call that hung): what the
    # members sent meanwhile was not heard, and nobody is taken for hung because of it.
    transport.block = 200.0
    assert look(c, transport) is None
    assert not transport.killed
    # The members' clocks moved on by the stall (less the STALL_S a loop may take), no further:
    # the explorer, silent from here, is caught a heartbeat later, while the target reports.
    pass_time(c, transport, HEARTBEAT_S - STALL_S - 1, "target")
    assert not transport.killed
    pass_time(c, transport, 5, "target")
    assert transport.killed == ["explorer"]
    detail = c.errors["explorer"].detail
    assert f"heartbeat_s = {HEARTBEAT_S:g}" in detail and "hangs" in detail, detail


@pytest.mark.parametrize("load", [0.5, 9.0])
def test_a_silent_member_on_a_loaded_machine_is_told_how_to_give_it_longer(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, load: float
) -> None:
    """Kept off the CPU, a member is as silent as a hung one: the verdict says which fix
    applies when the machine runs more than it has cores, and only then."""
    import wheeler2.liveness as liveness

    monkeypatch.setattr(liveness.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(liveness.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("target"), started("explorer")) is None
    pass_time(c, transport, HEARTBEAT_S + 5, "target")
    assert transport.killed == ["explorer"]
    detail = c.errors["explorer"].detail
    hint = "load average 9.0 on 2 cores" in detail and "--set experiment.heartbeat_s=" in detail
    assert hint == (load > 2), detail


def test_a_member_heard_during_a_stall_is_not_given_extra_time(
    tmp_path: Path, clock: Clock
) -> None:
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("target"), started("explorer")) is None
    transport.block = 100.0
    # Its report arrives with the stalled receive: seen now, and the stall is not added on top.
    assert look(c, transport, Figures("explorer", {}), Figures("target", {})) is None
    pass_time(c, transport, HEARTBEAT_S + 1, "target")
    assert transport.killed == ["explorer"]


def beat_for(c: Coordinator, transport: FakeTransport, seconds: float, cpu_per_s: float) -> None:
    """The target starting: a beat a second with its CPU time growing by ``cpu_per_s`` a
    second; the explorer, started, reports every loop."""
    end = transport.clock.now + seconds
    cpu = 0.0
    while transport.clock.now < end:
        cpu += cpu_per_s
        if look(c, transport, Alive("target", cpu)) is not None:
            return
        pass_time(c, transport, 1.0 - POLL_S, "explorer")


def test_a_start_that_computes_is_never_taken_for_a_hang(tmp_path: Path, clock: Clock) -> None:
    """Imports on a loaded machine: ten start graces without a word but its beats, its CPU
    time growing (a tenth of a core), and it is still waited for."""
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("explorer")) is None
    beat_for(c, transport, 10 * START_GRACE_S, cpu_per_s=0.1)
    assert not transport.killed


def test_a_start_that_beats_but_stands_still_is_caught_after_the_grace(
    tmp_path: Path, clock: Clock
) -> None:
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("explorer"), Building("target", "building its envs")) is None
    beat_for(c, transport, START_GRACE_S - 5, cpu_per_s=0.0)
    assert not transport.killed
    beat_for(c, transport, 10, cpu_per_s=0.0)
    assert transport.killed == ["target"]
    detail = c.errors["target"].detail
    assert "used no CPU for" in detail and "while building its envs" in detail, detail


def test_a_start_that_beat_and_fell_silent_is_caught_after_a_heartbeat(
    tmp_path: Path, clock: Clock
) -> None:
    """SIGSTOP while importing: its beats stop, and a heartbeat later (not a start grace) it is
    named."""
    c, transport = coordinator(tmp_path, clock)
    assert look(c, transport, started("explorer")) is None
    beat_for(c, transport, 5, cpu_per_s=0.5)
    pass_time(c, transport, HEARTBEAT_S - 2, "explorer")
    assert not transport.killed
    pass_time(c, transport, 4, "explorer")
    assert transport.killed == ["target"]
    assert f"heartbeat_s = {HEARTBEAT_S:g}): it hangs (stopped)" in c.errors["target"].detail


TEAM = """
[experiment]
name = "stages"
seed = 0
total_steps = 200
eval_every = 1_000
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
hidden = [8]

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
sync = { every = 50, keep = ["actor.head"] }
[team.params]
hidden = [8]
activation = "relu"
n_steps = 32
batch_size = 32
"""


def test_a_member_reports_each_stage_of_its_build_before_it_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "team.toml"
    cfg.write_text(TEAM)
    config = load(cfg)
    transport = SerialTransport(config, prepare(config, tmp_path, False).setup, {})
    try:
        transport.start(tmp_path, next_eval=1_000)
        said: dict[str, list[str]] = {}
        for m in transport.inbox:
            said.setdefault(m.member, []).append(
                m.stage if isinstance(m, Building) else type(m).__name__
            )
    finally:
        transport.close()
    built = ["building its envs", "building its agent", "attaching the replay"]
    assert said == {
        "target": [*built, "building its eval envs", "Started"],
        "explorer": [*built, "taking the learner's weights", "Started"],
    }


def test_a_report_without_losses_keeps_the_last_ones_in_the_table_and_summary(
    tmp_path: Path, clock: Clock
) -> None:
    """A learner's report carries the mean losses of the updates since its last one: none came
    between two reports on a loaded machine, so the second has no losses. The live table and
    the summary read the coordinator's figures, which must keep the last ones."""
    c, transport = coordinator(tmp_path, clock)
    look(c, transport, Figures("target", {"updates": 10.0, "critic_loss": 0.5}))
    look(c, transport, Figures("target", {"updates": 10.0, "env_steps": 99.0}))
    assert c.figures["target"] == {"updates": 10.0, "critic_loss": 0.5, "env_steps": 99.0}


def test_the_resume_hint_gives_the_steps_a_resume_goes_on_from(
    tmp_path: Path, clock: Clock
) -> None:
    """A resume starts each member from its saved state and the steps it had taken with it. A
    learner reported hung left its last reported state, older than the stop: the hint said the
    counter's 85,168 while the resume went on from 80,001."""
    c, _ = coordinator(tmp_path, clock)
    c.recorder.state = SimpleNamespace(env_steps=85_168)  # type: ignore[attr-defined]
    c.steps = {"target": 40_001, "explorer": 40_000}
    assert c._resume_hint() == (
        "checkpoint at 80,001 env steps (the members' last saved states; the run had taken "
        f"85,168); continue with: wheeler2 resume {tmp_path}"
    )
    c.steps["explorer"] = 45_167  # every member's state is as recent as the stop
    assert c._resume_hint().startswith("checkpoint at 85,168 env steps; continue with:")
