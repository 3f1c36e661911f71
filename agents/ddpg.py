"""DDPG (Lillicrap et al., 2016) with one critic per reward head.

Each head h has its own Q_h(s, a) trained on its own reward column; one actor maximizes the
weighted sum of the heads' values. With a single head this is plain DDPG as in SB3 / the paper:

    y_h        = r_h + discount * Q'_h(s', mu'(s'))
    L_critic   = sum_h  mean_i  w_i (y_ih - Q_h(s_i, a_i))^2        (w = importance weights)
    L_actor    = - mean_i  sum_h  c_h Q_h(s_i, mu(s_i))             (c = task head weights)
    theta'     <- tau theta + (1 - tau) theta'

Recurrent DDPG (``core = "gru"`` or ``"lstm"``, issue 15): actor and critic each read the
observation history through a core of their own (``agents/recurrent.py``) and learn from replayed
sequences with the stored policy state and a burn-in (R2D2), as recurrent TD3 does: the losses
above hold per trained position, averaged over the positions of the sequences' ``mask``, and a
sequence's priority is ``seq_eta max|delta| + (1 - seq_eta) mean|delta|``. The per-head critics,
the action noise kinds, ``noisy`` (on the MLP's last layer), ``normalize_heads`` and
``normalize_obs`` carry over; RBF ``features`` and a detached ``head`` explorer do not (refused).

Defaults are the rl-zoo Pendulum-v1 hyperparameters, so that config stays short.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from agents.detached import HeadActorTrainer, head_problem
from agents.nets import (
    DeterministicActor,
    NumpyForward,
    QCritic,
    feature_dim,
    noise_off,
    noisy_head_,
    noisy_layers,
    rbf_features_,
    resample_noise,
    resolve_device,
    seeded,
)
from agents.noise import KINDS, make_noise
from agents.normalize import IdentityNorm, make_obs_norm
from agents.offpolicy import ActorCriticSteps
from agents.recurrent import (
    RecurrentActor,
    SequenceParams,
    Sequences,
    core_problem,
    offpolicy_needs,
    recurrent_actor_critic,
    state_rows,
    step_two_cores,
)
from wheeler2.agent import ActOut, Agent, Batch, LearnOut, SequenceBatch, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds
from wheeler2.schema import bounded, choice, sizes

Net = Callable[..., torch.Tensor]


@dataclass
class Params(SequenceParams):
    # The recurrent options (core, core_size, core_skip, seq_*) come from SequenceParams.
    # Bounds in the fields are checked by the config reader against [team.params].
    gamma: float = bounded(0.98, ge=0, le=1)  # discount (the buffer applies it for n-step)
    tau: float = bounded(0.005, gt=0, le=1)  # Polyak rate of the target networks
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam step sizes above 1 only diverge
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    hidden: list[int] = sizes(400, 300)  # actor and critic layers
    # Env steps of uniform random actions before the policy acts.
    learning_starts: int = bounded(10_000, ge=0)
    # Exploration noise kind (agents/noise.py): white, 1/f, 1/f^noise_beta, Ornstein-Uhlenbeck.
    noise: str = choice("gaussian", KINDS)
    noise_std: float = bounded(0.1, ge=0)  # std of the action noise, in [-1, 1] action units
    # Spectrum exponent of "colored" noise: 0 white, 1 pink, 2 red; the paper's range.
    noise_beta: float = bounded(1.0, ge=0, le=2)
    # Steps per "pink" / "colored" sequence: the longest correlation. The paper uses the episode
    # length; 1000 is that of most MuJoCo tasks (set it to the env's own).
    noise_horizon: int = bounded(1000, ge=2)
    ou_theta: float = bounded(0.15, ge=0)  # Ornstein-Uhlenbeck mean reversion rate
    ou_dt: float = bounded(1e-2, gt=0)  # Ornstein-Uhlenbeck time step
    policy_delay: int = bounded(1, ge=1)  # actor (and target) update every k critic updates
    max_grad_norm: float = bounded(0.0, ge=0)  # gradient clipping of both nets; 0 = off
    # "separate": one MLP per head | "shared": one trunk, H outputs.
    critic: str = choice("separate", ("separate", "shared"))
    normalize_heads: bool = False  # divide each head's Q by its running std in the actor loss
    normalize_obs: bool = False  # running mean/std of observed inputs (agents/normalize.py)
    obs_clip: float = bounded(5.0, gt=0)  # normalized inputs are clipped to [-obs_clip, obs_clip]
    head_norm_decay: float = bounded(0.99, ge=0, lt=1)  # EMA decay of those running Q statistics
    device: str = "cpu"  # "cpu" | "cuda"
    # The feedforward learner's gradients by torch.func, each loss one torch.compile graph
    # (inductor: a C++ compiler on the CPU, triton on CUDA); the first steps wait for it.
    compile: bool = False
    # Parameter-space exploration (NoisyNet, Fortunato et al. 2018): the actor's last layer is a
    # factorized-Gaussian NoisyLinear, its noise redrawn per act batch and per learn step; it
    # replaces the action noise (`noise` is then unused); the target actor uses mean weights.
    noisy: bool = False
    noisy_sigma0: float = bounded(0.5, gt=0)  # initial sigma * sqrt(fan_in); the paper's 0.5
    # "rbf": Gaussian RBF features of the (normalized) observation before the first layer of
    # actor and critic (agents/nets.py RBFEncoder); "none": the observation itself.
    features: str = choice("none", ("none", "rbf"))
    rbf_centers: int = bounded(64, ge=1)  # number of centers, drawn from N(0, I)
    rbf_width: float = bounded(0.0, ge=0)  # kernel width; 0 = sqrt(obs_dim)
    rbf_seed: int = bounded(0, ge=0)  # seed of the centers (members with one seed share them)
    # Detached per-head explorer (agents/detached.py): on an explorer, the reward head whose
    # critic, pulled from the learner each sync, its own actor is trained against; "" = none.
    head: str = ""
    head_updates: float = bounded(0.5, gt=0)  # its actor's updates per env step it takes
    head_batch: int = bounded(256, ge=1)  # states per actor update
    head_states: int = bounded(10_000, ge=1)  # its last observations those states come from


class DDPG(ActorCriticSteps, Agent):
    Params = Params
    uses_replay = True

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return offpolicy_needs(params)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        if space.discrete:
            raise ValueError("DDPG needs a continuous (Box) action space")
        if params.policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {params.policy_delay}")
        problem = core_problem(params)
        if problem is not None:
            raise ValueError(f"{problem[0]}: {problem[1]}")
        p, dev = params, self.device
        self.head_names = space.heads
        self.recurrent = p.core != "none"
        in_dim = feature_dim(p.features, space.obs_dim, p.rbf_centers)
        with seeded(seed):
            if self.recurrent:
                self.actor_net, self.critic, self.core_state = recurrent_actor_critic(
                    RecurrentActor, p, space, twin=False
                )
                self.state_dim = 2 * self.core_state
            else:
                self.actor_net = DeterministicActor(in_dim, p.hidden, space.act_dim, "relu")
                self.critic = QCritic(
                    in_dim, space.act_dim, p.hidden, space.num_heads, p.critic, "relu"
                )
            if p.noisy:
                noisy_head_(
                    self.actor_net.mlp if self.recurrent else self.actor_net, p.noisy_sigma0
                )
        if p.features == "rbf":
            for net in (self.actor_net, self.critic):
                rbf_features_(net, space.obs_dim, p.rbf_centers, p.rbf_width, p.rbf_seed)
        self.actor_net.to(dev)
        self.critic.to(dev)
        self.actor_target = _frozen_copy(self.actor_net)
        if p.noisy:
            self.actor_target.eval()  # the target actor acts with the mean weights
        # The actor's parameter noise, drawn on the CPU from the agent's seed.
        self.noise_gen = torch.Generator().manual_seed(seed + 3)
        # The actor's noisy layers, listed once: act and learn redraw their noise.
        self._noisy = nn.ModuleList(noisy_layers(self.actor_net))
        self.critic_target = _frozen_copy(self.critic)
        self.actor_opt = torch.optim.Adam(self.actor_net.parameters(), lr=p.lr_actor, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=p.lr_critic, fused=True)
        # Flat parameter lists, built once: the Polyak update and autograd take them every step.
        self.actor_params = list(self.actor_net.parameters())
        self.critic_params = list(self.critic.parameters())
        self.target_params = list(self.actor_target.parameters()) + list(
            self.critic_target.parameters()
        )
        self.online_params = self.actor_params + self.critic_params

        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=dev)
        # Running mean and mean square of each head's Q(s, mu(s)), for normalize_heads.
        self.head_q_mean = torch.zeros(space.num_heads, device=dev)
        self.head_q_sq = torch.ones(space.num_heads, device=dev)

        self.obs_norm = make_obs_norm(p.normalize_obs, space.obs_dim, p.obs_clip, dev)
        # Acting on the CPU without input normalization goes through numpy (see NumpyForward).
        self.fast_actor = (
            NumpyForward.of(self.actor_net, squash=True)
            if isinstance(self.obs_norm, IdentityNorm) and not self.recurrent
            else None
        )
        self.noise = make_noise(
            p.noise,
            p.noise_std,
            space.act_dim,
            seed + 1,
            beta=p.noise_beta,
            horizon=p.noise_horizon,
            theta=p.ou_theta,
            dt=p.ou_dt,
        )
        self.rng = np.random.default_rng(seed + 2)
        self.env_steps = 0
        self.updates = 0
        self.last_actor_loss = 0.0
        # A detached explorer's actor learns in observe, against the critic it pulls.
        self.head_trainer: HeadActorTrainer | None = None
        if p.head:
            if p.head not in space.heads:
                raise ValueError(f"head {p.head!r} is not one of the task's heads {space.heads}")
            self.head_trainer = HeadActorTrainer(
                self.actor_net,
                self.critic,
                space.heads.index(p.head),
                self.actor_opt,
                space.obs_dim,
                window=p.head_states,
                batch=p.head_batch,
                per_step=p.head_updates,
                max_grad_norm=p.max_grad_norm,
                seed=seed + 4,
                device=dev,
            )

        # compile = true: the two losses' gradients by torch.func over the nets' weights, each
        # traced whole (forward and backward in one graph, no autograd engine in between). The
        # weights enter as views without autograd history: they share storage, so optimizer
        # steps, syncs and loads, all in place, are seen; and only the differentiated net's
        # gradients are computed (autograd prunes the critic's under the actor loss, a compiled
        # backward of module parameters would not).
        self._views = {
            name: {n: w.detach() for n, w in getattr(self, name).named_parameters()}
            for name in ("actor_net", "critic", "actor_target", "critic_target")
        }
        self._compiled: tuple[Any, Any] | None = None
        if p.compile:  # (core_problem refused it with a recurrent core)
            # One batch size, so no dynamic-shape guards: one graph each.
            self._compiled = (
                torch.compile(self._critic_grads, fullgraph=True, dynamic=False),
                torch.compile(self._actor_grads, fullgraph=True, dynamic=False),
            )

    @property
    def actor(self) -> nn.Module:
        return self.actor_net

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        n = len(obs)
        if self.recurrent:
            return self._act_recurrent(obs, explore, state)
        if explore and self.env_steps < self.params.learning_starts:
            # Uniform actions fill the buffer with diverse data before the policy means anything.
            a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
            return ActOut(action=a)
        if self.params.noisy:
            if explore:  # one draw of the parameter noise per act batch, no action noise
                resample_noise(self._noisy, self.noise_gen)
                a = self._act(obs)
            else:
                with noise_off(self.actor_net):
                    a = self._act(obs)
            return ActOut(action=a.astype(np.float32, copy=False))
        a = self._act(obs)
        if explore and self.params.noise != "none":
            a = np.clip(a + self.noise(n), -1.0, 1.0)
        return ActOut(action=a.astype(np.float32, copy=False))

    def _act_recurrent(self, obs: np.ndarray, explore: bool, state: np.ndarray | None) -> ActOut:
        n, p = len(obs), self.params
        if p.noisy and explore:  # one draw of the parameter noise per act batch
            resample_noise(self._noisy, self.noise_gen)
        quiet = noise_off(self.actor_net) if p.noisy and not explore else contextlib.nullcontext()
        with torch.inference_mode(), quiet:
            x = self.obs_norm.normalize(
                torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            )
            h = state_rows(state, n, self.state_dim, self.device)
            ya, h = step_two_cores(self.actor_net.core, self.critic.core, x, h)
            a = self.actor_net.on(ya, x).cpu().numpy()
            nxt = h.cpu().numpy()
        if explore and self.env_steps < p.learning_starts:
            a = self.rng.uniform(-1.0, 1.0, (n, self.space.act_dim)).astype(np.float32)
        elif explore and not p.noisy and p.noise != "none":
            a = np.clip(a + self.noise(n), -1.0, 1.0)
        return ActOut(action=a.astype(np.float32, copy=False), state=nxt)

    def _act(self, obs: np.ndarray) -> np.ndarray:
        if self.fast_actor is not None:
            return self.fast_actor(obs)
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            return self.actor_net(self.obs_norm.normalize(x)).cpu().numpy()

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        """Q_h(s, mu(s)) of each head, ``[N, H]``: evaluation holds it against each head's
        discounted return (the optional per-head value query of wheeler2/runtime/evaluation.py)."""
        with torch.inference_mode(), noise_off(self.actor_net):
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            x = self.obs_norm.normalize(x)
            return self.critic(x, self.actor_net(x)).cpu().numpy()

    def observe(self, step: Transitions) -> dict[str, float] | None:
        self.env_steps += len(step.obs)
        self.obs_norm.update(step.obs)  # acting data only: evaluation never calls observe
        done = np.logical_or(step.terminated, step.truncated)
        if done.any():
            self.noise.reset(done)
        trainer = self.head_trainer
        if trainer is not None:
            obs = step.obs if step.active is None else step.obs[step.active]
            trainer.observe(obs)
            if self.env_steps >= self.params.learning_starts:
                return trainer.train(len(obs))
        return None

    # Weight sync by name (wheeler2/sync.py): a learner offers its critic; a detached explorer
    # takes it (every head's nets: it reads head h's) instead of the learner's actor.
    def published_modules(self) -> dict[str, nn.Module]:
        return {"critic": self.critic}

    def pulled_modules(self) -> dict[str, nn.Module] | None:
        return {"critic": self.critic} if self.head_trainer is not None else None

    @staticmethod
    def check_member(
        params: Params, *, role: str, heads: tuple[str, ...], syncs: bool
    ) -> tuple[str, str] | None:
        """(key, problem) when these params cannot run in this role with these heads."""
        return core_problem(params) or head_problem(
            params.head, role, heads, syncs, params.normalize_obs
        )

    def learn(self, batch: Batch) -> LearnOut:
        p = self.params
        if p.noisy:  # one draw of the actor's noise per learn step (the target uses the means)
            resample_noise(self._noisy, self.noise_gen)
        if self.recurrent:
            return self.learn_sequences(batch)  # type: ignore[arg-type]
        obs, action = self.obs_norm.normalize(batch.obs), batch.action
        next_obs = self.obs_norm.normalize(batch.next_obs)
        args = (obs, action, next_obs, batch.reward, batch.discount, batch.weight)
        if self._compiled is not None:
            grads, (critic_loss, (head_losses, td, q_mean)) = self._compiled[0](*args)
            self._critic_step(critic_loss, list(grads.values()))
        else:
            critic_loss, (head_losses, td, q_mean) = self._critic_objective(
                self.critic, self.actor_target, self.critic_target, *args
            )
            self._critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            head_stats = (self.head_q_mean, self.head_q_sq)
            if self._compiled is not None:
                grads, (actor_loss, head_stats) = self._compiled[1](obs, *head_stats)
                self._actor_step(actor_loss, list(grads.values()))
            else:
                actor_loss, head_stats = self._actor_objective(
                    self.actor_net, self.critic, obs, head_stats
                )
                self._actor_step(actor_loss)
            if p.normalize_heads:
                self.head_q_mean.copy_(head_stats[0])
                self.head_q_sq.copy_(head_stats[1])

        with torch.no_grad():
            abs_td = td.detach().abs()
            # One priority per sample: the heads' |TD| averaged with the task's head weights.
            td_error = (abs_td * self.head_w).sum(-1) / self.head_w.sum()
            stats = torch.stack([critic_loss.detach(), q_mean]).tolist()
        return LearnOut(metrics=self._metrics(stats, head_losses), td_error=td_error.cpu().numpy())

    # The two losses of a feedforward batch, written once for both ways of taking their
    # gradients: the nets come in as callables (the modules, or their weights bound by
    # functional_call).
    def _critic_objective(
        self,
        critic: Net,
        actor_target: Net,
        critic_target: Net,
        obs: torch.Tensor,
        action: torch.Tensor,
        next_obs: torch.Tensor,
        reward: torch.Tensor,
        discount: torch.Tensor,
        weight: torch.Tensor,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(critic loss, (each head's loss [H], TD errors [B, H], mean Q))."""
        with torch.no_grad():
            q_next = critic_target(next_obs, actor_target(next_obs))  # [B, H]
            y = reward + discount.unsqueeze(-1) * q_next
        q = critic(obs, action)  # [B, H]
        td = y - q
        head_losses = (weight.unsqueeze(-1) * td.pow(2)).mean(0)  # [H]
        return head_losses.sum(), (head_losses, td, q.detach().mean())

    def _actor_objective(
        self, actor: Net, critic: Net, obs: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(actor loss, the heads' running Q statistics: updated by this batch with
        ``normalize_heads``, else ``stats`` as they came)."""
        q_pi = critic(obs, actor(obs))  # [B, H]
        if self.params.normalize_heads:
            scale, *stats = running_scale(q_pi.detach(), *stats, self.params.head_norm_decay)
            q_pi = q_pi / scale
        return -(q_pi * self.head_w).sum(-1).mean(), tuple(stats)

    def _bound(self, name: str, weights: dict[str, torch.Tensor] | None = None) -> Net:
        """Net ``name`` as a function of ``weights`` (default: views of its own)."""
        net, w = getattr(self, name), self._views[name] if weights is None else weights
        return lambda *x: functional_call(net, w, x)

    def _critic_grads(self, *args: torch.Tensor) -> Any:
        def loss(w: dict[str, torch.Tensor]) -> Any:
            nets = (self._bound("critic", w), self._bound("actor_target"))
            return self._critic_objective(*nets, self._bound("critic_target"), *args)

        return grad_and_value(loss, has_aux=True)(self._views["critic"])

    def _actor_grads(self, obs: torch.Tensor, *stats: torch.Tensor) -> Any:
        def loss(w: dict[str, torch.Tensor]) -> Any:
            return self._actor_objective(
                self._bound("actor_net", w), self._bound("critic"), obs, stats
            )

        return grad_and_value(loss, has_aux=True)(self._views["actor_net"])

    def learn_sequences(self, batch: SequenceBatch) -> LearnOut:
        """The DDPG step on B sequences, time-major inside: positions t of ``mask`` are the
        samples, each row weighted by its sequence's importance weight."""
        p = self.params
        s = Sequences.of(batch, self.obs_norm, self.state_dim, "DDPG")
        ha, hc = s.state.split(self.core_state, dim=1)
        with torch.no_grad():
            ya = s.next_features(self.actor_target.core, ha)
            yc = s.next_features(self.critic_target.core, hc)
            a_next = self.actor_target.on(ya, s.nxt)
            y = s.target(self.critic_target.on(yc, s.nxt, a_next))  # [T, B, H]
        feats = s.unroll(self.critic.core, hc, p.seq_burn_in)
        q = self.critic.on(feats, s.x, s.action)  # [T, B, H]
        td = y - q
        head_losses = s.weighted(td.pow(2))  # [H]
        critic_loss = head_losses.sum()

        self._critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            a_pi = self.actor_net.on(s.unroll(self.actor_net.core, ha, p.seq_burn_in), s.x)
            # The actor climbs Q; the critic's core is the critic's.
            q_pi = self.critic.on(feats.detach(), s.x, a_pi)  # [T, B, H]
            if p.normalize_heads:
                q_pi = q_pi / self._head_scale(q_pi.detach()[s.mask > 0])
            self._actor_step(-s.mean((q_pi * self.head_w).sum(-1)))

        with torch.no_grad():
            abs_td = (td.detach().abs() * self.head_w).sum(-1) / self.head_w.sum()  # [T, B]
            stats = torch.stack([critic_loss.detach(), s.mean(q.detach().mean(-1))]).tolist()
        return LearnOut(
            metrics=self._metrics(stats, head_losses), td_error=s.priority(abs_td, p.seq_eta)
        )

    def _head_scale(self, q_pi: torch.Tensor) -> torch.Tensor:
        """Running std of each head's Q, so heads of different reward scales pull equally."""
        scale, mean, sq = running_scale(
            q_pi, self.head_q_mean, self.head_q_sq, self.params.head_norm_decay
        )
        self.head_q_mean.copy_(mean)
        self.head_q_sq.copy_(sq)
        return scale

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain values only: checkpoints load with weights_only=True.
        return {
            "algo": "ddpg",  # lets resume name a member whose algo changed
            "actor": self.actor_net.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "head_q_mean": self.head_q_mean.clone(),
            "head_q_sq": self.head_q_sq.clone(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "obs_norm": self.obs_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_net.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.head_q_mean.copy_(state["head_q_mean"])
        self.head_q_sq.copy_(state["head_q_sq"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))


def running_scale(
    q: torch.Tensor, mean: torch.Tensor, sq: torch.Tensor, decay: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(each head's running std of Q floored at 1e-3, the updated running mean, mean square):
    an EMA of the batch's per-head statistics ``q`` [N, H]; pure, so it also runs traced."""
    mean = mean.lerp(q.mean(0), 1 - decay)
    sq = sq.lerp(q.pow(2).mean(0), 1 - decay)
    return (sq - mean.pow(2)).clamp_min(0.0).sqrt().clamp_min(1e-3), mean, sq


def _frozen_copy(net: nn.Module) -> nn.Module:
    target = copy.deepcopy(net)
    target.requires_grad_(False)
    return target
