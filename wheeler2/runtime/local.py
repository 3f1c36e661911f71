"""Backend ``local``: one process per member on this machine, started with ``multiprocess``.

The main process owns every shared resource (the central replay, the weight block, the budget
counters) and runs the :class:`~wheeler2.runtime.coordinator.Coordinator`; each member process
runs the one member loop (:func:`~wheeler2.runtime.member.run_member`). Shared memory and
processes are released in ``finally`` blocks on every path out.

Members talk to the coordinator through one-way pipes rather than a shared queue: a member killed
in the middle of a send can then break only its own pipe (seen as EOF) and never a lock that the
other members need.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiprocess.connection import wait

from wheeler2.liveness import StartBeat
from wheeler2.process import set_compute_threads, set_niceness
from wheeler2.runtime.budget import (
    OPEN,
    REQUEST,
    STAGE,
    STOP,
    CountingBudget,
    new_block,
    run_steps,
)
from wheeler2.runtime.coordinator import prepare, run_team
from wheeler2.runtime.curriculum import saved_stage
from wheeler2.runtime.messages import Message
from wheeler2.runtime.plan import MemberPlan
from wheeler2.runtime.replays import make_replay, own_replay_spec
from wheeler2.runtime.restore import member_payload, saved_replay
from wheeler2.runtime.team import TeamSetup

if TYPE_CHECKING:
    from wheeler2.buffer import Replay, ReplayHandle
    from wheeler2.config import Config
    from wheeler2.runtime.replays import ReplaySpec
    from wheeler2.shared import SharedBlock, SharedHandle
    from wheeler2.sync import WeightHandle, WeightPublisher

RECEIVE_MAX = 256  # messages taken from one member in one receive


@dataclass
class MemberArgs:
    """Everything a member process needs, picklable."""

    config: Config
    plan: MemberPlan
    replay: ReplayHandle | None  # the member's table's (none for an on-policy learner's table)
    weights: WeightHandle  # its table's weight block (every table has one here)
    own: ReplaySpec | None  # a learner's own table ([buffer] own_share), or None
    block: Any  # the budget counters
    lock: Any
    conn: Any
    state: dict[str, Any] | None
    env_steps: int
    next_eval: int
    inherited: Inherited  # the coordinator's stdout, stderr and the lifeline's read end
    environ: dict[str, str]  # the coordinator's, as spawn would have given it
    # Joint play: every other table's weight block and replay (None: on-policy, no replay).
    others: dict[str, tuple[WeightHandle, ReplayHandle | None]] | None = None
    shared: SharedHandle | None = None  # its table's shared parameters, where it shares them


class Inherited:
    """File descriptors a member takes from the coordinator as it starts: its stdout and stderr
    at that moment (a fork server's own were those of whoever started it) and the read end of
    the lifeline, a pipe whose only write end the coordinator holds."""

    def __init__(self, fds: dict[str, int]) -> None:
        self.fds = fds

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocess.reduction import DupFd

        # Only while a process is being started: the fds travel with it (spawn's pass_fds, or
        # the fork server's SCM_RIGHTS).
        return (_received, ({k: DupFd(fd) for k, fd in self.fds.items()},))


def _received(dups: dict[str, Any]) -> Inherited:
    return Inherited({k: d.detach() for k, d in dups.items()})


# -- inside a member process --
def member_main(args: MemberArgs) -> None:
    # Ctrl-C reaches the whole process group; the coordinator alone decides how the team stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _take_over(args)
    link = StartBeat(args.conn.send, args.plan.name)  # heard from before any import
    try:
        _run(args, link)
    except BaseException as exc:
        from wheeler2.runtime.member import failed

        try:
            link.send(failed(args.plan.name, exc))
        except (BrokenPipeError, EOFError, OSError):
            pass  # the coordinator is gone (it was killed): there is nobody left to tell
        # The coordinator prints the traceback it was sent; a plain exit avoids a second copy.
        sys.exit(1)
    finally:
        args.conn.close()


def _take_over(args: MemberArgs) -> None:
    """Become the coordinator's child in all but name: its environment and output, and death
    with it. The fork server that forked this member is not the coordinator, so no
    parent-death signal can tell; the lifeline does: when the coordinator's process ends, even
    by SIGKILL, the kernel closes its write end and the read here returns EOF. Otherwise a
    member waiting on the ratio gate would only notice after the gate's timeout, with nobody
    left to tell (its shared memory is freed by the next run's sweep)."""
    os.environ.clear()
    os.environ.update(args.environ)
    fds = args.inherited.fds
    for name, target in (("stdout", 1), ("stderr", 2)):
        os.dup2(fds[name], target)
        os.close(fds[name])
    lifeline = fds["lifeline"]

    def watch() -> None:
        while True:
            try:
                if not os.read(lifeline, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os.kill(os.getpid(), signal.SIGTERM)  # SIG_DFL here: gone at once, wherever it was

    threading.Thread(target=watch, name="wheeler2-lifeline", daemon=True).start()


def _run(args: MemberArgs, link: StartBeat) -> None:
    from wheeler2.buffer import Replay
    from wheeler2.runtime.member import Wiring, run_member
    from wheeler2.runtime.opponents import OtherTable
    from wheeler2.shared import SharedBlock
    from wheeler2.sync import WeightClient, WeightPublisher

    set_compute_threads()
    plan, config = args.plan, args.config
    set_niceness(plan.spec.nice)
    replay = None if args.replay is None else Replay.attach(args.replay)
    sink = shared = None
    attached: list[Replay] = []
    try:
        # Inside the try: a block that fails to attach still lets the replay go.
        shared = None if args.shared is None else SharedBlock.attach(args.shared)
        others = {}
        for table, (weights, handle) in (args.others or {}).items():
            other = None if handle is None else Replay.attach(handle)
            if other is not None:
                attached.append(other)
            others[table] = OtherTable(WeightClient.factory(weights, (), 1.0, plan.name), other)
        source = None
        if plan.role == "learner":
            sink = WeightPublisher.attach(args.weights)
        elif plan.spec.sync is not None:
            sync = plan.spec.sync
            source = WeightClient.factory(args.weights, sync.keep, float(sync.alpha), plan.name)

        wiring = Wiring(
            budget=CountingBudget(args.block, args.lock, plan.index, config.experiment.total_steps),
            link=link,
            replay=replay,
            own_process=True,
            sink=sink,
            own=args.own,
            source=source,
            state=args.state,
            env_steps=args.env_steps,
            next_eval=args.next_eval,
            others=others,
            shared=shared,
        )
        run_member(config, plan, wiring)
    finally:
        for res in (sink, replay, shared, *attached):
            if res is not None:
                res.close()


# -- the coordinator's side --
class LocalTransport:
    """Member processes, their pipes and the shared resources the main process owns."""

    def __init__(self, config: Config, setup: TeamSetup, payload: dict[str, Any]) -> None:
        from wheeler2.preload import member_context
        from wheeler2.sync import WeightPublisher

        self.ctx = member_context()
        # Its write end stays here alone (os.pipe is close-on-exec, and members get only the
        # read end): it closes when this process ends, however it ends.
        self.lifeline_r, self.lifeline_w = os.pipe()
        self.config = config
        self.setup = setup
        self.payload = payload
        self.procs: dict[str, Any] = {}
        self.conns: dict[Any, str] = {}
        self.replays: dict[str, Replay] = {}  # table -> replay (an on-policy learner's: none)
        self.publishers: dict[str, WeightPublisher] = {}  # table -> its learner's weights
        self.shared: dict[str, SharedBlock] = {}  # table -> its shared parameters (A3C)
        steps = [member_payload(payload, p.name)[1] for p in setup.plans]
        stage = saved_stage(config, payload)
        self.block = new_block(steps, shared=self.ctx, opened=False, stage=stage)
        self.lock = self.ctx.Lock()
        try:
            for table in setup.tables:
                if table.uses_replay:
                    replay = self.replays[table.name] = make_replay(config, table)
                    saved = saved_replay(payload, table)
                    if saved is not None:
                        replay.load_state_dict(saved)
                publisher = WeightPublisher.create(table.published)
                self.publishers[table.name] = publisher
                publisher.publish(table.published)
            self.shared = setup.shared_blocks()
        except BaseException:
            self.close()
            raise

    def start(self, run_dir: Path, next_eval: int) -> None:
        for p in self.setup.plans:
            state, env_steps = member_payload(self.payload, p.name)
            replay = self.replays.get(p.spec.table)
            reader, writer_end = self.ctx.Pipe(duplex=False)
            args = MemberArgs(
                config=self.config,
                plan=p,
                replay=None if replay is None else replay.handle(),
                weights=self.publishers[p.spec.table].handle(),
                own=own_replay_spec(self.config, self.setup.table_of(p))
                if p.role == "learner"
                else None,
                block=self.block,
                lock=self.lock,
                conn=writer_end,
                state=state,
                env_steps=env_steps,
                next_eval=next_eval,
                inherited=Inherited({"stdout": 1, "stderr": 2, "lifeline": self.lifeline_r}),
                environ=dict(os.environ),
                others=self._others(p.spec.table),
                shared=self._shared_handle(p),
            )
            proc = self.ctx.Process(
                target=member_main, args=(args,), name=f"wheeler2-{p.name}", daemon=True
            )
            with _stops_held(spawned=self.ctx.get_start_method() != "forkserver"):
                proc.start()
                writer_end.close()
                self.procs[p.name] = proc
                self.conns[reader] = p.name
        os.close(self.lifeline_r)  # every member holds its own copy now
        self.lifeline_r = -1

    def _shared_handle(self, plan: MemberPlan) -> SharedHandle | None:
        block = self.shared.get(plan.spec.table)
        shares = block is not None and self.setup.table_of(plan).shares(plan)
        return block.handle() if block is not None and shares else None

    def _others(self, own: str) -> dict[str, tuple[WeightHandle, ReplayHandle | None]]:
        if not self.config.play.joint:
            return {}
        out = {}
        for table in self.setup.tables:
            if table.name != own:
                replay = self.replays.get(table.name)
                handle = None if replay is None else replay.handle()
                out[table.name] = (self.publishers[table.name].handle(), handle)
        return out

    # -- Transport --
    def receive(self, timeout: float) -> list[Message]:
        out = []
        for conn in wait(list(self.conns), timeout=timeout):
            # Everything a member has sent, not one message: a member that raised queues its
            # Failed behind its last figures, and exits before the next call. Bounded, so one
            # chatty member cannot hold the coordinator.
            try:
                for _ in range(RECEIVE_MAX):
                    out.append(conn.recv())
                    if not conn.poll():
                        break
            except (EOFError, OSError):
                del self.conns[conn]  # closed: finished, or died (failures() tells which)
        return out

    def failures(self) -> dict[str, str]:
        return {
            name: f"exit code {proc.exitcode}"
            for name, proc in self.procs.items()
            if not proc.is_alive() and proc.exitcode not in (0, None)
        }

    def env_steps(self) -> int:
        return run_steps(self.block)

    def request_states(self) -> int:
        self.block[REQUEST] += 1
        return int(self.block[REQUEST])

    def open(self) -> None:
        self.block[OPEN] = 1

    def release(self, table: str) -> None:
        if table in self.replays:
            self.replays[table].release()

    def stop(self) -> None:
        self.block[STOP] = 1
        for table in self.replays:
            self.release(table)

    def kill(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.is_alive():
            proc.kill()  # SIGKILL: a stopped (SIGSTOP) process ignores everything else
            proc.join(timeout=5)

    def set_stage(self, stage: int) -> None:
        # One aligned word, written by the coordinator alone: members read it without the lock.
        self.block[STAGE] = stage

    def replay_state(self) -> dict[str, dict[str, Any]]:
        return {table: replay.state_dict() for table, replay in self.replays.items()}

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs.values():
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self.conns:
            conn.close()
        for publisher in self.publishers.values():
            publisher.close()
        for replay in self.replays.values():
            replay.close()
        for block in self.shared.values():
            block.close()
        for fd in (self.lifeline_r, self.lifeline_w):
            if fd >= 0:
                os.close(fd)
        self.lifeline_r = self.lifeline_w = -1


@contextlib.contextmanager
def _stops_held(spawned: bool) -> Iterator[None]:
    """A member's start and its registration as one step for Ctrl-C and SIGTERM.

    A stop raised inside ``Process.start`` can land after the fork server has forked the
    member and before its pid is back: a process ``close`` does not know of, which then fails
    to open the run's semaphores (gone with the run) and prints a traceback. Held here, the
    stop is raised once the member is registered, and ``close`` ends it.

    A spawned child takes this process's ignored signals with it (a fork server's children
    take the server's, wheeler2/preload.py), so for spawn Ctrl-C is ignored during the start
    instead: a Ctrl-C at the terminal reaches the whole group, and a member still importing
    torch would die with a traceback. That Ctrl-C is lost; the fork server (the default) loses
    none.
    """
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    handlers = {signal.SIGTERM: hold, signal.SIGINT: signal.SIG_IGN if spawned else hold}
    previous = {sig: signal.getsignal(sig) for sig in handlers}
    try:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if held:
        signal.raise_signal(held[0])  # its own handler now: the run's stop, as if just sent


def run_local(config: Config, run_dir: Path, resume: bool) -> dict[str, Any]:
    return run_team(config, run_dir, prepare(config, run_dir, resume), LocalTransport)
