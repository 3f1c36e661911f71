"""The image replay against Stable-Baselines3's memory-optimized one (issue 40, "Measure").

    python -m experiments.bench_image_replay [--fill 20000] [--seconds 3] [--rounds 3]

84x84 uint8 frames stacked 4 (Atari after AtariPreprocessing), 6 discrete actions, episodes of
500 steps written from 1 env copy, batches of 32 stacked observations (obs and next obs).

* Memory: bytes per stored transition of every shared segment of wheeler2's replay at 1M
  capacity (``buffer.storage.field_specs``, what ``wheeler2 check`` counts), measured also on a
  replay actually created in /dev/shm at ``--fill`` capacity; SB3's ``ReplayBuffer(
  optimize_memory_usage=True)`` keeps one stacked observation per transition (its
  ``observations`` array) plus actions, rewards, dones and timeouts.
* Throughput, one process: ``sample(32)`` calls per second on a full buffer (``--fill``
  transitions); SB3 ``sample(32)`` on the same content.
* Throughput with 2 producer processes inserting: wheeler2's producers attach the shared
  replay and write whole episodes through their own writers while the main process samples
  (the gate off); SB3's buffer lives in one process, so its 2 producers send each vector step
  through a ``multiprocessing`` queue and the main process adds what has arrived before each
  sample (the way SB3's own training loop feeds its buffer). Samples/s of the main process.

Arms alternate for ``--rounds`` rounds (medians reported), so other load hits both alike.
Writes experiments/results/image_replay_bench.md (through ``experiments.lib.report``: rebuild
it with ``python -m experiments regen``) and its rounds and setup as JSON beside it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, report
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.buffer.storage import field_specs

SIDE, STACK, ACTIONS, BATCH, EPISODE = 84, 4, 6, 32, 500
FRAME = SIDE * SIDE


def layout() -> Layout:
    return Layout(
        obs_dim=STACK * FRAME,
        act_dim=ACTIONS,
        discrete=True,
        frame_shape=(1, SIDE, SIDE),
        stack=STACK,
    )


def config(capacity: int) -> ReplayConfig:
    return ReplayConfig(
        capacity=capacity, batch_size=BATCH, min_size=1, updates_per_insert=0, timeout_s=600
    )


def segment_bytes(lay: Layout, cfg: ReplayConfig) -> int:
    return sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in field_specs(lay, cfg).values())


class Episodes:
    """Stacked 84x84 observations of one env copy, as wheeler2.env.FrameStack makes them."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self.frames = np.repeat(self._frame()[None], STACK, axis=0)

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, FRAME, dtype=np.uint8)

    def step(self) -> tuple[np.ndarray, np.ndarray, bool]:
        obs = self.frames.reshape(-1).copy()
        nxt = np.concatenate([self.frames[1:], self._frame()[None]])
        self.t += 1
        done = self.t % EPISODE == 0
        self.frames = np.repeat(self._frame()[None], STACK, axis=0) if done else nxt
        return obs, nxt.reshape(-1), done


def fill_wheeler2(replay: Replay, n: int, seed: int) -> None:
    w = replay.writer(num_envs=1)
    env = Episodes(seed)
    zero, act = np.zeros(1, bool), np.zeros(1, np.int64)
    for _ in range(n):
        obs, nxt, done = env.step()
        w.add(obs[None], act, np.ones(1), nxt[None], np.array([done]), zero)
    w.flush()


def sb3_buffer(capacity: int) -> Any:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    torch.set_num_threads(1)
    obs_space = spaces.Box(0, 255, (STACK, SIDE, SIDE), np.uint8)
    return ReplayBuffer(
        capacity,
        obs_space,
        spaces.Discrete(ACTIONS),
        device="cpu",
        optimize_memory_usage=True,
        handle_timeout_termination=False,
    )


def sb3_add(buf: Any, obs: np.ndarray, nxt: np.ndarray, done: bool) -> None:
    shape = (1, STACK, SIDE, SIDE)
    buf.add(
        obs.reshape(shape), nxt.reshape(shape), np.zeros((1, 1)), np.ones(1), np.array([done]), [{}]
    )


def fill_sb3(buf: Any, n: int, seed: int) -> None:
    env = Episodes(seed)
    for _ in range(n):
        obs, nxt, done = env.step()
        sb3_add(buf, obs, nxt, done)


def rate(sample: Any, seconds: float, between: Any = None) -> float:
    """Samples (of BATCH) per second over ``seconds``."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if between is not None:
            between()
        sample()
        n += 1
    return n * BATCH / (time.perf_counter() - start)


def _w2_producer(handle: Any, seed: int, stop: Any) -> None:
    replay = Replay.attach(handle)
    w = replay.writer(num_envs=1, block=False)
    env = Episodes(seed)
    zero, act = np.zeros(1, bool), np.zeros(1, np.int64)
    while not stop.is_set():
        obs, nxt, done = env.step()
        w.add(obs[None], act, np.ones(1), nxt[None], np.array([done]), zero)
    w.flush()
    replay.close()


def _sb3_producer(q: Any, seed: int, stop: Any) -> None:
    env = Episodes(seed)
    while not stop.is_set():
        try:
            q.put(env.step(), timeout=0.1)
        except queue.Full:
            continue


def with_producers(kind: str, fill: int, seconds: float) -> tuple[float, int]:
    """(samples/s of the main process, transitions the producers inserted meanwhile)."""
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    if kind == "wheeler2":
        replay = Replay.create(layout(), config(fill), gamma=0.99, seed=0)
        fill_wheeler2(replay, fill, 0)
        before = replay.stats()["inserts"]
        procs = [ctx.Process(target=_w2_producer, args=(replay.handle(), s, stop)) for s in (1, 2)]
        for p in procs:
            p.start()
        r = rate(lambda: replay.sample(BATCH), seconds)
        stop.set()
        for p in procs:
            p.join()
        inserted = replay.stats()["inserts"] - before
        replay.close()
        return r, int(inserted)
    buf = sb3_buffer(fill)
    fill_sb3(buf, fill, 0)
    q: Any = ctx.Queue(maxsize=256)
    procs = [ctx.Process(target=_sb3_producer, args=(q, s, stop)) for s in (1, 2)]
    for p in procs:
        p.start()
    added = [0]

    def drain() -> None:
        while True:
            try:
                obs, nxt, done = q.get_nowait()
            except queue.Empty:
                return
            sb3_add(buf, obs, nxt, done)
            added[0] += 1

    r = rate(lambda: buf.sample(BATCH), seconds, drain)
    stop.set()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
    return r, added[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fill", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "image_replay_bench.md")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    lay = layout()
    per_1m = segment_bytes(lay, config(1_000_000)) / 1_000_000
    sb3_per = (
        STACK * FRAME + 8 + 4 + 4 + 4
    )  # observations, actions (int64), rewards, dones, timeouts
    created = Replay.create(lay, config(args.fill), gamma=0.99)
    shm = sum(seg.array.nbytes for seg in created.storage.segments.values()) / args.fill
    created.close()

    w2 = Replay.create(lay, config(args.fill), gamma=0.99, seed=0)
    fill_wheeler2(w2, args.fill, 0)
    sb3 = sb3_buffer(args.fill)
    fill_sb3(sb3, args.fill, 0)
    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        one = {
            "wheeler2": rate(lambda: w2.sample(BATCH), args.seconds),
            "sb3": rate(lambda: sb3.sample(BATCH), args.seconds),
        }
        arms = ["wheeler2", "sb3"] if rnd % 2 == 0 else ["sb3", "wheeler2"]
        two = {k: with_producers(k, args.fill, args.seconds) for k in arms}
        runs.append({"round": rnd, "one_process": one, "two_producers": two})
        print(runs[-1], flush=True)
    w2.close()
    data = {
        "setup": {
            "fill": args.fill,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "date": time.strftime("%Y-%m-%d"),
            "cores": os.cpu_count(),
            "load": os.getloadavg()[0],
            "python": platform.python_version(),
            "bytes_per_1m": per_1m,
            "bytes_shm": shm,
            "bytes_sb3": sb3_per,
        },
        "runs": runs,
    }
    text = report.publish(args.out, data, render, argv)
    print(text)
    return 0


def render(data: dict[str, Any], **_: object) -> str:
    """The table from the stored rounds and setup (``{"setup": {...}, "runs": [...]}``)."""
    setup, runs = data["setup"], data["runs"]
    fill, seconds, rounds = setup["fill"], setup["seconds"], setup["rounds"]
    per_1m, shm, sb3_per = setup["bytes_per_1m"], setup["bytes_shm"], setup["bytes_sb3"]

    def med(path: tuple[str, str], i: int | None = None) -> float:
        vals = [r[path[0]][path[1]] for r in runs]
        return float(np.median([v[i] if i is not None else v for v in vals]))

    one_w2, one_sb3 = med(("one_process", "wheeler2")), med(("one_process", "sb3"))
    two_w2, two_sb3 = med(("two_producers", "wheeler2"), 0), med(("two_producers", "sb3"), 0)
    ins_w2, ins_sb3 = med(("two_producers", "wheeler2"), 1), med(("two_producers", "sb3"), 1)

    def ratios(kind: str, pick: Any) -> str:
        each = [pick(r[kind]["wheeler2"]) / pick(r[kind]["sb3"]) for r in runs]
        return ", ".join(f"{x:.2f}" for x in each)

    r_one = f"{one_w2 / one_sb3:.2f}x [{ratios('one_process', float)}]"
    r_two = f"{two_w2 / two_sb3:.2f}x [{ratios('two_producers', lambda v: v[0])}]"
    return f"""# Image replay: bytes and sampling against SB3's optimize_memory_usage buffer

`python -m experiments.bench_image_replay --fill {fill} --seconds {seconds} --rounds \
{rounds}` ({setup["date"]}, {setup["cores"]} cores shared with other work, load \
{setup["load"]:.1f}, Python {setup["python"]}). 84x84 uint8 frames stacked 4, 6 actions,
500-step episodes, batches of {BATCH} (obs and next obs stacks). Medians of {rounds} rounds.

## Memory per stored transition

| replay | bytes / transition | x one 84x84 frame ({FRAME} B) |
| --- | --- | --- |
| wheeler2, every shared segment at 1M capacity (uniform) | {per_1m:,.0f} | {per_1m / FRAME:.3f} |
| wheeler2, measured in /dev/shm at {fill:,} capacity | {shm:,.0f} | {shm / FRAME:.3f} |
| SB3 ReplayBuffer(optimize_memory_usage=True) | {sb3_per:,} | {sb3_per / FRAME:.3f} |

1M transitions of Atari: {per_1m * 1e6 / 2**30:.2f} GiB of shared memory (issue target <= 8 GB);
SB3: {sb3_per * 1e6 / 2**30:.2f} GiB.

## Sampling {BATCH} stacked observations, samples/s

| setting | wheeler2 | SB3 | ratio |
| --- | --- | --- | --- |
| one process, full buffer of {fill:,} | {one_w2:,.0f} | {one_sb3:,.0f} | {r_one} |
| 2 producer processes inserting meanwhile | {two_w2:,.0f} | {two_sb3:,.0f} | {r_two} |

Ratio: of the medians, then each round's in brackets (the load moves both arms of a round).

Transitions the 2 producers inserted per {seconds:g} s window (median): wheeler2 \
{ins_w2:,.0f} (shared memory, their own writers), SB3 {ins_sb3:,.0f} (through a queue into the \
sampling process, which SB3's in-process buffer requires).
"""


if __name__ == "__main__":
    raise SystemExit(main())
