"""SAC (Haarnoja et al., 2018, "SAC: Algorithms and Applications", the v2 without a value net)
with one twin critic pair per reward head.

The actor is a tanh-squashed Gaussian, a = tanh(u), u ~ N(mu(s), sigma(s)), whose log-prob
carries the change-of-variables term; the temperature alpha is learned toward a target entropy
(-act_dim by default). Each head h has two critics trained on its own reward column; the
entropy bonus is shared out over the heads in proportion to their weights c_h (C = sum_h c_h),
so the weighted sum of the heads is the usual soft Q of the weighted reward:

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

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.nets import (
    NumpyForward,
    SquashedGaussianActor,
    TwinQCritic,
    polyak_,
    resolve_device,
    seeded,
)
from agents.normalize import IdentityNorm, make_obs_norm
from agents.offpolicy import actor_step, loss_step
from agents.recurrent import (
    RecurrentSquashedActor,
    SequenceParams,
    Sequences,
    offpolicy_needs,
    recurrent_actor_critic,
    state_rows,
    step_two_cores,
)
from wheeler2.agent import ActOut, Agent, Batch, LearnOut, SequenceBatch, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(SequenceParams):
    # The recurrent options (core, core_size, core_skip, seq_*) come from SequenceParams.
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


class SAC(Agent):
    Params = Params
    uses_replay = True

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return offpolicy_needs(params)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        if space.discrete:
            raise ValueError("SAC needs a continuous (Box) action space")
        p, dev = params, self.device
        self.head_names = space.heads
        self.recurrent = p.core != "none"
        with seeded(seed):
            if self.recurrent:
                self.actor_net, self.critic, self.core_state = recurrent_actor_critic(
                    RecurrentSquashedActor, p, space, twin=True
                )
                self.state_dim = 2 * self.core_state
            else:
                self.actor_net = SquashedGaussianActor(
                    space.obs_dim, p.hidden, space.act_dim, "relu"
                )
                self.critic = TwinQCritic(
                    space.obs_dim, space.act_dim, p.hidden, space.num_heads, p.critic, "relu"
                )
        self.actor_net.to(dev)
        self.critic.to(dev)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor_net.parameters(), lr=p.lr_actor, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=p.lr_critic, fused=True)
        self.log_alpha = torch.tensor(
            float(np.log(p.alpha_init)), device=dev, requires_grad=p.learn_alpha
        )
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=p.lr_alpha)
        self.target_entropy = float(p.target_entropy_per_dim * space.act_dim)
        self.actor_params = list(self.actor_net.parameters())
        self.critic_params = list(self.critic.parameters())
        self.target_params = list(self.critic_target.parameters())

        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=dev)
        total = float(self.head_w.sum())
        # Each head's share of the entropy bonus, c_h / C (C = 1 if the weights cancel out).
        self.entropy_share = self.head_w / (total if abs(total) > 1e-8 else 1.0)

        self.obs_norm = make_obs_norm(p.normalize_obs, space.obs_dim, p.obs_clip, dev)
        # The deterministic (evaluation) action on the CPU goes through numpy (NumpyForward).
        self.fast_mean = (
            NumpyForward.of(self.actor_net, squash=True)
            if isinstance(self.obs_norm, IdentityNorm) and not self.recurrent
            else None
        )
        self.rng = np.random.default_rng(seed + 2)
        # Policy samples (acting and learning) have their own stream, on the agent's device.
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed + 3)
        self.env_steps = 0
        self.updates = 0

    @property
    def actor(self) -> nn.Module:
        return self.actor_net

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        n = len(obs)
        if self.recurrent:
            return self._act_recurrent(obs, explore, state)
        if explore and self.env_steps < self.params.learning_starts:
            # Uniform actions fill the buffer with diverse data before the policy means anything.
            a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
            return ActOut(action=a)
        if not explore and self.fast_mean is not None:
            return ActOut(action=self.fast_mean(obs).astype(np.float32, copy=False))
        with torch.inference_mode():
            x = self.obs_norm.normalize(
                torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            )
            a = self.actor_net.sample(x, self.gen)[0] if explore else self.actor_net(x)
        return ActOut(action=a.cpu().numpy())

    def _act_recurrent(self, obs: np.ndarray, explore: bool, state: np.ndarray | None) -> ActOut:
        n = len(obs)
        random = explore and self.env_steps < self.params.learning_starts
        with torch.inference_mode():
            x = self.obs_norm.normalize(
                torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            )
            h = state_rows(state, n, self.state_dim, self.device)
            ya, h = step_two_cores(self.actor_net.core, self.critic.core, x, h)
            if random:
                a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
            elif explore:
                a = self.actor_net.sample_on(ya, x, self.gen)[0].cpu().numpy()
            else:
                a = self.actor_net.mean_on(ya, x).cpu().numpy()
            nxt = h.cpu().numpy()
        return ActOut(action=a, state=nxt)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.env_steps += len(step.obs)
        self.obs_norm.update(step.obs)  # acting data only: evaluation never calls observe
        return None

    def learn(self, batch: Batch) -> LearnOut:
        if self.recurrent:
            return self.learn_sequences(batch)  # type: ignore[arg-type]
        obs, action = self.obs_norm.normalize(batch.obs), batch.action
        next_obs = self.obs_norm.normalize(batch.next_obs)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            a_next, logp_next = self.actor_net.sample(next_obs, self.gen)
            q_next = self.critic_target(next_obs, a_next).min(0).values  # [B, H]
            soft = q_next - alpha * self.entropy_share * logp_next.unsqueeze(-1)
            y = batch.reward + batch.discount.unsqueeze(-1) * soft  # [B, H]
        q = self.critic(obs, action)  # [2, B, H]
        td = y - q
        # Per head: the pair's losses summed, each importance-weighted over the batch.
        head_losses = (batch.weight.unsqueeze(-1) * td.pow(2)).mean(1).sum(0)  # [H]
        critic_loss = head_losses.sum()
        self._critic_step(critic_loss)

        a_pi, logp = self.actor_net.sample(obs, self.gen)
        q_pi = self.critic(obs, a_pi).min(0).values  # [B, H]
        actor_loss = (alpha * logp - (q_pi * self.head_w).sum(-1)).mean()
        self._actor_step(actor_loss)

        logp = logp.detach()
        alpha_loss = -(self.log_alpha * (logp + self.target_entropy)).mean()
        self._alpha_step(alpha_loss)

        with torch.no_grad():
            abs_td = td.detach().abs().mean(0)  # [B, H], the pair averaged
            # One priority per sample: the heads' |TD| averaged with the task's head weights.
            td_error = (abs_td * self.head_w).sum(-1) / self.head_w.sum()
            losses = (critic_loss, actor_loss, q.detach().mean(), alpha, alpha_loss, -logp.mean())
        return LearnOut(metrics=self._metrics(losses, head_losses), td_error=td_error.cpu().numpy())

    def learn_sequences(self, batch: SequenceBatch) -> LearnOut:
        """The SAC step on B sequences, time-major inside: positions t of ``mask`` are the
        samples, each row weighted by its sequence's importance weight."""
        p = self.params
        s = Sequences.of(batch, self.obs_norm, self.state_dim, "SAC")
        ha, hc = s.state.split(self.core_state, dim=1)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            ya = s.next_features(self.actor_net.core, ha)
            a_next, logp_next = self.actor_net.sample_on(ya, s.nxt, self.gen)
            yc = s.next_features(self.critic_target.core, hc)
            q_next = self.critic_target.on(yc, s.nxt, a_next).min(0).values  # [T + n - 1, B, H]
            y = s.target(q_next - alpha * self.entropy_share * logp_next.unsqueeze(-1))
        feats = s.unroll(self.critic.core, hc, p.seq_burn_in)
        q = self.critic.on(feats, s.x, s.action)  # [2, T, B, H]
        td = y - q
        head_losses = s.weighted(td.pow(2))  # [H]
        critic_loss = head_losses.sum()
        self._critic_step(critic_loss)

        ya = s.unroll(self.actor_net.core, ha, p.seq_burn_in)
        a_pi, logp = self.actor_net.sample_on(ya, s.x, self.gen)  # [T, B, A], [T, B]
        # The actor climbs Q; the critic's core is the critic's.
        q_pi = self.critic.on(feats.detach(), s.x, a_pi).min(0).values  # [T, B, H]
        actor_loss = s.mean(alpha * logp - (q_pi * self.head_w).sum(-1))
        self._actor_step(actor_loss)

        logp = logp.detach()
        alpha_loss = -s.mean(self.log_alpha * (logp + self.target_entropy))
        self._alpha_step(alpha_loss)

        with torch.no_grad():
            abs_td = (td.detach().abs().mean(0) * self.head_w).sum(-1) / self.head_w.sum()
            q_mean = s.mean(q.detach().mean((0, 3)))
            losses = (critic_loss, actor_loss, q_mean, alpha, alpha_loss, -s.mean(logp))
        return LearnOut(
            metrics=self._metrics(losses, head_losses), td_error=s.priority(abs_td, p.seq_eta)
        )

    def _critic_step(self, critic_loss: torch.Tensor) -> None:
        loss_step(critic_loss, self.critic_opt, self.critic_params, self.params.max_grad_norm)

    def _actor_step(self, actor_loss: torch.Tensor) -> None:
        actor_step(actor_loss, self.actor_opt, self.actor_params, self.params.max_grad_norm)

    def _alpha_step(self, alpha_loss: torch.Tensor) -> None:
        """The temperature's step, then the critics' targets: the end of one update."""
        if self.params.learn_alpha:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        polyak_(self.target_params, self.critic_params, self.params.tau)
        self.updates += 1

    def _metrics(
        self, losses: tuple[torch.Tensor, ...], head_losses: torch.Tensor
    ) -> dict[str, float]:
        with torch.no_grad():
            stats = torch.stack([v.detach() for v in losses]).tolist()
        names = ("critic_loss", "actor_loss", "q_mean", "alpha", "alpha_loss", "entropy")
        metrics = dict(zip(names, stats))
        if len(self.head_names) > 1:
            for name, loss in zip(self.head_names, head_losses.detach().tolist()):
                metrics[f"critic_loss/{name}"] = loss
        return metrics

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain values only: checkpoints load with weights_only=True.
        return {
            "algo": "sac",  # lets resume name a member whose algo changed
            "actor": self.actor_net.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "gen": self.gen.get_state(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "obs_norm": self.obs_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_net.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        if "gen" in state:
            self.gen.set_state(state["gen"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))
