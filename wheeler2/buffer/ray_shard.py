"""The central replay across Ray: shard actors, and a client with the local :class:`Replay`'s
interface (``writer``, ``can_sample``, ``sample``, ``update_priorities``, ``stats``, ``finish``,
``close``), so the member loop uses either without knowing which.

* members stage their transitions locally (:class:`RemoteWriter`) and send ``chunk`` vector steps
  per remote call to their home shard (member index % shards); the shard replays them into a
  real :class:`Writer`, so episode ids, n-step links and HER episodes are exactly the local
  backend's;
* the learner pulls several batches per call from every shard, one call in flight per shard,
  and sends priorities back in batches;
* the ratio gate is each shard's own rule, awaited inside the (async) shard actor: a producer's
  insert call is not served while it is too far ahead, and a sample call is served only with the
  batches the gate allows. Producers keep at most one insert in flight, so an unserved call
  stops them.

Only imported by the ray backend (it imports ``ray``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import ray

from .admission import AdmissionCounts
from .config import Layout, ReplayConfig

if TYPE_CHECKING:
    from .replay import Replay
    from .writer import Writer

BATCHES_PER_CALL = 8  # replay batches per sample call: ~1 ms of call latency over ~8 updates
# The fewest updates a learner on Ray tries to take as a step ends (the member loop's
# PUBLISH_EVERY, what it tried before the shards said what they owe): a gate's count is a reply
# old, and the loop stops at the first batch not yet here anyway.
LEAST_OWED = 50
SAMPLE_WAIT_S = 1.0  # how long a shard holds an unservable sample call before answering empty
TERMS_KEY = "priority_terms"  # the sampling shard's priority terms in its checkpointed state


class ShardSpec(Protocol):
    """How a shard makes its part of the buffer (``runtime.replays.ReplaySpec`` is one)."""

    @property
    def cfg(self) -> ReplayConfig: ...

    def create(self) -> Replay: ...


@ray.remote(num_cpus=0)
class ReplayShard:
    """One shard of the central replay: a :class:`wheeler2.buffer.Replay` owned by this actor.

    An async actor: every call runs on one event loop, so the Replay is only ever touched by one
    thread, while calls that must wait for the gate wait as coroutines without blocking others.
    Its shared memory is unlinked by :meth:`close` (the driver calls it on every ending), by
    ``__ray_shutdown__`` when Ray ends the actor gracefully, and otherwise by the next run's
    sweep of segments whose creator is gone (:func:`wheeler2.buffer.shm.sweep_stale`).
    """

    def __init__(self, spec: ShardSpec, shard: int) -> None:
        from wheeler2.buffer.shm import sweep_stale
        from wheeler2.process import set_compute_threads

        set_compute_threads()
        sweep_stale()  # this node's leftovers of killed runs (the driver sweeps its own node)
        self.replay = spec.create()
        self.shard = shard
        self.timeout_s = float(spec.cfg.timeout_s)
        self.writers: dict[str, Writer] = {}
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

    async def ready(self) -> int:
        """The actor's pid: its segments are named after it."""
        return os.getpid()

    async def insert(
        self, producer: str, steps: dict[str, np.ndarray], wait: bool
    ) -> dict[str, Any]:
        """Stage ``T`` vector steps (arrays shaped [T, num_envs, ...]) into ``producer``'s writer.
        Answers ``{"steps": T, "admission": counts}``: the rows that writer stored and refused
        so far (``[buffer] keep``; None without a filter), for the producer's figures.

        Not served while the producer runs too far ahead of the learner, unless ``wait`` is
        False (the learner's own steps: the gate waits on the learner).
        """
        gate = self.replay.gate
        if wait and gate.enabled:
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
        return {"steps": int(obs.shape[0]), "admission": _counts(writer)}

    async def flush(self, producer: str) -> dict[str, int] | None:
        """Store what ``producer`` staged; answers its admission counts, as :meth:`insert`."""
        writer = self.writers.get(producer)
        if writer is None:
            return None
        writer.flush()
        await self._notify()
        return _counts(writer)

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
        # The gate's owed() after this call: the learner takes that many as its step ends.
        owed = replay.gate.owed()
        return {"n": len(out), "batch": stacked, "stats": replay.stats(), "owed": owed}

    async def update_priorities(self, items: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for index, td in items:
            self.replay.update_priorities(index, td)

    async def alive(self) -> None:
        """The learner lives but is not sampling (``Replay.alive``)."""
        self.last_update = time.time()

    async def release(self) -> None:
        """The run is stopping: serve every waiting producer so that it can see the stop."""
        self.released = True
        await self._notify()

    async def stats(self) -> dict[str, float]:
        return self.replay.stats()

    async def state_dict(self) -> dict[str, Any]:
        for writer in self.writers.values():
            writer.flush()
        state = self.replay.state_dict()
        # The shard samples, so it holds the priority terms a local learner keeps (the RND).
        terms = self.replay.priority_state()
        if terms is not None:
            state[TERMS_KEY] = terms
        return state

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        terms = state.pop(TERMS_KEY, None)
        self.replay.load_state_dict(state)
        self.replay.load_priority_state(terms)

    async def continue_updates(self, updates: int) -> None:
        """This shard's part of a resumed learner's updates: PER's beta goes on from there (the
        local learner does this for its replay in its own process; here the shard samples)."""
        self.replay.continue_updates(updates)

    async def close(self) -> None:
        """Unlink the shard's shared memory (idempotent)."""
        self.replay.close()

    def __ray_shutdown__(self) -> None:
        self.replay.close()


def _counts(writer: Writer) -> dict[str, int] | None:
    adm = writer.admission
    return None if adm is None else {"admitted": adm.admitted, "refused": adm.refused}


class RemoteWriter:
    """Member-side staging with the Writer's ``add`` / ``flush``: ``chunk`` vector steps per
    remote call, at most one call in flight (waiting on it is how the gate stops a producer)."""

    def __init__(self, shard: Any, producer: str, chunk: int, wait: bool, layout: Layout) -> None:
        self.layout = layout  # what Member reads to know whether the buffer stores logp
        self.shard = shard
        self.producer = producer
        self.chunk = max(1, int(chunk))
        self.wait_on_gate = wait
        self.staged: dict[str, list[np.ndarray]] = {}
        self.count = 0
        self.in_flight: Any = None
        self.sent = 0
        # The shard's writer decides admission; its counts come back with each insert.
        self.admission: AdmissionCounts | None = None

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
        self._wait()
        self.in_flight = self.shard.insert.remote(self.producer, steps, self.wait_on_gate)

    def _wait(self) -> None:
        if self.in_flight is not None:
            reply = ray.get(self.in_flight)
            self.sent += reply["steps"]
            self._count(reply["admission"])
            self.in_flight = None

    def _count(self, counts: dict[str, int] | None) -> None:
        if counts is not None:
            self.admission = AdmissionCounts(**counts)

    def flush(self) -> None:
        self._send()
        self._wait()
        self._count(ray.get(self.shard.flush.remote(self.producer)))


class ShardedReplay:
    """A member's view of the shards, with the local :class:`Replay`'s methods.

    Producers write to their home shard; the learner keeps one sample call in flight per shard,
    each bringing up to ``BATCHES_PER_CALL`` batches. ``can_sample`` never blocks.
    """

    def __init__(
        self, shards: list[Any], layout: Layout, chunk: int, producer: str, home: int
    ) -> None:
        self.shards = shards
        self.layout = layout
        self.chunk = int(chunk)
        self.producer = producer
        self.home = shards[home % len(shards)]
        self.batches = BATCHES_PER_CALL
        self.queue: deque[tuple[int, dict[str, np.ndarray]]] = deque()
        self.in_flight: dict[Any, int] = {}
        self.priorities: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in shards]
        self.shard_stats: list[dict[str, float]] = [{} for _ in shards]
        self.shard_owed: list[int | None] = [0 for _ in shards]  # each gate's, at its last reply
        self._last = 0
        self.finished = False

    # -- producer side --
    def writer(self, num_envs: int, block: bool | None = None) -> RemoteWriter:
        return RemoteWriter(self.home, self.producer, self.chunk, bool(block), self.layout)

    # -- learner side --
    def _issue(self, i: int, wait_s: float = SAMPLE_WAIT_S) -> None:
        self.in_flight[self.shards[i].sample.remote(self.batches, wait_s)] = i

    def _take(self, ref: Any) -> int:
        i = self.in_flight.pop(ref)
        reply = ray.get(ref)
        self.shard_stats[i] = reply["stats"]
        self.shard_owed[i] = reply.get("owed")
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

    @property
    def gate(self) -> ShardedReplay:
        """What the trainer asks for :meth:`owed`, as it asks a local replay's gate."""
        return self

    def owed(self) -> int | None:
        """The updates to take as the learner's step ends: the batches here and what each
        shard's gate still allowed at its last reply. Without it the learner took at most
        LEAST_OWED per step on Ray and fell behind for good wherever its own rows per step x
        updates_per_insert exceeded that (its own inserts are never held). None where the
        gates are disabled (updates_per_insert = 0), as a local gate says."""
        self._poll()
        known = [o for o in self.shard_owed if o is not None]
        if not known:
            return None
        return max(LEAST_OWED, len(self.queue) + sum(known))

    def can_sample(self) -> bool:
        if not self.queue:
            self._poll()
        return bool(self.queue)

    def sample(
        self, batch_size: int | None = None, timeout: float | None = None
    ) -> dict[str, np.ndarray]:
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

    def alive(self) -> None:
        """The learner lives but is not sampling (``Replay.alive``); no answer awaited."""
        for shard in self.shards:
            shard.alive.remote()

    def stats(self) -> dict[str, float]:
        inserts = sum(s.get("inserts", 0) for s in self.shard_stats)
        updates = sum(s.get("updates", 0) for s in self.shard_stats)
        ratios = [s["updates_per_insert"] for s in self.shard_stats if "updates_per_insert" in s]
        return {
            "inserts": inserts,
            "updates": updates,
            "updates_per_insert": float(np.mean(ratios)) if ratios else 0.0,
        }

    def close(self) -> None:
        """Send the priorities still batched here; the shards belong to the driver."""
        for i in range(len(self.shards)):
            self._send_priorities(i)
