"""The seams of the runtime, one Protocol each: what a backend supplies a member (its replay
table and writers, a budget, a link to the coordinator, a weight sink or source) and what it
supplies the coordinator (a transport). The member loop and the coordinator are written
against these alone; a backend decides only which implementation stands behind each:

=================  =======================================  ===================================
Protocol           serial / local                           ray
=================  =======================================  ===================================
ReplayTable        ``buffer.Replay``                        ``buffer.ray_shard.ShardedReplay``
ReplayWriter       ``buffer.Writer`` (``member.TeeWriter``)  ``buffer.ray_shard.RemoteWriter``
Budget             ``budget.CountingBudget``                ``ray_member.BoardBudget``
Link               a list (serial), a pipe (local)          ``ray_member.BoardLink``
WeightSink         ``sync.WeightPublisher``                 ``ray_member.BoardSink``
WeightSource       ``sync.WeightClient``                    ``ray_member.BoardSource``
Transport          ``SerialTransport``, ``LocalTransport``  ``RayTransport``
=================  =======================================  ===================================

mypy checks every implementation against its Protocol where the backends wire them
(``make lint``); ``tests/test_seams.py`` does so for each class by name, and at run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from torch import nn

    from wheeler2.buffer import Layout
    from wheeler2.runtime.messages import Message


# -- the replay, as a member sees it ----------------------------------------------------------


@runtime_checkable
class ReplayWriter(Protocol):
    """A producer's staging into its table: one vector step at a time, flushed in chunks."""

    @property
    def layout(self) -> Layout:
        """The rows the table stores (whether it keeps ``logp``, its ``state_dim``)."""
        ...

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        *,
        logp: np.ndarray | None = None,
        achieved_goal: np.ndarray | None = None,
        desired_goal: np.ndarray | None = None,
        next_achieved_goal: np.ndarray | None = None,
        valid: np.ndarray | None = None,
        state: np.ndarray | None = None,
        worth: np.ndarray | None = None,
    ) -> None:
        """Stage one vector step (N rows)."""
        ...

    def flush(self) -> None:
        """Insert what is staged (a member's last step, its close)."""
        ...


@runtime_checkable
class ReplayTable(Protocol):
    """A replay table as a member uses it: writers for its producers, batches and priorities
    for its learner. Its owner's side (create, attach, release, state_dict) stays with the
    backend, which knows the concrete class."""

    def writer(self, num_envs: int, block: bool | None = None) -> ReplayWriter:
        """Staging for ``num_envs`` env copies; ``block``: whether flushes wait on the ratio
        gate (None: only once a learner in another process samples)."""
        ...

    def can_sample(self) -> bool:
        """Whether the ratio gate allows an update now, without blocking."""
        ...

    def sample(
        self, batch_size: int | None = None, timeout: float | None = None
    ) -> dict[str, np.ndarray]:
        """One batch (transitions, or sequences for a recurrent learner); blocks on the gate."""
        ...

    def update_priorities(self, index: np.ndarray, td_error: np.ndarray) -> None: ...

    def stats(self) -> dict[str, float]:
        """At least ``inserts``, ``updates`` and ``updates_per_insert``."""
        ...

    def finish(self) -> None:
        """The learner's sampling is over: collect what is still in flight."""
        ...

    def alive(self) -> None:
        """The learner lives but is not sampling: producers waiting at the gate wait on."""
        ...

    def close(self) -> None: ...


# -- what else a backend hands a member -------------------------------------------------------


class Budget(Protocol):
    """The member's share of ``total_steps`` and the run's control flags."""

    def claim(self, n: int) -> bool:
        """Reserve ``n`` env steps of the run's budget; False when the member should stop."""
        ...

    def settle(self, claimed: int, used: int) -> None:
        """After a step: ``used`` of the ``claimed`` steps were taken; the rest go back."""
        ...

    def run_steps(self, own: int) -> int:
        """The whole run's env steps so far (the learner schedules evals on it)."""
        ...

    def stopped(self) -> bool:
        """The coordinator asked every member to stop (Ctrl-C, a failure, the threshold)."""
        ...

    def opened(self) -> bool:
        """Every member has started: steps may be claimed (the team's start line)."""
        ...

    def request(self) -> int:
        """The coordinator's checkpoint request counter: a change asks for this member's state."""
        ...

    def stage(self) -> int:
        """The run's curriculum stage (``[curriculum]``); 0 without one."""
        ...


class Link(Protocol):
    """How messages reach the coordinator (a pipe, the Ray board, a list)."""

    def send(self, message: Message) -> None: ...

    def opened(self) -> None:
        """The team's start line has opened (this member takes its first step): what a link
        put off so as not to slow the team's start may run now (wheeler2.liveness)."""
        ...


class WeightSink(Protocol):
    """Learner side of weight sync."""

    def publish(self, actor: nn.Module) -> int:
        """Publish the actor's (or the published view's) float tensors; returns the version."""
        ...

    def close(self) -> None: ...


class WeightSource(Protocol):
    """Explorer side of weight sync, bound to the explorer's own actor."""

    @property
    def synced(self) -> tuple[str, ...]:
        """The tensors it takes from the learner (``team.json`` "synced")."""
        ...

    @property
    def version(self) -> int:
        """The version last pulled (0: none yet)."""
        ...

    def lag(self) -> int:
        """Versions published since the last pull."""
        ...

    def pull(self) -> int | None:
        """Take the newest weights, if any newer; returns their version, None if none."""
        ...

    def close(self) -> None: ...


# -- what a backend gives the coordinator -----------------------------------------------------


class Transport(Protocol):
    """What a backend provides the coordinator: where members run, how messages travel."""

    def receive(self, timeout: float) -> list[Message]:
        """Messages that arrived (waiting up to ``timeout`` for the first)."""
        ...

    def failures(self) -> dict[str, str]:
        """Members that are gone without finishing: name -> how (e.g. "exit code -9")."""
        ...

    def env_steps(self) -> int:
        """Env steps of the whole run so far."""
        ...

    def request_states(self) -> int:
        """Ask every member for its state (a checkpoint); returns the request number."""
        ...

    def open(self) -> None:
        """Every member has started: they may take env steps (the start line)."""
        ...

    def release(self, table: str) -> None:
        """Nobody samples ``table`` any more: its producers waiting on the ratio gate may go."""
        ...

    def stop(self) -> None:
        """Members stop at their next step (and producers are released)."""
        ...

    def kill(self, name: str) -> None:
        """End a member that no longer responds."""
        ...

    def replay_state(self) -> dict[str, dict[str, Any]]:
        """Each table's replay contents for a checkpoint (``buffer.checkpoint = true``)."""
        ...

    def set_stage(self, stage: int) -> None:
        """Move the run to curriculum stage ``stage``: every member applies it to its envs."""
        ...


class Backend(Transport, Protocol):
    """A transport as ``coordinator.run_team`` opens it: members start once the run directory
    exists, and everything it holds is released on every path out."""

    def start(self, run_dir: Path, next_eval: int) -> None: ...

    def close(self) -> None: ...
