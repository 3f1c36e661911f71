"""The typed, frozen result of reading an experiment file; each class is also its table's schema.

Each field states its key once: the type in the annotation, the file's default in the field, the
bounds and choices in its metadata (``wheeler2.schema``). ``reader.py`` checks a file against
these fields; ``docs/config.md`` lists them for users. ``[buffer]`` and ``[buffer.her]`` live
with the replay they configure, in ``wheeler2/buffer/config.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from wheeler2.buffer.config import BufferConfig, HerConfig
from wheeler2.schema import bounded, choice, setting
from wheeler2.trackers import TRACKERS, WandbConfig

from .toml_out import dumps_toml

BACKENDS = ("serial", "local", "ray")
# An "actor" is an explorer that never learns: it acts with the learner's synced weights and its
# own exploration (Ape-X's actors), so it must sync and be an off-policy algorithm.
ROLES = ("learner", "explorer", "actor")
DEFAULT_TABLE = "main"
# "sync": the copies step in the member's process; "async": one subprocess per copy, for envs
# slow enough that stepping them in parallel beats the pipe round trips; "envpool": envpool's
# C++ thread pool, for the gymnasium ids it covers.
VECTOR_MODES = ("sync", "async", "envpool")

__all__ = [
    "BACKENDS",
    "DEFAULT_TABLE",
    "ROLES",
    "VECTOR_MODES",
    "BufferConfig",
    "Config",
    "CurriculumConfig",
    "PlayConfig",
    "EnvConfig",
    "ExperimentConfig",
    "HeadConfig",
    "HerConfig",
    "MemberConfig",
    "SyncConfig",
    "TaskConfig",
    "WandbConfig",
    "WrapperConfig",
]


def plain_name(name: str) -> str | None:
    """What ``name`` should have been, or None when it can name a run directory.

    The run directory is ``<out>/<name>-<time>``: a separator, ``..`` or an absolute path would
    put it (and its checkpoints) somewhere other than under ``out``.
    """
    if not name.strip() or "/" in name or "\\" in name or ".." in name:
        return "a plain name without '/', '\\' or '..' (the run directory is <out>/<name>-<time>)"
    return None


SEED_LIMIT = 2**32
HEARTBEAT_MIN_S = 4.0


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = setting(rule=plain_name)  # in a file: defaults to the file's name
    total_steps: int = bounded(gt=0)  # env steps of all members together
    eval_every: int = bounded(gt=0)  # env steps between evaluations of the learner's actor
    # Below 2**32: what numpy's legacy seeding takes, and every seed derived from it (a member's
    # seed * 10_007 + ...: wheeler2/runtime/seeds.py) stays within torch's 64-bit seeds.
    seed: int = bounded(0, ge=0, lt=SEED_LIMIT)
    eval_episodes: int = bounded(10, gt=0)
    backend: str = choice("serial", BACKENDS)
    out: str = "runs"  # parent of run directories
    checkpoint_every: int | None = bounded(None, gt=0)  # None: eval_every (set after init)
    progress: bool = True
    eval_threshold: float | None = None
    stop_at_threshold: bool = False  # end the run at the first eval above eval_threshold
    ray_address: str | None = None
    # Seconds without a heartbeat before a member is declared hung.
    # A member reports every 2 s (runtime/member.py REPORT_EVERY_S): under twice that, one late
    # report would take a healthy member for a hung one.
    heartbeat_s: float = bounded(30.0, ge=HEARTBEAT_MIN_S)
    # One name or a list: a string is read as a list of one, [] leaves metrics.csv alone.
    tracker: str | tuple[str, ...] = setting(
        ("tensorboard",),
        choices=TRACKERS,
        expected="one of 'tensorboard', 'wandb', or a list of them",
    )
    wandb: WandbConfig | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_every is None:
            object.__setattr__(self, "checkpoint_every", self.eval_every)
        names = (self.tracker,) if isinstance(self.tracker, str) else self.tracker
        object.__setattr__(self, "tracker", tuple(dict.fromkeys(names)))


@dataclass(frozen=True)
class WrapperConfig:
    """One entry of ``[env] wrappers``: each env copy becomes ``wrapper(env, **kwargs)``."""

    wrapper: str  # "module:Name" or "./file.py:Name" (made absolute against the config file)
    kwargs: dict[str, Any] = field(default_factory=dict)


WRAPPERS_EXPECTED = (
    'a list of "module:Name" strings or { wrapper = "module:Name", kwargs = {...} } tables'
)


@dataclass(frozen=True)
class EnvConfig:
    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = bounded(1, ge=1)  # vectorized copies per member
    vector: str = choice("sync", VECTOR_MODES)
    # Goal envs: the policy also sees the achieved goal, as SB3's MultiInputPolicy does
    # (no better or worse on FetchReach and bit flipping: experiments/results/notes/her_parity.md).
    achieved_goal_in_obs: bool = False
    # The policy sees the last `stack` observations side by side (wheeler2.env.FrameStack).
    stack: int = bounded(1, ge=1)
    # Gymnasium wrappers around each copy, first entry innermost, before wheeler2's own
    # adapters (flattening, action scaling, stacking) see the env.
    wrappers: tuple[WrapperConfig, ...] = setting((), expected=WRAPPERS_EXPECTED)


OPPONENT_SAMPLING = ("latest", "uniform", "win_rate")
EVAL_OPPONENTS = ("random", "pool", "tables")


@dataclass(frozen=True)
class PlayConfig:
    """How agents meet in a multi-agent env (docs/envs.md, "Agents that meet")."""

    # Every agent of a member's copies is driven by the table that claims it (otherwise the
    # agents a member does not own act at random).
    joint: bool = False
    # The member's own env steps between pulls of the other tables' policies.
    pull_every: int = bounded(1000, gt=0)
    # Self-play (a table that claims several seats of a turn-based game plays one, its pool
    # the others): snapshots kept, and the learner's updates between snapshots.
    pool_size: int = bounded(8, ge=1)
    snapshot_every: int = bounded(1000, gt=0)
    # Whom a copy's seats face each episode: the current policy, a snapshot drawn uniformly,
    # or one drawn by how often it still beats the table (prioritized fictitious self-play).
    opponents: str = choice("latest", OPPONENT_SAMPLING)
    # The share of self-play games against a uniformly random player instead: a policy that
    # only meets itself learns to be safe, not to punish the mistakes a weak player makes.
    random_share: float = bounded(0.0, ge=0, le=1)
    # Self-play: each move of the table's own opponents is uniformly random with this chance,
    # so the table meets the openings and lines a strong player may choose, not only its own.
    opponent_epsilon: float = bounded(0.0, ge=0, le=1)
    # Self-play: the table's own opponents move uniformly at random while the game has had
    # fewer than this many moves, so the table meets every opening a strong player may choose
    # (in tic-tac-toe each first move draws with best play) followed by strong play.
    random_opening: int = bounded(0, ge=0)
    # ... or, set, each game draws its opening length uniformly from random_opening_min to
    # random_opening: a fixed length leaves the opponent's later opening moves always random,
    # so the table meets them played strongly only by chance (docs/envs.md, self-play).
    random_opening_min: int | None = bounded(None, ge=0)
    # Self-play, exploring starts: every game begins with this many uniformly random moves,
    # either seat's, the table's own included, so it learns the positions after every opening
    # as both players and its snapshots can punish a weak answer to any of them.
    random_start: int = bounded(0, ge=0)
    # Self-play: the moves of the table's own opponents (its current policy and snapshots, not
    # the random player) go into its replay too, seen from the mover's side (an off-policy
    # table; an on-policy one learns from its own rollouts only).
    record_opponents: bool = False
    # Self-play in a two-player zero-sum game, negamax values: each of the table's moves is
    # learned from to the opponent's reply (one ply, not turn to turn), its value being minus
    # the opponent's value of the position it leaves, so what the table learns assumes the
    # opponent's best reply rather than the mix of pool and random players it happened to
    # meet (DQN, n_step = 1; docs/envs.md, "Negamax values").
    negamax: bool = False
    # ... in that target the opponent replies uniformly at random with this chance (its best
    # reply otherwise): among the moves that hold against best play, those that give a weak
    # player the most ways to go wrong are worth more.
    negamax_random: float = bounded(0.0, ge=0, lt=1)
    # Head-to-head evals at each eval point (turn-based games): win / draw / loss and an
    # Elo-style rating against each.
    eval_vs: tuple[str, ...] = setting((), choices=EVAL_OPPONENTS)  # eval_episodes games each


@dataclass(frozen=True)
class CurriculumConfig:
    """Stages of an env that exposes ``set_curriculum_stage(k)``."""

    stages: int = bounded(gt=1)
    # The eval figure to reach, one per advance (stages - 1 values): the stage goes from k to
    # k + 1 at the first eval whose `metric` is >= advance_at[k].
    advance_at: tuple[float, ...] = ()
    # The lead's eval figure: eval_return, or a head-to-head one, e.g. vs_random/win (check
    # refuses one no eval of the file reports: wheeler2/runtime/curriculum.py).
    metric: str = "eval_return"


@dataclass(frozen=True)
class HeadConfig:
    name: str
    reward: str = "env"  # "env" or "module:function"
    weight: float = 1.0


@dataclass(frozen=True)
class TaskConfig:
    spec: str | None = None
    heads: tuple[HeadConfig, ...] = (HeadConfig("env"),)


@dataclass(frozen=True)
class SyncConfig:
    every: int = bounded(gt=0)  # the explorer's own env steps between syncs
    keep: tuple[str, ...] = ()  # actor sub-module globs the explorer keeps
    alpha: float = bounded(1.0, gt=0, le=1)  # blend toward the learner; 1 copies


@dataclass(frozen=True)
class MemberConfig:
    name: str  # in a file: defaults to algo
    algo: str
    role: str = choice(MISSING, ROLES)
    # An instance of the algorithm's Params dataclass. (role before it has no default either:
    # choice(MISSING, ...) is a required field, which mypy cannot see.)
    params: Any  # type: ignore[misc]
    count: int = bounded(1, ge=1)
    # Params that differ per copy of a count > 1 member: {key = [v0, v1, ...]} (one per copy)
    # or {key = {base = b, alpha = a}}, Ape-X's spread b ** (1 + a i / (count - 1)).
    per_copy: dict[str, Any] | None = None
    sync: SyncConfig | None = None
    agents: tuple[str, ...] | None = None
    # The replay table the member writes into and, for an explorer, whose learner it syncs
    # from. Members with other observation or action spaces (predators and prey) go in tables
    # of their own, each with one learner; an on-policy learner's table has no replay.
    table: str = setting(DEFAULT_TABLE, rule=plain_name)
    # An explorer's or actor's own policy (a population's mean, a PPO explorer's actor) is
    # evaluated on the run's schedule beside the lead's, into summary.json member_evals: what
    # the member itself would be worth. Learners are always evaluated.
    evaluate: bool = False
    # A learner's least share of the run's env steps (local backend): while below it, the
    # learner pays fewer of the updates the gate owes per step it takes, so the gate holds the
    # other producers back until its own actor has played its share. ERL's RL actor plays one
    # episode in eleven; a learner beside a fast population otherwise plays almost none.
    step_share: float = bounded(0.0, ge=0, lt=1)
    # Niceness of the member's own process (local and ray backends): explorers at 5-10 leave
    # the learner its core when the machine has fewer cores than members.
    nice: int = bounded(0, ge=0, le=19)
    num_cpus: float | None = bounded(None, ge=0)
    num_gpus: float | None = bounded(None, ge=0)
    # Ray custom resources, e.g. {explorer_node = 1}.
    resources: dict[str, float] | None = setting(
        None,
        ge=0,
        expected="a table of resource names to numbers >= 0, e.g. { explorer_node = 1 }",
    )

    def __reduce__(self) -> tuple[Any, ...]:
        # ``params`` is an instance of the algorithm's Params. Where the algorithm is a file
        # named by path (``"./mine.py:Mine"``), its module was imported under a made-up name
        # that another process (a local or ray member) does not know, so the instance would not
        # unpickle there: it travels as its field values and is rebuilt from ``algo``.
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        params = plain.pop("params")
        if not dataclasses.is_dataclass(params) or isinstance(params, type):
            return (_member_config, (plain, None, params))
        values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params) if f.init}
        return (_member_config, (plain, values, None))


def _member_config(
    plain: dict[str, Any], values: dict[str, Any] | None, params: Any
) -> MemberConfig:
    """A :class:`MemberConfig` unpickled (its ``__reduce__``): the Params rebuilt from their
    values by the algorithm's own class, resolved in this process."""
    if values is not None:
        from wheeler2 import registry

        params = registry.resolve_algo(plain["algo"]).Params(**values)
    return MemberConfig(**plain, params=params)


def copy_value(spec: Any, copy: int, count: int) -> Any:
    """Copy ``copy``'s value of a ``per_copy`` entry: the list's item, or Ape-X's spread."""
    if isinstance(spec, dict):
        base, alpha = float(spec["base"]), float(spec.get("alpha", 7.0))
        return base ** (1.0 + alpha * copy / (count - 1)) if count > 1 else base
    return spec[copy]


def params_of(member: MemberConfig, copy: int) -> Any:
    """The Params of copy ``copy`` of ``member``: its ``params`` with the ``per_copy`` values."""
    if not member.per_copy:
        return member.params
    values = {k: copy_value(v, copy, member.count) for k, v in member.per_copy.items()}
    return dataclasses.replace(member.params, **values)


@dataclass(frozen=True)
class Config:
    # Equality compares what the experiment is, not where it was read from.
    path: Path = field(compare=False)
    experiment: ExperimentConfig
    env: EnvConfig
    task: TaskConfig
    buffer: BufferConfig
    team: tuple[MemberConfig, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)
    play: PlayConfig = field(default_factory=PlayConfig)
    curriculum: CurriculumConfig | None = None

    @property
    def learner(self) -> MemberConfig:
        """The lead learner: the first table's. Its evals are the run's (summary, best.pt)."""
        return next(m for m in self.team if m.role == "learner")

    @property
    def tables(self) -> tuple[str, ...]:
        """The replay tables, in the order the file first names them (the lead's first)."""
        return tuple(dict.fromkeys([self.learner.table] + [m.table for m in self.team]))

    @property
    def explorers(self) -> tuple[MemberConfig, ...]:
        """Every member that is not a learner: learning explorers and actors."""
        return tuple(m for m in self.team if m.role != "learner")

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain TOML-ready data (defaults filled, ``None`` left out)."""
        task: dict[str, Any] = {"heads": [_plain(h) for h in self.task.heads]}
        if self.task.spec is not None:
            task["spec"] = self.task.spec
        team = []
        for m in self.team:
            member = {"name": m.name, "algo": m.algo, "role": m.role, "count": m.count}
            if m.table != DEFAULT_TABLE:
                member["table"] = m.table
            if m.nice:
                member["nice"] = m.nice
            if m.evaluate:
                member["evaluate"] = True
            if m.step_share:
                member["step_share"] = m.step_share
            for key in ("agents", "num_cpus", "num_gpus", "resources", "sync", "per_copy"):
                if getattr(m, key) is not None:
                    member[key] = _plain(getattr(m, key))
            member["params"] = _plain(m.params)
            team.append(member)
        out = {
            "experiment": _plain(self.experiment),
            "env": _plain(self.env),
            "task": task,
            "buffer": _plain(self.buffer),
            "team": team,
        }
        if self.play != PlayConfig():
            out["play"] = _plain(self.play)
        if self.curriculum is not None:
            out["curriculum"] = _plain(self.curriculum)
        return out

    def to_toml(self) -> str:
        """The resolved config; ``load`` reads it back into an equal Config (used by resume)."""
        data = self.to_dict()
        try:
            import tomli_w
        except ImportError:
            return dumps_toml(data)
        return tomli_w.dumps(data)


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and dicts -> dicts and lists, dropping ``None`` (TOML has no null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
