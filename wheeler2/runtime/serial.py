"""Backend ``serial``: every member in this process, stepped in turn. For debugging and tests,
and the fastest choice for a lone learner: no process boundary, no lock contention.

The members are the same :class:`~wheeler2.runtime.member.MemberLoop` every backend runs; this
module only decides that they run here, one tick each per round, and that their messages go into
a list the coordinator reads. A member stuck in one tick (an env that never returns) is stopped
by an alarm after ``heartbeat_s``, the serial form of the other backends' heartbeat.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2 import checkpoint as ckpt
from wheeler2.liveness import starved_hint
from wheeler2.process import set_compute_threads
from wheeler2.runtime.budget import REQUEST, STAGE, STOP, CountingBudget, new_block, run_steps
from wheeler2.runtime.coordinator import prepare, run_team
from wheeler2.runtime.curriculum import saved_stage
from wheeler2.runtime.member import MemberLoop, Wiring, failed
from wheeler2.runtime.messages import Failed, Figures, Message
from wheeler2.runtime.opponents import OtherTable
from wheeler2.runtime.replays import make_replay, own_replay_spec
from wheeler2.runtime.restore import member_payload, saved_replay
from wheeler2.runtime.team import TeamSetup

if TYPE_CHECKING:
    from wheeler2.buffer import Replay
    from wheeler2.config import Config
    from wheeler2.shared import SharedBlock
    from wheeler2.sync import WeightPublisher


class _Hung(Exception):
    pass


class _ListLink:
    def __init__(self, inbox: list[Message], beat: Callable[[], None]) -> None:
        self.inbox = inbox
        self.beat = beat

    def send(self, message: Message) -> None:
        self.inbox.append(message)
        if isinstance(message, Figures):
            self.beat()  # a member that reports is not stuck, however long its tick

    def opened(self) -> None:
        pass  # the serial transport imported what a first update needs before the first tick


class SerialTransport:
    """Members as loops in this process; ``receive`` runs one round of ticks."""

    def __init__(self, config: Config, setup: TeamSetup, payload: dict[str, Any]) -> None:
        from wheeler2.sync import WeightClient, WeightPublisher

        self.config = config
        self.heartbeat_s = float(config.experiment.heartbeat_s)
        self.inbox: list[Message] = []
        self.replays: dict[str, Replay] = {}  # table -> replay (an on-policy learner's: none)
        self.publishers: dict[str, WeightPublisher] = {}  # table -> its learner's, where one syncs
        self.shared: dict[str, SharedBlock] = {}  # table -> its shared parameters (A3C)
        self.loops: dict[str, MemberLoop] = {}
        self.wirings: dict[str, Wiring] = {}
        self.done: set[str] = set()
        self.setup = setup
        self.rng = payload.get("rng")
        self._alarm_previous: Any = None
        self._alarmed = False
        self._in_round = False
        plans = setup.plans
        steps = [member_payload(payload, p.name)[1] for p in plans]
        self.block = new_block(steps, stage=saved_stage(config, payload))
        total = int(config.experiment.total_steps)
        # One process: insert every step (chunk 1) so a transition is sampleable at once, as in
        # a classic loop; HER needs whole episodes, collected by the writer.
        chunk = None if config.buffer.her is not None else 1
        try:
            for table in setup.tables:
                if table.uses_replay:
                    replay = make_replay(config, table, chunk=chunk)
                    self.replays[table.name] = replay
                    saved = saved_replay(payload, table)
                    if saved is not None:
                        replay.load_state_dict(saved)
                if table.syncs or config.play.joint:  # joint play: other tables pull it too
                    publisher = WeightPublisher.create(table.published)
                    publisher.publish(table.published)
                    self.publishers[table.name] = publisher
            self.shared = setup.shared_blocks()
            for p in plans:
                state, env_steps = member_payload(payload, p.name)
                table_name = p.spec.table
                published = self.publishers.get(table_name)
                source = None
                if published is not None and p.spec.sync is not None:
                    sync = p.spec.sync
                    source = WeightClient.factory(
                        published.handle(), sync.keep, float(sync.alpha), p.name
                    )
                self.wirings[p.name] = Wiring(
                    budget=CountingBudget(self.block, None, p.index, total),
                    link=_ListLink(self.inbox, self._beat),
                    replay=self.replays.get(table_name),
                    own_process=False,
                    sole=len(plans) == 1,
                    sink=published if p.role == "learner" else None,
                    own=own_replay_spec(config, setup.table_of(p), chunk)
                    if p.role == "learner"
                    else None,
                    source=source,
                    state=state,
                    env_steps=env_steps,
                    others=self._others(table_name, p.name),
                    shared=self.shared.get(table_name) if setup.table_of(p).shares(p) else None,
                )
        except BaseException:
            self.close()
            raise

    def _others(self, own: str, member: str) -> dict[str, OtherTable]:
        """Joint play: every other table's weights and replay, in this one process."""
        from wheeler2.sync import WeightClient

        if not self.config.play.joint:
            return {}
        return {
            name: OtherTable(
                WeightClient.factory(publisher.handle(), (), 1.0, member),
                self.replays.get(name),
            )
            for name, publisher in self.publishers.items()
            if name != own
        }

    def start(self, run_dir: Path, next_eval: int) -> None:
        if threading.current_thread() is threading.main_thread():  # signals reach only it
            self._alarm_previous = signal.signal(signal.SIGALRM, self._fire)
            self._alarmed = True
        for p in self.setup.plans:
            wiring = self.wirings[p.name]
            wiring.next_eval = next_eval
            self.loops[p.name] = MemberLoop(self.config, p, wiring)
        # What the first update imports (process.defer_dynamo_import), imported before the
        # ticks: a tick runs under the heartbeat alarm, and on a loaded machine this import
        # alone can take longer than heartbeat_s.
        import torch._dynamo  # noqa: F401

        # One process: its global RNG streams (random, numpy, torch) continue; the replay's own
        # sampling generator restarts from the seed, as on every backend.
        if self.rng is not None:
            ckpt.set_rng_state(self.rng)

    # -- Transport --
    def receive(self, timeout: float) -> list[Message]:
        # One alarm per round of ticks (two syscalls), not per tick: a member stuck in its step
        # is caught heartbeat_s after the round began.
        self._arm(self.heartbeat_s)
        self._in_round = True
        try:
            self._round()
        finally:
            self._in_round = False
            self._arm(0)
        out, self.inbox[:] = list(self.inbox), []
        return out

    def _beat(self) -> None:
        """A member's figures (its heartbeat) during a round: the alarm counts from them, so
        a long eval or the learner's owed updates, which report every 2 s, are not taken for a
        hang; a member stuck in its env sends none."""
        if self._in_round:
            self._arm(self.heartbeat_s)

    def _arm(self, seconds: float) -> None:
        if self._alarmed:
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def _fire(self, signum: int, frame: Any) -> None:
        raise _Hung

    def _round(self) -> None:
        for name, loop in self.loops.items():
            if name in self.done:
                continue
            try:
                going = loop.tick()
                if not going:
                    loop.finish()
            except _Hung:
                self.inbox.append(
                    Failed(
                        name,
                        f"sent nothing for {self.heartbeat_s:g} s (heartbeat_s): it hangs "
                        f"(stuck in its env or a step){starved_hint()}",
                        how="hangs",
                    )
                )
                going = False
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                self.inbox.append(failed(name, exc))
                going = False
            if not going:
                self.done.add(name)
                loop.close()

    def failures(self) -> dict[str, str]:
        return {}

    def env_steps(self) -> int:
        return run_steps(self.block)

    def request_states(self) -> int:
        self.block[REQUEST] += 1
        return int(self.block[REQUEST])

    def open(self) -> None:
        pass  # every loop is built in start(), before the first tick: the block starts open

    def release(self, table: str) -> None:
        pass  # one process: nobody waits on the gate

    def stop(self) -> None:
        self.block[STOP] = 1

    def kill(self, name: str) -> None:
        self.done.add(name)

    def set_stage(self, stage: int) -> None:
        self.block[STAGE] = stage

    def replay_state(self) -> dict[str, Any]:
        return {table: replay.state_dict() for table, replay in self.replays.items()}

    def close(self) -> None:
        if self._alarmed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._alarm_previous or signal.SIG_DFL)
            self._alarmed = False
        for name, loop in self.loops.items():
            if name not in self.done:
                loop.close()
        for publisher in self.publishers.values():
            publisher.close()
        for replay in self.replays.values():
            replay.close()
        for block in self.shared.values():
            block.close()


def run_serial(config: Config, run_dir: Path, resume: bool) -> dict[str, Any]:
    set_compute_threads()
    return run_team(config, run_dir, prepare(config, run_dir, resume), SerialTransport)
