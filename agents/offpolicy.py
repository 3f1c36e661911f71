"""The off-policy base (DDPG, TD3, SAC, DQN and any new off-policy algorithm): what every one
of them does the same way, so that an algorithm file holds its ``Params``, its networks and its
losses.

:class:`OffPolicy` owns

* acting: uniform random actions for the first ``learning_starts`` env steps, the policy's
  action (through the numpy forward pass on the CPU where it applies), exploration on top of it
  (:meth:`OffPolicy.explore`: the action noise; NoisyNet layers redrawn per act batch), and the
  policy state rows of a recurrent agent, every network's core advanced each step;
* building networks from parts (:meth:`OffPolicy.net`: RBF features or a recurrent core before
  a head), target networks (:meth:`OffPolicy.target`, Polyak averaging), optimizer steps;
* ``learn``: the batch as a view (``agents/parts/batch.py``), so that the algorithm's
  :meth:`update` is written once for transitions and for replayed sequences, and its new
  priorities;
* ``state_dict`` / ``load_state_dict`` from the declared ``saved`` attributes, ``needs``,
  ``observe`` (counters, input statistics, noise restarts) and ``check_member``;
* action masks (``SpaceInfo.action_mask``): an algorithm that declares ``masks = True`` gets
  the legal actions of each row (``agents/parts/masks.py``) in :meth:`OffPolicy.decide_legal`,
  :meth:`OffPolicy.explore` and the warm-up draws; any other refuses a masked space.

It is a mixin, listed before :class:`wheeler2.agent.Agent` (``class TD3(OffPolicy, Agent)``):
the registry takes the one Agent subclass a module of ``agents/`` defines for its algorithm,
and this module defines none. The step helpers below (one fused Adam call, gradients of the
actor's parameters only) are shared with the detached explorer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from wheeler2.agents.normalize import IdentityNorm, make_obs_norm
from wheeler2.agents.parts import resolve_device
from wheeler2.agents.parts.batch import SequenceView, StepView
from wheeler2.agents.parts.encoders import (
    feature_dim,
    image_encoder,
    image_feature_dim,
    image_features_,
    random_shift,
    rbf_features_,
    shift_offsets,
)
from wheeler2.agents.parts.masks import legal_actions_np, random_legal, refuse_mask
from wheeler2.agents.parts.noisy import noise_off, noisy_layers
from wheeler2.agents.parts.numpy_forward import NumpyForward, is_decided_by_forward
from wheeler2.agents.parts.targets import frozen_copy, polyak_
from wheeler2.agents.recurrent import RecurrentNet, core_problem, state_rows

from wheeler2.agent import ActOut, Batch, LearnOut, ParamError, SpaceInfo, Transitions
from wheeler2.checkpoint import generator_state, set_generator_state
from wheeler2.needs import AgentNeeds

View = StepView | SequenceView


def image_problem(params: Any, space: SpaceInfo) -> tuple[str, str] | None:
    """(key, what is wrong) when these params cannot serve ``space``'s observations (image
    keys on flat observations, flat-only options on images); None when they fit."""
    image = bool(space.obs_shape)
    if not image:
        for key in ("encoder", "augment"):
            value = getattr(params, key, None)
            if value not in (None, "auto", "none"):
                return (key, f"{key} = {value!r} needs image observations; this env's are flat")
        return None
    if getattr(params, "normalize_obs", False):
        return (
            "normalize_obs",
            "image observations are scaled inside the encoder: leave normalize_obs out",
        )
    if getattr(params, "features", "none") != "none":
        return (
            "features",
            f'features = "{params.features}" encodes flat observations; images '
            'go through the encoder (encoder = "nature_cnn" or "impala")',
        )
    return None


def offpolicy_needs(params: Any) -> AgentNeeds:
    """An off-policy learner's needs: its discount, warm-up, sequences and device."""
    return AgentNeeds(
        gamma=float(params.gamma),
        replay_min_size=int(params.learning_starts),
        # (an algorithm that is feedforward only has no SequenceParams)
        sequence=getattr(params, "replay_sequence", None),
        device=params.device,
    )


class OffPolicy:
    """The base of an off-policy algorithm; see the module docstring.

    An algorithm sets ``discrete`` (its action space), ``saved`` (checkpoint key -> attribute:
    networks, targets, optimizers, tensors, generators), ``policy`` (the attribute of the
    network that acts and that explorers sync from) and writes ``__init__`` (networks through
    :meth:`net`, :meth:`target`, :meth:`optimizer`), :meth:`decide` (an action from the policy
    network's input) and :meth:`update` (its losses on a view).
    """

    uses_replay: ClassVar[bool] = True
    discrete: ClassVar[bool] = False
    saved: ClassVar[dict[str, str]] = {}
    # Checkpoint keys renamed since a checkpoint was written: old -> new, read by load_state_dict.
    renamed: ClassVar[dict[str, str]] = {}
    policy: ClassVar[str] = "actor_net"
    # The policy samples its actions (SAC): the numpy path serves only the deterministic one.
    stochastic: ClassVar[bool] = False
    # Uniform random actions for the first learning_starts env steps (DQN: epsilon-greedy).
    random_warmup: ClassVar[bool] = True
    # It keeps to the legal actions of a masked space (decide_legal, explore with legal).
    masks: ClassVar[bool] = False

    space: SpaceInfo
    params: Any
    device: torch.device
    state_dim: int

    def __init__(self, space: SpaceInfo, params: Any, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)  # type: ignore[call-arg]
        name = type(self).__name__
        if space.action_mask and not self.masks:
            raise refuse_mask(name)
        if space.discrete != self.discrete:
            kind = "a discrete" if self.discrete else "a continuous (Box)"
            raise ValueError(f"{name} needs {kind} action space")
        problem = core_problem(params) or image_problem(params, space)
        if problem is not None:
            raise ParamError(problem[0], f"{problem[0]}: {problem[1]}")
        p = params
        self.recurrent = getattr(p, "core", "none") != "none"
        self.head_names = space.heads
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=self.device)
        # Each head's share of a sample's priority (head_priority): |c_h| / sum |c_h|, so that a
        # head of negative weight (a cost) counts by its size; a plain mean if every c_h is 0.
        size = self.head_w.abs()
        total = float(size.sum())
        self.priority_w = size / total if total > 0 else torch.full_like(size, 1 / len(size))
        self.masked = space.action_mask
        # The mask columns stay 0 / 1 in every normalized row a loss reads them from.
        mask_cols = space.act_dim if self.masked else 0
        self.obs_norm = make_obs_norm(
            p.normalize_obs, space.obs_dim, p.obs_clip, self.device, keep_last=mask_cols
        )
        self.rng = np.random.default_rng(seed + 2)  # warm-up actions
        self.noise: Any = None  # an action noise process (agents/noise.py), if any
        # Set by a restore: the resumed run's envs start new episodes, so every copy's noise
        # process restarts at the next draw (a loaded pink sequence would carry on mid-drift).
        self.noise_restart = False
        # The noise of NoisyNet layers (redrawn per act batch), drawn on the CPU from the seed.
        self.noise_gen = torch.Generator().manual_seed(seed + 3)
        self.state_dim = 0
        self.cores: list[RecurrentNet] = []  # the networks with a core, in policy-state order
        self.target_params: list[torch.Tensor] = []
        self.online_params: list[torch.Tensor] = []
        self.env_steps = 0
        self.updates = 0
        self.last_actor_loss: Any = 0.0
        # DrQ's random shift of the images each update trains on (never of what it acts on).
        self.augment = bool(space.obs_shape) and getattr(p, "augment", "none") == "shift"
        self.aug_gen = torch.Generator().manual_seed(seed + 5)

    # -- building ------------------------------------------------------------------------------

    def net(
        self,
        body: Callable[[int], nn.Module],
        *,
        critic: bool = False,
        actions: str | None = None,
    ) -> nn.Module:
        """A network from parts: the head ``body(input width)`` after the observation encoder
        (the observation itself, or its RBF features with ``features = "rbf"``), or after a
        recurrent core (:class:`RecurrentNet`, whose state joins the policy state). ``critic``
        and ``actions`` are the recurrent network's sync declarations (a critic has no roles)."""
        p, obs_dim, shape = self.params, self.space.obs_dim, self.space.obs_shape
        kind = getattr(p, "encoder", "auto")
        if self.recurrent:
            net: nn.Module = RecurrentNet(
                p.core,
                obs_dim,
                p.core_size,
                p.trunk_reads,
                body,
                name="q" if critic else "mlp",
                roles=not critic,
                actions=actions,
                # Images: the core reads the encoder's features, not the pixels.
                encoder=image_encoder(kind, shape) if shape else None,
            )
            size = net.core.state_dim
            net.state_at = (self.state_dim, self.state_dim + size)
            self.state_dim += size
            self.cores.append(net)
        elif shape:
            net = body(image_feature_dim(kind, shape))
            image_features_(net, kind, shape)
        else:
            features = getattr(p, "features", "none")
            net = body(feature_dim(features, obs_dim, getattr(p, "rbf_centers", 0)))
            if features == "rbf":
                rbf_features_(net, obs_dim, p.rbf_centers, p.rbf_width, p.rbf_seed)
        return net.to(self.device)

    def target(self, net: nn.Module) -> nn.Module:
        """A target network of ``net``: a frozen copy that :meth:`update_targets` moves."""
        copy = frozen_copy(net)
        self.target_params += list(copy.parameters())
        self.online_params += list(net.parameters())
        return copy

    @staticmethod
    def optimizer(
        net: nn.Module, lr: float, fused: bool | None = True, **options: Any
    ) -> tuple[torch.optim.Adam, list[torch.Tensor]]:
        """(Adam over ``net``'s parameters, with ``options`` such as ``betas``, and those
        parameters as a list)."""
        params = list(net.parameters())
        return torch.optim.Adam(params, lr=lr, fused=fused, **options), params

    # -- acting --------------------------------------------------------------------------------

    @property
    def actor(self) -> nn.Module:
        return getattr(self, self.policy)

    @cached_property
    def fast_actor(self) -> NumpyForward | None:
        """The policy's numpy forward pass, where it applies (CPU, no input normalization, no
        action mask: its output is the action itself, with no place to leave out illegal ones;
        a ``decide`` marked :func:`decides_by_forward`)."""
        if self.recurrent or self.masked or not isinstance(self.obs_norm, IdentityNorm):
            return None
        if not is_decided_by_forward(type(self).decide):
            return None
        return NumpyForward.of(self.actor, squash=True)

    @cached_property
    def noisy(self) -> list[nn.Module]:
        """The policy's NoisyNet layers (redrawn per act batch when exploring)."""
        return noisy_layers(self.actor)

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        n = len(obs)
        # From the raw rows: the mask columns are the env's, whatever the input normalization.
        legal = legal_actions_np(obs, self.space.act_dim) if self.masked else None
        warm = self.random_warmup and explore and self.env_steps < self.params.learning_starts
        if warm and not self.recurrent:
            # Uniform actions fill the buffer with diverse data before the policy means anything.
            return ActOut(action=self.uniform(n, legal))
        if self.noisy and explore:  # one draw of the parameter noise per act batch
            for layer in self.noisy:
                layer.resample(self.noise_gen)
        if self.noisy and not explore:  # evaluation acts on the mean weights
            with noise_off(self.actor):
                a, nxt = self._forward(obs, False, state, legal)
        else:
            a, nxt = self._forward(obs, explore and not warm, state, legal)
        if warm:  # a recurrent policy ran all the same: its state moves along the episode
            a = self.uniform(n, legal)
        elif explore:
            a = self.explore(a) if legal is None else self.explore(a, legal)
        return ActOut(
            action=a.astype(np.int64 if self.discrete else np.float32, copy=False), state=nxt
        )

    def uniform(self, n: int, legal: np.ndarray | None = None) -> np.ndarray:
        """Warm-up actions: uniform in [-1, 1], or among the ``legal [n, act_dim]`` actions."""
        if legal is not None:
            return random_legal(self.rng, legal)
        return self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)

    def _forward(
        self,
        obs: np.ndarray,
        sample: bool,
        state: np.ndarray | None,
        legal: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(the policy's action, among the ``legal`` ones where given; the next policy state
        or None)."""
        fast = self.fast_actor
        if fast is not None and not (sample and self.stochastic):
            return fast(obs), None
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            x = self.obs_norm.normalize(x)
            lt = None if legal is None else torch.as_tensor(legal, device=self.device)
            if not self.recurrent:
                return self._decide(x, sample, lt).cpu().numpy(), None
            h = state_rows(state, len(obs), self.state_dim, self.device)
            # Every core steps, the critic's on random actions too: the state stored with each
            # transition must be the one every network reaches along the episode.
            states = []
            for net in self.cores:
                lo, hi = net.state_at
                features, s = net.step(x, h[:, lo:hi])
                states.append(s)
                if net is self.actor:
                    z = features
            a = self._decide(z, sample, lt)
            return a.cpu().numpy(), torch.cat(states, dim=1).cpu().numpy()

    def _decide(self, z: torch.Tensor, sample: bool, legal: torch.Tensor | None) -> torch.Tensor:
        return self.decide(z, sample) if legal is None else self.decide_legal(z, sample, legal)

    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        """The policy's action from its layers' input ``z`` (``sample``: explore by sampling)."""
        raise NotImplementedError

    def decide_legal(self, z: torch.Tensor, sample: bool, legal: torch.Tensor) -> torch.Tensor:
        """:meth:`decide` among the ``legal [N, act_dim]`` actions (an algorithm with ``masks =
        True`` writes it)."""
        raise NotImplementedError

    def explore(self, a: np.ndarray, legal: np.ndarray | None = None) -> np.ndarray:
        """Exploration on top of the policy's action: the action noise (none with NoisyNet
        layers, which explore by themselves). ``legal [N, act_dim]`` (masked spaces): the
        actions exploration may pick from."""
        if self.noise is None or self.noisy:
            return a
        if self.noise_restart:
            self.noise.reset(np.ones(len(a), bool))
            self.noise_restart = False
        return np.clip(a + self.noise(len(a)), -1.0, 1.0)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.env_steps += len(step.obs)
        # Acting data only (evaluation never calls observe), and real rows only: an absent
        # agent's row repeats a stale observation.
        self.obs_norm.update(step.obs if step.active is None else step.obs[step.active])
        if self.noise is not None:
            done = np.logical_or(step.terminated, step.truncated)
            if done.any():
                self.noise.reset(done)
        return None

    # -- learning ------------------------------------------------------------------------------

    def learn(self, batch: Batch) -> LearnOut:
        p = self.params
        if self.augment:
            batch = self.shifted(batch)
        if self.recurrent:
            name = type(self).__name__
            v: View = SequenceView.of(
                batch, self.obs_norm, self.state_dim, name, p.seq_burn_in, p.seq_eta
            )
        else:
            v = StepView.of(batch, self.obs_norm)
        metrics, abs_td = self.update(v)
        return LearnOut(metrics=metrics, td_error=v.priority(abs_td))

    def shifted(self, batch: Batch) -> Batch:
        """The batch with DrQ's random shift on its observations and next observations
        (``augment = "shift"``, ``shift_pad`` pixels): each row shifted on its own, or for a
        recurrent learner one offset per sequence, shared by its obs and next obs at every step
        (``next_obs[t]`` is ``obs[t + 1]``: the core must not see the frame jitter in place)."""
        shape, pad, gen = self.space.obs_shape, int(self.params.shift_pad), self.aug_gen
        if self.recurrent:
            offsets = shift_offsets(batch.obs.shape[0], pad, gen, batch.obs.device)
            obs = random_shift(batch.obs, shape, pad, gen, offsets)
            next_obs = random_shift(batch.next_obs, shape, pad, gen, offsets)
            return dataclasses.replace(batch, obs=obs, next_obs=next_obs)
        obs = random_shift(batch.obs, shape, pad, gen)
        next_obs = random_shift(batch.next_obs, shape, pad, gen)
        return dataclasses.replace(batch, obs=obs, next_obs=next_obs)

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        """The algorithm's gradient step(s) on ``v``: (metrics, each sample's |TD error|)."""
        raise NotImplementedError

    def critic_step(self, loss: torch.Tensor, grads: list[torch.Tensor] | None = None) -> None:
        """The critic's step on ``loss`` (or on its ``grads`` when they were taken): one update."""
        p = self.params
        if grads is None:
            loss_step(loss, self.critic_opt, self.critic_params, p.max_grad_norm)
        else:
            grads_step(grads, self.critic_opt, self.critic_params, p.max_grad_norm)
        self.updates += 1

    def actor_step(self, loss: torch.Tensor, grads: list[torch.Tensor] | None = None) -> None:
        """The actor's step on ``loss``, whose gradient runs through a critic it does not train
        (or on its ``grads`` when they were taken)."""
        p = self.params
        if grads is None:
            actor_step(loss, self.actor_opt, self.actor_params, p.max_grad_norm)
        else:
            grads_step(grads, self.actor_opt, self.actor_params, p.max_grad_norm)
        self.last_actor_loss = loss.detach()

    def update_targets(self, tau: float | None = None) -> None:
        """theta' <- tau theta + (1 - tau) theta' for every target network."""
        polyak_(self.target_params, self.online_params, self.params.tau if tau is None else tau)

    def head_priority(self, abs_td: torch.Tensor) -> torch.Tensor:
        """Each sample's priority from its heads' ``abs_td [..., H]``: their mean weighted by
        the heads' absolute weights (``priority_w``)."""
        return (abs_td * self.priority_w).sum(-1)

    def report(self, head_losses: torch.Tensor | None, **values: Any) -> dict[str, float]:
        """Metrics from scalar tensors (one device sync), and each head's critic loss."""
        stats = torch.stack([torch.as_tensor(v, device=self.device) for v in values.values()])
        metrics = dict(zip(values, stats.tolist()))
        if head_losses is not None and len(self.head_names) > 1:
            for name, loss in zip(self.head_names, head_losses.detach().tolist()):
                metrics[f"critic_loss/{name}"] = loss
        return metrics

    # -- the engine's questions, checkpoints -----------------------------------------------------

    @classmethod
    def needs(cls, params: Any) -> AgentNeeds:
        return offpolicy_needs(params)

    @staticmethod
    def check_member(
        params: Any, *, role: str, heads: tuple[str, ...], syncs: bool
    ) -> tuple[str, str] | None:
        """(key, problem) when these params do not combine (raised as a ConfigError)."""
        return core_problem(params)

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain values only: checkpoints load with weights_only=True.
        state: dict[str, Any] = {"algo": type(self).__module__.rsplit(".", 1)[-1]}
        for key, attr in self.saved.items():
            obj = getattr(self, attr)
            if isinstance(obj, torch.Generator):
                state[key] = obj.get_state()
            elif isinstance(obj, torch.Tensor):
                state[key] = obj.detach().clone()
            else:
                state[key] = obj.state_dict()
        state |= {"env_steps": self.env_steps, "updates": self.updates}
        return state | {"obs_norm": self.obs_norm.state_dict(), "streams": self.stream_state()}

    def stream_state(self) -> dict[str, Any]:
        """The random streams acting and learning draw from, beyond the ``saved`` generators:
        warm-up actions (DQN: epsilon-greedy), NoisyNet noise and the action noise process, so
        a resumed agent draws what the uninterrupted one would have drawn, but for the action
        noise's restart on every copy (its envs start new episodes)."""
        streams: dict[str, Any] = {
            "rng": generator_state(self.rng),
            "noise_gen": self.noise_gen.get_state(),
        }
        if self.augment:
            streams["aug_gen"] = self.aug_gen.get_state()
        if self.noise is not None:
            streams["noise"] = self.noise.state_dict()
        return streams

    def load_stream_state(self, streams: dict[str, Any]) -> None:
        set_generator_state(self.rng, streams["rng"])
        self.noise_gen.set_state(streams["noise_gen"])
        if "aug_gen" in streams:
            self.aug_gen.set_state(streams["aug_gen"])
        if self.noise is not None and "noise" in streams:
            self.noise.load_state_dict(streams["noise"])
            self.noise_restart = True

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = {self.renamed.get(k, k): v for k, v in state.items()}
        for key, attr in self.saved.items():
            obj = getattr(self, attr)
            if isinstance(obj, torch.Generator):
                if key in state:  # (checkpoints from before it was saved have none)
                    obj.set_state(state[key])
            elif isinstance(obj, torch.Tensor):
                with torch.no_grad():
                    obj.copy_(state[key])
            else:
                obj.load_state_dict(state[key])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))
        if "streams" in state:  # (checkpoints from before they were saved have none)
            self.load_stream_state(state["streams"])


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
