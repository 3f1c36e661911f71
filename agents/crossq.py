"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, its critics batch-normalized,
with one twin critic pair per reward head.

The critics normalize their input and every hidden layer by the statistics of the batch (batch
normalization). A target network is there to keep the bootstrap steady; CrossQ drops it and
evaluates Q(s, a) and Q(s', a') in *one* forward pass over the two batches stacked, so that
batch normalization sees both distributions (the actions a of the replay and the policy's a')
and normalizes them alike; the bootstrap half is then only cut from the gradient:

    a', logp'  ~ pi(.|s')                                   (the online policy)
    [Q(s, a); Q(s', a')] = Q([s; s'], [a; a'])              (one pass, train-mode statistics)
    y_h        = r_h + discount * sg(min(Q1_h, Q2_h)(s', a') - (c_h / C) alpha logp')
    L_critic   = sum_h sum_j  mean_i  w_i (y_ih - Qj_h(s_i, a_i))^2      (w = importance weights)
    every policy_delay critic steps (the actor and alpha):
    a, logp    ~ pi(.|s)                                    (reparameterized)
    L_actor    = mean_i [ alpha logp_i - sum_h c_h min(Q1_h, Q2_h)(s_i, a_i) ]  (running stats)
    L_alpha    = - mean_i log(alpha) (logp_i + target_entropy)

sg is the stop-gradient, c_h the task's head weights (C = sum_h c_h^2), as in ``agents/sac.py``;
the actor reads the critics in eval mode (their running statistics, not moved by it). The
paper's other choices are the defaults: Adam's beta1 = 0.5 (alpha's Adam too; the reference
code gives alpha Adam's 0.9), a policy delay of 3, wide critics (2048 units). Where this differs
from the reference code (the authors' adityab/CrossQ and SBX's sbx/crossq): the normalization
is torch's batch normalization (momentum 0.01, flax's 0.99), where the paper's final version
uses Batch Renormalization. That is batch normalization during its warm-up (the first 100,000
updates) and afterwards corrects each batch's statistics toward the running ones (r clipped to
[1/3, 3], d to [-5, 5]): the two differ late in training, not early. Each hidden layer is
normalized before its ReLU (Linear, BN, ReLU), where the reference normalizes after it (Linear,
ReLU, BN). And the actor is a plain MLP, where the reference batch-normalizes it too.

A worked example of adding an algorithm (docs/adding_an_algorithm.md): this file is all of it;
the off-policy base (agents/offpolicy.py) acts, keeps the counters and checkpoints.
Feedforward only (no ``core``): batch statistics over padded sequence positions would need a
masked normalization.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from wheeler2.agents.offpolicy import OffPolicy, View
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.heads import SquashedGaussianActor, entropy_shares
from wheeler2.agents.parts.numpy_forward import decides_by_forward

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, sizes


@dataclass
class Params:
    # Bounds in the fields are checked by the config reader against [team.params].
    gamma: float = bounded(0.99, ge=0, le=1)  # discount (the buffer applies it for n-step)
    lr_actor: float = bounded(1e-3, gt=0, le=1)
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    lr_alpha: float = bounded(1e-3, gt=0, le=1)  # step size of log(alpha)
    adam_beta1: float = bounded(0.5, ge=0, lt=1)  # the paper's Adam beta1, every optimizer
    hidden: list[int] = sizes(256, 256)  # actor layers
    critic_hidden: list[int] = sizes(2048, 2048)  # critic layers: the paper's wide critics
    bn_momentum: float = bounded(0.01, gt=0, le=1)  # batch norm's running-statistics rate
    policy_delay: int = bounded(3, ge=1)  # actor and alpha step every k critic steps
    learning_starts: int = bounded(100, ge=0)  # env steps of uniform random actions
    alpha_init: float = bounded(1.0, gt=0)  # the temperature's first value
    learn_alpha: bool = True  # tune alpha toward the target entropy; False keeps alpha_init
    target_entropy_per_dim: float = -1.0  # -1: the target entropy -act_dim
    max_grad_norm: float = bounded(0.0, ge=0)  # gradient clipping; 0 = off
    normalize_obs: bool = False  # running mean/std of observed inputs (agents/normalize.py)
    obs_clip: float = bounded(5.0, gt=0)  # normalized inputs are clipped to [-obs_clip, obs_clip]
    device: str = "cpu"  # "cpu" | "cuda"


class BatchNormQ(nn.Module):
    """Twin Q, one output per reward head, ``[2, N, H]``: each of the pair batch-normalizes its
    input ``[s, a]`` and every hidden layer before the activation (the reference code: after
    it; see the module docstring)."""

    def __init__(self, in_dim: int, hidden: Sequence[int], num_heads: int, momentum: float) -> None:
        super().__init__()

        def net() -> nn.Sequential:
            layers: list[nn.Module] = [nn.BatchNorm1d(in_dim, momentum=momentum)]
            width = in_dim
            for h in hidden:
                layers += [nn.Linear(width, h), nn.BatchNorm1d(h, momentum=momentum), nn.ReLU()]
                width = h
            return nn.Sequential(*layers, nn.Linear(width, num_heads))

        self.nets = nn.ModuleList([net(), net()])

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return torch.stack([net(x) for net in self.nets])


@contextlib.contextmanager
def running_statistics(net: nn.Module) -> Iterator[None]:
    """``net`` in eval mode inside the block: batch norm on its running statistics, which the
    block leaves as they are."""
    net.eval()
    try:
        yield
    finally:
        net.train()


class CrossQ(OffPolicy, Agent):
    Params = Params
    saved = {
        "actor": "actor_net",
        "critic": "critic",
        "actor_opt": "actor_opt",
        "critic_opt": "critic_opt",
        "log_alpha": "log_alpha",
        "alpha_opt": "alpha_opt",
        "gen": "gen",
    }
    stochastic = True  # explores by sampling its policy

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        if space.obs_shape:
            # The encoder goes onto MLPs (encoders.image_features_), and BatchNormQ is none: it
            # would read raw pixels where it was sized for features (a crash at its first update).
            raise ValueError(
                "crossq's batch-normalized critic takes flat observations, not images: use sac "
                "(or td3, ddpg), which read images through an encoder"
            )
        super().__init__(space, params, device, seed)
        p, act_dim, dev = params, space.act_dim, self.device
        with seeded(seed):
            self.actor_net = self.net(lambda d: SquashedGaussianActor(d, p.hidden, act_dim))
            self.critic = self.net(
                lambda d: BatchNormQ(d + act_dim, p.critic_hidden, space.num_heads, p.bn_momentum)
            )
        betas = (p.adam_beta1, 0.999)
        self.actor_opt, self.actor_params = self.optimizer(self.actor_net, p.lr_actor, betas=betas)
        self.critic_opt, self.critic_params = self.optimizer(self.critic, p.lr_critic, betas=betas)
        self.log_alpha = torch.tensor(
            float(np.log(p.alpha_init)), device=dev, requires_grad=p.learn_alpha
        )
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=p.lr_alpha, betas=betas)
        self.target_entropy = float(p.target_entropy_per_dim * act_dim)
        self.entropy_share = entropy_shares(self.head_w)  # c_h / C, C = sum_h c_h^2
        # Policy samples (acting and learning) have their own stream, on the agent's device.
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed + 3)

    @decides_by_forward
    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        """A draw of the policy when exploring, else its mean action tanh(mu(s))."""
        return self.actor_net.sample(z, self.gen)[0] if sample else self.actor_net(z)

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        p = self.params
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            a_next, logp_next = self.actor_net.sample(v.read_next(self.actor_net), self.gen)
        z, z_next = v.read(self.critic), v.read_next(self.critic)
        # One pass over s and s' stacked: the batch statistics are those of both halves.
        q, q_next = self.critic(torch.cat([z, z_next]), torch.cat([v.action, a_next])).chunk(2, 1)
        soft = q_next.min(0).values - alpha * self.entropy_share * logp_next.unsqueeze(-1)
        y = v.target(soft.detach())  # [B, H]
        td = y - q  # [2, B, H]
        head_losses = v.head_losses(td.pow(2))  # [H]
        critic_loss = head_losses.sum()
        self.critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            a_pi, logp = self.actor_net.sample(v.read(self.actor_net), self.gen)
            with running_statistics(self.critic):
                q_pi = self.critic(z, a_pi).min(0).values  # [B, H]
            self.actor_step(v.mean(alpha * logp - (q_pi * self.head_w).sum(-1)))
            if p.learn_alpha:
                alpha_loss = -v.mean(self.log_alpha * (logp.detach() + self.target_entropy))
                self.alpha_opt.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.alpha_opt.step()

        # One priority per sample: |TD| of the pair averaged, the heads' with the weights' sizes.
        abs_td = self.head_priority(td.detach().abs().mean(0))
        metrics = self.report(
            head_losses,
            critic_loss=critic_loss.detach(),
            actor_loss=self.last_actor_loss,
            q_mean=v.mean(q.detach().mean((0, -1))),
            alpha=alpha,
        )
        return metrics, abs_td
