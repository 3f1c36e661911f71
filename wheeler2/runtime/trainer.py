"""The learner half of a member: sample the central replay, take a gradient step, write the
TD errors back as priorities (Acme's learner over its replay table).

With ``prefetch``, the next batch is sampled (and moved to the learner's device) in a background
thread while the current one trains, so the sampling cost hides behind the gradient step
instead of adding to it. The order stays fixed, whatever the threads' timing: batch t + 1 is
always drawn before batch t's priorities are written (they wait for it), so a prefetched run is
as reproducible from its seed as a plain one; its draws see priorities one update older, as an
Ape-X or Acme learner's prefetched batches do. A batch is only sampled ahead while the gate
allows another update within the same call, so nothing the member does between calls (acting,
inserting) races with a draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from wheeler2.agent import Agent, Batch
from wheeler2.runtime.protocols import ReplayTable


class NonFiniteError(RuntimeError):
    """A reward head or a loss turned NaN or infinite: learning from it would poison every
    network and the replay, so the member stops before the value is stored or applied again."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.member = ""
        self.env_steps: int | None = None
        super().__init__(what)

    def __str__(self) -> str:
        at = "" if self.env_steps is None else f" at env step {self.env_steps:,}"
        who = f"member {self.member!r}: " if self.member else ""
        return (
            f"{who}non-finite value: {self.what}{at}; the run stopped and kept the last "
            f"checkpoint from before it"
        )


def check_losses(metrics: dict[str, float]) -> None:
    """Raise :class:`NonFiniteError` for a loss that is NaN or infinite."""
    # Losses only: a statistic such as explained variance is legitimately NaN on a flat batch.
    for key, value in metrics.items():
        if "loss" in key and not math.isfinite(value):
            raise NonFiniteError(f"loss {key!r} is {value}")


Prepared = tuple[Batch, dict[str, np.ndarray], int]  # the batch, its arrays, shared rows


class Trainer:
    """Samples the central replay and takes gradient steps.

    With ``own`` (``[buffer] own_share``), every batch is the shared table's rows followed by
    the learner's own table's rows, and each table gets back the priorities of its rows.
    With ``prefetch`` (``[buffer] prefetch``), the next batch is sampled in a background thread
    during the current step (see the module docstring); :meth:`close` ends that thread.
    """

    def __init__(
        self,
        agent: Agent,
        replay: ReplayTable,
        own: ReplayTable | None = None,
        prefetch: bool = False,
    ) -> None:
        self.agent = agent
        self.replay = replay
        self.own = own
        # A resumed agent's count (one learn call is one update): the figures' ``updates`` and
        # the publish schedule go on from where the run was, not from 0.
        self.updates = int(getattr(agent, "updates", 0))
        self._sums: dict[str, float] = {}
        self._count = 0
        self._pool = ThreadPoolExecutor(1, "w2-prefetch") if prefetch else None
        self._ahead: Future[Prepared] | None = None

    def _prepare(self) -> Prepared:
        """A batch on the agent's device, its arrays, and how many of its rows (the first) came
        from the shared table."""
        sample = self.replay.sample()
        shared = len(sample["index"])
        if self.own is not None and self.own.can_sample():
            mine = self.own.sample()
            sample = {k: np.concatenate([v, mine[k]]) for k, v in sample.items() if k in mine}
        return Batch.from_numpy(sample, self.agent.device), sample, shared

    def _step(self, prepared: Prepared, before_priorities: Callable[[], None]) -> None:
        batch, sample, shared = prepared
        out = self.agent.learn(batch)
        # Metrics are host floats already (one sync per update), so the check costs microseconds.
        check_losses(out.metrics)
        before_priorities()
        if out.td_error is not None:
            if not np.isfinite(out.td_error).all():
                raise NonFiniteError("the TD error is not finite")
            index, td = sample["index"], out.td_error
            self.replay.update_priorities(index[:shared], td[:shared])
            if self.own is not None and len(index) > shared:  # rows of the own table
                self.own.update_priorities(index[shared:], td[shared:])
        self.updates += 1
        for k, v in out.metrics.items():
            self._sums[k] = self._sums.get(k, 0.0) + float(v)
        self._count += 1

    def _wait_ahead(self) -> None:
        # The next draw comes before this step's priorities: the fixed order of the docstring.
        if self._ahead is not None:
            self._ahead.exception()

    def train_available(self, max_updates: int | None = None) -> int:
        """Take the gradient steps the ratio gate allows now (at most ``max_updates``), without
        blocking: the caller also acts, evaluates and publishes between calls."""
        done = 0
        while (max_updates is None or done < max_updates) and (
            self._ahead is not None or self.replay.can_sample()
        ):
            if self._ahead is not None:
                prepared, self._ahead = self._ahead.result(), None
            else:
                prepared = self._prepare()
            done += 1
            more = max_updates is None or done < max_updates
            if self._pool is not None and more and self.replay.can_sample():
                self._ahead = self._pool.submit(self._prepare)
            self._step(prepared, self._wait_ahead)
        return done

    def owed(self) -> int | None:
        """The updates the ratio gate allows now (Ray's sharded replay: its shards' gates, as of
        their last replies); None where it cannot say (a disabled gate)."""
        gate = getattr(self.replay, "gate", None)
        return None if gate is None else gate.owed()

    def train_owed(self, heartbeat: Callable[[], None] | None = None, every: int = 32) -> int:
        """The budget is spent: take every update the gate still owes (producers run at most
        its tolerance ahead), including batches a remote replay still has in flight.

        ``heartbeat`` is called after every ``every`` updates: the owed updates (up to the
        gate's tolerance, 2,048 by default) can take longer than ``heartbeat_s`` on a busy
        machine, and a learner silent that long is declared hung."""
        self.replay.finish()
        done = 0
        while n := self.train_available(max_updates=every):
            done += n
            if heartbeat is not None:
                heartbeat()
        return done

    def pop_metrics(self) -> dict[str, float]:
        """Mean of each metric since the last call (keeps logging off the per-update path)."""
        out = {k: v / self._count for k, v in self._sums.items()} if self._count else {}
        out["updates"] = float(self.updates)
        self._sums.clear()
        self._count = 0
        return out

    def close(self) -> None:
        """End the prefetch thread (a batch it still holds is dropped)."""
        if self._pool is not None:
            if self._ahead is not None:
                self._ahead.exception()  # let a draw in progress finish; its error is moot
                self._ahead = None
            self._pool.shutdown(wait=True)
            self._pool = None
