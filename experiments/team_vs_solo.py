"""The team (1 DDPG learner + 2 PPO explorers, local backend) against DDPG alone, same env steps.

    python experiments/team_vs_solo.py                       # Pendulum and MountainCar, seeds 0-2
    python experiments/team_vs_solo.py --envs pendulum --seeds 0 --set buffer.updates_per_insert=1.0

"Solo" is the team file's own learner table alone (same hyperparameters, same buffer), run with
the serial backend, the fastest home for a lone learner. For each env the script writes a table
(final eval return, wall-clock, and the wall-clock the team needed to reach the solo learner's
final return, as a ratio of the solo run's) and a plot of eval return against env steps and
against wall-clock, into ``experiments/results/``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
ENVS = {
    "pendulum": ROOT / "cfg" / "pendulum_team.toml",
    "mountaincar": ROOT / "cfg" / "mountaincar_team.toml",
}


def configs(team_file: Path, seed: int, out: Path, overrides: list[str]) -> dict[str, Any]:
    from wheeler2.config import load, validate

    sets = ["experiment.progress=false", *overrides]
    team = load(team_file, overrides=sets, seed=seed, out=str(out))
    raw = copy.deepcopy(team.raw)
    raw["team"] = [t for t in raw["team"] if t.get("role") == "learner"]
    raw["experiment"]["backend"] = "serial"
    raw["experiment"]["name"] = f"{raw['experiment'].get('name', team_file.stem)}-solo"
    raw["experiment"]["seed"] = seed
    raw["experiment"]["out"] = str(out)
    return {"team": team, "solo": validate(raw, team_file)}


def run(config: Any) -> dict[str, Any]:
    from wheeler2.runtime import run_experiment

    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["run_dir"] = str(run_dir)
    return summary


def time_to_reach(evals: list[dict[str, Any]], target: float) -> float | None:
    hit = next((e for e in evals if e["return"] >= target), None)
    return None if hit is None else float(hit["wall_s"])


def table(env: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"### {env}",
        "",
        "| seed | solo final | team final | solo wall s | team wall s "
        "| team s to solo final | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for r in rows:
        solo, team = r["solo"], r["team"]
        reach = time_to_reach(team["eval"], solo["final_eval_return"])
        ratio = None if reach is None else reach / solo["wall_s"]
        if ratio is not None:
            ratios.append(ratio)
        lines.append(
            f"| {r['seed']} | {solo['final_eval_return']:.1f} | {team['final_eval_return']:.1f} "
            f"| {solo['wall_s']:.0f} | {team['wall_s']:.0f} | "
            f"{'never' if reach is None else f'{reach:.0f}'} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} |"
        )
    solo_f = [r["solo"]["final_eval_return"] for r in rows]
    team_f = [r["team"]["final_eval_return"] for r in rows]

    def ms(xs: list[float]) -> str:
        return f"{statistics.mean(xs):.1f} ± {statistics.pstdev(xs):.1f}"

    reached = "—"
    if ratios:
        reached = f"{statistics.mean(ratios):.2f} ({len(ratios)}/{len(rows)} reached)"
    lines.append(f"| mean ± std | {ms(solo_f)} | {ms(team_f)} | | | | {reached} |")
    return "\n".join(lines)


def plot(env: str, rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for kind, color in (("solo", "tab:blue"), ("team", "tab:orange")):
        for i, r in enumerate(rows):
            ev = r[kind]["eval"]
            label = kind if i == 0 else None
            axes[0].plot(
                [e["env_steps"] for e in ev],
                [e["return"] for e in ev],
                color=color,
                alpha=0.8,
                label=label,
            )
            axes[1].plot(
                [e["wall_s"] for e in ev],
                [e["return"] for e in ev],
                color=color,
                alpha=0.8,
                label=label,
            )
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("wall-clock (s)")
    for ax in axes:
        ax.set_ylabel("eval return (mean of 10)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{env}: team (DDPG learner + 2 PPO explorers) vs DDPG alone, one line per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=sorted(ENVS, reverse=True))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="override for both team and solo, e.g. buffer.updates_per_insert=1.0",
    )
    ap.add_argument("--out", default=str(ROOT / "runs" / "team_vs_solo"))
    ap.add_argument("--tag", default="", help="suffix for the result files")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    texts = []
    for env in args.envs:
        rows = []
        for seed in args.seeds:
            cfgs = configs(ENVS[env], seed, Path(args.out), args.overrides)
            row = {"seed": seed, "solo": run(cfgs["solo"]), "team": run(cfgs["team"])}
            print(
                f"{env} seed {seed}: solo {row['solo']['final_eval_return']:.1f} in "
                f"{row['solo']['wall_s']:.0f} s, team {row['team']['final_eval_return']:.1f} in "
                f"{row['team']['wall_s']:.0f} s",
                flush=True,
            )
            rows.append(row)
        texts.append(table(env, rows))
        plot(env, rows, RESULTS / f"team_vs_solo_{env}{args.tag}.png")
        (RESULTS / f"team_vs_solo_{env}{args.tag}.json").write_text(json.dumps(rows, indent=1))
    text = "\n\n".join(texts)
    if args.overrides:
        text = "overrides: " + ", ".join(args.overrides) + "\n\n" + text
    print(text)
    (RESULTS / f"team_vs_solo{args.tag}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
