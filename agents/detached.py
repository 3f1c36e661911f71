"""The actor of a detached per-head explorer: trained against one reward head's critic only.

A DDPG member with ``head = "<name>"`` (role ``explorer``) acts with its own deterministic actor
plus the usual exploration noise, pulls its table learner's critic by weight sync (the critic of
every head: the learner trains them, this member never does) and trains its own actor on the
deterministic policy gradient of that one head,

    L_actor = - mean_i Q_h(s_i, mu(s_i)),        s_i drawn from its own last ``head_states``
                                                 observations,

while the learner's actor, the one evaluation runs, keeps maximizing the weighted sum of every
head. The original Wheeler's "one common target actor, one explorer per sub-task".

The states are its own recent observations, not batches of the central replay: the DPG gradient
needs states only, the states this actor visits are the ones whose actions it should improve,
and sampling the replay would spend the learner's ratio-gate credit and disturb its priorities.
The critic it climbs values the learner's actor after the first step (its targets bootstrap with
the learner's target actor), so mu is a one-step improvement of the common policy on head h:
it explores where head h would take the team, and its transitions reach the learner through the
central buffer like any member's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from wheeler2.agents.offpolicy import actor_step

from wheeler2.checkpoint import generator_state, set_generator_state

__all__ = ["HeadActorTrainer", "head_problem"]


def head_problem(
    head: str, role: str, heads: Sequence[str], syncs: bool, normalize_obs: bool
) -> tuple[str, str] | None:
    """(key, what is wrong) when a member with ``head`` cannot run as configured; None if it
    can. An empty ``head`` is the ordinary member and always fine."""
    if not head:
        return None
    if role == "learner":
        return (
            "head",
            f"head = {head!r} binds an explorer to one reward head; a learner trains the common "
            f"actor on every head. Put head on a ddpg explorer and leave it out of the learner",
        )
    if role != "explorer":
        return (
            "head",
            f'a detached explorer (head = {head!r}) trains its own actor; role = "{role}" never '
            f'learns: use role = "explorer"',
        )
    if head not in heads:
        return (
            "head",
            f"no reward head {head!r}; the task's heads are: {', '.join(heads)}",
        )
    if not syncs:
        return (
            "sync",
            f"a detached explorer (head = {head!r}) pulls that head's critic from the learner: "
            f"set sync = {{ every = ... }} (how many of its own steps between pulls)",
        )
    if normalize_obs:
        return (
            "normalize_obs",
            f"a detached explorer (head = {head!r}) uses the learner's critic, whose input "
            f"statistics are not synced: leave normalize_obs false on this member",
        )
    return None


class HeadActorTrainer:
    """Takes DPG steps on ``actor`` against column ``head`` of ``critic``, which it never trains.

    ``observe`` keeps the last ``window`` observations; ``train(n)`` takes ``per_step * n``
    updates (fractions carry over) on batches of ``batch`` of them, with ``optimizer`` (the
    agent's own actor optimizer, so a checkpoint keeps its moments).
    """

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        head: int,
        optimizer: torch.optim.Optimizer,
        obs_dim: int,
        window: int,
        batch: int,
        per_step: float,
        max_grad_norm: float,
        seed: int,
        device: torch.device,
    ) -> None:
        self.actor = actor
        self.critic = critic
        self.head = head
        self.optimizer = optimizer
        self.params = list(actor.parameters())
        self.batch = batch
        self.per_step = per_step
        self.max_grad_norm = max_grad_norm
        self.device = device
        self.states = np.zeros((window, obs_dim), np.float32)
        self.size = 0
        self.next = 0
        self.credit = 0.0
        self.updates = 0
        self.rng = np.random.default_rng(seed)
        # The pulled critic is only read: no gradients for its weights, only through its input.
        critic.requires_grad_(False)
        # With one net per head only head h's net is run; a shared trunk computes every head.
        nets = getattr(critic, "nets", None)
        self._net = nets[head] if nets is not None and len(nets) > 1 else None

    @classmethod
    def of(
        cls,
        params: Any,
        space: Any,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: torch.optim.Optimizer,
        seed: int,
        device: torch.device,
    ) -> HeadActorTrainer | None:
        """The trainer of a member whose ``params.head`` names a reward head of ``space``
        (None for an ordinary member), with its ``head_*`` settings."""
        p = params
        if not p.head:
            return None
        if p.head not in space.heads:
            raise ValueError(f"head {p.head!r} is not one of the task's heads {space.heads}")
        return cls(
            actor,
            critic,
            space.heads.index(p.head),
            optimizer,
            space.obs_dim,
            window=p.head_states,
            batch=p.head_batch,
            per_step=p.head_updates,
            max_grad_norm=p.max_grad_norm,
            seed=seed,
            device=device,
        )

    def observe(self, obs: np.ndarray) -> None:
        """Remember the rows of one vector step (the oldest go once the window is full)."""
        rows = np.asarray(obs, np.float32)[-len(self.states) :]
        idx = (self.next + np.arange(len(rows))) % len(self.states)
        self.states[idx] = rows
        self.next = int((self.next + len(rows)) % len(self.states))
        self.size = min(len(self.states), self.size + len(rows))

    def state_dict(self) -> dict[str, Any]:
        """Its window of observations, counters and generator (the optimizer is the agent's)."""
        return {
            "states": torch.from_numpy(self.states.copy()),
            "size": self.size,
            "next": self.next,
            "credit": self.credit,
            "updates": self.updates,
            "rng": generator_state(self.rng),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.states[...] = state["states"].numpy()
        self.size, self.next = int(state["size"]), int(state["next"])
        self.credit, self.updates = float(state["credit"]), int(state["updates"])
        set_generator_state(self.rng, state["rng"])

    def q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q_head(s, a) of the pulled critic, [B]."""
        if self._net is not None:
            return self._net(torch.cat([obs, action], dim=-1)).squeeze(-1)
        return self.critic(obs, action)[:, self.head]

    def train(self, env_steps: int) -> dict[str, float] | None:
        """The updates ``env_steps`` new steps earn; their mean loss, or None when none ran."""
        if self.size == 0:
            return None
        self.credit += self.per_step * env_steps
        losses = []
        while self.credit >= 1.0:
            self.credit -= 1.0
            losses.append(self.step())
        if not losses:
            return None
        loss = float(torch.stack(losses).mean())
        return {"head_actor_loss": loss, "head_q": -loss}

    def step(self) -> torch.Tensor:
        """One DPG step: mu <- mu + lr * grad_mu mean Q_h(s, mu(s)) (Adam's step, in fact)."""
        idx = self.rng.integers(0, self.size, self.batch)
        obs = torch.as_tensor(self.states[idx], device=self.device)
        loss = -self.q(obs, self.actor(obs)).mean()
        actor_step(loss, self.optimizer, self.params, self.max_grad_norm)
        self.updates += 1
        return loss.detach()
