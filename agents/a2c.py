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

Recurrent A2C (``core = "gru" | "lstm"``): as recurrent PPO (``agents/ppo.py``), the actor and
(``critic_core``) the critic carry a core; a rollout keeps each copy's state at its first step
and the episode starts, and the update replays the whole rollout through the cores from there.

This file is also the proof of the plugin interface: it needs nothing from the engine beyond
``wheeler2.agent``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.cores import RecurrentCritic, RecurrentOnPolicy, next_values_seen, on_policy_nets
from agents.nets import (
    ACTIVATIONS,
    evaluate_actions,
    resolve_device,
    sample_action,
    seeded,
)
from agents.returns import lambda_returns
from wheeler2.agent import ActOut, Agent, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params:
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
    core_first: bool = False  # the core reads the observation, the hidden layers its output
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


class A2C(RecurrentOnPolicy, Agent):
    Params = Params
    uses_replay = False

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return AgentNeeds(gamma=float(params.gamma), device=params.device)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        p = params
        self.recurrent = p.core != "none"
        with seeded(seed):
            self.policy, self.critic = on_policy_nets(space, p)
        self.policy.to(self.device)
        self.critic.to(self.device)
        self.set_state_dims()  # the actor core's state, then the critic core's (if any)
        self._prev_done: np.ndarray | None = None  # recurrent: episode ends of the last step
        self.params_list = list(self.policy.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.RMSprop(self.params_list, lr=p.lr, alpha=0.99, eps=p.rms_prop_eps)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=self.device)
        self.env_steps = 0
        self.updates = 0
        self.steps: list[dict[str, np.ndarray]] = []  # the current rollout, up to n_steps

    @property
    def actor(self) -> nn.Module:
        return self.policy

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        if self.recurrent:
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            return self.act_recurrent(x, explore, state)
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            action, raw, logp = sample_action(self.policy, x, explore, self.gen)
            value = self.critic(x)
        extras = {"value": value.cpu().numpy()}
        if not self.space.discrete:
            extras["raw_action"] = raw.cpu().numpy()
        return ActOut(action=action.cpu().numpy(), logp=logp.cpu().numpy(), extras=extras)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        active = np.ones(len(step.obs), bool) if step.active is None else step.active
        self.env_steps += int(active.sum())
        # Copies: the engine may reuse its arrays for the next vector step.
        self.steps.append(
            {
                "obs": np.array(step.obs, np.float32),
                "next_obs": np.array(step.next_obs, np.float32),
                # The unclipped Gaussian sample, where act() recorded it, is what pi produced.
                "action": np.array(step.act_out.extras.get("raw_action", step.action)),
                "reward": np.array(step.reward, np.float32).reshape(len(step.obs), -1),
                "terminated": np.array(step.terminated, np.float32),
                "done": np.array(step.terminated | step.truncated, np.float32),
                # Absent multi-agent rows: kept for the rectangular n-step recursion, weight 0.
                "valid": np.array(active, np.float32),
            }
        )
        if self.recurrent:
            self._store_recurrent(step)
        if len(self.steps) < self.params.n_steps:
            return None
        metrics = self._update(self.steps)
        self.steps = []
        return metrics

    def _store_recurrent(self, step: Transitions) -> None:
        """The recurrent rollout's extra columns (see ``RecurrentOnPolicy.step_columns``)."""
        row, n, dev = self.steps[-1], len(step.obs), self.device
        last = len(self.steps) == self.params.n_steps
        obs = torch.as_tensor(row["obs"], device=dev)
        next_obs = torch.as_tensor(row["next_obs"], device=dev)
        action = torch.as_tensor(row["action"], device=dev)
        _, value, next_value = self.step_columns(step, obs, next_obs, action, last)
        if len(self.steps) == 1:
            self._state0 = np.array(step.state, np.float32)
        prev = self._prev_done
        row["starts"] = np.zeros(n, bool) if prev is None or len(prev) != n else prev
        self._prev_done = np.array(step.terminated | step.truncated, bool)
        row["value"] = value.cpu().numpy()
        row["next_value"] = (
            np.zeros(n, np.float32) if next_value is None else next_value.cpu().numpy()
        )

    def _update(self, steps: list[dict[str, np.ndarray]]) -> dict[str, float]:
        p, dev = self.params, self.device

        def stack(key: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.stack([s[key] for s in steps]), dtype=dtype, device=dev)

        obs = stack("obs")  # [T, N, obs_dim]
        next_obs = stack("next_obs")
        action = stack("action", torch.long if self.space.discrete else torch.float32)
        rewards = stack("reward") @ self.head_w  # [T, N]
        terminated = stack("terminated")
        dones = stack("done")

        with torch.no_grad():
            if self.recurrent:
                next_values = next_values_seen(
                    stack("value"), stack("next_value"), dones, terminated
                )
            else:
                next_values = self.critic(next_obs)
            returns = nstep_returns(rewards, next_values, terminated, dones, p.gamma)
            targets = returns  # lambda = 1: the lambda-return is the n-step return
            if p.td_lambda < 1.0:
                targets = lambda_returns(
                    rewards, next_values, terminated, dones, p.gamma, p.td_lambda
                )
            returns, targets = returns.flatten(), targets.flatten()

        if self.recurrent:
            # The whole rollout replayed from each copy's state at its first step.
            state0 = torch.as_tensor(self._state0, device=dev)
            starts = stack("starts", torch.bool)
            out, _ = self.policy.sequence(obs, state0[:, : self.actor_state_dim], starts)
            logp, entropy = self.policy.evaluate(out, action)
            logp, entropy = logp.flatten(), entropy.flatten()
            if isinstance(self.critic, RecurrentCritic):
                sc = state0[:, self.actor_state_dim :]
                values = self.critic.sequence(obs, sc, starts)[0].flatten()
            else:
                values = self.critic(obs.flatten(0, 1))
        else:
            logp, entropy = evaluate_actions(self.policy, obs.flatten(0, 1), action.flatten(0, 1))
            values = self.critic(obs.flatten(0, 1))
        w = stack("valid").flatten()
        denom = w.sum().clamp(min=1.0)
        adv = returns - values.detach()
        if p.normalize_advantage and len(adv) > 1:
            mu = (adv * w).sum() / denom
            sd = ((adv - mu).pow(2) * w).sum().div(denom).sqrt()
            adv = (adv - mu) / (sd + 1e-8)
        policy_loss = -(adv * logp * w).sum() / denom
        value_loss = ((targets - values).pow(2) * w).sum() / denom
        entropy = (entropy * w).sum() / denom
        loss = policy_loss + p.vf_coef * value_loss - p.ent_coef * entropy

        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.params_list, p.max_grad_norm)
        self.opt.step()
        self.updates += 1
        stats = torch.stack([policy_loss, value_loss, entropy]).detach().tolist()
        return {"policy_loss": stats[0], "value_loss": stats[1], "entropy": stats[2]}

    def state_dict(self) -> dict[str, Any]:
        # The partial rollout is not saved: a resumed agent starts a fresh one.
        return {
            "algo": "a2c",  # its state is otherwise shaped like PPO's
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "opt": self.opt.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.opt.load_state_dict(state["opt"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.steps = []
