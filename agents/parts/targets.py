"""Target networks: a frozen copy of a network, moved toward it by Polyak averaging."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn


def frozen_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` that no optimizer or gradient touches (a target network)."""
    target = copy.deepcopy(net)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_(target: Sequence[torch.Tensor], online: Sequence[torch.Tensor], tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, in one fused call over all tensors."""
    torch._foreach_lerp_(list(target), list(online), tau)
