"""The parts agents are built from (issue 35): an observation encoder, an optional recurrent
core, heads, and what acting and learning need around them.

* ``encoders``: the MLP trunk (:class:`MLP`, ``trunk`` + ``head``) and RBF features.
* ``heads``: what a network outputs: a deterministic action, Q per reward head, a twin Q pair,
  Q over discrete actions, a tanh-squashed Gaussian.
* ``noisy``: NoisyNet layers (parameter-space exploration).
* ``numpy_forward``: the one numpy forward pass acting on the CPU goes through.
* ``targets``: target networks (frozen copies, Polyak averaging).
* ``memory``: the recurrent core and the one recurrent wrapper every recurrent network is built
  on (``agents/recurrent.py`` ``RecurrentNet`` puts a head after it).
* ``batch``: the batch view an off-policy loss reads, for transitions and for sequences alike.

``seeded`` and ``resolve_device`` are here: every builder uses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Build networks from ``seed`` without touching the caller's global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def resolve_device(arg: str | torch.device, param: str) -> torch.device:
    """The engine passes ``device`` to the constructor and users may set ``params.device``.

    Whichever is not the default ``"cpu"`` wins, so either way of asking for CUDA works.
    """
    arg = torch.device(arg)
    return arg if arg.type != "cpu" else torch.device(param)
