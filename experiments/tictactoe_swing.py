"""Does a tic-tac-toe self-play policy swing from checkpoint to checkpoint? (issue 36)

    python -m experiments.tictactoe_swing --seeds 310 --every 10000
    python -m experiments.tictactoe_swing --table          # the files again from the runs file

The second seat of ``cfg/tictactoe_selfplay.toml`` ends its runs drawing a perfect player in
0.83-0.92 of games, and one earlier run at twice the budget ended at 0.38 with its best.pt at
0.855: is the policy settled short of safe play (a bias of what it trains against), or does it
swing between safe and unsafe from one stretch of training to the next (an instability that
choosing or averaging checkpoints could tame)? This runs the file (``--set`` overrides on top)
with a checkpoint every ``--every`` seat moves, keeps a copy of each, and scores every copy as
``experiments.meet_games`` scores a final policy: greedy, half its games in each seat, against
the perfect player (minimax, a random one of its optimal moves) and a uniformly random one,
with the same reset and player seeds for every copy. Beside them, the in-run figures of the
evals nearest each copy (``vs_pool`` and ``vs_random``, per seat) show whether anything the run
sees could tell a safe copy from an unsafe one.

Every seed's record (a row per copy) goes to ``experiments/results/<name>_runs.jsonl`` as it
finishes; ``<name>.md`` and ``<name>.png`` are rebuilt from that file alone.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.lib import RESULTS, ROOT, report, runs
from experiments.lib.arms import run_config
from experiments.meet_games import GAMES, evaluate

GAME = GAMES["tictactoe"]
TARGET = 0.95  # the draws against perfect play, each seat


class KeepCheckpoints:
    """A run callback: a copy of every ``latest.pt`` the run writes, named by its env steps."""

    def __init__(self, into: Path) -> None:
        self.into = into
        self.kept: dict[int, Path] = {}

    def on_checkpoint(self, ck: Any) -> None:
        if ck.best:
            return None
        self.into.mkdir(parents=True, exist_ok=True)
        copy = self.into / f"{ck.env_steps:09d}.pt"
        shutil.copyfile(ck.path, copy)
        self.kept[int(ck.env_steps)] = copy
        return None


def as_run_dir(run_dir: Path, checkpoint: Path, where: Path) -> Path:
    """A directory ``load_tables`` reads as a run whose latest checkpoint is ``checkpoint``."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "config.toml", where / "config.toml")
    (where / "checkpoints").mkdir(exist_ok=True)
    target = where / "checkpoints" / "latest.pt"
    target.unlink(missing_ok=True)
    target.symlink_to(checkpoint.resolve())
    return where


def nearest_eval(evals: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The in-run figures of the last eval at or before ``steps`` (the copy's own, when the
    checkpoint and the eval come together)."""
    before = [e for e in evals if e["env_steps"] <= steps]
    if not before:
        return {}
    e = before[-1]
    keep = ("vs_pool/nonloss_second", "vs_pool/win_second", "vs_random/win_second", "elo")
    return {"eval_steps": e["env_steps"], **{k: e["matches"].get(k) for k in keep}}


def run_seed(
    seed: int, every: int, sets: list[str], out: Path, perfect_games: int, random_games: int
) -> dict[str, Any]:
    keep = KeepCheckpoints(out / f"copies-{seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    fixed = ['experiment.backend="serial"', f"experiment.checkpoint_every={every}"]
    run = run_config(GAME.config, [*fixed, *sets], seed=seed, out=out, callbacks=[keep])
    run_dir, summary = run.run_dir, run.summary
    evals = [e for e in summary["eval"] if e.get("matches")]
    games = {"perfect": perfect_games, "random": random_games}
    rows = []
    for steps, copy in sorted(keep.kept.items()):
        as_run = as_run_dir(run_dir, copy, keep.into / f"run-{steps:09d}")
        rows.append(
            {
                "env_steps": steps,
                **evaluate(GAME, as_run, "latest", seed, games),
                **nearest_eval(evals, steps),
            }
        )
        print(f"seed {seed} at {steps:,}: {describe_row(rows[-1])}", flush=True)
    return {
        "seed": seed,
        "sets": sets,
        "every": every,
        "run_dir": str(run_dir),
        "wall_s": run.call_s,
        "rows": rows,
    }


def rate(wdl: list[int], which: int) -> float:
    return wdl[which] / max(1, sum(wdl))


def safe(row: dict[str, Any]) -> float:
    """Draws against perfect play as second seat (the figure that falls short)."""
    return rate(row["perfect"]["second"], 1)


def describe_row(row: dict[str, Any]) -> str:
    return (
        f"perfect: first draws {rate(row['perfect']['first'], 1):.3f}, second draws "
        f"{safe(row):.3f}; random: second wins {rate(row['random']['second'], 0):.3f}"
    )


def render(records: list[dict[str, Any]], name: str = "tictactoe_swing") -> str:
    lines = [
        "# Tic-tac-toe self-play: does the second seat swing between checkpoints? (issue 36)",
        "",
        "Config `cfg/tictactoe_selfplay.toml` (serial backend) with the overrides named per seed, "
        "a copy of the policy every `every` seat moves, each scored greedy against the perfect "
        "player (minimax, a random one of its optimal moves) and a uniformly random player, "
        "half its games in each seat, with the same seeds for every copy. *In-run* columns are "
        "the run's own eval nearest before the copy (100 games against the pool and against "
        "random, half per seat): what the run itself could have chosen a checkpoint by.",
    ]
    for rec in records:
        rows = rec["rows"]
        # The second half of training: where a settled policy would stay put.
        late = [r for r in rows if r["env_steps"] > rows[-1]["env_steps"] / 2]
        figures = [safe(r) for r in late]
        steps = [abs(b - a) for a, b in zip(figures, figures[1:], strict=False)]
        sets = ", ".join(f"`{s}`" for s in rec["sets"]) or "none"
        lines += [
            "",
            f"## Seed {rec['seed']} (overrides: {sets}; a copy every {rec['every']:,} seat "
            f"moves; run {rec['wall_s']:.0f} s)",
            "",
            f"Second seat's draws against perfect play over the {len(late)} copies of the "
            f"second half of training: median {statistics.median(figures):.3f}, range "
            f"{min(figures):.3f}-{max(figures):.3f}; {sum(f >= TARGET for f in figures)} of "
            f"{len(late)} at or above {TARGET}; median change from one copy to the next "
            f"{statistics.median(steps or [0.0]):.3f}, largest {max(steps or [0.0]):.3f}.",
            "",
        ]
        lines += report.table(
            [
                "seat moves",
                "perfect: D first",
                "perfect: W/D/L second",
                "random: W/D/L second",
                "in-run: pool non-loss second",
                "in-run: random win second",
            ],
            [
                [
                    f"{r['env_steps']:,}",
                    f"{rate(r['perfect']['first'], 1):.3f}",
                    "/".join(f"{rate(r['perfect']['second'], i):.3f}" for i in range(3)),
                    "/".join(f"{rate(r['random']['second'], i):.3f}" for i in range(3)),
                    _maybe(r.get("vs_pool/nonloss_second")),
                    _maybe(r.get("vs_random/win_second")),
                ]
                for r in rows
            ],
        )
    lines += ["", f"![second seat over training]({name}.png)"]
    return "\n".join(lines) + "\n"


def _maybe(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def plot(records: list[dict[str, Any]], path: Path, **_: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for rec in records:
        xs = [r["env_steps"] for r in rec["rows"]]
        arm = ", ".join(rec["sets"]) or "as shipped"
        label = f"seed {rec['seed']} ({arm})"
        ax.plot(xs, [safe(r) for r in rec["rows"]], marker="o", label=label)
    ax.axhline(TARGET, color="k", linestyle="--", linewidth=0.8)
    ax.set_xlabel("seat moves")
    ax.set_ylabel("second seat: draws vs perfect")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def publish(name: str, results: Path) -> None:
    runs_file = results / f"{name}_runs.jsonl"
    records = runs.load(runs_file)
    md, png = results / f"{name}.md", results / f"{name}.png"
    plot(records, png)
    report.write(
        md,
        render(records, name),
        render=render,
        params={"name": name},
        runs_file=runs_file,
        plots=[png],
    )
    print(f"wrote {md}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[310])
    ap.add_argument("--every", type=int, default=10_000, help="seat moves between copies")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    ap.add_argument("--perfect-games", type=int, default=400, help="games, both seats")
    ap.add_argument("--random-games", type=int, default=1000, help="games, both seats")
    ap.add_argument("--name", default="tictactoe_swing")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "tictactoe_swing")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--table", action="store_true", help="only rebuild the files")
    args = ap.parse_args(argv)
    if not args.table:
        for seed in args.seeds:
            rec = run_seed(
                seed, args.every, args.sets, args.out, args.perfect_games, args.random_games
            )
            runs.append(args.results / f"{args.name}_runs.jsonl", rec)
    publish(args.name, args.results)


if __name__ == "__main__":
    main()
