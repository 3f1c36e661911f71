"""Callbacks: user code that watches a run from the Python API and may end it early.

``wheeler2.run(cfg, callbacks=[...])`` hands each callback what the coordinator records, in the
coordinator's own process on every backend (the members never run user callbacks, so a callback
may hold a file, a plot or a notebook widget):

* ``on_start(run_dir)``: the run directory exists, before the first env step;
* ``on_eval(ev)``: an evaluation of a learner (:class:`Eval`: env steps, return, success, each
  reward head's figures);
* ``on_report(rep)``: one member's periodic figures (:class:`Report`, every 2 s and at its end);
* ``on_checkpoint(ck)``: a checkpoint file was written (:class:`Checkpoint`);
* ``on_end(summary)``: ``summary.json`` was written (its dict).

Returning :data:`STOP`, a :class:`Stop` with a reason, or ``True`` from any hook but ``on_end``
ends the run the way ``[experiment] stop_at_threshold`` does: the members stop, the final
checkpoint and the summary are written (``summary["stop"]`` says which callback and why) and
``run`` returns the run directory. ``None`` or ``False`` goes on. An exception in a callback
ends the run the same way, then ``run`` raises :class:`CallbackError` naming the callback.

Hooks run in the coordinator's loop: while one runs, the coordinator does not read messages,
so a callback should be quick (write a line, compare a number), not train a model.

This module imports no torch: ``import wheeler2`` stays cheap.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wheeler2.errors import KeepsFields

HOOKS = ("on_start", "on_eval", "on_report", "on_checkpoint", "on_end")


@dataclass(frozen=True)
class Stop:
    """A callback's answer that ends the run; ``reason`` goes into ``summary["stop"]``."""

    reason: str = ""


STOP = Stop()


class CallbackError(KeepsFields, RuntimeError):
    """A callback raised; the run was stopped, checkpointed and summarized first."""

    def __init__(self, callback: str, hook: str, exc: BaseException) -> None:
        self.callback = callback
        self.hook = hook
        after = (
            "after the run had ended and written its summary"
            if hook == "on_end"
            else "the team was stopped and checkpointed"
        )
        super().__init__(f"callback {callback}.{hook} raised {type(exc).__name__}: {exc}; {after}")


@dataclass(frozen=True)
class Eval:
    """One evaluation of a learner's deterministic actor, as the run recorded it."""

    env_steps: int  # all members together, when the eval ran
    wall_s: float
    mean_return: float  # over the eval episodes
    std_return: float
    success: float | None  # fraction of successful episodes, where the env reports success
    returns: tuple[float, ...]  # each episode's return
    # Per reward head: {"q": mean Q_h(s0, pi(s0)), "return": its discounted return, "error"}.
    heads: dict[str, dict[str, float]] | None
    matches: dict[str, float] | None  # turn-based games: W/D/L per opponent, Elo
    member: str  # the learner evaluated
    table: str  # its replay table
    lead: bool  # the run's learner (its evals are the run's curve, threshold and best.pt)
    best: bool  # the best of its learner's evals so far (the lead's: best.pt is written next)
    best_return: float  # the best mean return of its learner's evals so far


@dataclass(frozen=True)
class Report:
    """One member's periodic figures: what the live table, metrics.csv and TensorBoard get."""

    member: str
    env_steps: int  # all members together
    figures: dict[str, float]  # env_steps (its own), steps_per_s, episode_return, losses, ...


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # checkpoints/latest.pt or checkpoints/best.pt
    env_steps: int
    best: bool  # best.pt: the state of the lead's best eval so far


class Callback:
    """Base class with a no-op for each hook: override the ones you need.

    Any object with some of these methods works as well, and a plain function is taken as an
    ``on_eval``. A hook ends the run by returning :data:`STOP`, ``Stop("why")`` or ``True``.
    """

    def on_start(self, run_dir: Path) -> Any:
        return None

    def on_eval(self, ev: Eval) -> Any:
        return None

    def on_report(self, rep: Report) -> Any:
        return None

    def on_checkpoint(self, ck: Checkpoint) -> Any:
        return None

    def on_end(self, summary: dict[str, Any]) -> None:
        return None


class StopAtReturn(Callback):
    """End the run at the first eval of the run's learner whose mean return reaches
    ``threshold`` (Stable-Baselines3's ``StopTrainingOnRewardThreshold``)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = float(threshold)

    def on_eval(self, ev: Eval) -> Stop | None:
        if ev.lead and ev.mean_return >= self.threshold:
            return Stop(
                f"eval return {ev.mean_return:.4g} reached {self.threshold:g} at "
                f"{ev.env_steps:,} env steps"
            )
        return None

    def __repr__(self) -> str:
        return f"StopAtReturn({self.threshold:g})"


class StopOnNoImprovement(Callback):
    """End the run once ``patience_evals`` evals of the run's learner in a row did not beat the
    best mean return by more than ``min_delta``, counting from the ``min_evals``-th eval
    (after Stable-Baselines3's ``StopTrainingOnNoModelImprovement``, which stops one eval later:
    its ``max_no_improvement_evals = k`` ends the run at the (k + 1)-th eval without improvement,
    ``patience_evals = k`` here at the k-th; it has no ``min_delta``). A learner's closing eval at
    the step of its last one is the same eval point, not another try."""

    def __init__(self, patience_evals: int, min_delta: float = 0.0, min_evals: int = 0) -> None:
        if patience_evals < 1:
            raise ValueError(f"patience_evals: expected an integer >= 1, got {patience_evals}")
        self.patience_evals = int(patience_evals)
        self.min_delta = float(min_delta)
        self.min_evals = int(min_evals)
        self.best = -math.inf
        self.evals = 0
        self.stale = 0
        self._last_step: int | None = None

    def on_eval(self, ev: Eval) -> Stop | None:
        if not ev.lead or ev.env_steps == self._last_step:
            return None
        self._last_step = ev.env_steps
        self.evals += 1
        if ev.mean_return > self.best + self.min_delta:
            self.best, self.stale = ev.mean_return, 0
            return None
        if self.evals <= self.min_evals:
            return None
        self.stale += 1
        if self.stale < self.patience_evals:
            return None
        return Stop(
            f"no eval improved on {self.best:.4g} by more than {self.min_delta:g} in "
            f"{self.stale} evals"
        )

    def __repr__(self) -> str:
        return f"StopOnNoImprovement({self.patience_evals}, min_delta={self.min_delta:g})"


# -- dispatch ----------------------------------------------------------------------------------


def callback_name(callback: Any) -> str:
    """How errors and ``summary["stop"]`` name a callback: its function or class name."""
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    return name.split(".<locals>.")[-1]  # a function defined in a function: its own name


class Callbacks:
    """The run's callbacks, called in order; the first stop request and the first error win.

    Errors are kept, not raised: the coordinator stops the team on its normal path (final
    checkpoint, summary), then raises :attr:`error`, the :class:`CallbackError`.
    """

    def __init__(self, callbacks: Sequence[Any] = ()) -> None:
        self.callbacks = list(callbacks)
        self.stop: dict[str, str] | None = None  # {"by", "reason"} of the first stop request
        self.error: CallbackError | None = None

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def call(self, hook: str, arg: Any) -> None:
        for callback in self.callbacks:
            method = _method(callback, hook)
            if method is None:
                continue
            name = callback_name(callback)
            try:
                answer = method(arg)
                why = None if hook == "on_end" else _stop_reason(answer)
            # KeyboardInterrupt is the run's Ctrl-C, not a fault; sys.exit() in a callback is
            # one, and the run must still end with its checkpoint and summary.
            except (Exception, SystemExit) as exc:
                if self.error is None:
                    self.error = CallbackError(name, hook, exc)
                    self.error.__cause__ = exc
                    self.stop = {"by": "callback_error", "reason": str(self.error)}
                continue
            if why is not None and self.stop is None:
                self.stop = {"by": "callback", "reason": f"{name}: {why}" if why else name}


def _method(callback: Any, hook: str) -> Callable[[Any], Any] | None:
    method = getattr(callback, hook, None)
    if method is None and hook == "on_eval" and callable(callback):
        return callback  # a plain function: on_eval
    return method


def _stop_reason(answer: Any) -> str | None:
    """The reason a hook's answer asks to stop with ("" for none given), or None to go on."""
    if isinstance(answer, Stop):
        return answer.reason
    if answer is None:
        return None
    if isinstance(answer, bool | np.bool_):
        return "" if answer else None
    raise TypeError(
        f"it returned {answer!r}; expected None or False (go on), True or wheeler2.STOP "
        "(stop the run)"
    )


# The callbacks of the run this thread is starting. api.run sets them around run_experiment so
# that every backend's entry point (serial, local, ray) reaches the coordinator unchanged.
_ACTIVE: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "wheeler2_callbacks", default=()
)


@contextlib.contextmanager
def active(callbacks: Sequence[Any]) -> Iterator[None]:
    """Run the experiments started inside with ``callbacks``."""
    for callback in callbacks:
        if isinstance(callback, type):
            # The class, not an instance of it: its hooks would be called with the eval as
            # `self` and fail only once the team had started, leaving a run directory behind.
            raise TypeError(
                f"callbacks: {callback.__name__} is a class; pass an instance of it, "
                f"{callback.__name__}(...)"
            )
        if not (callable(callback) or any(hasattr(callback, h) for h in HOOKS)):
            raise TypeError(
                f"callbacks: {callback!r} has none of {', '.join(HOOKS)} and is not a function"
            )
    token = _ACTIVE.set(tuple(callbacks))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def current() -> Callbacks:
    """The callbacks of the run being started in this thread (none from the command line)."""
    return Callbacks(_ACTIVE.get())
