"""Synchronous advantage actor-critic, A2C (Mnih et al., 2016, batched as in OpenAI baselines).

Every ``n_steps`` vector steps of its ``num_envs`` copies the agent takes one gradient step on

    L = - E[(R_t - V(s_t)) log pi(a_t|s_t)] + vf_coef E[(R_t - V(s_t))^2] - ent_coef E[H[pi]]

with the n-step return R_t = r_t + gamma r_{t+1} + ... + gamma^k V(s_{t+k}), cut at episode ends.
The critic's target is the lambda-return (TD(lambda), ``td_lambda``): with the default 1 it is
R_t itself, with 0 the one-step TD target r_t + gamma V(s_{t+1}) (``agents/returns.py``).
The env copies run on across updates (no reset between rollouts): the last step of a rollout
bootstraps from V of the observation after it. A terminated step does not bootstrap; a truncated
one bootstraps from V of its true final observation. Rewards of several task heads are summed
with the task's head weights. Defaults are Stable-Baselines3's A2C defaults.

Recurrent A2C (``core = "gru" | "lstm"``): as recurrent PPO, the actor and (``critic_core``) the
critic carry a core, and the update replays the whole rollout through the cores from each copy's
state at its first step (``agents/onpolicy.py``, which stores the rollouts).

This file is also the proof of the plugin interface: it needs nothing from the engine beyond
``wheeler2.agent``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from wheeler2.agents.onpolicy import OnPolicy, actor_critic, masked_mean, normalize_advantages
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import ACTIVATIONS, ImageParams
from wheeler2.agents.parts.memory import TRUNK_READS
from wheeler2.agents.returns import lambda_returns

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(ImageParams):
    # Old key -> (new key, its value for each old value), read with a deprecation warning.
    renamed_keys: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = {
        "core_first": ("trunk_reads", {True: "core", False: "obs"})
    }
    # Bounds in the fields are checked by the config reader against [team.params].
    n_steps: int = bounded(5, ge=1)  # vector steps between updates
    gamma: float = bounded(0.99, ge=0, le=1)
    # Critic target: the lambda-return; 1 = the n-step return to the rollout end, 0 = one-step TD.
    td_lambda: float = bounded(1.0, ge=0, le=1)
    lr: float = bounded(7e-4, gt=0, le=1)  # a step size above 1 only diverges
    ent_coef: float = 0.0  # entropy bonus
    vf_coef: float = bounded(0.5, ge=0)
    max_grad_norm: float = bounded(0.5, gt=0)  # always applied, so 0 would zero every step
    rms_prop_eps: float = bounded(1e-5, gt=0)  # RMSprop as in the paper; eps large for stability
    normalize_advantage: bool = False
    hidden: list[int] = sizes(64, 64)  # actor and critic layers
    activation: str = choice("tanh", tuple(ACTIVATIONS))
    log_std_init: float = 0.0
    ortho_init: bool = True
    # Recurrent core between trunk and last layer: "none" (feedforward), "gru" or "lstm".
    core: str = choice("none", ("none", "gru", "lstm"))
    core_size: int = bounded(64, ge=1)  # width of the core's hidden state
    critic_core: bool = True  # the critic has a core of its own too (else V(obs) alone)
    # What the hidden layers read: "obs" (trunk, then core), "core" (the core reads the
    # observation, sb3-contrib's order) or "core+obs" (the core's output beside the observation).
    trunk_reads: str = choice("obs", TRUNK_READS)
    device: str = "cpu"  # "cpu" | "cuda"


def nstep_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """n-step returns over a [T, N] rollout, computed backwards.

    ``next_values[t]`` is V of the true next observation of step t. Where an episode ended at
    step t (``dones``) the return restarts from that value (ignored when ``terminated``);
    the last step of the rollout bootstraps from ``next_values[T-1]``.

        R_t = r_t + gamma (1 - term_t) * (V(s'_t) if done_t or t = T-1 else R_{t+1})
    """
    not_term = 1.0 - terminated.float()
    returns = torch.empty_like(rewards)
    carry = next_values[-1]
    for t in reversed(range(len(rewards))):
        carry = torch.where(dones[t].bool(), next_values[t], carry)
        carry = rewards[t] + gamma * not_term[t] * carry
        returns[t] = carry
    return returns


class A2C(OnPolicy, Agent):
    Params = Params
    algo = "a2c"  # its state is otherwise shaped like PPO's

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        p = params
        with seeded(seed):
            policy, critic = actor_critic(space, p)
        self.setup(policy, critic)
        self.params_list = list(self.policy.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.RMSprop(self.params_list, lr=p.lr, alpha=0.99, eps=p.rms_prop_eps)

    def update(self) -> dict[str, float]:
        p, r = self.params, self.rollout
        assert r is not None
        _, next_values = self.rollout_values()
        with torch.no_grad():
            returns = nstep_returns(r.reward, next_values, r.terminated, r.done, p.gamma)
            targets = returns  # lambda = 1: the lambda-return is the n-step return
            if p.td_lambda < 1.0:
                targets = lambda_returns(
                    r.reward, next_values, r.terminated, r.done, p.gamma, p.td_lambda
                )
            returns, targets = returns.flatten(), targets.flatten()

        logp, entropy = self.log_probs()
        values = self.values()
        w = r.valid.flatten()
        adv = returns - values.detach()
        if p.normalize_advantage:
            adv = normalize_advantages(adv, w)
        policy_loss = -masked_mean(adv * logp, w)
        value_loss = masked_mean((targets - values).pow(2), w)
        entropy = masked_mean(entropy, w)
        loss = policy_loss + p.vf_coef * value_loss - p.ent_coef * entropy
        self.gradient_step(self.opt, loss, self.params_list, p.max_grad_norm)
        stats = torch.stack([policy_loss, value_loss, entropy]).detach().tolist()
        return {"policy_loss": stats[0], "value_loss": stats[1], "entropy": stats[2]}
