"""How fast can a DDPG gradient step be on this core? The same step taken several ways, side
by side in one process (issue 17: the learner step against SB3's ``train()``).

    python -m experiments.learner_ceiling [--rounds 7] [--steps 200] [--shape halfcheetah]

Batch 256, hidden [256, 256], Adam 1e-3, tau 0.005, one critic, the actor and targets updated
every step, one torch thread; the same fixed batch for the wheeler2-side arms (sampling is not
what is asked here), SB3's own buffer for SB3, so the ratios flatter the wheeler2 arms by what
SB3's uniform draw of 256 rows costs (bench_learner.py times both sides with sampling). Arms:

* ``sb3``: ``DDPG.train(gradient_steps=N)``, sampling included (as in bench_learner.py);
* ``agents.ddpg, torch.optim's step``: the same with ``torch.optim.Adam.step()`` in place of
  ``agents.offpolicy.adam_step`` (the step as it was before that shortcut);
* ``agents.ddpg``: wheeler2's ``DDPG.learn`` on the fixed batch;
* ``agents.ddpg, compile = true``: the same with its losses' gradients taken by ``torch.func``
  and each loss compiled whole (the ``compile`` param);
* ``by hand``: the step written out with no autograd: each forward keeps its activations,
  each gradient is the matrix product the chain rule asks for (ReLU masks applied with
  ``threshold_backward``, the action gradient through the critic's action columns only), fused
  Adam on those gradients, one foreach Polyak update. The math of ``agents.ddpg`` (checked here
  against it over three steps, to float32 rounding), with nothing else in the way;
* ``torch.compile``: the same two losses, their gradients by ``torch.func.grad_and_value``,
  compiled whole (inductor), fused Adam and Polyak outside.

A product-only arm (``bench_learner.py``'s ceiling row) bounds all of these from above; the
``by hand`` arm shows what an implementation on this core can reach in practice: the same
products, their data moving through the caches as a real step's does. Writes every round's
times to ``<out stem>_runs.json`` and the table to ``--out`` (results/learner_ceiling.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from experiments.lib import RESULTS, report, runs
from experiments.lib.setups import BATCH, HIDDEN, SHAPES
from experiments.lib.setups import sb3_ddpg_train as sb3_arm
from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo

DDPG: Any = registry.resolve_algo("ddpg")

LR, TAU, GAMMA = 1e-3, 0.005, 0.99
Nets = list[torch.Tensor]  # [W1, b1, W2, b2, W3, b3] of one MLP


def fixed_batch(obs_dim: int, act_dim: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        obs=torch.randn(BATCH, obs_dim, generator=g),
        action=torch.rand(BATCH, act_dim, generator=g) * 2 - 1,
        reward=torch.randn(BATCH, 1, generator=g),
        next_obs=torch.randn(BATCH, obs_dim, generator=g),
        discount=torch.full((BATCH,), GAMMA),
        weight=torch.ones(BATCH),
        index=np.arange(BATCH),
    )


def make_agent(obs_dim: int, act_dim: int, compile: bool = False) -> DDPG:
    params = DDPG.Params(hidden=HIDDEN, gamma=GAMMA, tau=TAU, learning_starts=0, compile=compile)
    return DDPG(SpaceInfo(obs_dim, act_dim, False), params)


def flat(net: torch.nn.Module) -> Nets:
    """An MLP's weights and biases in layer order (views of the module's own tensors)."""
    out: Nets = []
    for m in net.modules():
        if isinstance(m, torch.nn.Linear):
            out += [m.weight.data, m.bias.data]
    return out


class Adam:
    """torch.optim.Adam's fused step on tensors we hold ourselves."""

    def __init__(self, params: Nets) -> None:
        self.params = params
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = [torch.zeros(()) for _ in params]

    def step(self, grads: Nets) -> None:
        torch._foreach_add_(self.t, 1.0)  # as Adam.step does before its fused kernel
        torch._fused_adam_(
            self.params, grads, self.m, self.v, [], self.t, lr=LR, beta1=0.9, beta2=0.999,
            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
        )  # fmt: skip


def forward(x: torch.Tensor, p: Nets) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h1, h2, out) of a two-hidden-layer ReLU MLP."""
    h1 = torch.addmm(p[1], x, p[0].t()).relu_()
    h2 = torch.addmm(p[3], h1, p[2].t()).relu_()
    return h1, h2, torch.addmm(p[5], h2, p[4].t())


def backward(
    dout: torch.Tensor,
    x: torch.Tensor,
    h1: torch.Tensor,
    h2: torch.Tensor,
    p: Nets,
    grads: Nets | None,
) -> torch.Tensor:
    """Back through that MLP from ``dout``: its weight gradients into ``grads`` (None: none,
    as for the critic under the actor loss); returns the gradient at the first layer's
    pre-activation (the caller takes what it needs of the input gradient from it)."""
    relu_grad = torch.ops.aten.threshold_backward
    if grads is not None:
        torch.mm(dout.t(), h2, out=grads[4])
        torch.sum(dout, 0, out=grads[5])
    dz2 = relu_grad(torch.mm(dout, p[4]), h2, 0.0)
    if grads is not None:
        torch.mm(dz2.t(), h1, out=grads[2])
        torch.sum(dz2, 0, out=grads[3])
    dz1 = relu_grad(torch.mm(dz2, p[2]), h1, 0.0)
    if grads is not None:
        torch.mm(dz1.t(), x, out=grads[0])
        torch.sum(dz1, 0, out=grads[1])
    return dz1


def critic_grads(
    b: Batch, y: torch.Tensor, x: torch.Tensor, critic: Nets, grads: Nets
) -> torch.Tensor:
    """DDPG's critic-loss gradients by hand into ``grads`` (``x`` = [obs, action], written
    here); returns the TD errors."""
    torch.cat([b.obs, b.action], 1, out=x)
    h1, h2, q = forward(x, critic)
    td = y - q
    # d/dq of sum_h mean_i w_i (y - q)^2
    backward(td * b.weight.unsqueeze(-1) * (-2.0 / BATCH), x, h1, h2, critic, grads)
    return td


def actor_grads(b: Batch, actor: Nets, critic: Nets, grads: Nets) -> None:
    """DDPG's actor-loss gradients by hand into ``grads``."""
    obs_dim = b.obs.shape[1]
    a1, a2, u = forward(b.obs, actor)
    mu = torch.tanh(u)
    xs = torch.cat([b.obs, mu], 1)
    c1, c2, _ = forward(xs, critic)
    # d/dq of -mean_i Q(s_i, mu(s_i)): the critic's input gradient, action columns only.
    dz1 = backward(torch.full((BATCH, 1), -1.0 / BATCH), xs, c1, c2, critic, None)
    du = torch.mm(dz1, critic[0][:, obs_dim:]).mul_(1 - mu.square())
    backward(du, b.obs, a1, a2, actor, grads)


def by_hand_arm(agent: DDPG, b: Batch) -> Callable[[], None]:
    actor, critic = flat(agent.actor_net), flat(agent.critic)
    actor_t, critic_t = flat(agent.actor_target), flat(agent.critic_target)
    ga, gc = [torch.empty_like(p) for p in actor], [torch.empty_like(p) for p in critic]
    adam_a, adam_c = Adam(actor), Adam(critic)
    targets, online = actor_t + critic_t, actor + critic
    x = torch.empty(BATCH, critic[0].shape[1])
    w = b.weight.unsqueeze(-1)

    @torch.no_grad()
    def step() -> None:
        a_next = torch.tanh(forward(b.next_obs, actor_t)[2])
        q_next = forward(torch.cat([b.next_obs, a_next], 1), critic_t)[2]
        y = torch.addcmul(b.reward, b.discount.unsqueeze(-1), q_next)
        td = critic_grads(b, y, x, critic, gc)
        adam_c.step(gc)
        actor_grads(b, actor, critic, ga)
        adam_a.step(ga)
        torch._foreach_lerp_(targets, online, TAU)
        (td.abs().sum(-1)).numpy()  # the priorities a learner hands back
        torch.stack([(w * td.square()).mean(), td.mean()]).tolist()  # its metrics

    return step


def check_gradients(obs_dim: int, act_dim: int, b: Batch) -> float:
    """Largest relative difference between the gradients by hand and autograd's, for DDPG's
    critic loss and actor loss (Adam is blind to a gradient's scale: checked here instead)."""
    agent = make_agent(obs_dim, act_dim)
    actor, critic = flat(agent.actor_net), flat(agent.critic)
    with torch.no_grad():
        a_next = agent.actor_target(b.next_obs)
        y = b.reward + b.discount.unsqueeze(-1) * agent.critic_target(b.next_obs, a_next)
    q = agent.critic(b.obs, b.action)
    loss = (b.weight.unsqueeze(-1) * (y - q).pow(2)).mean(0).sum()
    want_c = torch.autograd.grad(loss, list(agent.critic.parameters()))
    want_a = torch.autograd.grad(
        -agent.critic(b.obs, agent.actor_net(b.obs)).sum(-1).mean(),
        list(agent.actor_net.parameters()),
    )
    with torch.no_grad():
        gc, ga = [torch.empty_like(p) for p in critic], [torch.empty_like(p) for p in actor]
        critic_grads(b, y, torch.empty(BATCH, critic[0].shape[1]), critic, gc)
        actor_grads(b, actor, critic, ga)
    worst = 0.0
    for want, got in zip([*want_c, *want_a], [*gc, *ga]):
        diff = float((want - got).abs().max() / (want.abs().max() + 1e-12))
        worst = max(worst, diff if np.isfinite(diff) else np.inf)
    return worst


def check_by_hand(obs_dim: int, act_dim: int, b: Batch, steps: int = 3) -> float:
    """Largest relative difference between ``steps`` steps by hand and as many of DDPG.learn,
    same start (more than one: Adam's first step is lr * sign(gradient), blind to its size)."""
    ref, mine = make_agent(obs_dim, act_dim), make_agent(obs_dim, act_dim)
    mine.load_state_dict(ref.state_dict())
    step = by_hand_arm(mine, b)
    for _ in range(steps):
        ref.learn(b)
        step()
    worst = 0.0
    for net in ("actor_net", "critic", "actor_target", "critic_target"):
        for p, q in zip(flat(getattr(ref, net)), flat(getattr(mine, net))):
            diff = float((p - q).abs().max() / (p.abs().max() + 1e-12))
            worst = max(worst, diff if np.isfinite(diff) else np.inf)
    return worst


def compiled_arm(agent: DDPG, b: Batch) -> Callable[[], None]:
    from torch.func import grad_and_value

    actor, critic = flat(agent.actor_net), flat(agent.critic)
    actor_t, critic_t = flat(agent.actor_target), flat(agent.critic_target)
    adam_a, adam_c = Adam(actor), Adam(critic)

    def mlp(x: torch.Tensor, p: Nets) -> torch.Tensor:
        x = F.relu(F.linear(x, p[0], p[1]))
        return F.linear(F.relu(F.linear(x, p[2], p[3])), p[4], p[5])

    def critic_loss(c: Nets, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            a_next = torch.tanh(mlp(batch.next_obs, actor_t))
            q_next = mlp(torch.cat([batch.next_obs, a_next], 1), critic_t)
            y = batch.reward + batch.discount.unsqueeze(-1) * q_next
        td = y - mlp(torch.cat([batch.obs, batch.action], 1), c)
        return (batch.weight.unsqueeze(-1) * td.pow(2)).mean(0).sum(), td

    def actor_loss(a: Nets, c: Nets, obs: torch.Tensor) -> torch.Tensor:
        return -mlp(torch.cat([obs, torch.tanh(mlp(obs, a))], 1), c).sum(-1).mean()

    critic_grad = torch.compile(grad_and_value(critic_loss, has_aux=True), fullgraph=True)
    actor_grad = torch.compile(grad_and_value(actor_loss), fullgraph=True)

    def step() -> None:
        g, (loss, td) = critic_grad(critic, b)
        adam_c.step(list(g))
        g, _ = actor_grad(actor, critic, b.obs)
        adam_a.step(list(g))
        torch._foreach_lerp_(actor_t + critic_t, actor + critic, TAU)
        td.abs().sum(-1).numpy()
        torch.stack([loss.detach(), loss.detach()]).tolist()

    return step


class TorchOptimStep:
    """An optimizer seen through ``step`` and ``zero_grad`` only: ``agents.offpolicy.adam_step``
    then takes ``opt.step()``, so the arm shows the step as it was before that shortcut."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.opt = opt

    def step(self) -> None:
        self.opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)


def repeat(step: Callable[[], object]) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            step()

    return run


def render(stored: dict[str, Any]) -> str:
    """The table: each arm's median ms per step over rounds, and its speed against sb3's."""
    ms = stored["ms"]
    base = float(np.median(ms["sb3"]))
    lines = [
        "# How fast can a DDPG step be on this core",
        "",
        f"One torch thread, batch {BATCH}, hidden {HIDDEN}, obs {stored['obs_dim']}, act "
        f"{stored['act_dim']} ({stored['shape']}); {stored['rounds']} interleaved rounds of "
        f"{stored['steps']} steps; the step by hand matched DDPG.learn to "
        f"{stored['worst']:.1e} (largest relative difference after 3 steps), its gradients "
        f"autograd's to {stored['worst_grad']:.1e}; compiling took {stored['compile_s']:.0f} s.",
        "",
        "| arm | ms per step (median) | min-max over rounds | steps/s vs sb3 |",
        "| --- | ---: | --- | ---: |",
    ]
    for name, xs in ms.items():
        med = float(np.median(xs))
        lines.append(f"| {name} | {med:.2f} | {min(xs):.2f}-{max(xs):.2f} | {base / med:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="halfcheetah")
    ap.add_argument("--out", default=str(RESULTS / "learner_ceiling.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    obs_dim, act_dim = SHAPES[args.shape]
    b = fixed_batch(obs_dim, act_dim)
    worst_grad = check_gradients(obs_dim, act_dim, b)
    assert worst_grad < 1e-4, f"the gradients by hand are not autograd's: {worst_grad:.2e}"
    worst = check_by_hand(obs_dim, act_dim, b)
    assert worst < 1e-4, f"the step by hand is not DDPG.learn's: {worst:.2e}"
    learn_agent = make_agent(obs_dim, act_dim)
    optim_agent = make_agent(obs_dim, act_dim)
    optim_agent.actor_opt = TorchOptimStep(optim_agent.actor_opt)  # type: ignore[assignment]
    optim_agent.critic_opt = TorchOptimStep(optim_agent.critic_opt)  # type: ignore[assignment]
    compiled_agent = make_agent(obs_dim, act_dim, compile=True)
    sb3 = sb3_arm(obs_dim, act_dim)
    t0 = time.perf_counter()
    compiled = compiled_arm(make_agent(obs_dim, act_dim), b)
    compiled()
    compiled_agent.learn(b)
    compile_s = time.perf_counter() - t0
    arms: dict[str, Callable[[int], None]] = {
        "sb3": sb3,  # one train(gradient_steps=n) call, as bench_learner.py times it
        "agents.ddpg, torch.optim's step": repeat(lambda: optim_agent.learn(b)),
        "agents.ddpg": repeat(lambda: learn_agent.learn(b)),
        "agents.ddpg, compile = true": repeat(lambda: compiled_agent.learn(b)),
        "by hand": repeat(by_hand_arm(make_agent(obs_dim, act_dim), b)),
        "torch.compile": repeat(compiled),
    }
    for arm in arms.values():
        arm(10)
    ms: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t = time.perf_counter()
            arms[name](args.steps)
            ms[name].append((time.perf_counter() - t) / args.steps * 1e3)
    stored = {
        "shape": args.shape,
        "obs_dim": obs_dim,
        "act_dim": act_dim,
        "rounds": args.rounds,
        "steps": args.steps,
        "worst": worst,
        "worst_grad": worst_grad,
        "compile_s": compile_s,
        "ms": ms,
    }
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    print(text)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
