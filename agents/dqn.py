"""Double DQN (van Hasselt et al., 2016) for discrete actions.

The online network picks the next action, the target network evaluates it:

    y    = r + discount * Q'(s', argmax_a Q(s', a))
    L    = mean_i  w_i * huber(y_i - Q(s_i, a_i))         (w = importance weights)

Several task reward heads are not given one Q each here: their rewards are summed with the
task's head weights into one reward, r = sum_h c_h r_h, and a single Q learns that sum (which,
Q being linear in the reward, is the weighted sum of the heads' Q values).

Recurrent DQN (``core = "gru"`` or ``"lstm"``, issue 15), R2D2-style (Kapturowski et al. 2019):
a core reads the observation history before the Q-network's layers (``RecurrentNet``). It learns
from replayed sequences with the stored state and a burn-in; the target above holds at every
trained position, s' being read by the online and target cores unrolled over the sequence's
next observations from the stored state, and the loss is averaged over the trained positions
(``mask``); a sequence's priority is ``seq_eta max|delta| + (1 - seq_eta) mean|delta|``.

Action masks (turn-based games, ``SpaceInfo.action_mask``): the greedy action is the argmax over
the legal actions, an epsilon-greedy draw is uniform among them, and the target's argmax (max
without ``double``) runs over the actions legal at s', read from the mask columns of the next
observation (``agents/parts/masks.py``). A next observation with no legal action (a terminal
one) counts all legal; its bootstrap is zeroed by the discount anyway.

Negamax values (self-play in a two-player zero-sum game, ``SpaceInfo.negamax``, ``[play]
negamax``): a transition runs from a move to the opponent's reply, s' is the opponent's view,
and one Q-function serves both sides, each seeing the board as the mover. A move is worth what
it earned minus what the position it leaves is worth to the opponent,

    y = r - discount * ((1 - k) Q'(s', argmax_b Q(s', b)) + k mean_b Q'(s', b))

over the opponent's legal replies b: its best reply, or with chance k (``negamax_random``) a
uniformly random one. With k = 0 this is minimax (Q-learning's max, taken by alternating
players); a small k makes the moves that hold against best play differ by how many chances
they leave a weak player to go wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from wheeler2.agents.offpolicy import OffPolicy, View, loss_step
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import MLP, AugmentParams
from wheeler2.agents.parts.heads import DiscreteQ
from wheeler2.agents.parts.masks import legal_actions_np, masked_argmax, random_legal
from wheeler2.agents.parts.noisy import noisy_head_, resample_noise
from wheeler2.agents.recurrent import SequenceParams, body

from wheeler2.agent import ActOut, Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(SequenceParams, AugmentParams):
    # The recurrent options (core, core_size, trunk_reads, seq_*) come from SequenceParams.
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
    # NoisyLinear, redrawn per act batch and per learn step (as in the paper, the target's value
    # at s', the online net's pick of a' there and Q(s, a) each their own draw); epsilon-greedy
    # is off (eps_* unused); explore=False acts on the mean weights.
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


def negamax_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    q_next_online: torch.Tensor,
    q_next_target: torch.Tensor,
    legal: torch.Tensor,
    random_share: float,
) -> torch.Tensor:
    """y = r - discount * ((1 - k) Q'(s', argmax_b Q(s', b)) + k mean_b Q'(s', b)), the b over
    ``legal`` [B, A] (the online Q values already masked to it)."""
    best = q_next_target.gather(-1, q_next_online.argmax(-1, keepdim=True)).squeeze(-1)
    legal_f = legal.to(q_next_target.dtype)
    mean = (q_next_target * legal_f).sum(-1) / legal_f.sum(-1).clamp_min(1.0)
    return reward - discount * ((1.0 - random_share) * best + random_share * mean)


class DQN(OffPolicy, Agent):
    Params = Params
    discrete = True
    saved = {"q": "q", "q_target": "q_target", "opt": "opt"}
    policy = "q"  # DiscreteQ declares its sync roles (net.trunk / net.head as trunk / head),
    # so this learner seeds PPO / A2C explorers of the same hidden sizes.
    random_warmup = False  # epsilon-greedy from the first step
    masks = True
    negamax = True  # learns negamax values in self-play ([play] negamax)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        if params.loss not in ("huber", "mse"):
            raise ValueError(f"loss must be 'huber' or 'mse', got {params.loss!r}")
        super().__init__(space, params, device, seed)
        p, n = params, space.act_dim
        with seeded(seed):
            if self.recurrent:
                self.q = self.net(lambda d: MLP(d, p.hidden, n, "relu"), actions="discrete")
            else:
                self.q = self.net(lambda d: DiscreteQ(d, n, p.hidden))
            if p.noisy:
                noisy_head_(self.q.net if not self.recurrent else body(self.q), p.noisy_sigma0)
        self.q_target = self.target(self.q)
        self.opt, self.q_params = self.optimizer(self.q, p.lr)
        # The layers after the network's core (the network itself when feedforward).
        self.q_layers, self.q_target_layers = body(self.q), body(self.q_target)
        self.rng = np.random.default_rng(seed)  # epsilon-greedy
        self._drawn: np.ndarray | None = None  # this act's epsilon draw, for explore

    @property
    def epsilon(self) -> float:
        p = self.params
        if p.noisy:
            return 0.0  # the noisy head explores
        frac = min(1.0, self.env_steps / max(1, p.eps_decay_steps))
        return p.eps_start + frac * (p.eps_end - p.eps_start)

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        # Epsilon-greedy's draw comes first: where it replaces every row's action, the
        # network's choice would be thrown away, and on images its forward pass costs more
        # than the env step (Atari: ~1.5 ms a step on the CPU). Same draws, same actions.
        if explore and not self.recurrent and not self.params.noisy:
            self._drawn = self.rng.random(len(obs)) < self.epsilon
            if self._drawn.all():
                placeholder = np.zeros(len(obs), np.int64)
                if self.masked:
                    legal = legal_actions_np(obs, self.space.act_dim)
                    return ActOut(self.explore(placeholder, legal))
                return ActOut(self.explore(placeholder))
        return super().act(obs, explore, state)

    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return self.q_layers(z).argmax(-1)

    def decide_legal(self, z: torch.Tensor, sample: bool, legal: torch.Tensor) -> torch.Tensor:
        return masked_argmax(self.q_layers(z), legal)

    def explore(self, action: np.ndarray, legal: np.ndarray | None = None) -> np.ndarray:
        """Epsilon-greedy (none with a noisy head, which explores by itself), the random
        actions among the ``legal`` ones where given."""
        if self.params.noisy:
            return action
        rand, self._drawn = self._drawn, None  # drawn by act where it could
        if rand is None:
            rand = self.rng.random(len(action)) < self.epsilon
        if legal is None:
            action[rand] = self.rng.integers(0, self.space.act_dim, int(rand.sum()))
        else:
            action[rand] = random_legal(self.rng, legal[rand])
        return action

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        p = self.params
        if p.noisy:  # independent draws (Fortunato et al. 2018, algorithm 1): with double,
            # this online one picks a' at s' (their xi''), the target's evaluates it (xi'), and
            # Q(s, a) gets a third below (xi). One draw shared by the pick and Q(s, a) ties the
            # target to the noise of the value it trains and biases the noise scales' gradient.
            resample_noise(self.q, self.noise_gen)
            resample_noise(self.q_target, self.noise_gen)
        with torch.no_grad():
            reward = v.reward @ self.head_w  # heads -> one reward
            q_next_target = v.boot(self.q_target_layers(v.read_next(self.q_target)))
            if p.double:
                q_next_online = v.boot(self.q_layers(v.read_next(self.q)))
            else:
                q_next_online = q_next_target
            if self.masked:
                # Only the argmax is masked: the target net's value at the picked action is
                # finite, so a zero discount cannot meet an -inf.
                legal = v.next_legal(self.space.act_dim)
                q_next_online = q_next_online.masked_fill(~legal, -torch.inf)
            k = self.space.negamax
            if k is None:
                y = double_q_target(reward, v.discount, q_next_online, q_next_target)
            else:
                if not self.masked:  # every reply legal
                    legal = torch.ones_like(q_next_target, dtype=torch.bool)
                y = negamax_target(reward, v.discount, q_next_online, q_next_target, legal, k)
        if p.noisy and p.double:  # Q(s, a)'s own draw (the online net just picked a' with one)
            resample_noise(self.q, self.noise_gen)
        q_all = self.q_layers(v.read(self.q))
        action = v.action.long().reshape(*q_all.shape[:-1], 1)
        q = q_all.gather(-1, action).squeeze(-1)
        if p.loss == "huber":
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
        else:
            per_sample = (q - y).pow(2)
        loss = v.loss(per_sample)
        loss_step(loss, self.opt, self.q_params, p.max_grad_norm)
        self.updates += 1
        if self.updates % p.target_update == 0:
            self.update_targets()

        metrics = self.report(None, loss=loss.detach(), q_mean=v.mean(q.detach()))
        return metrics | {"epsilon": self.epsilon}, (y - q.detach()).abs()
