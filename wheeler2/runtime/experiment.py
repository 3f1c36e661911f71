"""A run from start to end: run directory, schedule of evals and checkpoints, summary.

The backend (serial, local, ray) decides where members run; this module decides what a run
writes and when, so every backend produces the same run directory.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2 import checkpoint as ckpt
from wheeler2.callbacks import Callbacks, Checkpoint, Eval, Report
from wheeler2.errors import KeepsFields
from wheeler2.log import RunLog, write_summary
from wheeler2.process import take_run_start
from wheeler2.runtime.evaluation import EvalResult
from wheeler2.runtime.plan import plan_team
from wheeler2.trackers import RunFacts, make_trackers

if TYPE_CHECKING:
    from wheeler2.config import Config


def shield_shutdown(quiet: bool = False) -> None:
    """Ignore further Ctrl-C / SIGTERM while the run writes its last checkpoint and summary.

    People press Ctrl-C twice; a second interrupt must not tear the checkpoint it asked for.
    Callers restore the previous handlers when the run returns.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not quiet:
        print("\nstopping: writing the last checkpoint and summary ...", flush=True)


class MemberFailed(KeepsFields, RuntimeError):
    """A member raised or died; the run was stopped and checkpointed."""

    def __init__(self, member: str, detail: str) -> None:
        self.member = member
        self.detail = detail
        super().__init__(f"member {member!r} failed: {detail.strip().splitlines()[-1]}")


def new_run_dir(config: Config) -> Path:
    """A new, empty run directory, claimed with an atomic ``mkdir``: runs started in the same
    second, in other processes too, each get their own (``-1``, ``-2``, ...). The caller
    removes it again if the run fails before writing anything (:func:`drop_if_empty`)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.experiment.out) / f"{config.experiment.name}-{stamp}"
    run_dir, k = base, 1
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                run_dir.mkdir()
                return run_dir
            except FileExistsError:
                run_dir, k = Path(f"{base}-{k}"), k + 1
    except OSError as exc:  # read-only, no permission, no such device: the user's key
        from wheeler2.config import ConfigError

        why = exc.strerror or str(exc)
        raise ConfigError(
            str(config.path), "[experiment]", "out", f"cannot make {run_dir}: {why}"
        ) from None


def drop_if_empty(run_dir: Path) -> None:
    """Remove a claimed run directory that nothing was written to (a run that failed at start
    leaves nothing behind)."""
    try:
        run_dir.rmdir()
    except OSError:  # not empty (the run wrote results) or already gone
        pass


def first_eval(config: Config, env_steps: int) -> int:
    """The env step count of the first eval after ``env_steps`` (a resumed run's count)."""
    every = int(config.experiment.eval_every)
    return (int(env_steps) // every + 1) * every


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM stops a run the way Ctrl-C does (exit 130, final checkpoint); both handlers are
    restored when the run returns, whichever way."""
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@dataclass
class Schedule:
    """When the next checkpoint / log line is due, in env steps or seconds (evals are the
    members' own schedule: runtime/member.py)."""

    checkpoint_every: int
    log_every_s: float = 2.0
    next_checkpoint: int = 0
    next_log: float = 0.0

    def start(self, env_steps: int) -> None:
        self.next_checkpoint = (env_steps // self.checkpoint_every + 1) * self.checkpoint_every
        self.next_log = time.perf_counter() + self.log_every_s


@dataclass
class RunState:
    """Counters and history that a checkpoint carries over to ``resume``."""

    env_steps: int = 0
    wall_s: float = 0.0  # wall-clock of earlier sessions of this run
    evals: list[dict[str, Any]] = field(default_factory=list)
    steps_to_threshold: int | None = None
    best_return: float = -math.inf
    # The evals of the other tables' learners (teams of unlike agents): table -> entries.
    table_evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The evals of explorers and actors with evaluate = true: member name -> entries.
    member_evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # [curriculum]: the stage the run is at, and the env steps of the evals that advanced it.
    stage: int = 0
    advanced_at: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "evals": self.evals,
            "steps_to_threshold": self.steps_to_threshold,
            "best_return": self.best_return,
            "table_evals": self.table_evals,
            "member_evals": self.member_evals,
            "curriculum": {"stage": self.stage, "advanced_at": list(self.advanced_at)},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunState:
        return cls(
            env_steps=int(d["env_steps"]),
            wall_s=float(d["wall_s"]),
            evals=list(d["evals"]),
            steps_to_threshold=d.get("steps_to_threshold"),
            best_return=float(d["best_return"]),
            table_evals={k: list(v) for k, v in (d.get("table_evals") or {}).items()},
            member_evals={k: list(v) for k, v in (d.get("member_evals") or {}).items()},
            # Checkpoints from before curriculum stages have none: stage 0.
            stage=int((d.get("curriculum") or {}).get("stage", 0)),
            advanced_at=[int(s) for s in (d.get("curriculum") or {}).get("advanced_at", [])],
        )


class Recorder:
    """Writes the run directory: config, metrics, evals, checkpoints, curve and summary; hands
    the user's callbacks what it records, and keeps why the run should stop early."""

    def __init__(
        self, config: Config, run_dir: Path, state: RunState, callbacks: Callbacks | None = None
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.state = state
        self.callbacks = callbacks if callbacks is not None else Callbacks()
        # Why the run ends before its budget ({"by", "reason"}): the threshold, or a callback.
        self.stop: dict[str, str] | None = None
        exp = config.experiment
        self.schedule = Schedule(int(exp.checkpoint_every or exp.eval_every))
        self.schedule.start(state.env_steps)
        self.threshold = exp.eval_threshold
        run_dir.mkdir(parents=True, exist_ok=True)
        # First: a tracker that cannot start (W&B not logged in) fails before a file is written.
        # Resumed: TensorBoard hides what a killed session logged past the checkpoint.
        resumed_at = state.env_steps or None
        facts = RunFacts(run_dir, exp.name, config.to_toml(), str(config.path), resumed_at)
        trackers = make_trackers(exp.tracker, facts, exp.wandb)
        self.log = RunLog(
            run_dir,
            progress=bool(exp.progress),
            total_steps=int(exp.total_steps),
            wall_offset_s=state.wall_s,
            trackers=trackers,
        )
        if math.isfinite(state.best_return):  # a resumed run's best so far
            self.log.best_eval = state.best_return
        if state.steps_to_threshold is not None:  # a resumed run already past it
            self._stop_at_threshold("an eval before this resume")
        self.startup_s: float | None = None  # from the command to the team's first step
        self.run_start = take_run_start()
        self.curriculum = config.curriculum
        if self.curriculum is not None:
            # The stage the transports start at: the checkpoint's, within the declared stages.
            state.stage = min(state.stage, self.curriculum.stages - 1)
            self.log.curriculum = self._stage_text()
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        (run_dir / "config.toml").write_text(config.to_toml())
        # curve.png at the end needs matplotlib, ~0.5 s of imports: done now, while this
        # process mostly waits on its members, not after the run, where the user waits.
        threading.Thread(
            target=importlib.import_module, args=("wheeler2.plot",), daemon=True
        ).start()
        self._call("on_start", run_dir)

    @property
    def wall_s(self) -> float:
        # The log's clock, which goes on from state.wall_s: a checkpoint's wall_s and the
        # metrics rows are then on one clock, and a resume cuts the rows past the checkpoint.
        return self.log.wall_s

    def team_started(self) -> None:
        self.startup_s = round(time.monotonic() - self.run_start, 3)

    def _call(self, hook: str, arg: Any) -> None:
        """Call the callbacks' ``hook``; the first stop request wins (an error stops too)."""
        if not self.callbacks:
            return
        self.callbacks.call(hook, arg)
        if self.stop is None and self.callbacks.stop is not None:
            self.stop = dict(self.callbacks.stop)

    def _stop_at_threshold(self, what: str) -> None:
        if self.config.experiment.stop_at_threshold and self.stop is None:
            self.stop = {
                "by": "threshold",
                "reason": f"{what} passed eval_threshold {float(self.threshold or 0):g} at "
                f"{self.state.steps_to_threshold:,} env steps",
            }

    def checkpoint_due(self, env_steps: int) -> bool:
        return env_steps >= self.schedule.next_checkpoint

    def log_due(self) -> bool:
        return time.perf_counter() >= self.schedule.next_log

    def _eval_entry(self, env_steps: int, result: EvalResult) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "env_steps": env_steps,
            "wall_s": round(self.wall_s, 3),
            "return": result.mean_return,
            "return_std": result.std_return,
            "success": result.success,
        }
        if result.heads is not None:  # each head's Q(s0, pi(s0)) against its discounted return
            entry["heads"] = result.heads
        if result.matches:  # turn-based games: W/D/L per opponent, Elo
            entry["matches"] = result.matches
        return entry

    @staticmethod
    def _value_errors(result: EvalResult) -> dict[str, float]:
        return {f"value_error/{h}": v["error"] for h, v in (result.heads or {}).items()}

    @staticmethod
    def _eval_event(
        member: str,
        table: str,
        lead: bool,
        entry: dict[str, Any],
        result: EvalResult,
        best_before: float,
    ) -> Eval:
        """What on_eval gets: the entry as recorded, and whether it beat ``best_before``."""
        return Eval(
            env_steps=int(entry["env_steps"]),
            wall_s=float(entry["wall_s"]),
            mean_return=float(result.mean_return),
            std_return=float(result.std_return),
            success=result.success,
            returns=tuple(float(r) for r in result.returns),
            heads=result.heads,
            matches=result.matches,
            member=member,
            table=table,
            lead=lead,
            best=result.mean_return > best_before,
            best_return=max(best_before, result.mean_return),
        )

    def record_table_eval(
        self, table: str, learner: str, env_steps: int, result: EvalResult
    ) -> None:
        """An eval of another table's learner: kept in the summary's ``tables`` and logged as
        that member's ``eval_return``; the run's curve, threshold and best.pt stay the lead's."""
        self._record_side_eval(self.state.table_evals, table, learner, table, env_steps, result)

    def record_member_eval(self, member: str, env_steps: int, result: EvalResult) -> None:
        """An eval of an explorer's or actor's own policy (``evaluate = true``): kept in the
        summary's ``member_evals`` and logged as that member's ``eval_return``, as another
        table's learner's is."""
        table = self._tables[member]
        self._record_side_eval(self.state.member_evals, member, member, table, env_steps, result)

    @functools.cached_property
    def _tables(self) -> dict[str, str]:
        """Each member's table, by member name (copies named as plan_team names them)."""
        return {p.name: p.spec.table for p in plan_team(self.config)}

    def _record_side_eval(
        self,
        store: dict[str, list[dict[str, Any]]],
        key: str,
        member: str,
        table: str,
        env_steps: int,
        result: EvalResult,
    ) -> None:
        entry = self._eval_entry(env_steps, result)
        evals = store.setdefault(key, [])
        before = max((e["return"] for e in evals), default=-math.inf)
        if evals and evals[-1]["env_steps"] == env_steps:
            evals[-1] = entry  # its closing eval at the step of its last one (record_eval)
        else:
            evals.append(entry)
        values = {"eval_return": result.mean_return, **self._value_errors(result)}
        values.update(result.matches or {})
        if result.success is not None:
            values["eval_success"] = result.success
        self.log.scalars(member, env_steps, values)
        self._call("on_eval", self._eval_event(member, table, False, entry, result, before))

    def record_eval(self, env_steps: int, result: EvalResult, member: str = "") -> bool:
        """Stores one evaluation of the lead learner (``member``); returns True when it is the
        best so far."""
        entry = self._eval_entry(env_steps, result)
        if self.curriculum is not None:
            entry["stage"] = self.state.stage  # the stage this eval ran at
        evals = self.state.evals
        if evals and evals[-1]["env_steps"] == env_steps:
            # The learner's closing eval, after the updates it still owed once the budget was
            # spent, at the step of its last regular one: the run's curve ends on this one,
            # and so does steps_to_threshold, which the eval list must bear out.
            evals[-1] = entry
            if self.state.steps_to_threshold == env_steps:
                self.state.steps_to_threshold = None
        else:
            evals.append(entry)
        self.log.eval(
            env_steps,
            entry["wall_s"],
            result.mean_return,
            result.success,
            result.matches,
            extra=self._value_errors(result) if result.heads is not None else None,
        )
        if (
            self.threshold is not None
            and self.state.steps_to_threshold is None
            and result.mean_return > float(self.threshold)
        ):
            self.state.steps_to_threshold = env_steps
            self._stop_at_threshold(f"eval return {result.mean_return:.4g}")
        table = self.config.learner.table
        ev = self._eval_event(member, table, True, entry, result, self.state.best_return)
        if ev.best:
            self.state.best_return = result.mean_return
        self._call("on_eval", ev)
        return ev.best

    def record_stage(self, env_steps: int, stage: int) -> None:
        """The curriculum stage after an eval of the lead learner (``stage`` differs from the
        run's when that eval advanced it): logged as the ``eval`` member's ``curriculum_stage``
        at every eval, kept in the run state for the checkpoint and the summary."""
        if stage != self.state.stage:
            self.state.stage = stage
            self.state.advanced_at.append(int(env_steps))
        self.log.curriculum = self._stage_text()
        self.log.scalars("eval", env_steps, {"curriculum_stage": float(stage)})

    def _stage_text(self) -> str:
        assert self.curriculum is not None
        return f"stage {self.state.stage}/{self.curriculum.stages - 1}"

    def save_checkpoint(self, payload: dict[str, Any]) -> None:
        """latest.pt: every member's state as it answered the request (or finished), the one a
        resume goes on from; the next one falls due checkpoint_every env steps on."""
        while self.schedule.next_checkpoint <= self.state.env_steps:
            self.schedule.next_checkpoint += self.schedule.checkpoint_every
        self._save(self.run_dir / "checkpoints" / "latest.pt", payload, best=False)

    def save_best(self, payload: dict[str, Any]) -> None:
        """best.pt, at an eval that improved on every earlier one: the evaluated learner's state
        then, the other members' as last reported. latest.pt and its schedule are left alone:
        a resume goes on from the members' states at one request, not from a mix."""
        self._save(self.run_dir / "checkpoints" / "best.pt", payload, best=True)

    def _save(self, path: Path, payload: dict[str, Any], best: bool) -> None:
        state = {
            "run": self.state.to_dict() | {"wall_s": self.wall_s},
            "rng": ckpt.rng_state(),
            **payload,
        }
        ckpt.save(path, state)
        self._call("on_checkpoint", Checkpoint(path, self.state.env_steps, best))

    def report(self, member: str, env_steps: int, values: dict[str, float]) -> dict[str, float]:
        """A member's periodic figures: logged under their kind's names (RunLog.report), handed
        to the callbacks, and returned so named for the live table."""
        named = self.log.report(member, env_steps, values)
        self._call("on_report", Report(member, int(env_steps), dict(named)))
        return named

    def progress(self, env_steps: int, members: dict[str, dict[str, float]]) -> None:
        self.schedule.next_log = time.perf_counter() + self.schedule.log_every_s
        last = self.state.evals[-1]["return"] if self.state.evals else None
        self.log.progress(env_steps, self._with_side_evals(members), last_eval=last)

    def _with_side_evals(self, members: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """The members' figures, each evaluated member that is not the lead with its last eval
        (``eval_return``): the live table's ``eval`` column."""
        learners = {m.table: m.name for m in self.config.team if m.role == "learner"}
        last = {learners[t]: e[-1]["return"] for t, e in self.state.table_evals.items() if e}
        last.update({n: e[-1]["return"] for n, e in self.state.member_evals.items() if e})
        return {
            name: {**figures, "eval_return": last[name]} if name in last else figures
            for name, figures in members.items()
        }

    def _stopped_by(self, interrupted: bool, failure: str | None) -> dict[str, str]:
        error = self.callbacks.error
        if error is not None:
            return {"by": "callback_error", "reason": str(error)}
        if failure is not None:
            return {"by": "failure", "reason": failure}
        if interrupted:
            return {"by": "interrupt", "reason": "Ctrl-C or SIGTERM"}
        total = int(self.config.experiment.total_steps)
        # A stop asked for once the budget was spent (a callback at the closing eval or the
        # final checkpoint, a threshold first passed there) ended nothing early.
        if self.stop is not None and self.state.env_steps < total:
            return self.stop
        return {"by": "total_steps", "reason": f"the budget of {total:,} env steps was spent"}

    def finish(
        self,
        members: dict[str, dict[str, float]],
        interrupted: bool = False,
        failure: str | None = None,
    ) -> dict[str, Any]:
        """Write summary.json (``failure``: what failed, when a member did) and curve.png, and
        close the run's log and trackers."""
        stop = self._stopped_by(interrupted, failure)
        interrupted = interrupted or failure is not None or self.callbacks.error is not None
        evals = self.state.evals
        summary = {
            "name": self.config.experiment.name,
            "env_steps": self.state.env_steps,
            # The budget the run ran to: a resume with --set experiment.total_steps raises it.
            "total_steps": int(self.config.experiment.total_steps),
            "wall_s": round(self.wall_s, 3),
            "startup_s": self.startup_s,
            "best_eval_return": None if not evals else max(e["return"] for e in evals),
            "final_eval_return": None if not evals else evals[-1]["return"],
            "steps_to_threshold": self.state.steps_to_threshold,
            "eval_threshold": self.threshold,
            "interrupted": interrupted,
            "stop": stop,
            "eval": evals,
            "members": members,
        }
        if self.state.table_evals:
            summary["tables"] = _table_summaries(self.config, evals, self.state.table_evals)
        if self.state.member_evals:
            summary["member_evals"] = {
                name: _eval_summary(entries) for name, entries in self.state.member_evals.items()
            }
        if self.curriculum is not None:
            summary["curriculum"] = {
                "stage": self.state.stage,
                "stages": self.curriculum.stages,
                "metric": self.curriculum.metric,
                "advanced_at": list(self.state.advanced_at),
            }
        write_summary(self.run_dir, summary)
        try:
            from wheeler2.plot import write_curve

            write_curve(self.run_dir, threshold=self.threshold)
        except Exception as exc:  # a missing curve must not lose the run's results
            print(f"warning: could not draw curve.png: {exc}")
        # The figures of one line each (not the eval list or the members' tables).
        self.log.summarize(
            {k: v for k, v in summary.items() if not isinstance(v, list | dict) or k == "stop"}
        )
        self.log.close()
        self._call("on_end", summary)
        return summary


def _eval_summary(evals: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "best_eval_return": max((e["return"] for e in evals), default=None),
        "final_eval_return": evals[-1]["return"] if evals else None,
        "eval": evals,
    }


def _table_summaries(
    config: Config, lead_evals: list[dict[str, Any]], others: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Per replay table: its learner and that learner's evals (a team of unlike agents)."""
    learners = {m.table: m.name for m in config.team if m.role == "learner"}
    out = {}
    for table in config.tables:
        evals = lead_evals if table == config.learner.table else others.get(table, [])
        out[table] = {"learner": learners[table], **_eval_summary(evals)}
    return out


def load_resume_state(run_dir: Path, config: Config) -> tuple[RunState, dict[str, Any]]:
    """The counters and checkpoint payload ``resume`` continues ``run_dir`` from.

    Read through the one restore path (``runtime.restore.restore``), against the team
    ``config`` builds: it raises ``checkpoint.CheckpointError`` (one line naming the file; the
    CLI exits 2) when ``latest.pt`` is missing, truncated, foreign or holds pickled code, or was
    not written by that team: other member names, algorithms or network shapes. Without this
    check a renamed explorer started fresh and its env steps were lost, and a changed network
    failed deep inside a backend, in a member's process.
    """
    from wheeler2.runtime.restore import restore

    restored = restore(config, run_dir, "latest")
    payload = restored.payload
    try:
        state = RunState.from_dict(payload["run"])
        if not isinstance(payload["rng"], dict):
            raise TypeError("rng is not a dict")
    except (KeyError, TypeError, ValueError) as exc:
        raise ckpt.CheckpointError(
            f"{restored.path}: not a wheeler2 run checkpoint (its run counters or RNG state: "
            f"{exc!r})"
        ) from None
    return state, payload
