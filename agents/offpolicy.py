"""The gradient steps DDPG and TD3 share (deterministic actor, per-head critics, Polyak targets).

A mixin: the agent sets ``params`` (``max_grad_norm``, ``tau``), ``critic_opt`` / ``actor_opt``,
the flat ``critic_params`` / ``actor_params`` / ``online_params`` / ``target_params`` lists,
``head_names``, ``updates`` and ``last_actor_loss``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agents.nets import polyak_


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
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self.params.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.critic_params, self.params.max_grad_norm)
        self.critic_opt.step()
        self.updates += 1

    def _actor_step(self, actor_loss: torch.Tensor) -> None:
        """The (delayed) actor step and the target updates that go with it."""
        # Gradients for the actor only: the critic's weight gradients would be thrown away.
        grads = torch.autograd.grad(actor_loss, self.actor_params)
        for param, g in zip(self.actor_params, grads):
            param.grad = g
        if self.params.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.actor_params, self.params.max_grad_norm)
        self.actor_opt.step()
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
