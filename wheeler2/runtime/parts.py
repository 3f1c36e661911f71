"""The parts every member is built from, wherever it runs: its env copies, the space its agent
sees, its agent, and the row layout of the replay it writes."""

from __future__ import annotations

import numpy as np
import torch

from wheeler2 import registry
from wheeler2.agent import Agent, SpaceInfo
from wheeler2.buffer import Layout
from wheeler2.config import Config
from wheeler2.config.model import params_of
from wheeler2.env import EnvInfo, VecEnv
from wheeler2.process import defer_dynamo_import
from wheeler2.runtime.plan import MemberPlan
from wheeler2.runtime.seeds import agent_seed
from wheeler2.task import RewardHeads


def make_env(
    config: Config,
    num_envs: int,
    seed: int,
    plan: MemberPlan | None = None,
    groups: dict[str, tuple[str, ...]] | None = None,
) -> VecEnv:
    """``plan``'s own agents of a multi-agent env (its ``agents`` globs); without a plan, or
    when the member names none, the agents ``[env] kwargs`` select (default: all). ``groups``:
    the agents other tables claim, for joint play (runtime/opponents.py)."""
    agents = None if plan is None else plan.spec.agents
    return registry.make_env(config.env, num_envs, seed, agents=agents, groups=groups)


def space_info(info: EnvInfo, heads: RewardHeads, negamax: float | None = None) -> SpaceInfo:
    """``negamax``: ``negamax_of(config)`` for the tables that learn from the env's steps."""
    if info.action_mask and info.goal_dim > 0:
        # policy_obs puts the goals after the observation, so the mask would no longer be
        # the last act_dim columns, where every agent reads it.
        raise ValueError(
            "an env with action masks cannot have goals: the agents read the legal-action "
            f"mask from the last {info.act_dim} observation columns, and the goals "
            f"({info.goal_dim} columns) would be appended after it"
        )
    if info.action_mask and not info.discrete:
        raise ValueError("an action mask needs a discrete action space")
    if info.obs_shape and (info.goal_dim or info.action_mask):
        raise ValueError(
            "image observations take no goals or action mask beside them: the encoders read "
            "the whole row as one image"
        )
    return SpaceInfo(
        obs_dim=info.obs_dim + info.goal_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        heads=heads.names,
        head_weights=heads.weights,
        action_mask=info.action_mask,
        obs_shape=info.obs_shape,
        negamax=negamax,
    )


def negamax_of(config: Config) -> float | None:
    """``SpaceInfo.negamax`` of a run: its random-reply share with ``[play] negamax``."""
    return float(config.play.negamax_random) if config.play.negamax else None


def make_agent(config: Config, plan: MemberPlan, space: SpaceInfo, seed: int) -> Agent:
    """The member's agent; ``seed``: the member's (its env copies'), from which the agent's own
    is derived (``seeds.agent_seed``)."""
    seed = agent_seed(seed)
    cls = registry.resolve_algo(plan.algo)
    params = cls.for_run(params_of(plan.spec, plan.copy), int(config.experiment.total_steps))
    device = cls.needs(params).device
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    # No torch._dynamo for the optimizers' construction and checkpoints (~1.3 s of imports on
    # the way to a team's first step): a member imports it at its first update; the
    # coordinator, which builds each learner to check the team, never does.
    defer_dynamo_import()
    return cls(space, params, device=device, seed=seed)


def replay_layout(info: EnvInfo, heads: RewardHeads, logp: bool, state_dim: int = 0) -> Layout:
    """The rows a table's replay stores for these spaces and heads. ``state_dim``: the
    learner's policy-state width, the buffer's state column (0: none)."""
    return Layout(
        obs_dim=info.obs_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        num_heads=len(heads),
        goal_dim=info.goal_dim,
        logp=logp,
        state_dim=state_dim,
        frame_shape=info.frame_shape,
        stack=info.stack,
    )
