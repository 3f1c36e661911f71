"""wheeler2's SAC update against SB3's ``SAC.train()``, step for step: same initial weights
(SB3's, copied into ours), the same random batches and the same Gaussian draws for the policy
samples (fed to both through patched samplers), then the largest parameter difference and the
two temperatures after 1, 2, 10, 50 and 200 gradient steps.

    python experiments/sac_update_vs_sb3.py            # 64-64 nets
    python experiments/sac_update_vs_sb3.py 256 256

Expected differences: SB3 halves the critic loss (Adam's step is nearly scale-free, not quite
where a gradient is near Adam's eps) and writes the tanh correction as log(1 - tanh(u)^2 + 1e-6)
where ours is exact; so the parameters agree to ~1e-5 after a step and drift apart slowly
as any two float programs do. A wrong target, sign, loss term or update order shows up as a
difference of the order of the step size (3e-4) at step 1. Needs the ``bench`` extra.
"""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stable_baselines3 import SAC as SB3SAC
from stable_baselines3.common.logger import configure
from stable_baselines3.common.type_aliases import ReplayBufferSamples

import agents.nets as nets  # noqa: E402
from agents.sac import SAC, Params  # noqa: E402
from wheeler2.agent import Batch, SpaceInfo  # noqa: E402

torch.set_num_threads(1)
env = gym.make("Hopper-v5")
obs_dim, act_dim = 11, 3
H = [int(x) for x in sys.argv[1:]] or [64, 64]
sb = SB3SAC(
    "MlpPolicy",
    env,
    learning_rate=3e-4,
    batch_size=256,
    gamma=0.99,
    tau=0.005,
    policy_kwargs=dict(net_arch=H),
    seed=0,
    device="cpu",
)
ours = SAC(
    SpaceInfo(obs_dim, act_dim, False),
    Params(lr_actor=3e-4, lr_critic=3e-4, lr_alpha=3e-4, hidden=H),
)


def copy_mlp(dst_mlp, seq):
    lin = [m for m in seq if isinstance(m, torch.nn.Linear)]
    dl = [m for m in dst_mlp.trunk if isinstance(m, torch.nn.Linear)] + [dst_mlp.head]
    assert len(lin) == len(dl)
    with torch.no_grad():
        for d, s in zip(dl, lin):
            d.weight.copy_(s.weight)
            d.bias.copy_(s.bias)


with torch.no_grad():
    a = sb.actor
    lin = [m for m in a.latent_pi if isinstance(m, torch.nn.Linear)]
    tl = [m for m in ours.actor_net.trunk if isinstance(m, torch.nn.Linear)]
    for d, s in zip(tl, lin):
        d.weight.copy_(s.weight)
        d.bias.copy_(s.bias)
    ours.actor_net.head.weight.copy_(a.mu.weight)
    ours.actor_net.head.bias.copy_(a.mu.bias)
    ours.actor_net.log_std_head.weight.copy_(a.log_std.weight)
    ours.actor_net.log_std_head.bias.copy_(a.log_std.bias)
for mine, theirs in ((ours.critic, sb.critic), (ours.critic_target, sb.critic_target)):
    copy_mlp(mine.q1.nets[0], theirs.qf0)
    copy_mlp(mine.q2.nets[0], theirs.qf1)

sb.set_logger(configure(None, []))
rng = np.random.default_rng(0)
B = 256
queue_sb, queue_ours = [], []
orig_rsample = torch.distributions.Normal.rsample


def rsample(self, sample_shape=()):  # noqa: ANN001, ANN202
    return self.loc + queue_sb.pop(0) * self.scale


torch.distributions.Normal.rsample = rsample
orig_randn = torch.randn


def randn(*args, generator=None, **kw):
    if generator is not None and queue_ours:
        return queue_ours.pop(0)
    return orig_randn(*args, generator=generator, **kw)


nets.torch.randn = randn  # agents.nets imports torch: patch its randn


def params(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


steps = 200
for t in range(steps):
    o = rng.normal(size=(B, obs_dim)).astype(np.float32)
    act = rng.uniform(-1, 1, (B, act_dim)).astype(np.float32)
    r = rng.normal(size=(B, 1)).astype(np.float32)
    no = rng.normal(size=(B, obs_dim)).astype(np.float32)
    done = (rng.random((B, 1)) < 0.05).astype(np.float32)
    e1 = torch.as_tensor(rng.normal(size=(B, act_dim)).astype(np.float32))
    e2 = torch.as_tensor(rng.normal(size=(B, act_dim)).astype(np.float32))
    queue_sb[:] = [e1, e2]  # SB3: pi(obs) first, then pi(next_obs)
    queue_ours[:] = [e2, e1]  # ours: pi(next_obs) first, then pi(obs)
    data = ReplayBufferSamples(*(torch.as_tensor(x) for x in (o, act, no, done, r)))
    sb.replay_buffer.sample = lambda *a, _data=data, **k: _data
    sb.train(gradient_steps=1, batch_size=B)
    batch = Batch.from_numpy(
        dict(
            obs=o,
            action=act,
            reward=r,
            next_obs=no,
            discount=(0.99 * (1 - done[:, 0])).astype(np.float32),
            weight=np.ones(B, np.float32),
            index=np.arange(B),
        ),
        "cpu",
    )
    ours.learn(batch)
    if t in (0, 1, 9, 49, 199):
        sb3_actor = [params(sb.actor.latent_pi), params(sb.actor.mu), params(sb.actor.log_std)]
        da = (params(ours.actor_net) - torch.cat(sb3_actor)).abs()
        dc = (params(ours.critic.q1) - params(sb.critic.qf0)).abs()
        alpha_sb3 = float(sb.log_ent_coef.detach().exp())
        # The largest difference and the 99th percentile (where the bulk of parameters sit).
        print(
            f"step {t + 1:3d}: |actor diff| max {da.max():.1e} p99 {da.quantile(0.99):.1e}  "
            f"|q1 diff| max {dc.max():.1e} p99 {dc.quantile(0.99):.1e}  "
            f"alpha ours {ours.alpha:.6f} sb3 {alpha_sb3:.6f}"
        )
