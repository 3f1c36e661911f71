"""Deterministic evaluation of an actor: one episode in each of ``episodes`` env copies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wheeler2.agent import Agent
from wheeler2.env import EnvStep, VecEnv, policy_obs
from wheeler2.task import RewardHeads, evaluating


@dataclass
class EvalResult:
    mean_return: float
    std_return: float
    success: float | None  # fraction of episodes that ended in success, when the env reports it
    returns: list[float]
    # Per reward head, when the agent answers head_values: {"q": mean Q_h(s0, pi(s0)),
    # "return": mean discounted return of head h from s0, "error": q - return}.
    heads: dict[str, dict[str, float]] | None = None
    # Turn-based games: head-to-head figures, e.g. {"vs_random/win": 0.93, "elo": 480.0}.
    matches: dict[str, float] | None = None


@dataclass
class Tally:
    """Games of a turn-based game from the evaluated seat's side, overall and per seat."""

    wins: int = 0
    draws: int = 0
    losses: int = 0
    by_seat: dict[str, list[int]] | None = None  # "first" / "second" -> [wins, draws, losses]

    def add(self, seat: str, outcome: float) -> None:
        k = 0 if outcome > 0 else 1 if outcome == 0 else 2
        self.wins += k == 0
        self.draws += k == 1
        self.losses += k == 2
        if self.by_seat is None:
            self.by_seat = {}
        self.by_seat.setdefault(seat, [0, 0, 0])[k] += 1

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def merge(self, other: Tally) -> None:
        self.wins, self.draws = self.wins + other.wins, self.draws + other.draws
        self.losses += other.losses
        for seat, wdl in (other.by_seat or {}).items():
            if self.by_seat is None:
                self.by_seat = {}
            mine = self.by_seat.setdefault(seat, [0, 0, 0])
            for k in range(3):
                mine[k] += wdl[k]

    def figures(self, prefix: str) -> dict[str, float]:
        n = max(self.games, 1)
        out = {
            f"{prefix}/win": self.wins / n,
            f"{prefix}/draw": self.draws / n,
            f"{prefix}/loss": self.losses / n,
        }
        for place, wdl in (self.by_seat or {}).items():
            games = max(sum(wdl), 1)
            out[f"{prefix}/win_{place}"] = wdl[0] / games
            out[f"{prefix}/nonloss_{place}"] = (wdl[0] + wdl[1]) / games
        return out


def tally(env: Any, result: EvalResult) -> Tally:
    """W/D/L of an :func:`evaluate` run on a turn-based env: copy ``c`` played its first
    episode in seat ``seats[c % len(seats)]`` (envs/turns.py). Seats are named by when they
    move: "first", "second", then "seat<k>" (the env's order of agents)."""
    seats = list(env.seats)
    order = list(getattr(env, "possible_agents", seats))
    names = {0: "first", 1: "second"}
    out = Tally()
    for c, ret in enumerate(result.returns):
        k = order.index(seats[c % len(seats)])
        out.add(names.get(k, f"seat{k}"), ret)
    return out


def evaluate(
    agent: Agent,
    env: VecEnv,
    seed: int,
    heads: RewardHeads | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> EvalResult:
    """Run exactly one episode per copy of ``env`` with ``explore=False``.

    With ``heads`` and an agent that has the optional ``head_values(obs) -> [N, H]`` method
    (Q_h(s, pi(s)) per head; DDPG and TD3 have it), each head's value at the first state is
    also held against that head's discounted return over the episode (``EvalResult.heads``).

    An agent with the optional ``begin_eval()`` method is told first (A3C takes the shared
    parameters it will play). Copies run side by side so the actor sees one batch per step; a
    copy that finished keeps being stepped (autoreset) but its later episodes are ignored,
    which keeps the batch shape fixed and the result independent of episode lengths.

    ``heartbeat`` is called after every vector step: a member's eval of long episodes or a
    slow env can outlast ``heartbeat_s``, and a member silent that long is declared hung.
    """
    n = env.num_envs
    begin = getattr(agent, "begin_eval", None)
    if callable(begin):  # an agent that plays a snapshot (A3C's shared theta) takes it now
        begin()
    first = env.reset(seed=seed)
    obs, dg = first.obs, first.desired_goal
    returns = np.zeros(n, np.float64)
    finished = np.zeros(n, bool)
    success = np.full(n, np.nan)
    # Recurrent agents: one state row per copy, as in training. A copy's later episodes are
    # ignored, so its state needs no reset at its episode end.
    state = agent.initial_state(n) if getattr(agent, "state_dim", 0) > 0 else None
    check = _HeadValueCheck.start(agent, heads, policy_obs(obs, dg))
    while not finished.all():
        if state is None:
            out = agent.act(policy_obs(obs, dg), explore=False)
        else:
            out = agent.act(policy_obs(obs, dg), explore=False, state=state)
            state = out.state
        st = env.step(out.action)
        returns[~finished] += st.reward[~finished]
        if check is not None:
            check.add(obs, out.action, st, ~finished)
        done = (st.terminated | st.truncated) & ~finished
        for i in np.flatnonzero(done):
            flag = st.infos[i].get("is_success") if isinstance(st.infos[i], dict) else None
            if flag is not None:
                success[i] = float(flag)
        finished |= done
        obs, dg = st.obs, st.desired_goal
        if heartbeat is not None:
            heartbeat()
    known = success[~np.isnan(success)]
    return EvalResult(
        mean_return=float(returns.mean()),
        std_return=float(returns.std()),
        success=float(known.mean()) if known.size else None,
        returns=[float(r) for r in returns],
        heads=None if check is None else check.result(),
    )


class _HeadValueCheck:
    """Per head: Q_h(s0, pi(s0)) against sum_t gamma^t r_h,t of the same eval episode.

    gamma is the one the agent declares (``Agent.needs``); an episode cut by a time limit leaves
    out its tail (gamma^T of it), which is small next to the return for the horizons we run.
    """

    def __init__(self, heads: RewardHeads, q0: np.ndarray, gamma: float) -> None:
        self.heads, self.q0, self.gamma = heads, q0, gamma
        self.ret = np.zeros_like(q0, dtype=np.float64)
        self.disc = np.ones(len(q0), np.float64)

    @classmethod
    def start(
        cls, agent: Agent, heads: RewardHeads | None, obs: np.ndarray
    ) -> _HeadValueCheck | None:
        query = getattr(agent, "head_values", None)
        needs = getattr(type(agent), "needs", None)
        gamma = None if needs is None else needs(getattr(agent, "params", None)).gamma
        if heads is None or query is None or gamma is None:
            return None
        return cls(heads, np.asarray(query(obs), np.float64), float(gamma))

    def add(self, obs: np.ndarray, action: Any, st: EnvStep, live: np.ndarray) -> None:
        with evaluating():
            r = self.heads.compute(
                obs,
                action,
                st.final_obs,
                st.final_achieved_goal,
                st.final_desired_goal,
                st.infos,
                st.reward,
            )
        self.ret[live] += self.disc[live, None] * r[live]
        self.disc[live] *= self.gamma

    def result(self) -> dict[str, dict[str, float]]:
        q, ret = self.q0.mean(0), self.ret.mean(0)
        return {
            name: {"q": float(q[j]), "return": float(ret[j]), "error": float(q[j] - ret[j])}
            for j, name in enumerate(self.heads.names)
        }
