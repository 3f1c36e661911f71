"""Every seed of a run derives from ``experiment.seed`` through these, so the offsets live here
once: members' env copies, the eval envs and their resets, the agents' own generators, the
replay tables and shards.

Each kind has a block of its own (run seeds below ~99_900): env copies in [0, 1e9), eval envs
in [1e9, 2e9), agents in [2e9, 3e9) (and the eval seats' draws, from an eval env's seed, in
[3e9, 4e9)), replays from 4e9. Numpy seeds a gymnasium env's
``np_random`` and a ``default_rng`` the same way, so two generators handed one integer draw one
stream: with the member's seed as its own, a DQN agent's epsilon draws were its env copy 0's
reset draws, and DDPG's noise (seed + 1) was copy 1's."""

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
# An agent offsets its generators by small integers (noise + 1, warm-up + 2, ...), and the
# engine's draws on a member's behalf sit above those, all inside the member's spacing.
AGENT_SEED_BASE = 2_000_000_011
OPPONENT_POOL_SEED_OFFSET = 101  # which past snapshot a self-play member meets
DRIVERS_SEED_OFFSET = 102  # the drivers' epsilon and random-opening draws
REPLAY_SEED_BASE = 4_000_000_037  # under 2**32


def member_seed(config: Config, plan: MemberPlan) -> int:
    # Spread members far apart so their env copies (seed + i) never share a seed.
    return int(config.experiment.seed) * MEMBER_SEED_STRIDE + plan.index * MEMBER_SEED_SPACING


def agent_seed(seed: int) -> int:
    """The seed a member's agent starts its generators from (its network's initialization, action
    noise, warm-up and exploration draws), given the member's ``seed``: apart from every env
    copy's, eval env's and replay's seed."""
    return AGENT_SEED_BASE + int(seed)


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
    return REPLAY_SEED_BASE + (seed if shards == 1 else seed * SHARD_SEED_STRIDE + shard)
