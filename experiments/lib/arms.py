"""Arms: named variants of one experiment, each run over the same seeds, interleaved.

An arm is what differs between the things compared: a config file and the ``--set`` overrides
that make the variant (``Arm("solo-ou", sets=("team.0.params.noise=\\"ou\\"",))``), or just a
name a script's own run function understands (an SB3 side, say). :func:`sweep` runs every arm
of seed s before any arm of seed s+1, so a drift in machine load (other jobs on a shared
machine come and go) hits every arm alike, and appends each finished run to the runs file at
once, so an interrupted sweep keeps what it finished.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
import tomllib
import traceback
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from experiments.lib import runs

A = TypeVar("A")


@dataclass(frozen=True)
class Arm:
    """A named config variant: ``config`` (None: the experiment's own file) with ``sets``."""

    name: str
    config: Path | None = None
    sets: tuple[str, ...] = ()


def interleave(
    seeds: Iterable[int], arms: Sequence[A], rotate: bool = False, mirror: bool = False
) -> list[tuple[int, A]]:
    """``(seed, arm)`` in run order: every arm of a seed before the next seed. ``rotate`` shifts
    the arms' order by one from seed to seed (two arms alternate which runs first), so neither
    always runs on a warmer or a busier machine. With more than two arms, rotating keeps two
    arms listed side by side in the same order on all seeds but one in ``len(arms)`` (of six
    arms, the fifth runs before the sixth on seeds 0-4): where arms are compared in pairs, list
    each pair side by side and ``mirror`` instead, which reverses the order on every other seed,
    so that any two arms alternate which runs first and stay next to each other."""
    if rotate and mirror:
        raise ValueError("rotate or mirror, not both (with two arms they undo each other)")
    order = []
    for i, seed in enumerate(seeds):
        k = i % len(arms) if rotate and arms else 0
        turn = [*arms[k:], *arms[:k]]
        order += [(seed, arm) for arm in (turn[::-1] if mirror and i % 2 else turn)]
    return order


def sweep(
    seeds: Iterable[int],
    arms: Sequence[A],
    run: Callable[[A, int], dict[str, Any]],
    runs_file: str | Path | None = None,
    rotate: bool = False,
    describe: Callable[[dict[str, Any]], str] | None = None,
    skip: Collection[tuple[int, Any]] = (),
    mirror: bool = False,
) -> list[dict[str, Any]]:
    """Run ``run(arm, seed)`` over :func:`interleave`'s order (``rotate``, ``mirror``), except
    the ``(seed, arm)`` pairs in ``skip`` (those an interrupted sweep finished); each record is
    appended to ``runs_file`` as it finishes and printed (``describe(record)``, default the
    JSON).

    Ctrl-C ends the running run as the run itself ends on it (a wheeler2 run closes its members
    and writes its last checkpoint, then raises ``KeyboardInterrupt``); that run is not stored,
    and the sweep says what it kept and exits 130, with no traceback."""
    done = []
    try:
        for seed, arm in interleave(seeds, arms, rotate, mirror):
            if (seed, arm) in skip:
                continue
            record = run(arm, seed)
            if runs_file is not None:
                runs.append(runs_file, record)
            print(describe(record) if describe else json.dumps(record, default=str), flush=True)
            done.append(record)
    except KeyboardInterrupt:
        where = f" in {runs_file}" if runs_file is not None else " nowhere (no runs file)"
        print(
            f"\ninterrupted: {len(done)} run(s) finished and stored{where}; "
            "the run cut short is not",
            flush=True,
        )
        raise SystemExit(130) from None
    return done


def run_parallel(
    todo: Iterable[tuple[Any, ...]],
    jobs: int,
    run: Callable[..., dict[str, Any]],
    runs_file: str | Path | None = None,
    describe: Callable[[dict[str, Any]], str] | None = None,
    after_store: Callable[[dict[str, Any]], None] | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """``run(*task, **kw)`` for each task of ``todo``, ``jobs`` at a time, each in a spawned
    process of its own (a fresh interpreter: no run's imports, threads or RNG reach another);
    ``run`` must be a module-level function. Tasks start in ``todo``'s order (interleave it),
    each record is appended to ``runs_file`` and printed (``describe(record)``) as its run
    ends; a record marked ``"interrupted": true`` is printed, not stored, so the sweep started
    again runs it (or resumes it) rather than counting a cut-short run. A run that raises is
    reported as it ends and the others go on (hours of them are not lost to one bad run); the
    sweep then raises ``RuntimeError`` naming each failed task. ``after_store(record)`` runs
    once a record is in ``runs_file``: the place to remove what a resumable run kept to go on
    from, since a run that removed it itself and was then stopped before its record was stored
    would be lost whole.

    Ctrl-C (which reaches the runs too: they share the terminal's process group) starts
    nothing more, waits for the running runs to stop (a resumable run writes its checkpoint),
    stores any that finished meanwhile and exits 130; a second Ctrl-C kills them. SIGTERM to
    the sweep alone (``kill``, ``pkill``) does the same: it is passed on to the runs, which
    would otherwise go on orphaned."""
    ctx = multiprocessing.get_context("spawn")
    jobs = max(1, jobs)
    pending = iter(todo)
    running: dict[Future[dict[str, Any]], tuple[Any, ...]] = {}
    done_records: list[dict[str, Any]] = []
    failed: list[str] = []

    def collect(finished: Iterable[Future[dict[str, Any]]]) -> None:
        for fut in finished:
            task = running.pop(fut)
            error = fut.exception()
            if isinstance(error, KeyboardInterrupt):
                continue  # stopped by the Ctrl-C before it had a record to return
            if error is not None:
                failed.append(f"{task!r}: {type(error).__name__}: {error}")
                print(f"run {task!r} failed:", flush=True)
                traceback.print_exception(error)  # with the run's own traceback, from its process
                continue
            record = fut.result()
            cut = bool(record.get("interrupted"))
            if runs_file is not None and not cut:
                runs.append(runs_file, record)
                if after_store is not None:
                    after_store(record)
            line = describe(record) if describe else json.dumps(record)
            print(line + (" (interrupted: not stored)" if cut else ""), flush=True)
            if not cut:
                done_records.append(record)

    # Not a `with` block: on Ctrl-C its shutdown(wait=False) leaves the pool's manager thread
    # respawning workers into a torn-down pool (a TypeError traceback, CPython 3.11).
    pool = ProcessPoolExecutor(
        jobs, mp_context=ctx, max_tasks_per_child=1, initializer=_sigterm_interrupts
    )
    restore = _pass_sigterm_to_runs()
    try:
        while True:
            while len(running) < jobs:
                task = next(pending, None)
                if task is None:
                    break
                running[pool.submit(run, *task, **kw)] = task
            if not running:
                pool.shutdown()
                if failed:
                    raise RuntimeError(f"{len(failed)} run(s) failed: " + "; ".join(failed))
                return done_records
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            collect(finished)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: waiting for {len(running)} running run(s) to stop "
            "(Ctrl-C again kills them); the same command goes on from here",
            flush=True,
        )
        try:
            collect(wait(running).done)
            pool.shutdown()
        except KeyboardInterrupt:
            for child in multiprocessing.active_children():
                child.kill()
            pool.shutdown(cancel_futures=True)  # the pool sees its workers gone and winds up
        raise SystemExit(130) from None
    finally:
        restore()


def _sigterm_interrupts() -> None:
    """In each run's process: SIGTERM stops the run as Ctrl-C does (a wheeler2 run sets the
    same for itself; this covers any other run function)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def _pass_sigterm_to_runs() -> Callable[[], None]:
    """SIGTERM to the sweep: passed on to its runs, then handled as Ctrl-C. Returns what puts
    the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signal handlers belong to the main thread

    def on_term(signum: int, frame: Any) -> None:
        for child in multiprocessing.active_children():
            if child.pid is None:
                continue  # not started: nothing to stop (and pid 0 would be our own group)
            try:
                os.kill(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # ended meanwhile
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def parse_set(expr: str) -> tuple[str, Any]:
    """``"team.0.params.gamma=0.95"`` -> ``("team.0.params.gamma", 0.95)``: the value is TOML,
    as ``wheeler2 run --set`` reads it."""
    key, sep, value = expr.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{expr!r}: expected TABLE.KEY=VALUE")
    return key.strip(), tomllib.loads(f"v = {value}")["v"]


@dataclass(frozen=True)
class Run:
    """One finished run: its directory, its ``summary.json`` and the seconds the call took
    (the run's own ``wall_s`` plus start-up and shutdown)."""

    run_dir: Path
    summary: dict[str, Any]
    call_s: float


def run_config(
    config: Any,
    sets: Iterable[str] = (),
    seed: int | None = None,
    out: str | Path | None = None,
    progress: bool = False,
    callbacks: Sequence[Any] = (),
) -> Run:
    """Run an experiment through the public API (``wheeler2.run``): ``config`` is a file, a
    ``Config`` or parsed TOML; ``sets`` are ``--set`` overrides, applied in order;
    ``callbacks`` are the run's (:mod:`wheeler2.callbacks`)."""
    import wheeler2

    overrides: dict[str, Any] = {"experiment.progress": progress}
    for expr in sets:
        key, value = parse_set(expr)
        overrides.pop(key, None)  # a later --set of the same key wins, in its own place
        overrides[key] = value
    if seed is not None:
        overrides["seed"] = seed
    if out is not None:
        overrides["out"] = str(out)
    t0 = time.perf_counter()
    run_dir = Path(wheeler2.run(config, callbacks=list(callbacks), **overrides))
    call_s = time.perf_counter() - t0
    return Run(run_dir, json.loads((run_dir / "summary.json").read_text()), call_s)


REQUEST = "request.json"  # what a resumable run was asked for, beside its run directory


def run_resumable(
    config: dict[str, Any],
    sets: Iterable[str],
    seed: int,
    work: str | Path,
    checkpoint_every: int | None = None,
    callbacks: Sequence[Any] = (),
) -> Run:
    """:func:`run_config` of parsed TOML in ``work``, a folder kept from one session to the
    next: a run there that stopped short of its budget (Ctrl-C, SIGTERM, a machine that went
    away) goes on from its latest checkpoint, as ``wheeler2 resume`` does, instead of starting
    over. The replay goes into the checkpoints (``buffer.checkpoint = true``), so the resumed
    learner samples what it would have; ``checkpoint_every`` (env steps) bounds what a kill
    without a last checkpoint loses. A run there that asked for something else (another config,
    ``sets`` or seed) is removed and this one starts fresh. The caller removes ``work`` once it
    has stored what it needs. ``callbacks`` go to a fresh run only."""
    import shutil

    import wheeler2.config
    from wheeler2.checkpoint import checkpoint_path
    from wheeler2.runtime import run_experiment

    work = Path(work)
    sets = [*sets, "buffer.checkpoint=true"]
    if checkpoint_every is not None:
        sets.append(f"experiment.checkpoint_every={checkpoint_every}")
    request = {"config": config, "sets": sets, "seed": seed}
    stored = work / REQUEST
    if stored.exists() and json.loads(stored.read_text()) != json.loads(json.dumps(request)):
        shutil.rmtree(work)
    started = [d for d in work.glob("*/") if checkpoint_path(d, "latest").exists()]
    if not started:
        work.mkdir(parents=True, exist_ok=True)
        stored.write_text(json.dumps(request))
        return run_config(config, sets, seed=seed, out=work, callbacks=callbacks)
    run_dir = max(started, key=lambda d: d.stat().st_mtime)
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if not summary["interrupted"] and summary["env_steps"] >= summary["total_steps"]:
            return Run(run_dir, summary, 0.0)  # it finished; its record was not stored
    t0 = time.perf_counter()
    run_experiment(wheeler2.config.load(run_dir / "config.toml"), run_dir, resume=True)
    call_s = time.perf_counter() - t0
    return Run(run_dir, json.loads(summary_path.read_text()), call_s)
