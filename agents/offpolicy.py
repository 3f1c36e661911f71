"""The gradient steps of the off-policy actor-critics: :func:`loss_step` and :func:`actor_step`
(DDPG, TD3 and SAC), and the mixin DDPG and TD3 share (deterministic actor, per-head critics,
Polyak targets).

A mixin: the agent sets ``params`` (``max_grad_norm``, ``tau``), ``critic_opt`` / ``actor_opt``,
the flat ``critic_params`` / ``actor_params`` / ``online_params`` / ``target_params`` lists,
``head_names``, ``updates`` and ``last_actor_loss``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agents.nets import polyak_


def loss_step(
    loss: torch.Tensor, opt: torch.optim.Optimizer, params: list[torch.Tensor], max_norm: float
) -> None:
    """One optimizer step on ``loss`` (gradients clipped to ``max_norm`` unless it is 0)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if max_norm > 0:
        nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()


def actor_step(
    loss: torch.Tensor, opt: torch.optim.Optimizer, params: list[torch.Tensor], max_norm: float
) -> None:
    """One step of an actor whose loss runs through a critic: gradients for the actor's
    ``params`` only, since the critic's weight gradients would be thrown away."""
    grads = torch.autograd.grad(loss, params)
    for param, g in zip(params, grads):
        param.grad = g
    if max_norm > 0:
        nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()


class ActorCriticSteps:
    params: Any
    critic_opt: torch.optim.Optimizer
    actor_opt: torch.optim.Optimizer
    critic_params: list[torch.Tensor]
    actor_params: list[torch.Tensor]
    online_params: list[torch.Tensor]
    target_params: list[torch.Tensor]
    head_names: tuple[str, ...]
    updates: int
    last_actor_loss: Any

    def _critic_step(self, critic_loss: torch.Tensor) -> None:
        loss_step(critic_loss, self.critic_opt, self.critic_params, self.params.max_grad_norm)
        self.updates += 1

    def _actor_step(self, actor_loss: torch.Tensor) -> None:
        """The (delayed) actor step and the target updates that go with it."""
        actor_step(actor_loss, self.actor_opt, self.actor_params, self.params.max_grad_norm)
        polyak_(self.target_params, self.online_params, self.params.tau)
        self.last_actor_loss = actor_loss.detach()

    def _metrics(self, stats: list[float], head_losses: torch.Tensor) -> dict[str, float]:
        """The step's metrics from ``stats`` = [critic loss, mean Q] and each head's loss."""
        metrics = {
            "critic_loss": stats[0],
            "actor_loss": float(self.last_actor_loss),
            "q_mean": stats[1],
        }
        if len(self.head_names) > 1:
            for name, loss in zip(self.head_names, head_losses.detach().tolist()):
                metrics[f"critic_loss/{name}"] = loss
        return metrics
