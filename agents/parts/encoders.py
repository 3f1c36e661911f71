"""Observation encoders: the MLP trunk every network here starts with, and RBF features.

Every policy is an :class:`MLP` with two sub-modules, ``trunk`` (the hidden layers) and ``head``
(the last linear layer). Each actor declares them as its weight-sync roles (``sync_roles``, role
-> sub-module path) and its action space (``sync_actions``), so an explorer can take a learner's
trunk and keep its own head (``keep = ["head"]``) across algorithm families. A role is copied
only into a role built from the same layer kinds, activations included (set ``activation``
alike on both members; ``wheeler2/sync.py``). RBF features (:class:`RBFEncoder`) go first in a
trunk (``trunk.0``), so they travel with the trunk role.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


def activation(name: str) -> type[nn.Module]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        known = list(ACTIVATIONS)
        raise ValueError(f"unknown activation {name!r}, expected one of {known}") from None


def ortho_init_(module: nn.Module, gain: float) -> None:
    # Orthogonal weights keep activations' scale through tanh layers (SB3 / baselines PPO habit).
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


class MLP(nn.Module):
    """``head(trunk(x))`` with ``trunk`` = [Linear, act] * len(hidden) and ``head`` = Linear."""

    # Weight sync (wheeler2/sync.py): role -> sub-module path, and the action space the output is
    # for (None: not a policy by itself, e.g. a critic's net).
    sync_roles: ClassVar[dict[str, str]] = {"trunk": "trunk", "head": "head"}
    sync_actions: ClassVar[str | None] = None

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, act: str = "relu"):
        super().__init__()
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(in_dim, h), activation(act)()]
            in_dim = h
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


class RBFEncoder(nn.Module):
    """Gaussian radial basis features of the first ``in_dim`` input columns:

        phi_j(x) = exp(-||x - c_j||^2 / (2 w^2)),   j = 1 .. num_centers

    then the remaining ``passthrough`` columns unchanged (a critic's action). The centers are
    drawn once from N(0, I) by a generator seeded with ``seed``, which suits inputs of unit scale
    (``normalize_obs = true``); ``width = 0`` takes w = sqrt(in_dim), for which the expected
    squared distance of a unit-normal input to a center (2 in_dim) gives phi = exp(-1).
    Centers and width are persistent buffers: they are in the state dict (a checkpoint restores
    the very features) and, under the ``trunk`` role, in weight sync (an explorer with the same
    ``rbf_*`` keys takes them with the trunk; one without features is refused by shape).
    """

    def __init__(
        self, in_dim: int, num_centers: int, width: float = 0.0, seed: int = 0, passthrough: int = 0
    ) -> None:
        super().__init__()
        if num_centers < 1:
            raise ValueError(f"RBFEncoder: num_centers must be >= 1, got {num_centers}")
        if width < 0:
            raise ValueError(f"RBFEncoder: width must be >= 0 (0: sqrt(in_dim)), got {width}")
        gen = torch.Generator().manual_seed(int(seed))
        self.in_dim, self.num_centers, self.passthrough = in_dim, num_centers, passthrough
        self.out_dim = num_centers + passthrough
        w = float(width) if width > 0 else math.sqrt(in_dim)
        self.register_buffer("centers", torch.randn(num_centers, in_dim, generator=gen))
        self.register_buffer("width", torch.tensor([w]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x[..., : self.in_dim]
        c = self.centers
        # ||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2: one matmul, no [B, C, D] temporary.
        d2 = (z * z).sum(-1, keepdim=True) - 2.0 * (z @ c.T) + (c * c).sum(-1)
        phi = torch.exp(-d2.clamp_min(0.0) / (2.0 * self.width * self.width))
        if self.passthrough:
            return torch.cat([phi, x[..., self.in_dim :]], dim=-1)
        return phi

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, num_centers={self.num_centers}, "
            f"width={float(self.width):.4g}, passthrough={self.passthrough}"
        )


def with_features_(net: MLP, encoder: nn.Module) -> MLP:
    """Put ``encoder`` before the first layer of ``net``, in place, as ``trunk.0`` (so it travels
    with the trunk role). ``net`` must have been built with ``in_dim = encoder.out_dim``."""
    first = next((m for m in [*net.trunk, net.head] if hasattr(m, "in_features")), None)
    out_dim = getattr(encoder, "out_dim", None)
    if first is not None and out_dim is not None and first.in_features != out_dim:
        raise ValueError(
            f"with_features_: the encoder gives {out_dim} features, the first layer takes "
            f"{first.in_features}"
        )
    net.trunk = nn.Sequential(encoder, *net.trunk)
    return net


def feature_dim(features: str, obs_dim: int, num_centers: int) -> int:
    """The width of the first layer's input for a ``features`` choice (``"none"`` / ``"rbf"``)."""
    return num_centers if features == "rbf" else obs_dim


def rbf_features_(
    module: nn.Module, obs_dim: int, num_centers: int, width: float, seed: int
) -> nn.Module:
    """Give every :class:`MLP` inside ``module`` (an actor, a QCritic's nets, a DiscreteQ's net)
    RBF features of its first ``obs_dim`` inputs, the rest (a critic's action) passed through;
    each MLP must have been built with ``num_centers`` observation inputs. All get the same
    centers (one ``seed``), so actor and critic see the same features."""
    nets = [m for m in module.modules() if isinstance(m, MLP)]
    for net in nets:
        first = next(m for m in [*net.trunk, net.head] if hasattr(m, "in_features"))
        passthrough = first.in_features - num_centers
        encoder = RBFEncoder(obs_dim, num_centers, width, seed, passthrough)
        with_features_(net, encoder.to(next(net.parameters()).device))
    return module
