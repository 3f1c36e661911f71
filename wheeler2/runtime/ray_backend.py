"""Backend ``ray``: members, replay shards and a small board as Ray actors, on one machine or many.

The driver (this process) connects to (or starts) Ray, creates the actors with each
``[[team]]``'s resources and runs the same :class:`~wheeler2.runtime.coordinator.Coordinator`
as the other backends; each member actor runs the one member loop. What is Ray's here is only
how things travel: the board and member actors of :mod:`wheeler2.runtime.ray_member`, and the
replay shards of :mod:`wheeler2.buffer.ray_shard`.

Checkpoints have the local backend's format, so a run moves between backends both ways. Actors
are ended, and the shards' shared memory unlinked, on every path out; Ray is shut down if this
run started it. See ``docs/cluster.md``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray

from wheeler2.log import write_json_atomic
from wheeler2.runtime.coordinator import prepare, run_team
from wheeler2.runtime.curriculum import saved_stage
from wheeler2.runtime.experiment import (
    MemberFailed,
)
from wheeler2.runtime.messages import Finished, Message, StateReply
from wheeler2.runtime.plan import MemberPlan
from wheeler2.runtime.ray_member import Board, MemberActor
from wheeler2.runtime.replays import own_replay_spec, replay_spec
from wheeler2.runtime.restore import member_payload, saved_replay
from wheeler2.runtime.team import TeamSetup

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


# --------------------------------------------------------------------------------------------
# driver side


def member_options(plan: MemberPlan) -> dict[str, Any]:
    """Ray actor options of one member, from its ``[[team]]`` table."""
    spec = plan.spec
    opts: dict[str, Any] = {
        "num_cpus": 1.0 if spec.num_cpus is None else float(spec.num_cpus),
        "num_gpus": 0.0 if spec.num_gpus is None else float(spec.num_gpus),
    }
    if spec.resources:
        opts["resources"] = {str(k): float(v) for k, v in dict(spec.resources).items()}
    return opts


def _check_fits(plans: list[MemberPlan]) -> None:
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

    def __init__(self, config: Config, setup: TeamSetup, payload: dict[str, Any]) -> None:
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
        self.stage = saved_stage(config, payload)
        try:
            self._create(config, setup, payload)
        except BaseException:
            self.close()
            raise

    def _create(self, config: Config, setup: TeamSetup, payload: dict[str, Any]) -> None:
        from wheeler2.buffer.ray_shard import ReplayShard

        # @ray.remote makes these actor classes (.options, .remote), which their types omit.
        member_actor, replay_shard, board = cast(Any, (MemberActor, ReplayShard, Board))
        plans = setup.plans
        table = setup.tables[0]  # the config refuses ray with several tables
        _check_fits(plans)
        for p in plans:
            self.actors[p.name] = member_actor.options(
                name=f"wheeler2-{self.run_id}-{p.name}", **member_options(p)
            ).remote(p.name)
        self.placed = self._wait_placed(plans)
        # Shards next to the learner: it is the one that samples them, many times a second.
        near_learner = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node_id=self.placed[setup.lead.name]["node_id"], soft=True
        )
        shards = max(1, int(config.buffer.shards)) if table.uses_replay else 0
        self.shards = [
            replay_shard.options(
                name=f"wheeler2-{self.run_id}-buffer-{i}", scheduling_strategy=near_learner
            ).remote(replay_spec(config, table, shard=i, shards=shards), i)
            for i in range(shards)
        ]
        member_steps = {p.name: member_payload(payload, p.name)[1] for p in plans}
        self.steps = dict(member_steps)
        self.board = board.options(
            name=f"wheeler2-{self.run_id}-board", scheduling_strategy=near_learner
        ).remote(int(config.experiment.total_steps), member_steps, self.stage)
        try:
            ray.get([s.ready.remote() for s in self.shards] + [self.board.ping.remote()])
        except ray.exceptions.RayError as exc:
            raise MemberFailed("buffer", str(exc)) from None
        saved = saved_replay(payload, table)
        if saved is not None and self.shards:
            if len(self.shards) == 1:
                ray.get(self.shards[0].load_state_dict.remote(saved))
            else:
                print("warning: the checkpoint's replay is not loaded into a sharded buffer")
        from wheeler2.sync import float_state

        ray.get(self.board.set_weights.remote(1, [ray.put(float_state(table.learner.actor))]))

    def _wait_placed(self, plans: list[MemberPlan]) -> dict[str, Any]:
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
        write_json_atomic(run_dir / "placement.json", self.placed)
        from wheeler2.sync import source_shapes

        table = self.setup.tables[0]
        layout = table.layout()
        shapes = source_shapes(table.learner.actor)
        for p in self.setup.plans:
            state, env_steps = member_payload(self.payload, p.name)
            args = {
                "config": self.config,
                "plan": p,
                "board": self.board,
                "shards": self.shards,
                "layout": layout,
                "publish_shapes": shapes,
                "own": own_replay_spec(self.config, table),
                "state": state,
                "env_steps": env_steps,
                "next_eval": next_eval,
                "stage": self.stage,
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

    def open(self) -> None:
        self.board.open.remote()

    def release(self, table: str) -> None:
        # One table on ray (the config refuses more): its shards are all there is to release.
        for shard in self.shards:
            shard.release.remote()

    def stop(self) -> None:
        self.board.stop.remote()
        self.release(self.setup.tables[0].name)

    def kill(self, name: str) -> None:
        actor = self.actors.get(name)
        if actor is not None:
            ray.kill(actor)

    def set_stage(self, stage: int) -> None:
        self.stage = int(stage)
        self.board.set_stage.remote(self.stage)

    def replay_state(self) -> dict[str, dict[str, Any]]:
        if len(self.shards) != 1:
            return {}
        try:
            state = ray.get(self.shards[0].state_dict.remote(), timeout=60)
        except Exception as exc:  # the members' weights matter more than the buffer
            print(f"warning: the replay could not be checkpointed: {exc}")
            return {}
        return {self.setup.tables[0].name: state}

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
