"""Static description of a replay buffer: what one transition holds and how sampling behaves."""

from __future__ import annotations

from dataclasses import dataclass

from wheeler2.needs import SequenceConfig
from wheeler2.schema import bounded, choice, problems

from .admission import ADMIT_UNITS

FORGET_RULES = ("oldest", "priority", "reservoir")

HER_STRATEGIES = ("future", "final", "episode", "random")


class ReplayError(RuntimeError):
    """A misuse of the replay buffer (wrong shapes, missing goals, closed buffer)."""


class ReplayTimeout(ReplayError):
    """A peer stopped making progress: a producer or the learner may have died."""


@dataclass(frozen=True)
class Layout:
    """The shape of one stored transition."""

    obs_dim: int  # goal envs: the observation part only
    act_dim: int  # Box: dimension; Discrete: number of actions (stored as one int64)
    discrete: bool = False
    num_heads: int = 1
    goal_dim: int = 0
    logp: bool = False
    # Width of the policy-state column (a recurrent learner's state_dim; 0: no column). Rows
    # written without a state, or by a member whose state has another width, hold zeros.
    state_dim: int = 0
    # Image observations (buffer/frames.py): the channels-first (C, H, W) of one uint8 frame,
    # and the frames stacked in each observation (obs_dim = stack * C * H * W). Each frame is
    # stored once; () keeps obs and next_obs as packed float32 columns.
    frame_shape: tuple[int, ...] = ()
    stack: int = 1

    def __post_init__(self) -> None:
        bad = self.obs_dim <= 0 or self.act_dim <= 0 or self.num_heads <= 0
        if bad or self.goal_dim < 0 or self.state_dim < 0 or self.stack < 1:
            raise ReplayError(f"invalid layout {self}")
        if self.frame_shape and self.obs_dim != self.stack * self.frame_size:
            raise ReplayError(
                f"invalid layout {self}: obs_dim must be stack * prod(frame_shape) "
                f"= {self.stack * self.frame_size}"
            )

    @property
    def images(self) -> bool:
        """Whether observations are uint8 frames stored once each (buffer/frames.py)."""
        return bool(self.frame_shape)

    @property
    def frame_size(self) -> int:
        """Bytes of one uint8 frame (0 without images)."""
        size = 1
        for d in self.frame_shape:
            size *= int(d)
        return size if self.frame_shape else 0


@dataclass(frozen=True)
class HerConfig:
    """``[buffer.her]``: Hindsight Experience Replay, goal envs only."""

    strategy: str = choice("future", HER_STRATEGIES)  # where relabelled goals come from
    k: int = bounded(4, ge=1)  # relabelled goals per real one: a fraction k / (k + 1)
    # Relabelled transitions end where they reach their new goal, as the env's own episodes do
    # when it ends them on success (bit flipping); needs the task's success() and n_step = 1.
    terminate_on_goal: bool = False

    def __post_init__(self) -> None:
        _refuse(self, "her")

    @property
    def fraction(self) -> float:
        return self.k / (self.k + 1)


@dataclass(frozen=True)
class BufferConfig:
    """``[buffer]``, the user-facing replay settings; every default here is the file's default.

    ``docs/config.md`` documents each key; the config reader checks a file's values against these
    fields' annotations and bounds.
    """

    capacity: int = bounded(200_000, gt=0)  # transitions kept (a ring)
    batch_size: int = bounded(256, gt=0)
    prioritized: bool = False
    alpha: float = bounded(0.6, ge=0, le=1)  # priority exponent
    beta: float = bounded(0.4, ge=0, le=1)  # importance-weight exponent, annealed to 1
    n_step: int = bounded(1, ge=1)
    # Learner gradient steps per inserted transition, enforced by the buffer.
    updates_per_insert: float = bounded(1.0, gt=0, le=1000)  # more is a typo, not a ratio
    her: HerConfig | None = None
    checkpoint: bool = False  # save the buffer's contents with each checkpoint
    chunk: int = bounded(64, gt=0)  # transitions a producer stages before one bulk insert
    shards: int = bounded(1, ge=1)  # replay shards (ray backend; serial and local keep one)
    # Fraction of every learner batch drawn from the learner's own transitions, kept in a
    # private table (Zheng & Cheng, GECCO 2023: other agents' data alone can destabilise it).
    own_share: float = bounded(0.0, ge=0, lt=1)
    # Sample the learner's next batch in a thread while the current one trains (its draws see
    # priorities one update older). Off: on the CPU it measured within +-3 % (the GIL).
    prefetch: bool = False
    # Image replays (buffer/frames.py): frames kept beyond one per transition, as a fraction of
    # capacity, for the first frame of each episode (episodes averaging fewer than 1 / slack
    # steps lose their oldest transitions before the ring overwrites them).
    frame_slack: float = bounded(0.0625, gt=0, le=4)
    # Admission (buffer/admission.py): the chance that a row or episode the task's
    # worth_keeping does not flag is stored anyway (1.0: no filter), and what one decision covers.
    keep: float = bounded(1.0, ge=0, le=1)
    admit: str = choice("episode", ADMIT_UNITS)
    # A sampled transition's priority: these weights times |TD error| and its RND novelty
    # (buffer/priority.py); the defaults are TD alone.
    priority_td: float = bounded(1.0, ge=0)
    priority_novelty: float = bounded(0.0, ge=0)
    # What the full ring forgets (buffer/forgetting.py): the oldest rows, or all but the rows
    # a rule carries forward (at most forget_keep / (1 - forget_keep) per inserted row).
    forget: str = choice("oldest", FORGET_RULES)
    forget_keep: float = bounded(0.5, gt=0, lt=1)


@dataclass(frozen=True)
class ReplayConfig(BufferConfig):
    """What :class:`Replay` runs with: the ``[buffer]`` keys (same names, same defaults, since
    they are inherited) plus what the engine derives for a run.

    ``checkpoint`` and ``shards`` are inherited and unused here (the runtime acts on them).
    """

    # Updates over which beta anneals linearly to 1; None keeps beta fixed.
    beta_steps: int | None = bounded(None, ge=0)
    eps: float = bounded(1e-6, gt=0)  # > 0 so that every item keeps a chance to be sampled
    min_size: int = bounded(1000, ge=0)
    # How many inserts producers may run ahead of the learner before a flush blocks.
    gate_tolerance: int = bounded(2048, ge=0)
    timeout_s: float = bounded(60.0, gt=0)
    # A recurrent learner's sequences; None samples transitions. With it, ``sample`` returns
    # sequences and the priority tree ranks sequence starts (``buffer.sequence``).
    sequence: SequenceConfig | None = None

    def __post_init__(self) -> None:
        # updates_per_insert <= 0 disables the gate (the learner samples as fast as it can,
        # producers never wait): a switch for benchmarks and tests that files do not offer.
        _refuse(self, "replay", skip=("updates_per_insert",))


def _refuse(obj: object, what: str, skip: tuple[str, ...] = ()) -> None:
    """Raise ReplayError naming every field of ``obj`` outside its schema's bounds."""
    found = problems(obj, skip)
    if found:
        raise ReplayError(f"invalid {what} config: " + "; ".join(found))
