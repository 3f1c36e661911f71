"""The on-policy agents' recurrent networks and acting (issue 15).

:class:`RecurrentActor` and :class:`RecurrentCritic` are a :class:`agents.parts.memory.
RecurrentMemory` (trunk and core) with a last layer, for PPO and A2C (``core = "gru" | "lstm"``).
``RecurrentCore`` lives in ``agents/parts/memory.py``; importing it from here still works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.nets import evaluate_outputs, ortho_init_, sample_outputs
from agents.parts.memory import CORE_KINDS, RecurrentCore, RecurrentMemory

__all__ = ["CORE_KINDS", "RecurrentCore", "RecurrentActor", "RecurrentCritic"]


class RecurrentActor(RecurrentMemory):
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
        # What the trunk reads (sync_trunk_reads) comes with the memory's layout.
        super().__init__(obs_dim, kind, size, hidden, act, ortho, core_first)
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
        y, state = super().step(obs, state)
        return self.head(y), state

    def sequence(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [T, N, obs_dim]`` replayed from ``state0`` -> (outputs ``[T, N, act_dim]``,
        state after the last step); ``starts`` as in :meth:`RecurrentCore.sequence`."""
        y, state = super().sequence(obs, state0, starts)
        return self.head(y), state

    def sample(
        self, out: torch.Tensor, explore: bool, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(env action, raw sample, log-prob of the raw sample) from the outputs ``out``."""
        return sample_outputs(out, None if self.discrete else self.log_std, explore, generator)

    def evaluate(self, out: torch.Tensor, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(raw) and the entropy under the outputs ``out`` (any leading shape)."""
        return evaluate_outputs(out, None if self.discrete else self.log_std, raw)


class RecurrentCritic(RecurrentMemory):
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
        super().__init__(obs_dim, kind, size, hidden, act, ortho, core_first)
        self.head = nn.Linear(self.features_dim, 1)
        if ortho:
            ortho_init_(self.head, 1.0)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, state = super().step(obs, state)
        return self.head(y).squeeze(-1), state

    def sequence(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, state = super().sequence(obs, state0, starts)
        return self.head(y).squeeze(-1), state


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
