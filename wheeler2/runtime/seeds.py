"""Every seed of a run derives from ``experiment.seed`` through these, so the offsets live here
once: members' env copies, the eval envs and their resets, the replay tables and shards."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wheeler2.config import Config
    from wheeler2.runtime.plan import MemberPlan

MEMBER_SEED_STRIDE = 10_007  # runs with consecutive seeds give members disjoint seed ranges
MEMBER_SEED_SPACING = 1_000  # a member's env copies take seed + 0 .. seed + num_envs - 1
EVAL_ENV_SEED_OFFSET = 99_991  # the eval env copies: a prime far from every member's range
EVAL_RESET_SEED_OFFSET = 7  # the reset seed of every eval: each eval sees the same episodes
SHARD_SEED_STRIDE = 1_000  # replay shard i samples with seed * stride + i
TABLE_SEED_STRIDE = 1_000_003  # table k's replay samples apart from table 0's
OWN_SEED_OFFSET = 500_009  # a learner's own table (own_share) samples apart from the shared one


def member_seed(config: Config, plan: MemberPlan) -> int:
    # Spread members far apart so their env copies (seed + i) never share a seed.
    return int(config.experiment.seed) * MEMBER_SEED_STRIDE + plan.index * MEMBER_SEED_SPACING


def eval_env_seed(config: Config) -> int:
    return int(config.experiment.seed) + EVAL_ENV_SEED_OFFSET


def eval_reset_seed(config: Config) -> int:
    return int(config.experiment.seed) + EVAL_RESET_SEED_OFFSET


def replay_seed(config: Config, shard: int = 0, shards: int = 1) -> int:
    seed = int(config.experiment.seed)
    return seed if shards == 1 else seed * SHARD_SEED_STRIDE + shard
