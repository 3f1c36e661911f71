"""The zoo: every shipped experiment file over five seeds at its own budget, in one table.

python -m experiments zoo                          # every cfg/*.toml not run yet, seeds 0-4
python -m experiments zoo --configs 'cfg/cartpole_*.toml' --seeds 0-4
python -m experiments zoo --only-table             # rebuild docs/zoo.md from the stored figures

Each file is checked first as ``wheeler2 check`` checks it (the team built once, without
training); one that fails (an env whose package is missing, a Unity build that is not here) is
a row saying "not run" and why. The others run as ``wheeler2 run FILE --seeds 0-4`` runs them
(:func:`wheeler2.sweep.run_sweep`), one sweep directory per file under ``runs/zoo/<stem>/``
(not kept in git), and are summarized by the code of ``wheeler2 report``
(:func:`wheeler2.report.write_report`): its ``report.json`` is kept as
``experiments/results/zoo/<stem>.report.json``, and the row's figures are appended to
``experiments/results/zoo_runs.jsonl``. ``docs/zoo.md`` is rendered from those figures alone
(``python -m experiments regen docs/zoo.md`` rebuilds it, as ``--only-table`` does after
reading the files afresh).

A file whose sweep finished (failed seeds included: they are its result) is not run again
while the file and the seeds stay the same; ``--force`` reruns it. "The same file" is its data
as written, with its ``extends`` chain (:func:`file_hash`), not the resolved config: a default
that a later version of an algorithm gains changes every resolved config without changing
what the file asks for, and would otherwise mark every row as stale. Ctrl-C stops the zoo after
the running sweep closes (its seeds write their last checkpoint); that file stays "not run yet",
and the next zoo goes on with its sweep (:func:`stopped_sweep`) rather than start it again.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import platform
import shlex
import shutil
import sys
import threading
import time
import tomllib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs
from experiments.lib.stats import Interval

DEFAULT_SEEDS = "0-4"
RUNS_FILE = "zoo_runs.jsonl"  # one record per file run (or refused), the last one counts
CONFIGS_FILE = "zoo_configs.json"  # what the table covers: the files and what each declares
REPORTS = "zoo"  # <stem>.report.json: wheeler2 report's figures of that file's sweep
TABLE = ROOT / "docs" / "zoo.md"
LOAD_EVERY_S = 30.0  # how often a running sweep's machine load is read (LoadWatch)
RUNS = ROOT / "runs" / "zoo"


# -- what a file declares ------------------------------------------------------------------------


def team_text(team: Sequence[Any]) -> str:
    """``"ddpg learner + 2 ppo explorers"``: each member table's algorithm and role."""
    parts = []
    for m in team:
        count = int(m.count)
        algo = m.algo.rsplit(":", 1)[-1]  # "./flaky.py:SeedOneFails" -> its class
        parts.append(f"{count} {algo} {m.role}s" if count > 1 else f"{algo} {m.role}")
    return " + ".join(parts)


def file_hash(path: Path) -> str:
    """:func:`wheeler2.sweep.config_hash` of the file's data with its bases merged
    (``extends``), defaults not filled in: it changes when the file (or a base) asks for
    something else."""
    from wheeler2.config.files import parse_toml
    from wheeler2.sweep import config_hash

    return config_hash(parse_toml(path))


def describe(path: Path) -> dict[str, Any]:
    """What the table says of a file before (or without) running it; ``error`` where the file
    does not load."""
    from wheeler2.config import load
    from wheeler2.sweep import config_hash

    entry: dict[str, Any] = {"config": report.shown(path)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # renamed keys: `wheeler2 check` is where to see them
            config = load(path)
    except Exception as exc:  # noqa: BLE001 - any file that does not load is a row saying why
        return {**entry, "error": one_line(exc)}
    task = f" ({config.task.spec})" if config.task.spec else ""
    return {
        **entry,
        "name": config.experiment.name,
        "env": config.env.id + task,
        "team": team_text(config.team),
        "budget": config.experiment.total_steps,
        "backend": config.experiment.backend,
        "eval_threshold": config.experiment.eval_threshold,
        "config_hash": config_hash(tomllib.loads(config.to_toml())),
        "file_hash": file_hash(path),
    }


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    file, sep, rest = text.partition(".toml: ")
    if sep and " " not in file:  # a ConfigError's file: the row names it already
        text = rest
    if isinstance(exc, ImportError | OSError | RuntimeError | ValueError | KeyError):
        return f"{type(exc).__name__}: {text}"
    return text  # ConfigError and UsageError name the file, table and key themselves


def check(path: Path) -> str | None:
    """None where ``wheeler2 check`` passes the file; else its one-line reason."""
    from wheeler2.config import load
    from wheeler2.runtime.probe import check_with_env

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_with_env(load(path))
    except Exception as exc:  # noqa: BLE001 - a missing package is an ImportError, a build an OSError
        return one_line(exc)
    return None


def machine() -> dict[str, Any]:
    """Where a sweep ran: the cores it could use and how busy the machine was as it began (the
    wall-clock of a shared machine is slower than the same run alone)."""
    from wheeler2.sweep import available_cores

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": available_cores(),
        "arch": platform.machine(),
        "cpu": cpu,
        "load": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
        "nice": os.nice(0) if hasattr(os, "nice") else 0,  # a niced zoo yields to other work
    }


class LoadWatch:
    """The machine's 1-minute load average every ``every_s`` seconds while a sweep runs: the
    load as a sweep began says nothing of what started beside it later, and a row's wall-clock
    means little without it. The figure counts the sweep's own processes too."""

    def __init__(self, every_s: float = LOAD_EVERY_S) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="zoo-load", daemon=True)

    def _watch(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadWatch:
        if hasattr(os, "getloadavg"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def figures(self) -> dict[str, float] | None:
        """Mean and highest load seen, or None where the platform has no load average."""
        if not self.samples:
            return None
        mean = sum(self.samples) / len(self.samples)
        return {"mean": round(mean, 1), "max": round(max(self.samples), 1)}


# -- running -------------------------------------------------------------------------------------


def _sweep_dirs(folder: Path) -> set[Path]:
    from wheeler2.sweep import SWEEP_FILE

    return {p.parent for p in folder.glob(f"*/{SWEEP_FILE}")} if folder.is_dir() else set()


def _near(path: Path) -> Path:
    """``path`` relative to the working directory where it lies under it: the run directories
    named in a kept report.json then say nothing of this machine's folders."""
    here = Path.cwd().resolve()
    return (
        Path(os.path.relpath(path.resolve(), here)) if path.resolve().is_relative_to(here) else path
    )


def run_config(
    path: Path,
    seeds: Sequence[int],
    runs_dir: Path,
    results: Path,
    parallel: int = 1,
) -> tuple[dict[str, Any], int]:
    """Check ``path``, run its sweep and summarize it; returns the record and the sweep's exit
    code (130: interrupted, and the record is not to be kept)."""
    from wheeler2.config import load
    from wheeler2.report import write_report
    from wheeler2.sweep import EXIT_INTERRUPTED, SWEEP_FILE

    entry = describe(path)
    base = {
        **entry,
        "seeds": list(seeds),
        "parallel": parallel,
        "date": report.now_utc(),
        "machine": machine(),
    }
    reason = entry.get("error") or check(path)
    if reason is not None:
        return {**base, "status": "not run", "reason": reason}, 0
    out = runs_dir / path.stem
    before = _sweep_dirs(out)
    overrides = [] if sys.stdout.isatty() else ["experiment.progress=false"]  # a log, not a bar
    stopped = stopped_sweep(out, path, seeds, load)
    t0 = time.perf_counter()
    with LoadWatch() as watch:
        code, reason = _run_sweep(path, seeds, overrides, load, str(out), parallel, stopped)
    new = [stopped] if stopped is not None else sorted(_sweep_dirs(out) - before)
    if code == EXIT_INTERRUPTED:
        return {**base, "status": "interrupted"}, EXIT_INTERRUPTED
    if reason is not None or not new:
        return {**base, "status": "not run", "reason": reason or f"the sweep exited {code}"}, 0
    if stopped is not None:
        base["resumed"] = True
    sweep_dir = _near(new[-1])
    made = write_report([sweep_dir], output=sweep_dir)
    kept = results / REPORTS / f"{path.stem}.report.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(made.files[1], kept)
    (figures,) = runs.load(kept)["configs"]
    meta = runs.load(sweep_dir / SWEEP_FILE)
    wall = [s["wall_s"] for s in meta["seeds"] if s["status"] == "finished"]
    record = {
        **base,
        "status": "ran",
        "config_hash": meta["config_hash"],  # the run's own: the file may change meanwhile
        "exit_code": code,
        "sweep_dir": str(sweep_dir),
        "report": os.path.relpath(kept, results),
        "by_status": figures["seeds"],
        "final_return": figures["final_return"],
        "best_return": figures["best_return"],
        "threshold": figures["threshold"],
        "solved": figures["solved"],
        "counted": figures["counted"],
        "wall_s": wall,
        "sweep_wall_s": round(time.perf_counter() - t0, 1),
        "load_during": watch.figures(),
    }
    return record, code


def stopped_sweep(out: Path, path: Path, seeds: Sequence[int], load: Any) -> Path | None:
    """The newest sweep in ``out`` that was stopped before its seeds ended, of these seeds and
    of the file as it resolves now: the zoo goes on with it rather than start the file again
    (a row of hours of runs then survives a stop). None where there is none."""
    from wheeler2.sweep import SWEEP_FILE, config_hash

    candidates = []
    for folder in _sweep_dirs(out):
        try:
            meta = runs.load(folder / SWEEP_FILE)
        except (OSError, ValueError):
            continue
        ended = all(e.get("status") in ("finished", "failed") for e in meta.get("seeds", []))
        if meta.get("status") == "finished" or ended:
            continue
        if [e.get("seed") for e in meta.get("seeds", [])] == list(seeds):
            candidates.append((meta.get("started") or "", folder, meta.get("config_hash")))
    if not candidates:
        return None
    _, folder, stored = max(candidates)
    now = config_hash(tomllib.loads(load(path, (), seed=seeds[0]).to_toml()))
    return folder if stored == now else None


def _run_sweep(
    path: Path,
    seeds: Sequence[int],
    overrides: list[str],
    load: Any,
    out: str,
    parallel: int,
    stopped: Path | None = None,
) -> tuple[int, str | None]:
    """The sweep's exit code, and why it did not start where it did not; ``stopped``: a sweep
    of the file to go on with (:func:`stopped_sweep`)."""
    from wheeler2.sweep import EXIT_INTERRUPTED, resume_sweep, run_sweep

    try:
        asked = str(parallel) if parallel > 1 else None
        if stopped is not None:
            print(f"zoo: going on with the stopped sweep {stopped}", flush=True)
            return resume_sweep(stopped, load, asked), None
        return run_sweep(path, seeds, overrides, load, out, asked), None
    except KeyboardInterrupt:  # while the seeds' configs were read: nothing ran
        return EXIT_INTERRUPTED, None
    except Exception as exc:  # noqa: BLE001 - a seed's config that seed 0's check did not refuse
        return 2, one_line(exc)


def finished_before(
    records: Sequence[dict[str, Any]], entry: dict[str, Any], seeds: Sequence[int]
) -> bool:
    """Whether the last record of this file is a sweep of these seeds of the file as it is now."""
    mine = [r for r in records if r["config"] == entry["config"]]
    if not mine:
        return False
    last = mine[-1]
    return last["status"] == "ran" and last["seeds"] == list(seeds) and not changed(last, entry)


def changed(record: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether the file changed since ``record``'s sweep: by :func:`file_hash`, or by the
    resolved config's hash for a record written before the file hash was kept."""
    key = "file_hash" if "file_hash" in record else "config_hash"
    return bool(entry.get(key)) and record.get(key) != entry[key]


# -- the table -----------------------------------------------------------------------------------


def _interval(data: dict[str, Any] | None) -> Interval:
    """An interval of a report.json ("inf" for infinity, null for nan) as wheeler2.stats'."""

    def number(x: float | str | None) -> float:
        return math.nan if x is None else float(x)  # float("inf"), float("-inf") as written

    if not data:
        return Interval(math.nan, math.nan, math.nan)
    return Interval(number(data["point"]), number(data["lo"]), number(data["hi"]))


def _seconds(values: Sequence[float]) -> str:
    from experiments.lib.stats import median

    if not values:
        return "—"
    s = median(values)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _seeds_cell(by_status: dict[str, int]) -> str:
    order = ("finished", "failed", "interrupted", "not run")
    return ", ".join(f"{by_status[k]} {k}" for k in order if by_status.get(k))


def _link(config: str, prefix: str | None) -> str:
    if prefix is None or Path(config).is_absolute():
        return f"`{config}`"
    return f"[{config}]({prefix}/{config})"


def render(stored: dict[str, Any], prefix: str | None = "..") -> str:
    """The zoo table from ``{"runs": records, "configs": the files it covers}``: a row per file,
    its last record's figures, or "not run yet". ``prefix``: the repository root as seen from
    the table's folder, for links to the files."""
    records = runs.latest(stored["runs"], key=lambda r: r["config"])
    files = stored["configs"]
    head = [
        "config",
        "env (task)",
        "team",
        "budget (env steps)",
        "seeds",
        "final eval return: median [95% CI]",
        "seeds solved",
        "wall-clock per seed (median)",
        "ran",
    ]
    rows, stale, counts = [], False, {"ran": 0, "not run": 0, "not run yet": 0}
    machines: dict[str, None] = {}
    for entry in files:
        rec = records.get(entry["config"])
        link = _link(entry["config"], prefix)
        if rec is None or rec["status"] not in ("ran", "not run"):
            counts["not run yet"] += 1
            if entry.get("error"):
                rows.append([link, "—", "—", "—", f"not run: {entry['error']}"] + ["—"] * 4)
                continue
            rows.append(
                [link, entry["env"], entry["team"], f"{entry['budget']:,}", "not run yet"]
                + ["—"] * 4
            )
            continue
        m = rec["machine"]
        ran = f"{rec['date'][:10]}, {m['cores']} cores" + (
            f", load {m['load']:g}" if m.get("load") is not None else ""
        )
        during = rec.get("load_during")  # rows of sweeps before LoadWatch have none
        if during:
            ran += f" (during: mean {during['mean']:g}, max {during['max']:g})"
        if m.get("nice"):
            ran += f", nice {m['nice']}"
        if rec.get("parallel", 1) > 1:
            ran += f", {rec['parallel']} seeds at a time"
        if rec.get("resumed"):
            ran += ", resumed after a stop (the load: its last session)"
        machines[f"{m['arch']} {m['cpu']}, {m['cores']} cores"] = None
        if rec["status"] == "not run":
            counts["not run"] += 1
            rows.append(
                [link, rec.get("env", "—"), rec.get("team", "—"), _budget(rec)]
                + [f"not run: {rec['reason']}", "—", "—", "—", ran]
            )
            continue
        counts["ran"] += 1
        mark = ""
        if changed(rec, entry):
            mark, stale = " †", True
        threshold = rec.get("threshold")
        solved = (
            "—" if threshold is None else f"{rec['solved']} of {rec['counted']} (> {threshold:g})"
        )
        rows.append(
            [
                link + mark,
                rec["env"],
                rec["team"],
                _budget(rec),
                _seeds_cell(rec["by_status"]),
                _interval(rec["final_return"].get("median")).cell(".2f"),
                solved,
                _seconds(rec["wall_s"]),
                ran,
            ]
        )
    n = len(files)
    lines = [
        "# The zoo: every shipped experiment file over seeds",
        "",
        f"{counts['ran']} of {n} files run, {counts['not run']} could not run here, "
        f"{counts['not run yet']} not run yet (`python -m experiments zoo` runs them).",
        "",
        "Each file ran as `wheeler2 run FILE --seeds 0-4` runs it, at its own budget "
        "(`total_steps`, all members together), seeds one after another unless **ran** says "
        "otherwise; the figures are `wheeler2 report`'s:",
        "",
        "- **final eval return**: the median over the finished seeds of each seed's last eval "
        "(the mean return of the file's `eval_episodes` episodes), with rliable's 95% "
        "percentile bootstrap interval over seeds;",
        "- **seeds solved**: seeds with an eval above (>) the file's `eval_threshold`, of all "
        'seeds run (a failed seed counts, as unsolved); "—" where the file sets no threshold;',
        "- **wall-clock**: the median over finished seeds of one seed's run, start-up included;",
        "- **ran**: the date (UTC), the cores the run could use, the machine's 1-minute load "
        "average as the sweep began, its mean and highest value while the sweep ran (read every "
        f"{LOAD_EVERY_S:g} s; it counts the sweep's own processes, so alone it is about the "
        "seeds at a time, more for a team of several processes; rows run before the zoo kept it "
        "lack it) and the zoo's niceness where it yielded to other work: on a shared machine a "
        "run is slower than alone, so compare wall-clock only between rows of one load.",
        "",
    ]
    lines += report.table(head, rows)
    if stale:
        lines += ["", "† the file changed since this row's sweep ran: rerun it with `--force`."]
    if machines:
        lines += ["", "Machines: " + "; ".join(machines) + "."]
    lines += [
        "",
        "Per file, `experiments/results/zoo/<stem>.report.json` holds `wheeler2 report`'s "
        "figures (IQM, best return, steps and seconds to the threshold, every seed's result); "
        "the run directories stay under `runs/zoo/` on the machine that ran them.",
    ]
    return "\n".join(lines) + "\n"


def _budget(rec: dict[str, Any]) -> str:
    return f"{rec['budget']:,}" if rec.get("budget") is not None else "—"


def write_table(table: Path, results: Path, files: Sequence[Path], command: str) -> Path:
    """Describe ``files`` afresh into ``zoo_configs.json`` and render the table from it and the
    stored records."""
    configs_file = results / CONFIGS_FILE
    runs.save(configs_file, [describe(p) for p in files])
    runs_file = results / RUNS_FILE
    if not runs_file.exists():
        runs_file.parent.mkdir(parents=True, exist_ok=True)
        runs_file.touch()  # an empty zoo: every row "not run yet", and regen still finds it
    stored = {"runs": runs.load(runs_file), "configs": runs.load(configs_file)}
    prefix = os.path.relpath(ROOT, table.resolve().parent)
    body = render(stored, prefix)
    return report.write(
        table,
        body,
        render=render,
        params={"prefix": prefix},
        runs_file={"runs": runs_file, "configs": configs_file},
        command=command,
    )


# -- the command ---------------------------------------------------------------------------------


def _glob(patterns: Sequence[str]) -> list[Path]:
    found: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) or sorted(glob.glob(str(ROOT / pattern)))
        if not matches:
            raise SystemExit(f"zoo: {pattern}: no experiment file matches")
        for m in matches:
            found[Path(m).resolve()] = None
    return list(found)


def main(argv: Sequence[str] | None = None) -> int:
    from wheeler2.errors import UsageError
    from wheeler2.sweep import EXIT_INTERRUPTED, parse_seeds

    ap = argparse.ArgumentParser(
        prog="python -m experiments zoo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--configs", nargs="+", metavar="GLOB", help="files to run (default: --shipped)"
    )
    ap.add_argument(
        "--shipped",
        nargs="+",
        default=[str(CFG / "*.toml")],
        metavar="GLOB",
        help="the files the table covers (default: cfg/*.toml)",
    )
    ap.add_argument("--seeds", default=DEFAULT_SEEDS, help="as wheeler2 run --seeds (0-4)")
    ap.add_argument("--parallel", type=int, default=1, metavar="N", help="seeds side by side")
    ap.add_argument("--force", action="store_true", help="rerun files whose sweep finished")
    ap.add_argument("--only-table", action="store_true", help="rebuild the table, run nothing")
    ap.add_argument("--runs", type=Path, default=RUNS, help="sweep directories (runs/zoo)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="kept figures")
    ap.add_argument("--table", type=Path, default=TABLE, help="the table (docs/zoo.md)")
    args = ap.parse_args(argv)
    if args.parallel < 1:
        ap.error(f"--parallel {args.parallel}: expected a number of runs >= 1")
    try:
        seeds = parse_seeds(args.seeds)
    except UsageError as exc:
        ap.error(str(exc))
    command = "python -m experiments zoo" + (f" {shlex.join(argv)}" if argv else "")
    shipped = _glob(args.shipped)
    chosen = _glob(args.configs) if args.configs else shipped
    files = list(dict.fromkeys([*shipped, *chosen]))
    runs_file = args.results / RUNS_FILE
    code = 0
    if not args.only_table:
        for i, path in enumerate(chosen, 1):
            entry = describe(path)
            where = f"zoo [{i}/{len(chosen)}] {entry['config']}"
            if not args.force and finished_before(runs.load(runs_file), entry, seeds):
                print(f"{where}: done before (--force reruns it)", flush=True)
                continue
            print(f"{where}: seeds {args.seeds}", flush=True)
            record, status = run_config(path, seeds, args.runs, args.results, args.parallel)
            if status == EXIT_INTERRUPTED:
                print(f"{where}: interrupted; it stays 'not run yet'", flush=True)
                code = EXIT_INTERRUPTED
                break
            runs.append(runs_file, record)
            print(f"{where}: {_said(record)}", flush=True)
            write_table(args.table, args.results, files, command)  # honest after every file
    path = write_table(args.table, args.results, files, command)
    print(f"wrote {report.shown(path)}")
    return code


def _said(record: dict[str, Any]) -> str:
    if record["status"] != "ran":
        return f"{record['status']}: {record.get('reason')}"
    final = _interval(record["final_return"].get("median")).cell(".2f")
    solved = (
        "" if record["threshold"] is None else f", {record['solved']} of {record['counted']} solved"
    )
    return f"{_seeds_cell(record['by_status'])}, final eval return {final}{solved}"


if __name__ == "__main__":
    sys.exit(main())
