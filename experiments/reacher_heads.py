"""Reacher-v5: DDPG with two reward heads (one critic each) against DDPG on the env reward.

    python experiments/reacher_heads.py --seeds 0 1 2

cfg/reacher_heads.toml splits the env reward into ``distance`` and ``effort`` (weights 1, 1: they
sum to the env reward); cfg/reacher_single.toml learns the env reward with one critic. Both runs
of a seed share every other setting. After each run the final actor is evaluated on 20 episodes
and each head's return is computed from the task's own functions, so the table shows the env
return and its split. Writes experiments/results/reacher_heads.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results"
EVAL_EPISODES = 20


def head_returns(run_dir: Path, seed: int) -> dict[str, float]:
    """Final actor on EVAL_EPISODES episodes: env return and each Reacher head's return."""
    from tasks.reacher import Reacher
    from wheeler2 import checkpoint as ckpt
    from wheeler2.config import load
    from wheeler2.env import policy_obs
    from wheeler2.runtime import build

    config = load(run_dir / "config.toml")
    lead = build.learner_plan(build.plan_team(config))
    env = build.make_env(config, EVAL_EPISODES, 7_777 + seed)
    heads = build.make_heads(config, env, build.make_task(config))
    agent = build.make_agent(config, lead, build.space_info(env.info, heads), 0)
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    agent.load_state_dict(payload["members"][lead.name])
    task = Reacher()
    totals = {"env": 0.0, "distance": 0.0, "effort": 0.0}
    first = env.reset(seed=7_777 + seed)
    obs = first.obs
    done = np.zeros(EVAL_EPISODES, bool)
    while not done.all():
        action = agent.act(policy_obs(obs, None), explore=False).action
        st = env.step(action)
        live = ~done
        args = (obs, action, st.final_obs, None, None, None)
        totals["env"] += float(st.reward[live].sum())
        totals["distance"] += float(task.distance(*args)[live].sum())
        totals["effort"] += float(task.effort(*args)[live].sum())
        done |= st.terminated | st.truncated
        obs = st.obs
    env.close()
    return {k: v / EVAL_EPISODES for k, v in totals.items()}


def run(cfg: str, seed: int, steps: int, out: Path) -> dict[str, object]:
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    config = load(
        ROOT / "cfg" / cfg,
        overrides=["experiment.progress=false", f"experiment.total_steps={steps}"],
        seed=seed,
        out=str(out),
    )
    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    member = next(iter(summary["members"].values()))
    return {
        "curve": [(e["env_steps"], e["return"]) for e in summary["eval"]],
        "final_eval": summary["final_eval_return"],
        "wall": summary["wall_s"],
        "final": head_returns(run_dir, seed),
        "train_heads": {k: v for k, v in member.items() if k.startswith("episode_return")},
        "losses": {k: v for k, v in member.items() if k.startswith("critic_loss")},
        "run_dir": str(run_dir),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--out", default=str(ROOT / "runs" / "reacher_heads"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[dict]] = {"single": [], "heads": []}
    lines: list[str] = []
    for seed in args.seeds:
        for kind, cfg in (("heads", "reacher_heads.toml"), ("single", "reacher_single.toml")):
            r = run(cfg, seed, args.steps, Path(args.out))
            r["seed"] = seed
            results[kind].append(r)
            print(kind, seed, json.dumps(r, default=str), flush=True)
    lines += [
        f"Reacher-v5, DDPG, {args.steps} env steps per run, final actor on {EVAL_EPISODES} "
        "episodes (higher is better). Heads: distance + effort = env reward.",
        "",
        "| learner | seed | env return | distance head | effort head | last in-run eval | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("heads", "single"):
        for r in results[kind]:
            f = r["final"]
            lines.append(
                f"| {kind} | {r['seed']} | {f['env']:.2f} | {f['distance']:.2f} "
                f"| {f['effort']:.2f} | {r['final_eval'] or float('nan'):.2f} | {r['wall']:.0f} |"
            )
    for kind in ("heads", "single"):
        env_r = [r["final"]["env"] for r in results[kind]]
        sd = statistics.stdev(env_r) if len(env_r) > 1 else 0.0
        lines.append(
            f"| {kind} mean ± sd | | {statistics.mean(env_r):.2f} ± {sd:.2f} | "
            f"{statistics.mean(r['final']['distance'] for r in results[kind]):.2f} | "
            f"{statistics.mean(r['final']['effort'] for r in results[kind]):.2f} | | |"
        )
    lines += ["", "Eval curves (env steps: mean return), and the runs' per-head figures:", ""]
    for kind in ("heads", "single"):
        for r in results[kind]:
            pts = ", ".join(f"{k}: {v:.1f}" for k, v in r["curve"])
            extra = {**r["train_heads"], **r["losses"]}
            figs = ", ".join(f"{k} {v:.3g}" for k, v in extra.items())
            lines.append(f"- {kind} seed {r['seed']}: {pts}" + (f"; {figs}" if figs else ""))
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "reacher_heads.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
