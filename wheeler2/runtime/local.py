"""Backend ``local``: one process per member on this machine, started with ``multiprocess``.

The main process is a coordinator: it owns every shared resource (the central replay, the weight
block), starts the members, reads their reports over one pipe each, records evals, assembles
checkpoints and stops the team. Shared memory and processes are released in ``finally`` blocks
on every path out: normal end, Ctrl-C / SIGTERM (exit 130), and a member that raised or died
(exit 1, the member named).

Members talk to the coordinator through one-way pipes rather than a shared queue: a member killed
in the middle of a send can then break only its own pipe (seen as EOF, which is how a death is
detected) and never a lock that the other members need.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import multiprocess as mp
from multiprocess.connection import wait

from wheeler2.runtime import build
from wheeler2.runtime.experiment import (
    MemberFailed,
    Recorder,
    RunState,
    load_resume_state,
    shield_shutdown,
)

STOP_GRACE_S = 10.0  # members get this long to finish a step and send a final state
REPORT_EVERY_S = 2.0


@dataclass
class MemberArgs:
    """Everything a member process needs, picklable."""

    config: Any
    plan: build.MemberPlan
    slot: int
    replay: Any
    weights: Any
    counters: Any
    stop: Any
    checkpoint_request: Any
    conn: Any
    state: dict[str, Any] | None
    env_steps: int
    eval_seed: int
    next_eval: int


# -- inside a member process --
def member_main(args: MemberArgs) -> None:
    # Ctrl-C reaches the whole process group; the coordinator alone decides how the team stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    conn = args.conn
    try:
        _member_loop(args)
    except BaseException:
        try:
            conn.send(("error", args.plan.name, traceback.format_exc()))
        except Exception:
            traceback.print_exc()  # the pipe is gone: stderr is the last place to say it
        # The coordinator prints the traceback it was sent; a plain exit avoids a second copy.
        sys.exit(1)
    finally:
        conn.close()


def _member_loop(args: MemberArgs) -> None:
    from wheeler2.buffer import Replay
    from wheeler2.runtime.evaluation import evaluate
    from wheeler2.runtime.member import Member, Trainer
    from wheeler2.sync import WeightClient, WeightPublisher

    build.set_compute_threads()
    config, plan, conn = args.config, args.plan, args.conn
    seed = build.member_seed(config, plan)
    num_envs = int(config.env.num_envs)
    env = build.make_env(config, num_envs, seed, plan)
    heads = build.make_heads(config, env, build.make_task(config))
    agent = build.make_agent(config, plan, build.space_info(env.info, heads), seed)
    if args.state is not None:
        agent.load_state_dict(args.state)
    replay = None if args.replay is None else Replay.attach(args.replay)
    learner = plan.role == "learner"
    # The learner also acts; its own inserts must never wait on the gate, which waits on it.
    writer = None if replay is None else replay.writer(num_envs=env.num_envs, block=not learner)
    member = Member(plan.name, plan.role, agent, env, heads, writer, seed)
    member.stats.env_steps = args.env_steps
    trainer = publisher = client = eval_env = None
    total_steps = int(config.experiment.total_steps)
    eval_every = int(config.experiment.eval_every)
    next_eval = args.next_eval
    if learner:
        trainer = Trainer(agent, replay) if replay is not None else None
        publisher = WeightPublisher.attach(args.weights)
        eval_env = build.make_env(
            config, int(config.experiment.eval_episodes), args.eval_seed, plan
        )
    elif plan.spec.sync is not None:
        client = WeightClient.attach(
            args.weights,
            agent.actor,
            list(plan.spec.sync.keep),
            float(plan.spec.sync.alpha),
            member=plan.name,
        )
        client.pull()
    sync_every = plan.spec.sync.every if plan.spec.sync is not None else 0
    next_sync = args.env_steps + sync_every
    seen_request = args.checkpoint_request.value
    next_report = time.perf_counter() + REPORT_EVERY_S
    publish_every = 50  # learner updates between weight publishes: ~25 µs each, cheap
    next_publish = publish_every
    try:
        while not args.stop.is_set():
            total = sum(args.counters[:])
            if total >= total_steps:
                break
            args.counters[args.slot] += member.step()
            if learner:
                if trainer is not None:
                    trainer.train_available(max_updates=publish_every)
                # Off-policy learners publish every `publish_every` updates, on-policy ones
                # (which update inside step) every `publish_every` vector steps.
                progress = trainer.updates if trainer is not None else member.stats.env_steps
                if progress >= next_publish:
                    publisher.publish(agent.actor)
                    next_publish = progress + publish_every
                if total >= next_eval:
                    result = evaluate(agent, eval_env, int(config.experiment.seed) + 7)
                    conn.send(("eval", plan.name, total, result, agent.state_dict()))
                    next_eval = (total // eval_every + 1) * eval_every
            elif client is not None and member.stats.env_steps >= next_sync:
                client.pull()
                next_sync += sync_every
            request = args.checkpoint_request.value
            if request != seen_request:
                seen_request = request
                conn.send(("state", plan.name, request, agent.state_dict(), member.stats.env_steps))
            now = time.perf_counter()
            if now >= next_report:
                next_report = now + REPORT_EVERY_S
                conn.send(("figures", plan.name, _figures(member, trainer, client)))
        if learner and not args.stop.is_set():
            # The budget is spent: take the updates the gate still owes (producers run at most
            # its tolerance ahead), then the closing eval, so the curve ends on the final actor.
            if trainer is not None:
                trainer.train_available()
            total = sum(args.counters[:])
            result = evaluate(agent, eval_env, int(config.experiment.seed) + 7)
            conn.send(("eval", plan.name, total, result, agent.state_dict()))
        conn.send(("figures", plan.name, _figures(member, trainer, client)))
        conn.send(("final", plan.name, agent.state_dict(), member.stats.env_steps))
    finally:
        member.close()
        if eval_env is not None:
            eval_env.close()
        for res in (client, publisher, replay):
            if res is not None:
                res.close()


def _figures(member: Any, trainer: Any, client: Any) -> dict[str, float]:
    values = member.figures()
    if trainer is not None:
        values.update(trainer.pop_metrics())
        values["updates_per_insert"] = float(trainer.replay.stats().get("updates_per_insert", 0.0))
    if client is not None and client.version is not None:
        values["sync_version_lag"] = float(client.lag())
    return values


# -- the coordinator --
def run_local(config: Any, run_dir: Path, resume: bool) -> dict[str, Any]:
    from wheeler2.buffer import Replay
    from wheeler2.sync import WeightPublisher

    state, payload = load_resume_state(run_dir) if resume else (RunState(), {})
    setup = build.prepare_team(config, payload)
    plans, lead, heads, info = setup.plans, setup.lead, setup.heads, setup.info
    learner, uses_logp = setup.learner, setup.uses_logp
    exp = config.experiment
    her = config.buffer.her is not None
    ctx = mp.get_context("spawn")
    replay = None
    if learner.uses_replay:
        replay = Replay.create(
            build.replay_layout(info, heads, logp=uses_logp),
            build.replay_config(config, lead.spec.params),
            gamma=float(learner.params.gamma),
            relabel=heads.relabel if her else None,
            seed=int(exp.seed),
        )
    publisher = None
    procs: dict[str, Any] = {}
    conns: dict[Any, str] = {}
    recorder = None
    old_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if payload.get("replay") is not None and replay is not None:
            replay.load_state_dict(payload["replay"])
        publisher = WeightPublisher.create(learner.actor)
        publisher.publish(learner.actor)
        signal.signal(signal.SIGTERM, _raise_interrupt)
        member_steps = payload.get("member_steps", {}) if payload else {}
        counters = ctx.Array("q", [int(member_steps.get(p.name, 0)) for p in plans], lock=False)
        stop = ctx.Event()
        request = ctx.Value("q", 0, lock=False)
        recorder = Recorder(config, run_dir, state)
        for p in plans:
            reader, writer_end = ctx.Pipe(duplex=False)
            args = MemberArgs(
                config=config,
                plan=p,
                slot=p.index,
                replay=None if replay is None else replay.handle(),
                weights=publisher.handle(),
                counters=counters,
                stop=stop,
                checkpoint_request=request,
                conn=writer_end,
                state=(payload.get("members", {}).get(p.name) if payload else None),
                env_steps=int(member_steps.get(p.name, 0)),
                eval_seed=int(exp.seed) + 99_991,
                next_eval=recorder.schedule.next_eval,
            )
            proc = ctx.Process(
                target=member_main, args=(args,), name=f"wheeler2-{p.name}", daemon=True
            )
            proc.start()
            writer_end.close()
            procs[p.name] = proc
            conns[reader] = p.name
        # Which process is which member, for a person (or a test) looking at the run from outside.
        (run_dir / "members.json").write_text(
            json.dumps({name: proc.pid for name, proc in procs.items()}, indent=1)
        )
        release = replay.release if replay is not None else None
        team = _Team(
            config, recorder, procs, conns, counters, stop, request, payload, lead.name, release
        )
        return team.supervise()
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()
        for proc in procs.values():
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in conns:
            conn.close()
        if publisher is not None:
            publisher.close()
        if replay is not None:
            replay.close()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _Team:
    """The coordinator's loop: reports in, evals recorded, checkpoints assembled, deaths caught."""

    def __init__(
        self,
        config: Any,
        recorder: Recorder,
        procs: dict[str, Any],
        conns: dict[Any, str],
        counters: Any,
        stop: Any,
        request: Any,
        payload: dict[str, Any],
        lead: str,
        release: Callable[[], None] | None,
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.procs = procs
        self.conns = dict(conns)
        self.counters = counters
        self.stop = stop
        self.request = request
        self.states: dict[str, Any] = dict(payload.get("members", {})) if payload else {}
        self.steps: dict[str, int] = dict(payload.get("member_steps", {})) if payload else {}
        self.figures: dict[str, dict[str, float]] = {}
        self.finished: set[str] = set()
        self.errors: dict[str, str] = {}
        self.pending: dict[str, Any] | None = None  # checkpoint being assembled
        self.lead = lead  # the learner's name
        # Lets producers waiting on the ratio gate go once nobody will sample any more.
        self.release = release

    @property
    def env_steps(self) -> int:
        return int(sum(self.counters[:]))

    def _release(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None

    def supervise(self) -> dict[str, Any]:
        interrupted = False
        failed: str | None = None
        try:
            while len(self.finished) < len(self.procs):
                self._read(timeout=0.1)
                failed = self._find_failure()
                if failed:
                    self._read(timeout=0.2)  # a member that raised sends its traceback first
                    failed = self._find_failure()
                    how = (
                        "raised"
                        if failed in self.errors
                        else (f"died (exit code {self.procs[failed].exitcode})")
                    )
                    print(f"\nmember {failed!r} {how}; stopping the team", flush=True)
                    break
                if self.recorder.solved:
                    break
                self.recorder.state.env_steps = self.env_steps
                if self.pending is None and self.recorder.checkpoint_due(self.env_steps):
                    self._ask_states()
                if self.recorder.log_due():
                    self.recorder.progress(self.env_steps, self.figures)
        except KeyboardInterrupt:
            interrupted = True
        shield_shutdown(quiet=not (interrupted or failed))
        self.stop.set()
        self._release()
        self._drain(STOP_GRACE_S)
        self.recorder.state.env_steps = self.env_steps
        self.recorder.save_checkpoint(self._payload())
        summary = self.recorder.finish(self.figures, interrupted=interrupted or failed is not None)
        if failed:
            detail = (
                self.errors.get(failed) or f"process exited with code {self.procs[failed].exitcode}"
            )
            print(
                f"member {failed!r} failed; the team was stopped and checkpointed.\n{detail}",
                flush=True,
            )
            raise MemberFailed(failed, detail)
        if interrupted:
            raise KeyboardInterrupt
        return summary

    # -- messages --
    def _read(self, timeout: float) -> None:
        for conn in wait(list(self.conns), timeout=timeout):
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                del self.conns[conn]  # closed: finished cleanly or died; _find_failure tells which
                continue
            self._handle(msg)

    def _handle(self, msg: tuple) -> None:
        kind, name = msg[0], msg[1]
        if kind == "figures":
            self.figures[name] = msg[2]
            self.recorder.scalars(name, self.env_steps, msg[2])
        elif kind == "eval":
            _, _, env_steps, result, learner_state = msg
            self.recorder.state.env_steps = max(self.env_steps, env_steps)
            best = self.recorder.record_eval(env_steps, result)
            self.states[name] = learner_state
            if best:
                self.recorder.save_checkpoint(self._payload(), best=True)
        elif kind == "state":
            _, _, req, agent_state, steps = msg
            self.states[name], self.steps[name] = agent_state, steps
            if self.pending is not None and req == self.pending["request"]:
                self.pending["got"].add(name)
                if self.pending["got"] >= self._alive():
                    self.recorder.save_checkpoint(self._payload())
                    self.pending = None
        elif kind == "final":
            self.states[name], self.steps[name] = msg[2], msg[3]
            self.finished.add(name)
            if name == self.lead:
                self._release()
        elif kind == "error":
            self.errors[name] = msg[2]

    def _alive(self) -> set[str]:
        return {n for n, p in self.procs.items() if p.is_alive() and n not in self.finished}

    def _ask_states(self) -> None:
        self.request.value += 1
        self.pending = {"request": self.request.value, "got": set()}

    def _find_failure(self) -> str | None:
        if self.errors:
            return next(iter(self.errors))
        for name, proc in self.procs.items():
            if name not in self.finished and not proc.is_alive():
                return name
        return None

    def _drain(self, grace_s: float) -> None:
        """After ``stop``: collect the final states of the members still running."""
        deadline = time.perf_counter() + grace_s
        while self.conns and time.perf_counter() < deadline:
            if not (self._alive() - self.finished):
                self._read(timeout=0.05)
                if not any(p.is_alive() for p in self.procs.values()):
                    break
            self._read(timeout=0.1)

    def _payload(self) -> dict[str, Any]:
        return {"members": dict(self.states), "member_steps": dict(self.steps)}
