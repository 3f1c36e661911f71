"""Distributions of the policies' outputs: Gaussian and tanh-squashed Gaussian log-probs, the
Gaussian entropy, and drawing from and scoring a stochastic policy (categorical logits or
Gaussian means with a log std).

The networks that produce those outputs are in ``heads.py``; these functions take tensors, or an
actor whose ``forward`` returns them (``sample_action`` / ``evaluate_actions``). A categorical
policy over a masked space (``agents/parts/masks.py``) is given ``legal``: its illegal logits are
pushed to the lowest finite value, so they are never drawn, have probability exactly 0 and add
nothing to the entropy, which is that of the distribution renormalised over the legal actions.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from wheeler2.agents.parts.masks import mask_logits


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) for u ~ N(mean, exp(log_std)), summed over action dimensions -> [B].

    Change of variables (Haarnoja et al. 2018, appendix C): log pi(a) = log N(u) - sum_i
    log(1 - tanh(u_i)^2), with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), which stays
    finite where tanh(u) rounds to +-1.
    """
    log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return gaussian_log_prob(u, mean, log_std) - log_det.sum(-1)


def gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """log N(action; mean, exp(log_std)) summed over action dimensions -> [B]."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (same for every state: the std is state-independent)."""
    return (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)


def sample_outputs(
    out: torch.Tensor,
    log_std: torch.Tensor | None,
    explore: bool,
    generator: torch.Generator,
    legal: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a policy's outputs ``out`` -> (env action, raw sample, log-prob of the raw
    sample). ``log_std`` None: ``out`` are the logits of a categorical policy; else the means of
    a Gaussian with that log std.

    Continuous: the env gets the sample clipped to [-1, 1], but the log-prob is that of the
    unclipped sample, the one the Gaussian actually produced (clipping is the env's business).
    ``explore = False`` takes the mode (mean / argmax). Feedforward and recurrent actors
    (agents/onpolicy.py) both draw here. ``legal`` (bool, ``out``'s shape): a categorical
    policy draws among those actions only.
    """
    if log_std is None:
        if legal is not None:
            out = mask_logits(out, legal)
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
    out: torch.Tensor,
    log_std: torch.Tensor | None,
    raw: torch.Tensor,
    legal: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw) and the policy entropy under the outputs ``out`` (``log_std`` and ``legal``
    as in :func:`sample_outputs`), both of ``out``'s leading shape, with gradients."""
    if log_std is None:
        if legal is not None:
            out = mask_logits(out, legal)
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, raw.long().unsqueeze(-1)).squeeze(-1)
        plogp = logp_all.exp() * logp_all
        if legal is not None:
            # p log p is 0 at p = 0; said outright, so that no gradient or rounding of the
            # huge finite log-probabilities of illegal actions reaches the entropy.
            plogp = plogp.masked_fill(~legal, 0.0)
        return logp, -plogp.sum(-1)
    log_std = log_std.expand_as(out)
    return gaussian_log_prob(raw, out, log_std), gaussian_entropy(log_std).expand(out.shape[:-1])


def _log_std(actor: nn.Module) -> torch.Tensor | None:
    """A Gaussian actor's ``log_std``; None for a categorical one, which has none."""
    return getattr(actor, "log_std", None)


def sample_action(
    actor: nn.Module,
    obs: torch.Tensor,
    explore: bool,
    generator: torch.Generator,
    legal: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a stochastic actor at ``obs`` (:func:`sample_outputs`)."""
    return sample_outputs(actor(obs), _log_std(actor), explore, generator, legal)


def evaluate_actions(
    actor: nn.Module, obs: torch.Tensor, raw: torch.Tensor, legal: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw | obs) and the policy entropy per state, both [B], with gradients
    (``legal`` as in :func:`sample_outputs`)."""
    return evaluate_outputs(actor(obs), _log_std(actor), raw, legal)
