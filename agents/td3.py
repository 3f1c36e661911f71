"""TD3 (Fujimoto et al., 2018) with one twin critic pair per reward head.

Twin Delayed DDPG: DDPG plus three fixes against the overestimation of Q-learning with a
function approximator. Each head h has two critics Q1_h, Q2_h trained on its own reward column
toward one shared target; one deterministic actor maximizes the weighted sum of the heads:

    a'         = clip(mu'(s') + clip(eps, -c, c), -1, 1),   eps ~ N(0, target_noise^2)
                                                             (target-policy smoothing)
    y_h        = r_h + discount * min(Q1'_h(s', a'), Q2'_h(s', a'))      (clipped double Q)
    L_critic   = sum_h sum_j  mean_i  w_i (y_ih - Qj_h(s_i, a_i))^2      (w = importance weights)
    every policy_delay critic steps (delayed actor and targets):
    L_actor    = - mean_i  sum_h  c_h Q_h(s_i, mu(s_i))                  (c = task head weights)
    theta'     <- tau theta + (1 - tau) theta'

Q_h in the actor loss is Q1_h, as in the paper (``actor_q = "q1"``), or min(Q1_h, Q2_h)
(``actor_q = "min"``). ``discount`` is the buffer's n-step multiplier (gamma^k, 0 after a
terminal state) and ``r_h`` its n-step return, so n-step and HER (goal-concatenated
observations, relabelled rewards) need nothing here. New priorities are each sample's |TD| of
both critics, averaged over the pair and over the heads with the head weights' sizes |c_h|.

In a team, explorers sync from :attr:`TD3.actor`, a :class:`DeterministicActor` like DDPG's; as
an Ape-X actor (``role = "actor"``) TD3 acts with the synced actor plus its exploration noise.
Defaults are the rl-zoo Pendulum-v1 hyperparameters (those of DDPG, plus TD3's own three).

Recurrent TD3 (``core = "gru"`` or ``"lstm"``, issue 15): actor and critic each read the
observation history through a core of their own (``agents/recurrent.py``), and learn from
replayed sequences with the stored policy state and a burn-in (R2D2; the buffer cuts them,
``wheeler2/buffer/sequence.py``). The losses above hold per trained position of each sequence,
averaged over the positions of ``mask``, the feature inputs of s and s' being the cores' outputs
along the sequence; a sequence's priority is ``seq_eta max|delta| + (1 - seq_eta) mean|delta|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from wheeler2.agents.noise import NoiseParams, noise_from
from wheeler2.agents.offpolicy import OffPolicy, View
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import AugmentParams
from wheeler2.agents.parts.heads import DeterministicActor, TwinQCritic
from wheeler2.agents.parts.numpy_forward import decides_by_forward
from wheeler2.agents.recurrent import SequenceParams, body, first_input

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(SequenceParams, AugmentParams, NoiseParams):
    # The recurrent options (core, core_size, trunk_reads, seq_*) come from SequenceParams, the
    # action noise (noise, noise_std, ...) from agents/noise.py's NoiseParams.
    # Bounds in the fields are checked by the config reader against [team.params].
    gamma: float = bounded(0.98, ge=0, le=1)  # discount (the buffer applies it for n-step)
    tau: float = bounded(0.005, gt=0, le=1)  # Polyak rate of the target networks
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam step sizes above 1 only diverge
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    hidden: list[int] = sizes(400, 300)  # actor and critic layers
    # Env steps of uniform random actions before the policy acts.
    learning_starts: int = bounded(10_000, ge=0)
    # TD3's own three: the actor and the targets move every policy_delay critic updates, and
    # the target action is smoothed with clipped Gaussian noise (the paper's 2, 0.2, 0.5).
    policy_delay: int = bounded(2, ge=1)
    target_noise: float = bounded(0.2, ge=0)  # std of the target-policy smoothing noise
    target_noise_clip: float = bounded(0.5, ge=0)  # that noise is clipped to [-clip, clip]
    # Which value the actor climbs: "q1" as in the paper, or "min" of the pair (more cautious).
    actor_q: str = choice("q1", ("q1", "min"))
    max_grad_norm: float = bounded(0.0, ge=0)  # gradient clipping of both nets; 0 = off
    # "separate": one MLP per head | "shared": one trunk, H outputs (for each of the pair).
    critic: str = choice("separate", ("separate", "shared"))
    normalize_obs: bool = False  # running mean/std of observed inputs (agents/normalize.py)
    obs_clip: float = bounded(5.0, gt=0)  # normalized inputs are clipped to [-obs_clip, obs_clip]
    device: str = "cpu"  # "cpu" | "cuda"


class TD3(OffPolicy, Agent):
    Params = Params
    saved = {
        "actor": "actor_net",
        "critic": "critic",
        "actor_target": "actor_target",
        "critic_target": "critic_target",
        "actor_opt": "actor_opt",
        "critic_opt": "critic_opt",
        "gen": "gen",
    }

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        p, act_dim, heads = params, space.act_dim, space.num_heads
        with seeded(seed):
            self.actor_net = self.net(
                lambda d: DeterministicActor(d, p.hidden, act_dim, "relu"), actions="continuous"
            )
            self.critic = self.net(
                lambda d: TwinQCritic(d, act_dim, p.hidden, heads, p.critic, "relu"), critic=True
            )
        self.actor_target = self.target(self.actor_net)
        self.critic_target = self.target(self.critic)
        self.actor_opt, self.actor_params = self.optimizer(self.actor_net, p.lr_actor)
        self.critic_opt, self.critic_params = self.optimizer(self.critic, p.lr_critic)
        # The layers after each network's core (the networks themselves when feedforward).
        self.mu, self.mu_target = body(self.actor_net), body(self.actor_target)
        self.q, self.q_target = body(self.critic), body(self.critic_target)
        self.noise = noise_from(p, act_dim, seed + 1) if p.noise != "none" else None
        # The target-policy smoothing noise has its own stream, on the learner's device.
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed + 3)

    @decides_by_forward
    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return self.mu(z)

    # Weight sync by name (wheeler2/sync/): an evolutionary member (agents/cem.py, CEM-RL)
    # pulls the critic, and the actor beside it, through the same block as the actor.
    def published_modules(self) -> dict[str, nn.Module]:
        return {"critic": self.critic, "actor": self.actor_net}

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        """Q_h(s, mu(s)) of each head, ``[N, H]``, from the critic the actor maximizes
        (``actor_q``): evaluation holds it against each head's discounted return."""
        with torch.inference_mode():
            x = self.obs_norm.normalize(
                torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            )
            zc, a = first_input(self.critic, x), self.actor_net(x)
            return self._actor_q(zc, a).cpu().numpy()

    def _actor_q(self, zc: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.q.q1(zc, a) if self.params.actor_q == "q1" else self.q(zc, a).min(0).values

    def smooth(self, a_next: torch.Tensor) -> torch.Tensor:
        """a' = clip(mu'(s') + clip(eps, -c, c), -1, 1): the smoothed target action."""
        p = self.params
        eps = torch.randn(a_next.shape, generator=self.gen, device=a_next.device)
        eps = (eps * p.target_noise).clamp(-p.target_noise_clip, p.target_noise_clip)
        return (a_next + eps).clamp(-1.0, 1.0)

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        p = self.params
        with torch.no_grad():
            a_next = self.smooth(self.mu_target(v.read_next(self.actor_target)))
            q_next = self.q_target(v.read_next(self.critic_target), a_next)  # [2, ..., H]
            y = v.target(q_next.min(0).values)  # [..., H]
        zc = v.read(self.critic)
        q = self.q(zc, v.action)  # [2, ..., H]
        td = y - q
        # Per head: the pair's losses summed, each importance-weighted over the samples.
        head_losses = v.head_losses(td.pow(2))  # [H]
        critic_loss = head_losses.sum()
        self.critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            a_pi = self.mu(v.read(self.actor_net))
            # The actor climbs Q; the critic's core (if any) is the critic's to train.
            q_pi = self._actor_q(zc.detach(), a_pi)  # [..., H]
            self.actor_step(-v.mean((q_pi * self.head_w).sum(-1)))
            self.update_targets()

        # One priority per sample: |TD| of the pair averaged, the heads' with the weights' sizes.
        abs_td = self.head_priority(td.detach().abs().mean(0))
        metrics = self.report(
            head_losses,
            critic_loss=critic_loss.detach(),
            actor_loss=self.last_actor_loss,
            q_mean=v.mean(q.detach().mean((0, -1))),
        )
        return metrics, abs_td
