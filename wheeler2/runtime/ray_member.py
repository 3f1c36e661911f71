"""A team member on Ray: the :class:`Board` actor that connects the members with the driver, and
the :class:`MemberActor` that runs the one member loop with the board as its budget, its link and
its weight transport.

* the board carries the step budget, stop and checkpoint requests and the curriculum stage
  to members (all in the reply to the budget claims they make anyway), each table's learner's
  published weights (an object-store reference, versioned, per table name: a member is sent
  those of the tables it pulls), and the members' messages to the driver;
* the replay is :mod:`wheeler2.buffer.ray_shard` (shard actors behind the Replay interface).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from wheeler2.liveness import StartBeat
from wheeler2.process import set_compute_threads, set_niceness
from wheeler2.runtime.messages import Message

if TYPE_CHECKING:
    from torch import nn

    from wheeler2.buffer import Layout

GATE_POLL_S = 0.1  # how often a member at the start line asks the board whether it is open


def where() -> dict[str, Any]:
    """Where this process runs, for team.json, placement.json and summary.json."""
    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
    }


# --------------------------------------------------------------------------------------------
# the board: budget, stop, checkpoint requests, weights, messages


@ray.remote(num_cpus=0)
class Board:
    """Small shared state of a run. Every method is quick, so calls never queue for long."""

    def __init__(self, total_steps: int, member_steps: dict[str, int], stage: int = 0) -> None:
        self.total_steps = int(total_steps)
        self.granted = int(sum(member_steps.values()))
        self.steps = dict(member_steps)  # env steps each member reported having taken
        self.stopped = False
        self.opened = False  # the start line: no steps before every member has started
        self.request = 0
        self.stage = int(stage)  # the curriculum stage, set by the driver
        self.weights: dict[str, tuple[int, list[Any]]] = {}  # table -> (version, [reference])
        self.messages: list[Message] = []

    def claim(
        self, name: str, want: int, steps_done: int, give_back: int, versions: dict[str, int]
    ) -> dict[str, Any]:
        """Grant up to ``want`` more env steps (and take back ``give_back`` unused ones): the
        budget is exact because only the board hands it out. The reply also carries stop,
        checkpoint request, curriculum stage and the weights of each table in ``versions``
        (table -> the version the member holds) that are newer than the member's."""
        self.steps[name] = int(steps_done)
        self.granted -= int(give_back)
        closed = self.stopped or not self.opened
        granted = 0 if closed else max(0, min(want, self.total_steps - self.granted))
        self.granted += granted
        reply: dict[str, Any] = {
            "granted": granted,
            "total": self.granted,
            "stop": self.stopped,
            "open": self.opened,
            "request": self.request,
            "stage": self.stage,
            "others": sum(v for k, v in self.steps.items() if k != name),
        }
        newer = {
            table: held
            for table, held in self.weights.items()
            if table in versions and held[0] > versions[table]
        }
        if newer:
            reply["weights"] = newer
        return reply

    def set_weights(self, table: str, version: int, ref: list[Any]) -> None:
        # The reference comes wrapped in a list so that Ray hands over the reference itself.
        held = self.weights.get(table)
        if held is None or version > held[0]:
            self.weights[table] = (int(version), ref)

    def post(self, message: Message) -> None:
        self.messages.append(message)

    def drain(self) -> tuple[list[Message], dict[str, int]]:
        out, self.messages = self.messages, []
        return out, dict(self.steps)

    def ask_states(self) -> int:
        self.request += 1
        return self.request

    def stop(self) -> None:
        self.stopped = True

    def set_stage(self, stage: int) -> None:
        self.stage = int(stage)

    def open(self) -> None:
        self.opened = True

    def gate(self) -> tuple[bool, bool]:
        """(open, stopped): what a member at the start line waits on."""
        return self.opened, self.stopped

    def ping(self) -> bool:
        return True


# --------------------------------------------------------------------------------------------
# member side: the board as budget, link and weight transport


class BoardBudget:
    """The member's share of ``total_steps``, claimed from the board one block ahead, with one
    claim in flight so that stepping never waits for the board."""

    def __init__(self, board: Any, name: str, block: int, env_steps: int, stage: int = 0) -> None:
        self.board = board
        self.name = name
        self.block = block
        self.left = 0
        self.give_back = 0
        self.own = env_steps
        self.reply: dict[str, Any] = {
            "granted": 0,
            "total": 0,
            "stop": False,
            "open": False,
            "request": 0,
            "stage": int(stage),  # the run's stage at the start, until the first reply
            "others": 0,
        }
        # Table -> the newest (version, [reference]) the board sent, for the tables it pulls.
        self.weights: dict[str, tuple[int, list[Any]]] = {}
        self.wanted: set[str] = set()
        self.in_flight: Any = None
        self.done = False
        self.is_open = False
        self.next_gate = 0.0  # when a member at the start line may ask the board again

    def want(self, table: str) -> None:
        """Ask for ``table``'s weights with every claim from now on (a :class:`BoardSource`)."""
        self.wanted.add(table)

    def latest(self, table: str) -> tuple[int, list[Any]] | None:
        return self.weights.get(table)

    def _send_claim(self) -> None:
        versions = {t: self.weights[t][0] if t in self.weights else 0 for t in self.wanted}
        self.in_flight = self.board.claim.remote(
            self.name, self.block, self.own, self.give_back, versions
        )
        self.give_back = 0

    def _refill(self) -> bool:
        if self.in_flight is None:
            self._send_claim()
        reply = ray.get(self.in_flight)
        self.in_flight = None
        self.reply = reply
        if "weights" in reply:
            self.weights.update(reply["weights"])
        self.left += reply["granted"]
        if reply["stop"]:
            return False
        if not reply["granted"]:
            # Nothing left, unless the claim was answered before the start line opened.
            return not reply["open"]
        self._send_claim()
        return True

    def claim(self, n: int) -> bool:
        while self.left < n:
            if self.done or not self._refill():
                self.done = True
                if self.left:  # too few for a whole vector step: others may use them
                    ray.get(self.board.claim.remote(self.name, 0, self.own, self.left, {}))
                    self.left = 0
                return False
        self.left -= n
        return True

    def settle(self, claimed: int, used: int) -> None:
        self.own += used
        self.left += claimed - used

    def run_steps(self, own: int) -> int:
        """Own steps exactly, the others' as of the last claim (at most a block behind); once
        the budget is spent, everything the board handed out (the others finish their blocks
        without claiming again)."""
        steps = int(self.reply["others"]) + int(own)
        return max(steps, int(self.reply["total"])) if self.done else steps

    def stopped(self) -> bool:
        return bool(self.reply["stop"])

    def opened(self) -> bool:
        if self.is_open:  # every tick of the run asks: no clock read once the line is passed
            return True
        now = time.monotonic()
        if now >= self.next_gate:
            # A round trip to the board: not every tick, while the slowest member still starts.
            self.next_gate = now + GATE_POLL_S
            self.is_open, stop = ray.get(self.board.gate.remote())
            self.reply["stop"] = self.reply["stop"] or stop
        return self.is_open

    def request(self) -> int:
        return int(self.reply["request"])

    def stage(self) -> int:
        # As of the last claim: a member sees a new stage within one block of its steps.
        return int(self.reply["stage"])

    def fetch(self, table: str) -> None:
        """Wait for the board's reply until it carries ``table``'s weights (the driver posts
        every table's first version before any member starts). A claim already in flight may
        predate :meth:`want`, so a second one is sent when the first lacks them."""
        for _ in range(2):
            if table in self.weights:
                return
            if self.in_flight is None:
                self._send_claim()
            self._refill()

    def poll(self) -> None:
        """Fetch the board's reply now (stop, request, weights) without waiting for a block."""
        if self.in_flight is None:
            self._send_claim()
        if ray.wait([self.in_flight], timeout=0)[0]:
            self._refill()


class BoardLink:
    def __init__(self, board: Any) -> None:
        self.board = board

    def send(self, message: Message) -> None:
        self.board.post.remote(message)

    def opened(self) -> None:
        pass  # a member sends through a StartBeat around this link, which warms up


class BoardSink:
    """Learner side: publish = ``ray.put`` the actor's float tensors, post the reference under
    the learner's table. ``pulls``: the modules besides the actor its explorers pull by name
    (detached explorers, CEM-RL's critic), published with it, as the shared-memory sink does."""

    def __init__(self, board: Any, table: str, pulls: tuple[str, ...] = ()) -> None:
        self.board = board
        self.table = table
        self.pulls = pulls
        self.version = 1  # the driver published version 1 before the members started

    def publish(self, actor: Any) -> int:
        from wheeler2.sync import float_state

        self.version += 1
        self.board.set_weights.remote(self.table, self.version, [ray.put(float_state(actor))])
        return self.version

    def close(self) -> None:
        pass


class BoardSource:
    """Explorer side (and joint play's driven tables): the newest reference of ``table``'s
    weights the board sent with a budget reply, blended in under the same
    :class:`wheeler2.sync.SyncPlan` as the shared-memory client."""

    def __init__(self, budget: BoardBudget, plan: Any, table: str) -> None:
        self.budget = budget
        self.plan = plan
        self.table = table
        self.synced = plan.names
        self.pulled = 0
        budget.want(table)

    @property
    def version(self) -> int:
        return self.pulled

    def lag(self) -> int:
        weights = self.budget.latest(self.table)
        return max(0, (weights[0] if weights else 0) - self.pulled)

    def pull(self) -> int | None:
        weights = self.budget.latest(self.table)
        if weights is None:
            # The first pull, as the member is built: wait for the board, as a local member
            # reads the learner's first weights from shared memory at once. A poll alone came
            # back empty, so the member ran its first sync.every steps on its own weights.
            self.budget.fetch(self.table)
        elif weights[0] <= self.pulled:
            self.budget.poll()
        weights = self.budget.latest(self.table)
        if weights is None or weights[0] <= self.pulled:
            return None
        version, (ref,) = weights
        self.plan.apply(ray.get(ref))
        self.pulled = int(version)
        return self.pulled

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class TableArgs:
    """One replay table as a member on Ray sees it: its shards (none for an on-policy learner's
    table), the rows they store and the shapes its learner publishes on the board."""

    name: str
    shards: list[Any]
    layout: Layout
    publish_shapes: dict[str, tuple[int, ...]]

    @property
    def pulls(self) -> tuple[str, ...]:
        """The modules its learner publishes besides the actor (``critic/...`` names)."""
        return tuple(dict.fromkeys(n.split("/", 1)[0] for n in self.publish_shapes if "/" in n))

    def source(
        self, budget: BoardBudget, member: str, keep: Sequence[str], alpha: float
    ) -> Callable[[nn.Module], BoardSource]:
        """A maker of this table's weight source into a module built later (the member loop's
        ``source``, or joint play's :class:`~wheeler2.runtime.opponents.OtherTable` source)."""
        from wheeler2.sync import SyncPlan

        def make(module: nn.Module) -> BoardSource:
            plan = SyncPlan(self.publish_shapes, module, list(keep), alpha, member)
            return BoardSource(budget, plan, self.name)

        return make


@ray.remote(max_restarts=0, max_task_retries=0)
class MemberActor:
    """One member of the team; its resources are set per ``[[team]]`` when it is created."""

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self) -> dict[str, Any]:
        return {"pid": os.getpid(), **where()}

    def run(self, board: Any, boxed: list[Any]) -> None:
        """``boxed``: the reference to the member's arguments, inside a list so that Ray does
        not resolve it before this starts: unpickling them imports torch (long on a loaded
        node), and the member is heard from first."""
        link = StartBeat(BoardLink(board).send, self.name)
        try:
            args = ray.get(boxed[0])
            _run_member(args, link)
        except BaseException as exc:
            from wheeler2.runtime.member import failed

            # The traceback as text, posted before the call fails, so the driver names this
            # member's own frames; Ray's wrapper would add its frames around them.
            link.stop()
            ray.get(board.post.remote(failed(self.name, exc)))
            raise
        # Same-caller calls run in order: once this returns, every post above has been handled.
        ray.get(board.ping.remote())


def _run_member(args: dict[str, Any], link: StartBeat) -> None:
    from wheeler2.buffer.ray_shard import ShardedReplay
    from wheeler2.runtime.member import Wiring, run_member
    from wheeler2.runtime.opponents import OtherTable

    set_compute_threads()
    config, plan, board = args["config"], args["plan"], args["board"]
    set_niceness(plan.spec.nice)
    num_envs = int(config.env.num_envs)
    chunk = int(config.buffer.chunk)
    learner = plan.role == "learner"
    # Small blocks: the learner never sits on much of the budget, and the others' steps, on
    # which the learner schedules its evals, are at most a block behind.
    block = num_envs * (8 if learner else max(1, chunk // 2))
    budget = BoardBudget(board, plan.name, block, args["env_steps"], args["stage"])
    own_table: TableArgs = args["table"]
    replays: list[ShardedReplay] = []

    def sharded(table: TableArgs) -> ShardedReplay | None:
        if not table.shards:  # none when the learner is on-policy: nobody samples a replay
            return None
        replay = ShardedReplay(table.shards, table.layout, chunk, plan.name, plan.index)
        replays.append(replay)
        return replay

    replay = sharded(own_table)
    source = None
    if not learner and plan.spec.sync is not None:
        sync = plan.spec.sync
        source = own_table.source(budget, plan.name, sync.keep, float(sync.alpha))
    # Joint play: the other tables' policies, pulled from the board, drive their agents in this
    # member's copies, and their steps go into those tables' shards (none: on-policy).
    others = {
        name: OtherTable(table.source(budget, plan.name, (), 1.0), sharded(table))
        for name, table in args["others"].items()
    }
    wiring = Wiring(
        budget=budget,
        link=link,
        replay=replay,
        own_process=True,
        sink=BoardSink(board, own_table.name, own_table.pulls) if learner else None,
        own=args["own"] if learner else None,
        source=source,
        state=args["state"],
        env_steps=args["env_steps"],
        next_eval=args["next_eval"],
        where=where(),
        others=others,
    )
    try:
        run_member(config, plan, wiring)
    finally:
        for r in replays:
            r.close()
