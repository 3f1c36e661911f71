"""Issue 41 on bit flipping: env steps to success >= 0.9 with HER, TD priority against TD +
novelty priority, seeds interleaved.

    python -m experiments.replay_choice_bitflip --seeds 0 1 2 3 4 [--bits 40] [--budget 100000]
    python -m experiments.replay_choice_bitflip --table   # the table from the stored runs

Both arms run cfg/bitflip_her.toml (double DQN + HER "future" k = 4 with
``terminate_on_goal``, 2 x 256, batch 256, one update per insert) with ``n_bits`` set,
``prioritized = true``, and evals of 20 episodes every 2,000 env steps; they differ in one key:

* ``td``: the priority is |TD error| (today's prioritized replay);
* ``td+novelty``: ``priority_novelty = 0.5`` (TD error + RND novelty of the next observation,
  wheeler2/buffer/priority.py).

Every arm of a seed runs before the next seed, the arms' order rotating; each finished run is
appended to ``replay_choice_bitflip_runs.jsonl`` at once, so two processes over disjoint seeds
(the two cores) fill one file. The table (``<runs stem without _runs>.md``): steps to the first
eval at >= 0.9 per seed, the median with a bootstrap interval (a seed that never got there
counts as never), the seeds solved, the final eval's success, and the mean success over all
evals (a figure no budget censors).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import Arm, run_config, sweep

THRESHOLD = 0.9
EVAL_EVERY = 2_000
ARMS = (
    Arm("td"),
    Arm("td+novelty", sets=("buffer.priority_novelty=0.5",)),
)
RUNS = RESULTS / "replay_choice_bitflip_runs.jsonl"


def run_arm(arm: Arm, seed: int, bits: int, budget: int, out: Path) -> dict[str, Any]:
    run = run_config(
        CFG / "bitflip_her.toml",
        [
            f"env.kwargs.n_bits={bits}",
            f"experiment.total_steps={budget}",
            f"experiment.eval_every={EVAL_EVERY}",
            "buffer.prioritized=true",
            *arm.sets,
        ],
        seed=seed,
        out=out,
    )
    evals = run.summary["eval"]
    steps, seconds = stats.to_threshold(evals, THRESHOLD, key="success", strict=False)
    return {
        "arm": arm.name,
        "seed": seed,
        "bits": bits,
        "budget": budget,
        "steps": steps,
        "seconds": seconds,
        "final": evals[-1]["success"] if evals else None,
        "curve": [(e["env_steps"], e["success"]) for e in evals],
        "wall_s": run.call_s,
    }


def render(stored: list[dict[str, Any]]) -> str:
    """Steps to 0.9 per (n, arm) and seed, with the median, its interval and seeds solved."""
    latest = runs.latest(stored, key=lambda r: (r["bits"], r["budget"], r["arm"], r["seed"]))
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for r in sorted(latest.values(), key=lambda r: r["seed"]):
        groups.setdefault((r["bits"], r["budget"], r["arm"]), []).append(r)
    lines = [
        f"Bit flipping with HER (cfg/bitflip_her.toml, prioritized), env steps to the first "
        f"eval with success >= {THRESHOLD} (20 episodes every {EVAL_EVERY:,} env steps); "
        "'never': not within the budget.",
        "",
        "| n | budget | arm | steps to 0.9 per seed | median [95% CI] | solved | final success "
        "per seed | mean success over the run, median [95% CI] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (bits, budget, arm), rows in sorted(groups.items()):
        steps = stats.censored(r["steps"] for r in rows)
        per_seed = ", ".join(f"{r['seed']}: {stats.fmt(s, ',.0f')}" for r, s in zip(rows, steps))
        finals = ", ".join(stats.fmt(r["final"], ".2f") for r in rows)
        ci = stats.median_ci(list(steps), rng=0).cell(",.0f")
        solved = f"{stats.solved(steps)}/{len(rows)}"
        # Less censored than a threshold: the area under each success curve, over the budget.
        area = [float(np.mean([s for _, s in r["curve"]])) for r in rows]
        auc = stats.median_ci(area, rng=0).cell(".3f")
        lines.append(
            f"| {bits} | {budget:,} | {arm} | {per_seed} | {ci} | {solved} | {finals} | {auc} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    parser.add_argument("--bits", type=int, default=40)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--runs", default=str(RUNS), help="the runs file (JSONL) to append to")
    parser.add_argument("--out", default=str(ROOT / "runs" / "replay_choice_bitflip"))
    parser.add_argument(
        "--arms", nargs="*", default=[a.name for a in ARMS], help="a subset of the arms"
    )
    parser.add_argument("--table", action="store_true", help="only write the table of --runs")
    args = parser.parse_args(argv)
    if not args.table:
        sweep(
            args.seeds,
            [a for a in ARMS if a.name in args.arms],
            lambda arm, seed: run_arm(arm, seed, args.bits, args.budget, Path(args.out)),
            runs_file=args.runs,
            rotate=True,
            describe=lambda r: f"{r['arm']} seed {r['seed']}: steps to 0.9 {r['steps']}",
        )
    stored = runs.load(args.runs)
    text = render(stored)
    table = Path(args.runs).with_name(Path(args.runs).stem.removesuffix("_runs") + ".md")
    report.write(table, text, render=render, runs_file=args.runs, command=report.command_line(argv))
    print(text)


if __name__ == "__main__":
    main()
