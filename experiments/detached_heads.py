"""Reacher-v5: the shipped two-head DDPG team against the same team plus detached per-head
explorers.

    python experiments/detached_heads.py --seeds 0 1 2 --steps 5000

``heads`` is cfg/reacher_heads.toml (one DDPG learner, critics ``distance`` and ``effort``);
``detached`` is cfg/reacher_detached.toml, the same learner with one detached explorer per head
(docs/config.md, "Detached per-head explorers"). Both arms run serial, the same seeds and the
same ``total_steps`` of all members together, so the learner does the same number of updates
(``updates_per_insert = 1``) on data that, in the detached arm, two thirds other actors collected.
The runs of a seed are interleaved so that machine load hits both arms alike. After each run the
learner's final actor is evaluated on 20 episodes with each head's return
(experiments/reacher_heads.py's ``head_returns``); the detached explorers' own training-episode
returns per head show what each of them went after. Writes experiments/results/detached_heads.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results"
ARMS = (("heads", "reacher_heads.toml"), ("detached", "reacher_detached.toml"))


def run(cfg: str, seed: int, steps: int, out: Path) -> dict[str, object]:
    from experiments.reacher_heads import head_returns
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    config = load(
        ROOT / "cfg" / cfg,
        overrides=[
            "experiment.progress=false",
            f"experiment.total_steps={steps}",
            f"experiment.eval_every={max(1, steps // 5)}",
        ],
        seed=seed,
        out=str(out),
    )
    cpu0 = time.process_time()
    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    explorers = {
        name: {k: v for k, v in figs.items() if k.startswith(("episode_return", "head_"))}
        for name, figs in summary["members"].items()
        if name != "target"
    }
    return {
        "curve": [(e["env_steps"], e["return"]) for e in summary["eval"]],
        "final_eval": summary["final_eval_return"],
        "best_eval": summary["best_eval_return"],
        "wall": summary["wall_s"],
        "cpu": time.process_time() - cpu0,
        "final": head_returns(run_dir, seed),
        "learner_updates": summary["members"]["target"].get("updates"),
        "learner_steps": summary["members"]["target"].get("env_steps"),
        "explorers": explorers,
        "run_dir": str(run_dir),
    }


def table(results: dict[str, list[dict]], steps: int) -> list[str]:
    lines = [
        f"Reacher-v5, {steps:,} env steps per run (all members together), serial backend, the "
        "learner's final actor on 20 episodes (higher is better; distance + effort = env).",
        "",
        "| team | seed | env return | distance | effort | best in-run eval | learner steps "
        "| wall s | CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, _ in ARMS:
        for r in results[kind]:
            f = r["final"]
            lines.append(
                f"| {kind} | {r['seed']} | {f['env']:.2f} | {f['distance']:.2f} "
                f"| {f['effort']:.2f} | {r['best_eval']:.2f} | {r['learner_steps']:.0f} "
                f"| {r['wall']:.0f} | {r['cpu']:.0f} |"
            )
    for kind, _ in ARMS:
        env_r = [r["final"]["env"] for r in results[kind]]
        sd = statistics.stdev(env_r) if len(env_r) > 1 else 0.0
        lines.append(
            f"| {kind} mean ± sd | | {statistics.mean(env_r):.2f} ± {sd:.2f} "
            f"| {statistics.mean(r['final']['distance'] for r in results[kind]):.2f} "
            f"| {statistics.mean(r['final']['effort'] for r in results[kind]):.2f} | | | | |"
        )
    lines += ["", "Eval curves (env steps: mean return over the run's eval episodes):", ""]
    for kind, _ in ARMS:
        for r in results[kind]:
            pts = ", ".join(f"{k}: {v:.1f}" for k, v in r["curve"])
            lines.append(f"- {kind} seed {r['seed']}: {pts}")
    lines += [
        "",
        "Detached explorers' own last 20 training episodes (with their exploration noise):",
        "",
    ]
    for r in results["detached"]:
        for name, figs in r["explorers"].items():
            shown = ", ".join(f"{k} {v:.3g}" for k, v in figs.items())
            lines.append(f"- seed {r['seed']} {name}: {shown}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=5_000)
    ap.add_argument("--out", default=str(ROOT / "runs" / "detached_heads"))
    ap.add_argument("--write", default=str(RESULTS / "detached_heads.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[dict]] = {kind: [] for kind, _ in ARMS}
    for seed in args.seeds:
        for kind, cfg in ARMS:
            r = run(cfg, seed, args.steps, Path(args.out))
            r["seed"] = seed
            results[kind].append(r)
            print(kind, seed, json.dumps(r, default=str), flush=True)
    text = "\n".join(table(results, args.steps))
    print(text)
    Path(args.write).parent.mkdir(parents=True, exist_ok=True)
    Path(args.write).write_text(text + "\n")


if __name__ == "__main__":
    main()
