"""``wheeler2 report DIR...``: statistics over the seeds of each config, honestly counted.

Runs are found in sweep directories (``sweep.json``: its seeds, failed ones included), run
directories (``summary.json``) and folders holding either, and grouped by config: the
experiment's name and the hash of its resolved config without the seed and output keys
(:func:`wheeler2.sweep.config_hash`), or by sweep (``--by sweep``). Per config:

* the seeds: finished, failed (with the error line), interrupted, never run;
* the median and IQM (Agarwal et al. 2021) of the final and of the best eval return over the
  finished seeds, with 95% percentile bootstrap intervals through rliable
  (:func:`wheeler2.stats.seed_intervals`);
* how many seeds went above the config's ``eval_threshold`` (``>``, as the run's own
  ``steps_to_threshold``), and the median env steps and wall seconds to get there, with
  bootstrap intervals (:func:`wheeler2.stats.median_ci`). A seed that failed, was interrupted
  or never got above it is censored, not dropped: it is infinite ("never"), so it ranks after
  every seed that did, and a median over at least half such seeds is "never";
* curves (``report.png``): the median eval return over the finished seeds against env steps
  and wall-clock, with the bootstrap interval of that median as a band
  (:func:`wheeler2.plot.plot_bands`).

``report.md`` (what is printed), ``report.json`` (the same figures, infinity as ``"inf"``)
and ``report.png`` go into the first DIR, or ``-o``.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheeler2 import stats
from wheeler2.errors import UsageError
from wheeler2.sweep import SWEEP_FILE, config_hash, settings

REPORT_FILES = ("report.md", "report.json", "report.png")
CONFIDENCE = 0.95
NOT_RUN = "not run"  # a sweep's seed that Ctrl-C stopped before it began: in no statistic


@dataclass
class Run:
    """One seed of one config, as found on disk."""

    path: Path | None  # None: a sweep's seed that never began
    name: str
    config: str  # the config hash ("" where the run directory has no config.toml)
    seed: int | None
    status: str  # finished | failed | interrupted | not run
    error: str | None = None
    evals: list[dict] = field(default_factory=list)
    threshold: float | None = None
    sweep: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # the config without its seed


@dataclass
class Report:
    markdown: str
    data: dict[str, Any]
    files: list[Path]


# -- finding runs --------------------------------------------------------------------------------


def find_runs(dirs: Sequence[str | Path]) -> list[Run]:
    """Every run under ``dirs``: a sweep's seeds (from its ``sweep.json``, in its order), then
    run directories outside sweeps; each directory once."""
    found: dict[Any, Run] = {}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise UsageError(f"{d}: no such directory")
        sweeps = (
            [d] if (d / SWEEP_FILE).is_file() else sorted(p.parent for p in d.rglob(SWEEP_FILE))
        )
        for sweep in sweeps:
            for run in _sweep_runs(sweep):
                found.setdefault(run.path.resolve() if run.path else (sweep, run.seed), run)
        runs = [d] if _is_run(d) else _run_dirs_under(d)
        inside = [s.resolve() for s in sweeps]
        for path in runs:
            # A sweep's runs are the seeds its sweep.json lists: not a start it set aside.
            if not any(path.resolve().is_relative_to(s) for s in inside):
                found.setdefault(path.resolve(), _plain_run(path))
    if not found:
        raise UsageError(
            f"no runs in {', '.join(map(str, dirs))}: expected sweep directories (sweep.json), "
            "run directories (summary.json) or folders holding them"
        )
    return list(found.values())


def _run_dirs_under(folder: Path) -> list[Path]:
    found = {p.parent for f in ("summary.json", "config.toml") for p in folder.rglob(f)}
    return sorted(p for p in found if _is_run(p))


def _is_run(path: Path) -> bool:
    # A run writes config.toml and checkpoints/ as it starts, summary.json as it ends.
    return (path / "summary.json").is_file() or (
        (path / "config.toml").is_file() and (path / "checkpoints").is_dir()
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def _sweep_runs(sweep: Path) -> list[Run]:
    meta = _read_json(sweep / SWEEP_FILE)
    runs = []
    for entry in meta.get("seeds", []):
        path = sweep / entry["run_dir"]
        status = entry.get("status")
        if status in ("pending", "running") or (
            status == "interrupted" and not entry.get("started", True)
        ):
            # pending: never began (the sweep was killed); running: killed with it
            status = "interrupted" if status == "running" else NOT_RUN
        summary = _summary(path)
        if status in ("interrupted", "failed") and _completed(summary):
            status = "finished"  # resumed (wheeler2 resume) to its end since the sweep stopped
        runs.append(
            _finite_evals(
                Run(
                    path=path if status != NOT_RUN else None,
                    name=str(meta.get("name", sweep.name)),
                    config=str(meta.get("config_hash", "")),
                    seed=int(entry["seed"]),
                    status=status,
                    error=entry.get("error"),
                    evals=list(summary.get("eval") or []),
                    threshold=meta.get("eval_threshold"),
                    sweep=sweep,
                    settings=meta.get("config") or {},
                )
            )
        )
    return runs


def _finite_evals(run: Run) -> Run:
    """A finished run with an eval return that is not a finite number (summary.json writes
    NaN as null) counts as failed there: no statistic can take it, and dropping the eval would
    report a return the policy did not have."""
    if run.status != "finished":
        return run
    for e in run.evals:
        value = e.get("return")
        if not isinstance(value, int | float) or not math.isfinite(value):
            run.status = "failed"
            run.error = f"eval return {value} at {e.get('env_steps')} env steps: not finite"
            break
    return run


def _completed(summary: dict[str, Any]) -> bool:
    """Whether a run's summary says it ran to its end: not interrupted, no member failed."""
    members = (summary.get("members") or {}).values()
    return (
        bool(summary)
        and not summary.get("interrupted")
        and (summary.get("stop") or {}).get("by") in ("total_steps", "threshold", "callback")
        and not any((m or {}).get("ended") == "failed" for m in members)
    )


def _summary(path: Path) -> dict[str, Any]:
    file = path / "summary.json"
    return _read_json(file) if file.is_file() else {}


def _plain_run(path: Path) -> Run:
    """A run directory outside a sweep: its status from its summary (a member that ended
    "failed", or an interrupted run), a failure where it has none."""
    summary = _summary(path)
    config: dict[str, Any] = {}
    if (path / "config.toml").is_file():
        config = tomllib.loads((path / "config.toml").read_text(encoding="utf-8"))
    exp = config.get("experiment", {})
    failed = sorted(
        n for n, m in (summary.get("members") or {}).items() if (m or {}).get("ended") == "failed"
    )
    stop = summary.get("stop") or {}
    status, error = "finished", None
    if not summary:
        status = "failed"
        error = "no summary.json: it failed before writing one, was killed, or still runs"
    elif failed:
        status, error = "failed", f"member {failed[0]!r} failed"
    elif stop.get("by") in ("failure", "callback_error"):
        # failed in start-up (no member yet to say so) or in a callback: failed, not stopped
        status, error = "failed", str(stop.get("reason") or stop["by"])
    elif summary.get("interrupted"):
        status = "interrupted"
    threshold = summary.get("eval_threshold", exp.get("eval_threshold"))
    run = Run(
        path=path,
        name=str(summary.get("name") or exp.get("name") or path.name),
        config=config_hash(config) if config else "",
        seed=exp.get("seed"),
        status=status,
        error=error,
        evals=list(summary.get("eval") or []),
        threshold=threshold,
        settings=settings(config) if config else {},
    )
    return _finite_evals(run)


# -- grouping and statistics ---------------------------------------------------------------------


def group_runs(runs: Sequence[Run], by: str = "config") -> dict[str, list[Run]]:
    """Label -> runs: one per config (name and config hash), or per sweep (its directory's
    name) with ``by="sweep"``. A config is labelled by its name, and where several share it,
    by the keys whose values tell them apart (``cartpole-ppo (team.ppo.params.n_epochs=5)``)."""
    if by not in ("config", "sweep"):
        raise ValueError(f"by={by!r}: expected 'config' or 'sweep'")
    keyed: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        if by == "sweep" and run.sweep is not None:
            key = (run.sweep.name, "")
        else:
            key = (run.name, run.config)
        keyed.setdefault(key, []).append(run)
    out: dict[str, list[Run]] = {}
    for (name, h), group in keyed.items():
        rivals = [g[0].settings for (n, _), g in keyed.items() if n == name]
        label = name + _differences(group[0].settings, rivals)
        out[label if label not in out else f"{label} [{h[:6]}]"] = group
    return out


def latest_per_seed(runs: Sequence[Run]) -> tuple[list[Run], dict[int, int]]:
    """One run per seed, the one that ended last (a sweep run again, a seed run again by hand);
    a seed never begun counts only where it has no other run. Returns the runs kept, in their
    order, and ``{seed: runs found}`` for the seeds run more than once. Pooling the repeats
    would count one seed as several independent ones."""
    by_seed: dict[int, list[Run]] = {}
    for run in runs:
        if run.seed is not None:
            by_seed.setdefault(run.seed, []).append(run)
    chosen = {}
    ran: dict[int, int] = {}  # seed -> its runs that began
    for seed, found in by_seed.items():
        begun = [r for r in found if r.status != NOT_RUN]
        chosen[seed] = max(begun or found, key=_ended_at)
        # A sweep's seed that never began is no run: a seed Ctrl-C stopped before it began
        # and then run by another sweep ran once, not twice.
        ran[seed] = len(begun)
    kept = [r for r in runs if r.seed is None or chosen[r.seed] is r]
    return kept, {seed: n for seed, n in ran.items() if n > 1}


def _ended_at(run: Run) -> float:
    if run.path is None:
        return -math.inf
    for name in ("summary.json", "config.toml"):
        try:
            return (run.path / name).stat().st_mtime
        except OSError:
            continue
    return -math.inf


def _differences(mine: dict[str, Any], rivals: list[dict[str, Any]], most: int = 3) -> str:
    """`` (key=value, ...)``: the keys of ``mine`` whose values differ among ``rivals`` (the
    configs sharing its name, itself among them); "" where none do."""
    flats = [_flat(r) for r in rivals]
    keys = sorted({k for f in flats for k in f if len({repr(g.get(k)) for g in flats}) > 1})
    if not keys:
        return ""
    own = _flat(mine)
    shown = [f"{k}={json.dumps(own.get(k), default=str)}" for k in keys[:most]]
    return f" ({', '.join(shown)}{', ...' if len(keys) > most else ''})"


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"team": [{"name": "ppo", "params": {"lr": 1}}]}`` -> ``{"team.ppo.params.lr": 1}``:
    the names ``--set`` takes."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        elif (
            value
            and isinstance(value, list)
            and all(isinstance(v, dict) and "name" in v for v in value)
        ):
            for entry in value:
                rest = {k: v for k, v in entry.items() if k != "name"}
                out.update(_flat(rest, f"{name}.{entry['name']}."))
        else:
            out[name] = value
    return out


def _to_threshold(run: Run, threshold: float | None, x: str) -> float:
    """Env steps or seconds (``x``) to the first eval above ``threshold``; infinite for a run
    that did not finish (a failed seed counts as unsolved) or never got above it."""
    if threshold is None or run.status != "finished":
        return math.inf
    return stats.never(stats.first_reach(stats.eval_points(run.evals, x=x), threshold, strict=True))


def summarize(
    runs: Sequence[Run], threshold: float | None = None, resamples: int = stats.RESAMPLES
) -> dict[str, Any]:
    """The statistics of one config's runs, judged against ``threshold``, or where it is None
    against the runs' own ``eval_threshold`` (a :class:`UsageError` where they differ)."""
    counted = [r for r in runs if r.status != NOT_RUN]
    finished = [r for r in counted if r.status == "finished" and r.evals]
    finals = [r.evals[-1]["return"] for r in finished]
    bests = [max(e["return"] for e in r.evals) for r in finished]
    if threshold is None:
        own = {r.threshold for r in counted}
        if len(own) > 1:  # runs without config.toml share a group by name alone
            named = ", ".join("none" if t is None else f"{t:g}" for t in sorted(own, key=str))
            raise UsageError(
                f"runs named {runs[0].name!r} were run with different eval_threshold "
                f"({named}): give --threshold to judge them alike, or --by sweep"
            )
        threshold = next(iter(own), None)
    steps = [_to_threshold(r, threshold, "env_steps") for r in counted]
    wall = [_to_threshold(r, threshold, "wall_s") for r in counted]
    kw: dict[str, Any] = {"resamples": resamples, "confidence": CONFIDENCE}
    by_status: dict[str, int] = {}
    for r in runs:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    out: dict[str, Any] = {
        "seeds": by_status,
        "final_return": stats.seed_intervals(finals, **kw),
        "best_return": stats.seed_intervals(bests, **kw),
        "threshold": threshold,
        "solved": stats.solved(steps) if threshold is not None else None,
        "counted": len(counted),
    }
    if threshold is not None and counted:
        out["steps_to_threshold"] = stats.median_ci(steps, **kw)
        out["wall_s_to_threshold"] = stats.median_ci(wall, **kw)
    returns = {id(r): (final, best) for r, final, best in zip(finished, finals, bests)}
    out["runs"] = [
        {
            "seed": r.seed,
            "status": r.status,
            "error": r.error,
            "run_dir": None if r.path is None else str(r.path),
            "final_return": returns.get(id(r), (None, None))[0],
            "best_return": returns.get(id(r), (None, None))[1],
            "steps_to_threshold": s,
            "wall_s_to_threshold": w,
        }
        for r, s, w in zip(counted, steps, wall)
    ] + [{"seed": r.seed, "status": r.status} for r in runs if r.status == NOT_RUN]
    return out


# -- output --------------------------------------------------------------------------------------


def write_report(
    dirs: Sequence[str | Path],
    output: str | Path | None = None,
    by: str = "config",
    threshold: float | None = None,
    resamples: int = stats.RESAMPLES,
) -> Report:
    """Find, group and summarize the runs under ``dirs``; write report.md, report.json and
    report.png into ``output`` (default: the first of ``dirs``)."""
    if resamples < 1:
        raise UsageError(f"--resamples {resamples}: expected at least 1")
    groups = group_runs(find_runs(dirs), by)
    figures = {}
    for label, found in groups.items():
        groups[label], repeated = latest_per_seed(found)
        figures[label] = summarize(groups[label], threshold, resamples)
        figures[label]["repeated"] = repeated
    out = Path(output if output is not None else dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path, png_path = (out / f for f in REPORT_FILES)
    from wheeler2.plot import plot_bands

    thresholds = {f["threshold"] for f in figures.values()}
    curves = {
        label: [r.evals for r in runs if r.status == "finished" and r.evals]
        for label, runs in groups.items()
    }
    plot_bands(
        curves,
        png_path,
        threshold=next(iter(thresholds)) if len(thresholds) == 1 else None,
        resamples=resamples,
        confidence=CONFIDENCE,
    )
    markdown = (
        render(groups, figures, resamples) + f"\n![eval return over seeds]({png_path.name})\n"
    )
    data = {
        "dirs": [str(d) for d in dirs],
        "method": method(resamples),
        "configs": [
            {"label": label, "name": runs[0].name, "config_hash": runs[0].config, **figures[label]}
            for label, runs in groups.items()
        ],
    }
    md_path.write_text(markdown)
    json_path.write_text(json.dumps(_plain(data), indent=2) + "\n")
    return Report(markdown, data, [md_path, json_path, png_path])


def method(resamples: int) -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "confidence": CONFIDENCE,
        "resamples": resamples,
        "returns": f"rliable {version('rliable')} get_interval_estimates (percentile bootstrap "
        "over finished seeds); median: np.median, IQM: rliable.metrics.aggregate_iqm",
        "to_threshold": "wheeler2.stats.median_ci (percentile bootstrap over seeds); failed, "
        "interrupted and never-solved seeds are infinite (censored), never dropped",
        "curves": "median eval return over finished seeds; band: bootstrap interval of the "
        "median (wheeler2.stats.median_band)",
    }


def _plain(obj: Any) -> Any:
    """JSON-ready: intervals as tables, infinity as "inf", nan as null."""
    if isinstance(obj, stats.Interval):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _seeds_cell(by_status: dict[str, int]) -> str:
    order = ["finished", "failed", "interrupted", NOT_RUN]
    return ", ".join(f"{by_status[k]} {k}" for k in order if by_status.get(k))


def render(groups: dict[str, list[Run]], figures: dict[str, dict[str, Any]], resamples: int) -> str:
    """The report's markdown: two tables over configs, then each config's seeds."""
    ci = f"[{CONFIDENCE:.0%} CI]"
    lines = [
        f"# Seeds report: {len(groups)} config{'s' if len(groups) != 1 else ''}",
        "",
        f"Intervals: {CONFIDENCE:.0%} percentile bootstrap over seeds, {resamples:,} "
        "resamples. Returns: rliable over the finished seeds (median; IQM, the mean of the "
        "middle half). To threshold: the first eval above (>) eval_threshold; a seed that "
        "failed, was interrupted or never got above it counts as never (censored, not "
        "dropped). With 5 seeds or fewer the interval of a median is the range of the seeds, "
        "and it holds the true median less often than it says (about half the time with 2 "
        "seeds, three times in four with 3): read it with the seed count.",
        "",
        "## Returns",
        "",
    ]
    returns = []
    for label, f in figures.items():
        row = [label, _seeds_cell(f["seeds"])]
        for key in ("final_return", "best_return"):
            row += [f[key]["median"].cell(), f[key]["iqm"].cell()]
        returns.append(row)
    lines += _table(
        ["config", "seeds", f"final: median {ci}", f"final: IQM {ci}"]
        + [f"best: median {ci}", f"best: IQM {ci}"],
        returns,
    )
    lines += ["", "## To threshold", ""]
    rows = []
    for label, f in figures.items():
        if f["threshold"] is None:
            rows.append([label, "—", "—", "—", "—"])
            continue
        rows.append(
            [
                label,
                f"> {f['threshold']:g}",
                f"{f['solved']} of {f['counted']}",
                f["steps_to_threshold"].cell(".0f") if f["counted"] else "—",
                f["wall_s_to_threshold"].cell(".1f") if f["counted"] else "—",
            ]
        )
    lines += _table(
        ["config", "threshold", "seeds solved", f"env steps: median {ci}", f"wall s: median {ci}"],
        rows,
    )
    for label, f in figures.items():
        lines += ["", f"### {label}", ""]
        hashes = {r.config for r in groups[label]}
        if hashes != {""}:
            lines += [f"config hash: {', '.join(sorted(hashes - {''}))}", ""]
        if f.get("repeated"):
            found = ", ".join(f"{seed} ({n} runs)" for seed, n in sorted(f["repeated"].items()))
            lines += [f"Seeds run more than once, the run that ended last counted: {found}.", ""]
        seeds = []
        for r in f["runs"]:
            error = str(r.get("error") or "").replace("|", "\\|")  # a cell of the table
            status = r["status"] + (f": {error}" if error else "")
            seeds.append(
                [
                    stats.fmt(r["seed"]),
                    status,
                    stats.fmt(r.get("final_return"), ".2f"),
                    stats.fmt(r.get("best_return"), ".2f"),
                    stats.fmt(r.get("steps_to_threshold"), ".0f"),
                    stats.fmt(r.get("wall_s_to_threshold"), ".1f"),
                    r.get("run_dir") or "—",
                ]
            )
        lines += _table(
            ["seed", "status", "final", "best", "env steps to thr.", "wall s to thr.", "run"],
            seeds,
        )
    return "\n".join(lines) + "\n"


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
