"""Vanilla policy gradient: REINFORCE with a learned state-value baseline.

Williams (1992); Sutton & Barto, 2nd ed., ch. 13.4. Every ``n_steps`` vector steps of its
``num_envs`` copies the agent takes *one* policy-gradient step on the whole rollout,

    L_pi = - E[(G_t - b(s_t)) log pi(a_t|s_t)] - ent_coef E[H[pi]]

with G_t the discounted return to the episode's end (Monte Carlo), and then ``vf_iters`` steps
of its own optimizer on the baseline, the state-value net b = V:

    L_V = E[(G^lambda_t - V(s_t))^2]

whose target is the lambda-return of ``td_lambda`` (TD(lambda), ``agents/returns.py``): 1, the
default, regresses V on the same Monte Carlo returns, 0 on one-step TD targets. ``baseline =
false`` is plain REINFORCE, L_pi = - E[G_t log pi(a_t|s_t)].

Episode ends: the env copies run on across updates (no reset between rollouts), so G_t runs
to the episode's end where the rollout holds it. Where it does not, the return bootstraps from
the learned V: at the rollout's last step from V of the observation after it, and at a
time-limit truncation from V of the episode's true final observation. A terminated step does
not bootstrap. Rewards of several task heads are summed with the task's head weights (as A2C
and PPO do), so there is one return and one baseline.

What sets it apart from A2C is the return (to the episode end, not n steps), one policy step
per rollout of whole episodes, and the baseline fitted on its own with its own step size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.nets import (
    ACTIVATIONS,
    VCritic,
    build_actor,
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
    # Vector steps between updates (rollout = n_steps * num_envs env steps); long enough to hold
    # whole episodes, or the returns lean on V at the rollout end.
    n_steps: int = bounded(512, ge=1)
    gamma: float = bounded(0.99, ge=0, le=1)
    lr: float = bounded(1e-3, gt=0, le=1)  # policy step size (Adam)
    vf_lr: float = bounded(1e-3, gt=0, le=1)  # baseline step size (Adam)
    vf_iters: int = bounded(10, ge=1)  # baseline gradient steps per rollout, full batch
    # Baseline target: the lambda-return; 1 = Monte Carlo (the return to the rollout end where
    # the episode runs past it), 0 = one-step TD.
    td_lambda: float = bounded(1.0, ge=0, le=1)
    baseline: bool = True  # false: plain REINFORCE, the advantage is the return itself
    normalize_advantage: bool = True  # over the rollout
    ent_coef: float = 0.0  # entropy bonus
    max_grad_norm: float = bounded(0.0, ge=0)  # of the policy gradient; 0 = off
    hidden: list[int] = sizes(64, 64)  # policy and baseline layers
    activation: str = choice("tanh", tuple(ACTIVATIONS))
    log_std_init: float = 0.0  # initial log std of the Gaussian policy
    ortho_init: bool = True  # orthogonal init, small policy head
    device: str = "cpu"  # "cpu" | "cuda"


def policy_gradient_loss(
    logp: torch.Tensor, adv: torch.Tensor, w: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE's surrogate - E[A log pi(a|s)], whose gradient is the policy gradient estimate;
    ``w`` (0/1 per row) leaves out absent multi-agent rows."""
    if w is None:
        return -(adv * logp).mean()
    return -(adv * logp * w).sum() / w.sum().clamp(min=1.0)


class PG(Agent):
    Params = Params
    uses_replay = False

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return AgentNeeds(gamma=float(params.gamma), device=params.device)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        p = params
        with seeded(seed):
            self.policy = build_actor(
                space.obs_dim,
                space.act_dim,
                space.discrete,
                p.hidden,
                p.activation,
                p.log_std_init,
                p.ortho_init,
            ).to(self.device)
            self.critic = VCritic(space.obs_dim, p.hidden, p.activation, p.ortho_init)
        self.critic.to(self.device)
        self.pi_opt = torch.optim.Adam(self.policy.parameters(), lr=p.lr)
        self.vf_opt = torch.optim.Adam(self.critic.parameters(), lr=p.vf_lr)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=self.device)
        self.env_steps = 0
        self.updates = 0
        self.steps: list[dict[str, np.ndarray]] = []  # the current rollout, up to n_steps

    @property
    def actor(self) -> nn.Module:
        return self.policy

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            action, raw, logp = sample_action(self.policy, x, explore, self.gen)
        extras = {}
        if not self.space.discrete:
            extras["raw_action"] = raw.cpu().numpy()  # the unclipped sample, for log pi
        return ActOut(action=action.cpu().numpy(), logp=logp.cpu().numpy(), extras=extras)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        n = len(step.obs)
        active = np.ones(n, bool) if step.active is None else step.active
        if self.steps and len(self.steps[-1]["obs"]) != n:
            self.steps = []  # the number of rows changed: a rollout must be rectangular
        self.env_steps += int(active.sum())
        # Copies: the engine may reuse its arrays for the next vector step.
        self.steps.append(
            {
                "obs": np.array(step.obs, np.float32),
                "next_obs": np.array(step.next_obs, np.float32),
                "action": np.array(step.act_out.extras.get("raw_action", step.action)),
                "reward": np.array(step.reward, np.float32).reshape(n, -1),
                "terminated": np.array(step.terminated, np.float32),
                "done": np.array(step.terminated | step.truncated, np.float32),
                # Absent multi-agent rows: kept for the rectangular recursion, weight 0.
                "valid": np.array(active, np.float32),
            }
        )
        if len(self.steps) < self.params.n_steps:
            return None
        metrics = self._update(self.steps)
        self.steps = []
        return metrics

    def _update(self, steps: list[dict[str, np.ndarray]]) -> dict[str, float]:
        p, dev = self.params, self.device

        def stack(key: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.stack([s[key] for s in steps]), dtype=dtype, device=dev)

        T, n = len(steps), len(steps[0]["obs"])
        obs = stack("obs").flatten(0, 1)  # [T * N, obs_dim]
        action = stack("action", torch.long if self.space.discrete else torch.float32)
        action = action.flatten(0, 1)
        rewards = stack("reward") @ self.head_w  # [T, N]
        terminated, dones = stack("terminated"), stack("done")
        w = stack("valid").flatten()
        masked = bool((w < 1.0).any())
        wm = w if masked else None

        with torch.no_grad():
            next_values = self.critic(stack("next_obs").flatten(0, 1)).view(T, n)
            # lambda = 1: Monte Carlo to the episode end, V where the episode is cut.
            returns = lambda_returns(rewards, next_values, terminated, dones, p.gamma, 1.0)
            targets = returns
            if p.td_lambda < 1.0:
                targets = lambda_returns(
                    rewards, next_values, terminated, dones, p.gamma, p.td_lambda
                )
            returns, targets = returns.flatten(), targets.flatten()
            values = self.critic(obs)
            adv = returns - values if p.baseline else returns.clone()
            if p.normalize_advantage and len(adv) > 1:
                mu = _mean(adv, wm)
                adv = (adv - mu) / (_mean((adv - mu).pow(2), wm).sqrt() + 1e-8)

        # One policy-gradient step on the whole rollout.
        logp, entropy = evaluate_actions(self.policy, obs, action)
        policy_loss = policy_gradient_loss(logp, adv, wm)
        entropy = _mean(entropy, wm)
        self.pi_opt.zero_grad(set_to_none=True)
        (policy_loss - p.ent_coef * entropy).backward()
        if p.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.policy.parameters(), p.max_grad_norm)
        self.pi_opt.step()

        # The baseline regresses on its targets (fixed for this rollout) with its own steps.
        for _ in range(p.vf_iters):
            value_loss = _mean((targets - self.critic(obs)).pow(2), wm)
            self.vf_opt.zero_grad(set_to_none=True)
            value_loss.backward()
            self.vf_opt.step()

        self.updates += 1
        var_ret = targets.var()
        explained = 1.0 - (targets - values).var() / var_ret if var_ret > 0 else 0.0
        stats = torch.stack([policy_loss, value_loss, entropy]).detach().tolist()
        return {
            "policy_loss": stats[0],
            "value_loss": stats[1],
            "entropy": stats[2],
            "explained_variance": float(explained),
        }

    def state_dict(self) -> dict[str, Any]:
        # The partial rollout is not saved: a resumed agent starts a fresh one.
        return {
            "algo": "pg",
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "pi_opt": self.pi_opt.state_dict(),
            "vf_opt": self.vf_opt.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.pi_opt.load_state_dict(state["pi_opt"])
        self.vf_opt.load_state_dict(state["vf_opt"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.steps = []


def _mean(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the rows with weight 1 (all rows when ``w`` is None)."""
    if w is None:
        return x.mean()
    return (x * w).sum() / w.sum().clamp(min=1.0)
