"""Elo ratings from match results, fitted all at once (pure math: numpy only).

A match is ``(player_a, player_b, wins_a, draws, losses_a)``. :func:`elo_ratings` returns
ratings on the usual Elo scale: a player rated ``d`` points above another is expected to score
``1 / (1 + 10 ** (-d / 400))`` against it (75% at about +191, 91% at +400).

Why a fit and not Elo's update rule: sequential updates depend on the order the games are fed
in and on the step size K, and never settle; the ratings here are the maximum-likelihood fit of
the same logistic model (Bradley-Terry), which depends on the results alone. Draws count as half
a win and half a loss, as Elo scores them. The likelihood is concave in the ratings, so Newton's
method finds its one maximum in a few steps.

Why a prior: a player that never lost has no finite maximum-likelihood rating (the likelihood
keeps rising as it climbs). Every player therefore also gets ``prior_draws`` virtual draws
against the anchor (or, without one, against a virtual player rated 0): a weak pull toward the
anchor that keeps an undefeated rating finite and still rising with each further win, and that
joins players who never met into one scale. Its weight fades as real games accumulate; with
``prior_draws = 0`` the fit is the plain maximum likelihood, where one exists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

# The Elo scale: ratings r are natural-log strengths theta = r * ln(10) / 400.
ELO_SCALE = 400.0 / math.log(10.0)
DEFAULT_ANCHOR = "random"

Match = tuple[str, str, float, float, float]
NO_FIT = (
    "the ratings have no finite maximum-likelihood fit: a player won (or lost) every game, or "
    "some players are not joined by games to the others; use prior_draws > 0"
)


def expected_score(difference: float) -> float:
    """The score (wins plus half the draws, per game) a player rated ``difference`` points
    above its opponent is expected to make."""
    return 1.0 / (1.0 + 10.0 ** (-difference / 400.0))


def elo_ratings(
    matches: Iterable[Sequence[object]],
    anchor: str | None = DEFAULT_ANCHOR,
    prior_draws: float = 1.0,
    tol: float = 1e-9,
    max_iter: int = 100,
) -> dict[str, float]:
    """Elo ratings of every player named in ``matches`` (module docstring: the model, the fit
    and the prior).

    ``matches``: ``(player_a, player_b, wins_a, draws, losses_a)`` tuples; a pair may appear
    several times (their results add up) and in either order. ``anchor``: the player held at 0
    when it is among them (default ``"random"``); otherwise the ratings are shifted to mean 0.
    Raises ValueError on a malformed match, or when ``prior_draws = 0`` leaves the fit without
    a finite maximum (an undefeated player, or players never joined by games).
    """
    if prior_draws < 0:
        raise ValueError(f"prior_draws must be >= 0, got {prior_draws}")
    names: dict[str, int] = {}
    rows = []
    for match in matches:
        if len(match) != 5:
            raise ValueError(
                f"a match is (player_a, player_b, wins_a, draws, losses_a), got {match!r}"
            )
        a, b, wins, draws, losses = match
        if not isinstance(a, str) or not isinstance(b, str):
            raise ValueError(f"player names must be strings, got {a!r} and {b!r}")
        if a == b:
            raise ValueError(f"a match needs two players, got {a!r} against itself")
        counts = [float(x) for x in (wins, draws, losses)]  # type: ignore[arg-type]
        if min(counts) < 0 or not all(math.isfinite(x) for x in counts):
            raise ValueError(f"{a} vs {b}: wins, draws and losses must be >= 0, got {counts}")
        i, j = names.setdefault(a, len(names)), names.setdefault(b, len(names))
        rows.append((i, j, counts[0] + 0.5 * counts[1], sum(counts)))
    if not names:
        return {}

    anchored = anchor is not None and anchor in names
    n = len(names)
    # The player held at 0 while fitting: the anchor; else the virtual prior player (index n),
    # or without a prior any one player, since only differences are fitted.
    virtual = not anchored and prior_draws > 0
    size = n + 1 if virtual else n
    zero = names[anchor] if anchored and anchor is not None else (n if virtual else 0)
    score = np.zeros((size, size))  # score[i, j]: i's points against j
    games = np.zeros((size, size))
    for i, j, s, g in rows:
        score[i, j] += s
        score[j, i] += g - s
        games[i, j] += g
        games[j, i] += g
    if prior_draws > 0:
        for i in range(n):
            if i != zero:
                score[i, zero] += 0.5 * prior_draws
                score[zero, i] += 0.5 * prior_draws
                games[i, zero] += prior_draws
                games[zero, i] += prior_draws

    theta = _fit(score, games, zero, tol, max_iter)
    ratings = theta[:n] * ELO_SCALE
    if not anchored:
        ratings = ratings - ratings.mean()
    return {name: float(ratings[k]) for name, k in names.items()}


def _fit(score: np.ndarray, games: np.ndarray, zero: int, tol: float, max_iter: int) -> np.ndarray:
    """Newton's method on the Bradley-Terry log-likelihood, ``theta[zero]`` held at 0."""
    size = len(score)
    free = np.array([k for k in range(size) if k != zero])
    wins = score.sum(axis=1)
    theta = np.zeros(size)

    def loglik(t: np.ndarray) -> float:
        d = t[:, None] - t[None, :]
        # log sigmoid(d), stable for large |d|
        return float(np.sum(score * -np.logaddexp(0.0, -d)))

    current = loglik(theta)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))
        grad = wins - (games * p).sum(axis=1)
        w = games * p * (1.0 - p)
        hess = np.diag(w.sum(axis=1)) - w  # minus the Hessian: a weighted graph Laplacian
        g, h = grad[free], hess[np.ix_(free, free)]
        try:
            step = np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            raise ValueError(NO_FIT) from None
        # Backtracking keeps each step an ascent (full Newton steps can overshoot far out).
        scale = 1.0
        while True:
            trial = theta.copy()
            trial[free] += scale * step
            value = loglik(trial)
            if value >= current - 1e-12 or scale < 1e-6:
                break
            scale *= 0.5
        theta, current = trial, value
        if np.max(np.abs(scale * step)) < tol:
            return theta
    raise ValueError(f"{NO_FIT} (no convergence in {max_iter} Newton steps)")


def elo_difference(wins: float, draws: float, losses: float, prior_draws: float = 1.0) -> float:
    """How many Elo points a player is above its opponent by one head-to-head result (with the
    same weak prior as :func:`elo_ratings`: finite for a clean sweep)."""
    ratings = elo_ratings([("a", "b", wins, draws, losses)], anchor="b", prior_draws=prior_draws)
    return ratings["a"]
