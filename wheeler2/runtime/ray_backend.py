"""Backend ``ray``: members, replay shards and a small board as Ray actors, on one machine or many.

The driver (this process) connects to (or starts) Ray, creates the actors with each
``[[team]]``'s resources and runs the same :class:`~wheeler2.runtime.coordinator.Coordinator`
as the other backends; each member actor runs the one member loop. What is Ray's here is only
how things travel:

* the :class:`Board` actor carries the step budget, stop and checkpoint requests to members,
  the learner's published weights (an object-store reference, versioned), and the members'
  messages to the driver;
* the replay is :mod:`wheeler2.buffer.ray_shard` (shard actors behind the Replay interface).

Checkpoints have the local backend's format, so a run moves between backends both ways. Actors
are ended, and the shards' shared memory unlinked, on every path out; Ray is shut down if this
run started it. See ``docs/cluster.md``.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from wheeler2.runtime import build
from wheeler2.runtime.coordinator import prepare, run_team
from wheeler2.runtime.experiment import (
    MemberFailed,
)
from wheeler2.runtime.messages import Failed, Finished, Message, StateReply

if TYPE_CHECKING:
    from wheeler2.config import Config

START_TIMEOUT_S = float(os.environ.get("WHEELER2_RAY_START_TIMEOUT", "120"))
NAMESPACE = "wheeler2"  # actors are named wheeler2-<run id>-<member> in it
CLOSE_TIMEOUT_S = 15.0


def connect(address: str | None, num_cpus: float = 0) -> bool:
    """Connect to the cluster at ``address`` (or ``RAY_ADDRESS``), or start a local Ray with
    this machine's cores (at least ``num_cpus`` logical CPUs).

    Returns True when this call started Ray here, so the caller knows to shut it down.
    """
    # A local Ray has no one to authenticate against, and Ray's own messages would interleave
    # with the progress line.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():  # e.g. a notebook or script that set up Ray itself
        return False
    quiet = {
        "namespace": NAMESPACE,
        "log_to_driver": False,
        "logging_level": "error",
        "configure_logging": True,
    }
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, **quiet)
        return False
    # Ray starts its workers at niceness 15; on a machine shared with other work that starves
    # the team (the local backend's members run at 0), so a Ray started here keeps them at 0.
    os.environ.setdefault("RAY_worker_niceness", "0")
    # Logical CPUs are a scheduling count, not a limit: a team of three 1-CPU members still runs
    # on two cores, as it does under the local backend, instead of waiting for a third core.
    cpus = max(os.cpu_count() or 1, int(-(-num_cpus // 1)))
    ray.init(num_cpus=cpus, include_dashboard=False, **quiet)
    return True


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

    def __init__(self, total_steps: int, member_steps: dict[str, int]) -> None:
        self.total_steps = int(total_steps)
        self.granted = int(sum(member_steps.values()))
        self.steps = dict(member_steps)  # env steps each member reported having taken
        self.stopped = False
        self.request = 0
        self.weights: tuple[int, list[Any]] | None = None
        self.messages: list[Message] = []

    def claim(
        self, name: str, want: int, steps_done: int, give_back: int, weights_version: int
    ) -> dict[str, Any]:
        """Grant up to ``want`` more env steps (and take back ``give_back`` unused ones): the
        budget is exact because only the board hands it out. The reply also carries stop,
        checkpoint request and newer weights."""
        self.steps[name] = int(steps_done)
        self.granted -= int(give_back)
        granted = 0 if self.stopped else max(0, min(want, self.total_steps - self.granted))
        self.granted += granted
        reply: dict[str, Any] = {
            "granted": granted,
            "total": self.granted,
            "stop": self.stopped,
            "request": self.request,
            "others": sum(v for k, v in self.steps.items() if k != name),
        }
        if self.weights is not None and self.weights[0] > weights_version:
            reply["weights"] = self.weights
        return reply

    def set_weights(self, version: int, ref: list[Any]) -> None:
        # The reference comes wrapped in a list so that Ray hands over the reference itself.
        if self.weights is None or version > self.weights[0]:
            self.weights = (int(version), ref)

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

    def ping(self) -> bool:
        return True


# --------------------------------------------------------------------------------------------
# member side: the board as budget, link and weight transport


class BoardBudget:
    """The member's share of ``total_steps``, claimed from the board one block ahead, with one
    claim in flight so that stepping never waits for the board."""

    def __init__(self, board: Any, name: str, block: int, env_steps: int) -> None:
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
            "request": 0,
            "others": 0,
        }
        self.weights: tuple[int, list[Any]] | None = None
        self.in_flight: Any = None
        self.done = False

    def _send_claim(self) -> None:
        version = self.weights[0] if self.weights else 0
        self.in_flight = self.board.claim.remote(
            self.name, self.block, self.own, self.give_back, version
        )
        self.give_back = 0

    def _refill(self) -> bool:
        if self.in_flight is None:
            self._send_claim()
        reply = ray.get(self.in_flight)
        self.in_flight = None
        self.reply = reply
        if "weights" in reply:
            self.weights = reply["weights"]
        self.left += reply["granted"]
        if reply["stop"] or not reply["granted"]:
            return False
        self._send_claim()
        return True

    def claim(self, n: int) -> bool:
        while self.left < n:
            if self.done or not self._refill():
                self.done = True
                if self.left:  # too few for a whole vector step: others may use them
                    ray.get(self.board.claim.remote(self.name, 0, self.own, self.left, 1 << 62))
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

    def request(self) -> int:
        return int(self.reply["request"])

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


class BoardSink:
    """Learner side: publish = ``ray.put`` the actor's float tensors, post the reference."""

    def __init__(self, board: Any) -> None:
        self.board = board
        self.version = 1  # the driver published version 1 before the members started

    def publish(self, actor: Any) -> int:
        from wheeler2.sync import float_state

        self.version += 1
        self.board.set_weights.remote(self.version, [ray.put(float_state(actor))])
        return self.version

    def close(self) -> None:
        pass


class BoardSource:
    """Explorer side: the newest reference the board sent with a budget reply, blended in
    under the same :class:`wheeler2.sync.SyncPlan` as the shared-memory client."""

    def __init__(self, budget: BoardBudget, plan: Any) -> None:
        self.budget = budget
        self.plan = plan
        self.synced = plan.names
        self.pulled = 0

    @property
    def version(self) -> int:
        return self.pulled

    def lag(self) -> int:
        latest = self.budget.weights[0] if self.budget.weights else 0
        return max(0, latest - self.pulled)

    def pull(self) -> int | None:
        weights = self.budget.weights
        if weights is None or weights[0] <= self.pulled:
            self.budget.poll()
            weights = self.budget.weights
        if weights is None or weights[0] <= self.pulled:
            return None
        version, (ref,) = weights
        self.plan.apply(ray.get(ref))
        self.pulled = int(version)
        return self.pulled

    def close(self) -> None:
        pass


@ray.remote(max_restarts=0, max_task_retries=0)
class MemberActor:
    """One member of the team; its resources are set per ``[[team]]`` when it is created."""

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self) -> dict[str, Any]:
        return {"pid": os.getpid(), **where()}

    def run(self, args: dict[str, Any]) -> None:
        board = args["board"]
        try:
            _run_member(args)
        except BaseException as exc:
            from wheeler2.runtime.member import failure_detail

            # The traceback as text, posted before the call fails, so the driver names this
            # member's own frames; Ray's wrapper would add its frames around them.
            ray.get(board.post.remote(Failed(args["plan"].name, failure_detail(exc))))
            raise
        # Same-caller calls run in order: once this returns, every post above has been handled.
        ray.get(board.ping.remote())


def _run_member(args: dict[str, Any]) -> None:
    from wheeler2.buffer.ray_shard import ShardedReplay
    from wheeler2.runtime.member import Wiring, run_member
    from wheeler2.sync import SyncPlan

    build.set_compute_threads()
    config, plan, board = args["config"], args["plan"], args["board"]
    num_envs = int(config.env.num_envs)
    chunk = int(config.buffer.chunk)
    learner = plan.role == "learner"
    # Small blocks: the learner never sits on much of the budget, and the others' steps, on
    # which the learner schedules its evals, are at most a block behind.
    block = num_envs * (8 if learner else max(1, chunk // 2))
    budget = BoardBudget(board, plan.name, block, args["env_steps"])
    replay = None
    if args["shards"]:  # none when the learner is on-policy: nobody samples a replay
        replay = ShardedReplay(args["shards"], args["layout"], chunk, plan.name, plan.index)
    source = None
    if not learner and plan.spec.sync is not None:
        sync = plan.spec.sync

        def source(actor: Any) -> BoardSource:
            sync_plan = SyncPlan(
                args["publish_shapes"], actor, list(sync.keep), float(sync.alpha), plan.name
            )
            return BoardSource(budget, sync_plan)

    wiring = Wiring(
        budget=budget,
        link=BoardLink(board),
        replay=replay,
        own_process=True,
        sink=BoardSink(board) if learner else None,
        source=source,
        state=args["state"],
        env_steps=args["env_steps"],
        next_eval=args["next_eval"],
        where=where(),
    )
    try:
        run_member(config, plan, wiring)
    finally:
        if replay is not None:
            replay.close()


# --------------------------------------------------------------------------------------------
# driver side


def member_options(plan: build.MemberPlan) -> dict[str, Any]:
    """Ray actor options of one member, from its ``[[team]]`` table."""
    spec = plan.spec
    opts: dict[str, Any] = {
        "num_cpus": 1.0 if spec.num_cpus is None else float(spec.num_cpus),
        "num_gpus": 0.0 if spec.num_gpus is None else float(spec.num_gpus),
    }
    if spec.resources:
        opts["resources"] = {str(k): float(v) for k, v in dict(spec.resources).items()}
    return opts


def _check_fits(plans: list[build.MemberPlan]) -> None:
    """Fail at once, naming the member, when the cluster can never place it (Ray would wait
    forever otherwise). Totals only: per-node packing is left to the start timeout."""
    available = ray.cluster_resources()
    need: dict[str, float] = {}
    for p in plans:
        opts = member_options(p)
        wants = {"CPU": opts["num_cpus"], "GPU": opts["num_gpus"], **opts.get("resources", {})}
        for key, value in wants.items():
            if value <= 0:
                continue
            need[key] = need.get(key, 0.0) + value
            if available.get(key, 0.0) < need[key]:
                have = available.get(key, 0.0)
                raise MemberFailed(
                    p.name,
                    f"the cluster cannot place member {p.name!r}: the team needs {need[key]:g} "
                    f"{key} up to this member, the cluster has {have:g}; lower num_cpus / "
                    f"num_gpus / resources in its [[team]] table or add nodes",
                )


class RayTransport:
    """Member actors, shard actors and the board, seen from the driver."""

    def __init__(self, config: Config, setup: build.TeamSetup, payload: dict[str, Any]) -> None:
        self.config = config
        self.setup = setup
        self.payload = payload
        self.run_id = uuid.uuid4().hex[:8]
        self.actors: dict[str, Any] = {}
        self.shards: list[Any] = []
        self.board: Any = None
        self.runs: dict[Any, str] = {}
        self.dead: dict[str, str] = {}
        self.steps: dict[str, int] = {}
        self.placed: dict[str, dict[str, Any]] = {}
        try:
            self._create(config, setup, payload)
        except BaseException:
            self.close()
            raise

    def _create(self, config: Config, setup: build.TeamSetup, payload: dict[str, Any]) -> None:
        from wheeler2.buffer.ray_shard import ReplayShard

        plans = setup.plans
        _check_fits(plans)
        for p in plans:
            self.actors[p.name] = MemberActor.options(
                name=f"wheeler2-{self.run_id}-{p.name}", **member_options(p)
            ).remote(p.name)
        self.placed = self._wait_placed(plans)
        # Shards next to the learner: it is the one that samples them, many times a second.
        near_learner = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node_id=self.placed[setup.lead.name]["node_id"], soft=True
        )
        shards = max(1, int(config.buffer.shards)) if setup.uses_replay else 0
        self.shards = [
            ReplayShard.options(
                name=f"wheeler2-{self.run_id}-buffer-{i}", scheduling_strategy=near_learner
            ).remote(build.replay_spec(config, setup, shard=i, shards=shards), i)
            for i in range(shards)
        ]
        member_steps = {p.name: build.member_payload(payload, p.name)[1] for p in plans}
        self.steps = dict(member_steps)
        self.board = Board.options(
            name=f"wheeler2-{self.run_id}-board", scheduling_strategy=near_learner
        ).remote(int(config.experiment.total_steps), member_steps)
        try:
            ray.get([s.ready.remote() for s in self.shards] + [self.board.ping.remote()])
        except ray.exceptions.RayError as exc:
            raise MemberFailed("buffer", str(exc)) from None
        if payload.get("replay") is not None and self.shards:
            if len(self.shards) == 1:
                ray.get(self.shards[0].load_state_dict.remote(payload["replay"]))
            else:
                print("warning: the checkpoint's replay is not loaded into a sharded buffer")
        from wheeler2.sync import float_state

        ray.get(self.board.set_weights.remote(1, [ray.put(float_state(setup.learner.actor))]))

    def _wait_placed(self, plans: list[build.MemberPlan]) -> dict[str, Any]:
        """Where each member actor started; an error naming the first one that never did."""
        refs = {self.actors[p.name].where.remote(): p.name for p in plans}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=START_TIMEOUT_S)
        if pending:
            name = refs[pending[0]]
            plan = next(p for p in plans if p.name == name)
            raise MemberFailed(
                name,
                f"member {name!r} was not placed within {START_TIMEOUT_S:.0f} s; it asks for "
                f"{member_options(plan)}; the cluster has {ray.cluster_resources()}",
            )
        out = {}
        for ref in ready:
            try:
                out[refs[ref]] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise MemberFailed(refs[ref], str(exc)) from None
        for name in out:
            out[name]["actor"] = f"wheeler2-{self.run_id}-{name}"  # ray.get_actor(.., NAMESPACE)
        return out

    def start(self, run_dir: Path, next_eval: int) -> None:
        import json

        (run_dir / "placement.json").write_text(json.dumps(self.placed, indent=1))
        from wheeler2.sync import source_shapes

        layout = self.setup.layout()
        shapes = source_shapes(self.setup.learner.actor)
        for p in self.setup.plans:
            state, env_steps = build.member_payload(self.payload, p.name)
            args = {
                "config": self.config,
                "plan": p,
                "board": self.board,
                "shards": self.shards,
                "layout": layout,
                "publish_shapes": shapes,
                "state": state,
                "env_steps": env_steps,
                "next_eval": next_eval,
            }
            self.runs[self.actors[p.name].run.remote(args)] = p.name

    # -- Transport --
    def receive(self, timeout: float) -> list[Message]:
        if self.runs:
            ready, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=timeout)
            for ref in ready:
                name = self.runs.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self.dead[name] = f"its actor died: {_first_line(exc)}"
                except ray.exceptions.RayError as exc:
                    self.dead[name] = _first_line(exc)
        try:
            messages, steps = ray.get(self.board.drain.remote())
        except ray.exceptions.RayError as exc:
            self.dead.setdefault("board", _first_line(exc))
            return []
        for name, value in steps.items():
            self.steps[name] = max(self.steps.get(name, 0), value)
        for message in messages:
            # The board hears of steps at claims; a member's last steps arrive with its result.
            if isinstance(message, Finished | StateReply):
                self.steps[message.member] = max(
                    self.steps.get(message.member, 0), message.env_steps
                )
        return messages

    def failures(self) -> dict[str, str]:
        return dict(self.dead)

    def env_steps(self) -> int:
        return int(sum(self.steps.values()))

    def request_states(self) -> int:
        return int(ray.get(self.board.ask_states.remote()))

    def release(self) -> None:
        for shard in self.shards:
            shard.release.remote()

    def stop(self) -> None:
        self.board.stop.remote()
        self.release()

    def kill(self, name: str) -> None:
        actor = self.actors.get(name)
        if actor is not None:
            ray.kill(actor)

    def replay_state(self) -> dict[str, Any] | None:
        if len(self.shards) != 1:
            return None
        try:
            return ray.get(self.shards[0].state_dict.remote(), timeout=60)
        except Exception as exc:  # the members' weights matter more than the buffer
            print(f"warning: the replay could not be checkpointed: {exc}")
            return None

    def close(self) -> None:
        # Shards first, and by their own hand: ray.kill skips every teardown, which is how a
        # run used to leave its whole buffer in /dev/shm.
        closing = [s.close.remote() for s in self.shards]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a dead shard: the next run's sweep frees its memory
            pass
        for actor in [*self.actors.values(), *self.shards, self.board]:
            if actor is None:
                continue
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_ray(config: Config, run_dir: Path, resume: bool) -> dict[str, Any]:
    prepared = prepare(config, run_dir, resume)  # a bad team fails before Ray starts
    cpus = sum(member_options(p)["num_cpus"] for p in prepared.setup.plans)
    started = connect(config.experiment.ray_address, cpus)
    try:
        # The transport's handlers go in after ray.init, which installs its own SIGTERM one.
        return run_team(config, run_dir, prepared, RayTransport)
    finally:
        if started:
            ray.shutdown()
