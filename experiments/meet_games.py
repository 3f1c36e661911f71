"""Self-play on turn-based games (issue 36): does one table that claims both seats learn to win?

For each seed, run the shipped config (cfg/tictactoe_selfplay.toml or
cfg/connect_four_selfplay.toml, serial backend) and play its policy, deterministically, from
the run's last checkpoint (``final``) and from ``best.pt`` (the in-run eval's best return
against random seats), with ``envs/arena.py`` ``head_to_head`` (the learner takes the first seat
in half the games and the second in the other half):

* tictactoe: against a uniformly random player (1000 games) and the perfect (minimax) player,
  seeded so it picks among its optimal moves at random (400 games). Targets, per seat:
  >= 90 % wins and >= 99 % non-losses against random, >= 95 % draws against perfect play.
* connect_four: against random (1000 games) and the one-step-lookahead player (400 games).
  Targets: >= 95 % wins against random, >= 60 % wins against lookahead.

Env steps are counted two ways: ``seat moves`` is the run's ``total_steps`` (the learning seat's
moves, ``summary.json`` ``env_steps``); ``total moves`` adds the opponent seat's moves in the
training copies, counted as they are made (this script wraps ``TurnBasedVecEnv._move`` in its
own process: the serial backend steps the member here).

    python -m experiments.meet_games --game tictactoe --seeds 0 1 2 3 4
    python -m experiments.meet_games --game connect_four --seeds 0 1 2 3 4 --steps 200000
    python -m experiments.meet_games --game tictactoe --rescore 4000   # the stored runs again

``--rescore N`` plays each stored run's final policy again, N games against random (the run's
own 1000 first), and adds that table: a win rate near its threshold read more tightly.

Writes experiments/results/meet_<game>.md, .json (every run's figures; each seed replaces its
earlier row as it finishes; a sweep at another budget or with other ``--set`` overrides than the
stored rows stops before it runs: give it its own ``--name``) and .png (the in-run
``vs_random/win`` and Elo curves). Notes: results/notes/meet_games.md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats


@dataclass(frozen=True)
class GameSpec:
    config: Path
    env_id: str
    act_dim: int
    strong: str  # the name of the strong reference player
    strong_games: int


GAMES = {
    "tictactoe": GameSpec(
        CFG / "tictactoe_selfplay.toml", "pettingzoo:classic.tictactoe_v3", 9, "perfect", 400
    ),
    "connect_four": GameSpec(
        CFG / "connect_four_selfplay.toml",
        "pettingzoo:classic.connect_four_v3",
        7,
        "lookahead",
        400,
    ),
}
RANDOM_GAMES = 1000
EVAL_SEED = 10_000  # the arena's reset seeds and the reference players' seeds: seed + this
SEATS = ("first", "second")


# -- counting the opponent's moves ----------------------------------------------------------------


@contextlib.contextmanager
def counting_opponent_moves() -> Iterator[dict[str, int]]:
    """Counts the opponent seat's moves in the training copies, by kind: ``random`` (the
    [play] random_share games) and ``policy`` (the current policy or a pool snapshot). Every
    driven move goes through ``TurnBasedVecEnv._move``; the training env's driver is a
    ``Drivers`` (the eval envs' are ``EvalDrivers``, not counted)."""
    from wheeler2.envs import turns

    from wheeler2.runtime import opponents

    counts = {"random": 0, "policy": 0}
    original = turns.TurnBasedVecEnv._move

    def move(self: Any, c: int, agent: str, a: int, row: Any = None) -> None:
        others = self._others
        if isinstance(others, opponents.Drivers) and others.pool is not None:
            kind = "random" if others.facing[c] == opponents.RANDOM else "policy"
            counts[kind] += 1
        original(self, c, agent, a, row)

    turns.TurnBasedVecEnv._move = move  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        turns.TurnBasedVecEnv._move = original  # type: ignore[method-assign]


# -- one seed ------------------------------------------------------------------------------------


def record(h: Any) -> dict[str, list[int]]:
    """A HeadToHead as ``{"first": [W, D, L], "second": [W, D, L]}``."""
    return {
        "first": [h.first.wins, h.first.draws, h.first.losses],
        "second": [h.second.wins, h.second.draws, h.second.losses],
    }


def reference(spec: GameSpec, name: str, seed: int) -> Any:
    from wheeler2.envs.players import connect_four_lookahead, random_player, tictactoe_perfect

    if name == "random":
        return random_player(spec.act_dim, seed)
    if name == "perfect":
        return tictactoe_perfect(seed)
    return connect_four_lookahead(seed)


def evaluate(
    spec: GameSpec, run_dir: str | Path, checkpoint: str, seed: int, games: dict[str, int]
) -> dict[str, Any]:
    """W/D/L per seat of a run's policy against each reference player."""
    from wheeler2.envs.arena import head_to_head

    from wheeler2.api import load_tables

    (policy,) = load_tables(run_dir, checkpoint)
    out: dict[str, Any] = {}
    for name, n in games.items():
        t0 = time.perf_counter()
        h = head_to_head(
            spec.env_id, None, policy, reference(spec, name, EVAL_SEED + seed), n, EVAL_SEED + seed
        )
        out[name] = record(h)
        out[f"{name}_s"] = time.perf_counter() - t0
    return out


def run_one(game: str, seed: int, steps: int | None, out: Path, sets: list[str]) -> dict[str, Any]:
    from experiments.lib.arms import run_config
    from wheeler2.config import load

    spec = GAMES[game]
    overrides = ['experiment.backend="serial"', *sets]
    if steps:
        overrides.append(f"experiment.total_steps={steps}")
    config = load(spec.config, overrides=overrides, seed=seed, out=str(out))
    with counting_opponent_moves() as moves:
        run = run_config(config)
    summary = run.summary
    games = {"random": RANDOM_GAMES, spec.strong: spec.strong_games}
    row: dict[str, Any] = {
        "seed": seed,
        "run_dir": str(run.run_dir),
        "wall_s": run.call_s,
        "seat_moves": summary["env_steps"],
        "opponent_moves": moves["random"] + moves["policy"],
        "opponent_moves_random": moves["random"],
        "total_moves": summary["env_steps"] + moves["random"] + moves["policy"],
        "sets": sets,
        "evals": [
            {"env_steps": e["env_steps"], "wall_s": e["wall_s"], **(e.get("matches") or {})}
            for e in summary["eval"]
        ],
    }
    t0 = time.perf_counter()
    row["final"] = evaluate(spec, run.run_dir, "latest", seed, games)
    row["best"] = evaluate(spec, run.run_dir, "best", seed, games)
    row["eval_s"] = time.perf_counter() - t0
    return row


def budget(game: str, steps: int | None, sets: list[str]) -> int:
    """The seat moves a run of this sweep takes: ``--steps``, else the config's (with ``sets``)."""
    from wheeler2.config import load

    return steps or load(GAMES[game].config, overrides=sets).experiment.total_steps


def refuse_other_runs(rows: list[dict[str, Any]], steps: int, sets: list[str], name: str) -> None:
    """Stop before running where the stored rows were made at another budget or with other
    ``--set`` overrides: a seed replaced by this sweep would share one table (its medians and
    "seeds met") with seeds of another setting, and the page would name one of them only. A run
    may overshoot its budget by a vector step: not another budget."""
    other = sorted(
        r["seed"]
        for r in rows
        if abs(r["seat_moves"] - steps) > 0.01 * steps or (r.get("sets") or []) != sets
    )
    if other:
        raise SystemExit(
            f"meet_games: {name}.json holds seeds {other} of another setting than "
            f"{steps:,} seat moves with --set {sets or 'none'}; give this sweep its own "
            "--name (or move that file away)"
        )


def rescore(spec: GameSpec, json_path: Path, games: int) -> None:
    """Each stored run's final policy against random again, over ``games`` games (the same
    first games as its own eval, then more): a win rate near a threshold is read to +-0.006
    instead of +-0.012 per seat. The strong player's games are as before."""
    results = runs.load(json_path)
    for row in results["rows"]:
        counts = {"random": games, spec.strong: spec.strong_games}
        row["rescored"] = evaluate(spec, row["run_dir"], "latest", row["seed"], counts)
        row["rescored_games"] = games
        print(f"seed {row['seed']}: {row['rescored']}", flush=True)
    runs.save(json_path, results)


# -- figures -------------------------------------------------------------------------------------


def rate(wdl: list[int], what: str) -> float:
    w, d, loss = wdl
    n = max(w + d + loss, 1)
    return {"win": w / n, "draw": d / n, "nonloss": (w + d) / n, "loss": loss / n}[what]


def both(rec: dict[str, list[int]]) -> list[int]:
    return [a + b for a, b in zip(rec["first"], rec["second"])]


def seat_rec(rec: dict[str, list[int]], seat: str) -> list[int]:
    return both(rec) if seat == "all" else rec[seat]


def targets(game: str) -> list[tuple[str, str, str, str, float]]:
    """(label, opponent, seat, what, threshold): each target a seed's policy meets or not."""
    if game == "tictactoe":
        return [
            (f"{what} vs {opp}, {seat}", opp, seat, what, thr)
            for seat in SEATS
            for opp, what, thr in (
                ("random", "win", 0.90),
                ("random", "nonloss", 0.99),
                ("perfect", "draw", 0.95),
            )
        ]
    return [
        ("win vs random", "random", "all", "win", 0.95),
        ("win vs lookahead", "lookahead", "all", "win", 0.60),
    ]


def met_all(game: str, ev: dict[str, Any]) -> bool:
    return all(rate(seat_rec(ev[o], s), w) >= t for _, o, s, w, t in targets(game))


def seed_table(game: str, rows: list[dict[str, Any]], which: str) -> list[str]:
    opps = ["random", GAMES[game].strong]
    head = ["seed", "seat moves", "total moves", "wall s"]
    for o in opps:
        head += [f"{o}: W/D/L first", f"{o}: W/D/L second"]
    head.append("all targets met")
    lines = []
    for r in sorted(rows, key=lambda r: r["seed"]):
        ev = r[which]
        cells = [
            str(r["seed"]),
            f"{r['seat_moves']:,}",
            f"{r['total_moves']:,}",
            f"{r['wall_s']:.0f}",
        ]
        for o in opps:
            for s in SEATS:
                n = max(sum(ev[o][s]), 1)
                cells.append("/".join(f"{x / n:.3f}" for x in ev[o][s]))
        cells.append("yes" if met_all(game, ev) else "no")
        lines.append(cells)
    return report.table(head, lines)


def summary_table(game: str, rows: list[dict[str, Any]], which: str) -> list[str]:
    head = ["target", "threshold", "median over seeds [95% bootstrap CI]", "seeds met", "per seed"]
    lines = []
    for label, opp, seat, what, thr in targets(game):
        xs = [rate(seat_rec(r[which][opp], seat), what) for r in rows]
        ci = stats.median_ci(xs)
        met = sum(x >= thr for x in xs)
        lines.append(
            [
                label,
                f">= {thr:.2f}",
                ci.cell(".3f"),
                f"{met}/{len(xs)}",
                " ".join(f"{x:.3f}" for x in xs),
            ]
        )
    n_all = sum(met_all(game, r[which]) for r in rows)
    lines.append(["**all targets**", "", "", f"{n_all}/{len(rows)}", ""])
    return report.table(head, lines)


def render(results: dict[str, Any], game: str, name: str) -> str:
    rows = sorted(results["rows"], key=lambda r: r["seed"])
    spec = GAMES[game]
    if not rows:
        return f"# Self-play: {game}\n\nNo runs yet.\n"
    seat = [r["seat_moves"] for r in rows]
    total = [r["total_moves"] for r in rows]
    wall = [r["wall_s"] for r in rows]
    share = [r["opponent_moves_random"] / max(r["opponent_moves"], 1) for r in rows]
    sets = sorted({" ".join(r.get("sets") or []) for r in rows})
    text = [
        f"# Self-play: {game} (issue 36)",
        "",
        f"Config `{report.shown(spec.config)}`"
        + (f" with `{'`, `'.join(s for s in sets if s)}`" if any(sets) else "")
        + f", serial backend, seeds {[r['seed'] for r in rows]}. The policy plays "
        "deterministically with `envs/arena.py` `head_to_head`, half its games in each seat, "
        f"{RANDOM_GAMES} games against a uniformly random player and {spec.strong_games} "
        f"against the {spec.strong} player"
        + (
            " (minimax, seeded: a random one of its optimal moves)"
            if game == "tictactoe"
            else " (`connect_four_lookahead`: win now, else block, else random)"
        )
        + ". Opponent seeds and reset seeds are 10000 + the training seed.",
        "",
        "**Env steps.** *Seat moves* is `total_steps` (the learning seat's moves, what the run "
        "counts). *Total moves* adds the opponent seat's moves in the training copies, counted "
        "as the self-play driver moved them (eval games not included). Median seat moves "
        f"{stats.median(seat):,.0f}, total moves {stats.median(total):,.0f} "
        f"({stats.median(total) / max(stats.median(seat), 1):.3f} x); the opponent was the "
        f"random player for {stats.median(share):.1%} of its moves (`random_share`). Median "
        f"wall clock {stats.median(wall):.0f} s per run (training with its in-run evals, one "
        "process, a 2-core machine shared with other jobs).",
        "",
    ]
    for which, title in (("final", "final policy (last checkpoint)"), ("best", "best.pt")):
        text += [f"## Targets, {title}", "", *summary_table(game, rows, which), ""]
    if all("rescored" in r for r in rows):
        n = rows[0]["rescored_games"]
        text += [
            f"## Targets, final policy scored again: {n} games against random",
            "",
            f"`--rescore {n}`: the same final checkpoints, {n} games against the random player "
            f"({n // 2} per seat) instead of {RANDOM_GAMES}, the first {RANDOM_GAMES} of them "
            "the games above; the strong player's games unchanged.",
            "",
            *summary_table(game, rows, "rescored"),
            "",
        ]
    for which, title in (("final", "final policy"), ("best", "best.pt")):
        text += [
            f"## Per seed, {title} (W/D/L rates)",
            "",
            *seed_table(game, rows, which),
            "",
        ]
    text += [
        "In-run curves (`summary.json` eval entries: 100 episodes against random seats, and "
        "Elo against random and the pool):",
        "",
        f"![curves]({name}.png)",
        "",
    ]
    return "\n".join(text)


def plot(results: dict[str, Any], path: Path, **_: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for r in sorted(results["rows"], key=lambda r: r["seed"]):
        xs = [e["env_steps"] for e in r["evals"]]
        axes[0].plot(
            xs,
            [e.get("vs_random/win", math.nan) for e in r["evals"]],
            marker="o",
            label=f"seed {r['seed']}",
        )
        axes[1].plot(
            xs, [e.get("elo", math.nan) for e in r["evals"]], marker="o", label=f"seed {r['seed']}"
        )
    axes[0].set_title("in-run eval: win rate vs random")
    axes[0].set_ylabel("vs_random/win")
    axes[1].set_title("in-run eval: Elo (random = 0, pool snapshots)")
    axes[1].set_ylabel("Elo")
    for ax in axes:
        ax.set_xlabel("seat moves (total_steps)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", required=True, choices=list(GAMES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=None, help="seat moves (default: the config's)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    ap.add_argument("--name", default=None, help="result name (default meet_<game>)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "meet_games"))
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--table", action="store_true", help="only rebuild the files from the json")
    ap.add_argument(
        "--rescore",
        type=int,
        default=None,
        metavar="GAMES",
        help="score each stored run's final policy again with GAMES games against random "
        "(a tighter figure than the run's own 1000), kept beside the first",
    )
    args = ap.parse_args(argv)
    res = Path(args.results)
    name = args.name or f"meet_{args.game}"
    json_path = res / f"{name}.json"

    def stored() -> dict[str, Any]:
        return runs.load(json_path) if json_path.is_file() else {"game": args.game, "rows": []}

    if args.rescore:
        rescore(GAMES[args.game], json_path, args.rescore)
    if not (args.table or args.rescore):
        steps = budget(args.game, args.steps, args.sets)
        refuse_other_runs(stored()["rows"], steps, args.sets, name)
    for seed in [] if args.table or args.rescore else args.seeds:
        row = run_one(args.game, seed, args.steps, Path(args.out), args.sets)
        ev = row["final"]
        print(
            f"{args.game} seed {seed}: {row['seat_moves']:,} seat moves, {row['total_moves']:,} "
            f"total, {row['wall_s']:.0f} s; final "
            + "; ".join(f"{o} {ev[o]}" for o in ev if not o.endswith("_s"))
            + f"; all targets {'met' if met_all(args.game, ev) else 'missed'}",
            flush=True,
        )
        results = stored()  # another process may have added seeds meanwhile
        results["rows"] = [r for r in results["rows"] if r["seed"] != seed] + [row]
        runs.save(json_path, results)
    results = stored()
    params = {"game": args.game, "name": name}
    plot(results, res / f"{name}.png")
    text = render(results, **params)
    report.write(
        res / f"{name}.md",
        text,
        render=render,
        params=params,
        runs_file=json_path,
        plots=[res / f"{name}.png"],
        command=report.command_line(argv),
    )
    print(text)


if __name__ == "__main__":
    main()
