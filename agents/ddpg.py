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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value
from wheeler2.agents.detached import HeadActorTrainer, head_problem
from wheeler2.agents.noise import NoiseParams, noise_from
from wheeler2.agents.offpolicy import OffPolicy, View
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.batch import StepView
from wheeler2.agents.parts.encoders import AugmentParams
from wheeler2.agents.parts.heads import DeterministicActor, QCritic
from wheeler2.agents.parts.noisy import noise_off, noisy_head_, resample_noise
from wheeler2.agents.parts.numpy_forward import decides_by_forward
from wheeler2.agents.recurrent import SequenceParams, body, core_problem

from wheeler2.agent import Agent, SpaceInfo, Transitions
from wheeler2.schema import bounded, choice, sizes

Net = Callable[..., torch.Tensor]


@dataclass
class Params(SequenceParams, AugmentParams, NoiseParams):
    # The recurrent options (core, core_size, trunk_reads, seq_*) come from SequenceParams, the
    # action noise (noise, noise_std, ...) from agents/noise.py's NoiseParams.
    # Bounds in the fields are checked by the config reader against [team.params].
    gamma: float = bounded(0.98, ge=0, le=1)  # discount (the buffer applies it for n-step)
    tau: float = bounded(0.005, gt=0, le=1)  # Polyak rate of the target networks
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam step sizes above 1 only diverge
    lr_critic: float = bounded(1e-3, gt=0, le=1)
    hidden: list[int] = sizes(400, 300)  # actor and critic layers
    # Env steps of uniform random actions before the policy acts.
    learning_starts: int = bounded(10_000, ge=0)
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
    # actor and critic (agents/parts/encoders.py RBFEncoder); "none": the observation itself.
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


class DDPG(OffPolicy, Agent):
    Params = Params
    saved = {
        "actor": "actor_net",
        "critic": "critic",
        "actor_target": "actor_target",
        "critic_target": "critic_target",
        "actor_opt": "actor_opt",
        "critic_opt": "critic_opt",
        "head_q_mean": "head_q_mean",
        "head_q_sq": "head_q_sq",
    }

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        if params.policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {params.policy_delay}")
        super().__init__(space, params, device, seed)
        p, act_dim, heads = params, space.act_dim, space.num_heads
        with seeded(seed):
            self.actor_net = self.net(
                lambda d: DeterministicActor(d, p.hidden, act_dim, "relu"), actions="continuous"
            )
            self.critic = self.net(
                lambda d: QCritic(d, act_dim, p.hidden, heads, p.critic, "relu"), critic=True
            )
            if p.noisy:
                noisy_head_(body(self.actor_net), p.noisy_sigma0)
        self.actor_target = self.target(self.actor_net)
        if p.noisy:
            self.actor_target.eval()  # the target actor acts with the mean weights
        self.critic_target = self.target(self.critic)
        self.actor_opt, self.actor_params = self.optimizer(self.actor_net, p.lr_actor)
        self.critic_opt, self.critic_params = self.optimizer(self.critic, p.lr_critic)
        # The layers after each network's core (the networks themselves when feedforward).
        self.mu, self.mu_target = body(self.actor_net), body(self.actor_target)
        self.q, self.q_target = body(self.critic), body(self.critic_target)
        # Running mean and mean square of each head's Q(s, mu(s)), for normalize_heads.
        self.head_q_mean = torch.zeros(heads, device=self.device)
        self.head_q_sq = torch.ones(heads, device=self.device)
        self.noise = noise_from(p, act_dim, seed + 1) if p.noise != "none" else None

        # A detached explorer's actor learns in observe, against the critic it pulls.
        self.head_trainer = HeadActorTrainer.of(
            p, space, self.actor_net, self.critic, self.actor_opt, seed + 4, self.device
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

    @decides_by_forward
    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return self.mu(z)

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        """Q_h(s, mu(s)) of each head, ``[N, H]``: evaluation holds it against each head's
        discounted return (the optional per-head value query of wheeler2/runtime/evaluation.py)."""
        with torch.inference_mode(), noise_off(self.actor_net):
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            x = self.obs_norm.normalize(x)
            return self.critic(x, self.actor_net(x)).cpu().numpy()

    def observe(self, step: Transitions) -> dict[str, float] | None:
        super().observe(step)
        trainer = self.head_trainer
        if trainer is not None:
            obs = step.obs if step.active is None else step.obs[step.active]
            trainer.observe(obs)
            if self.env_steps >= self.params.learning_starts:
                return trainer.train(len(obs))
        return None

    def stream_state(self) -> dict[str, Any]:
        streams = super().stream_state()
        if self.head_trainer is not None:
            streams["head_trainer"] = self.head_trainer.state_dict()
        return streams

    def load_stream_state(self, streams: dict[str, Any]) -> None:
        super().load_stream_state(streams)
        if self.head_trainer is not None and "head_trainer" in streams:
            self.head_trainer.load_state_dict(streams["head_trainer"])

    # Weight sync by name (wheeler2/sync/): a learner offers its critic; a detached explorer
    # takes it (every head's nets: it reads head h's) instead of the learner's actor; an
    # evolutionary member (agents/cem.py, CEM-RL) takes the critic and the actor by name.
    def published_modules(self) -> dict[str, nn.Module]:
        return {"critic": self.critic, "actor": self.actor_net}

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

    def update(self, v: View) -> tuple[dict[str, float], torch.Tensor]:
        p = self.params
        if p.noisy:  # one draw of the actor's noise per learn step (the target uses the means)
            resample_noise(self.actor_net, self.noise_gen)
        compiled = self._compiled
        if compiled is not None:  # (a StepView: compile = true is feedforward only)
            assert isinstance(v, StepView)
            args = (v.obs, v.action, v.next_obs, v.reward, v.discount, v.weight)
            grads, (critic_loss, (head_losses, td, q_mean)) = compiled[0](*args)
            self.critic_step(critic_loss, list(grads.values()))
            zc = v.obs
        else:
            zc = v.read(self.critic)
            critic_loss, (head_losses, td, q_mean) = self._critic_objective(
                v, zc, self.q, self.mu_target, self.q_target
            )
            self.critic_step(critic_loss)

        if self.updates % p.policy_delay == 0:
            head_stats = (self.head_q_mean, self.head_q_sq)
            if compiled is not None:
                grads, (actor_loss, head_stats) = compiled[1](v.obs, *head_stats)
                self.actor_step(actor_loss, list(grads.values()))
            else:
                za = v.read(self.actor_net)
                # The actor climbs Q; the critic's core (if any) is the critic's to train.
                actor_loss, head_stats = self._actor_objective(
                    v, za, zc.detach(), self.mu, self.q, head_stats
                )
                self.actor_step(actor_loss)
            self.update_targets()
            if p.normalize_heads:
                self.head_q_mean.copy_(head_stats[0])
                self.head_q_sq.copy_(head_stats[1])

        # One priority per sample: the heads' |TD| averaged with the head weights' sizes.
        abs_td = self.head_priority(td.detach().abs())
        metrics = self.report(
            head_losses,
            critic_loss=critic_loss.detach(),
            actor_loss=self.last_actor_loss,
            q_mean=q_mean,
        )
        return metrics, abs_td

    # The two losses, written once for both ways of taking their gradients: the layers come in
    # as callables (the modules, or their weights bound by functional_call), the inputs from
    # the view (a StepView built inside the traced function with compile = true).
    def _critic_objective(
        self, v: View, zc: torch.Tensor, q_net: Net, mu_target: Net, q_target: Net
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(critic loss, (each head's loss [H], TD errors [..., H], mean Q))."""
        with torch.no_grad():
            a_next = mu_target(v.read_next(self.actor_target))
            y = v.target(q_target(v.read_next(self.critic_target), a_next))  # [..., H]
        q = q_net(zc, v.action)  # [..., H]
        td = y - q
        head_losses = v.head_losses(td.pow(2))  # [H]
        return head_losses.sum(), (head_losses, td, v.mean(q.detach().mean(-1)))

    def _actor_objective(
        self,
        v: View,
        za: torch.Tensor,
        zc: torch.Tensor,
        mu: Net,
        q_net: Net,
        stats: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(actor loss, the heads' running Q statistics: updated by this batch with
        ``normalize_heads``, else ``stats`` as they came)."""
        q_pi = q_net(zc, mu(za))  # [..., H]
        if self.params.normalize_heads:
            # Each head's Q over its running std, so heads of different reward scales pull
            # equally.
            scale, *stats = running_scale(
                v.trained(q_pi.detach()), *stats, self.params.head_norm_decay
            )
            q_pi = q_pi / scale
        return -v.mean((q_pi * self.head_w).sum(-1)), tuple(stats)

    def _bound(self, name: str, weights: dict[str, torch.Tensor] | None = None) -> Net:
        """Net ``name`` as a function of ``weights`` (default: views of its own)."""
        net, w = getattr(self, name), self._views[name] if weights is None else weights
        return lambda *x: functional_call(net, w, x)

    def _critic_grads(self, *args: torch.Tensor) -> Any:
        obs, action, next_obs, reward, discount, weight = args
        v = StepView(obs, action, reward, next_obs, discount, weight)

        def loss(w: dict[str, torch.Tensor]) -> Any:
            nets = (self._bound("critic", w), self._bound("actor_target"))
            return self._critic_objective(v, obs, *nets, self._bound("critic_target"))

        return grad_and_value(loss, has_aux=True)(self._views["critic"])

    def _actor_grads(self, obs: torch.Tensor, *stats: torch.Tensor) -> Any:
        v = StepView(obs, obs, obs, obs, obs, obs)  # (only the observations are read)

        def loss(w: dict[str, torch.Tensor]) -> Any:
            nets = (self._bound("actor_net", w), self._bound("critic"))
            return self._actor_objective(v, obs, obs, *nets, stats)  # type: ignore[arg-type]

        return grad_and_value(loss, has_aux=True)(self._views["actor_net"])


def running_scale(
    q: torch.Tensor, mean: torch.Tensor, sq: torch.Tensor, decay: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(each head's running std of Q floored at 1e-3, the updated running mean, mean square):
    an EMA of the batch's per-head statistics ``q`` [N, H]; pure, so it also runs traced."""
    mean = mean.lerp(q.mean(0), 1 - decay)
    sq = sq.lerp(q.pow(2).mean(0), 1 - decay)
    return (sq - mean.pow(2)).clamp_min(0.0).sqrt().clamp_min(1e-3), mean, sq
