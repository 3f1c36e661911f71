"""PettingZoo AEC (turn-based) games as a VecEnv: one row per env copy, the member's *seat*.

Id form as for the Parallel API (``pettingzoo:classic.tictactoe_v3``); ``envs/pettingzoo.py``
hands a module without ``parallel_env`` (or whose observations carry an action mask) here.

* **Seats.** The member's ``agents`` globs name the seats it may take. Copy ``c`` plays episode
  ``e`` in seat ``seats[(c + e) % len(seats)]``, so a table that claims both players of a
  two-player game learns to move first and second alike.
* **A row's transition** runs from the seat's turn to its next turn (or the end of the game):
  everything the other seats do in between is the env's dynamics, and the reward is what the
  seat collected meanwhile (PettingZoo's cumulative reward since it last acted).
* **Other seats** are driven, turn by turn and batched over copies, by ``attach_others``' driver
  under a group name: the table that claims the agent (``groups``), ``"self"`` for the member's
  own seats it is not playing this episode (self-play: the opponent pool), otherwise uniformly
  at random over legal actions. A driven seat's own transitions (turn to turn) go to the
  driver's ``record``, one call per round of moves.
* **Masks.** Observations with an ``action_mask`` become masked rows (``encode_masked``): the
  flat observation, then the mask. An illegal action, the seat's or a driver's, raises: it never
  reaches the env.
* **Negamax plies** (``plies``, set by ``[play] negamax``): each row's step also carries a
  :class:`~wheeler2.env.PlyStep`, the move to the opponent's reply (the opponent's view after
  the move, the move's own reward, whether it ended the game), which is what a negamax table
  learns from; a driven seat of the member's own table records its moves the same way.
* ``infos[i]`` carries ``seat`` on every row and, where the episode ended, ``outcome`` (the
  seat's return: > 0 won, 0 drawn, < 0 lost, for the zero-sum games).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
from gymnasium import spaces
from wheeler2.envs.pz_import import import_env_module
from wheeler2.envs.spaces import encode_masked, flat_dim, is_masked_space, masked_obs_dim

from wheeler2.env import EnvInfo, EnvReset, EnvStep, GroupStep, OtherAgents, PlyStep

SELF = "self"  # the group of the member's own seats it is not playing: its opponent pool


def _encoder(space: spaces.Space) -> tuple[int, Any]:
    if is_masked_space(space):
        return masked_obs_dim(space), encode_masked

    def flat(raw: Any, out: np.ndarray) -> None:
        out[:] = np.asarray(raw, np.float32).reshape(-1)

    return flat_dim(space), flat


class _Seats:
    """The rows of one group of driven seats, ``row = copy * len(names) + k``."""

    def __init__(self, name: str, names: list[str], copies: int, obs_dim: int) -> None:
        self.name = name
        self.names = names
        self.index = {a: k for k, a in enumerate(names)}
        rows = copies * len(names)
        self.obs = np.zeros((rows, obs_dim), np.float32)
        # A move waiting for its outcome: the row's turn-to-turn transition completes when the
        # agent is to move again or the game ends.
        self.pending = np.zeros(rows, bool)
        self.action = np.zeros(rows, np.int64)
        self.acted_obs = np.zeros((rows, obs_dim), np.float32)
        self.info: EnvInfo | None = None  # the seats' spaces (every seat shares them)
        self.step: GroupStep | None = None  # what record() is handed, one row at a time

    def row(self, copy: int, agent: str) -> int:
        return copy * len(self.names) + self.index[agent]


class TurnBasedVecEnv:
    """The member's seat in each of ``num_envs`` copies of a PettingZoo AEC game."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        num_envs: int = 1,
        seed: int | None = 0,
        agents: Sequence[str] = ("*",),
        groups: dict[str, Sequence[str]] | None = None,
    ) -> None:
        path = env_id.removeprefix("pettingzoo:")
        self.env_id = f"pettingzoo:{path}"
        module = import_env_module(path)
        if not hasattr(module, "env"):
            raise AttributeError(f"module '{module.__name__}' has no env() factory")
        self.copies = [module.env(**(kwargs or {})) for _ in range(num_envs)]
        self.num_copies = self.num_envs = num_envs
        self._seed = seed
        if isinstance(agents, str):
            agents = [agents]
        env = self.copies[0]
        possible = list(env.possible_agents)
        self.possible_agents = possible  # every agent of the env, whoever drives it
        self.seats = [a for a in possible if any(fnmatchcase(a, g) for g in agents)]
        if not self.seats:
            raise ValueError(
                f"{self.env_id}: no agent matches {list(agents)}; agents are {possible}"
            )
        first = self.seats[0]
        obs_space, act_space = env.observation_space(first), env.action_space(first)
        for a in possible[1:]:
            if env.observation_space(a) != obs_space or env.action_space(a) != act_space:
                raise ValueError(
                    f"{self.env_id}: every seat must share observation and action spaces; "
                    f"{first} and {a} differ"
                )
        if not isinstance(act_space, spaces.Discrete):
            raise TypeError(
                f"{self.env_id}: turn-based games need Discrete actions, got {act_space}"
            )
        self.observation_space, self.action_space = obs_space, act_space
        self.masked = is_masked_space(obs_space)
        obs_dim, self._encode = _encoder(obs_space)
        self.info = EnvInfo(
            obs_dim=obs_dim,
            act_dim=int(act_space.n),
            discrete=True,
            agents=tuple(self.seats),
            action_mask=self.masked,
        )
        # Who drives every agent when it is not the seat: a claiming table, the pool, or chance.
        self.groups: dict[str, _Seats] = {}  # name -> its rows (and .info, the seats' spaces)
        self._group_of: dict[str, _Seats] = {}
        claims = dict(groups or {})
        claims[SELF] = list(self.seats)
        for name, globs in claims.items():
            names = [a for a in possible if any(fnmatchcase(a, g) for g in globs)]
            if name != SELF:
                names = [a for a in names if a not in self.seats]
            if names:
                g = self.groups[name] = _Seats(name, names, num_envs, obs_dim)
                g.info = self.info
                for a in names:
                    self._group_of.setdefault(a, g)
        self._others: OtherAgents | None = None
        # Self-play ([play] random_opening): the "self" group's moves among a game's first
        # plies are uniformly random, as a strong player's opening book is wide.
        self.random_opening = 0
        self.random_opening_min: int | None = None  # set: each game draws its length
        self._opening = np.zeros(num_envs, np.int64)  # each copy's current game's length
        # Exploring starts ([play] random_start): a game's first plies, either seat's, random.
        self.random_start = 0
        # [play] negamax: every move is also learned from as one ply (PlyStep).
        self.plies = False
        self._plies = np.zeros(num_envs, np.int64)  # moves made in each copy's current game
        self._rng = np.random.default_rng(seed)
        self._episode = np.zeros(num_envs, np.int64)
        self._seat = [first] * num_envs
        self._return = np.zeros(num_envs, np.float64)
        self._obs = np.zeros((num_envs, obs_dim), np.float32)

    def attach_others(self, others: OtherAgents) -> None:
        self._others = others

    def seat_of(self, copy: int) -> str:
        """The agent the member plays in ``copy``'s current episode."""
        return self._seat[copy]

    # -- reset --
    def _reset_copy(self, c: int, seed: int | None) -> None:
        env = self.copies[c]
        env.reset(seed=seed)
        self._seat[c] = self.seats[(c + int(self._episode[c])) % len(self.seats)]
        self._return[c] = 0.0
        self._plies[c] = 0
        if self.random_opening_min is not None:
            self._opening[c] = self._rng.integers(self.random_opening_min, self.random_opening + 1)
        for g in self.groups.values():
            lo = c * len(g.names)
            g.pending[lo : lo + len(g.names)] = False
        for _ in range(self.random_start):
            self._move(c, env.agent_selection, self._random_action(env, env.agent_selection))
            if self._seat_done(env, self._seat[c]):
                raise ValueError(
                    f"[play] random_start = {self.random_start}: a game ended within its "
                    f"random start moves; expected fewer moves than the shortest game"
                )
        self._play_others([c])

    def reset(self, seed: int | None = None) -> EnvReset:
        base = self._seed if seed is None else seed
        if base is not None:
            self._rng = np.random.default_rng(base)
        self._episode[:] = 0
        for c in range(self.num_copies):
            self._reset_copy(c, None if base is None else base + c)
        return EnvReset(obs=self._obs.copy())

    # -- step --
    def _check_legal(self, who: str, copy: int, action: int, row: np.ndarray) -> None:
        """``row``: the mover's encoded observation of this turn, whose last columns are the
        mask the env gave it (read once, when the row was encoded)."""
        if not 0 <= action < self.info.act_dim:
            raise ValueError(
                f"{self.env_id}: action {action} for {who} (copy {copy}) is outside "
                f"0..{self.info.act_dim - 1}"
            )
        if self.masked:
            mask = row[-self.info.act_dim :] > 0.5
            if not mask[action]:
                legal = np.flatnonzero(mask).tolist()
                raise ValueError(
                    f"{self.env_id}: illegal action {action} for {who} (copy {copy}); "
                    f"legal actions are {legal}"
                )

    def step(self, action: np.ndarray) -> EnvStep:
        n = self.num_envs
        action = np.asarray(action).reshape(n)
        ply = self._ply_step(n) if self.plies else None
        for c in range(n):
            a = int(action[c])
            self._check_legal(self._seat[c], c, a, self._obs[c])
            self.copies[c].step(a + int(self.action_space.start))
            self._plies[c] += 1
            if ply is not None:
                ply.reward[c], ply.terminated[c] = self._after_move(
                    c, self._seat[c], ply.next_obs[c]
                )
        self._play_others(list(range(n)))

        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        final_obs = np.zeros_like(self._obs)
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        for c, env in enumerate(self.copies):
            seat = self._seat[c]
            reward[c] = float(env._cumulative_rewards.get(seat, 0.0))
            self._return[c] += reward[c]
            self._encode(env.observe(seat), final_obs[c])
            infos[c]["seat"] = seat
            if self._seat_done(env, seat):
                terminated[c] = bool(env.terminations.get(seat, False))
                truncated[c] = not terminated[c]
                if ply is not None:
                    ply.truncated[c] = not ply.terminated[c]
                infos[c]["outcome"] = float(self._return[c])
                self._finish_others(c)
                if self._others is not None:  # before the reset: the pool picks who plays next
                    self._others.episode_ended(c, float(self._return[c]))
                self._episode[c] += 1
                self._reset_copy(c, None)
            else:
                self._obs[c] = final_obs[c]
        return EnvStep(
            obs=self._obs.copy(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
            ply=ply,
        )

    def _ply_step(self, n: int) -> PlyStep:
        return PlyStep(
            reward=np.zeros(n, np.float32),
            next_obs=np.zeros((n, self._obs.shape[1]), np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
        )

    def _after_move(self, c: int, mover: str, next_obs: np.ndarray) -> tuple[float, bool]:
        """The ply ``mover`` just played in copy ``c``: its reward for the move, whether the move
        ended the game, and (into ``next_obs``) the opponent's view of the position it left
        (the mover's own final view where the game is over). A truncation counts as the end:
        the classic games have none, and the opponent's view of a game that is over would
        value nothing."""
        env = self.copies[c]
        reward = float(env._cumulative_rewards.get(mover, 0.0))
        if self._seat_done(env, mover):
            self._encode(env.observe(mover), next_obs)
            return reward, True
        self._encode(env.observe(env.agent_selection), next_obs)
        return reward, False

    @staticmethod
    def _seat_done(env: Any, seat: str) -> bool:
        return (
            seat not in env.agents
            or bool(env.terminations.get(seat, False))
            or bool(env.truncations.get(seat, False))
        )

    def _play_others(self, copies: list[int]) -> None:
        """Move every seat but the member's, round by round and batched over copies, until each
        copy in ``copies`` has the member's seat to move or its game is over."""
        waiting = list(copies)
        while waiting:
            asked: dict[str, list[tuple[int, str]]] = {}
            still = []
            for c in waiting:
                env = self.copies[c]
                seat = self._seat[c]
                if self._seat_done(env, seat):
                    continue
                agent = env.agent_selection
                if agent == seat:
                    self._encode(env.observe(seat), self._obs[c])
                    continue
                still.append(c)
                g = self._group_of.get(agent)
                done = bool(env.terminations.get(agent) or env.truncations.get(agent))
                if g is not None:
                    self._close_pending(g, c, agent, terminal=done)
                if done:
                    env.step(None)  # PettingZoo's "dead step" for an agent whose game is over
                    continue
                if g is not None and self._others is not None:
                    i = g.row(c, agent)
                    self._encode(env.observe(agent), g.obs[i])
                    asked.setdefault(g.name, []).append((c, agent))
                else:
                    self._move(c, agent, self._random_action(env, agent))
            for name, who in asked.items():
                assert self._others is not None
                g = self.groups[name]
                chosen = np.asarray(self._others.act(name, g.obs)).reshape(-1)
                for c, agent in who:
                    i = g.row(c, agent)
                    a = int(chosen[i])
                    if name == SELF and self._plies[c] < self._opening_of(c):
                        a = self._random_action(self.copies[c], agent)
                    g.pending[i], g.action[i] = True, a
                    g.acted_obs[i] = g.obs[i]
                    self._move(c, agent, a, g.obs[i])
                    if self.plies and name == SELF:
                        self._record_ply(g, c, agent)
            waiting = still

    def _opening_of(self, c: int) -> int:
        """How many of copy ``c``'s first plies the table's own opponents play at random."""
        return self.random_opening if self.random_opening_min is None else int(self._opening[c])

    def _move(self, c: int, agent: str, a: int, row: np.ndarray | None = None) -> None:
        """Every move of a seat other than the member's; ``row``: the mover's encoded
        observation, to check the move against (None: drawn among the legal moves)."""
        if row is not None:
            self._check_legal(agent, c, a, row)
        self.copies[c].step(a + int(self.action_space.start))
        self._plies[c] += 1

    def _random_action(self, env: Any, agent: str) -> int:
        if self.masked:
            legal = np.flatnonzero(env.observe(agent)["action_mask"])
            return int(self._rng.choice(legal))
        return int(self._rng.integers(self.info.act_dim))

    def _close_pending(self, g: _Seats, c: int, agent: str, terminal: bool) -> None:
        """A driven agent is to move again (or its game is over): its last move's transition
        is complete; hand it to the driver."""
        i = g.row(c, agent)
        if not g.pending[i] or self._others is None:
            return
        env = self.copies[c]

        def outcome(step: GroupStep) -> None:
            step.reward[i] = float(env._cumulative_rewards.get(agent, 0.0))
            if terminal:
                step.terminated[i] = bool(env.terminations.get(agent, False))
                step.truncated[i] = not step.terminated[i]
            self._encode(env.observe(agent), step.final_obs[i])

        self._send(g, i, outcome)

    def _record_ply(self, g: _Seats, c: int, agent: str) -> None:
        """Negamax: a move of the member's own table in a seat it does not play this episode
        is learned from as one ply, at once (no turn-to-turn transition is kept for it)."""

        def outcome(step: GroupStep) -> None:
            step.reward[i], step.terminated[i] = self._after_move(c, agent, step.final_obs[i])

        i = g.row(c, agent)
        self._send(g, i, outcome)

    def _send(self, g: _Seats, i: int, outcome: Callable[[GroupStep], None]) -> None:
        """Row ``i``'s move, its ``outcome`` (reward, end, next view) filled in, to the driver."""
        assert self._others is not None
        g.pending[i] = False
        # One step object per group, reused: a record call owns it only until it returns.
        step = g.step
        if step is None:
            step = g.step = self._group_step(g)
        step.obs[i] = g.acted_obs[i]
        step.action[i] = g.action[i]
        outcome(step)
        step.valid[i] = True
        try:
            self._others.record(g.name, step)
        finally:
            step.valid[i] = step.terminated[i] = step.truncated[i] = False
            step.reward[i] = 0.0

    def _finish_others(self, c: int) -> None:
        for g in self.groups.values():
            for agent in g.names:
                if g.pending[g.row(c, agent)]:
                    self._close_pending(g, c, agent, terminal=True)

    @staticmethod
    def _group_step(g: _Seats) -> GroupStep:
        rows, dim = g.obs.shape
        return GroupStep(
            obs=np.zeros((rows, dim), np.float32),
            action=np.zeros(rows, np.int64),
            reward=np.zeros(rows, np.float32),
            terminated=np.zeros(rows, bool),
            truncated=np.zeros(rows, bool),
            final_obs=np.zeros((rows, dim), np.float32),
            valid=np.zeros(rows, bool),
        )

    def set_curriculum_stage(self, stage: int) -> None:
        """``[curriculum]``: forwarded to each copy's own env (AttributeError where it has none)."""
        for env in self.copies:
            env.unwrapped.set_curriculum_stage(stage)

    def close(self) -> None:
        for env in self.copies:
            env.close()
