"""Recurrent networks and sequence learning shared by the off-policy learners (issue 15): TD3,
DDPG, SAC and DQN with ``core = "gru" | "lstm"``.

Each network reads the observation history through its own :class:`RecurrentCore` (separate
cores for actor and critic, as in Ni et al. 2022, "Recurrent Model-Free RL Can Be a Strong
Baseline for Many POMDPs": a core shared by both is pulled two ways by their losses), and its
MLP sees the core's output beside the current observation (``skip``, the default) or the core's
output alone. The agent's policy state is both cores' states side by side, ``[actor | critic]``
(DQN has one network, so one core): acting advances both, so the replay stores, at every step,
the state each network needs to resume a sequence there.

Burn-in (R2D2): :func:`unroll` runs a core over a sequence from its stored state and cuts the
gradient at position ``burn_in`` of the rows that have a burn-in, so their first ``burn_in``
steps only rebuild the state; a row that starts its episode has none (its stored state, the
initial one, is exact) and is trained from position 0 with the gradient flowing throughout.

Weight sync: the actors declare the roles ``core``, ``trunk`` and ``head`` (the MLP's layers),
and ``sync_trunk_reads`` says what their trunk reads (``"core+obs"`` with the skip, ``"core"``
without). wheeler2/sync.py refuses to copy a trunk into one that reads something else (a
feedforward explorer's trunk reads the observation) unless the member keeps it; with
``core_skip = false`` the layout is that of PPO's / A2C's ``core_first`` actor, whose core and
trunk then sync from the learner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from agents.cores import RecurrentCore
from agents.nets import MLP, DeterministicActor, QCritic, SquashedGaussianActor, TwinQCritic
from wheeler2.agent import SequenceBatch
from wheeler2.needs import AgentNeeds, SequenceConfig, sequence_priority
from wheeler2.schema import bounded, choice


@dataclass
class SequenceParams:
    """The recurrent options of an off-policy learner's ``Params`` (a base class of them)."""

    # "gru" | "lstm" put a core of core_size before the networks' MLPs and train on replayed
    # sequences; "none" is the feedforward algorithm, unchanged.
    core: str = choice("none", ("none", "gru", "lstm"))
    core_size: int = bounded(64, gt=0)
    # The MLPs read [core output, observation]; false: the core output alone (PPO's core_first
    # layout, so recurrent PPO / A2C explorers can take this actor's core and trunk).
    core_skip: bool = True
    seq_length: int = bounded(40, gt=0)  # trained steps per replayed sequence
    seq_burn_in: int = bounded(20, ge=0)  # steps before them that only rebuild the state
    seq_stride: int = bounded(0, ge=0)  # steps between sequence starts; 0: seq_length // 2
    seq_eta: float = bounded(0.9, ge=0, le=1)  # sequence priority: eta max + (1 - eta) mean

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


def offpolicy_needs(params: Any) -> AgentNeeds:
    """An off-policy learner's needs: its discount, warm-up, sequences and device."""
    return AgentNeeds(
        gamma=float(params.gamma),
        replay_min_size=int(params.learning_starts),
        sequence=params.replay_sequence,
        device=params.device,
    )


def core_problem(params: Any) -> tuple[str, str] | None:
    """(key, what is wrong) when a recurrent learner's other options do not combine with its
    core; None when they do (or it has none)."""
    if getattr(params, "core", "none") == "none":
        return None
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


def state_rows(state: np.ndarray | None, n: int, dim: int, device: torch.device) -> torch.Tensor:
    """The engine's policy state rows as a tensor; None: every row starts an episode."""
    if state is None:
        return torch.zeros(n, dim, device=device)
    return torch.as_tensor(state, dtype=torch.float32, device=device)


def step_two_cores(
    actor_core: RecurrentCore, critic_core: RecurrentCore, x: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(actor core output, next ``[actor | critic]`` state) for one step. The critic's core
    steps too, on random actions as well: the state stored with each transition must be the
    one both networks reach along the episode."""
    ha, hc = state.split(actor_core.state_dim, dim=1)
    ya, ha = actor_core.step(x, ha)
    _, hc = critic_core.step(x, hc)
    return ya, torch.cat([ha, hc], dim=1)


class _CoreNet(nn.Module):
    """A core, then an MLP ``mlp`` on ``[core output, obs]`` (or the output alone)."""

    sync_roles: ClassVar[dict[str, str]] = {
        "core": "core",
        "trunk": "mlp.trunk",
        "head": "mlp.head",
    }

    def __init__(self, kind: str, obs_dim: int, size: int, skip: bool) -> None:
        super().__init__()
        self.core = RecurrentCore(kind, obs_dim, size)
        self.skip = skip
        self.mlp_in = size + obs_dim if skip else size
        self.sync_trunk_reads = "core+obs" if skip else "core"

    def inputs(self, y: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat([y, obs], -1) if self.skip else y

    def first(self, obs: torch.Tensor) -> torch.Tensor:
        """The core's output at the first step of an episode (from the initial state)."""
        return self.core.step(obs, self.core.initial_state(obs.shape[0], obs.device))[0]


class RecurrentActor(_CoreNet):
    """mu(history) = tanh(mlp([core(o_1..o_t), o_t])), in [-1, 1]^act_dim."""

    sync_actions = "continuous"

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        hidden: Sequence[int],
        act_dim: int,
        skip: bool = True,
    ):
        super().__init__(kind, obs_dim, size, skip)
        self.mlp = DeterministicActor(self.mlp_in, hidden, act_dim, "relu")

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action [N, act_dim], next state) for one step of N copies."""
        y, state = self.core.step(obs, state)
        return self.on(y, obs), state

    def on(self, y: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Actions from core outputs ``y`` and observations (any leading shape)."""
        return self.mlp(self.inputs(y, obs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions at the first step of an episode (from the initial state)."""
        return self.on(self.first(obs), obs)


class RecurrentSquashedActor(_CoreNet):
    """SAC's pi(a | history): the squashed Gaussian of :class:`SquashedGaussianActor` on
    ``[core(o_1..o_t), o_t]``; ``forward`` is the mean action at an episode's first step."""

    sync_actions = "continuous"

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        hidden: Sequence[int],
        act_dim: int,
        skip: bool = True,
    ):
        super().__init__(kind, obs_dim, size, skip)
        self.mlp = SquashedGaussianActor(self.mlp_in, hidden, act_dim, "relu")

    def mean_on(self, y: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.inputs(y, obs))

    def sample_on(
        self, y: torch.Tensor, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized draw and its log-prob ``[...]`` from core outputs ``y``."""
        return self.mlp.sample(self.inputs(y, obs), generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean_on(self.first(obs), obs)


class RecurrentQ(_CoreNet):
    """DQN's Q(history, .) = mlp([core(o_1..o_t), o_t]) over the discrete actions (R2D2's
    network without the dueling head)."""

    sync_actions = "discrete"

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        hidden: Sequence[int],
        num_actions: int,
        skip: bool,
    ):
        super().__init__(kind, obs_dim, size, skip)
        self.mlp = MLP(self.mlp_in, hidden, num_actions, "relu")

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, state = self.core.step(obs, state)
        return self.on(y, obs), state

    def on(self, y: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.inputs(y, obs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.on(self.first(obs), obs)


class RecurrentCritic(_CoreNet):
    """Q_h (one output per reward head) on ``[core(o_1..o_t), o_t]`` and the action: DDPG's
    :class:`QCritic` (``twin = False``, ``[..., H]``) or the clipped-double-Q pair of TD3 and
    SAC (:class:`TwinQCritic`, ``[2, ..., H]``), whose two nets share the one core, trained by
    both their losses."""

    sync_roles: ClassVar[dict[str, str]] = {}  # a critic: synced by its own paths

    def __init__(
        self,
        kind: str,
        obs_dim: int,
        size: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int,
        mode: str,
        skip: bool = True,
        twin: bool = False,
    ):
        super().__init__(kind, obs_dim, size, skip)
        net = TwinQCritic if twin else QCritic
        self.q = net(self.mlp_in, act_dim, hidden, num_heads, mode, "relu")

    def on(self, y: torch.Tensor, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q from core outputs ``y``, observations and actions."""
        return self.q(self.inputs(y, obs), action)

    def q1_on(self, y: torch.Tensor, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The pair's first critic (``twin`` only), TD3's actor target."""
        return self.q.q1(self.inputs(y, obs), action)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q at the first step of an episode (from the initial state)."""
        return self.on(self.first(obs), obs, action)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q1 at the first step of an episode (from the initial state)."""
        return self.q1_on(self.first(obs), obs, action)


def recurrent_actor_critic(
    actor_cls: type[_CoreNet], params: Any, space: Any, twin: bool
) -> tuple[nn.Module, RecurrentCritic, int]:
    """(actor, critic, width of one core's state) of a recurrent DDPG / TD3 / SAC from its
    ``params`` (``SequenceParams`` and ``hidden``, ``critic``); the policy state is the actor's
    core state, then the critic's, so ``state_dim`` is twice the width."""
    p = params
    actor = actor_cls(p.core, space.obs_dim, p.core_size, p.hidden, space.act_dim, p.core_skip)
    critic = RecurrentCritic(
        p.core,
        space.obs_dim,
        p.core_size,
        space.act_dim,
        p.hidden,
        space.num_heads,
        p.critic,
        p.core_skip,
        twin,
    )
    return actor, critic, actor.core.state_dim


@dataclass
class Sequences:
    """A :class:`SequenceBatch` time-major (``[T, B, ...]``), normalized, with its loss mask.

    Position t of row b is a sample of the loss where ``mask`` is 1; ``w`` is that mask times
    the row's importance weight, and ``count`` the number of trained positions."""

    x: torch.Tensor  # [T, B, D] observations
    nxt: torch.Tensor  # [T + n - 1, B, D] next observations
    action: torch.Tensor  # [T, B, A] or [T, B] long
    reward: torch.Tensor  # [T, B, H]
    discount: torch.Tensor  # [T, B]
    boot: torch.Tensor  # [T, B] long: the next_obs position each target bootstraps from
    mask: torch.Tensor  # [T, B] float
    w: torch.Tensor  # [T, B]
    count: torch.Tensor  # scalar
    has_burn: torch.Tensor  # [B] bool
    state: torch.Tensor  # [B, state_dim] stored with each first step
    mask_np: np.ndarray  # [B, T] bool, for the priorities

    @classmethod
    def of(cls, batch: Any, norm: Any, state_dim: int, algo: str) -> Sequences:
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
            boot=batch.boot.transpose(0, 1),
            mask=mask,
            w=batch.weight.unsqueeze(0) * mask,
            count=mask.sum().clamp(min=1.0),
            has_burn=batch.burn > 0,
            state=state,
            mask_np=batch.mask.cpu().numpy(),
        )

    def next_features(self, core: RecurrentCore, state0: torch.Tensor) -> torch.Tensor:
        """A target core's outputs for ``nxt`` ``[T + n - 1, B, size]``, without gradient.

        s' of position t is o_{t+1} along the episode: the core reads o_0 and then the next
        observations, so its output k + 1 is the features of ``nxt[k]``."""
        with torch.no_grad():
            seq = torch.cat([self.x[:1], self.nxt])
            none = torch.zeros(seq.shape[:2], dtype=torch.bool, device=seq.device)
            return core.sequence(seq, state0, none)[0][1:]

    def at_boot(self, values: torch.Tensor) -> torch.Tensor:
        """``values [T + n - 1, B, K]`` at each position's bootstrap -> ``[T, B, K]``."""
        index = self.boot.unsqueeze(-1).expand(-1, -1, values.shape[-1])
        return values.gather(0, index)

    def target(self, next_value: torch.Tensor) -> torch.Tensor:
        """y = r + discount * V(s') per position and head, from ``next_value [T + n - 1, B, H]``."""
        return self.reward + self.discount.unsqueeze(-1) * self.at_boot(next_value)

    def unroll(self, core: RecurrentCore, state0: torch.Tensor, burn_in: int) -> torch.Tensor:
        """``core``'s outputs over ``x`` with the burn-in cut (:func:`unroll`)."""
        return unroll(core, self.x, state0, burn_in, self.has_burn)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values [T, B]`` over the trained positions (padding never counts)."""
        return (values * self.mask).sum() / self.count

    def weighted(self, sq: torch.Tensor) -> torch.Tensor:
        """Importance-weighted mean over the trained positions of ``sq [..., T, B, H]`` -> [H],
        summed over any leading (twin) axis."""
        per = (self.w.unsqueeze(-1) * sq).sum((-3, -2))
        return per.reshape(-1, per.shape[-1]).sum(0) / self.count

    def priority(self, abs_td: torch.Tensor, eta: float) -> np.ndarray:
        """One priority per sequence from ``abs_td [T, B]`` (``sequence_priority``)."""
        return sequence_priority(abs_td.detach().transpose(0, 1).cpu().numpy(), self.mask_np, eta)
