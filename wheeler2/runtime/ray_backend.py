"""Backend ``ray``: members, replay shards and a small board as Ray actors, on one machine or many.

The driver (this process) plays the local backend's coordinator: it connects to (or starts) Ray,
creates the actors with each ``[[team]]``'s resources, records evals and figures the members post
to the board, assembles checkpoints in exactly the local backend's format (so a run moves between
backends both ways), and stops the team. Paths out mirror the local backend: a member that raised
or whose actor died stops the run with :class:`MemberFailed` naming it (exit 1); Ctrl-C / SIGTERM
stop it with a final checkpoint and ``KeyboardInterrupt`` (exit 130). Actors are killed, and Ray
is shut down if this run started it, on every path.

How the pieces talk is described in :mod:`wheeler2.runtime.ray_actors` and ``docs/cluster.md``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from wheeler2.runtime import build
from wheeler2.runtime.experiment import (
    MemberFailed,
    Recorder,
    RunState,
    load_resume_state,
    shield_shutdown,
)

STOP_GRACE_S = 10.0  # members get this long to finish a step and send a final state
START_TIMEOUT_S = float(os.environ.get("WHEELER2_RAY_START_TIMEOUT", "120"))
POLL_S = 0.1
NAMESPACE = "wheeler2"  # actors are named wheeler2-<run id>-<member> in it


def connect(address: str | None, num_cpus: float = 0) -> bool:
    """Connect to the cluster at ``address`` (or ``RAY_ADDRESS``), or start a local Ray with
    this machine's cores (at least ``num_cpus`` logical CPUs).

    Returns True when this call started Ray here, so the caller knows to shut it down.
    """
    # Before ray starts anything: a local Ray has no one to authenticate against, and Ray's own
    # messages would interleave with the progress line.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

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


def member_options(plan: build.MemberPlan) -> dict[str, Any]:
    """Ray actor options of one member, from its ``[[team]]`` table."""
    spec = plan.spec
    opts: dict[str, Any] = {
        "num_cpus": 1.0 if spec.num_cpus is None else float(spec.num_cpus),
        "num_gpus": 0.0 if spec.num_gpus is None else float(spec.num_gpus),
    }
    resources = getattr(spec, "resources", None)
    if resources:
        opts["resources"] = {str(k): float(v) for k, v in dict(resources).items()}
    return opts


def _check_fits(plans: list[build.MemberPlan]) -> None:
    """Fail at once, naming the member, when the cluster can never place it (Ray would wait
    forever otherwise). Totals only: per-node packing is left to the start timeout."""
    import ray

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


def run_ray(config: Any, run_dir: Path, resume: bool) -> dict[str, Any]:
    state, payload = load_resume_state(run_dir) if resume else (RunState(), {})
    setup = build.prepare_team(config, payload)
    plans, lead, heads, info = setup.plans, setup.lead, setup.heads, setup.info
    learner, uses_logp = setup.learner, setup.uses_logp
    exp = config.experiment
    shards = max(1, int(getattr(config.buffer, "shards", 1) or 1))

    cpus = sum(member_options(p)["num_cpus"] for p in plans)
    if not learner.uses_replay:
        shards = 0  # an on-policy learner: explorers' transitions have no one to go to
    started = connect(getattr(exp, "ray_address", None), cpus)
    import ray

    from wheeler2.runtime import ray_actors as ra

    old_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    actors: dict[str, Any] = {}
    helpers: list[Any] = []
    try:
        # After ray.init, which installs its own SIGTERM handler in the driver.
        signal.signal(signal.SIGTERM, _raise_interrupt)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _check_fits(plans)
        member_steps = {p.name: int(payload.get("member_steps", {}).get(p.name, 0)) for p in plans}
        run_id = uuid.uuid4().hex[:8]
        for p in plans:
            actors[p.name] = ra.MemberActor.options(
                name=f"wheeler2-{run_id}-{p.name}", **member_options(p)
            ).remote(p.name)
        placed = _wait_placed(actors, plans)
        for name in placed:
            placed[name]["actor"] = f"wheeler2-{run_id}-{name}"  # ray.get_actor(.., NAMESPACE)
        # Shards next to the learner: it is the one that samples them, many times a second.
        near_learner = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node_id=placed[lead.name]["node_id"], soft=True
        )
        shard_actors = [
            ra.ReplayShard.options(
                name=f"wheeler2-{run_id}-buffer-{i}", scheduling_strategy=near_learner
            ).remote(config, i, shards, uses_logp, float(learner.params.gamma))
            for i in range(shards)
        ]
        helpers.extend(shard_actors)
        board = ra.Board.options(
            name=f"wheeler2-{run_id}-board", scheduling_strategy=near_learner
        ).remote(int(exp.total_steps), member_steps)
        helpers.append(board)
        try:
            ray.get([s.ready.remote() for s in shard_actors] + [board.ping.remote()])
        except ray.exceptions.RayError as exc:
            raise MemberFailed("buffer", str(exc)) from None
        if payload.get("replay") is not None and shards:
            if shards == 1:
                ray.get(shard_actors[0].load_state_dict.remote(payload["replay"]))
            else:
                print("warning: the checkpoint's replay is not loaded into a sharded buffer")
        ray.get(board.set_weights.remote(1, [ray.put(ra.float_state(learner.actor))]))
        recorder = Recorder(config, run_dir, state)
        (run_dir / "members.json").write_text(
            json.dumps({name: placed[name]["pid"] for name in actors}, indent=1)
        )
        (run_dir / "placement.json").write_text(json.dumps(placed, indent=1))
        runs = {}
        for p in plans:
            args = ra.RayMemberArgs(
                config=config,
                plan=p,
                board=board,
                shards=shard_actors,
                layout=build.replay_layout(info, heads, logp=uses_logp),
                state=(payload.get("members", {}).get(p.name) if payload else None),
                env_steps=member_steps[p.name],
                eval_seed=int(exp.seed) + 99_991,
                next_eval=recorder.schedule.next_eval,
            )
            runs[actors[p.name].run.remote(args)] = p.name
        team = _RayTeam(config, recorder, board, shard_actors, runs, placed, payload)
        return team.supervise()
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        for actor in list(actors.values()) + helpers:
            try:
                ray.kill(actor)
            except Exception:
                pass
        if started:
            ray.shutdown()


def _wait_placed(actors: dict[str, Any], plans: list[build.MemberPlan]) -> dict[str, Any]:
    """Where each member actor started; an error naming the first one that never did."""
    import ray

    refs = {actors[p.name].where.remote(): p.name for p in plans}
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
    return out


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _RayTeam:
    """The driver's loop: messages in, evals recorded, checkpoints assembled, deaths caught."""

    def __init__(
        self,
        config: Any,
        recorder: Recorder,
        board: Any,
        shards: list[Any],
        runs: dict[Any, str],
        placed: dict[str, Any],
        payload: dict[str, Any],
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.board = board
        self.shards = shards
        self.runs = dict(runs)
        self.names = set(runs.values())
        self.placed = placed
        self.states: dict[str, Any] = dict(payload.get("members", {})) if payload else {}
        self.steps: dict[str, int] = dict(payload.get("member_steps", {})) if payload else {}
        self.figures: dict[str, dict[str, float]] = {}
        self.finished: set[str] = set()
        self.errors: dict[str, str] = {}
        self.pending: dict[str, Any] | None = None  # checkpoint being assembled
        self.lead = build.learner_plan(build.plan_team(config)).name
        self.released = False

    @property
    def env_steps(self) -> int:
        return int(sum(self.steps.values()))

    def supervise(self) -> dict[str, Any]:
        import ray

        interrupted = False
        try:
            while self.runs and not self.errors and not self.recorder.solved:
                self._collect(POLL_S)
                self._read()
                self.recorder.state.env_steps = self.env_steps
                if self.pending is None and self.recorder.checkpoint_due(self.env_steps):
                    request = ray.get(self.board.ask_states.remote())
                    self.pending = {"request": request, "got": set()}
                if self.recorder.log_due():
                    self.recorder.progress(self.env_steps, self.figures)
        except KeyboardInterrupt:
            interrupted = True
        failed = next(iter(self.errors), None)
        shield_shutdown(quiet=not (interrupted or failed))
        self._stop()
        self._drain(STOP_GRACE_S)
        self.recorder.state.env_steps = self.env_steps
        self.recorder.save_checkpoint(self._payload())
        summary = self.recorder.finish(
            {n: {**self.figures.get(n, {}), **self._where(n)} for n in sorted(self.names)},
            interrupted=interrupted or failed is not None,
        )
        if failed:
            detail = self.errors[failed]
            print(
                f"\nmember {failed!r} failed; the team was stopped and checkpointed.\n{detail}",
                flush=True,
            )
            raise MemberFailed(failed, detail)
        if interrupted:
            raise KeyboardInterrupt
        return summary

    def _where(self, name: str) -> dict[str, Any]:
        info = self.placed.get(name, {})
        return {k: info[k] for k in ("node_id", "node_ip") if k in info}

    # -- results and messages --
    def _collect(self, timeout: float) -> None:
        """Members whose ``run`` returned or failed."""
        import ray

        if not self.runs:
            return
        ready, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=timeout)
        for ref in ready:
            name = self.runs.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                self.errors[name] = f"its actor died: {_first_line(exc)}"
                continue
            except ray.exceptions.RayError as exc:
                self.errors[name] = str(exc)
                continue
            # The member pinged the board before returning, so everything it posted is there:
            # handle those first, or a stale checkpoint state would overwrite the final one.
            self._read()
            self.states[name], self.steps[name] = result["state"], int(result["env_steps"])
            self.figures[name] = result["figures"]
            self.recorder.scalars(name, self.env_steps, result["figures"])
            if result["eval"] is not None:
                env_steps, evaluation = result["eval"]
                self._record_eval(name, env_steps, evaluation, result["state"])
            self.finished.add(name)
            if name == self.lead:
                # Nobody samples any more: let producers that wait on the gate finish.
                self._release()

    def _read(self) -> None:
        import ray

        try:
            messages, steps = ray.get(self.board.drain.remote())
        except ray.exceptions.RayError as exc:
            self.errors.setdefault("board", str(exc))
            return
        for name, value in steps.items():
            if name not in self.finished:
                self.steps[name] = max(self.steps.get(name, 0), value)
        for msg in messages:
            self._handle(msg)

    def _handle(self, msg: tuple) -> None:
        kind, name = msg[0], msg[1]
        if kind == "figures":
            self.figures[name] = msg[2]
            self.recorder.scalars(name, self.env_steps, msg[2])
        elif kind == "eval":
            _, _, env_steps, result, learner_state = msg
            self._record_eval(name, env_steps, result, learner_state)
        elif kind == "state":
            _, _, req, agent_state, steps = msg
            self.states[name], self.steps[name] = agent_state, steps
            if self.pending is not None and req == self.pending["request"]:
                self.pending["got"].add(name)
                if self.pending["got"] >= self.names - self.finished:
                    self.recorder.save_checkpoint(self._payload())
                    self.pending = None

    def _record_eval(self, name: str, env_steps: int, result: Any, state: Any) -> None:
        self.recorder.state.env_steps = max(self.env_steps, env_steps)
        best = self.recorder.record_eval(env_steps, result)
        self.states[name] = state
        if best:
            self.recorder.save_checkpoint(self._payload(), best=True)

    # -- stopping --
    def _release(self) -> None:
        if not self.released:
            self.released = True
            for shard in self.shards:
                shard.release.remote()

    def _stop(self) -> None:
        self.board.stop.remote()
        self._release()

    def _drain(self, grace_s: float) -> None:
        """After a stop: collect the final states of the members still running."""
        deadline = time.perf_counter() + grace_s
        while self.runs and time.perf_counter() < deadline:
            self._collect(POLL_S)
        self._read()
        self.runs.clear()  # still running after the grace: their last checkpointed state stays

    def _payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"members": dict(self.states), "member_steps": dict(self.steps)}
        if getattr(self.config.buffer, "checkpoint", False) and len(self.shards) == 1:
            import ray

            try:
                out["replay"] = ray.get(self.shards[0].state_dict.remote(), timeout=60)
            except Exception as exc:  # the members' weights matter more than the buffer
                print(f"warning: the replay could not be checkpointed: {exc}")
        return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
