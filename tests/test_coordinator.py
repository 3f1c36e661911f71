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
from wheeler2.runtime.messages import Building, Figures, Message, Started
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
    config = SimpleNamespace(experiment=SimpleNamespace(heartbeat_s=HEARTBEAT_S))
    recorder = SimpleNamespace(run_dir=tmp_path, scalars=lambda *args: None)
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
