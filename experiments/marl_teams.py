"""Multi-agent teams on PettingZoo envs against a random policy.

For each env and each seed, run the shipped config for a fixed budget of agent-steps, and
measure a uniform random policy's mean episode return per agent with the same adapter, the same
reward mode and the same episode count. The figure compared is each learner's deterministic
evaluation (mean episode return per agent row, ``eval_episodes`` env copies) at the end of the
budget. Envs: simple_spread_v3 and multiwalker_v9 (cfg/<env>_team.toml: one PPO member whose
rows are all the agents, sharing its parameters), and simple_tag_v3 (cfg/simple_tag_teams.toml:
two teams of unlike agents, DDPG predators and a PPO prey, each in its own replay table; each
learner plays against random opponents, so each is compared with random agents on its side).

    python -m experiments.marl_teams                      # every env, seeds 0 1 2
    python -m experiments.marl_teams --envs simple_tag --seeds 0 1 2 --backend local

Writes experiments/results/marl_teams.md, marl_teams.png and marl_teams.json (every run's
figures, from which ``python -m experiments regen`` rebuilds the other two; a subset of envs
writes marl_teams_<envs>.*). Notes on the results: results/notes/marl_teams*.md.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config

ENVS = {
    "simple_spread": CFG / "simple_spread_team.toml",
    "multiwalker": CFG / "multiwalker_team.toml",
    "simple_tag": CFG / "simple_tag_teams.toml",
}


def random_return(config: Any, episodes: int, seed: int, learner: str) -> float:
    """Mean per-agent episode return of uniform random actions in [-1, 1], one episode per row,
    in the env ``learner`` plays (its agents), measured the way the engine evaluates it."""
    from wheeler2.runtime.parts import make_env
    from wheeler2.runtime.plan import plan_team

    plan = next(p for p in plan_team(config) if p.name == learner)
    env = make_env(config, episodes, seed, plan)
    rng = np.random.default_rng(seed)
    try:
        env.reset(seed=seed)
        n = env.num_envs
        returns = np.zeros(n)
        finished = np.zeros(n, bool)
        while not finished.all():
            action = rng.uniform(-1.0, 1.0, (n, env.info.act_dim)).astype(np.float32)
            st = env.step(action)
            returns[~finished] += st.reward[~finished]
            finished |= st.terminated | st.truncated
        return float(returns.mean())
    finally:
        env.close()


def run_one(
    path: Path, seed: int, steps: int | None, out: Path, backend: str
) -> dict[str, dict[str, Any]]:
    """One run; a row per learner (table): the shipped teams of unlike agents have two."""
    from wheeler2.config import load

    sets = ["experiment.progress=false", f'experiment.backend="{backend}"']
    if steps:
        sets += [f"experiment.total_steps={steps}", f"experiment.eval_every={max(steps // 5, 1)}"]
    config = load(path, overrides=sets, seed=seed, out=str(out))
    run = run_config(config)
    run_dir, wall_s, summary = run.run_dir, run.call_s, run.summary
    tables = summary.get("tables") or {
        "main": {
            "learner": config.learner.name,
            "final_eval_return": summary["final_eval_return"],
            "best_eval_return": summary["best_eval_return"],
            "eval": summary["eval"],
        }
    }
    episodes = int(config.experiment.eval_episodes)
    return {
        t["learner"]: {
            "seed": seed,
            "wall_s": wall_s,
            "env_steps": summary["env_steps"],
            "final": t["final_eval_return"],
            "best": t["best_eval_return"],
            "evals": t["eval"],
            "random": random_return(config, episodes, 10_000 + seed, t["learner"]),
            "run_dir": str(run_dir),
        }
        for t in tables.values()
    }


mean_sd = stats.mean_sd


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| env | seed | agent-steps | wall s | random policy | team, first eval | team, final eval "
        "| team, best eval | final - random |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env, rows in results.items():
        for r in rows:
            first = r["evals"][0]["return"] if r["evals"] else float("nan")
            lines.append(
                f"| {env} | {r['seed']} | {r['env_steps']:,} | {r['wall_s']:.0f} "
                f"| {r['random']:.1f} | {first:.1f} | {r['final']:.1f} | {r['best']:.1f} "
                f"| {r['final'] - r['random']:+.1f} |"
            )
        lines.append(
            f"| **{env}** | mean ± sd | | | {mean_sd([r['random'] for r in rows])} | "
            f"| {mean_sd([r['final'] for r in rows])} | {mean_sd([r['best'] for r in rows])} "
            f"| {mean_sd([r['final'] - r['random'] for r in rows])} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path, **_: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (env, rows) in zip(axes[0], results.items()):
        for r in rows:
            xs = [e["env_steps"] for e in r["evals"]]
            ys = [e["return"] for e in r["evals"]]
            ax.plot(xs, ys, marker="o", label=f"team, seed {r['seed']}")
        rand = statistics.mean(r["random"] for r in rows)
        ax.axhline(rand, color="k", linestyle="--", label="random policy")
        ax.set_title(f"{env}: mean episode return per agent")
        ax.set_xlabel("agent-steps")
        ax.set_ylabel("eval return")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def render(results: dict[str, list[dict[str, Any]]], backend: str, name: str) -> str:
    seeds = sorted({r["seed"] for rows in results.values() for r in rows})
    return (
        "# Multi-agent teams vs a random policy (PettingZoo)\n\n"
        f"Backend `{backend}`, seeds {seeds}. simple_spread and multiwalker: "
        "one PPO member drives all agents with shared parameters (cfg/simple_spread_team.toml, "
        "cfg/multiwalker_team.toml). simple_tag: two teams of unlike agents, each in its own "
        "replay table (cfg/simple_tag_teams.toml): DDPG predators (`simple_tag/predators`) and "
        "a PPO prey (`simple_tag/prey`); each plays against random opponents. Returns are "
        "mean episode returns per agent row: each learner's deterministic evaluation over "
        "`eval_episodes` env copies, and uniform random actions in [-1, 1] for the same agents, "
        "measured with the same adapter and reward mode.\n\n"
        + table(results)
        + f"\n\n![curves]({name}.png)\n"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="agent-steps (default: the config's)")
    ap.add_argument("--backend", default="serial", choices=["serial", "local"])
    ap.add_argument("--out", default=str(ROOT / "runs" / "marl_teams"))
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--table", action="store_true", help="only rebuild the table from the json")
    args = ap.parse_args(argv)
    res = Path(args.results)
    name = "marl_teams" if set(args.envs) == set(ENVS) else "marl_teams_" + "_".join(args.envs)
    results: dict[str, list[dict[str, Any]]] = runs.load(res / f"{name}.json") if args.table else {}
    for env in [] if args.table else args.envs:
        for seed in args.seeds:
            rows = run_one(ENVS[env], seed, args.steps, Path(args.out), args.backend)
            for learner, r in rows.items():
                key = env if len(rows) == 1 else f"{env}/{learner}"
                print(
                    f"{key} seed {seed}: final {r['final']:.1f} best {r['best']:.1f} "
                    f"random {r['random']:.1f} ({r['wall_s']:.0f} s)",
                    flush=True,
                )
                results.setdefault(key, []).append(r)
    if not args.table:
        runs.save(res / f"{name}.json", results)
    params = {"backend": args.backend, "name": name}
    plot(results, res / f"{name}.png")
    text = render(results, **params)
    report.write(
        res / f"{name}.md",
        text,
        render=render,
        params=params,
        runs_file=res / f"{name}.json",
        plots=[res / f"{name}.png"],
        command=report.command_line(argv),
    )
    print(text)


if __name__ == "__main__":
    main()
