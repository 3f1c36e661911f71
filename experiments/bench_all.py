"""Every speed benchmark in one go, and one table of today's ratios against their targets.

    python -m experiments.bench_all            # about 10 minutes on 2 cores
    python -m experiments.bench_all --quick    # fewer rounds: a smoke run, not figures to quote
    python -m experiments.bench_all --table    # only rewrite performance.md from performance/

Runs, one after another (never side by side: each is a timing), ``bench_replay`` (central
replay vs cpprb, with 8 producers inserting, HER vs a plain sample), ``bench_learner`` (DDPG
gradient steps/s vs SB3's ``train()``), ``bench_scaling`` (explorers' env steps/s with 1-8
explorer processes, the learner's updates/s meanwhile) and ``bench_collect`` (a member's
collection loop vs gymnasium's). Each writes its full table (and its raw figures) to
``experiments/results/performance/<name>.md``; this script then reads one headline cell per
figure from those tables into ``performance_runs.json`` and rewrites
``experiments/results/performance.md`` from it: machine, load, and one row per headline figure,
with the target, whether it is met and when its table was measured.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments.lib import RESULTS, ROOT, report, runs

OUT_DIR = RESULTS / "performance"

# name -> (module, arguments, quick arguments)
BENCHES = {
    "bench_replay": (
        "experiments.bench_replay",
        ["--rounds", "7"],
        ["--rounds", "2", "--seconds", "0.3"],
    ),
    "bench_learner": (
        "experiments.bench_learner",
        ["--rounds", "5"],
        ["--rounds", "1", "--steps", "40"],
    ),
    "bench_scaling": ("experiments.bench_scaling", ["--seconds", "10"], ["--seconds", "2"]),
    "bench_collect": (
        "experiments.bench_collect",
        ["--rounds", "9"],
        ["--rounds", "2", "--steps", "2000"],
    ),
}

# (what, bench, row pattern, column of the ratio, target as text, minimum ratio)
# fmt: off
HEADLINES = [
    ("prioritized sample + update, 1M, batch 256, vs cpprb", "bench_replay",
     r"wheeler2 Replay, vs cpprb", 3, ">= 2.0x", 2.0),
    ("learner sampling with 2 producer processes, vs cpprb's", "bench_replay",
     r"wheeler2 Replay \(inserts", 3, ">= 5.0x", 5.0),
    ("learner sample + update with 8 producer processes inserting vs paused", "bench_replay",
     r"8 inserting", 3, ">= 0.8x", 0.8),
    ("HER future k=4 sample vs a plain prioritized sample", "bench_replay",
     r"wheeler2 HER future k=4 \|", 3, ">= 0.8x", 0.8),
    ("DDPG gradient steps/s vs SB3 train(), HalfCheetah shapes", "bench_learner",
     r"halfcheetah .* wheeler2 prioritized", 4, ">= 1.5x", 1.5),
    ("DDPG gradient steps/s vs SB3 train(), Pendulum shapes", "bench_learner",
     r"pendulum .* wheeler2 prioritized", 4, ">= 1.5x", 1.5),
    ("the DDPG step's matrix products alone vs SB3 train(), HalfCheetah shapes", "bench_learner",
     r"halfcheetah .* matrix products", 4, "the ceiling of the row above", None),
    ("8 explorers' env steps/s vs 1, 2 ms env step", "bench_scaling",
     r"2 ms step \| 8 \|", 3, ">= 6.0x", 6.0),
    ("learner updates/s with 8 explorers vs alone, 2 ms env step", "bench_scaling",
     r"2 ms step \| 8 \|", 5, ">= 0.8x", 0.8),
    ("8 explorers' env steps/s vs 1, 2 ms env step, explorers at nice 10", "bench_scaling",
     r"2 ms step, explorers at nice 10 \| 8 \|", 3, ">= 6.0x", 6.0),
    ("learner updates/s with 8 explorers at nice 10 vs alone, 2 ms env step", "bench_scaling",
     r"2 ms step, explorers at nice 10 \| 8 \|", 5, ">= 0.8x", 0.8),
    ("8 explorers' env steps/s vs 1, Pendulum (CPU bound)", "bench_scaling",
     r"Pendulum-v1 \| 8 \|", 3, "what 2 cores allow", None),
    ("member loop with a DDPG explorer vs gymnasium's vector loop", "bench_collect",
     r"Member, DDPG explorer", 3, ">= 0.5x", 0.5),
    ("the same member on [env] vector = \"envpool\" vs gymnasium's vector loop", "bench_collect",
     r"Member, DDPG explorer, envpool", 3, "an option, no target", None),
]
# fmt: on


def cell(text: str, pattern: str, column: int) -> str | None:
    """The ``column``-th cell (0-based, after the leading pipe) of the first row matching."""
    for line in text.splitlines():
        if line.startswith("|") and re.search(pattern, line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            return cells[column] if column < len(cells) else None
    return None


def ratio_of(value: str | None) -> float | None:
    m = re.match(r"([0-9.]+)x", value or "")
    return float(m.group(1)) if m else None


def measured(path: Path, before: dict[str, str]) -> str:
    """When a benchmark's table was measured: its header's date; for a table written before the
    header existed, the date the last performance_runs.json gave it (else its file time)."""
    try:
        return report.read_meta(path)["date"].removesuffix(" UTC")
    except report.NotGenerated:
        if path.stem in before:
            return before[path.stem]
        stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
        return f"{stamp:%Y-%m-%d %H:%M}"


def headline_rows(before: dict[str, str]) -> list[dict[str, Any]]:
    """Each headline's cell, read from its benchmark's table in performance/."""
    rows = []
    for what, bench, pattern, column, target, minimum in HEADLINES:
        path = OUT_DIR / f"{bench}.md"
        rows.append(
            {
                "what": what,
                "bench": bench,
                "value": cell(path.read_text(), pattern, column) if path.is_file() else None,
                "target": target,
                "minimum": minimum,
                "measured": measured(path, before) if path.is_file() else "",
            }
        )
    return rows


def render(stored: dict[str, Any]) -> str:
    c = stored["conditions"]
    lines = [
        "# Performance: today's ratios against their targets",
        "",
        f"{c['machine']}, {c['cores']} cores, load average {c['load_start']:.1f} at the start "
        f"and {c['load_end']:.1f} at the end, {c['minutes']:.0f} min. Every figure is a ratio "
        "of two arms measured side by side in one run; full tables in `performance/`; "
        "`measured` is when the table's benchmark last ran.",
        "",
        "| figure | ratio | target | met | table | measured |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in stored["rows"]:
        ratio = ratio_of(r["value"])
        minimum = r["minimum"]
        met = "" if minimum is None or ratio is None else ("yes" if ratio >= minimum else "**no**")
        lines.append(
            f"| {r['what']} | {r['value'] or 'not run'} | {r['target']} | {met} "
            f"| `performance/{r['bench']}.md` | {r['measured']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHES), default=sorted(BENCHES))
    ap.add_argument("--table", action="store_true", help="run nothing: reread performance/")
    args = ap.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    for name in [] if args.table else args.only:
        module, full, quick = BENCHES[name]
        out = OUT_DIR / f"{name}.md"
        cmd = [sys.executable, "-m", module, *(quick if args.quick else full)]
        print(f"== python -m {' '.join(cmd[2:])}", flush=True)
        subprocess.run([*cmd, "--out", str(out)], check=True, cwd=ROOT)
    log = RESULTS / "performance_runs.json"
    previous = runs.load(log) if log.is_file() else None
    before = {r["bench"]: r["measured"] for r in previous["rows"]} if previous else {}
    conditions = {
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
        "minutes": (time.perf_counter() - started) / 60,
    }
    if args.table and previous:  # nothing ran: the conditions are the last run's
        conditions = previous["conditions"]
    stored = {"conditions": conditions, "rows": headline_rows(before)}
    runs.save(log, stored)
    text = render(stored)
    report.write(
        RESULTS / "performance.md",
        text,
        render=render,
        runs_file=log,
        command=report.command_line(argv),
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
