"""The best any tic-tac-toe policy can do against a uniformly random opponent, exactly.

    python -m experiments.tictactoe_bounds

For each seat: the highest win rate against uniform random play (ties broken toward fewer
losses), and the highest win rate among *safe* policies, those that only make moves minimax
rates optimal (so they never lose to perfect play). These bound issue 36's targets: a second
player that never loses to a perfect player wins at most 0.916 of its games against random
play. Exhaustive search over the game tree (5,478 positions), memoised.
"""

from __future__ import annotations

import argparse
from functools import cache

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def other(mark: str) -> str:
    return "O" if mark == "X" else "X"


def moves(board: str, mark: str) -> list[str]:
    return [board[:i] + mark + board[i + 1 :] for i in range(9) if board[i] == "."]


@cache
def minimax(board: str, to_move: str) -> int:
    """The game's value for X with best play from here: +1, 0 or -1."""
    w = winner(board)
    if w is not None:
        return 1 if w == "X" else -1
    if "." not in board:
        return 0
    values = [minimax(b, other(to_move)) for b in moves(board, to_move)]
    return max(values) if to_move == "X" else min(values)


@cache
def against_random(board: str, to_move: str, me: str, safe: bool) -> tuple[float, float]:
    """(P(win), P(loss)) of ``me``'s best policy against a uniformly random opponent."""
    w = winner(board)
    if w is not None:
        return (1.0, 0.0) if w == me else (0.0, 1.0)
    if "." not in board:
        return (0.0, 0.0)
    nxt = moves(board, to_move)
    if to_move == me:
        if safe:  # only the moves that keep the minimax value
            value = minimax(board, to_move)
            nxt = [b for b in nxt if minimax(b, other(to_move)) == value]
        options = [against_random(b, other(to_move), me, safe) for b in nxt]
        return max(options, key=lambda wl: (wl[0], -wl[1]))
    options = [against_random(b, other(to_move), me, safe) for b in nxt]
    return (
        sum(w for w, _ in options) / len(options),
        sum(lo for _, lo in options) / len(options),
    )


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    for seat, me in (("first", "X"), ("second", "O")):
        for safe in (False, True):
            win, loss = against_random("." * 9, "X", me, safe)
            kind = "safe (never loses to perfect play)" if safe else "any policy"
            print(f"{seat} seat, {kind}: wins {win:.3f}, losses {loss:.3f} against random")


if __name__ == "__main__":
    main()
