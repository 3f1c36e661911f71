"""The Ray actors of backend ``ray``: replay shards, the board, and one actor per member.

Data flow (see ``docs/cluster.md`` for the picture):

* members stage their transitions locally (:class:`RemoteWriter`) and send ``chunk`` vector steps
  per remote call to their shard (member index % shards); the shard replays them into a real
  :class:`wheeler2.buffer.Writer` so episode ids, n-step links and HER episodes are exactly the
  local backend's;
* the learner pulls several batches per call from every shard, one call in flight per shard
  (:class:`ShardSampler`), and sends priorities back in batches;
* the ratio gate is each shard's own ``RatioGate`` rule, awaited inside the (async) shard actor:
  a producer's insert call is not served while it is too far ahead, and a sample call is served
  only with the batches the gate allows. Producers keep at most one insert in flight, so an
  unserved call stops them;
* the learner ``ray.put``s its actor's weights with a version and posts the reference to the
  :class:`Board`; explorers get the newest reference with their step budget and blend it in.

The board is also how the driver talks to running members: step budget, stop, checkpoint
requests in one direction; figures, evals and states in the other.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import traceback
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import ray
import torch

from wheeler2.runtime import build

REPORT_EVERY_S = 2.0
PUBLISH_EVERY = 50  # learner updates between weight publishes, as in the local backend
BATCHES_PER_CALL = 8  # replay batches per sample call: ~1 ms of call latency over ~8 updates
SAMPLE_WAIT_S = 1.0  # how long a shard holds an unservable sample call before answering empty


def where() -> dict[str, Any]:
    """Where this process runs, for members.json and summary.json."""
    ctx = ray.get_runtime_context()
    return {
        "pid": os.getpid(),
        "node_id": ctx.get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
    }


def shard_config(replay_cfg: Any, shards: int) -> Any:
    """One shard's share of the buffer: capacity, warm-up and gate slack split N ways, so that N
    shards together behave like the one buffer of the local backend."""
    if shards == 1:
        return replay_cfg
    return replace(
        replay_cfg,
        capacity=max(1, replay_cfg.capacity // shards),
        min_size=max(replay_cfg.batch_size, -(-replay_cfg.min_size // shards)),
        gate_tolerance=max(replay_cfg.batch_size, replay_cfg.gate_tolerance // shards),
        beta_steps=None
        if replay_cfg.beta_steps is None
        else max(1, replay_cfg.beta_steps // shards),
    )


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
        self.messages: list[tuple] = []

    def claim(
        self, name: str, want: int, steps_done: int, weights_version: int | None
    ) -> dict[str, Any]:
        """Grant up to ``want`` more env steps of the run's budget; the budget is exact because
        only the board hands it out. Also carries stop, checkpoint request and newer weights."""
        self.steps[name] = int(steps_done)
        granted = 0 if self.stopped else max(0, min(want, self.total_steps - self.granted))
        self.granted += granted
        reply: dict[str, Any] = {
            "granted": granted,
            "total": self.granted,
            "stop": self.stopped,
            "request": self.request,
        }
        if (
            weights_version is not None
            and self.weights is not None
            and self.weights[0] > weights_version
        ):
            reply["weights"] = self.weights
        return reply

    def others_steps(self, name: str) -> int:
        """Env steps the other members reported (each at most one budget block behind)."""
        return int(sum(v for k, v in self.steps.items() if k != name))

    def set_weights(self, version: int, ref: list[Any]) -> None:
        # The reference comes wrapped in a list so that Ray hands over the reference itself.
        if self.weights is None or version > self.weights[0]:
            self.weights = (int(version), ref)

    def post(self, message: tuple) -> None:
        self.messages.append(message)

    def drain(self) -> tuple[list[tuple], dict[str, int]]:
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
# replay shard


@ray.remote(num_cpus=0)
class ReplayShard:
    """One shard of the central replay: a :class:`wheeler2.buffer.Replay` owned by this actor.

    An async actor: every call runs on one event loop, so the Replay is only ever touched by one
    thread, while calls that must wait for the gate (inserts of a producer that is too far
    ahead, samples the learner may not take yet) wait as coroutines without blocking the others.
    """

    def __init__(self, config: Any, shard: int, shards: int, logp: bool, gamma: float) -> None:
        from wheeler2.buffer import Replay

        build.set_compute_threads()
        plans = build.plan_team(config)
        lead = build.learner_plan(plans)
        probe = build.make_env(config, 1, 0)
        heads = build.make_heads(config, probe, build.make_task(config))
        info = probe.info
        probe.close()
        her = config.buffer.her is not None
        cfg = shard_config(build.replay_config(config, lead.spec.params), shards)
        self.replay = Replay.create(
            build.replay_layout(info, heads, logp=logp),
            cfg,
            gamma=gamma,
            relabel=heads.relabel if her else None,
            seed=int(config.experiment.seed) * 1_000 + shard,
        )
        self.shard = shard
        self.timeout_s = float(cfg.timeout_s)
        self.writers: dict[str, Any] = {}
        self.released = False
        self.last_update = time.time()
        self._changed: asyncio.Condition | None = None

    def _cond(self) -> asyncio.Condition:
        if self._changed is None:  # created on the actor's event loop, not in __init__
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        cond = self._cond()
        async with cond:
            cond.notify_all()

    async def _wait(self, ready: Any, limit_s: float) -> bool:
        cond = self._cond()
        deadline = time.monotonic() + limit_s
        async with cond:
            while not (ready() or self.released):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(cond.wait(), timeout=min(left, 1.0))
                except TimeoutError:
                    pass
        return True

    async def ready(self) -> dict[str, Any]:
        return where()

    async def insert(self, producer: str, steps: dict[str, np.ndarray], learner: bool) -> int:
        """Stage ``T`` vector steps (arrays shaped [T, num_envs, ...]) into ``producer``'s writer.

        Not served while the producer runs too far ahead of the learner; the learner's own steps
        never wait, since the gate waits on the learner.
        """
        gate = self.replay.gate
        if not learner and gate.enabled:
            while not await self._wait(gate.producer_may_insert, 5.0):
                # Time out on silence from the learner, not on total waiting.
                if time.time() - self.last_update > self.timeout_s:
                    from wheeler2.buffer import ReplayTimeout

                    raise ReplayTimeout(
                        f"shard {self.shard}: no update for {self.timeout_s:.0f} s: the learner "
                        "may have died or stopped sampling"
                    )
        writer = self.writers.get(producer)
        obs = steps["obs"]
        if writer is None:
            writer = self.writers[producer] = self.replay.writer(num_envs=obs.shape[1], block=False)
        for t in range(obs.shape[0]):
            writer.add(**{k: v[t] for k, v in steps.items()})
        await self._notify()
        return int(obs.shape[0])

    async def flush(self, producer: str) -> None:
        writer = self.writers.get(producer)
        if writer is not None:
            writer.flush()
            await self._notify()

    async def sample(self, batches: int, wait_s: float) -> dict[str, Any]:
        """Up to ``batches`` batches, stacked key by key ([n, B, ...]); waits up to ``wait_s``
        for the gate to allow the first one and answers with n = 0 if it does not."""
        replay = self.replay
        out: list[dict[str, np.ndarray]] = []
        if wait_s <= 0 or await self._wait(replay.can_sample, wait_s):
            while len(out) < batches and replay.can_sample():
                out.append(replay.sample(timeout=0.0))
        if out:
            self.last_update = time.time()
            await self._notify()
        stacked = {k: np.stack([b[k] for b in out]) for k in out[0]} if out else {}
        return {"n": len(out), "batch": stacked, "stats": replay.stats()}

    async def update_priorities(self, items: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for index, td in items:
            self.replay.update_priorities(index, td)

    async def release(self) -> None:
        """The run is stopping: serve every waiting producer so that it can see the stop."""
        self.released = True
        await self._notify()

    async def stats(self) -> dict[str, float]:
        return self.replay.stats()

    async def state_dict(self) -> dict[str, Any]:
        for writer in self.writers.values():
            writer.flush()
        return self.replay.state_dict()

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        self.replay.load_state_dict(state)

    async def close(self) -> None:
        self.replay.close()


# --------------------------------------------------------------------------------------------
# member-side helpers


class RemoteWriter:
    """Member-side staging with the Writer's ``add`` / ``flush``: ``chunk`` vector steps per
    remote call, at most one call in flight (waiting on it is how the gate stops a producer)."""

    def __init__(self, shard: Any, producer: str, chunk: int, learner: bool, layout: Any) -> None:
        self.layout = layout  # what Member reads to know whether the buffer stores logp
        self.shard = shard
        self.producer = producer
        self.chunk = max(1, int(chunk))
        self.learner = learner
        self.staged: dict[str, list[np.ndarray]] = {}
        self.count = 0
        self.in_flight: Any = None
        self.sent = 0

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        **optional: np.ndarray | None,
    ) -> None:
        """Stage one vector step: ``Writer.add``'s arguments, forwarded by name to the shard's
        writer, so optional ones (``logp``, goals, ``valid``) need nothing here."""
        values = {
            "obs": obs,
            "action": action,
            "reward": reward,
            "next_obs": next_obs,
            "terminated": terminated,
            "truncated": truncated,
            **optional,
        }
        for key, value in values.items():
            if value is not None:
                # A copy: env adapters may hand out the same array again on the next step.
                self.staged.setdefault(key, []).append(np.array(value))
        self.count += 1
        if self.count >= self.chunk:
            self._send()

    def _send(self) -> None:
        if not self.count:
            return
        steps = {k: np.stack(v) for k, v in self.staged.items()}
        self.staged = {}
        self.count = 0
        self.wait()
        self.in_flight = self.shard.insert.remote(self.producer, steps, self.learner)

    def wait(self) -> None:
        if self.in_flight is not None:
            self.sent += ray.get(self.in_flight)
            self.in_flight = None

    def flush(self) -> None:
        self._send()
        self.wait()
        ray.get(self.shard.flush.remote(self.producer))


class ShardSampler:
    """The learner's view of the shards, with the Replay methods :class:`Trainer` uses.

    One sample call per shard stays in flight; each brings up to ``BATCHES_PER_CALL`` batches.
    ``can_sample`` never blocks, like the local backend's non-blocking ``train_available``.
    """

    def __init__(self, shards: list[Any], batches: int = BATCHES_PER_CALL) -> None:
        self.shards = shards
        self.batches = batches
        self.queue: deque[tuple[int, dict[str, np.ndarray]]] = deque()
        self.in_flight: dict[Any, int] = {}
        self.priorities: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in shards]
        self.shard_stats: list[dict[str, float]] = [{} for _ in shards]
        self._last = 0
        self.finished = False

    def _issue(self, i: int, wait_s: float = SAMPLE_WAIT_S) -> None:
        self.in_flight[self.shards[i].sample.remote(self.batches, wait_s)] = i

    def _take(self, ref: Any) -> int:
        i = self.in_flight.pop(ref)
        reply = ray.get(ref)
        self.shard_stats[i] = reply["stats"]
        batch = reply["batch"]
        for j in range(reply["n"]):
            # Copies: arrays that come out of the object store are read-only.
            self.queue.append((i, {k: np.array(v[j]) for k, v in batch.items()}))
        return int(reply["n"])

    def _poll(self) -> None:
        if self.finished:
            return
        busy = set(self.in_flight.values())
        for i in range(len(self.shards)):
            if i not in busy:
                self._issue(i)
        ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        for ref in ready:
            i = self.in_flight[ref]
            self._take(ref)
            self._issue(i)

    def can_sample(self) -> bool:
        if not self.queue:
            self._poll()
        return bool(self.queue)

    def sample(self, batch_size: int | None = None, timeout: float | None = None) -> dict:
        while not self.queue:
            self._poll()
            if not self.queue:
                ray.wait(list(self.in_flight), num_returns=1, timeout=timeout)
        self._last, batch = self.queue.popleft()
        return batch

    def update_priorities(self, index: np.ndarray, td_error: np.ndarray) -> None:
        pending = self.priorities[self._last]
        pending.append((np.asarray(index), np.asarray(td_error, dtype=np.float32)))
        if len(pending) >= self.batches:
            self._send_priorities(self._last)

    def _send_priorities(self, i: int) -> None:
        if self.priorities[i]:
            self.shards[i].update_priorities.remote(self.priorities[i])
            self.priorities[i] = []

    def finish(self) -> None:
        """The budget is spent: collect what is in flight, then every batch the gates still
        allow, so that the last updates are taken as in the local backend."""
        self.finished = True
        while self.in_flight:
            self._take(next(iter(self.in_flight)))
        got = 1
        while got:
            refs = [s.sample.remote(self.batches, 0.0) for s in self.shards]
            got = 0
            for i, ref in enumerate(refs):
                self.in_flight[ref] = i
                got += self._take(ref)

    def flush_priorities(self) -> None:
        for i in range(len(self.shards)):
            self._send_priorities(i)

    def stats(self) -> dict[str, float]:
        inserts = sum(s.get("inserts", 0) for s in self.shard_stats)
        updates = sum(s.get("updates", 0) for s in self.shard_stats)
        ratios = [s["updates_per_insert"] for s in self.shard_stats if "updates_per_insert" in s]
        return {
            "inserts": inserts,
            "updates": updates,
            "updates_per_insert": float(np.mean(ratios)) if ratios else 0.0,
        }


def float_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The float tensors of ``module``, detached CPU copies: what the learner publishes."""
    return {
        k: v.detach().to("cpu", copy=True)
        for k, v in module.state_dict().items()
        if torch.is_floating_point(v)
    }


class WeightPuller:
    """Explorer side of the object-store broadcast, with :mod:`wheeler2.sync`'s semantics: every
    float tensor except those ``sync.keep`` matches, blended as θ ← α·θ_learner + (1−α)·θ."""

    def __init__(self, module: torch.nn.Module, keep: list[str], alpha: float, member: str) -> None:
        from wheeler2.sync import SyncError, match_keep

        if not 0.0 < alpha <= 1.0:
            raise SyncError(f"[[team]] {member}: sync alpha must be in (0, 1], got {alpha}")
        self.module = module
        self.alpha = float(alpha)
        self.names = [
            k
            for k, v in module.state_dict().items()
            if torch.is_floating_point(v) and not match_keep(k, keep)
        ]
        self.version = 0
        self.latest = 0

    @torch.no_grad()
    def pull(self, weights: tuple[int, list[Any]] | None) -> int | None:
        """Blend in the published weights ``(version, [ref])`` if newer than the last pulled."""
        from wheeler2.sync import _blend  # the same blend the shared-memory client uses

        if weights is None or weights[0] <= self.version:
            return None
        version, (ref,) = weights
        source = ray.get(ref)
        own = self.module.state_dict()
        names = [n for n in self.names if n in source]
        _blend([own[n] for n in names], [source[n].to(own[n].device) for n in names], self.alpha)
        self.version = int(version)
        return self.version


# --------------------------------------------------------------------------------------------
# the member actor


@dataclass
class RayMemberArgs:
    """Everything a member actor needs; sent once with ``run``."""

    config: Any
    plan: build.MemberPlan
    board: Any
    shards: list[Any]
    layout: Any  # the replay Layout
    state: dict[str, Any] | None
    env_steps: int
    eval_seed: int
    next_eval: int


class _Budget:
    """The member's share of ``total_steps``, claimed from the board one block ahead."""

    def __init__(self, board: Any, name: str, block: int, sync: bool) -> None:
        self.board = board
        self.name = name
        self.block = block
        self.sync = sync
        self.left = 0
        self.reply: dict[str, Any] = {"total": 0, "stop": False, "request": 0, "granted": 0}
        self.weights: tuple[int, list[Any]] | None = None
        self.in_flight: Any = None
        self.peek: Any = None
        self.others = 0

    def run_steps(self, own_steps: int) -> int:
        """The run's env steps so far, as fresh as a call in flight allows, never blocking:
        the learner schedules its evals on it, as the local backend does on its shared
        counters. Own steps are exact; the others' are at most one block behind."""
        if self.peek is not None and ray.wait([self.peek], timeout=0)[0]:
            self.others = int(ray.get(self.peek))
            self.peek = None
        if self.peek is None:
            self.peek = self.board.others_steps.remote(self.name)
        return self.others + int(own_steps)

    def _claim(self, steps_done: int) -> None:
        version = (self.weights[0] if self.weights else 0) if self.sync else None
        self.in_flight = self.board.claim.remote(self.name, self.block, steps_done, version)

    def refill(self, steps_done: int) -> bool:
        """Wait for the claim in flight, send the next; False when the run is over for us."""
        if self.in_flight is None:
            self._claim(steps_done)
        reply = ray.get(self.in_flight)
        self.in_flight = None
        self.reply = reply
        if "weights" in reply:
            self.weights = reply["weights"]
        self.left += reply["granted"]
        if reply["stop"] or not reply["granted"]:
            return False
        self._claim(steps_done)
        return True

    @property
    def total(self) -> int:
        return int(self.reply["total"])


@ray.remote(max_restarts=0, max_task_retries=0)
class MemberActor:
    """One member of the team; its resources are set per ``[[team]]`` when it is created."""

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self) -> dict[str, Any]:
        return where()

    def run(self, args: RayMemberArgs) -> dict[str, Any]:
        try:
            return _member_loop(args)
        except BaseException:
            # The traceback as text: it names the member's own frames, which is what a person
            # reading the failure needs; Ray's wrapper adds its frames around it.
            raise RuntimeError(
                f"member {args.plan.name!r} raised:\n{traceback.format_exc()}"
            ) from None


def _member_loop(args: RayMemberArgs) -> dict[str, Any]:
    from wheeler2.runtime.evaluation import evaluate
    from wheeler2.runtime.member import Member, Trainer

    build.set_compute_threads()
    config, plan, board = args.config, args.plan, args.board
    seed = build.member_seed(config, plan)
    num_envs = int(config.env.num_envs)
    env = build.make_env(config, num_envs, seed)
    heads = build.make_heads(config, env, build.make_task(config))
    agent = build.make_agent(config, plan, build.space_info(env.info, heads), seed)
    if args.state is not None:
        agent.load_state_dict(args.state)
    learner = plan.role == "learner"
    writer = None
    if args.shards:  # none when the learner is on-policy: nobody samples a replay
        shard = args.shards[plan.index % len(args.shards)]
        writer = RemoteWriter(shard, plan.name, int(config.buffer.chunk), learner, args.layout)
    member = Member(plan.name, plan.role, agent, env, heads, writer, seed)
    member.stats.env_steps = args.env_steps
    trainer = sampler = puller = eval_env = None
    eval_every = int(config.experiment.eval_every)
    next_eval = args.next_eval
    if learner:
        if args.shards:
            sampler = ShardSampler(args.shards)
            trainer = Trainer(agent, sampler)
        eval_env = build.make_env(config, int(config.experiment.eval_episodes), args.eval_seed)
    elif plan.spec.sync is not None:
        puller = WeightPuller(
            agent.actor, list(plan.spec.sync.keep), float(plan.spec.sync.alpha), plan.name
        )
    sync_every = plan.spec.sync.every if plan.spec.sync is not None else 0
    next_sync = args.env_steps + sync_every
    # Small blocks: the learner never sits on much of the budget, and the explorers' reported
    # steps, on which the learner schedules its evals, are at most half a chunk behind.
    block = num_envs * (8 if learner else max(1, int(config.buffer.chunk) // 2))
    budget = _Budget(board, plan.name, block, puller is not None)
    seen_request = None
    next_report = time.perf_counter() + REPORT_EVERY_S
    next_publish = PUBLISH_EVERY
    version = 0
    final_eval = None
    stopped = False
    try:
        if puller is not None:
            budget.refill(member.stats.env_steps)
            puller.pull(budget.weights)
        while True:
            if budget.left < num_envs and not budget.refill(member.stats.env_steps):
                stopped = bool(budget.reply["stop"])
                if stopped or budget.left < num_envs:
                    break
            if seen_request is None:
                seen_request = budget.reply["request"]
            budget.left -= member.step()
            if learner:
                total = budget.run_steps(member.stats.env_steps)
                if trainer is not None:
                    trainer.train_available(max_updates=PUBLISH_EVERY)
                # Off-policy learners publish every PUBLISH_EVERY updates, on-policy ones (which
                # update inside step) every PUBLISH_EVERY env steps, as under the local backend.
                progress = trainer.updates if trainer is not None else member.stats.env_steps
                if progress >= next_publish:
                    version += 1
                    board.set_weights.remote(version, [ray.put(float_state(agent.actor))])
                    next_publish = progress + PUBLISH_EVERY
                if total >= next_eval:
                    result = evaluate(agent, eval_env, int(config.experiment.seed) + 7)
                    board.post.remote(("eval", plan.name, total, result, agent.state_dict()))
                    next_eval = (total // eval_every + 1) * eval_every
            elif puller is not None and member.stats.env_steps >= next_sync:
                puller.pull(budget.weights)
                next_sync += sync_every
            request = budget.reply["request"]
            if request != seen_request:
                seen_request = request
                board.post.remote(
                    ("state", plan.name, request, agent.state_dict(), member.stats.env_steps)
                )
            now = time.perf_counter()
            if now >= next_report:
                next_report = now + REPORT_EVERY_S
                board.post.remote(("figures", plan.name, _figures(member, trainer, puller)))
        if writer is not None:
            writer.flush()
        if learner and not stopped:
            # The budget is spent: take the updates the gates still owe, then the closing eval,
            # so that the curve ends on the final actor (as the local backend does).
            if trainer is not None:
                sampler.finish()
                trainer.train_available()
                sampler.flush_priorities()
            result = evaluate(agent, eval_env, int(config.experiment.seed) + 7)
            final_eval = (max(budget.total, budget.run_steps(member.stats.env_steps)), result)
        figures = _figures(member, trainer, puller)
        # Same-caller calls run in order: once this returns, every post above has been handled.
        ray.get(board.ping.remote())
        return {
            "state": agent.state_dict(),
            "env_steps": member.stats.env_steps,
            "figures": figures,
            "eval": final_eval,
        }
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()


def _figures(member: Any, trainer: Any, puller: WeightPuller | None) -> dict[str, float]:
    values = member.figures()
    if trainer is not None:
        values.update(trainer.pop_metrics())
        values["updates_per_insert"] = float(trainer.replay.stats().get("updates_per_insert", 0.0))
    if puller is not None and puller.version:
        values["sync_version"] = float(puller.version)
    return values
