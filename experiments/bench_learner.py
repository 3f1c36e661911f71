"""DDPG gradient steps/s: wheeler2's learner step against Stable-Baselines3's ``train()``, side
by side in one process on the same shapes (issue 17, item 3).

    python -m experiments.bench_learner [--rounds 5] [--steps 300] [--threads 1]

Both sides: batch 256, hidden [256, 256] for actor and critic, Adam 1e-3, tau 0.005, gamma
0.99, the actor and the targets updated every step (SB3's DDPG is its TD3 with policy_delay 1,
no target smoothing, one critic), a buffer of 100,000 random transitions, the same torch
threads (1 by default: what a wheeler2 learner process runs with, wheeler2/process.py). Shapes:
Pendulum (obs 3, act 1) and HalfCheetah (obs 17, act 6). Rows:

* ``sb3``: ``DDPG.train(gradient_steps=N, batch_size=256)`` on its uniform ReplayBuffer;
* ``wheeler2 uniform``: the learner's step as a run takes it (``runtime.member.Trainer``:
  sample the central shared-memory replay, move the batch to torch, ``DDPG.learn``), with
  ``prioritized = false``, SB3's sampling;
* ``wheeler2 prioritized``: the same with PER (sample by priority, importance weights, write
  the new priorities back), what the shipped configs run: a separate row, SB3 has no PER;
* ``wheeler2 prioritized, prefetch``: that step with ``[buffer] prefetch = true``: the next
  batch sampled in a second thread (so on the second core) during the step instead of after
  it. The rows above use the default (prefetch off);
* ``matrix products alone``: only the matrix products of one wheeler2 DDPG step (the
  forwards, the backwards that the step asks for), on the same tensors again and again, so on
  hot caches: no autograd, no optimizer, no sampling. Not an arm: a ceiling. SB3's time over
  this one bounds what any implementation of the step on this core can reach.

Arms alternate within each round, the order rotating from round to round (machine load hits
all alike); the table gives the median
steps/s over rounds and each wheeler2 row's ratio to SB3's median. Writes every round's rate to
``<out stem>_runs.json`` and the table to ``--out`` (``experiments/results/bench_learner.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.lib import RESULTS, report, runs
from experiments.lib.setups import BATCH, CAPACITY, FILL, HIDDEN, SHAPES
from experiments.lib.setups import sb3_ddpg_train as sb3_arm
from wheeler2 import registry
from wheeler2.agent import SpaceInfo
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.runtime.trainer import Trainer

FLOOR = "matrix products alone, hot caches"


def wheeler_arm(
    obs_dim: int, act_dim: int, prioritized: bool, prefetch: bool = False, compile: bool = False
) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(take N learner steps, close)."""
    cfg = ReplayConfig(
        capacity=CAPACITY,
        batch_size=BATCH,
        prioritized=prioritized,
        updates_per_insert=0.0,  # the gate off: the learner samples as fast as it can
        min_size=BATCH,
    )
    replay = Replay.create(Layout(obs_dim, act_dim), cfg, gamma=0.99)
    rng = np.random.default_rng(0)
    writer, n = replay.writer(num_envs=1000), 1000
    for _ in range(FILL // n):
        obs = rng.standard_normal((n, obs_dim)).astype(np.float32)
        writer.add(
            obs,
            rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
            rng.standard_normal((n, 1)).astype(np.float32),
            rng.standard_normal((n, obs_dim)).astype(np.float32),
            np.zeros(n, bool),
            np.zeros(n, bool),
        )
    writer.flush()
    ddpg = registry.resolve_algo("ddpg")
    params = ddpg.Params(hidden=HIDDEN, gamma=0.99, tau=0.005, learning_starts=0, compile=compile)
    agent = ddpg(SpaceInfo(obs_dim, act_dim, False), params)
    trainer = Trainer(agent, replay, prefetch=prefetch)

    def run(steps: int) -> None:
        done = trainer.train_available(max_updates=steps)
        assert done == steps, done

    def close() -> None:
        trainer.close()
        replay.close()

    return run, close


def matmul_floor(obs_dim: int, act_dim: int) -> Callable[[int], None]:
    """The matrix products of one wheeler2 DDPG step, alone, on hot caches (a ceiling)."""
    b, (h1, h2) = BATCH, HIDDEN
    r = torch.randn
    actor = [r(h1, obs_dim), r(h2, h1), r(act_dim, h2)]
    critic = [r(h1, obs_dim + act_dim), r(h2, h1), r(1, h2)]
    bias = [r(h1), r(h2)]
    xa, xc = r(b, obs_dim), r(b, obs_dim + act_dim)
    g1, g2, gq, ga = r(b, h1), r(b, h2), r(b, 1), r(b, act_dim)
    a1, a2 = r(b, h1), r(b, h2)

    def forward(x: torch.Tensor, w: list[torch.Tensor]) -> None:
        y = torch.addmm(bias[0], x, w[0].t())
        y = torch.addmm(bias[1], y, w[1].t())
        y @ w[2].t()

    def step() -> None:
        forward(xa, actor)  # target actor
        forward(xc, critic)  # target critic
        forward(xc, critic)  # critic
        gq.t() @ a2, gq @ critic[2], g2.t() @ a1, g2 @ critic[1], g1.t() @ xc  # its backward
        forward(xa, actor)  # actor
        forward(xc, critic)  # critic of the actor loss
        gq @ critic[2], g2 @ critic[1], g1 @ critic[0]  # input gradients only
        ga.t() @ a2, ga @ actor[2], g2.t() @ a1, g2 @ actor[1], g1.t() @ xa  # actor backward

    def run(steps: int) -> None:
        for _ in range(steps):
            step()

    return run


def rate(run: Callable[[int], None], steps: int) -> float:
    t0 = time.perf_counter()
    run(steps)
    return steps / (time.perf_counter() - t0)


def render(stored: dict[str, Any]) -> str:
    """The table: per shape and arm, the median steps/s over rounds and its ratio to sb3's."""
    lines = [
        "# DDPG gradient steps/s: wheeler2 against SB3's train()",
        "",
        f"{stored['machine']}, torch {stored['torch']}, {stored['threads']} torch thread(s); "
        f"batch {BATCH}, hidden {HIDDEN}, {stored['rounds']} interleaved rounds of "
        f"{stored['steps']} steps per arm; medians.",
        "",
        "| shape | arm | steps/s (median) | min-max over rounds | ratio to sb3 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for shape, rates in stored["rates"].items():
        obs_dim, act_dim = SHAPES[shape]
        base = float(np.median(rates["sb3"]))
        for name, xs in rates.items():
            med = float(np.median(xs))
            ratio = "1" if name == "sb3" else f"{med / base:.2f}x"
            if name == FLOOR:
                ratio = f"{ratio} (ceiling)"
            lines.append(
                f"| {shape} ({obs_dim}/{act_dim}) | {name} | {med:,.0f} | "
                f"{min(xs):,.0f}-{max(xs):,.0f} | {ratio} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300, help="gradient steps per arm per round")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    ap.add_argument("--out", default=str(RESULTS / "bench_learner.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    stored: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "threads": args.threads,
        "rounds": args.rounds,
        "steps": args.steps,
        "rates": {},
    }
    for shape in args.shapes:
        obs_dim, act_dim = SHAPES[shape]
        arms = {"sb3": sb3_arm(obs_dim, act_dim)}
        closers = []
        for name, prioritized, prefetch, compile in (
            ("wheeler2 uniform", False, False, False),
            ("wheeler2 prioritized", True, False, False),
            ("wheeler2 prioritized, prefetch", True, True, False),
            ("wheeler2 prioritized, compile", True, False, True),
        ):
            arms[name], close = wheeler_arm(obs_dim, act_dim, prioritized, prefetch, compile)
            closers.append(close)
        arms[FLOOR] = matmul_floor(obs_dim, act_dim)
        try:
            for run in arms.values():  # warm-up: first-call allocations and compiles
                run(20)
            rates: dict[str, list[float]] = {name: [] for name in arms}
            for i in range(args.rounds):
                names = list(arms)
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    rates[name].append(rate(arms[name], args.steps))
        finally:
            for close in closers:
                close()
        stored["rates"][shape] = rates
        print(f"{shape}: " + ", ".join(f"{k} {np.median(v):,.0f}" for k, v in rates.items()))
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
