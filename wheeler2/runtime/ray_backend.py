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
import secrets
import sys
import uuid
from collections.abc import Mapping, MutableMapping
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
from wheeler2.runtime.ray_member import Board, MemberActor, TableArgs
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
    if ray.is_initialized():  # e.g. a notebook or script that set up Ray itself
        return False
    # Ray's own messages would interleave with the progress line.
    quiet = {
        "namespace": NAMESPACE,
        "log_to_driver": False,
        "logging_level": "error",
        "configure_logging": True,
    }
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        # The user's RAY_AUTH_MODE and token pass through as they are: Ray reads the mode when
        # it is imported, and a cluster with token auth refuses a driver without the token.
        ray.init(address=address, **quiet)
        warning = auth_warning(address)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        return False
    local_ray_token()
    # Ray starts its workers at niceness 15; on a machine shared with other work that starves
    # the team (the local backend's members run at 0), so a Ray started here keeps them at 0.
    os.environ.setdefault("RAY_worker_niceness", "0")
    # Logical CPUs are a scheduling count, not a limit: a team of three 1-CPU members still runs
    # on two cores, as it does under the local backend, instead of waiting for a third core.
    cpus = max(os.cpu_count() or 1, int(-(-num_cpus // 1)))
    ray.init(num_cpus=cpus, include_dashboard=False, **quiet)
    return True


def token_auth_on(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process presents Ray's authentication token: ``RAY_AUTH_MODE=token``, which
    Ray reads when it is imported (set later, it reaches Ray's child processes only)."""
    return env.get("RAY_AUTH_MODE", "").strip().lower() == "token"


def auth_warning(address: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The line `wheeler2 run` prints once it has joined the cluster at ``address``, or None.

    A cluster with token auth refuses a driver without the token, so a driver let in without
    one has joined a cluster that checks no one. A loopback address warns too: Ray's GCS and
    raylets listen on every interface even when the head was started on 127.0.0.1.
    """
    if token_auth_on(env):
        return None
    return (
        f"warning: joined the Ray cluster at {address} without token authentication: anyone "
        f"who can reach its ports can run code on its nodes; start it with RAY_AUTH_MODE=token "
        f"(docs/cluster.md)"
    )


def local_ray_token(env: MutableMapping[str, str] = os.environ) -> None:
    """Give the Ray that a run starts here a token of its own when the user has none.

    With ``RAY_AUTH_MODE`` unset, ``ray.init`` turns token auth on and would otherwise write a
    new token to ``~/.ray/auth_token``; a token in this process's environment reaches Ray's
    processes and leaves nothing behind. It stays for the life of the process because Ray
    caches the token it loaded, so a second Ray started by the same process must get the same.
    ``RAY_AUTH_MODE=disabled`` is the user's to choose (docs/cluster.md says when).
    """
    if env.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
        return
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH"):
        return
    if (Path.home() / ".ray" / "auth_token").is_file():
        return
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # 256 bits, as Ray's own tokens


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
        self.shards: dict[str, list[Any]] = {}  # table -> its shards (on-policy learner: none)
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
        from wheeler2.sync import float_state

        # @ray.remote makes these actor classes (.options, .remote), which their types omit.
        member_actor, replay_shard, board = cast(Any, (MemberActor, ReplayShard, Board))
        plans = setup.plans
        _check_fits(plans)
        for p in plans:
            self.actors[p.name] = member_actor.options(
                **self._named(p.name), **member_options(p)
            ).remote(p.name)
        self.placed = self._wait_placed(plans)
        for table in setup.tables:
            # Shards next to their table's learner: it is the one that samples them, many
            # times a second.
            shards = max(1, int(config.buffer.shards)) if table.uses_replay else 0
            self.shards[table.name] = [
                replay_shard.options(
                    **self._named(f"{table.name}-buffer-{i}"),
                    scheduling_strategy=self._near(table.lead.name),
                ).remote(replay_spec(config, table, shard=i, shards=shards), i)
                for i in range(shards)
            ]
        member_steps = {p.name: member_payload(payload, p.name)[1] for p in plans}
        self.steps = dict(member_steps)
        self.board = board.options(
            **self._named("board"), scheduling_strategy=self._near(setup.lead.name)
        ).remote(int(config.experiment.total_steps), member_steps, self.stage)
        every_shard = [s for shards in self.shards.values() for s in shards]
        try:
            ray.get([s.ready.remote() for s in every_shard] + [self.board.ping.remote()])
        except ray.exceptions.RayError as exc:
            raise MemberFailed("buffer", str(exc)) from None
        for table in setup.tables:
            updates = int(getattr(table.learner, "updates", 0))  # the resumed learner's
            restore_shards(
                table.name, self.shards[table.name], saved_replay(payload, table), updates
            )
            # Version 1 of every table's weights: its explorers, and with [play] joint every
            # other table's members, pull it before its learner publishes.
            ref = ray.put(float_state(table.published))  # with its obs statistics, if any
            ray.get(self.board.set_weights.remote(table.name, 1, [ref]))

    def _named(self, what: str) -> dict[str, str]:
        """Actor options naming ``what`` of this run in the ``wheeler2`` namespace, where
        docs/cluster.md says to look: a Ray that the caller set up itself (ray.init without a
        namespace) would otherwise put them in an anonymous one that no other driver sees."""
        return {"name": f"wheeler2-{self.run_id}-{what}", "namespace": NAMESPACE}

    def _near(self, member: str) -> Any:
        return ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node_id=self.placed[member]["node_id"], soft=True
        )

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

        tables = {
            t.name: TableArgs(t.name, self.shards[t.name], t.layout(), source_shapes(t.published))
            for t in self.setup.tables
        }
        for p in self.setup.plans:
            state, env_steps = member_payload(self.payload, p.name)
            table = self.setup.table_of(p)
            others = {}
            if self.config.play.joint:  # every other table's weights and shards
                others = {name: t for name, t in tables.items() if name != table.name}
            args = {
                "config": self.config,
                "plan": p,
                "board": self.board,
                "table": tables[table.name],
                "others": others,
                "own": own_replay_spec(self.config, table),
                "state": state,
                "env_steps": env_steps,
                "next_eval": next_eval,
                "stage": self.stage,
            }
            boxed = [ray.put(args)]  # see MemberActor.run
            self.runs[self.actors[p.name].run.remote(self.board, boxed)] = p.name

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
        for shard in self.shards.get(table, []):
            shard.release.remote()

    def stop(self) -> None:
        self.board.stop.remote()
        for table in self.shards:
            self.release(table)

    def kill(self, name: str) -> None:
        actor = self.actors.get(name)
        if actor is not None:
            ray.kill(actor)

    def set_stage(self, stage: int) -> None:
        self.stage = int(stage)
        self.board.set_stage.remote(self.stage)

    def replay_state(self) -> dict[str, dict[str, Any]]:
        """Each table's replay, where it is one shard (a sharded one is not checkpointed)."""
        out = {}
        for table, shards in self.shards.items():
            if len(shards) != 1:
                continue
            try:
                out[table] = ray.get(shards[0].state_dict.remote(), timeout=60)
            except Exception as exc:  # the members' weights matter more than the buffer
                print(f"warning: the replay of table {table!r} could not be checkpointed: {exc}")
        return out

    def close(self) -> None:
        # Shards first, and by their own hand: ray.kill skips every teardown, which is how a
        # run used to leave its whole buffer in /dev/shm.
        every_shard = [s for shards in self.shards.values() for s in shards]
        closing = [s.close.remote() for s in every_shard]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a dead shard: the next run's sweep frees its memory
            pass
        for actor in [*self.actors.values(), *every_shard, self.board]:
            if actor is None:
                continue
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass


def restore_shards(
    table: str, shards: list[Any], saved: dict[str, Any] | None, updates: int
) -> None:
    """A resumed table's shards: the checkpoint's replay (into one shard only), then the
    learner's update count, each shard its share, so that PER's beta goes on from where the
    run was rather than from its start, as the local learner's replay does."""
    if not shards:
        return
    if saved is not None:
        if len(shards) == 1:
            ray.get(shards[0].load_state_dict.remote(saved))
        else:
            print(
                f"warning: the checkpoint's replay of table {table!r} is not loaded into a "
                f"sharded buffer",
                flush=True,
            )
    if updates > 0:  # after the load, which sets the shard's own count
        ray.get([s.continue_updates.remote(updates // len(shards)) for s in shards])


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
