"""Double DQN (van Hasselt et al., 2016) for discrete actions.

The online network picks the next action, the target network evaluates it:

    y    = r + discount * Q'(s', argmax_a Q(s', a))
    L    = mean_i  w_i * huber(y_i - Q(s_i, a_i))         (w = importance weights)

Several task reward heads are not given one Q each here: their rewards are summed with the
task's head weights into one reward, r = sum_h c_h r_h, and a single Q learns that sum (which,
Q being linear in the reward, is the weighted sum of the heads' Q values).

Recurrent DQN (``core = "gru"`` or ``"lstm"``, issue 15), R2D2-style (Kapturowski et al. 2019):
a core reads the observation history before the Q-network's layers (``RecurrentQ``). It learns
from replayed sequences with the stored state and a burn-in; the target above holds at every
trained position, s' being read by the online and target cores unrolled over the sequence's
next observations from the stored state, and the loss is averaged over the trained positions
(``mask``); a sequence's priority is ``seq_eta max|delta| + (1 - seq_eta) mean|delta|``.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.nets import (
    DiscreteQ,
    feature_dim,
    noise_off,
    noisy_head_,
    polyak_,
    rbf_features_,
    resample_noise,
    resolve_device,
    seeded,
)
from agents.normalize import make_obs_norm
from agents.recurrent import (
    RecurrentQ,
    SequenceParams,
    Sequences,
    core_problem,
    offpolicy_needs,
    state_rows,
)
from wheeler2.agent import ActOut, Agent, Batch, LearnOut, SequenceBatch, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(SequenceParams):
    # The recurrent options (core, core_size, core_skip, seq_*) come from SequenceParams.
    # Bounds in the fields are checked by the config reader against [team.params].
    gamma: float = bounded(0.99, ge=0, le=1)  # discount (the buffer applies it for n-step)
    lr: float = bounded(1e-4, gt=0, le=1)  # a step size above 1 only diverges
    hidden: list[int] = sizes(64, 64)
    learning_starts: int = bounded(1000, ge=0)  # env steps before the first gradient step
    eps_start: float = bounded(1.0, ge=0, le=1)  # epsilon-greedy exploration, decayed linearly
    eps_end: float = bounded(0.05, ge=0, le=1)
    eps_decay_steps: int = bounded(10_000, ge=1)  # ... over this many env steps
    target_update: int = bounded(1000, ge=1)  # gradient steps between target updates
    tau: float = bounded(1.0, gt=0, le=1)  # 1 = hard copy every target_update; < 1 = Polyak
    double: bool = True  # double-Q target; False = max over the target network
    loss: str = choice("huber", ("huber", "mse"))
    max_grad_norm: float = bounded(10.0, ge=0)  # 0 = off
    normalize_obs: bool = False  # running mean/std of observed inputs (agents/normalize.py)
    obs_clip: float = bounded(5.0, gt=0)  # normalized inputs are clipped to [-obs_clip, obs_clip]
    device: str = "cpu"  # "cpu" | "cuda"
    # NoisyNet exploration (Fortunato et al. 2018): the Q-network's head is a factorized-Gaussian
    # NoisyLinear, redrawn per act batch and per learn step (the target its own draw, as in the
    # paper); epsilon-greedy is off (eps_* unused); explore=False acts on the mean weights.
    noisy: bool = False
    noisy_sigma0: float = bounded(0.5, gt=0)  # initial sigma * sqrt(fan_in); the paper's 0.5
    # "rbf": Gaussian RBF features of the (normalized) observation before the first layer.
    features: str = choice("none", ("none", "rbf"))
    rbf_centers: int = bounded(64, ge=1)  # number of centers, drawn from N(0, I)
    rbf_width: float = bounded(0.0, ge=0)  # kernel width; 0 = sqrt(obs_dim)
    rbf_seed: int = bounded(0, ge=0)  # seed of the centers (members with one seed share them)


def double_q_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    q_next_online: torch.Tensor,
    q_next_target: torch.Tensor,
) -> torch.Tensor:
    """y = r + discount * Q'(s', argmax_a Q(s', a)) for [B] rewards and [B, A] Q values."""
    best = q_next_online.argmax(-1, keepdim=True)
    return reward + discount * q_next_target.gather(-1, best).squeeze(-1)


class DQN(Agent):
    Params = Params
    uses_replay = True

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return offpolicy_needs(params)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        if not space.discrete:
            raise ValueError("DQN needs a discrete action space")
        if params.loss not in ("huber", "mse"):
            raise ValueError(f"loss must be 'huber' or 'mse', got {params.loss!r}")
        problem = core_problem(params)
        if problem is not None:
            raise ValueError(f"{problem[0]}: {problem[1]}")
        p = params
        self.recurrent = p.core != "none"
        in_dim = feature_dim(params.features, space.obs_dim, params.rbf_centers)
        with seeded(seed):
            if self.recurrent:
                self.q = RecurrentQ(
                    p.core, space.obs_dim, p.core_size, p.hidden, space.act_dim, p.core_skip
                )
                self.state_dim = self.q.core.state_dim
            else:
                self.q = DiscreteQ(in_dim, space.act_dim, params.hidden)
            if params.noisy:
                noisy_head_(self.q.mlp if self.recurrent else self.q.net, params.noisy_sigma0)
            self.q.to(self.device)
        if params.features == "rbf":
            rbf_features_(
                self.q, space.obs_dim, params.rbf_centers, params.rbf_width, params.rbf_seed
            )
        # The Q-networks' parameter noise, drawn on the CPU from the agent's seed.
        self.noise_gen = torch.Generator().manual_seed(seed + 3)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=params.lr)
        self.q_params = list(self.q.parameters())
        self.target_params = list(self.q_target.parameters())
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=self.device)
        self.rng = np.random.default_rng(seed)
        self.obs_norm = make_obs_norm(
            params.normalize_obs, space.obs_dim, params.obs_clip, self.device
        )
        self.env_steps = 0
        self.updates = 0

    @property
    def actor(self) -> nn.Module:
        # DiscreteQ declares its sync roles (net.trunk / net.head as trunk / head), so this
        # learner seeds PPO / A2C explorers of the same hidden sizes.
        return self.q

    @staticmethod
    def check_member(
        params: Params, *, role: str, heads: tuple[str, ...], syncs: bool
    ) -> tuple[str, str] | None:
        """(key, problem) when these params do not combine (raised as a ConfigError)."""
        return core_problem(params)

    @property
    def epsilon(self) -> float:
        p = self.params
        if p.noisy:
            return 0.0  # the noisy head explores
        frac = min(1.0, self.env_steps / max(1, p.eps_decay_steps))
        return p.eps_start + frac * (p.eps_end - p.eps_start)

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        if self.params.noisy and explore:
            resample_noise(self.q, self.noise_gen)  # one draw per act batch
        nxt = None
        with noise_off(self.q) if self.params.noisy and not explore else contextlib.nullcontext():
            with torch.inference_mode():
                x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
                x = self.obs_norm.normalize(x)
                if self.recurrent:
                    h = state_rows(state, len(obs), self.state_dim, self.device)
                    q, h = self.q.step(x, h)
                    nxt = h.cpu().numpy()
                else:
                    q = self.q(x)
        action = q.argmax(-1).cpu().numpy()
        if explore and not self.params.noisy:
            rand = self.rng.random(len(action)) < self.epsilon
            action[rand] = self.rng.integers(0, self.space.act_dim, int(rand.sum()))
        return ActOut(action=action.astype(np.int64, copy=False), state=nxt)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.env_steps += len(step.obs)
        self.obs_norm.update(step.obs)  # acting data only: evaluation never calls observe
        return None

    def learn(self, batch: Batch) -> LearnOut:
        p = self.params
        if p.noisy:  # one draw per learn step for the online net, another for the target
            resample_noise(self.q, self.noise_gen)
            resample_noise(self.q_target, self.noise_gen)
        if self.recurrent:
            return self.learn_sequences(batch)  # type: ignore[arg-type]
        action = batch.action.long().reshape(-1, 1)
        obs = self.obs_norm.normalize(batch.obs)
        next_obs = self.obs_norm.normalize(batch.next_obs)
        with torch.no_grad():
            reward = batch.reward.reshape(len(action), -1) @ self.head_w  # heads -> one reward
            q_next_target = self.q_target(next_obs)
            q_next_online = self.q(next_obs) if p.double else q_next_target
            y = double_q_target(reward, batch.discount, q_next_online, q_next_target)
        q = self.q(obs).gather(-1, action).squeeze(-1)
        if p.loss == "huber":
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
        else:
            per_sample = (q - y).pow(2)
        loss = (batch.weight * per_sample).mean()
        self._step(loss)

        td_error = (y - q.detach()).abs()
        stats = torch.stack([loss.detach(), q.detach().mean()]).tolist()
        return LearnOut(
            metrics={"loss": stats[0], "q_mean": stats[1], "epsilon": self.epsilon},
            td_error=td_error.cpu().numpy(),
        )

    def learn_sequences(self, batch: SequenceBatch) -> LearnOut:
        """The double-DQN step on B sequences, time-major inside: positions t of ``mask`` are
        the samples, each row weighted by its sequence's importance weight."""
        p = self.params
        s = Sequences.of(batch, self.obs_norm, self.state_dim, "DQN")
        with torch.no_grad():
            reward = s.reward @ self.head_w  # [T, B]: heads -> one reward
            q_next_target = s.at_boot(
                self.q_target.on(s.next_features(self.q_target.core, s.state), s.nxt)
            )
            if p.double:
                q_next_online = s.at_boot(self.q.on(s.next_features(self.q.core, s.state), s.nxt))
            else:
                q_next_online = q_next_target
            y = double_q_target(reward, s.discount, q_next_online, q_next_target)  # [T, B]
        feats = s.unroll(self.q.core, s.state, p.seq_burn_in)
        q = self.q.on(feats, s.x).gather(-1, s.action.long().unsqueeze(-1)).squeeze(-1)
        if p.loss == "huber":
            per_position = F.smooth_l1_loss(q, y, reduction="none")
        else:
            per_position = (q - y).pow(2)
        loss = (s.w * per_position).sum() / s.count
        self._step(loss)

        td = (y - q.detach()).abs()
        stats = torch.stack([loss.detach(), s.mean(q.detach())]).tolist()
        return LearnOut(
            metrics={"loss": stats[0], "q_mean": stats[1], "epsilon": self.epsilon},
            td_error=s.priority(td, p.seq_eta),
        )

    def _step(self, loss: torch.Tensor) -> None:
        p = self.params
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if p.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.q_params, p.max_grad_norm)
        self.opt.step()
        self.updates += 1
        if self.updates % p.target_update == 0:
            polyak_(self.target_params, self.q_params, p.tau)

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain values only: checkpoints load with weights_only=True.
        return {
            "algo": "dqn",  # lets resume name a member whose algo changed
            "q": self.q.state_dict(),
            "q_target": self.q_target.state_dict(),
            "opt": self.opt.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "obs_norm": self.obs_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.q_target.load_state_dict(state["q_target"])
        self.opt.load_state_dict(state["opt"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))
