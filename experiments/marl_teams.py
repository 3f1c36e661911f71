"""Multi-agent teams on PettingZoo envs against a random policy.

For each env and each seed, run the shipped config for a fixed budget of agent-steps, and
measure a uniform random policy's mean episode return per agent with the same adapter, the same
reward mode and the same episode count. The figure compared is each learner's deterministic
evaluation (mean episode return per agent row, ``eval_episodes`` env copies) at the end of the
budget. Envs: simple_spread_v3 and multiwalker_v9 (cfg/<env>_team.toml: one PPO member whose
rows are all the agents, sharing its parameters), and simple_tag_v3 (cfg/simple_tag_teams.toml:
two teams of unlike agents, DDPG predators and a PPO prey, each in its own replay table; each
learner plays against random opponents, so each is compared with random agents on its side).

    python experiments/marl_teams.py                      # every env, seeds 0 1 2
    python experiments/marl_teams.py --envs simple_tag --seeds 0 1 2 --backend local

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
    "simple_tag": ROOT / "cfg" / "simple_tag_teams.toml",
}


def random_return(config: Any, episodes: int, seed: int, learner: str) -> float:
    """Mean per-agent episode return of uniform random actions in [-1, 1], one episode per row,
    in the env ``learner`` plays (its agents), measured the way the engine evaluates it."""
    from wheeler2.runtime import build

    plan = next(p for p in build.plan_team(config) if p.name == learner)
    env = build.make_env(config, episodes, seed, plan)
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
    from wheeler2.runtime import run_experiment

    sets = ["experiment.progress=false", f'experiment.backend="{backend}"']
    if steps:
        sets += [f"experiment.total_steps={steps}", f"experiment.eval_every={max(steps // 5, 1)}"]
    config = load(path, overrides=sets, seed=seed, out=str(out))
    t0 = time.perf_counter()
    run_dir = run_experiment(config)
    wall_s = time.perf_counter() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
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
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    cmd = " ".join(["python experiments/marl_teams.py", *sys.argv[1:]])
    text = (
        "# Multi-agent teams vs a random policy (PettingZoo)\n\n"
        f"`{cmd}` (backend `{args.backend}`, seeds {args.seeds}). simple_spread and multiwalker: "
        "one PPO member drives all agents with shared parameters (cfg/simple_spread_team.toml, "
        "cfg/multiwalker_team.toml). simple_tag: two teams of unlike agents, each in its own "
        "replay table (cfg/simple_tag_teams.toml): DDPG predators (`simple_tag/predators`) and "
        "a PPO prey (`simple_tag/prey`); each plays against random opponents. Returns are "
        "mean episode returns per agent row: each learner's deterministic evaluation over "
        "`eval_episodes` env copies, and uniform random actions in [-1, 1] for the same agents, "
        "measured with the same adapter and reward mode.\n\n"
        + table(results)
        + "\n\n![curves](marl_teams.png)\n"
    )
    name = "marl_teams" if set(args.envs) == set(ENVS) else "marl_teams_" + "_".join(args.envs)
    text = text.replace("marl_teams.png", f"{name}.png")
    (res / f"{name}.md").write_text(text)
    (res / f"{name}.json").write_text(json.dumps(results, indent=1))
    plot(results, res / f"{name}.png")
    print(text)


if __name__ == "__main__":
    main()
