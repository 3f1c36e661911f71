"""Backend ``ray`` against backend ``local``: same team, same seeds, side by side on this machine.

For each seed the team runs once under each backend (interleaved, so both see the same machine
load), each as its own ``wheeler2 run`` process. The table gives the final and best eval
returns (same learning, within seed noise?) and two clocks: the run's own ``wall_s`` (from the
first member's start to the summary) and the whole command's wall-clock, Ray's start and
shutdown included.

    python -m experiments.ray_vs_local [--seeds 0 1 2] [--config cfg/pendulum_team.toml]
    python -m experiments.ray_vs_local --table --runs experiments/results/ray_vs_local_runs.jsonl

Writes ``experiments/results/ray_vs_local.md`` and the sweep's rows, one per run as it ends, to
``--runs`` (default ``results/ray_vs_local_<date>-<time>_runs.jsonl``, a file per sweep), from
which ``--table`` rebuilds the table. Notes on the results: ``results/notes/ray_vs_local.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs

TEAM_CFG = CFG / "pendulum_team.toml"

# Used while cfg/pendulum_team.toml does not exist: a DDPG learner (the default.toml settings)
# and two DDPG explorers that act with the learner's synced actor and more noise.
FALLBACK = """
[experiment]
name = "pendulum-team-fallback"
seed = 0
total_steps = 12_000
eval_every = 1_000
eval_episodes = 10
eval_threshold = -200.0
backend = "local"
out = "runs"
progress = false

[env]
id = "Pendulum-v1"
num_envs = 1

[buffer]
capacity = 200_000
batch_size = 256
prioritized = false
updates_per_insert = 1.0

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
gamma = 0.98
learning_starts = 2_000
noise = "gaussian"
noise_std = 0.1
hidden = [400, 300]
lr_actor = 1e-3
lr_critic = 1e-3
tau = 0.005

[[team]]
name = "explorer"
algo = "ddpg"
role = "explorer"
count = 2
sync = { every = 500, keep = [], alpha = 1.0 }
[team.params]
gamma = 0.98
learning_starts = 2_000
noise = "gaussian"
noise_std = 0.2
hidden = [400, 300]
"""


def run_once(cfg: Path, backend: str, seed: int, out: Path) -> dict:
    cmd = [
        sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out), "--seed", str(seed),
        "--set", f"experiment.backend={backend}", "--set", "experiment.progress=false",
    ]  # fmt: skip
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    command_s = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{backend} seed {seed} failed:\n{res.stdout}\n{res.stderr}")
    run_dir = next(
        line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("results: ")
    )
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    return {
        "backend": backend,
        "seed": seed,
        "final": summary["final_eval_return"],
        "best": summary["best_eval_return"],
        "steps_to_threshold": summary.get("steps_to_threshold"),
        "wall_s": summary["wall_s"],
        "command_s": command_s,
        "env_steps": summary["env_steps"],
        "updates": summary["members"].get("target", {}).get("updates"),
    }


def _mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=RESULTS / "ray_vs_local.md")
    parser.add_argument(
        "--runs", type=Path, default=None, help="the rows (default: a new dated file in results/)"
    )
    parser.add_argument(
        "--table", action="store_true", help="run nothing: tabulate the rows of --runs"
    )
    args = parser.parse_args(argv)
    if args.table:
        if args.runs is None:
            parser.error("--table needs --runs FILE")
        write_table(args.runs, TEAM_CFG, None, args.output, argv)
        return
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    args.runs = args.runs or RESULTS / f"ray_vs_local_{stamp}_runs.jsonl"

    tmp = Path(tempfile.mkdtemp(prefix="w2-ray-vs-local-"))
    cfg = args.config or (TEAM_CFG if TEAM_CFG.exists() else None)
    if cfg is None:
        cfg = tmp / "pendulum_team_fallback.toml"
        cfg.write_text(FALLBACK)
    for seed in args.seeds:
        for backend in ("local", "ray"):
            row = run_once(cfg, backend, seed, tmp / "runs")
            runs.append(args.runs, row)
            print(json.dumps(row), flush=True)
    write_table(args.runs, cfg, tmp, args.output, argv)


def write_table(
    runs_file: Path, cfg: Path, tmp: Path | None, out: Path, argv: list[str] | None
) -> None:
    fallback = cfg.parent == tmp
    params = {
        "config": cfg.name if fallback else str(cfg.resolve().relative_to(ROOT)),
        "fallback": fallback,
    }
    text = render(runs.load(runs_file), **params)
    report.write(
        out, text, render=render, params=params, runs_file=runs_file,
        command=report.command_line(argv),
    )  # fmt: skip
    print(text)


def render(rows: list[dict[str, Any]], config: str, fallback: bool = False) -> str:
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "# Backend ray vs local",
        "",
        f"Config: `{config}`"
        + (" (the fallback team in experiments/ray_vs_local.py)" if fallback else "")
        + f"; seeds {seeds}; this machine "
        "(2 cores, CPU), runs one at a time, backends interleaved per seed.",
        "`wall_s`: the run's own clock (summary.json); `command s`: the whole `wheeler2 run` "
        "process, Ray's start and shutdown included.",
        "",
        "| backend | seed | final eval return | best eval return | steps to -200 | updates "
        "| wall_s | command s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['seed']} | {r['final']:.1f} | {r['best']:.1f} | "
            f"{r['steps_to_threshold'] or '-'} | {r['updates'] or 0:.0f} | {r['wall_s']:.1f} | "
            f"{r['command_s']:.1f} |"
        )
    lines += [
        "",
        "| backend | final eval return | best eval return | wall_s | command s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    agg = {}
    for backend in ("local", "ray"):
        sel = [r for r in rows if r["backend"] == backend]
        agg[backend] = {k: statistics.mean(r[k] for r in sel) for k in ("wall_s", "command_s")}
        lines.append(
            f"| {backend} | {_mean_sd([r['final'] for r in sel])} | "
            f"{_mean_sd([r['best'] for r in sel])} | {_mean_sd([r['wall_s'] for r in sel])} | "
            f"{_mean_sd([r['command_s'] for r in sel])} |"
        )
    lines += [
        "",
        f"Wall-clock ratio ray / local: run {agg['ray']['wall_s'] / agg['local']['wall_s']:.2f}x, "
        f"whole command {agg['ray']['command_s'] / agg['local']['command_s']:.2f}x.",
    ]
    by = {(r["backend"], r["seed"]): r for r in rows}
    paired = [s for s in seeds if ("local", s) in by and ("ray", s) in by]
    if paired:
        per = {
            k: statistics.median(by[("local", s)][k] / by[("ray", s)][k] for s in paired)
            for k in ("wall_s", "command_s")
        }
        lines.append(
            f"Median over seeds of local / ray (the same seed's pair): run {per['wall_s']:.2f}x, "
            f"whole command {per['command_s']:.2f}x ({len(paired)} seeds)."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
