"""The gradient steps of the off-policy actor-critics: :func:`loss_step` and :func:`actor_step`
(DDPG, TD3 and SAC), and the mixin DDPG and TD3 share (deterministic actor, per-head critics,
Polyak targets).

A mixin: the agent sets ``params`` (``max_grad_norm``, ``tau``), ``critic_opt`` / ``actor_opt``,
the flat ``critic_params`` / ``actor_params`` / ``online_params`` / ``target_params`` lists,
``head_names``, ``updates`` and ``last_actor_loss``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agents.nets import polyak_


def adam_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()``, for a fused Adam with the defaults these agents use, as one call of its
    kernel. torch.optim's step spends about 0.13 ms a call on the bookkeeping around that
    kernel (hooks, grad-mode switches, regrouping the state by device): a DDPG step at batch
    256, hidden [256, 256] took 6.41 ms with it and 6.15 ms without (experiments/
    learner_ceiling.py, 2026-11-26); the update itself is the same, bit for bit
    (tests/test_offpolicy_steps.py). Any other optimizer or option, and the
    first step (which creates the state), go through ``opt.step()``."""
    if not isinstance(opt, torch.optim.Adam) or len(opt.param_groups) != 1:
        opt.step()
        return
    group = opt.param_groups[0]
    params = group["params"]
    options = ("amsgrad", "weight_decay", "maximize", "capturable", "differentiable")
    plain = not any(group[k] for k in (*options, "decoupled_weight_decay"))
    if not (
        plain
        and group["fused"]
        and isinstance(group["lr"], float)
        and all(p in opt.state and p.grad is not None for p in params)
    ):
        opt.step()
        return
    states = [opt.state[p] for p in params]
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    with torch.no_grad():
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=group["eps"],
            amsgrad=False,
            maximize=False,
        )


def loss_step(
    loss: torch.Tensor, opt: torch.optim.Optimizer, params: list[torch.Tensor], max_norm: float
) -> None:
    """One optimizer step on ``loss`` (gradients clipped to ``max_norm`` unless it is 0)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if max_norm > 0:
        nn.utils.clip_grad_norm_(params, max_norm)
    adam_step(opt)


def actor_step(
    loss: torch.Tensor, opt: torch.optim.Optimizer, params: list[torch.Tensor], max_norm: float
) -> None:
    """One step of an actor whose loss runs through a critic: gradients for the actor's
    ``params`` only, since the critic's weight gradients would be thrown away."""
    grads = torch.autograd.grad(loss, params)
    grads_step(grads, opt, params, max_norm)


def grads_step(
    grads: Sequence[torch.Tensor],
    opt: torch.optim.Optimizer,
    params: list[torch.Tensor],
    max_norm: float,
) -> None:
    """One optimizer step on gradients already taken (``grads[i]`` of ``params[i]``)."""
    for param, g in zip(params, grads):
        param.grad = g
    if max_norm > 0:
        nn.utils.clip_grad_norm_(params, max_norm)
    adam_step(opt)


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

    def _critic_step(
        self, critic_loss: torch.Tensor, grads: list[torch.Tensor] | None = None
    ) -> None:
        """The critic step on ``critic_loss``, or on its ``grads`` when they were taken."""
        if grads is None:
            loss_step(critic_loss, self.critic_opt, self.critic_params, self.params.max_grad_norm)
        else:
            grads_step(grads, self.critic_opt, self.critic_params, self.params.max_grad_norm)
        self.updates += 1

    def _actor_step(
        self, actor_loss: torch.Tensor, grads: list[torch.Tensor] | None = None
    ) -> None:
        """The (delayed) actor step (on ``grads`` when they were taken) and the target updates
        that go with it."""
        if grads is None:
            actor_step(actor_loss, self.actor_opt, self.actor_params, self.params.max_grad_norm)
        else:
            grads_step(grads, self.actor_opt, self.actor_params, self.params.max_grad_norm)
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
