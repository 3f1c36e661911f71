"""PettingZoo Parallel API adapter: the agents of ``num_envs`` env copies as rows of one VecEnv.

Id form ``pettingzoo:<module path>`` where the module has a ``parallel_env(**kwargs)`` factory,
e.g. ``pettingzoo:sisl.multiwalker_v9`` (tried as ``pettingzoo.sisl.multiwalker_v9`` first) or
``pettingzoo:mpe2.simple_spread_v3`` (found as the top-level package ``mpe2``).

Row layout: copy-major, ``row = copy * len(agent_names) + k`` where ``agent_names`` are the
possible agents matched by the member's globs, in the env's ``possible_agents`` order.

Agents can leave before the copy's episode ends (a walker falls, a pursuer is caught). The row of
such an agent reports its done flag once, then goes *inactive* until the whole copy resets:

* ``adapter.active`` ([N] bool) says, after ``reset`` and after every ``step``, which rows hold a
  live observation that will be acted on by the next ``step``. Actions of inactive rows are
  ignored.
* The transition a ``step`` returns for row ``i`` is real only if ``active[i]`` was True
  *before* that step; ``EnvStep.infos[i]["active"]`` carries that same flag. The engine must not
  store, learn from, or count as an episode end any row whose ``infos[i]["active"]`` is False:
  its reward and flags are zeros and its ``obs`` / ``final_obs`` a stale placeholder.

Rewards (``reward_mode``):

* ``"row"`` (default): each row gets its own agent's reward.
* ``"sum"``: each row gets the sum of the rewards of all matched agents of its copy at that step
  (a team reward for cooperative tasks; agents driven by ``other_policy`` are not part of it).
  Another table's agents driven here (joint play) get the sum over that table's agents, as
  they would in that table's own copies.
* ``"heads"``: ``reward`` is still per row, and ``infos[i]["head_rewards"]`` (float32
  ``[len(agent_names)]``, also ``adapter.head_rewards`` ``[N, M]``) holds the rewards of every
  matched agent of the row's copy, in ``agent_names`` order (0 for agents already gone), so a
  task can expose one reward head per agent (``adapter.head_names``).

Time limit: a copy that ends at the env's ``max_cycles`` is cut off, not over, so its rows end
truncated (they bootstrap) whatever flag the env gives them: ``sisl.multiwalker_v9`` flags its
time limit as a termination. An agent that really ends on that very step is truncated too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
from gymnasium import spaces
from wheeler2.envs.pz_import import import_env_module, make_parallel_env
from wheeler2.envs.spaces import ObsFlattener, box_bounds, scale_box_action

from wheeler2.env import EnvInfo, EnvReset, EnvStep, GroupStep, OtherAgents

REWARD_MODES = ("row", "sum", "heads")
OtherPolicy = Callable[[str, Any], Any]


def _resolve_policy(policy: OtherPolicy | str | None) -> OtherPolicy | None:
    # TOML can only name a function, so "module:function" strings are accepted too; the module
    # may be a .py file (the config reader makes "./p.py:fn" absolute against its folder).
    if policy is None or callable(policy):
        return policy
    if ":" not in str(policy):
        raise ValueError(f"other_policy must be a callable or 'module:function', got {policy!r}")
    # The registry imports this adapter lazily; it is looked up here for the same reason.
    found = importlib.import_module("wheeler2.registry").resolve_object(str(policy))
    if not callable(found):
        raise ValueError(f"other_policy {policy!r} is not a function")
    return found


def _max_cycles(env: Any) -> int | None:
    # PettingZoo has no standard horizon attribute; most envs keep `max_cycles` on the raw env
    # or on the simulation object it wraps (multiwalker).
    raw = env.unwrapped
    for holder in (raw, getattr(raw, "env", None)):
        value = getattr(holder, "max_cycles", None)
        if isinstance(value, int):
            return value
    return None


def _obs_dim(space: spaces.Space) -> int:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"unsupported observation space {space!r}: expected Box")
    return int(np.prod(space.shape))


def _rows(space: spaces.Space) -> ObsFlattener:
    """How an agent's raw observation becomes its row: flat float32, or an image (uint8 or
    bool Box) as channels-first uint8 (docs/envs.md "Images")."""
    _obs_dim(space)  # a Box, or the one error line
    return ObsFlattener(space)


class AgentGroup:
    """The agents of one other table in ``num_copies`` copies (joint play): their rows, laid out
    as that table's own members lay theirs out, and how their actions reach the env."""

    def __init__(self, env_id: str, name: str, env: Any, names: list[str], copies: int) -> None:
        self.name = name
        self.names = names
        self.index = {a: k for k, a in enumerate(names)}
        first = names[0]
        odd = [a for a in names[1:] if env.observation_space(a) != env.observation_space(first)]
        odd += [a for a in names[1:] if env.action_space(a) != env.action_space(first)]
        if odd:
            raise ValueError(
                f"{env_id}: the agents table {name!r} claims must share observation and action "
                f"spaces; {first} and {odd[0]} differ"
            )
        self.action_space = env.action_space(first)
        self.discrete = isinstance(self.action_space, spaces.Discrete)
        if not self.discrete:
            self.low, self.high = box_bounds(env_id, self.action_space)
        act_dim = int(self.action_space.n) if self.discrete else int(self.low.shape[0])
        self.flat = _rows(env.observation_space(first))
        self.info = EnvInfo(
            obs_dim=self.flat.dim,
            act_dim=act_dim,
            discrete=self.discrete,
            max_episode_steps=_max_cycles(env),
            agents=tuple(names),
            obs_shape=self.flat.image_shape,
        )
        rows = copies * len(names)
        self.obs = np.zeros((rows, self.info.obs_dim), self.flat.dtype)
        self.active = np.zeros(rows, bool)
        self.actions: np.ndarray | None = None

    def row(self, copy: int, k: int) -> int:
        return copy * len(self.names) + k

    def load(self, c: int, raw_obs: dict[str, Any], live: set[str]) -> None:
        for k, name in enumerate(self.names):
            i = self.row(c, k)
            self.active[i] = name in live and name in raw_obs
            if self.active[i]:
                self.flat(raw_obs[name], self.obs[i])

    def env_action(self, c: int, name: str) -> Any:
        assert self.actions is not None
        a = self.actions[self.row(c, self.index[name])]
        if self.discrete:
            return int(a) + int(self.action_space.start)
        scaled = scale_box_action(a, self.low, self.high)[0]
        return scaled.reshape(self.action_space.shape).astype(self.action_space.dtype)

    def begin(self) -> GroupStep:
        rows = len(self.active)
        assert self.actions is not None
        return GroupStep(
            obs=self.obs.copy(),
            action=self.actions,
            reward=np.zeros(rows, np.float32),
            terminated=np.zeros(rows, bool),
            truncated=np.zeros(rows, bool),
            final_obs=self.obs.copy(),
            valid=self.active.copy(),
        )


class PettingZooVecEnv:
    """Matched agents of ``num_envs`` copies of a Parallel API env, one VecEnv row each."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        num_envs: int = 1,
        seed: int | None = 0,
        agents: Sequence[str] = ("*",),
        other_policy: OtherPolicy | str | None = None,
        reward_mode: str = "row",
        groups: dict[str, Sequence[str]] | None = None,
    ) -> None:
        path = env_id.removeprefix("pettingzoo:")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if isinstance(agents, str):
            agents = [agents]
        self.env_id = f"pettingzoo:{path}"
        self.reward_mode = reward_mode
        self.copies = [make_parallel_env(path, kwargs) for _ in range(num_envs)]
        self.num_copies = num_envs
        self._seed = seed
        self._other_policy = _resolve_policy(other_policy)

        env = self.copies[0]
        possible = list(env.possible_agents)
        self.possible_agents = possible  # every agent of the env, whoever drives it
        self.agent_names = [a for a in possible if any(fnmatchcase(a, g) for g in agents)]
        if not self.agent_names:
            raise ValueError(
                f"{self.env_id}: no agent matches {list(agents)}; agents are {possible}"
            )
        self._index = {a: k for k, a in enumerate(self.agent_names)}
        self.other_agents = [a for a in possible if a not in self._index]
        self._check_same_spaces(env)
        # Joint play: the agents other tables claim, driven by ``others`` (attach_others).
        self.groups: dict[str, AgentGroup] = {}
        self._claimed: dict[str, AgentGroup] = {}
        for group, globs in (groups or {}).items():
            names = [a for a in self.other_agents if any(fnmatchcase(a, g) for g in globs)]
            if names:
                g = self.groups[group] = AgentGroup(self.env_id, group, env, names, num_envs)
                self._claimed.update(dict.fromkeys(names, g))
        self._others: OtherAgents | None = None

        first = self.agent_names[0]
        obs_space, act_space = env.observation_space(first), env.action_space(first)
        self.observation_space, self.action_space = obs_space, act_space
        if isinstance(act_space, spaces.Box):
            self.discrete = False
            act_dim = int(np.prod(act_space.shape))
            self._low, self._high = box_bounds(self.env_id, act_space)
        elif isinstance(act_space, spaces.Discrete):
            self.discrete = True
            act_dim = int(act_space.n)
        else:
            raise TypeError(f"{self.env_id}: unsupported action space {act_space!r}")

        m = len(self.agent_names)
        self.num_envs = num_envs * m
        self.head_names = list(self.agent_names)
        self._flat = _rows(obs_space)
        self.info = EnvInfo(
            obs_dim=self._flat.dim,
            act_dim=act_dim,
            discrete=self.discrete,
            max_episode_steps=_max_cycles(env),
            agents=tuple(self.agent_names),
            obs_shape=self._flat.image_shape,
        )
        self.active = np.zeros(self.num_envs, bool)
        self._cycles = np.zeros(num_envs, np.int64)  # each copy's steps in its episode
        self.head_rewards = np.zeros((self.num_envs, m), np.float32)
        self._obs = np.zeros((self.num_envs, self.info.obs_dim), self._flat.dtype)
        # The raw observations of every live agent, other agents included (other_policy needs them).
        self._raw_obs: list[dict[str, Any]] = [{} for _ in range(num_envs)]

    def _check_same_spaces(self, env: Any) -> None:
        first = self.agent_names[0]
        o0, a0 = env.observation_space(first), env.action_space(first)
        odd = [
            a
            for a in self.agent_names[1:]
            if env.observation_space(a) != o0 or env.action_space(a) != a0
        ]
        if odd:
            raise ValueError(
                f"{self.env_id}: matched agents must share observation and action spaces; "
                f"{first} has {o0} / {a0} but {odd} differ "
                f"(e.g. {odd[0]}: {env.observation_space(odd[0])} / {env.action_space(odd[0])}); "
                f"narrow the member's agent globs"
            )

    def attach_others(self, others: OtherAgents) -> None:
        """Who drives the agents of ``groups``; until then (and for agents no group claims)
        they act at random or by ``other_policy``."""
        self._others = others

    def _row(self, copy: int, k: int) -> int:
        return copy * len(self.agent_names) + k

    def _load_copy(self, c: int, raw_obs: dict[str, Any], live: set[str]) -> None:
        self._raw_obs[c] = dict(raw_obs)
        for k, name in enumerate(self.agent_names):
            i = self._row(c, k)
            self.active[i] = name in live and name in raw_obs
            if self.active[i]:
                self._flat(raw_obs[name], self._obs[i])
        for group in self.groups.values():
            group.load(c, raw_obs, live)

    def _reset_copy(self, c: int, seed: int | None) -> None:
        env = self.copies[c]
        raw_obs, _ = env.reset(seed=seed)
        self._cycles[c] = 0
        if seed is not None:
            for name in env.possible_agents:
                env.action_space(name).seed(seed + 7919 * (1 + env.possible_agents.index(name)))
        self._load_copy(c, raw_obs, set(env.agents))

    def reset(self, seed: int | None = None) -> EnvReset:
        base = self._seed if seed is None else seed
        for c in range(self.num_copies):
            self._reset_copy(c, None if base is None else base + c)
        self.head_rewards[:] = 0.0
        return EnvReset(obs=self._obs.copy())

    def _env_action(self, a: np.ndarray) -> Any:
        if self.discrete:
            return int(a) + int(self.action_space.start)
        a = np.clip(np.asarray(a, np.float64).reshape(-1), -1.0, 1.0)
        scaled = self._low + (a + 1.0) * 0.5 * (self._high - self._low)
        return scaled.reshape(self.action_space.shape).astype(self.action_space.dtype)

    def _other_action(self, env: Any, name: str, raw_obs: Any) -> Any:
        if self._other_policy is None:
            return env.action_space(name).sample()
        return self._other_policy(name, raw_obs)

    def step(self, action: np.ndarray) -> EnvStep:
        n, m = self.num_envs, len(self.agent_names)
        action = np.asarray(action)
        was_active = self.active.copy()
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        final_obs = self._obs.copy()
        self.head_rewards = np.zeros((n, m), np.float32)
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        others = self._others if self.groups else None
        steps: dict[str, GroupStep] = {}
        if others is not None:
            for name, group in self.groups.items():
                group.actions = np.asarray(others.act(name, group.obs))
                steps[name] = group.begin()

        for c, env in enumerate(self.copies):
            live_before = list(env.agents)
            if not live_before:
                raise RuntimeError(f"{self.env_id}: copy {c} has no live agent; call reset()")
            actions = {}
            for name in live_before:
                if name in self._index:
                    actions[name] = self._env_action(action[self._row(c, self._index[name])])
                elif others is not None and name in self._claimed:
                    actions[name] = self._claimed[name].env_action(c, name)
                else:
                    actions[name] = self._other_action(env, name, self._raw_obs[c].get(name))
            raw_obs, rew, term, trunc, info = env.step(actions)
            self._cycles[c] += 1

            team = np.float32(sum(float(rew.get(a, 0.0)) for a in self.agent_names))
            heads = np.array([rew.get(a, 0.0) for a in self.agent_names], np.float32)
            for k, name in enumerate(self.agent_names):
                i = self._row(c, k)
                infos[i] = dict(info.get(name, {}))
                infos[i]["active"] = bool(was_active[i])
                if self.reward_mode == "heads":
                    # Every row carries the key, so head functions never meet a missing one.
                    infos[i]["head_rewards"] = (
                        heads.copy() if was_active[i] else np.zeros_like(heads)
                    )
                if not was_active[i]:
                    continue
                reward[i] = team if self.reward_mode == "sum" else float(rew.get(name, 0.0))
                terminated[i] = bool(term.get(name, False))
                truncated[i] = bool(trunc.get(name, False)) and not terminated[i]
                if name in raw_obs:
                    self._flat(raw_obs[name], final_obs[i])
                if self.reward_mode == "heads":
                    self.head_rewards[i] = heads

            for gname, gstep in steps.items():
                _fill_group(
                    self.groups[gname], gstep, c, rew, term, trunc, raw_obs, self.reward_mode
                )

            still_live = {a for a in env.agents if not (term.get(a, False) or trunc.get(a, False))}
            if still_live:
                self._load_copy(c, raw_obs, still_live)
                continue
            # The whole copy is over: rows still active end with the env's own flags; rows
            # active before but without a flag of their own (an env that ended the episode
            # without telling every agent) are truncated, so no transition bootstraps across.
            # At the env's time limit every row that ends is truncated (the module docstring).
            horizon = self.info.max_episode_steps
            cut = horizon is not None and self._cycles[c] >= horizon
            for k in range(m):
                i = self._row(c, k)
                if was_active[i] and (cut or not (terminated[i] or truncated[i])):
                    terminated[i], truncated[i] = False, True
            for gname, gstep in steps.items():
                _end_group(self.groups[gname], gstep, c, cut)
            self._reset_copy(c, None)

        if others is not None:
            for gname, gstep in steps.items():
                others.record(gname, gstep)

        return EnvStep(
            obs=self._obs.copy(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
        )

    def set_curriculum_stage(self, stage: int) -> None:
        """``[curriculum]``: forwarded to each copy's own env (AttributeError where it has none)."""
        for env in self.copies:
            env.unwrapped.set_curriculum_stage(stage)

    def close(self) -> None:
        for env in self.copies:
            env.close()


def _fill_group(
    group: AgentGroup,
    gstep: GroupStep,
    c: int,
    rew: dict[str, Any],
    term: dict[str, Any],
    trunc: dict[str, Any],
    raw_obs: dict[str, Any],
    reward_mode: str,
) -> None:
    team = float(sum(float(rew.get(a, 0.0)) for a in group.names))
    for k, name in enumerate(group.names):
        i = group.row(c, k)
        if not gstep.valid[i]:
            continue
        gstep.reward[i] = team if reward_mode == "sum" else float(rew.get(name, 0.0))
        gstep.terminated[i] = bool(term.get(name, False))
        gstep.truncated[i] = bool(trunc.get(name, False)) and not gstep.terminated[i]
        if name in raw_obs:
            group.flat(raw_obs[name], gstep.final_obs[i])


def _end_group(group: AgentGroup, gstep: GroupStep, c: int, cut: bool) -> None:
    # As for the member's own rows: a copy that ended without a flag for a row, or at the
    # env's time limit (``cut``), truncates it.
    for k in range(len(group.names)):
        i = group.row(c, k)
        if gstep.valid[i] and (cut or not (gstep.terminated[i] or gstep.truncated[i])):
            gstep.terminated[i], gstep.truncated[i] = False, True


def head_reward(k: int) -> Callable[..., np.ndarray]:
    """A task reward-head function giving each row the reward of matched agent ``k`` of its copy
    (``reward_mode = "heads"``). In TOML: ``reward = "envs.pettingzoo:head_<k>"``."""

    def fn(
        obs: Any,
        action: Any,
        next_obs: Any,
        achieved_goal: Any,
        desired_goal: Any,
        info: Sequence[dict[str, Any]] | None,
    ) -> np.ndarray:
        if info is None:
            raise ValueError(
                f"head_{k}: per-agent rewards come from the env's infos and cannot "
                "be recomputed for a relabelled goal"
            )
        return np.array([row["head_rewards"][k] for row in info], np.float32)

    fn.__name__ = f"head_{k}"
    return fn


def __getattr__(name: str) -> Any:
    # "envs.pettingzoo:head_3" resolves for any agent index without defining each function.
    prefix, _, index = name.partition("_")
    if prefix == "head" and index.isdigit():
        return head_reward(int(index))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make(spec: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> Any:
    """Registry entry point. Adapter options travel in ``[env] kwargs`` and are taken out before
    the rest goes to ``parallel_env``: ``agents`` (glob list), ``reward_mode``, ``other_policy``
    (``"module:function"``)."""
    kwargs = dict(kwargs)
    keys = ("agents", "reward_mode", "other_policy", "groups")
    options = {k: kwargs.pop(k) for k in keys if k in kwargs}
    if not hasattr(import_env_module(spec.removeprefix("pettingzoo:")), "parallel_env"):
        # A turn-based (AEC) game: one row per copy, the member's seat (envs/turns.py).
        from wheeler2.envs.turns import TurnBasedVecEnv

        for key in ("reward_mode", "other_policy"):
            if key in options:
                raise ValueError(
                    f"{spec}: '{key}' applies to simultaneous (Parallel API) envs; in a "
                    f"turn-based game the seats no table claims play at random"
                )
        return TurnBasedVecEnv(spec, kwargs, num_envs, seed, **options)
    return PettingZooVecEnv(spec, kwargs, num_envs, seed, **options)
