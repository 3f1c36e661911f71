"""Every speed benchmark in one go, and one table of today's ratios against their targets.

    python experiments/bench_all.py            # about 10 minutes on 2 cores
    python experiments/bench_all.py --quick    # fewer rounds: a smoke run, not figures to quote

Runs, one after another (never side by side: each is a timing), ``bench_replay.py`` (central
replay vs cpprb, with 8 producers inserting, HER vs a plain sample), ``bench_learner.py`` (DDPG
gradient steps/s vs SB3's ``train()``), ``bench_scaling.py`` (explorers' env steps/s with 1-8
explorer processes, the learner's updates/s meanwhile) and ``bench_collect.py`` (a member's
collection loop vs gymnasium's). Each writes its full table to
``experiments/results/performance/<name>.md``; this script then rewrites
``experiments/results/performance.md``: machine, date, load, and one row per headline figure,
with the target and whether it is met. The hand-annotated result files beside them
(``bench_replay.md`` and so on) are left alone.
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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
OUT_DIR = RESULTS / "performance"

# name -> (script, arguments, quick arguments)
BENCHES = {
    "bench_replay": ("bench_replay.py", ["--rounds", "7"], ["--rounds", "2", "--seconds", "0.3"]),
    "bench_learner": ("bench_learner.py", ["--rounds", "5"], ["--rounds", "1", "--steps", "40"]),
    "bench_scaling": ("bench_scaling.py", ["--seconds", "10"], ["--seconds", "2"]),
    "bench_collect": ("bench_collect.py", ["--rounds", "9"], ["--rounds", "2", "--steps", "2000"]),
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHES), default=sorted(BENCHES))
    args = ap.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    for name in args.only:
        script, full, quick = BENCHES[name]
        out = OUT_DIR / f"{name}.md"
        cmd = [sys.executable, str(ROOT / "experiments" / script), *(quick if args.quick else full)]
        print(f"== {' '.join(cmd[1:])}", flush=True)
        subprocess.run([*cmd, "--out", str(out)], check=True, cwd=ROOT)
    minutes = (time.perf_counter() - started) / 60
    lines = [
        "# Performance: today's ratios against their targets",
        "",
        f"`python experiments/bench_all.py{' --quick' if args.quick else ''}"
        f"{' --only ' + ' '.join(args.only) if args.only != sorted(BENCHES) else ''}` on "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load0:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end, {minutes:.0f} min. Every figure is a ratio of two "
        "arms measured side by side in one run; full tables in `performance/`; `measured` is "
        "when the table's benchmark last ran.",
        "",
        "| figure | ratio | target | met | table | measured |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for what, bench, pattern, column, target, minimum in HEADLINES:
        path = OUT_DIR / f"{bench}.md"
        value = cell(path.read_text(), pattern, column) if path.is_file() else None
        ratio = ratio_of(value)
        met = "" if minimum is None or ratio is None else ("yes" if ratio >= minimum else "**no**")
        when = (
            f"{datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC):%Y-%m-%d %H:%M}"
            if path.is_file()
            else ""
        )
        lines.append(
            f"| {what} | {value or 'not run'} | {target} | {met} | `performance/{bench}.md` "
            f"| {when} |"
        )
    (RESULTS / "performance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
