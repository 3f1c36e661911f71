"""PPO with the clipped surrogate objective (Schulman et al., 2017) and GAE(lambda).

The agent learns from its own rollouts: ``observe`` stores every vector step of its ``num_envs``
copies and, after ``n_steps`` steps per copy, runs ``n_epochs`` of minibatch updates on

    L = - E[min(r A, clip(r, 1 - eps, 1 + eps) A)] + vf_coef E[(V - R)^2] - ent_coef E[H[pi]]

with r = pi(a|s) / pi_old(a|s). Defaults are Stable-Baselines3's PPO defaults.

Rewards with several task heads are summed with the task's head weights into one reward.
Episode ends: a terminated step does not bootstrap; a truncated (time-limit) step bootstraps from
V of its true final observation, ``Transitions.next_obs``.

Recurrent PPO (``core = "gru" | "lstm"``): the actor and (``critic_core``) the critic put a
recurrent core between their trunk and their last layer (``agents/cores.py``), and the agent
carries the engine's policy state (``state_dim > 0``; the actor's state, then the critic's). A
rollout keeps the state every copy had at its first step and the episode-start flags; the
update replays each copy's whole ``n_steps`` sequence through the cores from that state,
resetting where an episode began, so the first epoch's log-probs are the behaviour ones.
Minibatches are whole env-copy sequences: ``max(1, batch_size // n_steps)`` copies each
(shuffled per epoch), as sb3-contrib's RecurrentPPO keeps sequences whole. V of each step and of
the bootstrap observations are those computed while acting (the critic does not change during a
rollout), which is what a replay from the stored states gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.cores import RecurrentCritic, RecurrentOnPolicy, next_values_seen, on_policy_nets
from agents.nets import (
    ACTIVATIONS,
    evaluate_actions,
    resolve_device,
    sample_action,
    seeded,
)
from agents.normalize import make_obs_norm
from agents.returns import gae  # A + V, the value target, is the lambda-return
from wheeler2.agent import ActOut, Agent, SpaceInfo, Transitions
from wheeler2.needs import AgentNeeds
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params:
    # Bounds in the fields are checked by the config reader against [team.params].
    # Env steps per copy between updates (rollout = n_steps * num_envs).
    n_steps: int = bounded(2048, ge=1)
    batch_size: int = bounded(64, ge=1)  # minibatch size
    n_epochs: int = bounded(10, ge=1)  # passes over each rollout
    gamma: float = bounded(0.99, ge=0, le=1)
    # GAE bias/variance trade-off; 1 = Monte Carlo advantages.
    gae_lambda: float = bounded(0.95, ge=0, le=1)
    clip_range: float = bounded(0.2, gt=0)  # eps of the clipped surrogate
    # Clip value updates around the old values; 0 = off.
    clip_range_vf: float = bounded(0.0, ge=0)
    ent_coef: float = 0.0  # entropy bonus
    vf_coef: float = bounded(0.5, ge=0)
    max_grad_norm: float = bounded(0.5, gt=0)  # always applied, so 0 would zero every step
    lr: float = bounded(3e-4, gt=0, le=1)  # a step size above 1 only diverges
    # "constant" | "linear": lr (clip_range) decays to 0 over total_steps.
    lr_schedule: str = choice("constant", ("constant", "linear"))
    clip_schedule: str = choice("constant", ("constant", "linear"))
    # Env steps this agent will take; filled by the engine; linear needs it.
    total_steps: int = bounded(0, ge=0)
    normalize_advantage: bool = True  # per minibatch
    hidden: list[int] = sizes(64, 64)  # actor and critic layers
    activation: str = choice("tanh", tuple(ACTIVATIONS))
    log_std_init: float = 0.0  # initial log std of the Gaussian policy
    ortho_init: bool = True  # orthogonal init, small policy head
    # Recurrent core between trunk and last layer: "none" (feedforward), "gru" or "lstm".
    core: str = choice("none", ("none", "gru", "lstm"))
    core_size: int = bounded(64, ge=1)  # width of the core's hidden state
    critic_core: bool = True  # the critic has a core of its own too (else V(obs) alone)
    core_first: bool = False  # the core reads the observation, the hidden layers its output
    # Running mean/std of the observations (SB3's VecNormalize(norm_obs=True), in the agent).
    normalize_obs: bool = False
    obs_clip: float = bounded(10.0, gt=0)  # normalized observations are clipped to +-obs_clip
    device: str = "cpu"  # "cpu" | "cuda"


def masked_mean(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the rows with weight 1 (all rows when ``w`` is None)."""
    if w is None:
        return x.mean()
    return (x * w).sum() / w.sum().clamp(min=1.0)


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, clip: float, w: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's L^CLIP = E[min(r A, clip(r, 1 - eps, 1 + eps) A)], the objective to *maximize*;
    ``w`` (0/1 per row) leaves out the steps of absent multi-agent rows."""
    return masked_mean(torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv), w)


class PPO(RecurrentOnPolicy, Agent):
    Params = Params
    uses_replay = False

    @classmethod
    def needs(cls, params: Params) -> AgentNeeds:
        return AgentNeeds(gamma=float(params.gamma), device=params.device)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, resolve_device(device, params.device), seed)
        p = params
        for name in ("lr_schedule", "clip_schedule"):
            if getattr(p, name) not in ("constant", "linear"):
                raise ValueError(f"{name} must be 'constant' or 'linear'")
            if getattr(p, name) == "linear" and p.total_steps <= 0:
                raise ValueError(f"{name} = 'linear' needs total_steps > 0")
        self.recurrent = p.core != "none"
        with seeded(seed):
            self.policy, self.critic = on_policy_nets(space, p)
        self.policy.to(self.device)
        self.critic.to(self.device)
        # Statistics come from the observations this agent acts on (observe), never from evals;
        # rollouts store normalized observations, the ones the policy saw.
        self.obs_norm = make_obs_norm(p.normalize_obs, space.obs_dim, p.obs_clip, self.device)
        self.set_state_dims()  # the actor core's state, then the critic core's (if any)
        self.params_list = list(self.policy.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.Adam(self.params_list, lr=p.lr, eps=1e-5)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32, device=self.device)
        self.env_steps = 0
        self.updates = 0
        self.t = 0  # steps stored in the current rollout
        self.rollout: dict[str, torch.Tensor] | None = None

    @property
    def actor(self) -> nn.Module:
        return self.policy

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        if explore:
            # VecNormalize's order: a batch is folded into the statistics before it is
            # normalized. Later batches are folded in by observe (as reset_obs); the very first
            # only here, or it would be normalized by empty statistics (as given).
            self.obs_norm.start(obs)
        x = self.obs_norm.normalize(torch.as_tensor(obs, dtype=torch.float32, device=self.device))
        if self.recurrent:
            return self.act_recurrent(x, explore, state)
        with torch.inference_mode():
            action, raw, logp = sample_action(self.policy, x, explore, self.gen)
            value = self.critic(x)
        extras = {"value": value.cpu().numpy()}
        if not self.space.discrete:
            extras["raw_action"] = raw.cpu().numpy()  # for the update's log-prob
        return ActOut(action=action.cpu().numpy(), logp=logp.cpu().numpy(), extras=extras)

    def observe(self, step: Transitions) -> dict[str, float] | None:
        n, dev = len(step.obs), self.device
        if self.rollout is None or self.rollout["obs"].shape[1] != n:
            self.rollout = self._empty_rollout(n)
            self.t = 0
        buf, t = self.rollout, self.t
        norm = self.obs_norm.normalize
        active = np.ones(n, bool) if step.active is None else step.active
        # The statistics have not moved since act: the rows are stored as the policy saw them.
        buf["obs"][t] = norm(torch.as_tensor(step.obs, dtype=torch.float32, device=dev))
        # Then, as VecNormalize does on each step, the observations acted on next are folded
        # in first and the next observations normalized with the result.
        self.obs_norm.update(step.reset_obs if step.active is None else step.reset_obs[active])
        buf["next_obs"][t] = norm(torch.as_tensor(step.next_obs, dtype=torch.float32, device=dev))
        raw = step.act_out.extras.get("raw_action", step.action)
        buf["action"][t] = torch.as_tensor(raw, device=dev)
        if self.recurrent:
            self._store_recurrent(step, buf, t)
        elif step.act_out.logp is not None:
            buf["logp"][t] = torch.as_tensor(step.act_out.logp, device=dev)
        else:  # actions not drawn by act(explore=True): score them under the current policy
            with torch.no_grad():
                buf["logp"][t] = evaluate_actions(self.policy, buf["obs"][t], buf["action"][t])[0]
        reward = torch.as_tensor(step.reward, dtype=torch.float32, device=dev).reshape(n, -1)
        buf["reward"][t] = reward @ self.head_w  # heads -> one reward
        buf["terminated"][t] = torch.as_tensor(step.terminated, device=dev)
        buf["done"][t] = torch.as_tensor(step.terminated | step.truncated, device=dev)
        # Absent rows stay in the rollout (it must be rectangular for GAE) with weight 0; their
        # own done flag at the leaving step already cut the advantage chain.
        buf["valid"][t] = torch.as_tensor(active, device=dev)
        self.env_steps += n if step.active is None else int(active.sum())
        self.t += 1
        if self.t < self.params.n_steps:
            return None
        self.t = 0
        return self._update()

    def _store_recurrent(self, step: Transitions, buf: dict[str, torch.Tensor], t: int) -> None:
        """The recurrent rollout's extra columns: the chunk's initial state, episode starts,
        the behaviour log-prob and the values seen while acting."""
        dev = self.device
        last = t == self.params.n_steps - 1
        logp, value, next_value = self.step_columns(
            step, buf["obs"][t], buf["next_obs"][t], buf["action"][t], last
        )
        if t == 0:
            buf["state0"].copy_(torch.as_tensor(step.state, device=dev))
        # An episode starts at t where the previous step (of this chunk or the last) ended one.
        buf["starts"][t] = self._prev_done
        self._prev_done = torch.as_tensor(step.terminated | step.truncated, device=dev)
        buf["logp"][t], buf["value"][t] = logp, value
        if next_value is not None:
            buf["next_value"][t] = next_value

    def _empty_rollout(self, n: int) -> dict[str, torch.Tensor]:
        T, dev, s = self.params.n_steps, self.device, self.space
        act_shape = (T, n) if s.discrete else (T, n, s.act_dim)
        if self.recurrent:
            self._prev_done = torch.zeros(n, dtype=torch.bool, device=dev)
        recurrent = {
            "state0": torch.zeros(n, self.state_dim, device=dev),
            "starts": torch.zeros(T, n, dtype=torch.bool, device=dev),
            "value": torch.zeros(T, n, device=dev),
            "next_value": torch.zeros(T, n, device=dev),
        }
        return (recurrent if self.recurrent else {}) | {
            "obs": torch.zeros(T, n, s.obs_dim, device=dev),
            "next_obs": torch.zeros(T, n, s.obs_dim, device=dev),
            "action": torch.zeros(act_shape, device=dev, dtype=torch.long if s.discrete else None),
            "logp": torch.zeros(T, n, device=dev),
            "reward": torch.zeros(T, n, device=dev),
            "terminated": torch.zeros(T, n, device=dev),
            "done": torch.zeros(T, n, device=dev),
            "valid": torch.ones(T, n, device=dev),
        }

    def _schedule(self, value: float, kind: str) -> float:
        if kind == "constant":
            return value
        return value * max(0.0, 1.0 - self.env_steps / self.params.total_steps)

    def _update(self) -> dict[str, float]:
        p, buf = self.params, self.rollout
        assert buf is not None
        lr = self._schedule(p.lr, p.lr_schedule)
        clip = self._schedule(p.clip_range, p.clip_schedule)
        for group in self.opt.param_groups:
            group["lr"] = lr

        T, n = buf["reward"].shape
        with torch.no_grad():
            if self.recurrent:
                values, next_values = self._recurrent_values(buf)
            else:
                # Values under the current critic, both ends of every step, in two batched passes.
                values = self.critic(buf["obs"].flatten(0, 1)).view(T, n)
                next_values = self.critic(buf["next_obs"].flatten(0, 1)).view(T, n)
            adv = gae(
                buf["reward"],
                values,
                next_values,
                buf["terminated"],
                buf["done"],
                p.gamma,
                p.gae_lambda,
            )
            returns = adv + values
        obs, action = buf["obs"].flatten(0, 1), buf["action"].flatten(0, 1)
        old_logp, adv, returns = buf["logp"].flatten(), adv.flatten(), returns.flatten()
        old_values = values.flatten()
        valid = buf["valid"].flatten()
        masked = bool((valid < 1.0).any())

        stats = torch.zeros(5, device=self.device)
        num_minibatches = 0
        for _ in range(p.n_epochs):
            for mb in self._minibatches(T, n):
                if self.recurrent:
                    logp, entropy, v = self._replay(buf, mb, T)
                    mb = mb.unsqueeze(0) + n * torch.arange(T, device=self.device)[:, None]
                    mb = mb.flatten()  # the flat rows [t * n + copy] of those copies
                else:
                    logp, entropy = evaluate_actions(self.policy, obs[mb], action[mb])
                    v = self.critic(obs[mb])
                log_ratio = logp - old_logp[mb]
                ratio = log_ratio.exp()
                a = adv[mb]
                w = valid[mb] if masked else None
                if p.normalize_advantage and len(mb) > 1:
                    if w is None:
                        a = (a - a.mean()) / (a.std() + 1e-8)
                    else:
                        # Statistics of the real steps only: stale rows would skew them.
                        mu = masked_mean(a, w)
                        sd = masked_mean((a - mu).pow(2), w).sqrt()
                        a = (a - mu) / (sd + 1e-8)
                policy_loss = -clipped_surrogate(ratio, a, clip, w)

                v_err = (v - returns[mb]).pow(2)
                if p.clip_range_vf > 0:
                    # Pessimistic value clipping as in the reference PPO2 implementation.
                    v_clip = old_values[mb] + (v - old_values[mb]).clamp(
                        -p.clip_range_vf, p.clip_range_vf
                    )
                    v_err = torch.max(v_err, (v_clip - returns[mb]).pow(2))
                value_loss = masked_mean(v_err, w)
                entropy = masked_mean(entropy, w)

                loss = policy_loss + p.vf_coef * value_loss - p.ent_coef * entropy
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.params_list, p.max_grad_norm)
                self.opt.step()

                with torch.no_grad():
                    # Schulman's low-variance KL
                    approx_kl = masked_mean(ratio - 1.0 - log_ratio, w)
                    clip_frac = masked_mean(((ratio - 1.0).abs() > clip).float(), w)
                    stats += torch.stack(
                        [policy_loss, value_loss, entropy, approx_kl, clip_frac]
                    ).detach()
                num_minibatches += 1
        self.updates += 1
        stats = (stats / num_minibatches).tolist()
        var_ret = returns.var()
        explained = 1.0 - (returns - old_values).var() / var_ret if var_ret > 0 else 0.0
        return {
            "policy_loss": stats[0],
            "value_loss": stats[1],
            "entropy": stats[2],
            "approx_kl": stats[3],
            "clip_fraction": stats[4],
            "explained_variance": float(explained),
            "lr": lr,
            "clip_range": clip,
        }

    def _minibatches(self, T: int, n: int) -> list[torch.Tensor]:
        """One epoch's minibatches: flat step indices (feedforward), or env-copy indices
        (recurrent: each copy's whole sequence, ``batch_size // T`` copies a minibatch)."""
        bs = self.params.batch_size
        if self.recurrent:
            perm = torch.randperm(n, generator=self.gen, device=self.device)
            per = max(1, bs // T)
            return [perm[i : i + per] for i in range(0, n, per)]
        perm = torch.randperm(T * n, generator=self.gen, device=self.device)
        return [perm[i : i + bs] for i in range(0, T * n, bs)]

    def _replay(
        self, buf: dict[str, torch.Tensor], copies: torch.Tensor, T: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs of the stored actions, entropies and values of ``copies``' sequences,
        replayed from the chunk's initial state, as flat ``[T * len(copies)]`` (time-major)."""
        state0, starts = buf["state0"][copies], buf["starts"][:, copies]
        obs = buf["obs"][:, copies]
        out, _ = self.policy.sequence(obs, state0[:, : self.actor_state_dim], starts)
        logp, entropy = self.policy.evaluate(out, buf["action"][:, copies])
        if isinstance(self.critic, RecurrentCritic):
            v, _ = self.critic.sequence(obs, state0[:, self.actor_state_dim :], starts)
        else:
            v = self.critic(obs)
        return logp.flatten(), entropy.flatten(), v.flatten()

    def _recurrent_values(self, buf: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s_t) and V(s'_t) from the values computed while acting (``_store_recurrent``)."""
        next_values = next_values_seen(
            buf["value"], buf["next_value"], buf["done"], buf["terminated"]
        )
        return buf["value"], next_values

    def state_dict(self) -> dict[str, Any]:
        # The rollout in progress is not saved: a resumed agent starts a fresh one.
        return {
            "algo": "ppo",  # its state is otherwise shaped like A2C's
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "opt": self.opt.state_dict(),
            "env_steps": self.env_steps,
            "updates": self.updates,
            "obs_norm": self.obs_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.opt.load_state_dict(state["opt"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        self.obs_norm.load_state_dict(state.get("obs_norm", {}))
        self.t = 0
