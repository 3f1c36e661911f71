"""Deterministic evaluation of an actor: one episode in each of ``episodes`` env copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wheeler2.agent import Agent
from wheeler2.env import VecEnv, policy_obs


@dataclass
class EvalResult:
    mean_return: float
    std_return: float
    success: float | None  # fraction of episodes that ended in success, when the env reports it
    returns: list[float]


def evaluate(agent: Agent, env: VecEnv, seed: int) -> EvalResult:
    """Run exactly one episode per copy of ``env`` with ``explore=False``.

    Copies run side by side so the actor sees one batch per step; a copy that finished keeps
    being stepped (autoreset) but its later episodes are ignored, which keeps the batch shape
    fixed and the result independent of episode lengths.
    """
    n = env.num_envs
    first = env.reset(seed=seed)
    obs, dg = first.obs, first.desired_goal
    returns = np.zeros(n, np.float64)
    finished = np.zeros(n, bool)
    success = np.full(n, np.nan)
    # Recurrent agents: one state row per copy, as in training. A copy's later episodes are
    # ignored, so its state needs no reset at its episode end.
    state = agent.initial_state(n) if getattr(agent, "state_dim", 0) > 0 else None
    while not finished.all():
        if state is None:
            out = agent.act(policy_obs(obs, dg), explore=False)
        else:
            out = agent.act(policy_obs(obs, dg), explore=False, state=state)
            state = out.state
        st = env.step(out.action)
        returns[~finished] += st.reward[~finished]
        done = (st.terminated | st.truncated) & ~finished
        for i in np.flatnonzero(done):
            flag = st.infos[i].get("is_success") if isinstance(st.infos[i], dict) else None
            if flag is not None:
                success[i] = float(flag)
        finished |= done
        obs, dg = st.obs, st.desired_goal
    known = success[~np.isnan(success)]
    return EvalResult(
        mean_return=float(returns.mean()),
        std_return=float(returns.std()),
        success=float(known.mean()) if known.size else None,
        returns=[float(r) for r in returns],
    )
