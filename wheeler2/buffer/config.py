"""Static description of a replay buffer: what one transition holds and how sampling behaves."""

from __future__ import annotations

from dataclasses import dataclass

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

    def __post_init__(self) -> None:
        if self.obs_dim <= 0 or self.act_dim <= 0 or self.num_heads <= 0 or self.goal_dim < 0:
            raise ReplayError(f"invalid layout {self}")

    @property
    def policy_obs_dim(self) -> int:
        """Width of the learner's input: observation, then desired goal."""
        return self.obs_dim + self.goal_dim


@dataclass(frozen=True)
class HerConfig:
    strategy: str = "future"
    k: int = 4  # relabel fraction k / (k + 1)

    def __post_init__(self) -> None:
        if self.strategy not in HER_STRATEGIES:
            raise ReplayError(
                f"her.strategy must be one of {HER_STRATEGIES}, got {self.strategy!r}"
            )
        if self.k < 0:
            raise ReplayError(f"her.k must be >= 0, got {self.k}")

    @property
    def fraction(self) -> float:
        return self.k / (self.k + 1)


@dataclass(frozen=True)
class ReplayConfig:
    capacity: int = 1_000_000
    batch_size: int = 256
    prioritized: bool = True
    alpha: float = 0.6
    beta: float = 0.4
    # Updates over which beta anneals linearly to 1; None keeps beta fixed.
    beta_steps: int | None = None
    eps: float = 1e-6
    n_step: int = 1
    # Learner gradient steps per inserted transition, counted from min_size; <= 0 disables the
    # gate (the learner samples as fast as it can, producers never wait).
    updates_per_insert: float = 1.0
    min_size: int = 1000
    her: HerConfig | None = None
    chunk: int = 64
    # How many inserts producers may run ahead of the learner before a flush blocks.
    gate_tolerance: int = 2048
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.batch_size <= 0 or self.chunk <= 0 or self.n_step < 1:
            raise ReplayError(f"invalid replay config {self}")
        if not 0.0 <= self.alpha <= 1.0 or not 0.0 <= self.beta <= 1.0:
            raise ReplayError(f"alpha and beta must lie in [0, 1], got {self.alpha}, {self.beta}")
        if self.eps <= 0:
            raise ReplayError("eps must be > 0 so that every item keeps a chance to be sampled")
        if self.min_size < 0 or self.gate_tolerance < 0 or self.timeout_s <= 0:
            raise ReplayError(f"invalid replay config {self}")
        if isinstance(self.her, dict):  # from TOML
            object.__setattr__(self, "her", HerConfig(**self.her))
