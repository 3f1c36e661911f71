"""PendulumNoVel-v1: recurrent TD3 beside the same TD3 with an MLP and with frame stacking.

    python -m experiments.pendulum_novel [--seeds 0 1 2 3 4] [--arms gru mlp stack] [--jobs 2]
                                         [--deadline-utc 16:05] [--report-only]

Issue 15's target: a recurrent off-policy learner reaches a mean eval >= -200 within 50,000 env
steps on >= 4 of 5 seeds (SB3 zoo's RecurrentPPO: -217.9 +- 140 at 100k). Three arms, all TD3
from cfg/pendulum_novel_td3_gru.toml on the same seeds:

* gru: the file as shipped (GRU cores, sequence replay, 32 sequences x 16 trained steps,
  one update per 5 env steps);
* mlp: ``core = "none"``, feedforward TD3 with the feedforward ratio (batch 256, one update
  per env step): it sees cos θ, sin θ and nothing of the velocity (expected to fail);
* stack: the mlp arm with ``[env] stack = 3`` (the last three observations side by side).

Runs go seed by seed, the arms of a seed interleaved (``--jobs`` at a time), so that a run cut
short by the deadline leaves whole seeds behind it. Each finished run appends one line to
experiments/results/pendulum_novel_runs.jsonl; the table (experiments/results/
pendulum_novel.md) is rebuilt from that file after every run and with ``--report-only``. Notes
on the result: experiments/results/notes/pendulum_novel.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from experiments.lib import CFG as CFG_DIR
from experiments.lib import RESULTS, ROOT, report, runs

CFG = CFG_DIR / "pendulum_novel_td3_gru.toml"
RUNS_JSONL = RESULTS / "pendulum_novel_runs.jsonl"
REPORT_MD = RESULTS / "pendulum_novel.md"
THRESHOLD = -200.0
BUDGET = 50_000

MLP = [
    'team.target.params.core="none"',
    "buffer.batch_size=256",
    "buffer.updates_per_insert=1.0",
]
ARMS = {
    "gru": [],
    "mlp": MLP,
    "stack": [*MLP, "env.stack=3"],
}


def command(arm: str, seed: int, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "wheeler2", "run", str(CFG), "--seed", str(seed)]
    cmd += ["--out", str(out)]
    for o in ARMS[arm]:
        cmd += ["--set", o]
    return cmd


def record(arm: str, seed: int, out: Path, wall: float, rc: int) -> dict:
    runs = sorted(out.glob("*/summary.json"))
    row: dict = {"arm": arm, "seed": seed, "rc": rc, "wall_s": round(wall, 1)}
    if not runs:
        row["error"] = "no summary.json"
        return row
    s = json.loads(runs[-1].read_text())
    evals = s.get("eval", [])
    row.update(
        env_steps=s.get("env_steps"),
        steps_to_threshold=s.get("steps_to_threshold"),
        best_eval_return=s.get("best_eval_return"),
        final_eval_return=s.get("final_eval_return"),
        interrupted=s.get("interrupted", False),
        evals=[(e["env_steps"], round(e["return"], 1)) for e in evals],
        run_dir=str(runs[-1].parent),
    )
    return row


def render(rows: list[dict], note: str = "") -> str:
    lines = [
        "# PendulumNoVel-v1: recurrent TD3 vs the same TD3 with an MLP and with frame stacking",
        "",
        "`python -m experiments.pendulum_novel` (cfg/pendulum_novel_td3_gru.toml; the mlp and "
        'stack arms override it with `core = "none"`, batch 256, one update per env step, and '
        "`[env] stack = 3` for stack). Target (issue 15): mean of 10 eval episodes >= -200 "
        f"within {BUDGET:,} env steps on >= 4 of 5 seeds. Evals every 2,500 env steps.",
        "",
        "| arm | seeds run | reached -200 within 50k | env steps to -200 (median of those that "
        "reached) | best eval (median) | final eval (median) | wall s per run (median) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for arm in ARMS:
        mine = sorted(
            (r for r in rows if r["arm"] == arm and "error" not in r), key=lambda r: r["seed"]
        )
        if not mine:
            continue
        hits = [r["steps_to_threshold"] for r in mine if r.get("steps_to_threshold") is not None]
        hits = [h for h in hits if h <= BUDGET]
        med_hit = f"{np.median(hits):,.0f}" if hits else "-"
        best = np.median([r["best_eval_return"] for r in mine])
        final = np.median([r["final_eval_return"] for r in mine])
        wall = np.median([r["wall_s"] for r in mine])
        seeds = ", ".join(str(r["seed"]) for r in mine)
        lines.append(
            f"| {arm} | {len(mine)} ({seeds}) | {len(hits)}/{len(mine)} | {med_hit} | "
            f"{best:.1f} | {final:.1f} | {wall:.0f} |"
        )
    lines += ["", "Per run (eval return at each eval, env steps: return):", ""]
    order = list(ARMS)
    for r in sorted(rows, key=lambda r: (order.index(r["arm"]), r["seed"])):
        if "error" in r:
            lines.append(f"* {r['arm']} seed {r['seed']}: {r['error']} (rc {r['rc']})")
            continue
        curve = ", ".join(f"{s / 1000:g}k: {v:.0f}" for s, v in r["evals"])
        cut = " (cut short)" if r.get("interrupted") else ""
        lines.append(
            f"* {r['arm']} seed {r['seed']}{cut}: to -200 at {r['steps_to_threshold']}, best "
            f"{r['best_eval_return']:.1f}, final {r['final_eval_return']:.1f}, "
            f"{r['wall_s']:.0f} s; {curve}"
        )
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_report(note: str, argv: list[str] | None) -> None:
    report.write(
        REPORT_MD,
        render(runs.load(RUNS_JSONL), note),
        render=render,
        params={"note": note},
        runs_file=RUNS_JSONL,
        command=report.command_line(argv),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--deadline-utc", default="", help="HH:MM: start no run after it")
    ap.add_argument("--out", default="/tmp/pendulum_novel_runs")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(args.note, argv)
        print(REPORT_MD.read_text())
        return
    queue = [(arm, seed) for seed in args.seeds for arm in args.arms]
    env = dict(os.environ, WHEELER2_TORCH_THREADS="1", PYTHONUNBUFFERED="1")
    running: list[tuple[str, int, Path, float, subprocess.Popen]] = []

    def past_deadline() -> bool:
        if not args.deadline_utc:
            return False
        hh, mm = map(int, args.deadline_utc.split(":"))
        now = time.gmtime()
        return now.tm_hour * 60 + now.tm_min >= hh * 60 + mm

    while queue or running:
        while queue and len(running) < args.jobs and not past_deadline():
            arm, seed = queue.pop(0)
            out = Path(args.out) / f"{arm}-s{seed}-{int(time.time())}"
            out.mkdir(parents=True, exist_ok=True)
            log = (out / "log.txt").open("w")
            proc = subprocess.Popen(
                command(arm, seed, out), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            running.append((arm, seed, out, time.time(), proc))
            print(f"started {arm} seed {seed} -> {out}", flush=True)
        if past_deadline() and queue:
            print(f"deadline: {len(queue)} runs not started", flush=True)
            queue.clear()
        time.sleep(2)
        for item in list(running):
            arm, seed, out, t0, proc = item
            if proc.poll() is None:
                continue
            running.remove(item)
            row = record(arm, seed, out, time.time() - t0, proc.returncode)
            runs.append(RUNS_JSONL, row)
            print(json.dumps({k: v for k, v in row.items() if k != "evals"}), flush=True)
            write_report(args.note, argv)


if __name__ == "__main__":
    main()
