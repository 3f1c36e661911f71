"""What issue 15's options cost: act and learn time with and without ``noisy = true`` and
``features = "rbf"`` for DDPG (Pendulum shapes, 400 x 300) and DQN (CartPole shapes, 64 x 64),
and the env step of PendulumNoVel-v1 with and without ``[env] stack = 3``. Medians of
interleaved rounds, one torch thread; the table in docs/config.md came from this script.

    python -m experiments.bench_options [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import wheeler2.envs.novel  # noqa: F401  (registers the NoVel ids)
from wheeler2.envs.gym import GymVecEnv

from wheeler2 import registry
from wheeler2.agent import Batch, SpaceInfo
from wheeler2.env import FrameStack
from wheeler2.process import set_compute_threads

PENDULUM, CARTPOLE = SpaceInfo(3, 1, False), SpaceInfo(4, 2, True)
VARIANTS = {"plain": {}, "noisy": {"noisy": True}, "rbf64": {"features": "rbf"}}
ALGOS = {"ddpg": (PENDULUM, [400, 300], 20), "dqn": (CARTPOLE, [64, 64], 60)}


def batch(space: SpaceInfo, n: int = 256) -> Batch:
    rng = np.random.default_rng(0)
    if space.discrete:
        action = torch.as_tensor(rng.integers(0, space.act_dim, n))
    else:
        action = torch.as_tensor(rng.uniform(-1, 1, (n, space.act_dim)), dtype=torch.float32)
    return Batch(
        obs=torch.randn(n, space.obs_dim),
        action=action,
        reward=torch.randn(n, 1),
        next_obs=torch.randn(n, space.obs_dim),
        discount=torch.full((n,), 0.98),
        weight=torch.ones(n),
        index=np.arange(n),
    )


def micros(fn: Callable[[], object], reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e6


def calls() -> dict[str, tuple[Callable[[], object], int]]:
    """Every timed call, built once: name -> (call, repetitions per round)."""
    out: dict[str, tuple[Callable[[], object], int]] = {}
    for algo, (space, hidden, learn_reps) in ALGOS.items():
        cls = registry.resolve_algo(algo)
        for variant, extra in VARIANTS.items():
            params = cls.Params(learning_starts=0, hidden=hidden, **extra)
            agent = cls(space, params, seed=0)
            for n in (1, 8):
                obs = np.random.default_rng(0).normal(size=(n, space.obs_dim)).astype(np.float32)
                out[f"{algo} {variant} act N={n}"] = (lambda a=agent, o=obs: a.act(o, True), 300)
            learn_batch = batch(space)
            out[f"{algo} {variant} learn B=256"] = (
                lambda a=agent, b=learn_batch: a.learn(b),
                learn_reps,
            )
    for k in (1, 3):
        for n in (1, 8):
            env = GymVecEnv("PendulumNoVel-v1", {}, n, 0)
            env = FrameStack(env, k) if k > 1 else env
            env.reset(seed=0)
            action = np.zeros((n, 1), np.float32)
            out[f"env PendulumNoVel stack={k} step N={n}"] = (
                lambda e=env, a=action: e.step(a),
                2000,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    set_compute_threads()
    timed = calls()
    rows: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, (fn, reps) in timed.items():
            rows[name].append(micros(fn, reps))
    for name, v in rows.items():
        print(f"{name:40s} {statistics.median(v):9.1f} us  (rounds {min(v):.0f}-{max(v):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
