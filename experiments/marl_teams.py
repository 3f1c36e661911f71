"""Cooperative multi-agent teams on PettingZoo envs against a random policy.

For each env (simple_spread_v3 with continuous actions, multiwalker_v9) and each seed, run the
shipped team config (cfg/<env>_team.toml: one PPO member whose rows are all the agents, sharing
its parameters) for a fixed budget of agent-steps, and measure a uniform random policy's mean
episode return per agent with the same adapter, the same reward mode and the same episode count.
The figure compared is the learner's deterministic evaluation (mean episode return per agent row,
``eval_episodes`` env copies) at the end of the budget.

    python experiments/marl_teams.py                      # both envs, seeds 0 1 2
    python experiments/marl_teams.py --envs simple_spread --seeds 0 --steps 30000

Writes experiments/results/marl_teams.md and marl_teams.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENVS = {
    "simple_spread": ROOT / "cfg" / "simple_spread_team.toml",
    "multiwalker": ROOT / "cfg" / "multiwalker_team.toml",
}


def random_return(config: Any, episodes: int, seed: int) -> float:
    """Mean per-agent episode return of uniform random actions in [-1, 1], one episode per row,
    measured the way the engine's evaluation measures the learner."""
    from wheeler2.runtime import build

    plans = build.plan_team(config)
    env = build.make_env(config, episodes, seed, build.learner_plan(plans))
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


def run_one(path: Path, seed: int, steps: int | None, out: Path, backend: str) -> dict[str, Any]:
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    sets = ["experiment.progress=false", f'experiment.backend="{backend}"']
    if steps:
        sets += [f"experiment.total_steps={steps}", f"experiment.eval_every={max(steps // 5, 1)}"]
    config = load(path, overrides=sets, seed=seed, out=str(out))
    t0 = time.perf_counter()
    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "seed": seed,
        "wall_s": time.perf_counter() - t0,
        "env_steps": summary["env_steps"],
        "final": summary["final_eval_return"],
        "best": summary["best_eval_return"],
        "evals": summary["eval"],
        "random": random_return(config, int(config.experiment.eval_episodes), 10_000 + seed),
        "run_dir": str(run_dir),
    }


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {sd:.1f}"


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


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="agent-steps (default: the config's)")
    ap.add_argument("--backend", default="serial", choices=["serial", "local"])
    ap.add_argument("--out", default=str(ROOT / "runs" / "marl_teams"))
    ap.add_argument("--results", default=str(ROOT / "experiments" / "results"))
    args = ap.parse_args()

    results: dict[str, list[dict[str, Any]]] = {}
    for env in args.envs:
        results[env] = []
        for seed in args.seeds:
            r = run_one(ENVS[env], seed, args.steps, Path(args.out), args.backend)
            print(
                f"{env} seed {seed}: final {r['final']:.1f} best {r['best']:.1f} "
                f"random {r['random']:.1f} ({r['wall_s']:.0f} s)",
                flush=True,
            )
            results[env].append(r)
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    text = (
        "# Multi-agent teams vs a random policy (PettingZoo)\n\n"
        "`python experiments/marl_teams.py` (backend "
        f"`{args.backend}`, seeds {args.seeds}). One PPO member per env drives all agents with "
        "shared parameters (cfg/simple_spread_team.toml, cfg/multiwalker_team.toml). Returns are "
        "mean episode returns per agent row: the learner's deterministic evaluation over "
        "`eval_episodes` env copies, and uniform random actions in [-1, 1] measured with the "
        "same adapter and reward mode.\n\n" + table(results) + "\n\n![curves](marl_teams.png)\n"
    )
    (res / "marl_teams.md").write_text(text)
    (res / "marl_teams.json").write_text(json.dumps(results, indent=1))
    plot(results, res / "marl_teams.png")
    print(text)


if __name__ == "__main__":
    main()
