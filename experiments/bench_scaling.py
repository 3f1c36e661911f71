"""Collection that scales with explorers, and a learner that keeps its pace while they run
(issue 17, item 4).

    python -m experiments.bench_scaling [--explorers 1 2 4 8] [--seconds 10]

The engine's own parts, as a ``local`` run wires them: one central shared-memory prioritized
replay (``wheeler2.buffer.Replay``) created here; N explorer processes, each a
``runtime.member.Member`` stepping its env with a DDPG actor plus Gaussian noise (an Ape-X
actor: 2 x 256, one torch thread) and writing every transition into the replay; and, in this
process, the learner (``runtime.member.Trainer`` with DDPG 2 x 256, batch 256) sampling,
learning and writing priorities back. The ratio gate is off (``updates_per_insert = 0``, a
benchmark switch the config files do not offer), so neither side waits for the other and
each rate is what the two cores allow.

For N = 1, 2, 4, 8: the explorers' summed env steps/s over a window of ``--seconds`` (after
every explorer has started), and the learner's gradient steps/s in the same window, against the
learner alone (N = 0, sampling a replay nobody writes). On Pendulum-v1 (the env costs ~20 us
a step: CPU bound, so two cores are shared by everyone) and on ``wheeler2/Slow-v0`` (Pendulum
with a 2 ms step that sleeps, as a remote simulator's would). Targets: 8 explorers >= 6x the
env steps/s of 1 on the slow env, with the learner >= 0.8x its rate alone.

``--explorer-nice 0 10`` (the default) measures each env twice: explorers at the learner's
niceness, and at niceness 10 (a member's ``nice`` key), where the scheduler gives the learner its
core first and the explorers the time it leaves.

Writes the measured rates to ``<out stem>_runs.json`` and the table to ``--out``
(``experiments/results/bench_scaling.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import multiprocess as mp
import numpy as np

from experiments.lib import RESULTS, report, runs

ENVS = {
    "Pendulum-v1": ("Pendulum-v1", {}),
    "Pendulum, 2 ms step": ("wheeler2/Slow-v0", {"env_id": "Pendulum-v1", "step_ms": 2.0}),
}
HIDDEN = [256, 256]


def explorer(
    handle: Any, env: tuple[str, dict], seed: int, count: Any, stop: Any, nice: int = 0
) -> None:
    import wheeler2.envs.slow  # noqa: F401  (registers wheeler2/Slow-v0)
    from wheeler2.envs.gym import GymVecEnv

    from wheeler2 import registry
    from wheeler2.agent import SpaceInfo
    from wheeler2.buffer import Replay
    from wheeler2.process import set_compute_threads
    from wheeler2.runtime.member import Member
    from wheeler2.task import Head, RewardHeads

    set_compute_threads()
    os.nice(nice)  # what a member's `nice` key does in its own process
    replay = Replay.attach(handle)
    vec = GymVecEnv(env[0], env[1], 1, seed)
    space = SpaceInfo(obs_dim=vec.info.obs_dim, act_dim=vec.info.act_dim, discrete=False)
    ddpg = registry.resolve_algo("ddpg")
    agent = ddpg(space, ddpg.Params(hidden=HIDDEN, learning_starts=0), seed=seed)
    heads = RewardHeads([Head("env", 1.0, None)], None)
    member = Member("explorer", "actor", agent, vec, heads, replay.writer(1, block=False), seed)
    try:
        while not stop.is_set():
            count.value += member.step()
    finally:
        member.close()
        replay.close()


def learner_replay() -> tuple[Any, Any]:
    from wheeler2 import registry
    from wheeler2.agent import SpaceInfo
    from wheeler2.buffer import Layout, Replay, ReplayConfig
    from wheeler2.runtime.trainer import Trainer

    cfg = ReplayConfig(
        capacity=200_000, batch_size=256, prioritized=True, updates_per_insert=0.0, min_size=256
    )
    replay = Replay.create(Layout(3, 1), cfg, gamma=0.98)
    rng, n = np.random.default_rng(0), 1_000
    writer = replay.writer(num_envs=n)
    for _ in range(10):  # 10,000 rows, so the learner samples from the first moment
        writer.add(
            rng.standard_normal((n, 3)).astype(np.float32),
            rng.uniform(-1, 1, (n, 1)).astype(np.float32),
            rng.standard_normal((n, 1)).astype(np.float32),
            rng.standard_normal((n, 3)).astype(np.float32),
            np.zeros(n, bool),
            np.zeros(n, bool),
        )
    writer.flush()
    ddpg = registry.resolve_algo("ddpg")
    return replay, Trainer(ddpg(SpaceInfo(3, 1, False), ddpg.Params(hidden=HIDDEN)), replay)


def measure(env: tuple[str, dict], n: int, seconds: float, nice: int = 0) -> dict[str, float]:
    replay, trainer = learner_replay()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    counts = [ctx.RawValue("q", 0) for _ in range(n)]
    procs = [
        ctx.Process(target=explorer, args=(replay.handle(), env, 100 + i, counts[i], stop, nice))
        for i in range(n)
    ]
    try:
        for p in procs:
            p.start()
        while any(c.value == 0 for c in counts):  # every explorer built and stepping
            trainer.train_available(max_updates=1)
        trainer.train_available(max_updates=20)  # warm: first-call allocations
        steps0, updates0, t0 = sum(c.value for c in counts), trainer.updates, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            trainer.train_available(max_updates=10)
        dt = time.perf_counter() - t0
        steps = sum(c.value for c in counts) - steps0
        return {"steps_per_s": steps / dt, "updates_per_s": (trainer.updates - updates0) / dt}
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        replay.close()


def render(stored: dict[str, Any]) -> str:
    """The table: per env and explorer niceness, env steps/s and learner updates/s by count."""
    lines = [
        "# Collection scaling: explorers' env steps/s, and the learner's updates/s meanwhile",
        "",
        f"{stored['machine']}, one torch thread per process; window of {stored['seconds']:g} s "
        "per row after every explorer started; the gate off.",
        "",
        "| env | explorers | env steps/s | x 1 explorer | learner updates/s | x learner alone |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, env in stored["envs"].items():
        alone = env["alone_updates_per_s"]
        lines.append(f"| {label} | 0 (learner alone) | — | — | {alone:,.0f} | 1 |")
        for nice, rows in env["by_nice"].items():
            row = label if int(nice) == 0 else f"{label}, explorers at nice {nice}"
            one = next((r["steps_per_s"] for r in rows if r["explorers"] == 1), None)
            for r in rows:
                scale = f"{r['steps_per_s'] / one:.2f}x" if one else "—"
                lines.append(
                    f"| {row} | {r['explorers']} | {r['steps_per_s']:,.0f} | {scale} | "
                    f"{r['updates_per_s']:,.0f} | {r['updates_per_s'] / alone:.2f}x |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--explorers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--explorer-nice",
        type=int,
        nargs="+",
        default=[0, 10],
        help="explorer niceness, one set of rows each (a member's `nice` key)",
    )
    ap.add_argument("--out", default=str(RESULTS / "bench_scaling.md"))
    args = ap.parse_args(argv)
    from wheeler2.process import set_compute_threads

    set_compute_threads()
    stored: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "seconds": args.seconds,
        "envs": {},
    }
    for label, env in ENVS.items():
        alone = measure(env, 0, args.seconds)["updates_per_s"]
        print(f"{label}: learner alone {alone:,.0f} updates/s", flush=True)
        by_nice: dict[str, list[dict[str, float]]] = {}
        for nice in args.explorer_nice:
            for n in args.explorers:
                r = measure(env, n, args.seconds, nice)
                by_nice.setdefault(str(nice), []).append({"explorers": n, **r})
                print(f"{label}, nice {nice}, {n} explorers: {r}", flush=True)
        stored["envs"][label] = {"alone_updates_per_s": alone, "by_nice": by_nice}
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
