"""The coordinator: one loop for every backend that reads the members' messages, records evals,
assembles checkpoints, notices members that died or hang, and stops the team.

Where members run and how their messages travel is a :class:`Transport`, the only thing a
backend writes (``serial``: members stepped in this process; ``local``: one process and pipe
per member; ``ray``: actors and a board). Paths out are the same everywhere: a member that
raised, died or stopped sending heartbeats ends the run with :class:`MemberFailed` naming it
(exit 1); Ctrl-C / SIGTERM end it with ``KeyboardInterrupt`` (exit 130); a callback that raised
(``wheeler2.run(..., callbacks=...)``) with its ``CallbackError``. All write a final checkpoint
and summary first, as do the early stops: ``stop_at_threshold`` and a callback's ``STOP``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2.callbacks import current as current_callbacks
from wheeler2.liveness import starved_hint
from wheeler2.log import write_json_atomic
from wheeler2.runtime.curriculum import next_stage
from wheeler2.runtime.experiment import (
    MemberFailed,
    Recorder,
    RunState,
    first_eval,
    interrupt_on_sigterm,
    load_resume_state,
    shield_shutdown,
)
from wheeler2.runtime.heads import resolved_heads_config
from wheeler2.runtime.messages import (
    Alive,
    Building,
    Evaluated,
    Failed,
    Figures,
    Finished,
    Message,
    Started,
    StateReply,
)
from wheeler2.runtime.protocols import Backend, Transport
from wheeler2.runtime.team import TeamSetup, prepare_team

if TYPE_CHECKING:
    from wheeler2.config import Config

STOP_GRACE_S = 10.0  # members get this long to finish a step and send their final state
POLL_S = 0.1
FAILED_GRACE_S = 2.0  # a member that exited gets this long for its Failed message to arrive
# A member that has not reported Started and was never heard from (its process not yet running,
# or a Ray worker not yet scheduled) gets this long; one whose start-up beats come
# (wheeler2.liveness) may take as long as its CPU time grows, and this long in a stage where it
# does not (waiting on a Unity build's launch, env subprocesses, a lock).
START_GRACE_S = 120.0
CPU_EPS_S = 0.01  # less CPU than this between two beats is a member standing still
# A loop of the coordinator takes POLL_S and a little work; one that took longer than this did
# not listen (its process starved, a checkpoint written, a transport call that blocked).
STALL_S = 2.0


class Coordinator:
    def __init__(
        self,
        config: Config,
        recorder: Recorder,
        transport: Transport,
        names: list[str],
        learners: dict[str, str],
        payload: dict[str, Any],
    ) -> None:
        """``learners``: each table's learner -> its table, the lead (the run's evals) first."""
        self.config = config
        self.recorder = recorder
        self.transport = transport
        self.names = list(names)
        self.learners = dict(learners)
        self.lead = next(iter(learners))
        self.heartbeat_s = float(config.experiment.heartbeat_s)
        self.same_machine = config.experiment.backend != "ray"
        self.states: dict[str, Any] = dict(payload.get("members") or {}) if payload else {}
        self.steps: dict[str, int] = dict(payload.get("member_steps") or {}) if payload else {}
        self.figures: dict[str, dict[str, Any]] = {}
        self.started: dict[str, Started] = {}
        self.finished: set[str] = set()
        self.errors: dict[str, Failed] = {}  # first failure of each member
        self.pending: tuple[int, set[str]] | None = None  # checkpoint being assembled
        now = time.monotonic()
        self.last_seen = {n: now for n in self.names}
        self.stage: dict[str, str] = {}  # what each member not yet started last said it does
        self.cpu: dict[str, float] = {}  # a starting member's CPU seconds at its last beat
        self.moved: dict[str, float] = {}  # when it last used CPU or began a stage
        self.listened = now  # when the loop last looked for silent members
        self.released: set[str] = set()  # tables whose gate no longer holds producers

    # -- the loop --
    def supervise(self) -> dict[str, Any]:
        interrupted = False
        failed: str | None = None
        try:
            while len(self.finished) < len(self.names):
                self._receive(POLL_S)
                self._discount_stall()
                failed = self._find_failure()
                if failed is not None or self.recorder.stop is not None:
                    break
                env_steps = self.transport.env_steps()
                self.recorder.state.env_steps = env_steps
                if self.pending is None and self.recorder.checkpoint_due(env_steps):
                    self.pending = (self.transport.request_states(), set())
                if self.recorder.log_due():
                    self.recorder.progress(env_steps, self.figures)
        except KeyboardInterrupt:
            interrupted = True
        shield_shutdown(quiet=not (interrupted or failed))
        failure = None if failed is None else f"member {failed!r} {self.errors[failed].how}"
        if failure is not None:
            print(f"\n{failure}; stopping the team", flush=True)
        elif not interrupted and self.recorder.stop is not None:
            print(f"\nstopping: {self.recorder.stop['reason']}", flush=True)
        self.transport.stop()
        self.released.update(self.learners.values())
        self._drain(STOP_GRACE_S)
        late = self._running()
        for name in sorted(late):
            # Its last reported state, not its final one, goes into the checkpoint.
            print(
                f"member {name!r} sent no final state within {STOP_GRACE_S:g} s of the stop; "
                "the checkpoint keeps its last reported state",
                flush=True,
            )
        self.recorder.state.env_steps = self.transport.env_steps()
        self.recorder.save_checkpoint(self._payload())
        members = {
            n: {
                **self.figures.get(n, {}),
                **(self.started[n].where if n in self.started else {}),
                "ended": "failed" if n in self.errors else "cut off" if n in late else "finished",
            }
            for n in self.names
        }
        summary = self.recorder.finish(members, interrupted=interrupted, failure=failure)
        if failed is not None:
            detail = self.errors[failed].detail
            print(f"member {failed!r} failed; the team was stopped and checkpointed.\n{detail}")
            print(self._resume_hint(), flush=True)
            raise MemberFailed(failed, detail)
        if interrupted:
            print(self._resume_hint(), flush=True)
            raise KeyboardInterrupt
        error = self.recorder.callbacks.error
        if error is not None:
            print(f"{error}\n{self._resume_hint()}", flush=True)
            raise error
        return summary

    def _resume_hint(self) -> str:
        # A resume goes on from the members' saved states and the steps each had taken with
        # them: behind the run's counter where a member's last state is older than the stop
        # (the member that failed, one cut off), so that is the figure a user is told.
        kept, taken = sum(self.steps.values()), self.recorder.state.env_steps
        at = f"checkpoint at {kept:,} env steps"
        if kept < taken:
            at += f" (the members' last saved states; the run had taken {taken:,})"
        return f"{at}; continue with: wheeler2 resume {self.recorder.run_dir}"

    def _receive(self, timeout: float) -> None:
        for message in self.transport.receive(timeout):
            self._handle(message)

    def _handle(self, message: Message) -> None:
        name = message.member
        self.last_seen[name] = time.monotonic()
        if isinstance(message, Figures):
            named = self.recorder.report(name, self.transport.env_steps(), message.values)
            # Merged, not replaced: a report between which no update came carries no losses
            # (the trainer's means are of the updates since its last report), and the table
            # and the summary keep the last ones rather than going blank.
            self.figures[name] = {**self.figures.get(name, {}), **named}
        elif isinstance(message, Evaluated):
            recorder = self.recorder
            recorder.state.env_steps = max(self.transport.env_steps(), message.env_steps)
            # Its state and its own steps together: a checkpoint pairs them for a resume.
            self.states[name], self.steps[name] = message.state, message.own_steps
            if name in self.learners and name != self.lead:
                # Another table's learner: its own curve, not the run's.
                recorder.record_table_eval(
                    self.learners[name], name, message.env_steps, message.result
                )
                return
            if name != self.lead:  # an explorer or actor with evaluate = true
                recorder.record_member_eval(name, message.env_steps, message.result)
                return
            if recorder.record_eval(message.env_steps, message.result, name):
                # Before a stage change: best.pt's run state holds the stage this eval ran at.
                recorder.save_best(self._payload())
            if self.config.curriculum is not None:
                self._curriculum(message)
        elif isinstance(message, StateReply):
            self.states[name], self.steps[name] = message.state, message.env_steps
            if self.pending is not None and message.request == self.pending[0]:
                self.pending[1].add(name)
                if self.pending[1] >= self._running():
                    self.recorder.save_checkpoint(self._payload())
                    self.pending = None
        elif isinstance(message, Finished):
            self.states[name], self.steps[name] = message.state, message.env_steps
            self.finished.add(name)
            table = self.learners.get(name)
            if table is not None and table not in self.released:
                self.released.add(table)
                self.transport.release(table)
        elif isinstance(message, Alive):
            if message.cpu_s - self.cpu.get(name, -1.0) >= CPU_EPS_S:
                self.cpu[name] = message.cpu_s
                self.moved[name] = self.last_seen[name]
        elif isinstance(message, Building):
            self.stage[name] = message.stage
            self.moved[name] = self.last_seen[name]
        elif isinstance(message, Started):
            self.started[name] = message
            self._write_members()
            if len(self.started) == len(self.names):
                self.transport.open()
                self.recorder.team_started()
        elif isinstance(message, Failed):
            self.errors.setdefault(name, message)

    def _curriculum(self, message: Evaluated) -> None:
        """The lead's eval may move the run on to the next stage ([curriculum]); the members
        see it in the control block and apply it to their envs at their next step."""
        assert self.config.curriculum is not None
        stage = next_stage(
            self.config.curriculum, self.recorder.state.stage, message.result, message.stage
        )
        if stage != self.recorder.state.stage:
            self.transport.set_stage(stage)
        self.recorder.record_stage(message.env_steps, stage)

    def _running(self) -> set[str]:
        return set(self.names) - self.finished - set(self.errors)

    # -- faults --
    def _discount_stall(self) -> None:
        """A member is silent only for time in which the coordinator listened: a loop that
        stalled moves every member's clock on by the stall (never past now), so a loaded
        machine that starves the coordinator, or a transport call that blocks, does not make
        the members it could not hear look hung."""
        now = time.monotonic()
        stalled = now - self.listened - STALL_S
        self.listened = now
        if stalled > 0:
            for name, seen in self.last_seen.items():
                self.last_seen[name] = min(now, seen + stalled)

    def _find_failure(self) -> str | None:
        if self.errors:
            return next(iter(self.errors))
        gone = {n: how for n, how in self.transport.failures().items() if n not in self.finished}
        if gone:
            # A member that raised sends its traceback before it exits: give it a moment
            # (on a loaded machine, more than one receive may be needed to reach it).
            deadline = time.monotonic() + FAILED_GRACE_S
            while time.monotonic() < deadline:
                self._receive(POLL_S)
                if self.errors:
                    return next(iter(self.errors))
            name, how = next(iter(gone.items()))
            self.errors[name] = Failed(name, f"its process is gone ({how})", how="died")
            return name
        now = time.monotonic()
        for name in self._running():
            why = self._hangs(name, now)
            if why is not None:
                self.transport.kill(name)
                self.errors[name] = Failed(name, f"{why}; it was killed", how="hangs")
                return name
        return None

    def _hangs(self, name: str, now: float) -> str | None:
        """Why ``name`` looks hung, or None. A started member must report every heartbeat_s;
        so must a starting one that beats (wheeler2.liveness), which may also not stand still
        (use no CPU, begin no stage) for longer than the start grace. One that does not beat
        (not yet running) gets the start grace from whatever it last said."""
        silent = now - self.last_seen[name]
        hb = self.heartbeat_s
        nothing = f"sent nothing for {silent:.0f} s"
        if name in self.started:
            if silent <= hb:
                return None
            why = f"{nothing} (heartbeat_s = {hb:g}): it hangs (stopped, or stuck in its env)"
            return why + self._starved()
        stage = self.stage.get(name, "starting up (its process, imports)")
        if name not in self.cpu:
            limit = max(hb, START_GRACE_S)
            if silent <= limit:
                return None
            return f"{nothing} while {stage} (a start stage may take {limit:g} s): it hangs"
        if silent > hb:
            why = f"{nothing} while {stage} (heartbeat_s = {hb:g}): it hangs (stopped)"
            return why + self._starved()
        still = now - self.moved[name]
        if still <= START_GRACE_S:
            return None
        return (
            f"used no CPU for {still:.0f} s while {stage} (a start stage may wait "
            f"{START_GRACE_S:g} s): it hangs (stuck waiting)"
        )

    def _starved(self) -> str:
        """The loaded-machine hint for a silent member; none on ray, whose members run on
        other nodes, whose load this machine's does not tell."""
        return starved_hint() if self.same_machine else ""

    def _drain(self, grace_s: float) -> None:
        """After the stop: collect the final states of the members still running."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            gone = self.transport.failures()
            waiting = [n for n in self._running() if n not in gone]
            if not waiting:
                break
            self._receive(POLL_S)
        self._receive(0.0)

    def _payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"members": dict(self.states), "member_steps": dict(self.steps)}
        if self.config.buffer.checkpoint:
            # Read back by runtime.restore.saved_replay: the lead's table where it always was.
            replays = self.transport.replay_state()
            lead = replays.pop(self.learners[self.lead], None)
            if lead is not None:
                out["replay"] = lead
            if replays:
                out["table_replays"] = replays
        return out

    def _write_members(self) -> None:
        """Which process is which member, and what it drives and syncs, for a person (or a
        test) looking at the run from outside."""
        run_dir = self.recorder.run_dir
        started = self.started
        write_json_atomic(run_dir / "members.json", {n: s.pid for n, s in started.items()})
        team = {
            n: {
                "pid": s.pid,
                "agents": None if s.agents is None else list(s.agents),
                "synced": list(s.synced),
                **s.where,
            }
            for n, s in started.items()
        }
        write_json_atomic(run_dir / "team.json", team)


@dataclass
class Prepared:
    """A team settled in the driver, before any member or actor exists."""

    state: RunState
    payload: dict[str, Any]
    setup: TeamSetup


def prepare(config: Config, run_dir: Path, resume: bool) -> Prepared:
    """Read the checkpoint (resume), probe the env and build the learner: a bad team or
    checkpoint fails here, before anything is started or written."""
    from wheeler2.runtime.probe import check_against_env
    from wheeler2.trackers import check_trackers

    check_trackers(config.experiment.tracker, str(config.path))
    state, payload = load_resume_state(run_dir, config) if resume else (RunState(), {})
    setup = prepare_team(config, payload)
    # What `check` refuses, refused here too, with the env the team just probed: a buffer that
    # would not fit in memory must fail before a byte of shared memory is taken.
    check_against_env(config, [t.info for t in setup.tables if t.uses_replay])
    if resume:
        for line in refill_lines(config, payload, setup):
            print(line, flush=True)
    return Prepared(state, payload, setup)


def refill_lines(config: Config, payload: dict[str, Any], setup: TeamSetup) -> list[str]:
    """One line per resumed off-policy learner whose checkpoint has no replay (``[buffer]
    checkpoint = false``, the default): its table starts empty, and the learner takes no
    update until it holds ``max(learning_starts, batch_size)`` new transitions again (the
    replay's ``min_size``, counted from the resume). Its policy acts meanwhile (the warm-up's
    uniform actions are not repeated), and an eval in that stretch repeats the last one."""
    from wheeler2.runtime.plan import needs_of
    from wheeler2.runtime.replays import replay_config
    from wheeler2.runtime.restore import member_payload, saved_replay

    lines = []
    for table in setup.tables:
        resumed = member_payload(payload, table.lead.name)[0] is not None
        if not table.uses_replay or not resumed or saved_replay(payload, table) is not None:
            continue
        rows = replay_config(config, needs_of(table.lead)).min_size
        lines.append(
            f"{table.lead.name}: resumed without its replay: refilling {rows:,} transitions "
            "before learning (buffer.checkpoint = true keeps the replay in checkpoints)"
        )
    return lines


def _stopped_in_start_up(recorder: Recorder, exc: BaseException) -> None:
    """A run stopped (Ctrl-C, SIGTERM) or failed while its members were starting: its summary
    says so and its log and trackers close, as at any other stop. There is no new checkpoint:
    no member has a state yet (a resumed run keeps the one it came from)."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    failure = None if interrupted else f"start-up failed: {type(exc).__name__}: {exc}"
    try:
        recorder.finish({}, interrupted=interrupted, failure=failure)
    except Exception as late:  # noqa: BLE001 - the start-up error is the one to raise
        print(f"warning: could not write the summary: {late}", flush=True)


def run_team(
    config: Config,
    run_dir: Path,
    prepared: Prepared,
    open_transport: Callable[[Config, TeamSetup, dict[str, Any]], Backend],
) -> dict[str, Any]:
    """The one way every backend runs a team: open the transport (where members run), then the
    run directory, start the members and coordinate them to the end; close on every path."""
    setup, payload, state = prepared.setup, prepared.payload, prepared.state
    with interrupt_on_sigterm():
        transport = open_transport(config, setup, payload)
        try:
            heads_config = resolved_heads_config(config, setup.heads)
            recorder = Recorder(heads_config, run_dir, state, current_callbacks())
            # Said before anything long happens, so a user who stops the run knows where it is.
            print(f"run directory: {run_dir}", flush=True)
            try:
                transport.start(run_dir, first_eval(config, state.env_steps))
            except BaseException as exc:
                _stopped_in_start_up(recorder, exc)
                raise
            names = [p.name for p in setup.plans]
            learners = {t.lead.name: t.name for t in setup.tables}
            coordinator = Coordinator(config, recorder, transport, names, learners, payload)
            return coordinator.supervise()
        finally:
            transport.close()
