"""Whole episodes of a PettingZoo env with every agent driven by a policy: evaluation where
agents meet (``wheeler2 eval RUN --vs RUN2|random``).

A policy is ``policy(rows) -> actions``: ``rows`` float32 ``[N, D]`` are what training feeds
the agent (``envs/spaces.py``: masked rows, observation then legal mask, for turn-based games;
the flat observation otherwise), actions are what an agent's ``act`` returns: int64 ``[N]``
(0-based) for Discrete, ``[N, act_dim]`` in ``[-1, 1]`` for a Box, scaled onto it here as the
adapters do (``scale_box_action``). A discrete action outside the space or against the mask
raises :class:`IllegalAction` naming the agent: it never reaches the env (PettingZoo's classic
games would end the game with a penalty instead, a silent loss).

Which API: the classic games and modules with only ``env()`` are played turn by turn (AEC),
everything else through ``parallel_env()`` (MPE2, SISL), as the training adapters build them.
Rewards per episode are each agent's total: for AEC games the sum of what ``last()`` reports
at each of its turns (PettingZoo's reward since the agent last acted), for the Parallel API the
sum of its step rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces
from wheeler2.envs.pettingzoo import import_env_module
from wheeler2.envs.players import random_box_player, random_player
from wheeler2.envs.spaces import (
    ObsFlattener,
    box_bounds,
    encode_masked,
    is_masked_space,
    masked_obs_dim,
    scale_box_action,
)

from wheeler2.rating import elo_difference

Policy = Callable[[np.ndarray], np.ndarray]
Side = Policy | Mapping[str, Policy]  # one policy for every seat, or one per seat
# [env] kwargs the wheeler2 adapters take out before the rest reaches the env's constructor.
ADAPTER_OPTIONS = ("agents", "reward_mode", "other_policy")
RANDOM = "random"


class IllegalAction(ValueError):
    """A policy chose an action the env does not allow at that moment."""


def game_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``[env] kwargs`` without the adapters' own options: what the env's constructor takes."""
    return {k: v for k, v in (kwargs or {}).items() if k not in ADAPTER_OPTIONS}


def is_turn_based(module: Any) -> bool:
    """Played through the AEC API: a classic game, or a module without ``parallel_env``."""
    return module.__name__.startswith("pettingzoo.classic.") or not hasattr(module, "parallel_env")


class _Agent:
    """How one agent's observations become rows and its policy's actions env actions."""

    def __init__(self, env_id: str, name: str, obs_space: spaces.Space, act_space: spaces.Space):
        self.name = name
        self.observation_space, self.action_space = obs_space, act_space
        self.masked = is_masked_space(obs_space)
        if self.masked:
            self.obs_dim = masked_obs_dim(obs_space)
            self._encode: Callable[[Any, np.ndarray], None] = encode_masked
        else:
            flattener = ObsFlattener(obs_space)
            self.obs_dim, self._encode = flattener.dim, flattener
        if isinstance(act_space, spaces.Discrete):
            self.discrete, self.act_dim = True, int(act_space.n)
            self._start = int(act_space.start)
        elif isinstance(act_space, spaces.Box):
            self.discrete, self.act_dim = False, int(np.prod(act_space.shape))
            self._low, self._high = box_bounds(env_id, act_space)
        else:
            raise TypeError(f"{env_id}: {name}'s action space {act_space} is not Discrete or Box")

    def row(self, raw: Any) -> np.ndarray:
        out = np.zeros(self.obs_dim, np.float32)
        self._encode(raw, out)
        return out

    def env_action(self, action: Any, raw: Any) -> Any:
        """The policy's action as the env takes it, or :class:`IllegalAction`."""
        if not self.discrete:
            a = np.asarray(action, np.float64).reshape(-1)
            if a.shape != (self.act_dim,) or not np.all(np.isfinite(a)):
                raise IllegalAction(
                    f"{self.name}: action {action!r} is not {self.act_dim} finite numbers"
                )
            box = self.action_space
            return (
                scale_box_action(a, self._low, self._high)[0].reshape(box.shape).astype(box.dtype)
            )
        value = np.asarray(action, np.float64).reshape(-1)
        if value.size != 1 or not np.isfinite(value[0]) or value[0] != np.round(value[0]):
            raise IllegalAction(f"{self.name}: action {action!r} is not one integer")
        k = int(value[0])
        if not 0 <= k < self.act_dim:
            raise IllegalAction(
                f"{self.name}: action {k} is outside its space (0..{self.act_dim - 1})"
            )
        if self.masked:
            mask = np.asarray(raw["action_mask"]).reshape(-1)
            if not mask[k]:
                legal = np.flatnonzero(mask).tolist()
                raise IllegalAction(
                    f"{self.name}: illegal action {k}; its legal actions are {legal}"
                )
        return k + self._start


class Game:
    """One raw PettingZoo env of ``env_id`` (``pettingzoo:<module path>``), played episode by
    episode with a driver per agent."""

    def __init__(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> None:
        path = env_id.removeprefix("pettingzoo:")
        self.env_id = f"pettingzoo:{path}"
        module = import_env_module(path)
        self.turn_based = is_turn_based(module)
        factory = module.env if self.turn_based else module.parallel_env
        self.env = factory(**game_kwargs(kwargs))
        self.agent_names = list(self.env.possible_agents)
        self.agents = {
            a: _Agent(self.env_id, a, self.env.observation_space(a), self.env.action_space(a))
            for a in self.agent_names
        }

    def close(self) -> None:
        self.env.close()

    def check_drivers(self, drivers: Mapping[str, Policy]) -> None:
        missing = [a for a in self.agent_names if a not in drivers]
        unknown = [a for a in drivers if a not in self.agents]
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"no driver for {missing}")
            if unknown:
                problems.append(f"drivers for agents it does not have: {unknown}")
            raise ValueError(
                f"{self.env_id}: {'; '.join(problems)} (its agents: {self.agent_names})"
            )

    def _act(self, policy: Policy, names: list[str], rows: np.ndarray) -> np.ndarray:
        out = np.asarray(policy(rows))
        if len(out) != len(rows):
            raise ValueError(
                f"the policy of {names} answered {len(out)} actions for {len(rows)} rows"
            )
        return out

    def episode(self, drivers: Mapping[str, Policy], seed: int | None) -> dict[str, float]:
        """One whole episode; each agent's total reward."""
        if self.turn_based:
            return self._aec_episode(drivers, seed)
        return self._parallel_episode(drivers, seed)

    def _aec_episode(self, drivers: Mapping[str, Policy], seed: int | None) -> dict[str, float]:
        env = self.env
        env.reset(seed=seed)
        total = dict.fromkeys(self.agent_names, 0.0)
        for name in env.agent_iter():
            raw, reward, terminated, truncated, _ = env.last()
            total[name] += float(reward)
            if terminated or truncated:
                env.step(None)  # PettingZoo's "dead step" of an agent whose game is over
                continue
            agent = self.agents[name]
            action = self._act(drivers[name], [name], agent.row(raw)[None, :])[0]
            env.step(agent.env_action(action, raw))
        return total

    def _parallel_episode(
        self, drivers: Mapping[str, Policy], seed: int | None
    ) -> dict[str, float]:
        env = self.env
        raw, _ = env.reset(seed=seed)
        total = dict.fromkeys(self.agent_names, 0.0)
        while env.agents:
            live = [a for a in env.agents if a in raw]
            # One call per policy and row width: a table's agents act as one batch, as in
            # training, and a policy driving unlike agents gets each kind apart.
            batches: dict[tuple[int, int], list[str]] = {}
            for name in live:
                key = (id(drivers[name]), self.agents[name].obs_dim)
                batches.setdefault(key, []).append(name)
            actions = {}
            for names in batches.values():
                rows = np.stack([self.agents[a].row(raw[a]) for a in names])
                chosen = self._act(drivers[names[0]], names, rows)
                for a, action in zip(names, chosen, strict=True):
                    actions[a] = self.agents[a].env_action(action, raw[a])
            raw, rewards, _, _, _ = env.step(actions)
            for name, r in rewards.items():
                total[name] += float(r)
        return total

    def random_driver(self, name: str, seed: int) -> Policy:
        """Uniformly random play for agent ``name``: over its legal actions, or its Box."""
        agent = self.agents[name]
        if agent.discrete:
            return random_player(agent.act_dim, seed, masked=agent.masked)
        return random_box_player(agent.act_dim, seed)


def play(
    env_id: str,
    kwargs: Mapping[str, Any] | None,
    drivers: Mapping[str, Policy],
    episodes: int,
    seed: int | None = 0,
) -> list[dict[str, float]]:
    """Play ``episodes`` whole episodes of ``env_id`` (``pettingzoo:<module path>``; ``kwargs``
    as in ``[env] kwargs``, the adapters' own options dropped), every agent driven by
    ``drivers[agent]``; episode ``k`` is reset with ``seed + k``. Returns each episode's total
    reward per agent."""
    game = Game(env_id, kwargs)
    try:
        game.check_drivers(drivers)
        return [game.episode(drivers, None if seed is None else seed + k) for k in range(episodes)]
    finally:
        game.close()


# -- two players, both seats ------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """Wins, draws and losses from one player's side."""

    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """Points per game, a draw half a point (nan before any game)."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else float("nan")

    def __add__(self, other: Record) -> Record:
        return Record(self.wins + other.wins, self.draws + other.draws, self.losses + other.losses)

    def counted(self, outcome: float) -> Record:
        """This record with one more game, won when ``outcome > 0``, drawn when 0."""
        if outcome > 0:
            return Record(self.wins + 1, self.draws, self.losses)
        if outcome < 0:
            return Record(self.wins, self.draws, self.losses + 1)
        return Record(self.wins, self.draws + 1, self.losses)

    def __str__(self) -> str:
        return f"W {self.wins:>3}  D {self.draws:>3}  L {self.losses:>3}"


@dataclass(frozen=True)
class HeadToHead:
    """A head-to-head result from player a's side, in total and per seat a sat in."""

    seats: tuple[str, str]  # the agents of the first and second seat
    first: Record  # the games a played in the first seat
    second: Record  # ... and in the second

    @property
    def overall(self) -> Record:
        return self.first + self.second

    @property
    def wins(self) -> int:
        return self.overall.wins

    @property
    def draws(self) -> int:
        return self.overall.draws

    @property
    def losses(self) -> int:
        return self.overall.losses

    @property
    def games(self) -> int:
        return self.overall.games


def _seat_policy(side: Side, seat: str, who: str) -> Policy:
    if isinstance(side, Mapping):
        if seat not in side:
            raise ValueError(f"player {who} has no policy for seat {seat} (it has {list(side)})")
        return side[seat]
    return side


def head_to_head(
    env_id: str,
    kwargs: Mapping[str, Any] | None,
    a: Side,
    b: Side,
    episodes: int,
    seed: int | None = 0,
) -> HeadToHead:
    """``a`` against ``b`` in a two-player zero-sum game, ``episodes`` games: ``a`` takes the
    first seat (``possible_agents[0]``, the one to move first in PettingZoo's classic games) in
    the even-numbered games and the second in the odd ones, so each side plays half its games
    in each seat (the extra game of an odd count goes to the first). Games ``2j`` and ``2j + 1``
    are reset with the same seed, ``seed + j``: the pair differs only in who sits where. A game
    is a's win, draw or loss by the sign of a's total reward. ``a`` and ``b`` are each a policy
    for either seat or a mapping from seat to policy."""
    game = Game(env_id, kwargs)
    try:
        return _head_to_head(game, a, b, episodes, seed)
    finally:
        game.close()


def _head_to_head(game: Game, a: Side, b: Side, episodes: int, seed: int | None) -> HeadToHead:
    if len(game.agent_names) != 2:
        raise ValueError(
            f"{game.env_id}: head-to-head needs a two-player game; its agents are "
            f"{game.agent_names}"
        )
    first, second = game.agent_names
    records = {first: Record(), second: Record()}
    for k in range(episodes):
        a_seat, b_seat = (first, second) if k % 2 == 0 else (second, first)
        drivers = {a_seat: _seat_policy(a, a_seat, "a"), b_seat: _seat_policy(b, b_seat, "b")}
        total = game.episode(drivers, None if seed is None else seed + k // 2)
        records[a_seat] = records[a_seat].counted(total[a_seat])
    return HeadToHead((first, second), records[first], records[second])


# -- runs against runs: the matchmaking behind `wheeler2 eval RUN --vs RUN2|random` ----------------


class Table(Protocol):
    """One table of a run as a player: the agents it claims and its learner's policy."""

    @property
    def name(self) -> str: ...  # how results name it: the learner's [[team]] name

    @property
    def agents(self) -> Sequence[str]: ...  # its agent globs ([[team]] agents)

    def __call__(self, rows: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Contender:
    """A run (its tables) or uniformly random play (``tables`` empty)."""

    name: str
    tables: Sequence[Table] = ()


def claimed(agent_names: Sequence[str], globs: Sequence[str]) -> list[str]:
    """The agents of ``agent_names`` that ``globs`` match, in their order (as the adapters
    match a member's ``agents``)."""
    if isinstance(globs, str):
        globs = [globs]
    return [a for a in agent_names if any(fnmatchcase(a, g) for g in globs)]


def mean_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """The mean of ``values`` and a percentile-bootstrap interval of it at ``level``."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        raise ValueError("no values to average")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(x.size, size=(resamples, x.size))].mean(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return float(x.mean()), float(lo), float(hi)


@dataclass(frozen=True)
class GroupReturn:
    """One group of agents driven by one player: its mean return per agent and episode."""

    label: str
    agents: tuple[str, ...]
    mean: float
    low: float  # the bootstrap 95% interval of the mean, over episodes
    high: float


@dataclass(frozen=True)
class Matchup:
    """One table of the run with its agents, the other agents driven by the opponent."""

    table: str
    groups: tuple[GroupReturn, ...]  # the table's own group first


@dataclass
class Versus:
    """What ``wheeler2 eval RUN --vs ...`` reports: a head-to-head (self-play table, two-player
    game) or, per table of the run, the mean returns of each group of agents."""

    env_id: str
    mine: str
    theirs: str
    episodes: int
    table: str | None = None  # the table that played the head-to-head
    head_to_head: HeadToHead | None = None
    elo: float | None = None  # mine minus theirs, elo_difference of the head-to-head
    matchups: list[Matchup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where a policy came from, when unasked

    def lines(self) -> list[str]:
        return self._lines() + [f"note: {n}" for n in self.notes]

    def _lines(self) -> list[str]:
        if self.head_to_head is not None:
            h = self.head_to_head
            out = [
                f"{self.mine} (table {self.table}) vs {self.theirs}, {self.env_id}: "
                f"{h.games} games, {h.first.games} first and {h.second.games} second"
            ]
            for label, rec in (
                ("overall", h.overall),
                (f"first ({h.seats[0]})", h.first),
                (f"second ({h.seats[1]})", h.second),
            ):
                out.append(f"  {label:<22} {rec}  score {rec.score:.3f}")
            if self.elo is not None:
                out.append(f"  Elo {self.mine} - {self.theirs}: {self.elo:+.0f}")
            return out
        out = []
        for m in self.matchups:
            out.append(
                f"table {m.table} of {self.mine} vs {self.theirs}, {self.env_id}: "
                f"{self.episodes} episodes, mean return per agent [95% interval]"
            )
            width = max(len(g.label) for g in m.groups)
            for g in m.groups:
                out.append(
                    f"  {g.label:<{width}}  {g.mean:10.3f}  [{g.low:.3f}, {g.high:.3f}]  "
                    f"({', '.join(g.agents)})"
                )
        return out


def _driver_of(theirs: Contender, game: Game, agent: str, seed: int) -> tuple[str, Policy]:
    """Who of ``theirs`` drives ``agent``: its first table claiming it, else random play."""
    for t in theirs.tables:
        if agent in claimed(game.agent_names, t.agents):
            return f"{theirs.name}:{t.name}", t
    return RANDOM, game.random_driver(agent, seed + 7919 * (1 + game.agent_names.index(agent)))


def versus(
    env_id: str,
    kwargs: Mapping[str, Any] | None,
    mine: Contender,
    theirs: Contender,
    episodes: int,
    seed: int = 0,
) -> Versus:
    """``mine`` against ``theirs`` (a run, or ``Contender("random")``).

    * A turn-based two-player game where one table of ``mine`` claims both seats (self-play):
      that table plays :func:`head_to_head` against ``theirs``, whose tables claiming each seat
      drive it (random play when ``theirs`` is random); the Elo difference comes with it.
    * Otherwise, for each table of ``mine``: its agents driven by it, every other agent by the
      first table of ``theirs`` that claims it, else at random; the mean return per agent of
      each group over ``episodes`` episodes, with a bootstrap 95% interval.
    """
    game = Game(env_id, kwargs)
    try:
        names = game.agent_names
        result = Versus(game.env_id, mine.name, theirs.name, episodes)
        # A head-to-head (wins, draws, losses, Elo) is for a turn-based two-player game: a
        # cooperative or general-sum two-agent env (multiwalker with two walkers,
        # simple_reference) has no winner, and gets each group's returns below.
        if len(names) == 2 and game.turn_based:
            both = [t for t in mine.tables if claimed(names, t.agents) == names]
            if both:
                b: dict[str, Policy] = {}
                for seat in names:
                    label, b[seat] = _driver_of(theirs, game, seat, seed)
                    if label == RANDOM and theirs.tables:
                        raise ValueError(
                            f"{theirs.name} has no table that plays {seat} of {game.env_id}"
                        )
                h = _head_to_head(game, both[0], b, episodes, seed)
                result.table, result.head_to_head = both[0].name, h
                result.elo = elo_difference(h.wins, h.draws, h.losses)
                return result
        for t in mine.tables:
            own = claimed(names, t.agents)
            if not own:
                continue
            drivers: dict[str, Policy] = dict.fromkeys(own, t)
            label = f"{mine.name}:{t.name}"
            groups: dict[str, list[str]] = {label: own}
            for agent in names:
                if agent not in drivers:
                    other, drivers[agent] = _driver_of(theirs, game, agent, seed)
                    # A run against itself: its other tables are the opponent's, named apart.
                    other = f"{other} (opponent)" if other == label else other
                    groups.setdefault(other, []).append(agent)
            totals = [game.episode(drivers, seed + k) for k in range(episodes)]
            found = []
            for label, agents in groups.items():
                per_episode = [float(np.mean([tot[a] for a in agents])) for tot in totals]
                mean, lo, hi = mean_interval(per_episode, seed=seed)
                found.append(GroupReturn(label, tuple(agents), mean, lo, hi))
            result.matchups.append(Matchup(t.name, tuple(found)))
        if not result.matchups:
            raise ValueError(f"no table of {mine.name} claims an agent of {game.env_id} ({names})")
        return result
    finally:
        game.close()
