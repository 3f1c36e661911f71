"""Recurrent cores for policies that see only part of the state (issue 15).

A :class:`RecurrentCore` wraps a one-layer GRU or LSTM behind a flat state tensor ``[N, state_dim]``
so the engine can keep, reset and store the policy state without knowing which cell made it: a
GRU's state is its ``h`` (``state_dim = size``), an LSTM's is ``h`` and ``c`` concatenated
(``state_dim = 2 * size``). The all-zeros row is the state an episode starts in.

``sequence`` replays a rollout chunk with episode starts inside it and gives the same numbers as
a loop of ``step``. With few episode starts it runs the multi-step kernel over every stretch of
time steps in which no row starts an episode; with many it cuts each row into its episode
pieces and runs them all side by side in one packed call.

:class:`RecurrentActor` and :class:`RecurrentCritic` put a core between a feedforward trunk and
the last layer, for the on-policy agents (``core = "gru" | "lstm"`` in PPO's params).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.nets import activation, evaluate_outputs, ortho_init_, sample_outputs

CORE_KINDS = ("gru", "lstm")
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


class _RecurrentBody(nn.Module):
    """``trunk`` and ``core`` in either order: trunk then core (the default), or core then
    trunk (``core_first``, sb3-contrib's order: its LSTM reads the observation and its
    ``net_arch`` layers come after). ``features_dim`` is what the last layer reads."""

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int],
        act: str,
        kind: str,
        size: int,
        ortho: bool,
        core_first: bool,
    ) -> None:
        super().__init__()
        self.core_first = core_first
        if core_first:
            self.core = RecurrentCore(kind, obs_dim, size)
            self.trunk = _trunk(size, hidden, act, ortho)
            self.features_dim = hidden[-1] if hidden else size
        else:
            self.trunk = _trunk(obs_dim, hidden, act, ortho)
            self.core = RecurrentCore(kind, hidden[-1] if hidden else obs_dim, size)
            self.features_dim = size

    @property
    def state_dim(self) -> int:
        return self.core.state_dim

    def features_step(
        self, obs: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.core_first:
            y, state = self.core.step(obs, state)
            return self.trunk(y), state
        return self.core.step(self.trunk(obs), state)

    def features_sequence(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.core_first:
            y, state = self.core.sequence(obs, state0, starts)
            return self.trunk(y), state
        return self.core.sequence(self.trunk(obs), state0, starts)


class RecurrentActor(_RecurrentBody):
    """A stochastic policy with memory: ``head(core(trunk(obs), state))``.

    The trunk sees the observation alone, so it has the shape of a feedforward actor's trunk
    and syncs from one by role (``sync_roles``); the core is outside every role, so an
    explorer keeps its own core when its learner has none, and two recurrent actors sync it by
    name. With ``core_first`` the trunk reads the core's output instead (it then syncs only
    from an actor of the same layout, e.g. a recurrent DDPG / TD3 / SAC actor with
    ``core_skip = false``, whose core it takes too, or is kept). ``forward`` is not defined: a
    recurrent policy needs its state (:meth:`step`, :meth:`sequence`). Outputs are logits
    (discrete) or the Gaussian mean (continuous, with a state-independent ``log_std``).
    """

    sync_roles = {"trunk": "trunk", "head": "head"}

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: bool,
        hidden: Sequence[int],
        act: str,
        kind: str,
        size: int,
        log_std_init: float = 0.0,
        ortho: bool = True,
        core_first: bool = False,
    ) -> None:
        super().__init__(obs_dim, hidden, act, kind, size, ortho, core_first)
        # What the trunk reads, for wheeler2/sync.py: it syncs only from a trunk reading the same.
        self.sync_trunk_reads = "core" if core_first else "obs"
        self.discrete = discrete
        self.sync_actions = "discrete" if discrete else "continuous"
        self.head = nn.Linear(self.features_dim, act_dim)
        if ortho:
            # A small last layer starts the policy near uniform / near zero mean.
            ortho_init_(self.head, 0.01)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [N, obs_dim]`` -> (logits or mean ``[N, act_dim]``, next state)."""
        y, state = self.features_step(obs, state)
        return self.head(y), state

    def sequence(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [T, N, obs_dim]`` replayed from ``state0`` -> (outputs ``[T, N, act_dim]``,
        state after the last step); ``starts`` as in :meth:`RecurrentCore.sequence`."""
        y, state = self.features_sequence(obs, state0, starts)
        return self.head(y), state

    def sample(
        self, out: torch.Tensor, explore: bool, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(env action, raw sample, log-prob of the raw sample) from the outputs ``out``."""
        return sample_outputs(out, None if self.discrete else self.log_std, explore, generator)

    def evaluate(self, out: torch.Tensor, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(raw) and the entropy under the outputs ``out`` (any leading shape)."""
        return evaluate_outputs(out, None if self.discrete else self.log_std, raw)


class RecurrentCritic(_RecurrentBody):
    """V with memory: ``head(core(trunk(obs), state))`` (or trunk after core) -> ``[...]``."""

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int],
        act: str,
        kind: str,
        size: int,
        ortho: bool,
        core_first: bool = False,
    ) -> None:
        super().__init__(obs_dim, hidden, act, kind, size, ortho, core_first)
        self.head = nn.Linear(self.features_dim, 1)
        if ortho:
            ortho_init_(self.head, 1.0)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, state = self.features_step(obs, state)
        return self.head(y).squeeze(-1), state

    def sequence(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, state = self.features_sequence(obs, state0, starts)
        return self.head(y).squeeze(-1), state


def _trunk(in_dim: int, hidden: Sequence[int], act: str, ortho: bool) -> nn.Sequential:
    # The same layers as agents.nets.MLP's trunk, so role sync matches them by name and shape.
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_dim, h), activation(act)()]
        in_dim = h
    trunk = nn.Sequential(*layers)
    if ortho:
        ortho_init_(trunk, math.sqrt(2))
    return trunk


def on_policy_nets(space: Any, p: Any) -> tuple[nn.Module, nn.Module]:
    """PPO's and A2C's (policy, critic) from their params: feedforward for ``core = "none"``,
    else a :class:`RecurrentActor` and, with ``critic_core``, a :class:`RecurrentCritic`.
    Built in that order, so a seeded feedforward pair is what it was before cores existed."""
    from agents.nets import VCritic, build_actor

    if p.core == "none":
        policy: nn.Module = build_actor(
            space.obs_dim,
            space.act_dim,
            space.discrete,
            p.hidden,
            p.activation,
            p.log_std_init,
            p.ortho_init,
        )
    else:
        policy = RecurrentActor(
            space.obs_dim,
            space.act_dim,
            space.discrete,
            p.hidden,
            p.activation,
            p.core,
            p.core_size,
            p.log_std_init,
            p.ortho_init,
            p.core_first,
        )
    if p.core != "none" and p.critic_core:
        critic: nn.Module = RecurrentCritic(
            space.obs_dim, p.hidden, p.activation, p.core, p.core_size, p.ortho_init, p.core_first
        )
    else:
        critic = VCritic(space.obs_dim, p.hidden, p.activation, p.ortho_init)
    return policy, critic


class RecurrentOnPolicy:
    """Acting and rollout bookkeeping shared by the recurrent on-policy agents (PPO, A2C).

    The agent sets ``policy`` (a :class:`RecurrentActor`), ``critic`` (a
    :class:`RecurrentCritic` or a feedforward V), ``device``, ``gen`` and ``space``; then
    :meth:`set_state_dims` gives it its policy state: the actor core's, then the critic core's.
    """

    policy: Any
    critic: Any
    device: torch.device
    gen: torch.Generator
    space: Any

    def set_state_dims(self) -> None:
        recurrent = isinstance(self.policy, RecurrentActor)
        self.actor_state_dim = self.policy.state_dim if recurrent else 0
        critic = self.critic.state_dim if isinstance(self.critic, RecurrentCritic) else 0
        self.state_dim = self.actor_state_dim + critic

    def split_state(self, state: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's state rows as (actor part, critic part); None: every row starts."""
        if state is None:
            s = torch.zeros(n, self.state_dim, device=self.device)
        else:
            s = torch.as_tensor(state, dtype=torch.float32, device=self.device)
        return s[:, : self.actor_state_dim], s[:, self.actor_state_dim :]

    def value_step(
        self, x: torch.Tensor, critic_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(self.critic, RecurrentCritic):
            return self.critic.step(x, critic_state)
        return self.critic(x), critic_state

    def act_recurrent(self, x: torch.Tensor, explore: bool, state: Any) -> Any:
        """``ActOut`` for the (already normalized) observations ``x`` in ``state``."""
        from wheeler2.agent import ActOut

        with torch.inference_mode():
            sa, sc = self.split_state(state, len(x))
            out, sa = self.policy.step(x, sa)
            action, raw, logp = self.policy.sample(out, explore, self.gen)
            value, sc = self.value_step(x, sc)
            nxt = torch.cat([sa, sc], dim=1)
        extras = {"value": value.cpu().numpy()}
        if not self.space.discrete:
            extras["raw_action"] = raw.cpu().numpy()
        return ActOut(
            action=action.cpu().numpy(),
            logp=logp.cpu().numpy(),
            extras=extras,
            state=nxt.cpu().numpy(),
        )

    def step_columns(
        self,
        step: Any,
        obs: torch.Tensor,
        next_obs: torch.Tensor,
        action: torch.Tensor,
        last: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """For one stored step: the behaviour log-prob, V(s_t) as seen while acting, and
        V(s'_t) in the state after the step where it is needed (a truncation, or ``last``,
        the rollout's last step), else None. ``obs`` / ``next_obs`` as the policy sees them."""
        if step.state is None or step.act_out.state is None:
            raise ValueError(
                "a recurrent policy needs the policy state: Transitions.state (the state obs "
                "was seen in) and ActOut.state; the engine passes both to agents with "
                "state_dim > 0"
            )
        n, dev = len(obs), self.device
        sa, sc = self.split_state(step.state, n)
        after_c = self.split_state(step.act_out.state, n)[1]
        with torch.no_grad():
            if step.act_out.logp is not None:
                logp = torch.as_tensor(step.act_out.logp, device=dev)
            else:  # actions not drawn by act(explore=True): score them in the state they had
                logp = self.policy.evaluate(self.policy.step(obs, sa)[0], action)[0]
            value = step.act_out.extras.get("value")
            if value is None:
                value_t = self.value_step(obs, sc)[0]
            else:
                value_t = torch.as_tensor(value, dtype=torch.float32, device=dev)
            next_value = None
            if last or bool(np.any(step.truncated)):
                next_value = self.value_step(next_obs, after_c)[0]
        return logp, value_t, next_value


def next_values_seen(
    values: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor, terminated: torch.Tensor
) -> torch.Tensor:
    """V(s'_t) over a [T, N] rollout from the values computed while acting: inside an episode
    the next step's value; at a truncation and at the last step ``next_value`` (V of the final
    observation in the state after the step). Terminated steps are cut by the return."""
    following = torch.cat([values[1:], next_value[-1:]], dim=0)
    truncated = done.bool() & ~terminated.bool()
    return torch.where(truncated, next_value, following)
