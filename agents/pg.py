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

import torch
from wheeler2.agents.onpolicy import OnPolicy, actor_critic, masked_mean, normalize_advantages
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import ACTIVATIONS, ImageParams
from wheeler2.agents.returns import lambda_returns

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(ImageParams):
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


class PG(OnPolicy, Agent):
    Params = Params
    algo = "pg"
    checkpoint = ("policy", "critic", "pi_opt", "vf_opt")
    acts_with_value = False  # the baseline is evaluated at the update

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        p = params
        with seeded(seed):
            policy, critic = actor_critic(space, p)
        self.setup(policy, critic)
        self.pi_opt = torch.optim.Adam(self.policy.parameters(), lr=p.lr)
        self.vf_opt = torch.optim.Adam(self.critic.parameters(), lr=p.vf_lr)

    def update(self) -> dict[str, float]:
        p, r = self.params, self.rollout
        assert r is not None
        w = r.valid.flatten()
        wm = w if bool((w < 1.0).any()) else None

        values, next_values = self.rollout_values()
        with torch.no_grad():
            # lambda = 1: Monte Carlo to the episode end, V where the episode is cut.
            returns = lambda_returns(r.reward, next_values, r.terminated, r.done, p.gamma, 1.0)
            targets = returns
            if p.td_lambda < 1.0:
                targets = lambda_returns(
                    r.reward, next_values, r.terminated, r.done, p.gamma, p.td_lambda
                )
            returns, targets, values = returns.flatten(), targets.flatten(), values.flatten()
            adv = returns - values if p.baseline else returns.clone()
            if p.normalize_advantage:
                adv = normalize_advantages(adv, wm)

        # One policy-gradient step on the whole rollout.
        logp, entropy = self.log_probs()
        policy_loss = policy_gradient_loss(logp, adv, wm)
        entropy = masked_mean(entropy, wm)
        loss = policy_loss - p.ent_coef * entropy
        self.gradient_step(self.pi_opt, loss, self.policy.parameters(), p.max_grad_norm)

        # The baseline regresses on its targets (fixed for this rollout) with its own steps.
        for _ in range(p.vf_iters):
            value_loss = masked_mean((targets - self.values()).pow(2), wm)
            self.gradient_step(self.vf_opt, value_loss, self.critic.parameters())

        var_ret = targets.var()
        explained = 1.0 - (targets - values).var() / var_ret if var_ret > 0 else 0.0
        stats = torch.stack([policy_loss, value_loss, entropy]).detach().tolist()
        return {
            "policy_loss": stats[0],
            "value_loss": stats[1],
            "entropy": stats[2],
            "explained_variance": float(explained),
        }
