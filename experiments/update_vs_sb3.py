"""wheeler2's SAC and TD3 updates against SB3's ``train()``, step for step.

Both sides start from the same weights (SB3's, copied into ours), take the same random batches
and the same Gaussian draws (SAC's policy samples, TD3's target-policy noise; fed to both sides
through torch's samplers, replaced for the run: ``torch.randn`` when called with a generator, as
every wheeler2 agent draws, and SB3's ``Normal.rsample`` / ``Tensor.normal_``; no agent has a
public hook for its draws), and after 1, 2, 10, 50 and 200 gradient steps the script prints the
largest and the 99th-percentile parameter difference of the actor and of the first critic (and
SAC's two temperatures).

    python -m experiments.update_vs_sb3 sac             # 256-256 nets
    python -m experiments.update_vs_sb3 td3 --hidden 64 64

Expected: SB3 halves SAC's critic loss (Adam's step is nearly scale-free, not quite where a
gradient is near Adam's eps) and writes SAC's tanh correction as log(1 - tanh(u)^2 + 1e-6) where
ours is exact, so a few parameters differ by a fraction of a step while the bulk agree to float
precision; from there the two drift apart as any two float programs do. A wrong target, sign,
loss term, delay or update order differs by the order of a step (the learning rate) in most
parameters within the first steps. Needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo

OBS, ACT, B = 11, 3, 256  # Hopper-v5's shapes, batch 256
REPORT = (1, 2, 10, 50, 200)


def linears(*modules: nn.Module) -> list[nn.Linear]:
    return [m for mod in modules for m in mod.modules() if isinstance(m, nn.Linear)]


def copy_linears(dst: list[nn.Linear], src: list[nn.Linear]) -> None:
    assert len(dst) == len(src), (len(dst), len(src))
    with torch.no_grad():
        for d, s in zip(dst, src):
            d.weight.copy_(s.weight)
            d.bias.copy_(s.bias)


def flat(mods: list[nn.Linear]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for m in mods for p in (m.weight, m.bias)])


class NoiseFeed:
    """Queues of standard normal draws: ``ours`` for torch.randn with a generator (how every
    agent here samples), ``sb3`` for SB3's samplers (replaced per algorithm). ``patches`` are
    the replacements, entered for the comparison and undone after it."""

    def __init__(self) -> None:
        self.ours: list[torch.Tensor] = []
        self.sb3: list[torch.Tensor] = []
        randn = torch.randn

        def ours_randn(*args: Any, generator: Any = None, **kw: Any) -> torch.Tensor:
            if generator is not None and self.ours:
                return self.ours.pop(0)
            return randn(*args, generator=generator, **kw)

        self.patches: list[Any] = [mock.patch.object(torch, "randn", ours_randn)]


def build(algo: str, hidden: list[int], feed: NoiseFeed) -> tuple[Any, Any, Callable]:
    """(SB3 model, our agent, f(eps1, eps2) setting both queues for one step)."""
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3 import TD3 as SB3TD3
    from stable_baselines3.common.logger import configure

    env = gym.make("Hopper-v5")
    space = SpaceInfo(OBS, ACT, False)
    common = dict(batch_size=B, gamma=0.99, tau=0.005, seed=0, device="cpu")
    if algo == "sac":
        SAC = registry.resolve_algo("sac")
        Params = SAC.Params

        sb = SB3SAC("MlpPolicy", env, learning_rate=3e-4, policy_kwargs={"net_arch": hidden},
                    **common)  # fmt: skip
        ours = SAC(space, Params(lr_actor=3e-4, lr_critic=3e-4, lr_alpha=3e-4, hidden=hidden))
        # Registration order: trunk, mean head, log-std head, as SB3's latent_pi, mu, log_std.
        copy_linears(linears(ours.actor_net), linears(sb.actor.latent_pi, sb.actor.mu,
                                                     sb.actor.log_std))  # fmt: skip

        def rsample(dist: Any, sample_shape: Any = ()) -> torch.Tensor:
            return dist.loc + feed.sb3.pop(0) * dist.scale

        feed.patches.append(mock.patch.object(torch.distributions.Normal, "rsample", rsample))

        def noise(e1: torch.Tensor, e2: torch.Tensor) -> None:
            feed.sb3[:] = [e1, e2]  # SB3 samples pi(obs), then pi(next_obs)
            feed.ours[:] = [e2, e1]  # ours pi(next_obs), then pi(obs)

    else:
        TD3 = registry.resolve_algo("td3")
        Params = TD3.Params

        sb = SB3TD3("MlpPolicy", env, learning_rate=1e-3, policy_kwargs={"net_arch": hidden},
                    policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5,
                    **common)  # fmt: skip
        ours = TD3(space, Params(lr_actor=1e-3, lr_critic=1e-3, hidden=hidden, policy_delay=2,
                                 target_noise=0.2, target_noise_clip=0.5))  # fmt: skip
        copy_linears(linears(ours.actor_net), linears(sb.actor.mu))
        copy_linears(linears(ours.actor_target), linears(sb.actor_target.mu))
        normal_ = torch.Tensor.normal_

        def fed_normal(t: torch.Tensor, mean: float = 0.0, std: float = 1.0, **kw: Any) -> Any:
            if feed.sb3:
                return t.copy_(mean + std * feed.sb3.pop(0))
            return normal_(t, mean, std, **kw)

        feed.patches.append(mock.patch.object(torch.Tensor, "normal_", fed_normal))

        def noise(e1: torch.Tensor, e2: torch.Tensor) -> None:
            feed.sb3[:] = [e1]
            feed.ours[:] = [e1]

    for mine_c, theirs in ((ours.critic, sb.critic), (ours.critic_target, sb.critic_target)):
        copy_linears(linears(mine_c.q1), linears(theirs.qf0))
        copy_linears(linears(mine_c.q2), linears(theirs.qf1))
    sb.set_logger(configure(None, []))
    return sb, ours, noise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("algo", choices=["sac", "td3"])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--steps", type=int, default=max(REPORT))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    feed = NoiseFeed()
    sb, ours, noise = build(args.algo, args.hidden, feed)
    with contextlib.ExitStack() as replaced:
        for patch in feed.patches:
            replaced.enter_context(patch)
        compare(args, sb, ours, noise)
    return 0


def compare(args: Any, sb: Any, ours: Any, noise: Callable) -> None:
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    sb_actor = (
        [sb.actor.latent_pi, sb.actor.mu, sb.actor.log_std] if args.algo == "sac" else [sb.actor.mu]
    )
    rng = np.random.default_rng(0)
    for t in range(1, args.steps + 1):
        o = rng.normal(size=(B, OBS)).astype(np.float32)
        act = rng.uniform(-1, 1, (B, ACT)).astype(np.float32)
        r = rng.normal(size=(B, 1)).astype(np.float32)
        no = rng.normal(size=(B, OBS)).astype(np.float32)
        done = (rng.random((B, 1)) < 0.05).astype(np.float32)
        e1, e2 = (torch.as_tensor(rng.normal(size=(B, ACT)).astype(np.float32)) for _ in "12")
        noise(e1, e2)
        data = ReplayBufferSamples(*(torch.as_tensor(x) for x in (o, act, no, done, r)))
        sb.replay_buffer.sample = lambda *a, _data=data, **k: _data
        sb.train(gradient_steps=1, batch_size=B)
        arrays = dict(obs=o, action=act, reward=r, next_obs=no, index=np.arange(B),
                      discount=(0.99 * (1 - done[:, 0])).astype(np.float32),
                      weight=np.ones(B, np.float32))  # fmt: skip
        ours.learn(Batch.from_numpy(arrays, "cpu"))
        if t in REPORT:
            da = (flat(linears(ours.actor_net)) - flat(linears(*sb_actor))).abs()
            dc = (flat(linears(ours.critic.q1)) - flat(linears(sb.critic.qf0))).abs()
            line = (
                f"step {t:3d}: |actor diff| max {da.max():.1e} p99 {da.quantile(0.99):.1e}  "
                f"|q1 diff| max {dc.max():.1e} p99 {dc.quantile(0.99):.1e}"
            )
            if args.algo == "sac":
                line += f"  alpha ours {ours.alpha:.6f} sb3 {float(sb.log_ent_coef.exp()):.6f}"
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
