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
both critics, averaged over the pair and over the heads with the head weights.

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

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.nets import (
    DeterministicActor,
    NumpyForward,
    TwinQCritic,
    resolve_device,
    seeded,
)
from agents.noise import KINDS, make_noise
from agents.normalize import IdentityNorm, make_obs_norm
from agents.offpolicy import ActorCriticSteps
from agents.recurrent import (
    RecurrentActor,
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
    gamma: float = bounded(0.98, ge=0, le=1)  # discount (the buffer applies it for n-step)
    tau: float = bounded(0.005, gt=0, le=1)  # Polyak rate of the target networks
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam step sizes above 1 only diverge
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    hidden: list[int] = sizes(400, 300)  # actor and critic layers
    # Env steps of uniform random actions before the policy acts.
    learning_starts: int = bounded(10_000, ge=0)
    # Exploration noise kind (agents/noise.py): white, 1/f, 1/f^noise_beta, Ornstein-Uhlenbeck.
    noise: str = choice("gaussian", KINDS)
    noise_std: float = bounded(0.1, ge=0)  # std of the action noise, in [-1, 1] action units
    # Spectrum exponent of "colored" noise: 0 white, 1 pink, 2 red.
    noise_beta: float = bounded(1.0, ge=0, le=2)
    noise_horizon: int = bounded(1000, ge=2)  # steps per "pink" / "colored" sequence
    ou_theta: float = bounded(0.15, ge=0)  # Ornstein-Uhlenbeck mean reversion rate
    ou_dt: float = bounded(1e-2, gt=0)  # Ornstein-Uhlenbeck time step
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


class TD3(ActorCriticSteps, Agent):
    Params = Params
    uses_replay = True

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return offpolicy_needs(params)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        if space.discrete:
            raise ValueError("TD3 needs a continuous (Box) action space")
        p, dev = params, self.device
        self.head_names = space.heads
        self.recurrent = p.core != "none"
        with seeded(seed):
            if self.recurrent:
                self.actor_net, self.critic, self.core_state = recurrent_actor_critic(
                    RecurrentActor, p, space, twin=True
                )
                self.state_dim = 2 * self.core_state
            else:
                self.actor_net = DeterministicActor(space.obs_dim, p.hidden, space.act_dim, "relu")
                self.critic = TwinQCritic(
                    space.obs_dim, space.act_dim, p.hidden, space.num_heads, p.critic, "relu"
                )
        self.actor_net.to(dev)
        self.critic.to(dev)
        self.actor_target = _frozen_copy(self.actor_net)
        self.critic_target = _frozen_copy(self.critic)
        self.actor_opt = torch.optim.Adam(self.actor_net.parameters(), lr=p.lr_actor, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=p.lr_critic, fused=True)
        # Flat parameter lists, built once: the Polyak update and autograd take them every step.
        self.actor_params = list(self.actor_net.parameters())
        self.critic_params = list(self.critic.parameters())
        self.target_params = list(self.actor_target.parameters()) + list(
            self.critic_target.parameters()
        )
        self.online_params = self.actor_params + self.critic_params
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=dev)

        self.obs_norm = make_obs_norm(p.normalize_obs, space.obs_dim, p.obs_clip, dev)
        # Acting on the CPU without input normalization goes through numpy (see NumpyForward).
        self.fast_actor = (
            NumpyForward.of(self.actor_net, squash=True)
            if isinstance(self.obs_norm, IdentityNorm) and not self.recurrent
            else None
        )
        self.noise = make_noise(
            p.noise,
            p.noise_std,
            space.act_dim,
            seed + 1,
            beta=p.noise_beta,
            horizon=p.noise_horizon,
            theta=p.ou_theta,
            dt=p.ou_dt,
        )
        self.rng = np.random.default_rng(seed + 2)
        # The target-policy smoothing noise has its own stream, on the learner's device.
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed + 3)
        self.env_steps = 0
        self.updates = 0
        self.last_actor_loss = 0.0

    @property
    def actor(self) -> nn.Module:
        return self.actor_net

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        n = len(obs)
        if self.recurrent:
            return self._act_recurrent(obs, explore, state)
        if explore and self.env_steps < self.params.learning_starts:
            # Uniform actions fill the buffer with diverse data before the policy means anything.
            a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
            return ActOut(action=a)
        if self.fast_actor is not None:
            a = self.fast_actor(obs)
        else:
            with torch.inference_mode():
                x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
                a = self.actor_net(self.obs_norm.normalize(x)).cpu().numpy()
        if explore and self.params.noise != "none":
            a = np.clip(a + self.noise(n), -1.0, 1.0)
        return ActOut(action=a.astype(np.float32, copy=False))

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        """Q_h(s, mu(s)) of each head, ``[N, H]``, from the critic the actor maximizes
        (``actor_q``): evaluation holds it against each head's discounted return."""
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            x = self.obs_norm.normalize(x)
            a = self.actor_net(x)
            q = (
                self.critic.q1(x, a)
                if self.params.actor_q == "q1"
                else self.critic(x, a).min(0).values
            )
            return q.cpu().numpy()

    def _act_recurrent(self, obs: np.ndarray, explore: bool, state: np.ndarray | None) -> ActOut:
        n = len(obs)
        with torch.inference_mode():
            x = self.obs_norm.normalize(
                torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            )
            h = state_rows(state, n, self.state_dim, self.device)
            ya, h = step_two_cores(self.actor_net.core, self.critic.core, x, h)
            a = self.actor_net.on(ya, x).cpu().numpy()
            nxt = h.cpu().numpy()
        if explore and self.env_steps < self.params.learning_starts:
            a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
        elif explore and self.params.noise != "none":
            a = np.clip(a + self.noise(n), -1.0, 1.0)
        return ActOut(action=a.astype(np.float32, copy=False), state=nxt)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.env_steps += len(step.obs)
        self.obs_norm.update(step.obs)  # acting data only: evaluation never calls observe
        done = np.logical_or(step.terminated, step.truncated)
        if done.any():
            self.noise.reset(done)
        return None

    def target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """a' = clip(mu'(s') + clip(eps, -c, c), -1, 1): the smoothed target action."""
        p = self.params
        a_next = self.actor_target(next_obs)
        eps = torch.randn(a_next.shape, generator=self.gen, device=a_next.device)
        eps = (eps * p.target_noise).clamp(-p.target_noise_clip, p.target_noise_clip)
        return (a_next + eps).clamp(-1.0, 1.0)

    def learn(self, batch: Batch) -> LearnOut:
        p = self.params
        if self.recurrent:
            return self.learn_sequences(batch)  # type: ignore[arg-type]
        obs, action = self.obs_norm.normalize(batch.obs), batch.action
        next_obs = self.obs_norm.normalize(batch.next_obs)
        with torch.no_grad():
            q_next = self.critic_target(next_obs, self.target_action(next_obs))  # [2, B, H]
            y = batch.reward + batch.discount.unsqueeze(-1) * q_next.min(0).values  # [B, H]
        q = self.critic(obs, action)  # [2, B, H]
        td = y - q
        # Per head: the pair's losses summed, each importance-weighted over the batch.
        head_losses = (batch.weight.unsqueeze(-1) * td.pow(2)).mean(1).sum(0)  # [H]
        critic_loss = head_losses.sum()

        self._critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            a_pi = self.actor_net(obs)
            if p.actor_q == "q1":
                q_pi = self.critic.q1(obs, a_pi)  # [B, H]
            else:
                q_pi = self.critic(obs, a_pi).min(0).values
            actor_loss = -(q_pi * self.head_w).sum(-1).mean()
            self._actor_step(actor_loss)

        with torch.no_grad():
            abs_td = td.detach().abs().mean(0)  # [B, H], the pair averaged
            # One priority per sample: the heads' |TD| averaged with the task's head weights.
            td_error = (abs_td * self.head_w).sum(-1) / self.head_w.sum()
            stats = torch.stack([critic_loss.detach(), q.detach().mean()]).tolist()
        return LearnOut(metrics=self._metrics(stats, head_losses), td_error=td_error.cpu().numpy())

    def learn_sequences(self, batch: SequenceBatch) -> LearnOut:
        """The TD3 step on B sequences, time-major inside: positions t of ``mask`` are the
        samples, each row weighted by its sequence's importance weight."""
        p = self.params
        s = Sequences.of(batch, self.obs_norm, self.state_dim, "TD3")
        ha, hc = s.state.split(self.core_state, dim=1)
        with torch.no_grad():
            ya = s.next_features(self.actor_target.core, ha)
            yc = s.next_features(self.critic_target.core, hc)
            a_next = self._smooth(self.actor_target.on(ya, s.nxt))
            y = s.target(self.critic_target.on(yc, s.nxt, a_next).min(0).values)  # [T, B, H]
        feats = s.unroll(self.critic.core, hc, p.seq_burn_in)
        q = self.critic.on(feats, s.x, s.action)  # [2, T, B, H]
        td = y - q
        head_losses = s.weighted(td.pow(2))  # [H]
        critic_loss = head_losses.sum()

        self._critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            a_pi = self.actor_net.on(s.unroll(self.actor_net.core, ha, p.seq_burn_in), s.x)
            feats = feats.detach()  # the actor climbs Q; the critic's core is the critic's
            if p.actor_q == "q1":
                q_pi = self.critic.q1_on(feats, s.x, a_pi)  # [T, B, H]
            else:
                q_pi = self.critic.on(feats, s.x, a_pi).min(0).values
            self._actor_step(-s.mean((q_pi * self.head_w).sum(-1)))

        with torch.no_grad():
            abs_td = (td.detach().abs().mean(0) * self.head_w).sum(-1) / self.head_w.sum()
            stats = torch.stack([critic_loss.detach(), s.mean(q.detach().mean((0, 3)))]).tolist()
        return LearnOut(
            metrics=self._metrics(stats, head_losses), td_error=s.priority(abs_td, p.seq_eta)
        )

    def _smooth(self, a_next: torch.Tensor) -> torch.Tensor:
        p = self.params
        eps = torch.randn(a_next.shape, generator=self.gen, device=a_next.device)
        eps = (eps * p.target_noise).clamp(-p.target_noise_clip, p.target_noise_clip)
        return (a_next + eps).clamp(-1.0, 1.0)

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain values only: checkpoints load with weights_only=True.
        return {
            "algo": "td3",  # lets resume name a member whose algo changed
            "actor": self.actor_net.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "gen": self.gen.get_state(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "obs_norm": self.obs_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_net.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if "gen" in state:
            self.gen.set_state(state["gen"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))


def _frozen_copy(net: nn.Module) -> nn.Module:
    target = copy.deepcopy(net)
    target.requires_grad_(False)
    return target
