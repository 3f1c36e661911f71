"""Many seeds of one experiment file: ``wheeler2 run FILE --seeds 0-9 [--parallel [N]]``.

A sweep directory ``OUT/NAME-sweep-<stamp>/`` holds one run directory per seed (``seed-<k>/``)
and ``sweep.json``: the file, its overrides, the resolved config without its seed and that
config's hash (``wheeler2 report`` groups runs by it), and each seed's status: ``pending``,
``running``, ``finished``, ``failed`` (with its error line; the traceback is in
``seed-<k>/error.txt``) or ``interrupted`` (``started`` false when Ctrl-C came before it
began). ``sweep.json`` is rewritten at every change, so a sweep that
was killed still says how far it got.

Serially, the seeds run one after another in this process, with each run's own output on the
terminal. With ``--parallel N`` each seed is a child process (``python -m wheeler2.sweep``,
which runs the same :func:`run_seed`) whose output goes to ``seed-<k>/output.log``; at most N
run at a time. A child runs the config this process resolved for its seed
(``seed-<k>/sweep_seed.toml``), not the file read again: an edit to the file while the sweep
runs reaches no seed, and ``sweep.json`` describes every one. The children are in sessions of
their own, so a Ctrl-C reaches them once, forwarded by this process: each writes its last
checkpoint and summary and exits 130; a second Ctrl-C kills them. SIGTERM (``timeout``, a
batch scheduler) stops a sweep as Ctrl-C does. When this process ends by any other means,
SIGKILL included, each child stops as on Ctrl-C (killed outright a minute later:
:func:`wheeler2.process.stop_with_parent`), so no seed runs on for hours with nobody left to
record it. ``wheeler2 resume SWEEP_DIR`` (:func:`resume_sweep`) goes on with a sweep that
stopped: its unfinished seeds from their checkpoints, the ones that never began afresh.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2.errors import UsageError
from wheeler2.process import available_cores

if TYPE_CHECKING:
    from wheeler2.config import Config

SWEEP_FILE = "sweep.json"
ERROR_FILE = "error.txt"  # a failed seed's error line, a blank line, its traceback
OUTPUT_FILE = "output.log"  # a child's stdout and stderr (--parallel)
SEED_FILE = "sweep_seed.toml"  # the config a child runs (--parallel), resolved by the sweep
# Keys that do not change what a run learns: runs that differ only in these share a config.
NOT_CONFIG = ("seed", "out", "progress", "ray_address")
POLL_S = 0.2
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130

Loader = Callable[..., "Config"]


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` (inclusive), ``"0,3,7"`` or both (``"0-4,8"``) -> the seeds, in order."""
    seeds: list[int] = []
    seen: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        first, dash, last = part.partition("-")
        bounds = (first, last) if dash else (first,)
        # Plain ASCII digits: int() would also take "1_000", "+3" and other scripts' digits.
        if not all(b.isascii() and b.isdigit() for b in bounds):
            if part.startswith("-") and part[1:].isascii() and part[1:].isdigit():
                raise UsageError(f"--seeds {text}: {part!r} is not a seed >= 0")
            raise UsageError(
                f"--seeds {text}: expected seeds and ranges like 0-9 or 0,3,7, got {part!r}"
            )
        lo, hi = int(bounds[0]), int(bounds[-1])
        if hi < lo:
            raise UsageError(f"--seeds {text}: {part!r} is not a range of seeds >= 0 (low-high)")
        for seed in range(lo, hi + 1):
            if seed in seen:
                raise UsageError(f"--seeds {text}: seed {seed} given twice")
            seen.add(seed)
            seeds.append(seed)
    return seeds


def settings(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config (``config.toml``'s tables) without the keys that do not change what
    is learned (:data:`NOT_CONFIG`: the seed, where results go, the display)."""
    experiment = {k: v for k, v in data.get("experiment", {}).items() if k not in NOT_CONFIG}
    return {**data, "experiment": experiment}


def config_hash(data: dict[str, Any]) -> str:
    """A short hash of a resolved config's :func:`settings`: the seeds of one config share it."""
    text = json.dumps(settings(data), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def processes_per_run(config: Config) -> int:
    """Cores one run keeps busy: one for a serial run, one per member on the local and ray
    backends (the coordinator mostly waits on them)."""
    if config.experiment.backend == "serial":
        return 1
    return max(1, sum(int(m.count) for m in config.team))


def parallel_runs(asked: str | None, config: Config, seeds: int) -> int:
    """How many seeds run at once: 1 without ``--parallel``; with ``--parallel`` alone, as many
    as the cores allow (cores // :func:`processes_per_run`); never more than there are seeds."""
    if asked is None:
        return 1
    if asked == "auto":
        n = available_cores() // processes_per_run(config)
    else:
        try:
            n = int(asked)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--parallel {asked}: expected a number of runs >= 1")
    return max(1, min(n, seeds))


class Sweep:
    """``sweep.json`` and the progress lines: what every way of running seeds reports through."""

    def __init__(self, path: Path, meta: dict[str, Any], seeds: Sequence[int]) -> None:
        self.dir = path
        self.meta = meta
        self.seeds: dict[int, dict[str, Any]] = {
            s: {
                "seed": s,
                "run_dir": f"seed-{s}",
                "status": "pending",
                "started": False,
                "error": None,
                "wall_s": None,
            }
            for s in seeds
        }
        self._t0: dict[int, float] = {}
        self._earlier_s: dict[int, float] = {}  # a resumed seed's wall-clock before this session
        self.resumed: set[int] = set()  # seeds that go on from their latest checkpoint

    @classmethod
    def reopen(cls, path: Path) -> Sweep:
        """The sweep in ``path`` (its ``sweep.json``), to go on with: its seeds that did not
        end (pending, running, interrupted) are pending again, those with a checkpoint in
        :attr:`resumed`; finished and failed seeds stay as they are."""
        from wheeler2.checkpoint import checkpoint_path

        doc = read_sweep(path)
        sweep = cls(path, {k: v for k, v in doc.items() if k not in ("status", "seeds")}, [])
        for entry in doc["seeds"]:
            seed = int(entry["seed"])
            sweep.seeds[seed] = entry = dict(entry)
            if entry["status"] in ("finished", "failed"):
                continue
            if checkpoint_path(path / entry["run_dir"], "latest").is_file():
                sweep.resumed.add(seed)
                sweep._earlier_s[seed] = float(entry.get("wall_s") or 0.0)
            entry.update(status="pending", error=None)
        sweep.meta.update(pid=os.getpid(), ended=None)
        return sweep

    def run_dir(self, seed: int) -> Path:
        return self.dir / self.seeds[seed]["run_dir"]

    def write(self, status: str = "running") -> None:
        from wheeler2.log import write_json_atomic

        doc = {**self.meta, "status": status, "seeds": list(self.seeds.values())}
        write_json_atomic(self.dir / SWEEP_FILE, doc, indent=2)

    def started(self, seed: int) -> None:
        self._t0[seed] = time.perf_counter()
        self.seeds[seed].update(status="running", started=True)
        self.write()
        order = list(self.seeds).index(seed) + 1
        how = "resumed from its latest checkpoint" if seed in self.resumed else "started"
        print(f"sweep: seed {seed} {how} ({order} of {len(self.seeds)})", flush=True)

    def ended(self, seed: int, status: str, error: str | None = None) -> None:
        entry = self.seeds[seed]
        wall = entry["wall_s"]  # a seed resumed but stopped before it began keeps its own
        if seed in self._t0:
            this_session = time.perf_counter() - self._t0[seed]
            wall = round(self._earlier_s.get(seed, 0.0) + this_session, 3)
        entry.update(status=status, error=error, wall_s=wall)
        self.write()
        took = f" in {wall:.1f} s" if seed in self._t0 else " before it started"
        detail = f": {error}" if error else self._results(seed)
        print(f"sweep: seed {seed} {status}{took}{detail}{self._tally()}", flush=True)

    def _results(self, seed: int) -> str:
        from wheeler2.log import read_summary

        try:
            summary = read_summary(self.run_dir(seed))
        except (OSError, ValueError):
            return ""
        final, best = summary.get("final_eval_return"), summary.get("best_eval_return")
        if final is None:
            return ""
        return f": final eval return {final:.2f}, best {best:.2f}"

    def _tally(self) -> str:
        done = sum(e["status"] not in ("pending", "running") for e in self.seeds.values())
        return f" [{done}/{len(self.seeds)} done]"

    def pending(self) -> list[int]:
        return [s for s, e in self.seeds.items() if e["status"] == "pending"]

    def close(self) -> int:
        """Marks seeds still running or that never began as interrupted, writes the final
        ``sweep.json`` and prints its tally; returns the exit code (130 interrupted, 1 a seed
        failed, else 0)."""
        for seed, entry in self.seeds.items():
            if entry["status"] in ("pending", "running"):
                self.ended(seed, "interrupted")
        counts = {k: 0 for k in ("finished", "failed", "interrupted")}
        for e in self.seeds.values():
            counts[e["status"]] = counts.get(e["status"], 0) + 1
        failed = [str(s) for s, e in self.seeds.items() if e["status"] == "failed"]
        self.meta["ended"] = _now()
        status = "interrupted" if counts["interrupted"] else "finished"
        self.write(status)
        which = f" (seed{'s' if len(failed) > 1 else ''} {', '.join(failed)})" if failed else ""
        print(
            f"sweep {status}: {counts['finished']} finished, {counts['failed']} failed{which}, "
            f"{counts['interrupted']} interrupted: {self.dir}\n"
            f"  statistics over the seeds: wheeler2 report {self.dir}",
            flush=True,
        )
        if counts["interrupted"]:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if failed else EXIT_OK


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def run_sweep(
    file: Path,
    seeds: Sequence[int],
    overrides: Sequence[str],
    load: Loader,
    out: str | None = None,
    parallel: str | None = None,
) -> int:
    """Run ``file`` once per seed into a new sweep directory; returns the exit code.

    ``load(file, overrides, seed=..., out=...)`` reads one seed's config (the CLI's loader,
    which prints renamed-key warnings once); every seed's config is read before the first
    starts, so an invalid one fails the sweep at once (``ConfigError``, exit 2)."""
    from wheeler2.runtime.experiment import new_run_dir

    configs = {s: load(file, overrides, seed=s, out=out) for s in seeds}
    first = configs[seeds[0]]
    n = parallel_runs(parallel, first, len(seeds))
    exp = first.experiment
    named = dataclasses.replace(
        first, experiment=dataclasses.replace(exp, name=f"{exp.name}-sweep")
    )
    resolved = tomllib.loads(first.to_toml())
    meta = {
        "name": exp.name,
        "file": str(file),
        "overrides": list(overrides),
        "config_hash": config_hash(resolved),
        "eval_threshold": exp.eval_threshold,
        "backend": exp.backend,
        "parallel": n,
        "cwd": os.getcwd(),  # what a relative `file` is relative to, for `wheeler2 resume`
        "pid": os.getpid(),  # `wheeler2 resume` refuses a sweep whose process still runs
        "started": _now(),
        "ended": None,
        "config": settings(resolved),  # what `wheeler2 report` tells configs of one name apart by
    }
    sweep = Sweep(new_run_dir(named), meta, seeds)
    side_by_side = f", {n} at a time" if n > 1 else ", one after another"
    print(f"sweep: {len(seeds)} seeds of {exp.name}{side_by_side}: {sweep.dir}", flush=True)
    return _run(sweep, Path(file), configs, n)


def _run(sweep: Sweep, file: Path, configs: dict[int, Config], n: int) -> int:
    from wheeler2.runtime.experiment import interrupt_on_sigterm

    sweep.write()
    try:
        with interrupt_on_sigterm():
            if n == 1:
                _run_here(sweep, configs)
            else:
                _run_children(sweep, file, configs, n)
    except KeyboardInterrupt:  # between two seeds' runs: close() marks what it stopped
        pass
    return sweep.close()


def read_sweep(path: Path) -> dict[str, Any]:
    """``path/sweep.json``, or a :class:`UsageError` naming what is wrong with it."""
    where = path / SWEEP_FILE
    try:
        doc = json.loads(where.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no {SWEEP_FILE} here; is this a sweep directory?") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: cannot be read as a sweep ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("seeds"), list):
        raise UsageError(f"{where}: expected a sweep's JSON object with a list of seeds")
    return doc


def resume_sweep(path: Path, load: Loader, parallel: str | None = None) -> int:
    """Go on with the sweep in ``path`` where it stopped; returns the exit code as
    :func:`run_sweep` does.

    Each seed that did not end goes on from its latest checkpoint (the config saved in its run
    directory), or starts afresh if it stopped before writing one (the sweep's file, read again:
    refused if it no longer resolves to the config the sweep began with). Finished and failed
    seeds are results and are left as they are. ``parallel`` as in :func:`run_sweep`; a seed's
    wall-clock adds up over the sessions it ran in."""
    from wheeler2.api import run_config_path

    doc = read_sweep(path)
    if doc.get("status") == "running" and _alive(doc.get("pid")):
        raise UsageError(f"{path}: its sweep is still running (pid {doc['pid']})")
    sweep = Sweep.reopen(path)
    todo = sweep.pending()
    if not todo:
        print(f"sweep: nothing to resume in {path}: every seed finished or failed", flush=True)
        return sweep.close()
    file = Path(sweep.meta["file"])
    if not file.is_absolute():
        file = Path(sweep.meta.get("cwd", ".")) / file
    configs: dict[int, Config] = {}
    for seed in todo:
        if seed in sweep.resumed:
            configs[seed] = load(run_config_path(sweep.run_dir(seed)), (), seed=seed)
            continue
        if not file.is_file():
            raise UsageError(
                f"{path}: seed {seed} starts afresh from {file}, which is not there any more"
            )
        config = load(file, sweep.meta["overrides"], seed=seed, out=str(path.parent))
        found = config_hash(tomllib.loads(config.to_toml()))
        if found != sweep.meta["config_hash"]:
            raise UsageError(
                f"{file}: changed since the sweep began (config hash {found}, the sweep's "
                f"{sweep.meta['config_hash']}): seed {seed} would run another experiment than "
                "its other seeds; put the file back, or start a new sweep"
            )
        configs[seed] = config
    for seed in todo:
        if seed not in sweep.resumed:
            _set_aside(sweep.run_dir(seed))
    n = parallel_runs(parallel, configs[todo[0]], len(todo))
    sweep.meta["parallel"] = n
    went_on = len(sweep.resumed)
    print(
        f"sweep: resuming {len(todo)} of {len(sweep.seeds)} seeds of {sweep.meta['name']} "
        f"({went_on} from a checkpoint, {len(todo) - went_on} afresh)"
        f"{f', {n} at a time' if n > 1 else ''}: {path}",
        flush=True,
    )
    return _run(sweep, file, configs, n)


def _set_aside(run_dir: Path) -> None:
    """A seed that starts afresh where an earlier start left files but no checkpoint (stopped
    in its start-up, or killed before its first): those are moved aside, so that the new run's
    metrics are not appended to the old ones."""
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    k = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.stopped-{k}")).exists():
        k += 1
    run_dir.rename(aside)
    print(f"sweep: {run_dir.name} has no checkpoint; its earlier files are in {aside}", flush=True)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _run_here(sweep: Sweep, configs: dict[int, Config]) -> None:
    for seed in sweep.pending():
        sweep.started(seed)
        # Ctrl-C ends the run as it ends a single one (last checkpoint and summary written)
        # and leaves this loop; Sweep.close marks the seed interrupted.
        error = run_seed(configs[seed], sweep.run_dir(seed), resume=seed in sweep.resumed)
        sweep.ended(seed, "failed" if error else "finished", error)


def run_seed(config: Config, run_dir: Path, resume: bool = False) -> str | None:
    """Run one seed into ``run_dir`` (``resume``: on from its latest checkpoint); returns None,
    or the error line of a run that failed (its traceback written to ``run_dir/error.txt``).
    Ctrl-C propagates."""
    from wheeler2.runtime import run_experiment
    from wheeler2.runtime.experiment import MemberFailed

    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        run_experiment(config, run_dir, resume=resume)
    except KeyboardInterrupt:
        raise
    except MemberFailed as exc:  # the coordinator printed the member's traceback already
        return _failed(run_dir, str(exc), exc.detail)
    except Exception as exc:  # noqa: BLE001 - any failure of one seed is that seed's result
        return _failed(run_dir, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    return None


def _failed(run_dir: Path, line: str, detail: str) -> str:
    line = " ".join(line.split())  # one line, whatever the message held
    (run_dir / ERROR_FILE).write_text(f"{line}\n\n{detail.rstrip()}\n")
    return line


def _error_line(run_dir: Path, returncode: int) -> str:
    try:
        return (run_dir / ERROR_FILE).read_text().splitlines()[0]
    except (OSError, IndexError):
        pass
    try:  # killed, or crashed below Python: the child's last words, if any
        lines = (run_dir / OUTPUT_FILE).read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    last = f"; last output: {lines[-1].strip()}" if lines else ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory?)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}{last}"
    return f"exit code {returncode}{last}"


def _child_command(seed_file: Path, seed: int, run_dir: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "wheeler2.sweep", str(seed_file), str(seed), str(run_dir)]
    return cmd + ["--parent", str(os.getpid())] + (["--resume"] if resume else [])


def _run_children(sweep: Sweep, file: Path, configs: dict[int, Config], n: int) -> None:
    running: dict[int, subprocess.Popen[bytes]] = {}
    try:
        while sweep.pending() or running:
            for seed in sweep.pending()[: max(0, n - len(running))]:
                run_dir = sweep.run_dir(seed)
                run_dir.mkdir(parents=True, exist_ok=True)
                seed_file = run_dir / SEED_FILE
                seed_file.write_text(
                    f"# {file} as the sweep resolved it for seed {seed}\n" + configs[seed].to_toml()
                )
                mode = "ab" if seed in sweep.resumed else "wb"  # a resumed seed's log goes on
                with open(run_dir / OUTPUT_FILE, mode) as log:
                    running[seed] = subprocess.Popen(
                        _child_command(seed_file, seed, run_dir, seed in sweep.resumed),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                sweep.started(seed)
            time.sleep(POLL_S)
            for seed, proc in list(running.items()):
                if proc.poll() is not None:
                    del running[seed]
                    _child_ended(sweep, seed, proc.returncode)
    except KeyboardInterrupt:
        print(
            f"\nsweep: stopping {len(running)} running seed(s); they write their last "
            "checkpoint and summary (Ctrl-C again kills them)",
            flush=True,
        )
        _stop_children(sweep, running)


def _child_ended(sweep: Sweep, seed: int, returncode: int) -> None:
    if returncode == EXIT_OK:
        sweep.ended(seed, "finished")
    elif returncode in (EXIT_INTERRUPTED, -signal.SIGINT):
        sweep.ended(seed, "interrupted")
    else:
        sweep.ended(seed, "failed", _error_line(sweep.run_dir(seed), returncode))


def _stop_children(sweep: Sweep, running: dict[int, subprocess.Popen[bytes]]) -> None:
    for proc in running.values():
        _signal_group(proc, signal.SIGINT)
    try:
        for seed, proc in list(running.items()):
            proc.wait()
            del running[seed]
            _child_ended(sweep, seed, proc.returncode)
    except KeyboardInterrupt:
        for seed, proc in running.items():
            _signal_group(proc, signal.SIGKILL)  # the run's members too: its process group
            proc.wait()
            sweep.ended(seed, "interrupted", "killed by a second Ctrl-C")


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # already gone
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """One seed of a ``--parallel`` sweep, in its own process: ``FILE SEED RUN_DIR [--parent
    PID]``, FILE being the config the sweep resolved for the seed (overrides and output folder
    already in it). Exit 0 finished, 1 failed (``error.txt`` says why), 130 interrupted (Ctrl-C
    forwarded by the sweep, or the sweep, ``--parent``, gone)."""
    parser = argparse.ArgumentParser(prog="python -m wheeler2.sweep")
    parser.add_argument("file", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--parent", type=int, help="the sweep's pid: stop when it is gone")
    parser.add_argument("--resume", action="store_true", help="on from its latest checkpoint")
    args = parser.parse_args(argv)
    if args.parent is not None:
        from wheeler2.process import stop_with_parent

        stop_with_parent(args.parent, f"sweep seed {args.seed}")
    try:
        from wheeler2.preload import start_early

        start_early("run", args.file, ())
        import warnings

        from wheeler2.config import ConfigDeprecationWarning, load

        try:
            with warnings.catch_warnings():
                # The sweep printed these once, reading every seed's config before it began.
                warnings.simplefilter("ignore", ConfigDeprecationWarning)
                config = load(args.file, (), seed=args.seed)
        except Exception as exc:  # noqa: BLE001 - a config the sweep wrote that will not load
            error: str | None = _failed(args.run_dir, str(exc), traceback.format_exc())
        else:
            error = run_seed(config, args.run_dir, resume=args.resume)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
