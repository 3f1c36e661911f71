"""Where a tic-tac-toe policy goes wrong against perfect play: its first losing move, by line.

    python -m experiments.tictactoe_losses RUN_DIR [RUN_DIR ...]
    python -m experiments.tictactoe_losses experiments/results/meet_tictactoe.json --games 400

For each run (a run directory, or a ``meet_games`` JSON whose rows name their runs) the policy
(``--checkpoint``, default latest) plays ``--games`` games in each seat against the perfect
player (``envs/players.py`` ``tictactoe_perfect``: minimax, a random one of its optimal moves).
Every move the policy makes is checked against the minimax-optimal moves of its position; the
first move that is not one of them turns a drawn game into a lost one (tic-tac-toe is a draw
with best play). The table counts those first mistakes by position (the moves before it,
squares 0-8 as the env numbers them), with the move made and the moves that hold the draw: a
policy that loses 10 % of its games may do so through one or two holes, which says more about
what its training lacked than the loss rate does.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ENV_ID = "pettingzoo:classic.tictactoe_v3"
SEATS = ("player_1", "player_2")


def run_dirs(paths: list[str]) -> list[Path]:
    """Run directories from the arguments: a directory as given, a JSON by its rows' run_dir."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out.append(p)
        else:
            out += [Path(r["run_dir"]) for r in json.loads(p.read_text())["rows"]]
    return out


def first_mistakes(
    policy: Callable[[np.ndarray], np.ndarray], games: int, seed: int
) -> dict[str, Any]:
    """Play ``games`` games in each seat against the perfect player; per seat, the games lost
    and a Counter of ``(moves before, move made, drawing moves)`` at each game's first mistake."""
    from wheeler2.envs.arena import Game
    from wheeler2.envs.players import tictactoe_best_moves, tictactoe_perfect

    game = Game(ENV_ID)
    moves: list[int] = []
    mistake: list[tuple[tuple[int, ...], int, tuple[int, ...]]] = []

    def logged(p: Callable[[np.ndarray], np.ndarray], checked: bool) -> Any:
        def act(rows: np.ndarray) -> np.ndarray:
            a = np.asarray(p(rows))
            if checked and not mistake:
                best = tuple(int(m) for m in tictactoe_best_moves(rows[0]))
                if int(a[0]) not in best:
                    mistake.append((tuple(moves), int(a[0]), best))
            moves.append(int(a[0]))
            return a

        return act

    out: dict[str, Any] = {}
    try:
        for s, seat in enumerate(SEATS):
            perfect = tictactoe_perfect(seed + s)
            other = SEATS[1 - s]
            drivers = {seat: logged(policy, True), other: logged(perfect, False)}
            lost, where = 0, Counter()
            for k in range(games):
                moves.clear()
                mistake.clear()
                result = game.episode(drivers, seed=seed + k)
                lost += result[seat] < 0
                if mistake:
                    where[mistake[0]] += 1
            out[seat] = {"games": games, "lost": lost, "mistakes": where}
    finally:
        game.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories or meet_games JSON files")
    ap.add_argument("--checkpoint", default="latest", choices=("latest", "best"))
    ap.add_argument("--games", type=int, default=400, help="games per seat")
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--top", type=int, default=5, help="positions shown per seat")
    args = ap.parse_args(argv)
    from wheeler2.api import load_tables

    for run in run_dirs(args.runs):
        (policy,) = load_tables(run, args.checkpoint)
        result = first_mistakes(policy, args.games, args.seed)
        print(f"## {run} ({args.checkpoint})")
        for seat, r in result.items():
            where: Counter = r["mistakes"]
            print(
                f"{seat} ({'first' if seat == SEATS[0] else 'second'}): lost {r['lost']} of "
                f"{r['games']}; first mistakes in {sum(where.values())} games, at "
                f"{len(where)} positions"
            )
            for (before, made, best), n in where.most_common(args.top):
                line = " ".join(map(str, before)) or "(empty board)"
                print(f"  {n:4d}  after {line}: played {made}, draws with {list(best)}")
        print()


if __name__ == "__main__":
    main()
