"""Noisy networks (NoisyNet, Fortunato et al. 2018): parameter-space exploration."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import nn
from wheeler2.agents.parts.encoders import MLP


def _scaled_noise(n: int, generator: torch.Generator | None) -> torch.Tensor:
    """f(eps) = sign(eps) sqrt(|eps|), eps ~ N(0, 1): the factorized noise of Fortunato et al."""
    eps = torch.randn(n, generator=generator)
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorized Gaussian parameter noise (NoisyNet, Fortunato et al. 2018):

        y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out)

    with mu ~ U[-1/sqrt(p), 1/sqrt(p)] and sigma = sigma0 / sqrt(p) (p = in_features, the
    paper's sigma0 = 0.5). The means are named ``weight`` and ``bias``, as in ``nn.Linear``, the
    learned noise scales ``weight_sigma`` and ``bias_sigma``; the noise itself (``eps_in``,
    ``eps_out``) is a non-persistent buffer, in no state dict and never synced.

    In training mode the layer uses the noise drawn by the last :meth:`resample` (zero before
    the first); in eval mode (``.eval()``, :func:`noise_off`) the mean weights alone. It is not an
    ``nn.Linear`` on purpose: code that reads ``weight`` of every Linear (``NumpyForward``)
    must not mistake it for one.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features, self.sigma0 = in_features, out_features, sigma0
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight.uniform_(-bound, bound)
        self.bias.uniform_(-bound, bound)
        self.weight_sigma.fill_(self.sigma0 * bound)
        self.bias_sigma.fill_(self.sigma0 * bound)

    @torch.no_grad()
    def resample(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise (on the CPU, from ``generator``: reproducible and device-independent)."""
        self.eps_in.copy_(_scaled_noise(self.in_features, generator))
        self.eps_out.copy_(_scaled_noise(self.out_features, generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = nn.functional.linear(x, self.weight, self.bias)
        if not self.training:
            return mean
        # (sigma_w * eps_out eps_in^T) x = eps_out * (sigma_w (eps_in * x)): no [out, in] matrix
        # of noise is built, one extra thin matmul instead.
        noise = nn.functional.linear(x * self.eps_in, self.weight_sigma) + self.bias_sigma
        return mean + noise * self.eps_out

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, sigma0={self.sigma0}"


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def resample_noise(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """New noise for every :class:`NoisyLinear` of ``module`` (one draw per layer)."""
    for m in noisy_layers(module):
        m.resample(generator)


@contextlib.contextmanager
def noise_off(module: nn.Module) -> Iterator[None]:
    """The mean weights of every NoisyLinear of ``module`` inside the block (eval mode for those
    layers only), their previous mode after it."""
    layers = noisy_layers(module)
    modes = [m.training for m in layers]
    for m in layers:
        m.train(False)
    try:
        yield
    finally:
        for m, mode in zip(layers, modes):
            m.train(mode)


def noisy_head_(net: MLP, sigma0: float = 0.5) -> MLP:
    """Replace ``net.head`` (a Linear) by a :class:`NoisyLinear` of the same shape, in place.

    The head keeps its sync role and its tensor names ``head.weight`` / ``head.bias`` (the
    means), plus ``head.weight_sigma`` / ``head.bias_sigma``: an explorer whose head is noisy
    too takes means and scales together; one with a plain head must keep it
    (``sync.keep = ["head"]``), which ``check_sync`` says by naming ``head.weight_sigma``.
    """
    head = net.head
    if not isinstance(head, nn.Linear):
        raise TypeError(f"noisy_head_: expected an nn.Linear head, got {type(head).__name__}")
    net.head = NoisyLinear(head.in_features, head.out_features, sigma0).to(head.weight.device)
    return net
