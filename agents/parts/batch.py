"""The batch view: each off-policy loss is written once, for a batch of transitions and for a
batch of replayed sequences.

A loss reads a network's input at s with ``v.read(net)`` and at s' with ``v.read_next(net)``,
forms its target with ``v.target(next_value)`` (``r + discount * value(s')``) and reduces with
``v.head_losses`` / ``v.loss`` / ``v.mean``. :class:`StepView` (B transitions) gives the
normalized observations and plain means over the batch. :class:`SequenceView` (B sequences of
T steps, R2D2) runs each network's recurrent core along the sequence from the stored policy
state, with the burn-in cut (:func:`unroll`), takes each position's bootstrap from where the
n-step window ended (``boot``) and averages over the trained positions (``mask``), each row
weighted by its sequence's importance weight. Shapes: a transition value ``[B, ...]`` is
``[T, B, ...]`` in a sequence view; a leading axis (a twin pair) may come before either.

With action masks, ``v.next_legal(act_dim)`` gives the legal actions at each sample's s' (its
bootstrap observation), read from the mask columns, which normalization leaves raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from wheeler2.agents.parts.masks import legal_actions

from wheeler2.agent import Batch, SequenceBatch
from wheeler2.needs import sequence_priority


@dataclass
class StepView:
    """A :class:`Batch` of B transitions, normalized: every row is a sample of the loss."""

    obs: torch.Tensor  # [B, D]
    action: torch.Tensor  # [B, A] or [B] long
    reward: torch.Tensor  # [B, H]
    next_obs: torch.Tensor  # [B, D]
    discount: torch.Tensor  # [B]
    weight: torch.Tensor  # [B] importance weights

    @classmethod
    def of(cls, batch: Batch, norm: Any) -> StepView:
        obs, next_obs = norm.normalize(batch.obs), norm.normalize(batch.next_obs)
        return cls(obs, batch.action, batch.reward, next_obs, batch.discount, batch.weight)

    def read(self, net: Any) -> torch.Tensor:
        """The input of ``net``'s layers at s: the observation."""
        return self.obs

    def read_next(self, net: Any) -> torch.Tensor:
        """The input of ``net``'s layers at s'."""
        return self.next_obs

    def boot(self, values: torch.Tensor) -> torch.Tensor:
        """Values at s' per sample (a sequence view picks each position's bootstrap)."""
        return values

    def next_legal(self, act_dim: int) -> torch.Tensor:
        """``[B, act_dim]`` bool: the legal actions at s' (masked spaces)."""
        return legal_actions(self.next_obs, act_dim)

    def target(self, next_value: torch.Tensor) -> torch.Tensor:
        """y = r + discount * V(s') per sample and head."""
        return self.reward + self.discount.unsqueeze(-1) * self.boot(next_value)

    def head_losses(self, sq: torch.Tensor) -> torch.Tensor:
        """Importance-weighted mean over the samples of ``sq [..., B, H]`` -> [H], summed over
        a leading (twin) axis."""
        per = (self.weight.unsqueeze(-1) * sq).mean(-2)
        return per if per.dim() == 1 else per.sum(0)

    def loss(self, per_sample: torch.Tensor) -> torch.Tensor:
        """Importance-weighted mean of ``per_sample [B]``."""
        return (self.weight * per_sample).mean()

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values [B]`` over the samples."""
        return values.mean()

    def trained(self, values: torch.Tensor) -> torch.Tensor:
        """The rows of ``values [B, ...]`` that enter the loss (all)."""
        return values

    def priority(self, abs_td: torch.Tensor) -> np.ndarray:
        """New priorities from each sample's ``abs_td [B]`` (detached here, as the sequence
        view does, so one ``update`` serves both views)."""
        return abs_td.detach().cpu().numpy()


def unroll(
    core: Any, x: torch.Tensor, state0: torch.Tensor, burn_in: int, has_burn: torch.Tensor
) -> torch.Tensor:
    """Outputs ``[T, B, F]`` of ``core`` (a ``RecurrentCore`` or a ``RecurrentMemory``: anything
    with ``sequence``) over ``x [T, B, in]`` from ``state0 [B, S]``; rows with ``has_burn [B]``
    get no gradient through their first ``burn_in`` steps."""
    t_len, b = x.shape[:2]
    none = torch.zeros(t_len, b, dtype=torch.bool, device=x.device)
    if burn_in <= 0 or burn_in >= t_len:
        return core.sequence(x, state0, none)[0]
    head, state = core.sequence(x[:burn_in], state0, none[:burn_in])
    state = torch.where(has_burn.unsqueeze(1), state.detach(), state)
    tail, _ = core.sequence(x[burn_in:], state, none[burn_in:])
    return torch.cat([head, tail])


@dataclass
class SequenceView:
    """A :class:`SequenceBatch` time-major (``[T, B, ...]``), normalized, with its loss mask.

    Position t of row b is a sample of the loss where ``mask`` is 1; ``w`` is that mask times
    the row's importance weight, and ``count`` the number of trained positions. A network with
    a core (``agents/recurrent.py``) reads its slice ``net.state_at`` of the stored state."""

    x: torch.Tensor  # [T, B, D] observations
    nxt: torch.Tensor  # [T + n - 1, B, D] next observations
    action: torch.Tensor  # [T, B, A] or [T, B] long
    reward: torch.Tensor  # [T, B, H]
    discount: torch.Tensor  # [T, B]
    boot_at: torch.Tensor  # [T, B] long: the next_obs position each target bootstraps from
    mask: torch.Tensor  # [T, B] float
    w: torch.Tensor  # [T, B]
    count: torch.Tensor  # scalar
    has_burn: torch.Tensor  # [B] bool
    state: torch.Tensor  # [B, state_dim] stored with each first step
    mask_np: np.ndarray  # [B, T] bool, for the priorities
    burn_in: int = 0
    eta: float = 0.9  # sequence priority: eta max|td| + (1 - eta) mean|td|

    @classmethod
    def of(
        cls, batch: Any, norm: Any, state_dim: int, algo: str, burn_in: int = 0, eta: float = 0.9
    ) -> SequenceView:
        if not isinstance(batch, SequenceBatch):
            raise TypeError(
                f"a recurrent {algo} learns from sequences (the buffer's sequence mode)"
            )
        assert batch.mask is not None and batch.boot is not None and batch.burn is not None
        x = norm.normalize(batch.obs).transpose(0, 1)
        mask = batch.mask.transpose(0, 1).to(x.dtype)
        state = batch.state
        if state is None:  # a buffer without the column: every sequence from the initial state
            state = torch.zeros(x.shape[1], state_dim, device=x.device)
        return cls(
            x=x,
            nxt=norm.normalize(batch.next_obs).transpose(0, 1),
            action=batch.action.transpose(0, 1),
            reward=batch.reward.transpose(0, 1),
            discount=batch.discount.transpose(0, 1),
            boot_at=batch.boot.transpose(0, 1),
            mask=mask,
            w=batch.weight.unsqueeze(0) * mask,
            count=mask.sum().clamp(min=1.0),
            has_burn=batch.burn > 0,
            state=state,
            mask_np=batch.mask.cpu().numpy(),
            burn_in=burn_in,
            eta=eta,
        )

    def state_of(self, net: Any) -> torch.Tensor:
        lo, hi = net.state_at
        return self.state[:, lo:hi]

    def read(self, net: Any) -> torch.Tensor:
        """``net``'s features along the sequence (a ``RecurrentNet``: its core's outputs beside the
        observations), the core unrolled from the stored state with the burn-in cut."""
        return unroll(net, self.x, self.state_of(net), self.burn_in, self.has_burn)

    def read_next(self, net: Any) -> torch.Tensor:
        """``net``'s features at the next observations ``[T + n - 1, B, F]``, without gradient.

        s' of position t is o_{t+1} along the episode: the core reads o_0 and then the next
        observations, so its output k + 1 is the features of ``nxt[k]``."""
        with torch.no_grad():
            seq = torch.cat([self.x[:1], self.nxt])
            none = torch.zeros(seq.shape[:2], dtype=torch.bool, device=seq.device)
            return net.sequence(seq, self.state_of(net), none)[0][1:]

    def boot(self, values: torch.Tensor) -> torch.Tensor:
        """``values [T + n - 1, B, K]`` at each position's bootstrap -> ``[T, B, K]``."""
        index = self.boot_at.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        return values.gather(0, index)

    def next_legal(self, act_dim: int) -> torch.Tensor:
        """``[T, B, act_dim]`` bool: the legal actions at each position's bootstrap s'."""
        return self.boot(legal_actions(self.nxt, act_dim))

    def target(self, next_value: torch.Tensor) -> torch.Tensor:
        """y = r + discount * V(s') per position and head, from ``next_value [T + n - 1, B, H]``."""
        return self.reward + self.discount.unsqueeze(-1) * self.boot(next_value)

    def head_losses(self, sq: torch.Tensor) -> torch.Tensor:
        """Importance-weighted mean over the trained positions of ``sq [..., T, B, H]`` -> [H],
        summed over any leading (twin) axis."""
        per = (self.w.unsqueeze(-1) * sq).sum((-3, -2))
        return per.reshape(-1, per.shape[-1]).sum(0) / self.count

    def loss(self, per_position: torch.Tensor) -> torch.Tensor:
        """Importance-weighted mean of ``per_position [T, B]`` over the trained positions."""
        return (self.w * per_position).sum() / self.count

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values [T, B]`` over the trained positions (padding never counts)."""
        return (values * self.mask).sum() / self.count

    def trained(self, values: torch.Tensor) -> torch.Tensor:
        """The positions of ``values [T, B, ...]`` that enter the loss, ``[N, ...]``."""
        return values[self.mask > 0]

    def priority(self, abs_td: torch.Tensor) -> np.ndarray:
        """One priority per sequence from ``abs_td [T, B]`` (``sequence_priority``)."""
        return sequence_priority(
            abs_td.detach().transpose(0, 1).cpu().numpy(), self.mask_np, self.eta
        )
