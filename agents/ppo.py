"""PPO with the clipped surrogate objective (Schulman et al., 2017) and GAE(lambda).

The agent learns from its own rollouts (``agents/onpolicy.py`` stores them): after ``n_steps``
vector steps of its ``num_envs`` copies it runs ``n_epochs`` of minibatch updates on

    L = - E[min(r A, clip(r, 1 - eps, 1 + eps) A)] + vf_coef E[(V - R)^2] - ent_coef E[H[pi]]

with r = pi(a|s) / pi_old(a|s). Defaults are Stable-Baselines3's PPO defaults.

Rewards with several task heads are summed with the task's head weights into one reward.
Episode ends: a terminated step does not bootstrap; a truncated (time-limit) step bootstraps from
V of its true final observation, ``Transitions.next_obs``.

Recurrent PPO (``core = "gru" | "lstm"``): the actor and (``critic_core``) the critic put a
recurrent core between their trunk and their last layer (``agents/parts/memory.py``), and the
update replays each copy's whole ``n_steps`` sequence through the cores from the state it had at
the rollout's first step (``agents/onpolicy.py``). Minibatches are then whole env-copy
sequences: ``max(1, batch_size // n_steps)`` copies each (shuffled per epoch), as sb3-contrib's
RecurrentPPO keeps sequences whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from wheeler2.agents.onpolicy import OnPolicy, actor_critic, masked_mean, normalize_advantages
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.encoders import ACTIVATIONS, ImageParams
from wheeler2.agents.parts.memory import TRUNK_READS
from wheeler2.agents.returns import gae  # A + V, the value target, is the lambda-return

from wheeler2.agent import Agent, SpaceInfo
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params(ImageParams):
    # Old key -> (new key, its value for each old value), read with a deprecation warning.
    renamed_keys: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = {
        "core_first": ("trunk_reads", {True: "core", False: "obs"})
    }
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
    # What the hidden layers read: "obs" (trunk, then core), "core" (the core reads the
    # observation, sb3-contrib's order) or "core+obs" (the core's output beside the observation).
    trunk_reads: str = choice("obs", TRUNK_READS)
    # Running mean/std of the observations (SB3's VecNormalize(norm_obs=True), in the agent).
    normalize_obs: bool = False
    obs_clip: float = bounded(10.0, gt=0)  # normalized observations are clipped to +-obs_clip
    device: str = "cpu"  # "cpu" | "cuda"


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, clip: float, w: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's L^CLIP = E[min(r A, clip(r, 1 - eps, 1 + eps) A)], the objective to *maximize*;
    ``w`` (0/1 per row) leaves out the steps of absent multi-agent rows."""
    return masked_mean(torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv), w)


class PPO(OnPolicy, Agent):
    Params = Params
    algo = "ppo"  # its state is otherwise shaped like A2C's
    checkpoint = ("policy", "critic", "opt", "obs_norm")

    @classmethod
    def for_run(cls, params: Params, total_steps: int) -> Params:
        # The schedules decay over the run unless the file names another length.
        return params if params.total_steps else replace(params, total_steps=total_steps)

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        p = params
        self.check_schedules("lr_schedule", "clip_schedule")
        with seeded(seed):
            policy, critic = actor_critic(space, p)
        self.setup(policy, critic, p.normalize_obs, p.obs_clip)
        self.params_list = list(self.policy.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.Adam(self.params_list, lr=p.lr, eps=1e-5)

    def update(self) -> dict[str, float]:
        p, r = self.params, self.rollout
        assert r is not None
        lr = self.schedule(p.lr, p.lr_schedule)
        clip = self.schedule(p.clip_range, p.clip_schedule)
        for group in self.opt.param_groups:
            group["lr"] = lr

        values, next_values = self.rollout_values()
        with torch.no_grad():
            adv = gae(r.reward, values, next_values, r.terminated, r.done, p.gamma, p.gae_lambda)
            returns = adv + values
        old_logp, adv, returns = r.logp.flatten(), adv.flatten(), returns.flatten()
        old_values = values.flatten()
        valid = r.valid.flatten()
        masked = bool((valid < 1.0).any())

        stats = torch.zeros(5, device=self.device)
        num_minibatches = 0
        for _ in range(p.n_epochs):
            for mb in self.minibatches(p.batch_size):
                logp, entropy = self.log_probs(mb)
                v = self.values(mb)
                rows = mb.rows
                log_ratio = logp - old_logp[rows]
                ratio = log_ratio.exp()
                a = adv[rows]
                w = valid[rows] if masked else None
                if p.normalize_advantage:
                    # Statistics of the real steps only: stale rows would skew them.
                    a = normalize_advantages(a, w)
                policy_loss = -clipped_surrogate(ratio, a, clip, w)

                v_err = (v - returns[rows]).pow(2)
                if p.clip_range_vf > 0:
                    # Pessimistic value clipping as in the reference PPO2 implementation.
                    v_clip = old_values[rows] + (v - old_values[rows]).clamp(
                        -p.clip_range_vf, p.clip_range_vf
                    )
                    v_err = torch.max(v_err, (v_clip - returns[rows]).pow(2))
                value_loss = masked_mean(v_err, w)
                entropy = masked_mean(entropy, w)

                loss = policy_loss + p.vf_coef * value_loss - p.ent_coef * entropy
                self.gradient_step(self.opt, loss, self.params_list, p.max_grad_norm)

                with torch.no_grad():
                    # Schulman's low-variance KL
                    approx_kl = masked_mean(ratio - 1.0 - log_ratio, w)
                    clip_frac = masked_mean(((ratio - 1.0).abs() > clip).float(), w)
                    stats += torch.stack(
                        [policy_loss, value_loss, entropy, approx_kl, clip_frac]
                    ).detach()
                num_minibatches += 1
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
