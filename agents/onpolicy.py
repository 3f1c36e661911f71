"""What the on-policy agents (PPO, A2C, PG) share: acting, the rollout and its bookkeeping,
observation normalization, schedules, optimizer steps and checkpoints.

An algorithm subclasses :class:`OnPolicy` and ``Agent`` (``class PPO(OnPolicy, Agent)``),
builds its networks (:func:`actor_critic`) and hands them to :meth:`OnPolicy.setup`, creates its
optimizers, names what its checkpoint holds (``checkpoint``) and writes :meth:`OnPolicy.update`,
its loss over the finished :class:`Rollout`. It never asks whether its policy is recurrent:
:meth:`OnPolicy.log_probs`, :meth:`OnPolicy.values`, :meth:`OnPolicy.rollout_values` and
:meth:`OnPolicy.minibatches` give the same tensors either way.

The rollout is ``[T, N]``: T = ``n_steps`` vector steps of N env copies that run on across
rollouts (no reset between them). Per step it keeps the observations as the policy saw them
(normalized), the true next observations (``Transitions.next_obs``: a truncated step
bootstraps from its final observation), the raw actions (the unclipped Gaussian sample, the one
pi produced), the behaviour log-probs, the head-weighted reward, the episode ends and ``valid``
(0 for an absent multi-agent row: kept, as a rollout must be rectangular, with weight 0).

Recurrent policies (``core = "gru" | "lstm"``): the agent's policy state is the actor core's
state, then the critic core's (if the critic has one). The rollout also keeps each copy's state
at its first step (``state0``) and the episode starts (``starts``), so the update replays each
copy's whole sequence through the cores from there, resetting where an episode began (and after
an absent multi-agent step, whose state the engine holds at the initial one): the first epoch's
log-probs are the behaviour ones. V of each step and of the bootstrap observations are
the values computed while acting (the critic does not change during a rollout), which is what a
replay from the stored states gives.

Action masks (``SpaceInfo.action_mask``, discrete actions): the legal actions are read from the
last ``act_dim`` columns of each observation (``agents/parts/masks.py``), when acting and when
the update scores the stored actions again; the rollout's observations carry them, since
normalization leaves those columns raw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from wheeler2.agents.normalize import make_obs_norm
from wheeler2.agents.parts import resolve_device
from wheeler2.agents.parts.distributions import evaluate_actions, evaluate_outputs, sample_outputs
from wheeler2.agents.parts.encoders import (
    image_encoder,
    image_feature_dim,
    image_features_,
    ortho_init_,
)
from wheeler2.agents.parts.heads import VCritic, build_actor
from wheeler2.agents.parts.masks import legal_actions
from wheeler2.agents.parts.memory import RecurrentMemory

from wheeler2.agent import ActOut, ParamError, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds

# -- networks: a stochastic policy and V, feedforward (agents/parts/heads.py) or with memory --


class RecurrentActor(RecurrentMemory):
    """A stochastic policy with memory: ``head(core(trunk(obs), state))``.

    The trunk sees the observation alone, so it has the shape of a feedforward actor's trunk
    and syncs from one by role (``sync_roles``); the core is outside every role, so an
    explorer keeps its own core when its learner has none, and two recurrent actors sync it by
    name. With ``trunk_reads = "core"`` the trunk reads the core's output instead (it then syncs
    only from an actor whose trunk reads the same, e.g. a recurrent DDPG / TD3 / SAC actor with
    ``trunk_reads = "core"``, whose core it takes too, or is kept). ``forward`` is not defined: a
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
        trunk_reads: str = "obs",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__(obs_dim, kind, size, hidden, act, ortho, trunk_reads, encoder)
        if encoder is not None:  # image observations: the encoder syncs as a role of its own
            self.sync_roles = {**self.sync_roles, "encoder": "encoder"}
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

    def evaluate(
        self, out: torch.Tensor, raw: torch.Tensor, legal: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(raw) and the entropy under the outputs ``out`` (any leading shape), over the
        ``legal`` actions only where given."""
        return evaluate_outputs(out, None if self.discrete else self.log_std, raw, legal)


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
        trunk_reads: str = "obs",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__(obs_dim, kind, size, hidden, act, ortho, trunk_reads, encoder)
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


def actor_critic(space: SpaceInfo, p: Any) -> tuple[nn.Module, nn.Module]:
    """The (policy, V) pair from an algorithm's params (``hidden``, ``activation``,
    ``log_std_init``, ``ortho_init``; ``core``, ``core_size``, ``critic_core``, ``trunk_reads``
    where it has them): feedforward for ``core = "none"``, else a :class:`RecurrentActor` and,
    with ``critic_core``, a :class:`RecurrentCritic`. Built in that order, so a seeded
    feedforward pair is what it was before cores existed."""
    core = getattr(p, "core", "none")
    obs_dim, hidden, act, ortho = space.obs_dim, p.hidden, p.activation, p.ortho_init
    shape, kind = space.obs_shape, getattr(p, "encoder", "auto")
    if shape and getattr(p, "normalize_obs", False):
        raise ParamError(
            "normalize_obs", "normalize_obs: image observations are scaled inside the encoder"
        )
    if not shape and kind != "auto":
        raise ParamError("encoder", f"encoder: encoder = {kind!r} needs image observations")
    if core == "none":
        # Images: each network's MLP reads the features of an image encoder of its own.
        width = image_feature_dim(kind, shape) if shape else obs_dim
        policy: nn.Module = build_actor(
            width, space.act_dim, space.discrete, hidden, act, p.log_std_init, ortho
        )
        critic = VCritic(width, hidden, act, ortho)
        if shape:
            image_features_(policy, kind, shape)
            image_features_(critic, kind, shape)
        return policy, critic
    size, first, std = p.core_size, p.trunk_reads, p.log_std_init

    def encoder() -> nn.Module | None:
        return image_encoder(kind, shape) if shape else None

    policy = RecurrentActor(
        obs_dim,
        space.act_dim,
        space.discrete,
        hidden,
        act,
        core,
        size,
        std,
        ortho,
        first,
        encoder(),
    )
    if p.critic_core:
        return policy, RecurrentCritic(obs_dim, hidden, act, core, size, ortho, first, encoder())
    critic = VCritic(image_feature_dim(kind, shape) if shape else obs_dim, hidden, act, ortho)
    if shape:
        image_features_(critic, kind, shape)
    return policy, critic


def masked_mean(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the rows with weight 1 (all rows when ``w`` is None)."""
    if w is None:
        return x.mean()
    return (x * w).sum() / w.sum().clamp(min=1.0)


def normalize_advantages(adv: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """``(adv - mean) / (std + 1e-8)`` over the rows with weight 1, the std the unbiased one
    (as SB3's and CleanRL's ``advantages.std()``), so a masked batch of real rows normalizes as
    the same rows would unmasked. Under two such rows there is no std: ``adv`` as it is."""
    n = torch.tensor(float(adv.numel()), device=adv.device) if w is None else w.sum()
    mu = masked_mean(adv, w)
    sq = (adv - mu).pow(2) if w is None else (adv - mu).pow(2) * w
    sd = (sq.sum() / (n - 1.0).clamp(min=1.0)).sqrt()
    return torch.where(n >= 2.0, (adv - mu) / (sd + 1e-8), adv)


def next_values_seen(
    values: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor, terminated: torch.Tensor
) -> torch.Tensor:
    """V(s'_t) over a [T, N] rollout from the values computed while acting: inside an episode
    the next step's value; at a truncation and at the last step ``next_value`` (V of the final
    observation in the state after the step). Terminated steps are cut by the return."""
    following = torch.cat([values[1:], next_value[-1:]], dim=0)
    truncated = done.bool() & ~terminated.bool()
    return torch.where(truncated, next_value, following)


@dataclass
class Rollout:
    """T steps of N env copies, ``[T, N, ...]`` tensors on the agent's device; ``t`` steps are
    stored so far. The recurrent columns (``state0``, ``starts``, ``value``, ``next_value``) are
    filled for a recurrent policy only."""

    obs: torch.Tensor  # [T, N, obs_dim], as the policy saw them
    next_obs: torch.Tensor  # [T, N, obs_dim]
    action: torch.Tensor  # [T, N, act_dim] float, or [T, N] long
    logp: torch.Tensor  # [T, N] behaviour log-prob of the action
    reward: torch.Tensor  # [T, N], the heads summed with their weights
    terminated: torch.Tensor  # [T, N] 0/1
    done: torch.Tensor  # [T, N] 0/1: terminated or truncated
    valid: torch.Tensor  # [T, N] 0/1: 0 for an absent multi-agent row
    state0: torch.Tensor  # [N, state_dim]: each copy's policy state at step 0
    starts: torch.Tensor  # [T, N] bool: an episode starts at t
    value: torch.Tensor  # [T, N] V(s_t) seen while acting
    next_value: torch.Tensor  # [T, N] V(s'_t) where needed: truncations and the last step
    t: int = 0

    @classmethod
    def empty(cls, T: int, n: int, space: SpaceInfo, state_dim: int, dev: torch.device) -> Rollout:
        def zeros(*shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
            return torch.zeros(shape, device=dev, dtype=dtype)

        act_shape = (T, n) if space.discrete else (T, n, space.act_dim)
        # Image rows stay bytes (4x less memory; the encoders scale them).
        obs_type = torch.uint8 if space.obs_shape else None
        return cls(
            obs=zeros(T, n, space.obs_dim, dtype=obs_type),
            next_obs=zeros(T, n, space.obs_dim, dtype=obs_type),
            action=zeros(*act_shape, dtype=torch.long if space.discrete else None),
            logp=zeros(T, n),
            reward=zeros(T, n),
            terminated=zeros(T, n),
            done=zeros(T, n),
            valid=torch.ones(T, n, device=dev),
            state0=zeros(n, state_dim),
            starts=zeros(T, n, dtype=torch.bool),
            value=zeros(T, n),
            next_value=zeros(T, n),
        )

    @property
    def shape(self) -> tuple[int, int]:
        """(T, N)."""
        return self.reward.shape[0], self.reward.shape[1]


@dataclass
class Minibatch:
    """Rows of a rollout: ``rows`` index the flat ``[T * N]`` steps (``t * N + copy``);
    ``copies``, for a recurrent policy, the env copies whose whole sequences they are."""

    rows: torch.Tensor
    copies: torch.Tensor | None = None


class OnPolicy:
    """Base of the on-policy agents, written first among their bases (``class PPO(OnPolicy,
    Agent)``): not an :class:`Agent` itself, so the registry never offers it as an algorithm. A
    subclass calls :meth:`setup` with its networks, then creates its optimizers; it writes
    :meth:`update` and sets ``algo`` and ``checkpoint``."""

    space: SpaceInfo  # set by Agent.__init__
    params: Any
    device: torch.device
    seed: int
    uses_replay = False
    algo: ClassVar[str]  # the checkpoint's "algo" entry
    # Attributes whose state_dict() the checkpoint holds, by name ("obs_norm" may be absent from
    # an old checkpoint: it then loads as empty statistics).
    checkpoint: ClassVar[tuple[str, ...]] = ("policy", "critic", "opt")
    acts_with_value: ClassVar[bool] = True  # act() reports V(obs) in extras["value"]

    @classmethod
    def needs(cls, params: Any) -> AgentNeeds:
        return AgentNeeds(gamma=float(params.gamma), device=params.device)

    def __init__(self, space: SpaceInfo, params: Any, device: str = "cpu", seed: int = 0):
        if space.action_mask and not space.discrete:
            raise ValueError(f"{type(self).__name__}: an action mask needs a discrete action space")
        super().__init__(space, params, resolve_device(device, params.device), seed)
        self.masked = space.action_mask

    def setup(
        self,
        policy: nn.Module,
        critic: nn.Module,
        normalize_obs: bool = False,
        obs_clip: float = 10.0,
    ) -> None:
        """Take the networks (built under ``seeded(seed)``) and set up acting and the rollout."""
        self.policy = policy.to(self.device)
        self.critic = critic.to(self.device)
        # Statistics come from the observations this agent acts on (observe), never from evals;
        # rollouts store normalized observations, the ones the policy saw.
        mask_cols = self.space.act_dim if self.masked else 0
        self.obs_norm = make_obs_norm(
            normalize_obs, self.space.obs_dim, obs_clip, self.device, keep_last=mask_cols
        )
        # The policy state: the actor core's, then the critic core's (if any).
        self.recurrent = isinstance(policy, RecurrentActor)
        self.actor_state_dim = policy.state_dim if self.recurrent else 0
        critic_dim = critic.state_dim if isinstance(critic, RecurrentCritic) else 0
        self.state_dim = self.actor_state_dim + critic_dim
        self.gen = torch.Generator(device=self.device).manual_seed(self.seed)
        self.head_w = torch.tensor(self.space.head_weights, dtype=torch.float32, device=self.device)
        self.env_steps = 0
        self.updates = 0
        self.rollout: Rollout | None = None
        self._prev_done: torch.Tensor | None = None  # recurrent: episode ends of the last step

    @property
    def actor(self) -> nn.Module:
        return self.policy

    # -- acting ---------------------------------------------------------------------------------

    def _log_std(self) -> torch.Tensor | None:
        return getattr(self.policy, "log_std", None)  # None: a categorical policy

    def _legal(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The legal actions of ``obs [..., obs_dim]`` (raw or normalized: the mask columns are
        never normalized); None for an unmasked space."""
        return legal_actions(obs, self.space.act_dim) if self.masked else None

    def _split_state(self, state: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's state rows as (actor part, critic part); None: every row starts."""
        if state is None:
            s = torch.zeros(n, self.state_dim, device=self.device)
        else:
            s = torch.as_tensor(state, dtype=torch.float32, device=self.device)
        return s[:, : self.actor_state_dim], s[:, self.actor_state_dim :]

    def _policy_step(self, x: torch.Tensor, sa: Any) -> tuple[torch.Tensor, Any]:
        """(policy outputs, next actor state); a feedforward policy has no state (None)."""
        if self.recurrent:
            return self.policy.step(x, sa)
        return self.policy(x), sa

    def _value_step(self, x: torch.Tensor, sc: Any) -> tuple[torch.Tensor, Any]:
        if isinstance(self.critic, RecurrentCritic):
            return self.critic.step(x, sc)
        return self.critic(x), sc

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        if explore:
            # VecNormalize's order: a batch is folded into the statistics before it is
            # normalized. Later batches are folded in by observe (as reset_obs); the very first
            # only here, or it would be normalized by empty statistics (as given).
            self.obs_norm.start(obs)
        o = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        x = self.obs_norm.normalize(o)
        with torch.inference_mode():
            sa, sc = self._split_state(state, len(x)) if self.recurrent else (None, None)
            out, sa = self._policy_step(x, sa)
            legal = self._legal(o)
            action, raw, logp = sample_outputs(out, self._log_std(), explore, self.gen, legal)
            extras = {}
            if self.acts_with_value:
                value, sc = self._value_step(x, sc)
                extras["value"] = value.cpu().numpy()
        if not self.space.discrete:
            extras["raw_action"] = raw.cpu().numpy()  # the unclipped sample, for log pi
        nxt = torch.cat([sa, sc], dim=1).cpu().numpy() if self.recurrent else None
        return ActOut(
            action=action.cpu().numpy(), logp=logp.cpu().numpy(), extras=extras, state=nxt
        )

    # -- the rollout ----------------------------------------------------------------------------

    def observe(self, step: Transitions) -> dict[str, float] | None:
        n, dev = len(step.obs), self.device
        if self.rollout is None or self.rollout.shape[1] != n:
            # A rollout must be rectangular: a new number of rows starts a fresh one.
            self.rollout = Rollout.empty(self.params.n_steps, n, self.space, self.state_dim, dev)
            self._prev_done = torch.zeros(n, dtype=torch.bool, device=dev)
        r, t = self.rollout, self.rollout.t
        norm = self.obs_norm.normalize
        active = np.ones(n, bool) if step.active is None else step.active
        # The statistics have not moved since act: the rows are stored as the policy saw them.
        r.obs[t] = norm(torch.as_tensor(step.obs, dtype=torch.float32, device=dev))
        # Then, as VecNormalize does on each step, the observations acted on next are folded
        # in first and the next observations normalized with the result.
        self.obs_norm.update(step.reset_obs if step.active is None else step.reset_obs[active])
        r.next_obs[t] = norm(torch.as_tensor(step.next_obs, dtype=torch.float32, device=dev))
        r.action[t] = torch.as_tensor(
            step.act_out.extras.get("raw_action", step.action), device=dev
        )
        if self.recurrent:
            self._store_recurrent(step, r, t)
        elif step.act_out.logp is not None:
            r.logp[t] = torch.as_tensor(step.act_out.logp, device=dev)
        else:  # actions not drawn by act(explore=True): score them under the current policy
            with torch.no_grad():
                legal = self._legal(r.obs[t])
                r.logp[t] = evaluate_actions(self.policy, r.obs[t], r.action[t], legal)[0]
        reward = torch.as_tensor(step.reward, dtype=torch.float32, device=dev).reshape(n, -1)
        r.reward[t] = reward @ self.head_w  # heads -> one reward
        r.terminated[t] = torch.as_tensor(step.terminated, device=dev)
        r.done[t] = torch.as_tensor(step.terminated | step.truncated, device=dev)
        # Absent rows stay in the rollout with weight 0; their own done flag at the leaving step
        # already cut the return's recursion.
        r.valid[t] = torch.as_tensor(active, device=dev)
        self.env_steps += n if step.active is None else int(active.sum())
        r.t += 1
        if r.t < self.params.n_steps:
            return None
        r.t = 0
        metrics = self.update()
        self.updates += 1
        # The live table's upd/s: one policy update per rollout (PPO's epochs of minibatches
        # inside it), as an off-policy learner's is one per learn call.
        return metrics | {"updates": float(self.updates)}

    def _store_recurrent(self, step: Transitions, r: Rollout, t: int) -> None:
        """The recurrent columns of step t: the rollout's initial state, the episode starts, the
        behaviour log-prob, V(s_t) as seen while acting, and V(s'_t) in the state after the step
        where it is needed (a truncation, or the rollout's last step)."""
        if step.state is None or step.act_out.state is None:
            raise ValueError(
                "a recurrent policy needs the policy state: Transitions.state (the state obs "
                "was seen in) and ActOut.state; the engine passes both to agents with "
                "state_dim > 0"
            )
        n, dev = len(step.obs), self.device
        sa, sc = self._split_state(step.state, n)
        after_c = self._split_state(step.act_out.state, n)[1]
        with torch.no_grad():
            if step.act_out.logp is not None:
                r.logp[t] = torch.as_tensor(step.act_out.logp, device=dev)
            else:  # actions not drawn by act(explore=True): score them in the state they had
                out = self.policy.step(r.obs[t], sa)[0]
                r.logp[t] = self.policy.evaluate(out, r.action[t], self._legal(r.obs[t]))[0]
            value = step.act_out.extras.get("value")
            if value is None:
                r.value[t] = self._value_step(r.obs[t], sc)[0]
            else:
                r.value[t] = torch.as_tensor(value, dtype=torch.float32, device=dev)
            if t == self.params.n_steps - 1 or bool(np.any(step.truncated)):
                r.next_value[t] = self._value_step(r.next_obs[t], after_c)[0]
        if t == 0:
            r.state0.copy_(torch.as_tensor(step.state, device=dev))
        # An episode starts at t where the previous step (of this rollout or the last) ended one,
        # or where the row was absent: the engine holds an absent row's state where its episode
        # ended, at the initial one (docs/envs.md, "Active mask"), which a replay through the
        # absent steps would move.
        r.starts[t] = self._prev_done
        ended = step.terminated | step.truncated
        if step.active is not None:
            ended = ended | ~np.asarray(step.active, bool)
        self._prev_done = torch.as_tensor(ended, device=dev)

    # -- what an update reads -------------------------------------------------------------------

    @torch.no_grad()
    def rollout_values(self) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s_t) and V(s'_t) over the rollout, ``[T, N]`` each, without gradients: under the
        current critic (feedforward), or as seen while acting (recurrent)."""
        r = self.rollout
        assert r is not None
        if self.recurrent:
            return r.value, next_values_seen(r.value, r.next_value, r.done, r.terminated)
        T, n = r.shape
        # Both ends of every step, in two batched passes.
        values = self.critic(r.obs.flatten(0, 1)).view(T, n)
        next_values = self.critic(r.next_obs.flatten(0, 1)).view(T, n)
        return values, next_values

    def minibatches(self, batch_size: int) -> list[Minibatch]:
        """One epoch's minibatches, shuffled with the agent's generator: ``batch_size`` steps
        each, or (recurrent) whole env-copy sequences, ``max(1, batch_size // T)`` copies each,
        as sb3-contrib's RecurrentPPO keeps sequences whole."""
        assert self.rollout is not None
        T, n = self.rollout.shape
        if self.recurrent:
            perm = torch.randperm(n, generator=self.gen, device=self.device)
            per = max(1, batch_size // T)
            steps = n * torch.arange(T, device=self.device)[:, None]
            return [
                Minibatch((perm[i : i + per].unsqueeze(0) + steps).flatten(), perm[i : i + per])
                for i in range(0, n, per)
            ]
        perm = torch.randperm(T * n, generator=self.gen, device=self.device)
        return [Minibatch(perm[i : i + batch_size]) for i in range(0, T * n, batch_size)]

    def _sequences(
        self, mb: Minibatch | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(obs, action, state0, starts) of the minibatch's copies, time-major."""
        r = self.rollout
        assert r is not None
        if mb is None:
            return r.obs, r.action, r.state0, r.starts
        c = mb.copies
        return r.obs[:, c], r.action[:, c], r.state0[c], r.starts[:, c]

    def log_probs(self, mb: Minibatch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a_t | history) of the stored actions and the policy entropy, flat over the
        minibatch's rows (None: the whole rollout), with gradients."""
        r = self.rollout
        assert r is not None
        if self.recurrent:
            obs, action, state0, starts = self._sequences(mb)
            out, _ = self.policy.sequence(obs, state0[:, : self.actor_state_dim], starts)
            logp, entropy = self.policy.evaluate(out, action, self._legal(obs))
            return logp.flatten(), entropy.flatten()
        obs, action = r.obs.flatten(0, 1), r.action.flatten(0, 1)
        if mb is not None:
            obs, action = obs[mb.rows], action[mb.rows]
        return evaluate_actions(self.policy, obs, action, self._legal(obs))

    def values(self, mb: Minibatch | None = None) -> torch.Tensor:
        """V of the minibatch's steps (None: the whole rollout), flat, with gradients."""
        r = self.rollout
        assert r is not None
        if isinstance(self.critic, RecurrentCritic):
            obs, _, state0, starts = self._sequences(mb)
            return self.critic.sequence(obs, state0[:, self.actor_state_dim :], starts)[0].flatten()
        if self.recurrent:  # a feedforward critic beside a recurrent policy
            return self.critic(self._sequences(mb)[0]).flatten()
        obs = r.obs.flatten(0, 1)
        return self.critic(obs if mb is None else obs[mb.rows])

    def update(self) -> dict[str, float]:
        """The algorithm's update on the finished ``self.rollout``; returns its metrics."""
        raise NotImplementedError

    # -- the rest -------------------------------------------------------------------------------

    def check_schedules(self, *names: str) -> None:
        """Refuse a schedule param (by name) other than "constant" or "linear", and "linear"
        without ``params.total_steps``."""
        for name in names:
            kind = getattr(self.params, name)
            if kind not in ("constant", "linear"):
                raise ValueError(f"{name} must be 'constant' or 'linear'")
            if kind == "linear" and self.params.total_steps <= 0:
                raise ValueError(f"{name} = 'linear' needs total_steps > 0")

    def schedule(self, value: float, kind: str) -> float:
        """``value`` as set ("constant"), or decayed linearly to 0 over ``params.total_steps``."""
        if kind == "constant":
            return value
        return value * max(0.0, 1.0 - self.env_steps / self.params.total_steps)

    @staticmethod
    def gradient_step(
        opt: torch.optim.Optimizer, loss: torch.Tensor, params: Any, max_grad_norm: float = 0.0
    ) -> None:
        """One optimizer step on ``loss``, the gradient norm of ``params`` clipped to
        ``max_grad_norm`` (0: not clipped)."""
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm > 0:
            nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()

    def state_dict(self) -> dict[str, Any]:
        # The rollout in progress is not saved: a resumed agent starts a fresh one.
        state: dict[str, Any] = {"algo": self.algo}
        state.update({name: getattr(self, name).state_dict() for name in self.checkpoint})
        # The sampling stream (actions, minibatch order): a resumed agent draws what the
        # uninterrupted one would have drawn.
        streams = {"gen": self.gen.get_state()}
        return state | {"env_steps": self.env_steps, "updates": self.updates, "streams": streams}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.checkpoint:
            saved = state.get(name, {}) if name == "obs_norm" else state[name]
            getattr(self, name).load_state_dict(saved)
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        if "streams" in state:  # (checkpoints from before they were saved have none)
            self.gen.set_state(state["streams"]["gen"])
        if self.rollout is not None:
            self.rollout.t = 0
