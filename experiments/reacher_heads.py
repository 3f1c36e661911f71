"""Reacher-v5: DDPG with two reward heads (one critic each) against DDPG on the env reward.

    python -m experiments.reacher_heads --seeds 0 1 2

cfg/reacher_heads.toml splits the env reward into ``distance`` and ``effort`` (weights 1, 1: they
sum to the env reward); cfg/reacher_single.toml learns the env reward with one critic. Both runs
of a seed share every other setting. After each run the final actor is evaluated on 20 episodes
and each head's return is computed from the task's own functions, so the table shows the env
return and its split. Appends each run to experiments/results/reacher_heads_runs.jsonl and
writes reacher_heads.md from it (``--table`` only rewrites the table). Notes on the results:
results/notes/reacher_heads.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs
from experiments.lib.arms import run_config, sweep
from experiments.lib.setups import REACHER_EVAL_EPISODES as EVAL_EPISODES
from experiments.lib.setups import reacher_head_returns

ARMS = (("heads", "reacher_heads.toml"), ("single", "reacher_single.toml"))


def run(cfg: str, seed: int, steps: int, out: Path) -> dict[str, object]:
    done = run_config(CFG / cfg, [f"experiment.total_steps={steps}"], seed=seed, out=out)
    summary, run_dir = done.summary, done.run_dir
    member = next(iter(summary["members"].values()))
    return {
        "curve": [(e["env_steps"], e["return"]) for e in summary["eval"]],
        "final_eval": summary["final_eval_return"],
        "wall": summary["wall_s"],
        "final": reacher_head_returns(run_dir, seed),
        "train_heads": {k: v for k, v in member.items() if k.startswith("episode_return")},
        "losses": {k: v for k, v in member.items() if k.startswith("critic_loss")},
        "run_dir": str(run_dir),
    }


def render(stored: list[dict[str, Any]], steps: int) -> str:
    results = {kind: [r for r in stored if r["kind"] == kind] for kind, _ in ARMS}
    lines = [
        f"Reacher-v5, DDPG, {steps} env steps per run, final actor on {EVAL_EPISODES} "
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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--out", default=str(ROOT / "runs" / "reacher_heads"))
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the runs")
    args = ap.parse_args(argv)
    log = RESULTS / "reacher_heads_runs.jsonl"
    if not args.table:
        import torch

        torch.set_num_threads(1)
        log.unlink(missing_ok=True)  # the table is this sweep's runs

        def one(arm: tuple[str, str], seed: int) -> dict[str, Any]:
            kind, cfg = arm
            return {"kind": kind, "seed": seed, **run(cfg, seed, args.steps, Path(args.out))}

        sweep(args.seeds, ARMS, one, log, describe=lambda r: json.dumps(r, default=str))
    params = {"steps": args.steps}
    text = render(runs.load(log), **params)
    print(text)
    report.write(
        RESULTS / "reacher_heads.md",
        text,
        render=render,
        params=params,
        runs_file=log,
        command=report.command_line(argv),
    )


if __name__ == "__main__":
    main()
