"""How long a team takes to start: members forked from the preloaded fork server (the default)
against members started with ``spawn`` (each importing torch afresh, as before issue 39).

Each round runs ``wheeler2 run cfg/default.toml --set experiment.total_steps=300`` once per arm,
the arms interleaved (their order alternating by round) so that machine load hits both alike,
each as a fresh command. Two figures per run, both from the command's start:

* ``first step``: the team's first env step, ``summary.json`` ``startup_s`` (the coordinator
  opens the start line once every member has said ``Started``; the process's age then);
* ``total``: the command's wall-clock to its exit, measured here around the subprocess.

    python -m experiments.startup [--rounds 10]
    python -m experiments.startup --table --runs experiments/results/startup_runs.jsonl

Targets (issue 39): first step <= 3 s, total <= 8 s, on this 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs
from experiments.lib.stats import median_ci, ratio_ci

ARMS = ("forkserver", "spawn")
TARGETS = {"first_step_s": 3.0, "total_s": 8.0}


def one_run(arm: str, out: Path) -> dict[str, Any]:
    env = dict(os.environ, WHEELER2_START_METHOD=arm)
    cmd = [
        str(Path(sys.executable).with_name("wheeler2")),
        "run",
        str(CFG / "default.toml"),
        "--set",
        "experiment.total_steps=300",
        "--set",
        "experiment.progress=false",
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{arm}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
    run_dir = next(p for p in out.iterdir() if (p / "summary.json").exists())
    summary = runs.load(run_dir / "summary.json")
    return {"arm": arm, "first_step_s": summary["startup_s"], "total_s": round(total, 3)}


def render(records: list[dict[str, Any]]) -> str:
    by_arm = {a: [r for r in records if r["arm"] == a] for a in ARMS}
    rounds = min(len(v) for v in by_arm.values())
    lines = [
        f"{rounds} rounds, each one 300-step run of `cfg/default.toml` (3 members, local) per "
        "arm, interleaved. Medians with 95% bootstrap intervals; ratio = spawn / forkserver "
        "(paired by round).",
        "",
    ]
    rows = []
    for key, label in (
        ("first_step_s", "command to first env step, s"),
        ("total_s", "whole command, s"),
    ):
        fork = [r[key] for r in by_arm["forkserver"][:rounds]]
        spawn = [r[key] for r in by_arm["spawn"][:rounds]]
        met = sum(v <= TARGETS[key] for v in fork)
        rows.append(
            [
                label,
                median_ci(fork).cell(),
                median_ci(spawn).cell(),
                ratio_ci(spawn, fork).cell(),
                f"<= {TARGETS[key]:g}: {met}/{rounds} runs",
            ]
        )
    lines += report.table(
        ["figure", "forkserver", "spawn", "spawn / forkserver", "target met (forkserver)"], rows
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=Path, default=RESULTS / "startup_runs.jsonl")
    parser.add_argument("--table", action="store_true", help="only rebuild the table from --runs")
    args = parser.parse_args(argv)
    if not args.table:
        args.runs.unlink(missing_ok=True)
        for i in range(args.rounds):
            order = ARMS if i % 2 == 0 else ARMS[::-1]
            for arm in order:
                with tempfile.TemporaryDirectory() as tmp:
                    record = one_run(arm, Path(tmp)) | {"round": i}
                runs.append(args.runs, record)
                print(record, flush=True)
    records = runs.load(args.runs)
    path = report.write(RESULTS / "startup.md", render(records), render=render, runs_file=args.runs)
    print(path.read_text())


if __name__ == "__main__":
    main()
