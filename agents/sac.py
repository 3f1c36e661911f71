"""SAC (Haarnoja et al., 2018, "SAC: Algorithms and Applications", the v2 without a value net)
with one twin critic pair per reward head.

The actor is a tanh-squashed Gaussian, a = tanh(u), u ~ N(mu(s), sigma(s)), whose log-prob
carries the change-of-variables term; the temperature alpha is learned toward a target entropy
(-act_dim by default). Each head h has two critics trained on its own reward column; the
entropy bonus is shared out over the heads in proportion to their weights c_h (C = sum_h c_h^2,
so that sum_h c_h (c_h / C) = 1), so the weighted sum of the heads is the usual soft Q of the
weighted reward:

    a', logp'  ~ pi(.|s')                                   (a fresh sample, no target actor)
    y_h        = r_h + discount * (min(Q1'_h, Q2'_h)(s', a') - (c_h / C) alpha logp')
    L_critic   = sum_h sum_j  mean_i  w_i (y_ih - Qj_h(s_i, a_i))^2      (w = importance weights)
    a, logp    ~ pi(.|s)                                    (reparameterized)
    L_actor    = mean_i [ alpha logp_i - sum_h c_h min(Q1_h, Q2_h)(s_i, a_i) ]
    L_alpha    = - mean_i log(alpha) (logp_i + target_entropy)          (logp detached)
    theta'     <- tau theta + (1 - tau) theta'              (critics only, every step)

With one head of weight 1 this is SAC as in the paper and SB3. Entropy above the target
(-logp > target) makes L_alpha's gradient push log(alpha) down; below, up. ``discount`` is the
buffer's n-step multiplier and ``r_h`` its n-step return, so n-step and HER (goal-concatenated
observations, relabelled rewards) need nothing here. New priorities are each sample's |TD| of
both critics, averaged over the pair and over the heads with the head weights.

SAC explores by sampling its own policy (no added noise); evaluation takes the mean action
tanh(mu(s)). What a team's explorers sync from is :attr:`SAC.actor`, a
:class:`SquashedGaussianActor` whose sync roles are its trunk and its *mean* head: a PPO or A2C
explorer that syncs from SAC takes the trunk (and, unless it keeps its own, the mean head) of
the deterministic mean policy, and keeps its own ``log_std``; SAC's state-dependent std head
(``log_std_head``) syncs only to another SAC, e.g. Ape-X actors (``role = "actor"``), which act
by sampling the synced policy and never learn.

Recurrent SAC (``core = "gru"`` or ``"lstm"``, issue 15): the actor is the squashed Gaussian on
``[core output, observation]`` and the twin critic has a core of its own (``agents/recurrent.py``);
they learn from replayed sequences with the stored policy state and a burn-in (R2D2). The losses
above hold per trained position, averaged over the positions of the sequences' ``mask``, the
target's a', logp' drawn from the online actor over the next observations (SAC has no target
actor), alpha's loss averaged over the same positions; a sequence's priority is ``seq_eta
max|delta| + (1 - seq_eta) mean|delta|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from wheeler2.agents.offpolicy import OffPolicy, View
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import AugmentParams
from wheeler2.agents.parts.heads import SquashedGaussianActor, TwinQCritic, entropy_shares
from wheeler2.agents.parts.numpy_forward import decides_by_forward
from wheeler2.agents.recurrent import SequenceParams, body

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(SequenceParams, AugmentParams):
    # The recurrent options (core, core_size, trunk_reads, seq_*) come from SequenceParams.
    # Bounds in the fields are checked by the config reader against [team.params].
    # Defaults are SB3's SAC with the rl-zoo Pendulum-v1 learning rate (1e-3).
    gamma: float = bounded(0.99, ge=0, le=1)  # discount (the buffer applies it for n-step)
    tau: float = bounded(0.005, gt=0, le=1)  # Polyak rate of the target critics
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam step sizes above 1 only diverge
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    lr_alpha: float = bounded(1e-3, gt=0, le=1)  # step size of log(alpha)
    hidden: list[int] = sizes(256, 256)  # actor and critic layers
    # Env steps of uniform random actions before the policy acts.
    learning_starts: int = bounded(100, ge=0)
    alpha_init: float = bounded(1.0, gt=0)  # the temperature's first value (fixed one: no tuning)
    learn_alpha: bool = True  # tune alpha toward the target entropy; False keeps alpha_init
    # Target entropy per action dimension: -1 gives the paper's -act_dim.
    target_entropy_per_dim: float = -1.0
    max_grad_norm: float = bounded(0.0, ge=0)  # gradient clipping of actor and critics; 0 = off
    # "separate": one MLP per head | "shared": one trunk, H outputs (for each of the pair).
    critic: str = choice("separate", ("separate", "shared"))
    normalize_obs: bool = False  # running mean/std of observed inputs (agents/normalize.py)
    obs_clip: float = bounded(5.0, gt=0)  # normalized inputs are clipped to [-obs_clip, obs_clip]
    device: str = "cpu"  # "cpu" | "cuda"


class SAC(OffPolicy, Agent):
    Params = Params
    saved = {
        "actor": "actor_net",
        "critic": "critic",
        "critic_target": "critic_target",
        "actor_opt": "actor_opt",
        "critic_opt": "critic_opt",
        "log_alpha": "log_alpha",
        "alpha_opt": "alpha_opt",
        "gen": "gen",
    }
    stochastic = True  # explores by sampling its policy (no action noise)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        p, act_dim, heads, dev = params, space.act_dim, space.num_heads, self.device
        with seeded(seed):
            self.actor_net = self.net(
                lambda d: SquashedGaussianActor(d, p.hidden, act_dim, "relu"),
                actions="continuous",
            )
            self.critic = self.net(
                lambda d: TwinQCritic(d, act_dim, p.hidden, heads, p.critic, "relu"), critic=True
            )
        self.critic_target = self.target(self.critic)  # (no target actor)
        self.actor_opt, self.actor_params = self.optimizer(self.actor_net, p.lr_actor)
        self.critic_opt, self.critic_params = self.optimizer(self.critic, p.lr_critic)
        self.log_alpha = torch.tensor(
            float(np.log(p.alpha_init)), device=dev, requires_grad=p.learn_alpha
        )
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=p.lr_alpha)
        self.target_entropy = float(p.target_entropy_per_dim * act_dim)
        # The layers after each network's core (the networks themselves when feedforward).
        self.pi = body(self.actor_net)
        self.q, self.q_target = body(self.critic), body(self.critic_target)
        self.entropy_share = entropy_shares(self.head_w)  # c_h / C, C = sum_h c_h^2
        # Policy samples (acting and learning) have their own stream, on the agent's device.
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed + 3)

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    @decides_by_forward
    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        """A draw of the policy when exploring, else its mean action tanh(mu(s))."""
        return self.pi.sample(z, self.gen)[0] if sample else self.pi(z)

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            # a', logp' from the online policy (SAC has no target actor).
            a_next, logp_next = self.pi.sample(v.read_next(self.actor_net), self.gen)
            q_next = self.q_target(v.read_next(self.critic_target), a_next).min(0).values
            y = v.target(q_next - alpha * self.entropy_share * logp_next.unsqueeze(-1))
        zc = v.read(self.critic)
        q = self.q(zc, v.action)  # [2, ..., H]
        td = y - q
        # Per head: the pair's losses summed, each importance-weighted over the samples.
        head_losses = v.head_losses(td.pow(2))  # [H]
        critic_loss = head_losses.sum()
        self.critic_step(critic_loss)

        a_pi, logp = self.pi.sample(v.read(self.actor_net), self.gen)
        # The actor climbs Q; the critic's core (if any) is the critic's to train.
        q_pi = self.q(zc.detach(), a_pi).min(0).values  # [..., H]
        actor_loss = v.mean(alpha * logp - (q_pi * self.head_w).sum(-1))
        self.actor_step(actor_loss)

        logp = logp.detach()
        alpha_loss = -v.mean(self.log_alpha * (logp + self.target_entropy))
        if self.params.learn_alpha:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        self.update_targets()  # the critics' targets, every step

        # One priority per sample: |TD| of the pair averaged, the heads' with the weights' sizes.
        abs_td = self.head_priority(td.detach().abs().mean(0))
        metrics = self.report(
            head_losses,
            critic_loss=critic_loss.detach(),
            actor_loss=actor_loss.detach(),
            q_mean=v.mean(q.detach().mean((0, -1))),
            alpha=alpha,
            alpha_loss=alpha_loss.detach(),
            entropy=-v.mean(logp),
        )
        return metrics, abs_td
