"""Reacher-v5: the shipped two-head DDPG team against the same team plus detached per-head
explorers.

    python -m experiments.detached_heads --seeds 0 1 2 --steps 5000

``heads`` is cfg/reacher_heads.toml (one DDPG learner, critics ``distance`` and ``effort``);
``detached`` is cfg/reacher_detached.toml, the same learner with one detached explorer per head
(docs/config.md, "Detached per-head explorers"). Both arms run serial, the same seeds and the
same ``total_steps`` of all members together, so the learner does the same number of updates
(``updates_per_insert = 1``) on data that, in the detached arm, two thirds other actors collected.
The runs of a seed are interleaved so that machine load hits both arms alike. After each run the
learner's final actor is evaluated on 20 episodes with each head's return
(``experiments.lib.setups.reacher_head_returns``); the detached explorers' own training-episode
returns per head show what each of them went after. Appends each run to
experiments/results/detached_heads_runs.jsonl and writes detached_heads.md from it (``--table``
only rewrites it). Notes on the results: results/notes/detached_heads.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs
from experiments.lib.arms import run_config, sweep
from experiments.lib.setups import reacher_head_returns

ARMS = (("heads", "reacher_heads.toml"), ("detached", "reacher_detached.toml"))


def run(cfg: str, seed: int, steps: int, out: Path) -> dict[str, object]:
    sets = [f"experiment.total_steps={steps}", f"experiment.eval_every={max(1, steps // 5)}"]
    cpu0 = time.process_time()
    done = run_config(CFG / cfg, sets, seed=seed, out=out)
    summary, run_dir = done.summary, done.run_dir
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
        "final": reacher_head_returns(run_dir, seed),
        "learner_updates": summary["members"]["target"].get("updates"),
        "learner_steps": summary["members"]["target"].get("env_steps"),
        "explorers": explorers,
        "run_dir": str(run_dir),
    }


def render(stored: list[dict[str, Any]], steps: int) -> str:
    results = {kind: [r for r in stored if r["kind"] == kind] for kind, _ in ARMS}
    return "\n".join(table(results, steps))


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=5_000)
    ap.add_argument("--out", default=str(ROOT / "runs" / "detached_heads"))
    ap.add_argument("--write", default=str(RESULTS / "detached_heads.md"))
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the runs")
    args = ap.parse_args(argv)
    write = Path(args.write)
    log = write.with_name(write.stem + "_runs.jsonl")
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
        write, text, render=render, params=params, runs_file=log,
        command=report.command_line(argv),
    )  # fmt: skip


if __name__ == "__main__":
    main()
