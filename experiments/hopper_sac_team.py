"""Issue 14's "do no harm" check: the SAC learner with two PPO explorers on Hopper-v5
(``cfg/hopper_sac_team.toml``) beside solo SAC (``cfg/hopper_sac.toml``) at the same 100k env
steps in all, same seeds, same eval (10 deterministic episodes every 10k, the learner's actor).

    python -m experiments.hopper_sac_team --seeds 0 1 2            # run the teams, then tabulate
    python -m experiments.hopper_sac_team --table                  # tabulate the jsonl only

The solo arm is not rerun here: its finals are the wheeler2 side of ``compare_sb3.py sac-hopper``
(``results/compare_sb3_sac-hopper_runs.jsonl``, the same config, seeds and eval), so the team
runs alone on the machine. Each team run is its own ``wheeler2 run`` process; its summary is
appended to ``results/hopper_sac_team_runs.jsonl`` and the table, rebuilt from both runs files,
is written to ``results/hopper_sac_team_h256.md``. Notes: ``results/notes/hopper_sac_team*.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs

TEAM_CFG = CFG / "hopper_sac_team.toml"
SOLO_RUNS = RESULTS / "compare_sb3_sac-hopper_runs.jsonl"
RUNS = RESULTS / "hopper_sac_team_runs.jsonl"
TABLE = RESULTS / "hopper_sac_team_h256.md"


def run_team(seed: int, out: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "wheeler2",
            "run",
            str(TEAM_CFG),
            "--seed",
            str(seed),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
    )
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").exists()]
    return summary_row(seed, run_dir)


def summary_row(seed: int, run_dir: Path) -> dict:
    s = json.loads((run_dir / "summary.json").read_text())
    members = s.get("members", {})
    return {
        "seed": seed,
        "final": s["final_eval_return"],
        "best": s["best_eval_return"],
        "last_eval_steps": s["eval"][-1]["env_steps"] if s["eval"] else None,
        "interrupted": s["interrupted"],
        "updates": members.get("target", {}).get("updates"),
        "learner_steps": members.get("target", {}).get("env_steps"),
        "wall_s": s["wall_s"],
    }


def render(stored: dict[str, list[dict[str, Any]]]) -> str:
    """The table over the team's stored runs and solo SAC's (wheeler2's side of compare_sb3)."""
    team = runs.latest(stored["team"], lambda r: r["seed"])
    solo = runs.latest((r for r in stored["solo"] if r["side"] == "wheeler2"), lambda r: r["seed"])
    seeds = sorted(set(team) & set(solo))
    if not seeds:
        raise SystemExit(f"no seed in both {RUNS.name} and {SOLO_RUNS.name}")
    t = [team[s]["final"] for s in seeds]
    o = [solo[s]["final_return"] for s in seeds]
    lines = [
        "# SAC learner + 2 PPO explorers on Hopper-v5 beside solo SAC, 256-256 nets (issue 14)",
        "",
        "100,000 env steps in all members together; final eval = mean of 10 deterministic "
        "episodes of the learner's actor at 100k; solo SAC's finals from "
        f"`{SOLO_RUNS.name}` (same config values, seeds and eval).",
        "",
        "| seed | solo SAC final | team final | team / solo | team best eval | team learner "
        "updates | team learner's own env steps |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s, ti, oi in zip(seeds, t, o):
        r = team[s]
        flag = " (interrupted)" if r["interrupted"] else ""
        lines.append(
            f"| {s} | {oi:.1f} | {ti:.1f}{flag} | {ti / oi:.2f}x | {r['best']:.1f} | "
            f"{r['updates'] or 0:,.0f} | {r['learner_steps'] or 0:,.0f} |"
        )
    mt, mo = statistics.median(t), statistics.median(o)
    lines += [
        f"| median | {mo:.1f} | {mt:.1f} | {mt / mo:.2f}x | | | |",
        "",
        f"Do no harm (team median within 5% of solo or better): "
        f"{'met' if mt >= 0.95 * mo else 'not met'} ({mt / mo:.2f}x).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the jsonl")
    ap.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        default=[],
        metavar="RUN_DIR",
        help="append finished run directories (seed read from their config) instead of running",
    )
    args = ap.parse_args(argv)
    rows = []
    if args.from_runs:
        import tomllib

        for d in args.from_runs:
            seed = tomllib.loads((d / "config.toml").read_text())["experiment"]["seed"]
            rows.append(summary_row(int(seed), d))
    elif not args.table:
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(run_team(seed, Path(tmp)))
    for r in rows:
        runs.append(RUNS, r)
    files = {"team": RUNS, "solo": SOLO_RUNS}
    text = render({k: runs.load(v) for k, v in files.items()})
    report.write(TABLE, text, render=render, runs_file=files, command=report.command_line(argv))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
