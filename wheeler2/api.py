"""The Python API: run, validate and evaluate experiments, and act with a trained policy.

``import wheeler2`` reaches these lazily (``wheeler2.load_policy`` imports this module on first
use), so the package import and ``wheeler2 --help`` stay free of torch. Every heavy import below
happens inside a function for the same reason. docs/python_api.md has runnable examples.

:func:`load_policy` is the policy exactly as ``wheeler2 eval`` runs it: raw env observations in,
the agent's ``act(explore=False)`` with its observation normalization, then the env adapter's
action mapping, env actions out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wheeler2.errors import UsageError

if TYPE_CHECKING:
    from wheeler2.agent import Agent
    from wheeler2.config import Config
    from wheeler2.env import EnvInfo

CHECKPOINTS = ("best", "latest")
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


# -- experiments -------------------------------------------------------------------------------


def _config(config_or_path: Any, overrides: dict[str, Any]) -> Config:
    """A validated config from a path, a :class:`Config` or parsed TOML data, with overrides.

    ``overrides`` keys are ``seed``, ``out`` or dotted ``table.key`` paths (``buffer__n_step``
    stands for ``buffer.n_step``, since a keyword cannot hold a dot), as ``--set`` takes them.
    """
    from wheeler2.config import Config, apply_override, validate
    from wheeler2.config.files import parse_toml
    from wheeler2.config.toml_out import _toml_value

    if isinstance(config_or_path, Config):
        raw, path = copy.deepcopy(config_or_path.raw), config_or_path.path
    elif isinstance(config_or_path, dict):
        raw, path = copy.deepcopy(config_or_path), Path("<config>")
    else:
        path = Path(config_or_path)
        if not path.is_file():
            raise UsageError(f"{path}: no such experiment file; expected a TOML file")
        raw = parse_toml(path)
    for key, value in overrides.items():
        if key in ("seed", "out"):
            raw.setdefault("experiment", {})[key] = value
        else:
            # Through --set's own code, so both ways of overriding index [[team]] alike.
            apply_override(raw, f"{key.replace('__', '.')}={_toml_value(value)}", str(path))
    return validate(raw, path)


def validate(config_or_path: Any, **overrides: Any) -> Config:
    """What ``wheeler2 check`` does: read and validate the config, build the team once without
    training (envs, heads, agents, spaces, sync) and check the config against it. Returns the
    :class:`~wheeler2.config.Config`; raises :class:`~wheeler2.config.ConfigError` naming the
    table and key at fault."""
    from wheeler2.runtime.probe import check_with_env

    config = _config(config_or_path, overrides)
    check_with_env(config)
    return config


def run(config_or_path: Any, callbacks: Sequence[Any] | None = None, **overrides: Any) -> Path:
    """Run an experiment (what ``wheeler2 run`` does); returns its run directory.

    ``run("cfg/pendulum_ddpg.toml", seed=1, experiment__total_steps=2000)``

    ``callbacks``: :class:`wheeler2.Callback` objects (or plain functions, taken as
    ``on_eval``) called in this process on every backend with each eval, member report and
    checkpoint (:mod:`wheeler2.callbacks`). One that returns ``wheeler2.STOP`` (or True) ends
    the run early, with its final checkpoint and summary; one that raises ends it the same way,
    then :class:`wheeler2.CallbackError` naming it is raised.
    """
    from wheeler2.callbacks import active
    from wheeler2.runtime import run_experiment

    config = _config(config_or_path, overrides)
    with active(list(callbacks or ())):
        return Path(run_experiment(config))


def run_config_path(run_dir: str | Path) -> Path:
    """``run_dir/config.toml``, or a :class:`UsageError` saying what was expected."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    config_path = run_dir / "config.toml"
    if not config_path.exists():
        raise UsageError(f"{run_dir}: no config.toml here; is this a run directory?")
    return config_path


def _check_which(checkpoint: str) -> None:
    if checkpoint not in CHECKPOINTS:
        raise UsageError(f"checkpoint {checkpoint!r}: expected one of {', '.join(CHECKPOINTS)}")


def evaluate(
    run_dir: str | Path, episodes: int | None = None, checkpoint: str = "best"
) -> dict[str, Any]:
    """What ``wheeler2 eval`` does: one deterministic episode per eval env copy with the run's
    learner from its checkpoint. Returns ``mean_return``, ``std_return``, ``success`` (None
    when the env reports none), ``episodes``, ``env_steps`` and the ``checkpoint`` file."""
    from wheeler2.runtime import evaluate_run

    run_config_path(run_dir)
    _check_which(checkpoint)
    return evaluate_run(Path(run_dir), episodes, checkpoint)


# -- the learner of a run ----------------------------------------------------------------------


@dataclass
class LoadedRun:
    """A run's learner restored from a checkpoint, and the facts of its env."""

    run_dir: Path
    config: Config
    checkpoint: Path
    agent: Agent
    algo: str
    info: EnvInfo  # as the engine sees it: obs_dim includes the achieved goal where it is fed
    observation_space: Any  # the gymnasium spaces, None for adapters without one
    action_space: Any
    member: str = ""  # the learner's [[team]] name (the lead's, where tables have several)
    frame_space: Any = None  # one observation's space, under a flat [env] stack


def load_learner(run_dir: str | Path, checkpoint: str = "best") -> LoadedRun:
    """The learner of a run, restored from ``checkpoint`` (``"best"`` falls back to
    ``"latest"`` when no eval has improved yet), the way ``wheeler2 eval`` restores it."""
    from wheeler2.config import load
    from wheeler2.runtime.restore import restore

    run_dir = Path(run_dir)
    config = load(run_config_path(run_dir))
    _check_which(checkpoint)
    # One env copy, built only to read the spaces and heads the networks were sized from.
    restored = restore(config, run_dir, checkpoint, eval_copies=1)
    env = restored.env
    assert env is not None  # restore opens it with eval_copies
    try:
        info = env.info
        obs_space = getattr(env, "observation_space", None)
        act_space = getattr(env, "action_space", None)
        frame_space = getattr(env, "frame_space", None) if config.env.stack > 1 else None
    finally:
        env.close()
    lead = restored.lead
    return LoadedRun(
        run_dir,
        config,
        restored.path,
        restored.learner,
        lead.algo,
        info,
        obs_space,
        act_space,
        lead.name,
        frame_space,
    )


# -- raw observations in, env actions out ------------------------------------------------------


def _masked_rows(x: dict[str, Any], space: Any, dim: int, what: str) -> tuple[np.ndarray, bool]:
    """A turn-based game's raw ``{"observation", "action_mask"}`` -> masked rows ``[N, dim]``."""
    obs_shape = tuple(space["observation"].shape)
    mask_shape = tuple(space["action_mask"].shape)
    if any(k not in x for k in ("observation", "action_mask")):
        raise ValueError(
            f"{what}: a turn-based game's observation has keys observation, action_mask"
        )
    obs = np.asarray(x["observation"], np.float32)
    mask = np.asarray(x["action_mask"], np.float32)
    single = obs.shape == obs_shape
    if not single and obs.shape[1:] != obs_shape:
        raise ValueError(
            f"{what}: observation has shape {obs.shape}, expected {obs_shape} or (N, ...)"
        )
    n = 1 if single else len(obs)
    if mask.shape != ((n, *mask_shape) if not single else mask_shape):
        raise ValueError(
            f"{what}: action_mask has shape {mask.shape}, expected {mask_shape} per observation"
        )
    rows = np.concatenate([obs.reshape(n, -1), mask.reshape(n, -1)], axis=1)
    if rows.shape[1] != dim:
        raise ValueError(f"{what}: {rows.shape[1]} values per observation, the policy takes {dim}")
    return rows, single


def _rows(x: Any, space: Any, dim: int, what: str) -> tuple[np.ndarray, bool]:
    """One part of a raw observation (one row or a batch) -> float32 ``[N, dim]``, and whether
    it was a single observation. Discrete parts become one-hot, as the gym adapter does; a
    turn-based game's ``{"observation", "action_mask"}`` (one, or a batch of each) becomes the
    masked row the engine reads (``envs/spaces.py`` ``encode_masked``), and its flat rows are
    taken as they are."""
    from gymnasium import spaces

    from wheeler2 import registry

    # By name, as every env module (the engine imports no envs module itself), and only for a
    # Dict space: the lookup stays off every other policy call.
    if isinstance(space, spaces.Dict) and registry.resolve_object(
        "wheeler2.envs.spaces:is_masked_space"
    )(space):
        if isinstance(x, dict):
            return _masked_rows(x, space, dim, what)
        space = None  # flat masked rows, as the engine's
    if isinstance(space, spaces.Discrete):
        arr = np.asarray(x)
        single = arr.ndim == 0
        # Discrete(n, start=s) takes s .. s + n - 1: column value - s, as the gym adapter does.
        idx = arr.reshape(-1).astype(np.int64) - int(space.start)
        return np.eye(dim, dtype=np.float32)[idx], single
    shape = tuple(space.shape) if space is not None else (dim,)
    arr = np.asarray(x, dtype=np.float32)
    if arr.shape == shape:
        return arr.reshape(1, -1), True
    if arr.shape[1:] == shape:
        return arr.reshape(len(arr), -1), False
    raise ValueError(
        f"{what}: got shape {arr.shape}, expected {shape} (one observation) or "
        f"(N, {', '.join(map(str, shape))}) (a batch)"
    )


class Policy:
    """A run's learner as a function of raw env observations: ``action = policy(obs)``.

    ``obs`` is what the env returns: one observation or a batch (a leading axis), for a goal env
    the dict with ``observation`` / ``achieved_goal`` / ``desired_goal`` (each one row or a
    batch). The result is in the env's action space: a Box action (or ``[N, *shape]``), or an
    int (int64 ``[N]``) for Discrete. Deterministic: ``act(explore=False)``.

    A recurrent policy (``core = "gru"`` / ``"lstm"``, :attr:`recurrent`) carries its memory
    between calls, one row per observation in the batch, exactly as the engine does: call
    :meth:`reset` when episodes start (all rows, or ``where`` a mask of the rows whose episode
    ended). The first call starts from the initial state; a batch of another size than the
    state's is refused rather than silently paired with another episode's memory.
    """

    def __init__(self, loaded: LoadedRun) -> None:
        self.loaded = loaded
        self.agent = loaded.agent
        info = loaded.info
        self.goal = info.goal_dim > 0
        # The engine feeds [observation, achieved_goal, desired_goal] under achieved_goal_in_obs,
        # else [observation, desired_goal] (wheeler2.env.AchievedGoalInObs and policy_obs).
        self.achieved_goal_in_obs = self.goal and bool(loaded.config.env.achieved_goal_in_obs)
        self.input_dim = info.obs_dim + info.goal_dim
        self.observation_dim = info.obs_dim - (info.goal_dim if self.achieved_goal_in_obs else 0)
        self.discrete = info.discrete
        self.observation_space = loaded.observation_space
        self.action_space = loaded.action_space
        self.state: np.ndarray | None = None  # [N, state_dim] of a recurrent policy
        # Image observations (info.obs_shape): raw frames are flattened channels-first as the
        # env adapter does; with [env] stack = k the policy keeps each row's last k frames
        # (``frames``), or takes whole stacks shaped as gymnasium's FrameStackObservation.
        # Flat observations under [env] stack = k alike: raw observations, kept k at a time.
        self.image = bool(info.obs_shape)
        # An env that stacks its own frames (envpool's Atari) gives whole stacks: taken as they
        # are, one observation each, as the engine takes them.
        stack = int(loaded.config.env.stack)
        self.stack = (info.stack if self.image else stack) if stack > 1 else 1
        self.frames: np.ndarray | None = None  # [N, stack, frame values] (uint8 for images)
        self._fresh: np.ndarray | None = None  # rows whose next frame starts a stack
        # Adapters without a gymnasium space (Unity) take the engine's flat rows as they are.
        self._frame: _Frames | None = None
        if self.image and self.observation_space is not None:
            self._frame = _frame_reader(self.observation_space, self.stack)
        elif self.stack > 1 and loaded.frame_space is not None:
            self._frame = _flat_frames(loaded.frame_space, self.stack)

    @property
    def recurrent(self) -> bool:
        """Whether the policy has a memory (``state_dim > 0``) that :meth:`reset` clears."""
        return self.agent.state_dim > 0

    def reset(self, n: int | None = None, where: np.ndarray | None = None) -> None:
        """Start new episodes: all ``n`` rows (default: as many as the state has, else 1), or
        only the rows of the bool mask ``where``. A no-op for a feedforward policy."""
        if self.stack > 1:  # the next frames start new stacks
            if where is None:
                self.frames = None
            else:
                self._fresh = np.asarray(where, bool).reshape(-1)
        if not self.recurrent:
            return
        if where is None:
            rows = n if n is not None else (1 if self.state is None else len(self.state))
            self.state = self.agent.initial_state(rows)
            return
        where = np.asarray(where, bool).reshape(-1)
        if self.state is None or len(self.state) != len(where):
            raise ValueError(
                f"reset(where=...) has {len(where)} rows but the policy's state has "
                f"{0 if self.state is None else len(self.state)}; call reset(n) first"
            )
        self.state[where] = self.agent.initial_state(int(where.sum()))

    @property
    def input_dtype(self) -> str:
        """The flat input's dtype: uint8 for image observations, else float32."""
        return "uint8" if self.image else "float32"

    @property
    def input_layout(self) -> str:
        """The flat input's parts, in order (what :meth:`flat_input` builds and export takes)."""
        if self.image:
            c, *hw = self.loaded.info.frame_shape
            frames = f"{self.stack} frames, oldest first, " if self.stack > 1 else ""
            return f"image[{self.input_dim}]: {frames}channels-first {(c, *hw)} uint8"
        if not self.goal:
            if self.stack > 1:
                d = self.observation_dim // self.stack
                return f"observation[{self.observation_dim}]: {self.stack} of [{d}], oldest first"
            return f"observation[{self.observation_dim}]"
        g = self.loaded.info.goal_dim
        ag = f", achieved_goal[{g}]" if self.achieved_goal_in_obs else ""
        return f"observation[{self.observation_dim}]{ag}, desired_goal[{g}]"

    def flat_input(self, obs: Any, stacked: bool | None = None) -> tuple[np.ndarray, bool]:
        """Raw observation(s) -> the engine's flat float32 policy input ``[N, input_dim]``, and
        whether ``obs`` was a single observation. ``stacked`` says how an image policy with
        ``stack = k`` reads an array shaped ``(k, *frame)``: one whole stack (True) or a batch
        of ``k`` frames (False); that shape is refused without it."""
        from wheeler2.env import policy_obs

        space = self.observation_space
        if self._frame is not None:
            return self._framed_input(obs, *self._frame, stacked=stacked)
        if not self.goal:
            return _rows(obs, space, self.observation_dim, "observation")
        if not isinstance(obs, dict) or any(k not in obs for k in GOAL_KEYS):
            raise ValueError(f"a goal env's observation is a dict with keys {', '.join(GOAL_KEYS)}")
        part = {}
        single = False
        g = self.loaded.info.goal_dim
        for key in GOAL_KEYS:
            sub = None if space is None else space[key]
            dim = self.observation_dim if key == "observation" else g
            part[key], one = _rows(obs[key], sub, dim, key)
            single = one if key == "observation" else single
        rows = {key: len(value) for key, value in part.items()}
        if len(set(rows.values())) > 1:  # else numpy's concatenate error, naming no key
            counts = ", ".join(f"{key} {n}" for key, n in rows.items())
            raise ValueError(
                f"a goal env's observation: its parts hold different numbers of rows ({counts}); "
                "expected one observation each, or batches of one size"
            )
        head = part["observation"]
        if self.achieved_goal_in_obs:
            head = np.concatenate([head, part["achieved_goal"]], axis=-1)
        return policy_obs(head, part["desired_goal"]), single

    def _framed_input(
        self,
        obs: Any,
        frame_shape: tuple[int, ...],
        stacked_shape: tuple[int, ...],
        flatten: Callable[[np.ndarray], np.ndarray],
        stacked: bool | None = None,
    ) -> tuple[np.ndarray, bool]:
        """Raw image (or, under a flat stack, raw) observation(s) -> rows ``[N, input_dim]``
        (uint8 for images): one frame per row (kept in the policy's own stack when ``stack >
        1``; :meth:`reset` at episode starts), or whole stacks ``[N, stack, *frame]``; a flat
        stack also takes the engine's own stacked rows ``[N, input_dim]``."""
        arr = np.asarray(obs)
        flat_rows = not self.image and len(frame_shape) > 0 and self.input_dim != frame_shape[-1]
        if flat_rows and arr.ndim in (1, 2) and arr.shape[-1:] == (self.input_dim,):
            return arr.astype(np.float32).reshape(-1, self.input_dim), arr.ndim == 1
        if self.stack > 1 and arr.shape == stacked_shape:
            # (k, *frame) is both one stack and k envs' frames: a 4-env loop with stack 4
            # would otherwise get one action for its four observations.
            if stacked is None:
                raise ValueError(
                    f"observation: shape {arr.shape} is one stack of {self.stack} frames or a "
                    f"batch of {self.stack} frames {frame_shape}; say which: "
                    "policy(obs, stacked=True) or policy(obs, stacked=False)"
                )
            if not stacked:
                return self._kept_stack(flatten(arr)), False
        if arr.shape in (frame_shape, stacked_shape):
            arr, single = arr[None], True
        elif arr.shape[1:] in (frame_shape, stacked_shape):
            single = False
        else:
            want = frame_shape if self.stack == 1 else f"{frame_shape} or {stacked_shape}"
            raise ValueError(
                f"observation: got shape {arr.shape}, expected {want} (one observation) or "
                "a batch of them"
            )
        n = len(arr)
        if self.stack > 1 and arr.shape[1:] == stacked_shape:
            return flatten(arr.reshape(n * self.stack, *frame_shape)).reshape(n, -1), single
        rows = flatten(arr)
        if self.stack == 1:
            return rows, single
        return self._kept_stack(rows), single

    def _kept_stack(self, rows: np.ndarray) -> np.ndarray:
        """One new frame per row pushed onto the policy's own stacks -> the stacked rows."""
        n = len(rows)
        if self.frames is None or len(self.frames) != n:
            # Episodes' first frames, repeated to fill the stack (FrameStack's padding).
            self.frames = np.repeat(rows[:, None], self.stack, axis=1)
        else:
            self.frames = np.concatenate([self.frames[:, 1:], rows[:, None]], axis=1)
            fresh = self._fresh
            if fresh is not None and fresh.any():
                self.frames[fresh] = rows[fresh][:, None]
        self._fresh = None
        return self.frames.reshape(n, -1).copy()

    def engine_action(self, flat: np.ndarray) -> np.ndarray:
        """The agent's deterministic action for a flat input batch: ``[-1, 1]`` or int64. A
        recurrent policy reads its state and keeps the one the step returns."""
        if not self.recurrent:
            return self.agent.act(flat, explore=False).action
        if self.state is None:
            self.state = self.agent.initial_state(len(flat))
        elif len(self.state) != len(flat):
            raise ValueError(
                f"this recurrent policy carries memory for {len(self.state)} observations and "
                f"got {len(flat)}; call policy.reset({len(flat)}) when the new episodes start"
            )
        out = self.agent.act(flat, explore=False, state=self.state)
        self.state = out.state
        return out.action

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """Engine actions ``[N, ...]`` -> the env's: the gym adapter's mapping of ``[-1, 1]``
        onto the Box bounds (envs/gym.py ``GymVecEnv._to_env_action``), or the Discrete start
        added. Without a gymnasium action space (Unity) actions stay as they are."""
        from gymnasium import spaces

        space = self.action_space
        n = len(action)
        if isinstance(space, spaces.Box):
            low = space.low.astype(np.float64).reshape(-1)
            high = space.high.astype(np.float64).reshape(-1)
            a = np.clip(np.asarray(action, np.float64).reshape(n, -1), -1.0, 1.0)
            scaled = low + (a + 1.0) * 0.5 * (high - low)
            return scaled.astype(np.float32).reshape(n, *space.shape)
        if isinstance(space, spaces.Discrete):
            return np.asarray(action, np.int64).reshape(n) + int(space.start)
        return np.asarray(action)

    def __call__(self, obs: Any, stacked: bool | None = None) -> Any:
        flat, single = self.flat_input(obs, stacked)
        action = self.env_action(self.engine_action(flat))
        if not single:
            return action
        return int(action[0]) if self.discrete else action[0]

    def __repr__(self) -> str:
        run = self.loaded
        return f"Policy({run.algo}, {run.config.env.id}, input [{self.input_layout}])"


def load_policy(run_dir: str | Path, checkpoint: str = "best") -> Policy:
    """The learner of ``run_dir`` as a callable on raw env observations (see :class:`Policy`).

    >>> policy = wheeler2.load_policy("runs/pendulum-ddpg-...")   # doctest: +SKIP
    >>> action = policy(env.reset(seed=0)[0])                     # doctest: +SKIP
    """
    return Policy(load_learner(run_dir, checkpoint))


# (one frame's shape, a whole stack's shape, frames [M, *frame] -> rows [M, values])
_Frames = tuple[tuple[int, ...], tuple[int, ...], Callable[[np.ndarray], np.ndarray]]


def _flattener(frame: Any, dtype: Any) -> Callable[[np.ndarray], np.ndarray]:
    """Frames ``[M, *frame]`` -> rows ``[M, values]`` of ``dtype``, through the adapter's own
    flattening (``envs/spaces.py``, found by name: the engine imports no env module; one-hot
    for Discrete)."""
    from wheeler2 import registry

    flattener = registry.resolve_object("wheeler2.envs.spaces:ObsFlattener")(frame)
    dim = flattener.dim

    def flatten(frames: np.ndarray) -> np.ndarray:
        out = np.empty((len(frames), dim), dtype)
        for i, f in enumerate(frames):
            flattener(f, out[i])
        return out

    return flatten


def _flat_frames(space: Any, stack: int) -> _Frames:
    """The :data:`_Frames` of flat observations under ``[env] stack``: one raw observation of
    ``space``, ``stack`` of them along a first axis (gymnasium's FrameStackObservation), as
    float32 rows."""
    shape = tuple(space.shape or ())
    return shape, (stack, *shape), _flattener(space, np.float32)


def _frame_reader(space: Any, stack: int) -> _Frames:
    """(raw frame shape, stacked shape, frames -> uint8 rows) of an image env's observation
    ``space`` (stacked: the frames along a first axis)."""
    from gymnasium import spaces

    frame = space
    if stack > 1:
        frame = spaces.Box(space.low[0], space.high[0], dtype=space.dtype)
    return tuple(frame.shape), tuple(space.shape), _flattener(frame, np.uint8)


# -- agents that meet: a run's tables against another run or random play --------------------------

# Through the registry by name, as every env module: the engine imports no envs module itself.
ARENA = "wheeler2.envs.arena"
DEFAULT_VS_EPISODES = 100


@dataclass
class TablePolicy:
    """One table of a run as a player in ``envs/arena.py``: the agents it claims and its learner,
    acting deterministically (``explore=False``) on the rows its adapter makes."""

    name: str  # the learner's [[team]] name
    table: str
    agents: tuple[str, ...]  # the learner's agent globs
    agent: Agent
    # latest.pt's state, as the asked best.pt held none for it yet (load_tables)
    from_latest: bool = False

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self.agent.act(np.asarray(rows, np.float32), explore=False).action


def _claims(config: Config, globs: Any) -> tuple[str, ...]:
    if globs is None:  # the member names none: the agents [env] kwargs select, else all
        globs = config.env.kwargs.get("agents", ("*",))
    return (globs,) if isinstance(globs, str) else tuple(globs)


def load_tables(run_dir: str | Path, checkpoint: str = "best") -> list[TablePolicy]:
    """Every table's learner of a run, restored from ``checkpoint``. ``"best"``: the lead's best
    checkpoint (``"latest"`` before one), which holds the lead's state at its best eval and each
    other member's as it last sent it (at its own last eval or checkpoint); a table it holds
    nothing for yet (the lead's first eval was its best and came first) is taken from
    ``latest.pt``, which :attr:`TablePolicy.from_latest` says. A recurrent learner is refused:
    the arena hands policies rows without memory."""
    from wheeler2.checkpoint import CheckpointError
    from wheeler2.config import load
    from wheeler2.runtime.plan import learner_plan, plan_team
    from wheeler2.runtime.restore import restore

    run_dir = Path(run_dir)
    config = load(run_config_path(run_dir))
    _check_which(checkpoint)
    restored = restore(config, run_dir, checkpoint)
    saved = restored.payload.get("members") or {}
    plans = plan_team(config)
    latest = None
    tables = []
    for table in config.tables:
        lead = learner_plan([p for p in plans if p.spec.table == table])
        source = restored
        if lead.name not in saved and checkpoint == "best" and restored.path.name != "latest.pt":
            if latest is None:
                latest = restore(config, run_dir, "latest")
            source = latest
        if lead.name not in (source.payload.get("members") or {}):
            raise CheckpointError(
                f"{source.path}: holds no state for {lead.name!r}, the learner of table {table!r}"
            )
        agent = source.agents[lead.name]
        if agent.state_dim > 0:
            raise UsageError(
                f"{run_dir}: {lead.name!r} is recurrent; --vs plays feedforward policies only"
            )
        claims = _claims(config, lead.spec.agents)
        tables.append(TablePolicy(lead.team, table, claims, agent, source is not restored))
    return tables


def versus(
    run_dir: str | Path,
    opponent: str | Path = "random",
    episodes: int | None = None,
    checkpoint: str = "best",
    seed: int | None = None,
) -> Any:
    """What ``wheeler2 eval RUN --vs RUN2|random`` does: the tables of ``run_dir`` against those
    of ``opponent`` (a run directory of the same env) or uniformly random play, in whole
    episodes of the run's PettingZoo env (``envs/arena.py`` ``versus``: a head-to-head in both
    seats for a self-play table of a two-player game, else each table's agents against the
    rest). ``episodes`` defaults to 100, ``seed`` to the run's ``experiment.seed``. Returns the
    arena's ``Versus`` (``.lines()`` is what the command prints)."""
    from wheeler2 import registry
    from wheeler2.config import load

    run_dir = Path(run_dir)
    config = load(run_config_path(run_dir))
    env_id = config.env.id
    if not env_id.startswith("pettingzoo:"):
        raise UsageError(f"{run_dir}: --vs plays PettingZoo envs; this run's env is {env_id}")
    if episodes is not None and episodes < 1:
        raise UsageError(f"--episodes {episodes}: expected a number >= 1")
    game_kwargs = registry.resolve_object(f"{ARENA}:game_kwargs")
    contender = registry.resolve_object(f"{ARENA}:Contender")
    kwargs = game_kwargs(config.env.kwargs)
    if str(opponent) == "random":
        theirs = contender("random")
    else:
        other_dir = Path(opponent)
        other = load(run_config_path(other_dir))
        if other.env.id != env_id:
            raise UsageError(
                f"{other_dir} plays {other.env.id} and {run_dir} plays {env_id}; "
                "--vs needs two runs of one env"
            )
        if game_kwargs(other.env.kwargs) != kwargs:
            raise UsageError(
                f"{other_dir} plays {env_id} with kwargs {game_kwargs(other.env.kwargs)} and "
                f"{run_dir} with {kwargs}; --vs needs two runs of one env"
            )
        theirs = contender(other_dir.resolve().name, load_tables(other_dir, checkpoint))
    mine = contender(run_dir.resolve().name, load_tables(run_dir, checkpoint))
    play = registry.resolve_object(f"{ARENA}:versus")
    n = DEFAULT_VS_EPISODES if episodes is None else episodes
    result = play(
        env_id, config.env.kwargs, mine, theirs, n, config.experiment.seed if seed is None else seed
    )
    for c in (mine, theirs):
        for t in c.tables:
            if getattr(t, "from_latest", False):  # a TablePolicy (load_tables) stood in
                result.notes.append(
                    f"{c.name}: table {t.table}'s learner {t.name!r} from latest.pt, as "
                    "best.pt holds no state for it yet (it came before that table's first eval)"
                )
    return result
