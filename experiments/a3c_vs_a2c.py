"""A3C against A2C on CartPole-v1 at equal env steps and equal worker count (issue 37, item 2).

    python -m experiments.a3c_vs_a2c                           # 1 and 2 workers, seeds 0-2
    python -m experiments.a3c_vs_a2c --workers 4               # adds 4 (keeps 1 and 2's runs)
    python -m experiments.a3c_vs_a2c --workers 1 2 4 --seeds 0 1 2 3 4 --steps 100000
    python -m experiments.a3c_vs_a2c --table                   # the .md from the stored runs

Arms, both with A2C's loss and defaults (n_steps 5, RMSprop 7e-4) and ``--steps`` env steps in
all: **a2c**, one process stepping W env copies and taking one update per 5 vector steps of all
of them (serial backend); **a3c**, W worker processes of one env copy each, every worker's
update applied to the one shared set of parameters (``cfg/cartpole_a3c.toml``'s shape on the
local backend: an a3c learner and W - 1 a3c explorers). So at equal env steps A3C takes W times
as many updates, each on a W times smaller batch. Seeds interleaved, arm order rotating.
Eval: the framework's (every ``eval_every`` env steps, the mean of 10 deterministic episodes of
the learner's policy). Writes ``experiments/results/a3c_vs_a2c.md`` and ``..._runs.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.lib import RESULTS, report, runs
from experiments.lib.arms import Arm, run_config, sweep

TEAM = """
[experiment]
name = "{name}"
seed = 0
total_steps = {steps}
eval_every = {eval_every}
eval_episodes = 10
backend = "{backend}"

[env]
id = "CartPole-v1"
num_envs = {num_envs}

[[team]]
name = "worker"
algo = "{algo}"
role = "learner"
{others}
"""

OTHERS = """
[[team]]
name = "workers"
algo = "a3c"
role = "explorer"
count = {count}
"""


def team(algo: str, workers: int, steps: int, eval_every: int) -> dict[str, Any]:
    """The parsed TOML of one arm."""
    import tomllib

    a3c = algo == "a3c"
    text = TEAM.format(
        name=f"cartpole-{algo}-w{workers}",
        steps=steps,
        eval_every=eval_every,
        backend="local" if a3c else "serial",
        num_envs=1 if a3c else workers,
        algo=algo,
        others=OTHERS.format(count=workers - 1) if a3c and workers > 1 else "",
    )
    return tomllib.loads(text)


def run_arm(arm: Arm, seed: int, steps: int, eval_every: int, out: Path) -> dict[str, Any]:
    algo, workers = arm.name.split("-w")
    run = run_config(team(algo, int(workers), steps, eval_every), seed=seed, out=out)
    s = run.summary
    members = s.get("members", {})
    return {
        "arm": algo,
        "workers": int(workers),
        "seed": seed,
        "env_steps": s["env_steps"],
        "final_eval": s["final_eval_return"],
        "best_eval": s["best_eval_return"],
        "wall_s": round(run.call_s, 1),
        "curve": [(e["env_steps"], e["return"]) for e in s["eval"]],
        "members": sorted(members) if isinstance(members, dict) else [],
    }


def render(rows: list[dict[str, Any]], steps: int, name: str = "a3c_vs_a2c") -> str:
    lines = [
        "# A3C vs A2C on CartPole-v1: equal env steps, equal workers",
        "",
        f"{steps:,} env steps per run, all workers together; A2C's loss and defaults in both "
        "arms (n_steps 5, RMSprop lr 7e-4, 64-64 tanh). a2c: W env copies in one process "
        "(serial), one update per 5 vector steps of all W. a3c: W processes of one copy each "
        "(local), each update applied to the shared parameters (shared RMSProp statistics). "
        "Eval: mean of 10 deterministic episodes every eval_every steps. x86_64, 2 shared "
        "cores (two other engineers' jobs running beside), one torch thread per process.",
        "",
        "| workers | arm | seeds | median final eval | median best eval | finals | "
        "steps to eval >= 475 | median wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["workers"], r["arm"]), []).append(r)
    for (workers, arm), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["seed"])
        finals = [r["final_eval"] for r in rs]
        reached = [next((f"{s:,}" for s, ret in r["curve"] if ret >= 475), "never") for r in rs]
        lines.append(
            f"| {workers} | {arm} | {len(rs)} | {statistics.median(finals):.1f} | "
            f"{statistics.median(r['best_eval'] for r in rs):.1f} | "
            f"{', '.join(f'{f:.0f}' for f in finals)} | {', '.join(reached)} | "
            f"{statistics.median(r['wall_s'] for r in rs):.0f} |"
        )
    lines += [
        "",
        "Finals and steps to 475 are per seed, in seed order. Three seeds say little: read a "
        "gap as a difference only where the seeds' finals do not overlap. With one worker the "
        "two arms are the same algorithm (A3C's one worker is A2C to the bit, "
        "tests/test_a3c.py) and gave the same evals on every seed. Wall-clock includes each "
        "run's start (a3c starts W processes on the local backend, a2c runs serial) and the "
        "load of the other jobs on the machine, which varied by 3x between runs: it is no "
        "speed comparison.",
        "",
        f"![eval curves: each seed thin, the median over seeds thick]({name}.png)",
        "",
    ]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, **_: Any) -> None:
    """Eval return against env steps: one panel per worker count, each seed a thin line and
    each arm's median over seeds a thick one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({r["workers"] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(6 * len(counts), 4), squeeze=False)
    for ax, workers in zip(axes[0], counts):
        for arm, colour in (("a2c", "tab:blue"), ("a3c", "tab:orange")):
            rs = [r for r in rows if r["workers"] == workers and r["arm"] == arm]
            for r in rs:
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, color=colour, alpha=0.3, linewidth=1)
            if rs:
                xs = [x for x, _ in rs[0]["curve"]]
                med = [statistics.median(r["curve"][i][1] for r in rs) for i in range(len(xs))]
                ax.plot(
                    xs, med, color=colour, linewidth=2.5, label=f"{arm}: median, {len(rs)} seeds"
                )
        ax.set_title(f"CartPole-v1, {workers} worker{'s' if workers > 1 else ''}")
        ax.set_xlabel("env steps, all workers")
        ax.set_ylabel("eval return (10 episodes)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30_000)
    ap.add_argument("--eval-every", type=int, default=5_000)
    ap.add_argument("--name", default="a3c_vs_a2c")
    ap.add_argument("--table", action="store_true", help="only rewrite the .md from the runs")
    args = ap.parse_args(argv)
    jsonl = RESULTS / f"{args.name}_runs.jsonl"
    if not args.table:
        # The worker counts run now replace their stored runs; the others' stay in the table.
        kept = [r for r in runs.load(jsonl) if r["workers"] not in args.workers]
        jsonl.unlink(missing_ok=True)
        for record in kept:
            runs.append(jsonl, record)
        arms = [Arm(f"{algo}-w{w}") for w in args.workers for algo in ("a2c", "a3c")]
        with tempfile.TemporaryDirectory() as tmp:
            sweep(
                args.seeds,
                arms,
                lambda arm, seed: run_arm(arm, seed, args.steps, args.eval_every, Path(tmp)),
                runs_file=jsonl,
                rotate=True,
                describe=lambda r: (
                    f"{r['arm']} w{r['workers']} seed {r['seed']}: final {r['final_eval']}, "
                    f"best {r['best_eval']}, {r['wall_s']} s"
                ),
            )
    params = {"steps": args.steps, "name": args.name}
    stored = runs.load(jsonl)
    text = render(stored, **params)
    png = RESULTS / f"{args.name}.png"
    plot(stored, png)
    report.write(
        RESULTS / f"{args.name}.md",
        text,
        render=render,
        params=params,
        runs_file=jsonl,
        plots=[png],
        # --table rebuilds from the stored runs: the header names the sweep that made them.
        command=report.command_line([a for a in (argv or sys.argv[1:]) if a != "--table"]),
    )
    print(text)


if __name__ == "__main__":
    main()
