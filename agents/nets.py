"""Networks of the on-policy algorithms: stochastic actors, the V critic, sampling and log-probs.

The other parts (issue 35) live in ``agents/parts/``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from agents.parts.encoders import MLP, ortho_init_
from agents.parts.heads import gaussian_log_prob


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


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (same for every state: the std is state-independent)."""
    return (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)


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


def sample_outputs(
    out: torch.Tensor, log_std: torch.Tensor | None, explore: bool, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a policy's outputs ``out`` -> (env action, raw sample, log-prob of the raw
    sample). ``log_std`` None: ``out`` are the logits of a categorical policy; else the means of
    a Gaussian with that log std.

    Continuous: the env gets the sample clipped to [-1, 1], but the log-prob is that of the
    unclipped sample, the one the Gaussian actually produced (clipping is the env's business).
    ``explore = False`` takes the mode (mean / argmax). Feedforward and recurrent actors
    (agents/onpolicy.py) both draw here.
    """
    if log_std is None:
        logp_all = torch.log_softmax(out, dim=-1)
        if explore:
            raw = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        else:
            raw = out.argmax(-1)
        return raw, raw, logp_all.gather(-1, raw.unsqueeze(-1)).squeeze(-1)
    log_std = log_std.expand_as(out)
    raw = out
    if explore:
        noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        raw = out + log_std.exp() * noise
    return raw.clamp(-1.0, 1.0), raw, gaussian_log_prob(raw, out, log_std)


def evaluate_outputs(
    out: torch.Tensor, log_std: torch.Tensor | None, raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw) and the policy entropy under the outputs ``out`` (``log_std`` as in
    :func:`sample_outputs`), both of ``out``'s leading shape, with gradients."""
    if log_std is None:
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, raw.long().unsqueeze(-1)).squeeze(-1)
        return logp, -(logp_all.exp() * logp_all).sum(-1)
    log_std = log_std.expand_as(out)
    return gaussian_log_prob(raw, out, log_std), gaussian_entropy(log_std).expand(out.shape[:-1])


def _log_std(actor: GaussianActor | CategoricalActor) -> torch.Tensor | None:
    return None if isinstance(actor, CategoricalActor) else actor.log_std


def sample_action(
    actor: GaussianActor | CategoricalActor,
    obs: torch.Tensor,
    explore: bool,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a stochastic actor at ``obs`` (:func:`sample_outputs`)."""
    return sample_outputs(actor(obs), _log_std(actor), explore, generator)


def evaluate_actions(
    actor: GaussianActor | CategoricalActor, obs: torch.Tensor, raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw | obs) and the policy entropy per state, both [B], with gradients."""
    return evaluate_outputs(actor(obs), _log_std(actor), raw)
