"""Recurrent cores for policies that see only part of the state (issue 15).

A :class:`RecurrentCore` wraps a one-layer GRU or LSTM behind a flat state tensor ``[N, state_dim]``
so the engine can keep, reset and store the policy state without knowing which cell made it: a
GRU's state is its ``h`` (``state_dim = size``), an LSTM's is ``h`` and ``c`` concatenated
(``state_dim = 2 * size``). The all-zeros row is the state an episode starts in.

``sequence`` replays a rollout chunk with episode starts inside it. It runs the cuDNN / fused
multi-step kernel over every stretch of time steps in which no row starts an episode and only
breaks the stretch where some row does, so a chunk with few episode ends costs a handful of
kernel calls instead of one per step, and gives the same numbers as a loop of ``step``.
"""

from __future__ import annotations

import torch
from torch import nn

CORE_KINDS = ("gru", "lstm")


class RecurrentCore(nn.Module):
    """``y, state' = core(x, state)`` for a GRU or LSTM of width ``size``."""

    def __init__(self, kind: str, in_dim: int, size: int) -> None:
        super().__init__()
        if kind not in CORE_KINDS:
            raise ValueError(f"unknown recurrent core {kind!r}, expected one of {list(CORE_KINDS)}")
        if size < 1 or in_dim < 1:
            raise ValueError(f"recurrent core sizes must be positive: in_dim={in_dim} size={size}")
        self.kind = kind
        self.in_dim = in_dim
        self.size = size
        self.rnn: nn.GRU | nn.LSTM = (nn.GRU if kind == "gru" else nn.LSTM)(in_dim, size)
        self.state_dim = size if kind == "gru" else 2 * size

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.zeros(n, self.state_dim, device=device)

    def _unpack(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # nn.GRU / nn.LSTM want [layers=1, N, size] tensors, contiguous for cuDNN.
        if self.kind == "gru":
            return state.unsqueeze(0).contiguous()
        h, c = state.split(self.size, dim=-1)
        return h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()

    def _pack(self, hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.kind == "gru":
            assert isinstance(hidden, torch.Tensor)
            return hidden.squeeze(0)
        h, c = hidden
        return torch.cat([h.squeeze(0), c.squeeze(0)], dim=-1)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``x [N, in_dim]``, ``state [N, state_dim]`` -> ``(y [N, size], state)``."""
        y, hidden = self.rnn(x.unsqueeze(0), self._unpack(state))
        return y.squeeze(0), self._pack(hidden)

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay ``x [T, N, in_dim]`` from ``state0 [N, state_dim]``.

        ``starts [T, N]`` (bool) True zeroes row n's state before step t: an episode began there.
        Returns every step's output ``[T, N, size]`` and the state after the last step.
        """
        t_len = x.shape[0]
        if starts.shape != x.shape[:2]:
            want = tuple(x.shape[:2])
            raise ValueError(f"starts has shape {tuple(starts.shape)}, expected {want}")
        starts = starts.to(device=x.device, dtype=torch.bool)
        # Time steps where at least one row resets split the chunk into stretches run in one call.
        cuts = torch.nonzero(starts.any(dim=1)).flatten().tolist()
        if not cuts or cuts[0] != 0:
            cuts = [0, *cuts]
        cuts.append(t_len)
        state = state0
        outs = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            keep = (~starts[a]).to(state.dtype).unsqueeze(1)
            state = state * keep
            y, hidden = self.rnn(x[a:b], self._unpack(state))
            outs.append(y)
            state = self._pack(hidden)
        return torch.cat(outs, dim=0), state
