"""The recurrent off-policy learners' options and network (issue 15): TD3, DDPG, SAC and DQN
with ``core = "gru" | "lstm"``.

Each network reads the observation history through its own :class:`RecurrentCore` (separate
cores for actor and critic, as in Ni et al. 2022, "Recurrent Model-Free RL Can Be a Strong
Baseline for Many POMDPs": a core shared by both is pulled two ways by their losses), and its
layers see the core's output beside the current observation (``skip``, the default) or the
core's output alone: :class:`RecurrentNet`, a core before any of the heads of
``agents/parts/heads.py``. The agent's policy state is its networks' core states side by side
(``[actor | critic]``; DQN has one network, so one core): acting advances every core, so the
replay stores, at every step, the state each network needs to resume a sequence there. How a
loss reads them along a replayed sequence, burn-in included, is ``agents/parts/batch.py``.

Weight sync: the actors declare the roles ``core``, ``trunk`` and ``head`` (the MLP's layers),
and ``trunk_reads`` says what their trunk reads (``"core+obs"`` by default, or ``"core"``).
wheeler2/sync/ refuses to copy a trunk into one that reads something else (a feedforward
explorer's trunk reads the observation) unless the member keeps it; with ``trunk_reads =
"core"`` the layout is that of PPO's / A2C's with the same key, whose core and trunk then sync
from the learner's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from wheeler2.agents.parts.memory import RecurrentMemory

from wheeler2.needs import SequenceConfig
from wheeler2.schema import bounded, choice


@dataclass
class SequenceParams:
    """The recurrent options of an off-policy learner's ``Params`` (a base class of them)."""

    # "gru" | "lstm" put a core of core_size before the networks' MLPs and train on replayed
    # sequences; "none" is the feedforward algorithm, unchanged.
    core: str = choice("none", ("none", "gru", "lstm"))
    core_size: int = bounded(64, gt=0)
    # What the layers after the core read: "core+obs" (its output beside the observation) or
    # "core" (its output alone: the layout of PPO's / A2C's trunk_reads = "core", so recurrent
    # PPO / A2C explorers can take this actor's core and trunk).
    trunk_reads: str = choice("core+obs", ("core+obs", "core"))
    seq_length: int = bounded(40, gt=0)  # trained steps per replayed sequence
    seq_burn_in: int = bounded(20, ge=0)  # steps before them that only rebuild the state
    seq_stride: int = bounded(0, ge=0)  # steps between sequence starts; 0: seq_length // 2
    seq_eta: float = bounded(0.9, ge=0, le=1)  # sequence priority: eta max + (1 - eta) mean

    # Old key -> (new key, its value for each old value), read with a deprecation warning.
    renamed_keys: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = {
        "core_skip": ("trunk_reads", {True: "core+obs", False: "core"})
    }

    @property
    def replay_sequence(self) -> SequenceConfig | None:
        """The sequences the engine's replay cuts for this learner (None: transitions)."""
        if self.core == "none":
            return None
        return SequenceConfig(
            length=self.seq_length,
            burn_in=self.seq_burn_in,
            stride=self.seq_stride,
            eta=self.seq_eta,
        )


def core_problem(params: Any) -> tuple[str, str] | None:
    """(key, what is wrong) when a recurrent learner's other options do not combine with its
    core; None when they do (or it has none)."""
    if getattr(params, "core", "none") == "none":
        return None
    stride, length = int(getattr(params, "seq_stride", 0)), int(getattr(params, "seq_length", 1))
    if stride > length:
        return (
            "seq_stride",
            f"seq_stride = {stride} is more than seq_length = {length}: the steps between one "
            "sequence's trained steps and the next one's would never be trained; at most "
            "seq_length (0: seq_length // 2, R2D2's half overlap)",
        )
    if getattr(params, "features", "none") != "none":
        return (
            "features",
            f'features = "{params.features}" encodes one observation; with core = '
            f'"{params.core}" the core reads the history: leave features out',
        )
    if getattr(params, "head", ""):
        return (
            "head",
            f"a detached explorer (head = {params.head!r}) trains its actor on single states "
            f'against a feedforward critic; it has no core = "{params.core}" yet: leave core out',
        )
    if getattr(params, "compile", False):
        return (
            "compile",
            f'compile = true compiles the feedforward learner step; with core = "{params.core}" '
            "leave compile out",
        )
    return None


class RecurrentNet(RecurrentMemory):
    """A recurrent core (the memory of ``agents/parts/memory.py``, without a trunk), then the
    layers ``body(width)`` on its features ``[core(o_1..o_t), o_t]`` (``skip``) or on the
    core's output alone; the body is any head (``DeterministicActor``, ``QCritic``, ...).

    The body sits at ``name`` (``"mlp"`` for a policy, ``"q"`` for an actor-critic's critic:
    the paths checkpoints hold), the core at ``core``. A policy declares the sync roles ``core``
    / ``trunk`` / ``head`` and its ``sync_actions``; a critic (``roles = False``) is synced by
    its own paths. ``state_at`` is the slice of the agent's policy state that holds this core's
    state. ``forward`` is the body at the first step of an episode (from the initial state).
    """

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        trunk_reads: str,
        body: Callable[[int], nn.Module],
        name: str = "mlp",
        roles: bool = True,
        actions: str | None = None,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__(obs_dim, kind, size, trunk_reads=trunk_reads, encoder=encoder)
        self.body_name = name
        self.add_module(name, body(self.features_dim))
        self.sync_roles = (
            {"core": "core", "trunk": f"{name}.trunk", "head": f"{name}.head"} if roles else {}
        )
        if roles and encoder is not None:
            self.sync_roles["encoder"] = "encoder"
        self.sync_actions = actions
        self.state_at = (0, self.state_dim)

    @property
    def body(self) -> nn.Module:
        return getattr(self, self.body_name)

    def first(self, obs: torch.Tensor) -> torch.Tensor:
        """The body's input at the first step of an episode (from the initial state)."""
        return self.step(obs, self.initial_state(obs.shape[0], obs.device))[0]

    def forward(self, obs: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return self.body(self.first(obs), *rest)


def body(net: nn.Module) -> nn.Module:
    """The layers after a network's core (the network itself when it has none)."""
    return net.body if isinstance(net, RecurrentNet) else net


def first_input(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The input of ``body(net)`` at the first step of an episode."""
    return net.first(obs) if isinstance(net, RecurrentNet) else obs


def state_rows(state: np.ndarray | None, n: int, dim: int, device: torch.device) -> torch.Tensor:
    """The engine's policy state rows as a tensor; None: every row starts an episode."""
    if state is None:
        return torch.zeros(n, dim, device=device)
    return torch.as_tensor(state, dtype=torch.float32, device=device)
