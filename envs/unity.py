"""Unity ML-Agents adapter (mlagents-envs 0.28): the agents of one behavior as VecEnv rows.

Ids: ``unity:<path to a built player>`` opens ``UnityEnvironment(file_name=path)``;
``unity:mock`` opens an in-process mock (``envs/_mock_unity.py``), no Unity needed.

One adapter serves one behavior (``behavior = "Name"`` in ``[env] kwargs``, default: the first the
environment reports); the agents of other behaviors receive Unity's empty (zero) actions. Rows are
copy-major, ``row = copy * agents_per_copy + k``, with the agents of each copy sorted by id as they
stand after ``reset``; the agent count must be fixed. An agent that comes with a new id (Unity
draws a new one for each Agent it enables: a respawned agent) takes the row of one of its copy
that ended and has not come back; agents beyond the count are ignored.

Episode ends follow Unity's protocol:

* an agent found in ``TerminalSteps`` ends its row's transition there, with ``terminated = not
  interrupted`` and ``truncated = interrupted`` (Unity's max-step interruption is a timeout);
  ``final_obs`` is its terminal observation;
* its next ``DecisionSteps`` observation is the first of its new episode and goes to ``obs``. When
  it arrives in the same step (the usual case) nothing else happens. When it does not, the row goes
  inactive until it does, exactly like a PettingZoo agent that left: ``adapter.active`` tells which
  rows act next, and ``infos[i]["active"]`` (the mask *before* the step) whether row ``i``'s
  transition is real and may be stored;
* the reward of a transition is the agent's reward since its previous decision.

Every agent that acted must come back in the next decision or terminal steps: Unity's
``DecisionRequester`` with a period above 1 leaves agents without a decision for several steps,
which a VecEnv cannot express, and the adapter raises a clear error in that case.

Observations: all of a behavior's observation tensors, flattened and concatenated, float32.
Actions: continuous ``[-1, 1]`` as they are (Unity's own convention); discrete branches are
folded into one ``Discrete(prod(branches))`` action (mixed radix, last branch fastest).
Hybrid (continuous + discrete) behaviors are not supported.

Action masks (an Agent's ``WriteDiscreteActionMask``): with ``action_mask = true`` in ``[env]
kwargs`` each row ends with one column per folded action, 1.0 where no branch masks it, the
engine's masked rows (``agents/parts/masks.py``), so DQN, PPO, A2C and PG choose only unmasked
actions, in training and eval. A terminal observation has no mask (all columns 0: every action
counts as legal where a learner bootstraps from it). Without the key a behavior that masks
actions is warned about once: its members would choose masked actions.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

try:
    from mlagents_envs.base_env import ActionTuple, BehaviorSpec
    from mlagents_envs.environment import UnityEnvironment
except TypeError as exc:  # pragma: no cover - depends on the installed protobuf
    # mlagents-envs 0.28's generated protobuf code predates protobuf 4; newer runtimes refuse it
    # at import ("Descriptors cannot be created directly").
    raise ImportError(
        "mlagents-envs 0.28 needs protobuf 3.20.x (pip install 'protobuf==3.20.3'; with it, "
        "tensorboard must be <= 2.20): " + str(exc)
    ) from exc

from wheeler2.env import EnvInfo, EnvReset, EnvStep

log = logging.getLogger(__name__)

# UnityEnvironment keyword arguments that may come from [env] kwargs for a real player.
PLAYER_KWARGS = (
    "worker_id",
    "base_port",
    "no_graphics",
    "timeout_wait",
    "additional_args",
    "log_folder",
    "num_areas",
)
# How many empty steps to wait, after reset, for the first agents to request a decision.
_MAX_WARMUP_STEPS = 100
# How many worker ids past a copy's own to try for a free port: every member's copies and the
# learner's eval copies open players side by side, from the same [env] kwargs.
_MAX_WORKER_SEARCH = 256


def _free_worker(base_port: int, worker_id: int) -> int:
    """The first worker id from ``worker_id`` on whose port (``base_port + id``) no player's
    communicator listens, tested as mlagents' ``RpcCommunicator.check_port`` tests it; else
    ``worker_id`` itself, for mlagents to refuse with its UnityWorkerInUseException."""
    for wid in range(worker_id, worker_id + _MAX_WORKER_SEARCH):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if sys.platform.startswith("linux"):  # a closed player's port in TIME_WAIT is free
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("localhost", base_port + wid))
            except (OSError, OverflowError):
                continue
        return wid
    return worker_id


def _warm_up(env: UnityEnvironment, ready: Callable[[UnityEnvironment], Any]) -> Any:
    """Reset ``env`` and step it until ``ready(env)`` has something (at most
    ``_MAX_WARMUP_STEPS`` empty steps); what ``ready`` last gave."""
    env.reset()
    got = ready(env)
    for _ in range(_MAX_WARMUP_STEPS):
        if len(got):
            break
        env.step()
        got = ready(env)
    return got


def open_unity(spec: str, kwargs: dict[str, Any], copy: int, seed: int) -> UnityEnvironment:
    """One Unity environment for copy ``copy``: a player binary, or the mock for ``"mock"``."""
    kwargs = dict(kwargs)
    if spec == "mock":
        from wheeler2.envs._mock_unity import MockUnityEnvironment

        return MockUnityEnvironment(seed=seed, **kwargs)
    unknown = sorted(set(kwargs) - set(PLAYER_KWARGS) - {"time_scale"})
    if unknown:
        # "keyword argument": the engine's probe then names [env] kwargs, not [env] id.
        known = ["behavior", "agents", "action_mask", *PLAYER_KWARGS, "time_scale"]
        raise TypeError(
            f"unity:{spec}: unexpected keyword argument(s) {unknown} in [env] kwargs; "
            f"known: {known}"
        )
    side_channels = []
    time_scale = kwargs.pop("time_scale", None)
    if time_scale is not None:
        from mlagents_envs.side_channel.engine_configuration_channel import (
            EngineConfigurationChannel,
        )

        channel = EngineConfigurationChannel()
        channel.set_configuration_parameters(time_scale=float(time_scale))
        side_channels.append(channel)
    # Each copy needs its own port, base_port + worker_id: the first free one from
    # worker_id + copy, since other members' copies and the eval copies may hold that one.
    base_port = kwargs.get("base_port")
    if base_port is None:
        base_port = UnityEnvironment.BASE_ENVIRONMENT_PORT
    worker_id = _free_worker(int(base_port), int(kwargs.pop("worker_id", 0)) + copy)
    return UnityEnvironment(
        file_name=spec, worker_id=worker_id, seed=seed, side_channels=side_channels, **kwargs
    )


def _legal(mask: list[np.ndarray], branch_of: tuple[np.ndarray, ...], n: int) -> np.ndarray:
    """Unity's per-branch masks (True: masked) -> ``[n, prod(branches)]`` float32, 1.0 where the
    folded action is masked in no branch."""
    legal = np.ones((n, len(branch_of[0])), bool)
    for b, m in enumerate(mask):
        legal &= ~np.asarray(m, bool).reshape(n, -1)[:, branch_of[b]]
    return legal.astype(np.float32)


def _flat(obs_list: list[np.ndarray], n: int) -> np.ndarray:
    return np.concatenate([np.asarray(o, np.float32).reshape(n, -1) for o in obs_list], axis=1)


def _camera(obs_list: list[np.ndarray], n: int) -> np.ndarray:
    """A camera sensor's float pixels in [0, 1] ``[n, H, W, C]`` -> flat channels-first uint8
    rows (the engine's image rows, docs/envs.md "Images")."""
    img = np.asarray(obs_list[0], np.float32).reshape(n, *obs_list[0].shape[1:])
    img = np.rint(np.clip(img, 0.0, 1.0) * 255.0).astype(np.uint8)
    return img.transpose(0, 3, 1, 2).reshape(n, -1)


class UnityVecEnv:
    """The agents of one behavior in ``num_envs`` Unity environments, one VecEnv row each."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        num_envs: int = 1,
        seed: int = 0,
        behavior: str | None = None,
        agents: list[str] | tuple[str, ...] | None = None,
        action_mask: bool = False,
    ) -> None:
        spec = env_id.removeprefix("unity:")
        self.masked = bool(action_mask)
        self._agent_globs = (
            None if agents is None else [agents] if isinstance(agents, str) else list(agents)
        )
        self.env_id = f"unity:{spec}"
        self.num_copies = num_envs
        self.copies: list[UnityEnvironment] = []
        try:
            for c in range(num_envs):
                self.copies.append(open_unity(spec, dict(kwargs or {}), c, seed + c))
            self._setup(behavior)
        except BaseException:
            self.close()
            raise

    def _setup(self, behavior: str | None) -> None:
        names = self._behavior_names(self.copies[0])
        if not names:
            raise RuntimeError(f"{self.env_id}: the environment reports no behavior")
        if behavior is None and self._agent_globs is not None:
            # A team member's `agents` globs pick its behavior (names such as "Walker?team=0").
            matched = [n for n in names if any(fnmatchcase(n, g) for g in self._agent_globs)]
            if not matched:
                raise ValueError(
                    f"{self.env_id}: no behavior matches agents = {self._agent_globs}; "
                    f"behaviors are {names}"
                )
            if len(matched) > 1:
                raise ValueError(
                    f"{self.env_id}: agents = {self._agent_globs} match several behaviors "
                    f"{matched}; one member drives one behavior, narrow the globs"
                )
            behavior = matched[0]
        if behavior is None:
            behavior = names[0]
        elif behavior not in names:
            raise ValueError(f"{self.env_id}: no behavior {behavior!r}; behaviors are {names}")
        self.behavior = behavior
        self.behavior_names = names
        self.spec: BehaviorSpec = self.copies[0].behavior_specs[behavior]
        action_spec = self.spec.action_spec
        if action_spec.continuous_size and action_spec.discrete_size:
            raise NotImplementedError(
                f"{self.env_id}: behavior {behavior!r} mixes continuous and discrete actions"
            )
        self.discrete = action_spec.discrete_size > 0
        self.branches = tuple(int(b) for b in action_spec.discrete_branches)
        act_dim = int(np.prod(self.branches)) if self.discrete else action_spec.continuous_size
        specs = self.spec.observation_specs
        obs_dim = int(sum(np.prod(o.shape) for o in specs))
        # A camera sensor (a 3-axis visual observation, H x W x C) is an image observation.
        obs_shape: tuple[int, ...] = ()
        if any(len(o.shape) == 3 for o in specs):
            if len(specs) != 1:
                shapes = [tuple(o.shape) for o in specs]
                raise ValueError(
                    f"{self.env_id}: behavior {behavior!r} observes {shapes}: a camera beside "
                    "other observations; wheeler2 reads one camera alone (an image) or vector "
                    "observations, not both side by side"
                )
            h, w, c = (int(d) for d in specs[0].shape)
            obs_shape = (c, h, w)
        if self.masked and not self.discrete:
            raise ValueError(
                f"{self.env_id}: action_mask = true in [env] kwargs needs a discrete behavior; "
                f"{behavior!r} acts continuously"
            )
        if self.masked and obs_shape:
            raise ValueError(
                f"{self.env_id}: action_mask = true in [env] kwargs with a camera: masked rows "
                "are vector observations"
            )
        self._rows_of = _camera if obs_shape else _flat
        # The folded action k's action in each branch, for the folded mask.
        self._branch_of: tuple[np.ndarray, ...] = ()
        if self.discrete:
            self._branch_of = np.unravel_index(np.arange(act_dim), self.branches)
        self._warned_mask = False
        self.info = EnvInfo(
            obs_dim=obs_dim + (act_dim if self.masked else 0),
            act_dim=act_dim,
            discrete=self.discrete,
            agents=(behavior,),
            obs_shape=obs_shape,
            action_mask=self.masked,
        )

        self._reset_copies()
        per_copy = {len(ids) for ids in self._agent_ids}
        if len(per_copy) != 1:
            raise RuntimeError(f"{self.env_id}: copies have different agent counts {per_copy}")
        self.agents_per_copy = per_copy.pop()
        self.num_envs = self.num_copies * self.agents_per_copy

    def _behavior_names(self, env: UnityEnvironment) -> list[str]:
        """The behaviors ``env`` reports. A Unity player sends a behavior's spec with the first
        message that carries agents of it, never at initialization: ``behavior_specs`` is empty
        until a reset (or the first steps, for agents that ask to act later)."""
        if not env.behavior_specs:
            _warm_up(env, lambda e: e.behavior_specs)
        return list(env.behavior_specs)

    # -- state ---------------------------------------------------------------------------------
    def _reset_copies(self) -> None:
        """Reset every copy and (re)build the agent -> row map from the first decisions."""
        self._agent_ids: list[np.ndarray] = []
        decisions = []
        for env in self.copies:
            dec = _warm_up(env, self._decisions)
            if not len(dec):
                raise RuntimeError(f"{self.env_id}: no agent of {self.behavior!r} asks to act")
            self._agent_ids.append(np.sort(dec.agent_id))
            decisions.append(dec)
        if hasattr(self, "agents_per_copy"):
            if any(len(ids) != self.agents_per_copy for ids in self._agent_ids):
                raise RuntimeError(f"{self.env_id}: the agent count changed across a reset")
        a = len(self._agent_ids[0])
        self._row_of = [
            {int(agent): c * a + k for k, agent in enumerate(ids)}
            for c, ids in enumerate(self._agent_ids)
        ]
        n = self.num_copies * a
        dtype = np.uint8 if self.info.obs_shape else np.float32
        self._obs = np.zeros((n, self.info.obs_dim), dtype)
        self.active = np.zeros(n, bool)
        self._carry = np.zeros(n, np.float32)  # reward given with a reset obs: the next step's
        self._order: list[np.ndarray] = []  # per copy: rows in DecisionSteps order
        self._warned_unknown = False
        for c, dec in enumerate(decisions):
            rows = self._rows(c, dec.agent_id)
            known = rows >= 0
            self._obs[rows[known]] = self._decision_rows(dec)[known]
            self.active[rows[known]] = True
            self._order.append(rows)

    def _decision_rows(self, dec: Any) -> np.ndarray:
        """Rows of decision steps ``dec``: their observations, then (``action_mask``) the folded
        mask."""
        rows = self._rows_of(dec.obs, len(dec))
        mask = dec.action_mask if self.discrete else None
        if not self.masked:
            if mask is not None and not self._warned_mask and any(np.any(m) for m in mask):
                self._warned_mask = True
                log.warning(
                    "%s: behavior %r masks actions, which its members do not see: they may "
                    "choose masked ones; set action_mask = true in [env] kwargs",
                    self.env_id,
                    self.behavior,
                )
            return rows
        n = len(dec)
        legal = np.ones((n, self.info.act_dim), np.float32)
        if mask is not None:
            legal = _legal(mask, self._branch_of, n)
        return np.concatenate([rows, legal], axis=1)

    def _terminal_rows(self, term: Any) -> np.ndarray:
        """Rows of terminal steps ``term``; a terminal observation has no mask (zeros)."""
        rows = self._rows_of(term.obs, len(term))
        if not self.masked:
            return rows
        return np.concatenate([rows, np.zeros((len(term), self.info.act_dim), np.float32)], 1)

    def _decisions(self, env: UnityEnvironment) -> Any:
        """``env``'s decision steps of our behavior; none while it has not sent the spec."""
        if self.behavior not in env.behavior_specs:
            return ()
        return env.get_steps(self.behavior)[0]

    def _rows(self, c: int, agent_ids: np.ndarray) -> np.ndarray:
        """Copy ``c``'s rows of ``agent_ids``; -1 for an agent without one."""
        row_of = self._row_of[c]
        return np.array([row_of.get(int(a), -1) for a in agent_ids], dtype=np.int64)

    def _adopt(self, c: int, agent_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``rows`` with each deciding agent that has no row given a free row of copy ``c``: one
        whose agent ended (inactive) and is not deciding now. Unity gives an Agent a new id each
        time it is enabled, so a destroyed and respawned agent decides under an id never seen;
        without this its row stayed inactive for good (every row, once all had respawned)."""
        new = np.flatnonzero(rows < 0)
        if new.size:
            a = self.agents_per_copy
            mine = np.arange(c * a, (c + 1) * a)
            free = [int(i) for i in mine if not self.active[i] and i not in rows]
            row_of = self._row_of[c]
            for j, i in zip(new, free):
                # The row's old agent, should it come back, is a newcomer in its turn.
                for agent in [agent for agent, row in row_of.items() if row == i]:
                    del row_of[agent]
                row_of[int(agent_ids[j])] = i
                self._agent_ids[c][i - c * a] = int(agent_ids[j])
                rows[j] = i
        if (rows < 0).any() and not self._warned_unknown:
            self._warned_unknown = True
            log.warning(
                "%s: agents %s beyond the %d of a copy at reset; ignored",
                self.env_id,
                agent_ids[rows < 0],
                self.agents_per_copy,
            )
        return rows

    # -- actions -------------------------------------------------------------------------------
    def _action_tuple(self, action: np.ndarray, rows: np.ndarray) -> ActionTuple:
        """Actions in the order Unity listed the deciding agents; agents without a row get 0."""
        unknown = rows < 0
        if self.discrete:
            flat = np.asarray(action).reshape(-1)[np.maximum(rows, 0)].astype(np.int64)
            flat[unknown] = 0
            per_branch = np.stack(np.unravel_index(flat, self.branches), axis=1)
            return ActionTuple(discrete=per_branch.astype(np.int32))
        a = np.asarray(action, np.float32).reshape(self.num_envs, -1)[np.maximum(rows, 0)]
        a[unknown] = 0.0
        return ActionTuple(continuous=np.clip(a, -1.0, 1.0))

    # -- VecEnv --------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> EnvReset:
        # Unity takes its seed when the player starts; a later reset cannot reseed it.
        self._reset_copies()
        return EnvReset(obs=self._obs.copy())

    def step(self, action: np.ndarray) -> EnvStep:
        n = self.num_envs
        was_active = self.active.copy()
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        final_obs = self._obs.copy()
        acted = np.zeros(n, bool)
        infos: list[dict[str, Any]] = [{"active": bool(a)} for a in was_active]

        for c, env in enumerate(self.copies):
            rows = self._order[c]
            if len(rows):
                env.set_actions(self.behavior, self._action_tuple(action, rows))
                acted[rows[rows >= 0]] = True
            env.step()
            dec, term = env.get_steps(self.behavior)

            ended = np.zeros(n, bool)
            if len(term):
                t_rows = self._rows(c, term.agent_id)
                t_obs = self._terminal_rows(term)
                for j, i in enumerate(t_rows):
                    if i < 0 or not was_active[i]:
                        continue  # a transition nobody acted on: nothing to report
                    ended[i] = True
                    final_obs[i] = t_obs[j]
                    reward[i] = self._carry[i] + term.reward[j]
                    self._carry[i] = 0.0
                    terminated[i] = not term.interrupted[j]
                    truncated[i] = bool(term.interrupted[j])
                    infos[i]["group_reward"] = float(term.group_reward[j])
                self.active[t_rows[t_rows >= 0]] = False

            d_rows = self._adopt(c, dec.agent_id, self._rows(c, dec.agent_id))
            if len(dec):
                d_obs = self._decision_rows(dec)
                for j, i in enumerate(d_rows):
                    if i < 0:
                        continue
                    self._obs[i] = d_obs[j]
                    if was_active[i] and not ended[i]:
                        final_obs[i] = d_obs[j]
                        reward[i] = self._carry[i] + dec.reward[j]
                        self._carry[i] = 0.0
                        infos[i]["group_reward"] = float(dec.group_reward[j])
                    else:
                        # First obs of a new episode: its reward belongs to the next transition.
                        self._carry[i] = dec.reward[j]
                    self.active[i] = True
            self._order[c] = d_rows

            mine = np.zeros(n, bool)
            mine[c * self.agents_per_copy : (c + 1) * self.agents_per_copy] = True
            stuck = mine & acted & ~ended & ~np.isin(np.arange(n), d_rows)
            if stuck.any():
                raise RuntimeError(
                    f"{self.env_id}: agents {self._agent_ids[c][stuck[mine]].tolist()} of "
                    f"{self.behavior!r} acted but neither requested a decision nor ended; the "
                    f"adapter needs one decision per step (DecisionRequester period 1)"
                )

        # Rows that left keep their final observation as a placeholder; it is never acted on.
        return EnvStep(
            obs=self._obs.copy(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
        )

    def close(self) -> None:
        for env in self.copies:
            try:
                env.close()
            except Exception as exc:  # closing must go on for the other copies
                log.warning("%s: close failed: %s", self.env_id, exc)
        self.copies = []


def make(spec: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> UnityVecEnv:
    """Registry entry point; ``behavior``, ``agents`` and ``action_mask`` are taken out of ``[env]
    kwargs``, the rest goes to the player (``no_graphics``, ``time_scale``, ``worker_id``, ...)
    or the mock (``num_agents``, ``discrete_action``, ``episode_length``, ``lagging_agents``,
    ``behaviors``, ``stock``, ``camera``, ``action_masks``)."""
    kwargs = dict(kwargs)
    behavior = kwargs.pop("behavior", None)
    agents = kwargs.pop("agents", None)
    action_mask = kwargs.pop("action_mask", False)
    if not isinstance(action_mask, bool):
        raise TypeError(f"action_mask in [env] kwargs must be true or false, got {action_mask!r}")
    return UnityVecEnv(
        spec, kwargs, num_envs, seed, behavior=behavior, agents=agents, action_mask=action_mask
    )
