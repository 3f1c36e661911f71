"""Memory for policies that see only part of the state (issue 15): a recurrent core and the one
recurrent wrapper every recurrent network is built on.

:class:`RecurrentCore` wraps a one-layer GRU or LSTM behind a flat state tensor ``[N, state_dim]``
so the engine can keep, reset and store the policy state without knowing which cell made it: a
GRU's state is its ``h`` (``state_dim = size``), an LSTM's is ``h`` and ``c`` concatenated
(``state_dim = 2 * size``). The all-zeros row is the state an episode starts in.

``sequence`` replays a rollout chunk with episode starts inside it and gives the same numbers as
a loop of ``step``. With few episode starts it runs the multi-step kernel over every stretch of
time steps in which no row starts an episode; with many it cuts each row into its episode
pieces and runs them all side by side in one packed call.

:class:`RecurrentMemory` is the wrapper: a trunk (hidden layers, possibly none) and a core in one
of three layouts, named by what the trunk reads (``trunk_reads``, the one key of the layout, in
``[team.params]`` as on the module), each giving ``features`` for whatever comes after it:

* ``"obs"``: ``features = core(trunk(x))``, the trunk reads the observation;
* ``"core"`` (sb3-contrib's order): ``features = trunk(core(x))``;
* ``"core+obs"``: ``features = trunk([core(x), x])``, the input beside the core's output (with no
  trunk, ``[core(x), x]`` is the features: the off-policy learners' layout).

Weight sync (wheeler2/sync/) copies a trunk only into a trunk that reads the same thing: the
module's ``trunk_reads`` (``"obs"`` for a network without memory) is that rule's one input.

Its sub-modules are ``trunk`` and ``core`` under those names, so a network that *is* a
:class:`RecurrentMemory` (subclasses it) keeps the state_dict keys ``trunk.*`` and ``core.*``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from wheeler2.agents.parts.encoders import activation, ortho_init_

CORE_KINDS = ("gru", "lstm")
# What a trunk reads: the observation, the core's output, or both side by side.
TRUNK_READS = ("obs", "core", "core+obs")
MAX_STRETCHES = 6  # sequence(): beyond this many reset times, one packed call instead


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
        if starts.shape != x.shape[:2]:
            want = tuple(x.shape[:2])
            raise ValueError(f"starts has shape {tuple(starts.shape)}, expected {want}")
        starts = starts.to(device=x.device, dtype=torch.bool)
        # Time steps where some row resets split the chunk into stretches, each one call of the
        # multi-step kernel. Past a few stretches one packed call over the episode pieces is
        # cheaper (measured on CPU for 8 x 32 steps, LSTM 64: ~4 ms per stretch, ~35 ms packed).
        cuts = torch.nonzero(starts.any(dim=1)).flatten().tolist()
        if len(cuts) > MAX_STRETCHES:
            return self._segments(x, state0, starts)
        if not cuts or cuts[0] != 0:
            cuts = [0, *cuts]
        cuts.append(x.shape[0])
        state, outs = state0, []
        for a, b in zip(cuts[:-1], cuts[1:]):
            state = state * (~starts[a]).to(state.dtype).unsqueeze(1)
            y, hidden = self.rnn(x[a:b], self._unpack(state))
            outs.append(y)
            state = self._pack(hidden)
        return torch.cat(outs, dim=0), state

    def _segments(
        self, x: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cut every row at its episode starts, run all the pieces side by side in one packed
        call (each from state0's row or from zeros), and put the outputs back in place.

        One call instead of one per stretch between resets: with 8 CartPole copies some copy
        starts an episode almost every step early in training, and a loop over stretches then
        degenerates into a loop over steps.
        """
        t_len, n = starts.shape
        dev = x.device
        first = starts.clone()
        first[0] = True  # every row's first piece, which starts from state0 unless flagged
        # Piece number of each (t, n), numbered row by row: row n's pieces are contiguous.
        flat = first.t().reshape(-1)  # [N * T], row-major over rows
        piece = torch.cumsum(flat.long(), 0) - 1
        count = int(piece[-1]) + 1
        begin = torch.nonzero(flat).flatten()  # the flat index where each piece begins
        pos = torch.arange(n * t_len, device=dev) - begin[piece]
        lengths = torch.bincount(piece, minlength=count)
        longest = int(lengths.max())
        padded = x.new_zeros(longest, count, x.shape[-1])
        xs = x.transpose(0, 1).reshape(n * t_len, -1)
        padded = padded.index_put((pos, piece), xs)
        # Initial state of each piece: zeros, except a row's first piece where no start is set.
        init = state0.new_zeros(count, self.state_dim)
        row_first = begin // t_len  # the row each piece belongs to
        carried = (begin % t_len == 0) & ~starts[0, row_first]
        init = torch.where(carried.unsqueeze(1), state0[row_first], init)
        packed = nn.utils.rnn.pack_padded_sequence(padded, lengths.cpu(), enforce_sorted=False)
        out, hidden = self.rnn(packed, self._unpack(init))
        out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=longest)
        y = out[pos, piece].reshape(n, t_len, -1).transpose(0, 1)
        # The state after the chunk: that of each row's last piece.
        last = piece.reshape(n, t_len)[:, -1]
        return y, self._pack(hidden)[last]


def mlp_trunk(in_dim: int, hidden: Sequence[int], act: str, ortho: bool) -> nn.Sequential:
    """[Linear, act] * len(hidden), the layers of ``encoders.MLP``'s trunk (so role sync
    matches them by name and shape); orthogonal with gain sqrt(2) where ``ortho``."""
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_dim, h), activation(act)()]
        in_dim = h
    trunk = nn.Sequential(*layers)
    if ortho:
        ortho_init_(trunk, math.sqrt(2))
    return trunk


class RecurrentMemory(nn.Module):
    """``features, state' = memory(x, state)``: a trunk and a :class:`RecurrentCore` in one of the
    layouts of the module docstring.

    ``in_dim``: width of ``x`` (the observation). ``hidden``: the trunk's layer widths (empty: no
    trunk, ``trunk`` is an empty ``nn.Sequential`` with no tensors). ``kind``/``size``: the core.
    ``trunk_reads``: the layout (module docstring); without a trunk, what comes after the memory
    reads it. Built in layout order (trunk then core, or core then trunk), so a seeded build
    draws its initial weights in that order.

    ``state_dim`` is the core's; ``features_dim`` the width of ``features``.
    """

    def __init__(
        self,
        in_dim: int,
        kind: str,
        size: int,
        hidden: Sequence[int] = (),
        act: str = "tanh",
        ortho: bool = False,
        trunk_reads: str = "obs",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if trunk_reads not in TRUNK_READS:
            raise ValueError(f"trunk_reads must be one of {TRUNK_READS}, got {trunk_reads!r}")
        hidden = list(hidden)
        # Image observations: an encoder (encoders.ImageEncoder) before everything, so that
        # core and trunk read its features, not the pixels. A module of its own (sync role
        # "encoder"); None keeps the layout and the state_dict keys of flat observations.
        self.encoder = encoder
        if encoder is not None:
            in_dim = int(encoder.out_dim)
        # Without a trunk the core reads the observation whatever the key says.
        self.trunk_reads = "core" if trunk_reads == "obs" and not hidden else trunk_reads
        self.skip = self.trunk_reads == "core+obs"
        core_out = size + in_dim if self.skip else size
        self._trunk_first = self.trunk_reads == "obs"
        if self._trunk_first:
            self.trunk = mlp_trunk(in_dim, hidden, act, ortho)
            self.core = RecurrentCore(kind, hidden[-1], size)
            self.features_dim = size
        else:
            self.core = RecurrentCore(kind, in_dim, size)
            self.trunk = mlp_trunk(core_out, hidden, act, ortho)
            self.features_dim = hidden[-1] if hidden else core_out

    @property
    def state_dim(self) -> int:
        return self.core.state_dim

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        return self.core.initial_state(n, device)

    def _after(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.skip:
            y = torch.cat([y, x], -1)
        return self.trunk(y)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [N, in_dim]``, ``state [N, state_dim]`` -> (features ``[N, features_dim]``,
        next state)."""
        if self.encoder is not None:
            x = self.encoder(x)
        if self._trunk_first:
            return self.core.step(self.trunk(x), state)
        y, state = self.core.step(x, state)
        return self._after(y, x), state

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, N, in_dim]`` replayed from ``state0 [N, state_dim]`` -> (features
        ``[T, N, features_dim]``, state after the last step); ``starts`` as in
        :meth:`RecurrentCore.sequence`."""
        if self.encoder is not None:
            x = self.encoder(x)
        if self._trunk_first:
            return self.core.sequence(self.trunk(x), state0, starts)
        y, state = self.core.sequence(x, state0, starts)
        return self._after(y, x), state
