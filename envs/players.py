"""Reference players for PettingZoo's classic games, playing from masked observation rows.

A player is a policy as ``envs/arena.py`` drives it: ``policy(rows) -> actions``, ``rows``
float32 ``[N, D]`` exactly as training sees them (``envs/spaces.py`` ``encode_masked``: the
game's observation flattened, then the legal-action mask in the last ``act_dim`` columns),
actions int64 ``[N]`` (0-based, the env's ``Discrete.start`` is the arena's to add).

The board planes follow PettingZoo's classic convention (its ``observe``): channel 0 holds the
pieces of the player to move, channel 1 the opponent's, so one player serves both seats.

* tictactoe_v3: observation ``(3, 3, 2)`` is ``board.squares`` reshaped to 3 x 3, and action
  ``k`` marks square ``k``: square ``k`` is flat cell ``k`` of the reshape, so its planes sit in
  columns ``2k`` (own) and ``2k + 1`` (opponent's).
* connect_four_v3: observation ``(6, 7, 2)``, row 0 the top (the env's ``board`` is row-major
  from the top, and a piece fills the lowest empty cell of its column, scanning up from cell
  41); action ``c`` drops a piece in column ``c``, legal while the column's top cell is empty.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from wheeler2.env import legal_actions

Policy = Callable[[np.ndarray], np.ndarray]

TTT_ACTIONS = 9
TTT_DIM = 3 * 3 * 2 + TTT_ACTIONS
C4_ROWS, C4_COLS = 6, 7
C4_DIM = C4_ROWS * C4_COLS * 2 + C4_COLS

# The env's winning lines (pettingzoo/classic/tictactoe/board.py) over square indices, as bit
# masks: square k is bit k.
_TTT_LINES = tuple(
    sum(1 << k for k in line)
    for line in (
        (0, 1, 2),
        (3, 4, 5),
        (6, 7, 8),
        (0, 3, 6),
        (1, 4, 7),
        (2, 5, 8),
        (0, 4, 8),
        (2, 4, 6),
    )
)
_TTT_FULL = (1 << 9) - 1


def _check_width(rows: np.ndarray, width: int, game: str) -> np.ndarray:
    rows = np.asarray(rows, np.float32)
    if rows.ndim != 2 or rows.shape[1] != width:
        raise ValueError(
            f"{game} player: expected masked rows [N, {width}] (observation, then the legal "
            f"mask), got shape {rows.shape}"
        )
    return rows


def random_player(act_dim: int, seed: int = 0, masked: bool = True) -> Policy:
    """Uniformly random over the legal actions of each row (``masked``: the last ``act_dim``
    columns are the mask; otherwise every one of the ``act_dim`` actions is legal)."""
    rng = np.random.default_rng(seed)

    def policy(rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        if not masked:
            return rng.integers(act_dim, size=len(rows)).astype(np.int64)
        legal = legal_actions(rows, act_dim)
        # A uniform draw over each row's legal actions in one pass: the argmax of random keys,
        # with the illegal ones pushed below every legal key.
        keys = rng.random(legal.shape) + legal
        return np.argmax(keys, axis=1).astype(np.int64)

    return policy


def random_box_player(act_dim: int, seed: int = 0) -> Policy:
    """Uniformly random continuous actions in ``[-1, 1]`` (the arena scales them onto the Box,
    so they are uniform over its bounds, as the env's own ``action_space.sample()`` is)."""
    rng = np.random.default_rng(seed)

    def policy(rows: np.ndarray) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(len(rows), act_dim)).astype(np.float32)

    return policy


# -- tic-tac-toe: minimax ----------------------------------------------------------------------


def _ttt_won(bits: int) -> bool:
    return any(bits & line == line for line in _TTT_LINES)


@cache
def _ttt_value(mine: int, theirs: int) -> int:
    """The game value for the player to move, who owns ``mine``: > 0 a win, 0 a draw, < 0 a
    loss. A result counts more the sooner it comes (one plus the empty squares left then), so
    the player takes the quickest win and, when lost anyway, holds out longest."""
    if _ttt_won(theirs):
        return -(1 + bin(_TTT_FULL & ~(mine | theirs)).count("1"))
    empty = _TTT_FULL & ~(mine | theirs)
    if not empty:
        return 0
    return max(-_ttt_value(theirs, mine | 1 << k) for k in range(9) if empty >> k & 1)


def _ttt_bits(row: np.ndarray) -> tuple[int, int]:
    planes = row[: 3 * 3 * 2].reshape(9, 2) > 0.5
    mine = sum(1 << k for k in range(9) if planes[k, 0])
    theirs = sum(1 << k for k in range(9) if planes[k, 1])
    return mine, theirs


def tictactoe_best_moves(row: np.ndarray) -> list[int]:
    """Every optimal move of one tictactoe_v3 row (among its legal actions)."""
    mine, theirs = _ttt_bits(row)
    legal = np.flatnonzero(legal_actions(row[None, :], TTT_ACTIONS)[0])
    # The env's mask, not the board, says what is legal; the two agree on every reachable board.
    values = {int(k): -_ttt_value(theirs, mine | 1 << int(k)) for k in legal}
    best = max(values.values())
    return [k for k, v in values.items() if v == best]


def tictactoe_perfect(seed: int | None = None) -> Policy:
    """Optimal tictactoe_v3 play (minimax, memoised over the few thousand reachable boards):
    never loses. Among equally good moves it takes the lowest square, or with ``seed`` a random
    one, so that games against itself still differ."""
    rng = None if seed is None else np.random.default_rng(seed)

    def policy(rows: np.ndarray) -> np.ndarray:
        rows = _check_width(rows, TTT_DIM, "tictactoe_v3")
        out = np.zeros(len(rows), np.int64)
        for i, row in enumerate(rows):
            best = tictactoe_best_moves(row)
            out[i] = best[0] if rng is None else best[int(rng.integers(len(best)))]
        return out

    return policy


# -- connect four: one-step lookahead ----------------------------------------------------------


def _c4_planes(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    planes = row[: C4_ROWS * C4_COLS * 2].reshape(C4_ROWS, C4_COLS, 2) > 0.5
    return planes[:, :, 0], planes[:, :, 1]


def c4_drop_row(occupied: np.ndarray, col: int) -> int | None:
    """The row a piece dropped in ``col`` lands on (the lowest empty cell; row 0 is the top),
    None for a full column."""
    empty = np.flatnonzero(~occupied[:, col])
    return int(empty[-1]) if empty.size else None


def c4_wins(pieces: np.ndarray, r: int, c: int) -> bool:
    """Whether ``pieces`` (bool ``[6, 7]``) with a piece added at ``(r, c)`` hold four in a row
    through that cell: horizontal, vertical or either diagonal, as the env checks."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            rr, cc = r + sign * dr, c + sign * dc
            while 0 <= rr < C4_ROWS and 0 <= cc < C4_COLS and pieces[rr, cc]:
                run += 1
                rr, cc = rr + sign * dr, cc + sign * dc
        if run >= 4:
            return True
    return False


def connect_four_lookahead(seed: int = 0) -> Policy:
    """One-step lookahead for connect_four_v3: win now if a move does, else block a column where
    the opponent would win next, else a random legal move (ties among wins or blocks also
    random). A baseline that random play cannot match, far from perfect play."""
    rng = np.random.default_rng(seed)

    def choose(row: np.ndarray) -> int:
        mine, theirs = _c4_planes(row)
        occupied = mine | theirs
        legal = [int(c) for c in np.flatnonzero(legal_actions(row[None, :], C4_COLS)[0])]
        landing = {c: c4_drop_row(occupied, c) for c in legal}
        for pieces in (mine, theirs):  # first our wins, then the opponent's to block
            hits = [c for c, r in landing.items() if r is not None and c4_wins(pieces, r, c)]
            if hits:
                return hits[int(rng.integers(len(hits)))]
        return legal[int(rng.integers(len(legal)))]

    def policy(rows: np.ndarray) -> np.ndarray:
        rows = _check_width(rows, C4_DIM, "connect_four_v3")
        return np.array([choose(row) for row in rows], np.int64)

    return policy
