"""Who drives the agents a member does not own (docs/envs.md, "Agents that meet").

* **Other tables** (``[play] joint``): each table's policy, pulled through the weight transport
  every ``pull_every`` of the member's env steps, drives that table's agents in the member's
  copies, acting as it is evaluated (no exploration: a fresh copy of another algorithm has no
  exploration schedule of its own, and each table explores in its own copies). Their steps go
  into that table's replay when it has one. An on-policy table takes nothing from copies it does
  not own: PPO / A2C / PG learn from rollouts of the policy they are updating, and these steps
  come from a snapshot up to ``pull_every`` steps stale; their own copies already give them
  fresh on-policy data, and importance-corrected off-policy rollouts (V-trace) would be another
  algorithm.
* **The member's own pool** (self-play): in a turn-based game whose seats the member's table
  claims more than once, the seats it does not play face the table's own policy: the current
  one (``opponents = "latest"``) or a snapshot from an :class:`OpponentPool`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.env import GroupStep, legal_actions, random_legal
from wheeler2.runtime.evaluation import EvalResult, Tally, evaluate, tally
from wheeler2.runtime.parts import make_agent, space_info
from wheeler2.runtime.plan import MemberPlan, learner_plan, plan_team
from wheeler2.runtime.protocols import ReplayTable, ReplayWriter, WeightSource
from wheeler2.runtime.seeds import DRIVERS_SEED_OFFSET, OPPONENT_POOL_SEED_OFFSET, agent_seed
from wheeler2.sync import obs_stats, pull_target, sync_target
from wheeler2.task import Head, RewardHeads

if TYPE_CHECKING:
    from wheeler2.config import Config

RANDOM = -2  # an opponent index: the uniformly random player ([play] random_share)
# An opponent index: a snapshot that left the pool while a game against it was on. The current
# policy finishes that game, and its result is credited to no snapshot (not to the one that
# took the index over).
RETIRED = -3
SELF = "self"  # envs/turns.py's group of the member's own seats it is not playing
POOL_KEY = "opponent_pool"  # the pool's entry in a member's checkpointed state


@dataclass
class OtherTable:
    """What a backend hands a member about another table of the run, for joint play."""

    source: Callable[[nn.Module], WeightSource]  # pulls that table's published policy into it
    replay: ReplayTable | None  # where its agents' steps go; None: an on-policy table


@dataclass
class Snapshot:
    updates: int  # the learner's updates when it was taken
    weights: dict[str, torch.Tensor]
    wins: float = 0.0
    games: float = 0.0

    def win_rate(self) -> float:
        """The table's score against it, smoothed toward 1/2 so a new snapshot is tried."""
        return (self.wins + 1.0) / (self.games + 2.0)


@dataclass
class OpponentPool:
    """Snapshots of a table's policy that its seats face in self-play.

    ``draw`` picks the opponent of one episode: -1 is the current policy ("latest", and always
    a candidate, so the pool never holds the table back from its own level); "uniform" draws
    among snapshots and the current policy alike; "win_rate" weights each by how often it still
    beats the table, ``(1 - score)^2`` (prioritized fictitious self-play, Vinyals et al. 2019:
    games go where they teach).
    """

    size: int
    every: int
    sampling: str
    seed: int
    random_share: float = 0.0
    snapshots: list[Snapshot] = field(default_factory=list)
    next_at: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.current = Snapshot(updates=-1, weights={})  # the live policy's record
        self.random = Snapshot(updates=-1, weights={})  # the random player's record

    def maybe_snapshot(self, module: nn.Module, updates: int) -> bool:
        if updates < self.next_at:
            return False
        self.next_at = updates + self.every
        state = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        self.snapshots.append(Snapshot(updates, state))
        del self.snapshots[: max(0, len(self.snapshots) - self.size)]
        return True

    def draw(self) -> int:
        if self.random_share and self.rng.random() < self.random_share:
            return RANDOM
        if self.sampling == "latest" or not self.snapshots:
            return -1
        candidates = [*self.snapshots, self.current]
        if self.sampling == "uniform":
            k = int(self.rng.integers(len(candidates)))
        else:
            w = np.array([(1.0 - s.win_rate()) ** 2 for s in candidates]) + 1e-3
            k = int(self.rng.choice(len(candidates), p=w / w.sum()))
        return -1 if k == len(self.snapshots) else k

    def snapshot(self, index: int) -> Snapshot:
        if index == RANDOM:
            return self.random
        return self.current if index < 0 else self.snapshots[index]

    def result(self, index: int, outcome: float) -> None:
        """The table's result in one game against opponent ``index`` (> 0 won, 0 drawn)."""
        s = self.snapshot(index)
        s.games += 1.0
        s.wins += 1.0 if outcome > 0 else 0.5 if outcome == 0 else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "snapshots": [
                {"updates": s.updates, "weights": s.weights, "wins": s.wins, "games": s.games}
                for s in self.snapshots
            ],
            "next_at": self.next_at,
            "rng": self.rng.bit_generator.state,
            # The live policy's record is a "win_rate" candidate like the snapshots'.
            "current": [self.current.wins, self.current.games],
            "random": [self.random.wins, self.random.games],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.snapshots = [Snapshot(**s) for s in state["snapshots"]]
        self.next_at = int(state["next_at"])
        self.rng.bit_generator.state = state["rng"]
        # Pools saved before these records were kept start them afresh.
        for record, key in ((self.current, "current"), (self.random, "random")):
            record.wins, record.games = (float(x) for x in state.get(key, (0.0, 0.0)))


class _Recorder:
    """Steps that a member drove, into the replay of the table they belong to."""

    def __init__(self, writer: ReplayWriter) -> None:
        self.writer = writer
        self.no_logp: np.ndarray | None = None

    def add(self, step: GroupStep, valid: np.ndarray) -> None:
        logp = None
        if self.writer.layout.logp:  # a deterministic drive has no behaviour probability
            if self.no_logp is None or len(self.no_logp) != len(valid):
                self.no_logp = np.full(len(valid), np.nan, np.float32)
            logp = self.no_logp
        self.writer.add(
            step.obs,
            step.action,
            step.reward[:, None],
            step.final_obs,
            step.terminated,
            step.truncated,
            logp=logp,
            valid=valid,
        )


class _Driven:
    """Another table's agents in this member's copies: its policy, kept fresh, and its writer."""

    def __init__(self, agent: Agent, source: WeightSource, writer: ReplayWriter | None) -> None:
        self.agent = agent
        self.source = source
        self.writer = writer
        self.recorder = None if writer is None else _Recorder(writer)
        self.steps = 0

    def record(self, step: GroupStep) -> None:
        self.steps += int(step.valid.sum())
        if self.recorder is not None:
            self.recorder.add(step, step.valid)


class Drivers:
    """The member's :class:`~wheeler2.env.OtherAgents`: other tables and its own pool."""

    def __init__(
        self,
        own: Agent,
        tables: dict[str, _Driven],
        pool: OpponentPool | None,
        opponent: Agent | None,
        copies: int,
        act_dim: int = 0,
        epsilon: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.own = own
        self.act_dim = act_dim
        self.epsilon = epsilon  # self-play opponents' share of uniformly random moves
        self.rng = np.random.default_rng(seed)  # random opponents' and epsilon moves
        self.tables = tables
        self.pool = pool
        self.opponent = opponent  # the agent a snapshot is loaded into to play
        # Snapshots are of the actor *and* its observation statistics (sync_target): weights
        # trained on normalized inputs play as the table did only with the statistics of then.
        self._opponent_module = None if opponent is None else _frozen_target(opponent)
        self._loaded = -2
        self.facing = np.full(copies, -1, np.int64)  # each copy's opponent this episode
        if pool is not None:
            self.facing[:] = [pool.draw() for _ in range(copies)]
        self.results: list[tuple[int, float]] = []  # (opponent, outcome) since last figures()
        # [play] record_opponents: the own opponents' moves (not the random player's) go into
        # the table's replay too; set by build_drivers.
        self.own_recorder: _Recorder | None = None
        # Negamax plies: the random player's moves are valid samples too (no return follows
        # the behaviour of whoever moved).
        self.record_random = False
        self.recorded = 0

    # -- OtherAgents --
    def act(self, group: str, obs: np.ndarray) -> np.ndarray:
        if group != SELF:
            return self.tables[group].agent.act(obs, explore=False).action
        rows_per_copy = len(obs) // len(self.facing)
        out = np.zeros(len(obs), np.int64)
        facing = np.repeat(self.facing, rows_per_copy)
        for index in np.unique(facing):
            rows = np.flatnonzero(facing == index)
            if index == RANDOM:
                out[rows] = random_legal_rows(obs[rows], self.act_dim, self.rng)
            else:
                out[rows] = self._policy(int(index)).act(obs[rows], explore=False).action
        if self.epsilon > 0:
            # A deterministic opponent shows the table one line of play per opening it likes;
            # a random move now and then opens the lines a strong player may choose.
            odd = self.rng.random(len(out)) < self.epsilon
            if odd.any():
                out[odd] = random_legal_rows(obs[odd], self.act_dim, self.rng)
        return out

    def record(self, group: str, step: GroupStep) -> None:
        if group == SELF:
            if self.own_recorder is not None:
                self._record_own(self.own_recorder, step)
            return
        driven = self.tables.get(group)
        if driven is not None:
            driven.record(step)

    def _record_own(self, own: _Recorder, step: GroupStep) -> None:
        """An opponent that is the table itself (now or a snapshot) made a move whose outcome
        the table can learn from like its own: the observations are the mover's view, so one
        Q-function serves both. The random player's moves are left out unless the steps are
        negamax plies: an n-step return that follows them would value the next moves as random
        play."""
        rows_per_copy = len(step.valid) // len(self.facing)
        keep = step.valid
        if not self.record_random:
            keep = keep & (np.repeat(self.facing, rows_per_copy) != RANDOM)
        if not keep.any():
            return
        self.recorded += int(keep.sum())
        own.add(step, keep)

    def episode_ended(self, copy: int, outcome: float) -> None:
        if self.pool is None:
            return
        index = int(self.facing[copy])
        if index != RETIRED:
            self.pool.result(index, outcome)
        self.results.append((index, outcome))
        self.facing[copy] = self.pool.draw()

    # --
    def _policy(self, index: int) -> Agent:
        if index < 0 or self.pool is None or self.opponent is None:
            return self.own
        return self.load_snapshot(index)

    def load_snapshot(self, index: int) -> Agent:
        """The opponent agent, playing snapshot ``index`` of the pool."""
        assert self.pool is not None and self.opponent is not None
        if index != self._loaded:
            assert self._opponent_module is not None
            self._opponent_module.load_state_dict(self.pool.snapshots[index].weights)
            self._loaded = index
        return self.opponent

    def after_update(self, updates: int) -> None:
        """Snapshot the member's policy when due (self-play)."""
        pool = self.pool
        if pool is None:
            return
        before = len(pool.snapshots)
        if not pool.maybe_snapshot(sync_target(self.own), updates):
            return
        self._loaded = -2
        dropped = before + 1 - len(pool.snapshots)
        if dropped:
            # The kept snapshots' indices shifted down: each copy's game goes on against the
            # opponent it drew (and is scored to it), not the one now at its old index.
            drawn = self.facing >= 0
            self.facing[drawn] -= dropped
            self.facing[drawn & (self.facing < 0)] = RETIRED

    def pull(self) -> None:
        for driven in self.tables.values():
            driven.source.pull()

    def figures(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, driven in self.tables.items():
            out[f"driven/{name}/steps"] = float(driven.steps)
            if driven.source.version:
                out[f"driven/{name}/sync_version_lag"] = float(driven.source.lag())
        if self.own_recorder is not None:
            out["pool/recorded"] = float(self.recorded)
        if self.pool is not None:
            out["pool/size"] = float(len(self.pool.snapshots))
            if self.results:
                score = [1.0 if o > 0 else 0.5 if o == 0 else 0.0 for _, o in self.results]
                out["pool/score"] = float(np.mean(score))
                self.results.clear()
        return out

    def flush(self) -> None:
        for driven in self.tables.values():
            if driven.writer is not None:
                driven.writer.flush()
        if self.own_recorder is not None:
            self.own_recorder.writer.flush()

    def close(self) -> None:
        for driven in self.tables.values():
            driven.source.close()


class EvalDrivers:
    """Drivers for an eval env: other tables act as in training (``drivers``; None: at random
    too), nothing is recorded, and the member's own other seats play ``opponent`` (None:
    uniformly among legal actions)."""

    def __init__(
        self, drivers: Drivers | None, opponent: Agent | None, act_dim: int, seed: int
    ) -> None:
        self.drivers = drivers
        self.opponent = opponent
        self.act_dim = act_dim
        self.rng = np.random.default_rng(agent_seed(seed))  # ``seed``: the eval env's

    def act(self, group: str, obs: np.ndarray) -> np.ndarray:
        if group != SELF and self.drivers is not None:
            return self.drivers.tables[group].agent.act(obs, explore=False).action
        if self.opponent is not None:
            return self.opponent.act(obs, explore=False).action
        return random_legal_rows(obs, self.act_dim, self.rng)

    def record(self, group: str, step: GroupStep) -> None:
        pass

    def episode_ended(self, copy: int, outcome: float) -> None:
        pass


def _frozen_target(opponent: Agent) -> nn.Module:
    """Where a snapshot is loaded to play: the opponent's :func:`sync_target`, its normalizer
    (if any) set to act with the loaded statistics alone."""
    stats = obs_stats(opponent)
    if stats is not None:
        cast(Any, stats).follow = True
    return sync_target(opponent)


def random_legal_rows(obs: np.ndarray, act_dim: int, rng: np.random.Generator) -> np.ndarray:
    """One uniformly drawn legal action per masked row (the mask in the last ``act_dim``
    columns; a row without a legal action draws among all)."""
    return random_legal(rng, legal_actions(obs, act_dim))


def driven_groups(config: Config, plan: MemberPlan) -> dict[str, tuple[str, ...]]:
    """With ``[play] joint``: the agent globs of every table but ``plan``'s, for the env adapter
    (``groups``); empty otherwise."""
    if not config.play.joint:
        return {}
    out: dict[str, list[str]] = {}
    for spec in config.team:
        if spec.table != plan.spec.table and spec.agents:
            out.setdefault(spec.table, []).extend(spec.agents)
    return {t: tuple(dict.fromkeys(g)) for t, g in out.items()}


def build_drivers(
    config: Config,
    plan: MemberPlan,
    env: Any,
    agent: Agent,
    space: SpaceInfo,
    others: dict[str, OtherTable],
    seed: int,
    pool_state: dict[str, Any] | None = None,
    replay: ReplayTable | None = None,
) -> Drivers | None:
    """The member's drivers for the groups its env adapter reports (None: it has none);
    ``replay``: the member's table's, where ``[play] record_opponents`` sends its own
    opponents' moves."""
    groups = getattr(env, "groups", None)
    if not groups:
        return None
    plans = plan_team(config)
    env_only = RewardHeads([Head("env", 1.0, None)], None)
    tables: dict[str, _Driven] = {}
    for name, group in groups.items():
        if name == SELF:
            continue
        other = others.get(name)
        if other is None:
            raise RuntimeError(f"{plan.name}: no weights of table {name!r} reach this member")
        lead = learner_plan([p for p in plans if p.spec.table == name])
        driven = make_agent(config, lead, space_info(group.info, env_only), seed)
        source = other.source(pull_target(driven))
        source.pull()
        writer = None
        if other.replay is not None:
            writer = other.replay.writer(num_envs=len(group.obs), block=False)
        tables[name] = _Driven(driven, source, writer)
    pool = opponent = None
    play = config.play
    if SELF in groups and (play.opponents != "latest" or play.random_share > 0):
        pool = OpponentPool(
            play.pool_size,
            play.snapshot_every,
            play.opponents,
            agent_seed(seed) + OPPONENT_POOL_SEED_OFFSET,
            play.random_share,
        )
        if pool_state is not None:
            pool.load_state_dict(pool_state)
        opponent = make_agent(config, plan, space, seed)
    epsilon = play.opponent_epsilon if SELF in groups else 0.0
    if SELF in groups:
        env.random_opening = int(play.random_opening)
        env.random_opening_min = play.random_opening_min
        env.random_start = int(play.random_start)
        env.plies = bool(play.negamax)
    copies, act_dim = int(env.num_copies), space.act_dim
    drivers_seed = agent_seed(seed) + DRIVERS_SEED_OFFSET
    drivers = Drivers(agent, tables, pool, opponent, copies, act_dim, epsilon, drivers_seed)
    if SELF in groups and play.record_opponents and replay is not None:
        drivers.own_recorder = _Recorder(replay.writer(num_envs=len(groups[SELF].obs), block=False))
        drivers.record_random = bool(play.negamax)
    return drivers


def match_figures(
    agent: Agent,
    env: Any,
    drivers: Drivers | None,
    eval_vs: tuple[str, ...],
    main: EvalResult,
    seed: int,
) -> dict[str, float]:
    """Head-to-head figures of a turn-based game (``[play] eval_vs``): W/D/L against each kind
    of opponent, overall and per seat, and an Elo-style rating of ``agent`` with the random
    player at 0, fitted over all those games. ``main`` is the eval already run on ``env``: it
    faced random seats, or the other tables where they claim seats (joint play). ``env``'s
    drivers are replaced while it plays; the caller puts its own back."""
    from wheeler2.rating import elo_ratings

    joint = bool(getattr(env, "groups", {}).keys() - {SELF})
    act_dim = env.info.act_dim
    out: dict[str, float] = {}
    games: list[tuple[str, str, int, int, int]] = []

    def count(name: str, t: Tally) -> None:
        out.update(t.figures(f"vs_{name}"))
        games.append(("current", name, t.wins, t.draws, t.losses))

    for kind in eval_vs:
        if kind == "tables" and joint:
            count("tables", tally(env, main))
        elif kind == "random":
            if joint:  # the run's own eval met the tables: play random seats instead
                env.attach_others(EvalDrivers(None, None, act_dim, seed))
                count("random", tally(env, evaluate(agent, env, seed)))
            else:
                count("random", tally(env, main))
        elif kind == "pool" and drivers is not None and drivers.pool is not None:
            total = Tally()
            for index in range(len(drivers.pool.snapshots)):
                opponent = drivers.load_snapshot(index)
                env.attach_others(EvalDrivers(drivers, opponent, act_dim, seed))
                t = tally(env, evaluate(agent, env, seed))
                total.merge(t)
                games.append(("current", f"snapshot{index}", t.wins, t.draws, t.losses))
            if total.games:
                out.update(total.figures("vs_pool"))
    if any(g[1] == "random" for g in games):
        out["elo"] = elo_ratings(games, anchor="random")["current"]
    return out
