"""Every seed of a run derives from ``experiment.seed`` through these, so the offsets live here
once: members' env copies, the eval envs and their resets, the replay tables and shards."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from wheeler2.config import Config
    from wheeler2.runtime.plan import MemberPlan

MEMBER_SEED_STRIDE = 10_007  # runs with consecutive seeds give members disjoint seed ranges
MEMBER_SEED_SPACING = 1_000  # a member's env copies take seed + 0 .. seed + num_envs - 1
# The eval envs' seeds: run seed s has its own block of EVAL_SEED_STRIDE at EVAL_SEED_BASE +
# s * EVAL_SEED_STRIDE, above every member's seed (run seeds below ~99_900). An offset from s
# alone (s + 7) gave runs 0 and 1 nine of their ten eval episodes in common, and runs 0..9 only
# 19 distinct episodes of 100; and run 0's training copy 7 (num_envs >= 8) the first episode
# of its eval episode 0.
EVAL_SEED_BASE = 1_000_000_007
EVAL_SEED_STRIDE = MEMBER_SEED_STRIDE  # disjoint blocks for up to ~5_000 eval episodes
EVAL_ENV_SEED_OFFSET = 5_003  # the eval env copies (the seed Unity plays, autoresets)
EVAL_RESET_SEED_OFFSET = 7  # the reset seed of every eval: each eval sees the same episodes
SHARD_SEED_STRIDE = 1_000  # replay shard i samples with seed * stride + i
TABLE_SEED_STRIDE = 1_000_003  # table k's replay samples apart from table 0's
OWN_SEED_OFFSET = 500_009  # a learner's own table (own_share) samples apart from the shared one


def member_seed(config: Config, plan: MemberPlan) -> int:
    # Spread members far apart so their env copies (seed + i) never share a seed.
    return int(config.experiment.seed) * MEMBER_SEED_STRIDE + plan.index * MEMBER_SEED_SPACING


def _eval_block(config: Config) -> int:
    return EVAL_SEED_BASE + int(config.experiment.seed) * EVAL_SEED_STRIDE


def eval_env_seed(config: Config) -> int:
    return _eval_block(config) + EVAL_ENV_SEED_OFFSET


def eval_reset_seed(config: Config) -> int:
    return _eval_block(config) + EVAL_RESET_SEED_OFFSET


def resumed_env_seed(seed: int, env_steps: int) -> int:
    """The env copies' seed of a member resumed at ``env_steps``: its own seed again would
    replay the first session's episodes (the same initial states) from the start. Below 2**30,
    so that its copies' seeds (seed + copy) stay in the int32 envpool and Unity take (a 32-bit
    draw was over it half the time, and envpool refused the resumed run)."""
    return int(np.random.SeedSequence([seed, env_steps]).generate_state(1)[0]) >> 2


def replay_seed(config: Config, shard: int = 0, shards: int = 1) -> int:
    seed = int(config.experiment.seed)
    return seed if shards == 1 else seed * SHARD_SEED_STRIDE + shard
