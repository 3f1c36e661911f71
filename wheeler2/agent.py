"""The contract between the engine and an algorithm.

An algorithm (``agents/ddpg.py``, ``agents/ppo.py``, ...) subclasses :class:`Agent`. The engine
never imports an algorithm by name: it resolves ``algo = "ddpg"`` through the registry, builds
``Agent.Params`` from the TOML ``[team.params]`` table, and then only calls the methods below.

Conventions every algorithm follows:

* Observations given to ``act`` are flat float32 arrays ``[N, obs_dim]`` (goal envs: observation
  and desired goal concatenated by the engine). Normalisation, if any, is the agent's business.
  Image observations (``SpaceInfo.obs_shape``) are flat uint8 rows of a channels-first image.
* Continuous actions live in ``[-1, 1]^act_dim``; the env adapter rescales them to the Box bounds.
  Discrete actions are int64 ``[N]``.
* Rewards come as one column per task reward head, ``[B, H]``.
* Policy state (recurrent agents, ``state_dim > 0``): the engine keeps one row per env copy,
  starts it at ``initial_state``, passes it to ``act`` and takes the next one from
  ``ActOut.state``, and puts ``initial_state`` rows back where an episode ended (terminated or
  truncated). ``Transitions.state`` is the state ``obs`` was seen in. Feedforward agents
  (``state_dim = 0``) are called as ``act(obs, explore)`` and never see a state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from wheeler2.errors import KeepsFields
from wheeler2.needs import AgentNeeds


class ParamError(KeepsFields, ValueError):
    """Params that cannot build this agent, with the ``[team.params]`` key at fault, so the
    config check names ``params.<key>`` and not the member's ``algo``."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class SpaceInfo:
    """What an agent needs to know about the problem to build its networks."""

    obs_dim: int
    act_dim: int  # Box: action dimension; Discrete: number of actions
    discrete: bool
    heads: tuple[str, ...] = ("env",)
    head_weights: tuple[float, ...] = (1.0,)
    # The last act_dim observation columns are the legal-action mask (turn-based games,
    # envs/spaces.py encode_masked; discrete actions only): an agent that cannot keep to the
    # legal actions refuses such a space (agents/parts/masks.py).
    action_mask: bool = False
    # Image observations: the channels-first (C, H, W) each row of obs_dim = C * H * W uint8
    # values holds (a stack of k frames is k * C channels); () for flat float32 rows. The
    # encoders (agents/parts/encoders.py) read it and scale the pixels inside the network.
    obs_shape: tuple[int, ...] = ()
    # Self-play with negamax values ([play] negamax): each transition runs from a move to the
    # opponent's reply, next_obs is the opponent's view (its own legal moves in the mask), and
    # a move is worth its reward minus the discounted value of the opponent's reply, which is
    # uniformly random with this chance and the opponent's best otherwise. None: transitions
    # run from the agent's turn to its next turn, as in any env.
    negamax: float | None = None

    @property
    def num_heads(self) -> int:
        return len(self.heads)


@dataclass
class ActOut:
    """An agent's decision for a batch of N observations."""

    action: np.ndarray  # float32 [N, act_dim] in [-1, 1], or int64 [N] for discrete
    logp: np.ndarray | None = None  # behaviour log-probability [N], for stochastic policies
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. value estimates
    # float32 [N, state_dim]: the policy state after this step (recurrent agents; else None).
    # The engine never writes into it, so an agent may hand back its own buffer.
    state: np.ndarray | None = None


@dataclass
class LearnOut:
    """What one gradient step reports back to the engine."""

    metrics: dict[str, float]
    td_error: np.ndarray | None = None  # [B] |TD error| used as new priorities


@dataclass
class Batch:
    """A replay sample, as torch tensors on the learner's device.

    ``reward`` is the n-step discounted return per head, ``discount`` the multiplier of the
    bootstrap value (``gamma**k`` times zero when the window hit a terminal state), so a TD target
    is simply ``reward + discount[:, None] * Q_target(next_obs, pi(next_obs))``.
    """

    obs: torch.Tensor  # [B, obs_dim]
    action: torch.Tensor  # [B, act_dim] float, or [B] long for discrete
    reward: torch.Tensor  # [B, H]
    next_obs: torch.Tensor  # [B, obs_dim]
    discount: torch.Tensor  # [B]
    weight: torch.Tensor  # [B] importance weights (ones for uniform sampling)
    index: np.ndarray  # [B] slots, handed back with the priorities
    logp: torch.Tensor | None = None  # [B] behaviour log-prob, where the producer stored one

    @classmethod
    def from_numpy(cls, arrays: dict[str, np.ndarray], device: torch.device | str) -> Batch:
        """Move a buffer sample (dict of numpy arrays) to ``device``; a sample of sequences
        (it has a ``mask``) becomes a :class:`SequenceBatch`."""
        if cls is Batch and "mask" in arrays:
            cls = SequenceBatch

        def t(name: str) -> torch.Tensor | None:
            value = arrays.get(name)
            return None if value is None else torch.as_tensor(value, device=device)

        # Every tensor field by name (a field the sample lacks, e.g. logp, stays None).
        tensors: dict[str, Any] = {f.name: t(f.name) for f in fields(cls) if f.name != "index"}
        return cls(index=arrays["index"], **tensors)


@dataclass
class SequenceBatch(Batch):
    """A sample of B replayed sequences of T = burn_in + length steps (``wheeler2/buffer/
    sequence.py``), batch first, for a recurrent learner.

    Per position t: ``reward [B, T, H]`` and ``discount [B, T]`` as in :class:`Batch`, with the
    bootstrap from ``next_obs[b, boot[b, t]]`` (``next_obs`` is ``[B, T + n - 1, obs_dim]``:
    with n-step returns the bootstrap lies up to n - 1 positions further on). ``obs`` and
    ``action`` are ``[B, T, ...]``; ``weight`` and ``index`` are per sequence. ``state`` is the
    policy state stored with each sequence's first step; the first ``burn[b]`` positions only
    rebuild it from there. ``alive`` marks the positions that hold a step of the sequence's
    episode, ``mask`` those that enter the loss (alive and past the burn-in).
    """

    boot: torch.Tensor | None = None  # [B, T] long
    alive: torch.Tensor | None = None  # [B, T] bool
    mask: torch.Tensor | None = None  # [B, T] bool
    burn: torch.Tensor | None = None  # [B] long
    state: torch.Tensor | None = None  # [B, state_dim]


@dataclass
class Transitions:
    """One vector step of N env copies, as the engine hands it to ``Agent.observe``.

    ``next_obs`` is the true next observation of each transition; ``reset_obs`` is what the agent
    acts on next (they differ only where the episode ended and the copy was reset).
    """

    obs: np.ndarray  # [N, obs_dim]
    action: np.ndarray
    reward: np.ndarray  # [N, H]
    next_obs: np.ndarray  # [N, obs_dim]
    terminated: np.ndarray  # [N] bool: a real terminal state, no bootstrap
    truncated: np.ndarray  # [N] bool: time limit, bootstrap from next_obs
    reset_obs: np.ndarray  # [N, obs_dim]
    act_out: ActOut
    # [N] bool, or None when every row is real. False marks a multi-agent row whose agent was
    # absent this step (docs/envs.md, "Active mask"): its reward and flags are zeros and its
    # observations stale, so a learner must give it zero weight.
    active: np.ndarray | None = None
    # float32 [N, state_dim]: the policy state ``obs`` was seen in (the one given to ``act``),
    # None for feedforward agents.
    state: np.ndarray | None = None


class Agent:
    """Base class of every algorithm. Subclasses set ``Params`` and ``uses_replay``.

    ``uses_replay = True``: the engine samples the central buffer and calls :meth:`learn`.
    ``uses_replay = False``: the agent learns from its own rollouts inside :meth:`observe`.
    Either kind can be a team's learner or an explorer; every member's transitions go into the
    central buffer.
    """

    Params: ClassVar[type]  # a dataclass of hyperparameters, defaults = the algorithm's defaults
    uses_replay: ClassVar[bool] = True
    # Width of the policy state; 0 = feedforward. A recurrent agent sets it in ``__init__``.
    state_dim: int = 0

    def __init__(self, space: SpaceInfo, params: Any, device: str = "cpu", seed: int = 0) -> None:
        self.space = space
        self.params = params
        self.device = torch.device(device)
        self.seed = seed

    @classmethod
    def needs(cls, params: Any) -> AgentNeeds:
        """What the engine must know of a member with these params (replay warm-up, discount,
        sequences, device): the only way the engine learns them, before the agent is built.

        The algorithms' bases (agents/offpolicy.py, agents/onpolicy.py) answer from their
        ``Params``; an ``Agent`` written without them declares its own, or the engine takes the
        defaults: the CPU, no warm-up, no discount."""
        return AgentNeeds()

    @classmethod
    def for_run(cls, params: Any, total_steps: int) -> Any:
        """``params`` for a run of ``total_steps`` env steps, all members together: where an
        algorithm's schedules need the run's length it fills it in here (as given by default)."""
        return params

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        """Actions for ``obs [N, obs_dim]``. A recurrent agent reads ``state [N, state_dim]``
        (None: every row starts an episode) and returns the next state in ``ActOut.state``."""
        raise NotImplementedError

    def initial_state(self, n: int) -> np.ndarray:
        """The state an episode starts in, ``[n, state_dim]`` float32 (zeros by default)."""
        return np.zeros((n, self.state_dim), np.float32)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        """Called after every vector step. Returns metrics when the agent updated itself."""
        return None

    def learn(self, batch: Batch) -> LearnOut:
        raise NotImplementedError(f"{type(self).__name__} does not learn from replay")

    @property
    def actor(self) -> nn.Module:
        """The policy network: what weight sync copies and, unless :meth:`eval_net` says
        otherwise, what evaluation runs.

        For weight sync between algorithm families the module declares, as class attributes,
        ``sync_roles`` (role -> sub-module path, e.g. ``{"trunk": "net.trunk", "head":
        "net.head"}``) and ``sync_actions`` (``"discrete"`` or ``"continuous"``). Tensors are
        matched, kept (``sync.keep``) and reported by role name (``trunk.0.weight``), and copied
        where shapes and layer kinds (activations included) agree; a module without
        ``sync_roles`` is matched by its own parameter paths.
        The actors in ``agents/parts/heads.py`` declare both (see ``wheeler2/sync/``).
        """
        raise NotImplementedError

    def eval_net(self) -> nn.Module:
        """The network that deterministic acting (``act(explore=False)``) runs, and so what
        ``wheeler2 export`` writes: the :attr:`actor`, unless an algorithm evaluates another
        one (a population's champion)."""
        return self.actor

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, targets, optimizers, counters."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
