"""Collection throughput: the engine's Member loop against gymnasium's own vector env loop.

Side by side in one run, on Pendulum-v1 with 8 copies:

* ``gymnasium``: ``gymnasium.make_vec("Pendulum-v1", num_envs=8, vectorization_mode="sync")``
  stepping ``envs.action_space.sample()`` - the reference;
* ``member, random``: a Member whose agent returns uniform random actions, writing every row
  into a central Replay (what a member does in a run);
* ``member, DDPG explorer``: a Member with a DDPG agent past ``learning_starts`` (its actor and
  Gaussian noise in the loop), writing into a Replay; nobody samples the replay;
* the same two Members with ``[env] vector = "envpool"`` (envpool's C++ pool, where installed).

``--env HalfCheetah-v5`` runs the same loops on a MuJoCo task, where one env step costs more.

The loops are interleaved round by round, and each ratio is the median over rounds of the
ratio within a round: load from other jobs on this shared machine comes and goes, and a ratio
of back-to-back loops cancels most of it.

    python -m experiments.bench_collect [--steps 20000] [--rounds 5] [--env HalfCheetah-v5]

Writes the rates of every round to ``<out stem>_runs.json`` and the table to ``--out``
(experiments/results/bench_collect.md by default; bench_all.py passes performance/...).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, report, runs

ENV_ID = "Pendulum-v1"
NUM_ENVS = 8


def gym_loop(steps: int) -> float:  # ENV_ID: set by --env before any loop runs
    import gymnasium as gym

    envs = gym.make_vec(ENV_ID, num_envs=NUM_ENVS, vectorization_mode="sync")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    t0 = time.perf_counter()
    for _ in range(steps // NUM_ENVS):
        envs.step(envs.action_space.sample())
    dt = time.perf_counter() - t0
    envs.close()
    return steps / dt


class RandomAgent:
    """Uniform actions in [-1, 1]; the Agent surface a Member calls, nothing else."""

    uses_replay = False

    def __init__(self, act_dim: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.act_dim = act_dim

    def act(self, obs: np.ndarray, explore: bool):  # noqa: ANN201
        from wheeler2.agent import ActOut

        return ActOut(self.rng.uniform(-1.0, 1.0, (len(obs), self.act_dim)).astype(np.float32))

    def observe(self, step: object) -> None:
        return None


def member_loop(kind: str, steps: int, vector: str = "sync") -> float:
    from wheeler2.envs.gym import make

    from wheeler2.agent import SpaceInfo
    from wheeler2.buffer import Layout, Replay, ReplayConfig
    from wheeler2.runtime.member import Member
    from wheeler2.task import Head, RewardHeads

    env = make(ENV_ID, {}, NUM_ENVS, 0, vector=vector)
    heads = RewardHeads([Head("env", 1.0, None)], None)
    if kind == "random":
        agent = RandomAgent(env.info.act_dim, 0)
    else:
        from wheeler2 import registry

        ddpg = registry.resolve_algo("ddpg")
        space = SpaceInfo(obs_dim=env.info.obs_dim, act_dim=env.info.act_dim, discrete=False)
        agent = ddpg(space, ddpg.Params(learning_starts=0), seed=0)
    layout = Layout(obs_dim=env.info.obs_dim, act_dim=env.info.act_dim, discrete=False)
    cfg = ReplayConfig(capacity=steps + 1024, prioritized=True, updates_per_insert=0.0)
    replay = Replay.create(layout, cfg, gamma=0.98, relabel=None, seed=0)
    member = Member("bench", "explorer", agent, env, heads, replay.writer(NUM_ENVS, block=False), 0)
    try:
        t0 = time.perf_counter()
        done = 0
        while done < steps:
            done += member.step()
        dt = time.perf_counter() - t0
    finally:
        member.close()
        replay.close()
    return done / dt


def render(stored: dict[str, Any]) -> str:
    """The table of one benchmark run: medians over rounds, ratios to the first loop's."""
    rates, targets = stored["rates"], stored["targets"]
    ref = rates[next(iter(rates))]
    lines = [
        f"| loop ({stored['env']}, num_envs = {stored['num_envs']}) | env steps/s (median of "
        f"{stored['rounds']}) | min - max | ratio to gymnasium (median of per-round ratios) "
        "| target | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, v in rates.items():
        target = targets.get(name)
        med = statistics.median(v)
        ratio = statistics.median(x / g for x, g in zip(v, ref))
        met = "" if target is None else ("yes" if ratio >= target else "**no**")
        lines.append(
            f"| {name} | {med:,.0f} | {min(v):,.0f} - {max(v):,.0f} | {ratio:.2f}x "
            f"| {'' if target is None else f'>= {target}x'} | {met} |"
        )
    return (
        "# Collection throughput: Member vs gymnasium's vector loop\n\n"
        f"{stored['machine']}, shared 2-core machine, one torch thread; {stored['steps']} env "
        "steps per loop and round. Loops interleaved round by round; ratios are medians of "
        "per-round ratios.\n\n" + "\n".join(lines)
    )


def main(argv: list[str] | None = None) -> None:
    global ENV_ID
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8_000, help="env steps per loop and round")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=str(RESULTS / "bench_collect.md"))
    ap.add_argument("--env", default="Pendulum-v1", help="a gymnasium id, Box actions")
    args = ap.parse_args(argv)
    ENV_ID = args.env

    from wheeler2.process import set_compute_threads

    set_compute_threads()
    loops: dict[str, Callable[[int], float]] = {
        "gymnasium make_vec sync, random actions": gym_loop,
        "Member, random actions, into a Replay": lambda s: member_loop("random", s),
        "Member, DDPG explorer (actor + noise), into a Replay": lambda s: member_loop("ddpg", s),
    }
    targets = {
        "Member, random actions, into a Replay": 0.7,
        "Member, DDPG explorer (actor + noise), into a Replay": 0.5,
    }
    try:
        import envpool  # noqa: F401

        loops["Member, random actions, envpool"] = lambda s: member_loop("random", s, "envpool")
        loops["Member, DDPG explorer, envpool"] = lambda s: member_loop("ddpg", s, "envpool")
    except ImportError:
        print("envpool is not installed: its rows are left out")
    rates: dict[str, list[float]] = {k: [] for k in loops}
    for r in range(args.rounds):
        for name, fn in loops.items():
            rates[name].append(fn(args.steps))
        print(f"round {r + 1}: " + ", ".join(f"{v[-1]:,.0f}" for v in rates.values()), flush=True)
    stored = {
        "env": ENV_ID,
        "num_envs": NUM_ENVS,
        "steps": args.steps,
        "rounds": args.rounds,
        "machine": platform.processor() or platform.machine(),
        "rates": rates,
        "targets": targets,
    }
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))
    print(text)


if __name__ == "__main__":
    main()
