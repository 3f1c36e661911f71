"""What members tell the coordinator, as typed messages; every backend carries the same ones.

A member sends :class:`Alive` every second from its first instant until it has started,
:class:`Building` as it starts each stage of its build, :class:`Started` once it
is built, :class:`Figures` every few seconds (which is also its heartbeat), :class:`Evaluated`
after each eval of the learner, :class:`StateReply` when the coordinator asked for states (a
checkpoint), and :class:`Finished` last. :class:`Failed` carries the traceback of a member that
raised. How they travel is the backend's business: a pipe per member (local), the board actor
(ray) or a list in the same process (serial).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a member sends its first messages before it imports torch
    from wheeler2.runtime.evaluation import EvalResult


@dataclass(frozen=True)
class Alive:
    """Until it has started, a member's beat (:mod:`wheeler2.liveness`)."""

    member: str
    cpu_s: float  # its process's CPU time so far (every thread)


@dataclass(frozen=True)
class Building:
    member: str
    stage: str  # what it does next, for a person reading a hang: "building its envs", ...


@dataclass(frozen=True)
class Started:
    member: str
    pid: int
    agents: tuple[str, ...] | None  # the multi-agent env's agents this member drives
    synced: tuple[str, ...]  # actor tensors it takes from the learner (empty: no sync)
    where: dict[str, Any] = field(default_factory=dict)  # host / node, for a person reading


@dataclass(frozen=True)
class Figures:
    member: str
    values: dict[str, float]


@dataclass(frozen=True)
class Evaluated:
    member: str
    env_steps: int
    result: EvalResult
    state: dict[str, Any]  # the evaluated learner, for best.pt
    own_steps: int  # the member's own env steps with that state (its member_steps entry)
    stage: int = -1  # the [curriculum] stage its eval envs were at (-1: no curriculum)


@dataclass(frozen=True)
class StateReply:
    member: str
    request: int
    state: dict[str, Any]
    env_steps: int


@dataclass(frozen=True)
class Finished:
    member: str
    state: dict[str, Any]
    env_steps: int


@dataclass(frozen=True)
class Failed:
    member: str
    detail: str  # the member's traceback, or one line that says it all
    how: str = "raised"  # what the coordinator says the member did: raised, hangs, ...


Message = Alive | Building | Started | Figures | Evaluated | StateReply | Finished | Failed
