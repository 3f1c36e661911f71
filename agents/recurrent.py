"""Recurrent actor and critic of the off-policy learners, trained on replayed sequences (issue 15).

Each network reads the observation history through its own :class:`RecurrentCore` (separate
cores for actor and critic, as in Ni et al. 2022, "Recurrent Model-Free RL Can Be a Strong
Baseline for Many POMDPs": a core shared by both is pulled two ways by their losses), and its
MLP sees the core's output beside the current observation. The agent's policy state is both
cores' states side by side, ``[actor | critic]``: acting advances both, so the replay stores,
at every step, the state each network needs to resume a sequence there.

Burn-in (R2D2): :func:`unroll` runs a core over a sequence from its stored state and cuts the
gradient at position ``burn_in`` of the rows that have a burn-in, so their first ``burn_in``
steps only rebuild the state; a row that starts its episode has none (its stored state, the
initial one, is exact) and is trained from position 0 with the gradient flowing throughout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from agents.cores import RecurrentCore
from agents.nets import DeterministicActor, TwinQCritic


def unroll(
    core: RecurrentCore,
    x: torch.Tensor,
    state0: torch.Tensor,
    burn_in: int,
    has_burn: torch.Tensor,
) -> torch.Tensor:
    """Outputs ``[T, B, size]`` of ``core`` over ``x [T, B, in]`` from ``state0 [B, S]``; rows
    with ``has_burn [B]`` get no gradient through their first ``burn_in`` steps."""
    t_len, b = x.shape[:2]
    none = torch.zeros(t_len, b, dtype=torch.bool, device=x.device)
    if burn_in <= 0 or burn_in >= t_len:
        return core.sequence(x, state0, none)[0]
    head, state = core.sequence(x[:burn_in], state0, none[:burn_in])
    state = torch.where(has_burn.unsqueeze(1), state.detach(), state)
    tail, _ = core.sequence(x[burn_in:], state, none[burn_in:])
    return torch.cat([head, tail])


class RecurrentActor(nn.Module):
    """mu(history) = tanh(mlp([core(o_1..o_t), o_t])), in [-1, 1]^act_dim."""

    sync_actions = "continuous"

    def __init__(self, kind: str, obs_dim: int, size: int, hidden: Sequence[int], act_dim: int):
        super().__init__()
        self.core = RecurrentCore(kind, obs_dim, size)
        self.mlp = DeterministicActor(size + obs_dim, hidden, act_dim, "relu")

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action [N, act_dim], next state) for one step of N copies."""
        y, state = self.core.step(obs, state)
        return self.mlp(torch.cat([y, obs], -1)), state

    def on(self, y: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Actions from core outputs ``y`` and observations (any leading shape)."""
        return self.mlp(torch.cat([y, obs], -1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions at the first step of an episode (from the initial state)."""
        return self.step(obs, self.core.initial_state(obs.shape[0], obs.device))[0]


class RecurrentTwinCritic(nn.Module):
    """Q1, Q2 (one output per reward head each) on ``[core(o_1..o_t), o_t]`` and the action; the
    pair shares one core, trained by both their losses."""

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int,
        mode: str,
    ):
        super().__init__()
        self.core = RecurrentCore(kind, obs_dim, size)
        self.twin = TwinQCritic(size + obs_dim, act_dim, hidden, num_heads, mode, "relu")

    def on(self, y: torch.Tensor, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[2, ..., H]`` from core outputs ``y``, observations and actions."""
        return self.twin(torch.cat([y, obs], -1), action)

    def q1_on(self, y: torch.Tensor, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.twin.q1(torch.cat([y, obs], -1), action)

    def _first(self, obs: torch.Tensor) -> torch.Tensor:
        return self.core.step(obs, self.core.initial_state(obs.shape[0], obs.device))[0]

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[2, N, H]`` at the first step of an episode (from the initial state)."""
        return self.on(self._first(obs), obs, action)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q1 at the first step of an episode (from the initial state)."""
        return self.q1_on(self._first(obs), obs, action)
