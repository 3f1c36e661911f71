"""Heads: what a network outputs after its encoder (an :class:`MLP` trunk, an RBF encoder, a
recurrent core's features): a deterministic action, Q per reward head (one net per head or one
shared trunk), a twin pair of those, Q over discrete actions, SAC's tanh-squashed Gaussian, and
the on-policy algorithms' stochastic actors (Gaussian, categorical) and V critic. Each takes its
input width first, so a builder can put any encoder before it. Log-probs, entropies and drawing
from a policy are in ``distributions.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn
from wheeler2.agents.parts.distributions import squashed_log_prob
from wheeler2.agents.parts.encoders import MLP, ortho_init_


def entropy_shares(head_w: torch.Tensor) -> torch.Tensor:
    """Each head's share s_h of a soft actor-critic's entropy bonus (SAC, CrossQ): c_h / sum_k
    c_k^2, in proportion to the head weights c_h and with sum_h c_h s_h = 1, so that the
    weighted sum of the heads' soft targets is the soft target of the weighted reward whatever
    the weights. (c_h / sum_k c_k gives sum_h c_h s_h = sum c^2 / sum c: weights (0.5, 0.5)
    halved the critics' temperature against the actor's, (2, 1) raised it by 5/3.) All weights
    0: no share (the actor then reads no head)."""
    square = float((head_w.double() ** 2).sum())
    return head_w / square if square > 1e-12 else torch.zeros_like(head_w)


class DeterministicActor(MLP):
    """DDPG's mu(s) = tanh(head(trunk(s))), in [-1, 1]^act_dim."""

    sync_actions = "continuous"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)))


class QCritic(nn.Module):
    """Q(s, a) for H reward heads -> [B, H].

    ``mode = "separate"``: H independent MLPs (no head's gradient disturbs another's features).
    ``mode = "shared"``: one trunk with an H-wide last layer (cheaper, features shared).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int = 1,
        mode: str = "separate",
        act: str = "relu",
    ):
        super().__init__()
        if mode not in ("separate", "shared"):
            raise ValueError(f"critic mode must be 'separate' or 'shared', got {mode!r}")
        self.mode = mode
        if mode == "shared":
            self.nets = nn.ModuleList([MLP(obs_dim + act_dim, hidden, num_heads, act)])
        else:
            self.nets = nn.ModuleList(
                MLP(obs_dim + act_dim, hidden, 1, act) for _ in range(num_heads)
            )

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        if len(self.nets) == 1:
            return self.nets[0](x)
        return torch.cat([net(x) for net in self.nets], dim=-1)


class DiscreteQ(nn.Module):
    """Q(s, .) over all discrete actions -> [B, num_actions].

    Its layers live at ``net.trunk`` / ``net.head`` (the names in DQN checkpoints); the sync roles
    map them to ``trunk`` / ``head``, so the Q-network seeds a categorical policy of the same
    ``hidden`` (the head's Q values become logits whose argmax is the greedy action).
    """

    sync_roles: ClassVar[dict[str, str]] = {"trunk": "net.trunk", "head": "net.head"}
    sync_actions: ClassVar[str | None] = "discrete"

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int], act: str = "relu"):
        super().__init__()
        self.net = MLP(obs_dim, hidden, num_actions, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class TwinQCritic(nn.Module):
    """Two independent :class:`QCritic` (``q1``, ``q2``), each with one output per reward head,
    for the clipped double Q of TD3 and SAC -> ``[2, B, H]``; ``.min(0).values`` is the
    per-head pessimistic estimate."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int = 1,
        mode: str = "separate",
        act: str = "relu",
    ):
        super().__init__()
        self.q1 = QCritic(obs_dim, act_dim, hidden, num_heads, mode, act)
        self.q2 = QCritic(obs_dim, act_dim, hidden, num_heads, mode, act)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.q1(obs, action), self.q2(obs, action)])


# SAC's bounds on the policy's log std (those of the SAC reference code and SB3).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SquashedGaussianActor(MLP):
    """SAC's pi(a|s): u ~ N(head(trunk(s)), exp(log_std_head(trunk(s)))), a = tanh(u).

    ``trunk`` and ``head`` (the mean) are the weight-sync roles, as in every actor here, so
    ``forward`` is the deterministic mean action tanh(head(trunk(s))), the same computation as
    :class:`DeterministicActor`: an explorer that syncs from SAC gets the mean path (trunk and
    mean head). ``log_std_head`` sits outside the roles; sync matches it by name, so it travels
    between SAC actors and is skipped for a PPO / A2C explorer, which has a ``log_std`` of its own.
    """

    sync_actions = "continuous"

    def __init__(self, obs_dim: int, hidden: Sequence[int], act_dim: int, act: str = "relu"):
        super().__init__(obs_dim, hidden, act_dim, act)
        self.log_std_head = nn.Linear(hidden[-1] if hidden else obs_dim, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)))

    def mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        log_std = self.log_std_head(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.head(h), log_std

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized draw a = tanh(mean + std * eps) and its log-prob log pi(a|s) [B]."""
        mean, log_std = self.mean_log_std(obs)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * eps
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)


# -- the on-policy networks (PPO, A2C, PG): a stochastic actor and V -------------------------


class GaussianActor(MLP):
    """pi(a|s) = N(head(trunk(s)), exp(log_std)); the std does not depend on the state.

    ``forward`` returns the mean, i.e. the deterministic action (clip it to [-1, 1] to act).
    """

    sync_actions = "continuous"

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int],
        act_dim: int,
        act: str = "tanh",
        log_std_init: float = 0.0,
    ):
        super().__init__(obs_dim, hidden, act_dim, act)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))


class CategoricalActor(MLP):
    """pi(a|s) = softmax(head(trunk(s))); ``forward`` returns the logits."""

    sync_actions = "discrete"


def build_actor(
    obs_dim: int,
    act_dim: int,
    discrete: bool,
    hidden: Sequence[int],
    act: str = "tanh",
    log_std_init: float = 0.0,
    ortho: bool = True,
) -> GaussianActor | CategoricalActor:
    """The stochastic policy of the on-policy algorithms (PPO, A2C)."""
    if discrete:
        net: GaussianActor | CategoricalActor = CategoricalActor(obs_dim, hidden, act_dim, act)
    else:
        net = GaussianActor(obs_dim, hidden, act_dim, act, log_std_init)
    if ortho:
        ortho_init_(net.trunk, math.sqrt(2))
        # A small last layer starts the policy near uniform / near zero mean (Andrychowicz et al.).
        ortho_init_(net.head, 0.01)
    return net


class VCritic(nn.Module):
    """V(s) -> [B]."""

    def __init__(self, obs_dim: int, hidden: Sequence[int], act: str = "tanh", ortho: bool = True):
        super().__init__()
        self.net = MLP(obs_dim, hidden, 1, act)
        if ortho:
            ortho_init_(self.net.trunk, math.sqrt(2))
            ortho_init_(self.net.head, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)
