"""The one numpy forward pass: an :class:`MLP` actor's ``head(trunk(x))`` for acting on a few
rows at a time on the CPU.

A member acts on one row per env copy, and at that size torch's per-op dispatch and its sgemm
for thin matrices dominate: 8 rows through DDPG's 3-400-300-1 actor took ~110 µs in torch and
~50 µs here (experiments/bench_collect.py). Layers: Linear (its activation fused after it),
ReLU / Tanh, :class:`NoisyLinear` (its noise as drawn, or the means in eval mode) and an
:class:`RBFEncoder` first in the trunk. Each new layer kind is written here once, and so is each
``forward`` it stands in for (``_FORWARDS``): a network whose ``forward`` is anything else (a
head written in an algorithm's file) acts through torch, never through a guess of its output.

The arrays are views of the module's own parameters and buffers, so optimizer steps, weight
sync (``copy_`` / ``lerp_``), ``load_state_dict`` and a noisy layer's ``resample``, which all
write in place, are seen at once; if a tensor's storage is ever replaced, the views are rebuilt
on the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from torch import nn
from wheeler2.agents.parts.encoders import MLP, RBFEncoder
from wheeler2.agents.parts.heads import DeterministicActor, SquashedGaussianActor
from wheeler2.agents.parts.noisy import NoisyLinear

Step = Callable[[np.ndarray], np.ndarray]

F = TypeVar("F", bound=Callable[..., torch.Tensor])


def decides_by_forward(decide: F) -> F:
    """Marks an algorithm's ``decide`` whose greedy action (``sample`` False) is its actor's
    forward and nothing more, so :class:`NumpyForward` may act in its place. The mark sits on
    the function, not the class: a subclass that writes its own ``decide`` (a clamp, a scale)
    has an unmarked one and acts through torch, with what its ``decide`` gives."""
    decide.decides_by_forward = True  # type: ignore[attr-defined]
    return decide


def is_decided_by_forward(decide: Callable[..., torch.Tensor]) -> bool:
    return getattr(decide, "decides_by_forward", False)


# The tensors each layer kind is read from (watched for a replaced storage).
_TENSORS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Linear: ("weight", "bias"),
    NoisyLinear: ("weight", "bias", "weight_sigma", "bias_sigma", "eps_in", "eps_out"),
    RBFEncoder: ("centers", "width"),
}

# The forwards this pass computes, and whether each ends with tanh (``squash``). Any other (an
# MLP subclass with its own ``forward``: a categorical policy's logits, a scaled action) would
# be read as ``head(trunk(x))``, and a tanh of logits cast to int64 acts as action 0.
_FORWARDS: dict[Callable[..., torch.Tensor], bool] = {
    MLP.forward: False,
    DeterministicActor.forward: True,
    SquashedGaussianActor.forward: True,
}


class NumpyForward:
    """``net``'s forward in numpy (``squash``: tanh on the output, as DeterministicActor)."""

    _ACTIVATIONS: dict[type[nn.Module], Step] = {
        nn.ReLU: lambda x: np.maximum(x, 0.0, out=x),
        nn.Tanh: lambda x: np.tanh(x, out=x),
    }

    def __init__(self, net: MLP, squash: bool) -> None:
        self.net = net
        self.squash = squash
        self._watched: list[tuple[nn.Module, str]] = []
        self._ptrs: list[int] = []
        self._steps: list[Step] = []

    @classmethod
    def of(cls, net: MLP, squash: bool) -> NumpyForward | None:
        """None where it does not apply: tensors off the CPU or not float32, a layer it
        does not know, a ``forward`` other than ``head(trunk(x))``, with tanh after it as
        ``squash`` says (or ``net`` is no :class:`MLP`)."""
        if not isinstance(net, MLP) or _FORWARDS.get(type(net).forward) is not squash:
            return None
        tensors = [*net.parameters(), *net.buffers()]
        if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
            return None
        for i, m in enumerate([*net.trunk, net.head]):
            known = type(m) in (nn.Linear, NoisyLinear) or type(m) in cls._ACTIVATIONS
            if not known and not (i == 0 and isinstance(m, RBFEncoder)):
                return None
        return cls(net, squash)

    def _build(self) -> None:
        def view(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy()

        steps: list[Step] = []
        mods = [*self.net.trunk, self.net.head]
        for m in mods:
            if type(m) is nn.Linear:
                # weight.T is a transposed view: BLAS reads it in place, nothing is copied.
                steps.append(_linear(view(m.weight).T, view(m.bias)))
            elif isinstance(m, NoisyLinear):
                steps.append(_noisy(m, *(view(getattr(m, n)) for n in _TENSORS[NoisyLinear])))
            elif isinstance(m, RBFEncoder):
                steps.append(_rbf(m, view(m.centers), view(m.width)))
            else:
                steps.append(self._ACTIVATIONS[type(m)])
        self._steps = steps
        self._watched = [(m, n) for m in mods for n in _TENSORS.get(type(m), ())]
        self._ptrs = self._storage()

    def _storage(self) -> list[int]:
        # Read through the layers' attributes rather than net.parameters(), which walks the
        # module tree on every act (measured under load: ~14 µs here against ~25 µs).
        return [getattr(m, n).data_ptr() for m, n in self._watched]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not self._steps or self._storage() != self._ptrs:
            self._build()
        h = np.asarray(x, np.float32)
        for step in self._steps:
            h = step(h)
        return np.tanh(h, out=h) if self.squash else h


def _linear(w: np.ndarray, b: np.ndarray) -> Step:
    def linear(h: np.ndarray) -> np.ndarray:
        h = h @ w
        h += b
        return h

    return linear


def _noisy(m: NoisyLinear, w, b, ws, bs, ein, eout) -> Step:  # noqa: ANN001
    w, ws = w.T, ws.T

    def noisy(h: np.ndarray) -> np.ndarray:
        out = h @ w
        out += b
        if m.training:
            out += ((h * ein) @ ws + bs) * eout
        return out

    return noisy


def _rbf(m: RBFEncoder, c: np.ndarray, width: np.ndarray) -> Step:
    def rbf(h: np.ndarray) -> np.ndarray:
        z = h[:, : m.in_dim]
        d2 = (z * z).sum(-1, keepdims=True) - 2.0 * (z @ c.T) + (c * c).sum(-1)
        phi = np.exp(-np.maximum(d2, 0.0) / (2.0 * width[0] * width[0]))
        if m.passthrough:
            return np.concatenate([phi, h[:, m.in_dim :]], axis=-1)
        return phi

    return rbf
