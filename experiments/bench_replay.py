"""wheeler2's central replay against cpprb 11, side by side in one run.

    python experiments/bench_replay.py [--seconds 4] [--capacity 1000000]

Capacity 1M, obs 17, act 6, batch 256. Three cases:

(a) one process, prioritized sample + update_priorities in a loop (target: >= 1.0x cpprb
    PrioritizedReplayBuffer);
(b) the learner alternating sample -> update_priorities while 2 producer processes insert
    (target: >= 5x cpprb MPPrioritizedReplayBuffer in the same set-up). Producers add one
    vector step of 8 envs at a time, paced to the same rate for both libraries (--insert-rate
    transitions/s each, a fast simulator's pace), so the learner's throughput is what differs;
(c) HER future k=4 sample vs a plain prioritized sample on the same goal buffer (target: HER
    costs at most 2x).

Prints a markdown table and writes it to experiments/results/bench_replay.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig  # noqa: E402

OBS, ACT, BATCH, GOAL = 17, 6, 256, 3
PRODUCERS, PRODUCER_ENVS = 2, 8


# -- filling -------------------------------------------------------------------------------


def fill_wheeler(replay: Replay, n: int, num_envs: int = 1000, episode: int = 200) -> None:
    rng = np.random.default_rng(1)
    w = replay.writer(num_envs)
    goal = replay.layout.goal_dim
    obs = rng.standard_normal((num_envs, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (num_envs, ACT)).astype(np.float32)
    rew = rng.standard_normal((num_envs, 1)).astype(np.float32)
    term = np.zeros(num_envs, dtype=bool)
    g = rng.standard_normal((num_envs, goal)).astype(np.float32) if goal else None
    for t in range(n // num_envs):
        trunc = np.full(num_envs, (t + 1) % episode == 0)
        w.add(
            obs, act, rew, obs, term, trunc, achieved_goal=g, desired_goal=g, next_achieved_goal=g
        )
    w.flush()


def fill_cpprb(rb: object, n: int) -> None:
    rng = np.random.default_rng(1)
    step = 10_000
    obs = rng.standard_normal((step, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (step, ACT)).astype(np.float32)
    rew = rng.standard_normal(step).astype(np.float32)
    done = np.zeros(step, dtype=np.float32)
    for _ in range(n // step):
        rb.add(obs=obs, act=act, rew=rew, next_obs=obs, done=done)


def cpprb_env() -> dict:
    return {
        "obs": {"shape": OBS, "dtype": np.float32},
        "act": {"shape": ACT, "dtype": np.float32},
        "rew": {"dtype": np.float32},
        "next_obs": {"shape": OBS, "dtype": np.float32},
        "done": {"dtype": np.float32},
    }


# -- loops ---------------------------------------------------------------------------------


def loop_wheeler(replay: Replay, seconds: float, update: bool = True) -> float:
    rng = np.random.default_rng(2)
    td = rng.random(BATCH)
    n = 0
    t0 = time.perf_counter()
    while True:
        batch = replay.sample(BATCH)
        if update:
            replay.update_priorities(batch["index"], td)
        n += 1
        if n % 16 == 0 and time.perf_counter() - t0 > seconds:
            break
    return n * BATCH / (time.perf_counter() - t0)


def loop_cpprb(rb: object, seconds: float) -> float:
    rng = np.random.default_rng(2)
    td = rng.random(BATCH)
    n = 0
    t0 = time.perf_counter()
    while True:
        batch = rb.sample(BATCH, beta=0.4)
        rb.update_priorities(batch["indexes"], td)
        n += 1
        if n % 16 == 0 and time.perf_counter() - t0 > seconds:
            break
    return n * BATCH / (time.perf_counter() - t0)


def interleaved(first: object, second: object, seconds: float, rounds: int = 4) -> tuple:
    """Mean rates of two loops run in alternating slices, so that load from other processes
    on the machine hits both alike."""
    a = b = 0.0
    for _ in range(rounds):
        a += first(seconds / rounds)
        b += second(seconds / rounds)
    return a / rounds, b / rounds


# -- producers (module level so spawn can import them) ---------------------------------------


def _paced(rate: float, stop: object, step_fn: object) -> int:
    """Call ``step_fn`` (one vector step of PRODUCER_ENVS rows) at ``rate`` rows/s."""
    n = 0
    t0 = time.perf_counter()
    while not stop.is_set():
        step_fn()
        n += PRODUCER_ENVS
        ahead = n / rate - (time.perf_counter() - t0)
        if ahead > 0:
            time.sleep(ahead)
    return n


def produce_wheeler(handle: object, rate: float, stop: object, out: object, seed: int) -> None:
    replay = Replay.attach(handle)
    rng = np.random.default_rng(seed)
    w = replay.writer(PRODUCER_ENVS)
    obs = rng.standard_normal((PRODUCER_ENVS, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (PRODUCER_ENVS, ACT)).astype(np.float32)
    rew = rng.standard_normal((PRODUCER_ENVS, 1)).astype(np.float32)
    zeros = np.zeros(PRODUCER_ENVS, dtype=bool)

    def step() -> None:
        w.add(obs, act, rew, obs, rng.random(PRODUCER_ENVS) < 0.005, zeros)

    t0 = time.perf_counter()
    n = _paced(rate, stop, step)
    out.put(n / (time.perf_counter() - t0))
    replay.close()


def produce_cpprb(rb: object, rate: float, stop: object, out: object, seed: int) -> None:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((PRODUCER_ENVS, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (PRODUCER_ENVS, ACT)).astype(np.float32)
    rew = rng.standard_normal(PRODUCER_ENVS).astype(np.float32)

    def step() -> None:
        done = (rng.random(PRODUCER_ENVS) < 0.005).astype(np.float32)
        rb.add(obs=obs, act=act, rew=rew, next_obs=obs, done=done)

    t0 = time.perf_counter()
    n = _paced(rate, stop, step)
    out.put(n / (time.perf_counter() - t0))


def run_with_producers(
    ctx: object, target: object, arg: object, rate: float, learn: object, seconds: float
) -> tuple[float, float]:
    stop, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(arg, rate, stop, out, 10 + i)) for i in range(PRODUCERS)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let them start up and reach their pace
    try:
        speed = learn(seconds)
    finally:
        stop.set()
        rates = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
    return speed, float(sum(rates))


# -- cases ---------------------------------------------------------------------------------


def case_a(capacity: int, seconds: float) -> list[tuple]:
    import cpprb

    rb = cpprb.PrioritizedReplayBuffer(capacity, cpprb_env(), alpha=0.6)
    fill_cpprb(rb, capacity)
    layout = Layout(obs_dim=OBS, act_dim=ACT)
    cfg = ReplayConfig(
        capacity=capacity, batch_size=BATCH, prioritized=True, updates_per_insert=0, min_size=1
    )
    with Replay.create(layout, cfg, gamma=0.99) as replay:
        fill_wheeler(replay, capacity)
        base, ours = interleaved(
            lambda s: loop_cpprb(rb, s), lambda s: loop_wheeler(replay, s), seconds
        )
    rb = None  # free it before the next case allocates
    return [
        (
            "(a) 1 process: sample + update_priorities",
            "cpprb PrioritizedReplayBuffer",
            base,
            1.0,
            "",
        ),
        ("", "wheeler2 Replay", ours, ours / base, ">= 1.0x"),
    ]


def case_b(capacity: int, seconds: float, rate: float) -> list[tuple]:
    import cpprb
    import multiprocess

    std = multiprocessing.get_context("spawn")
    rb = cpprb.MPPrioritizedReplayBuffer(capacity, cpprb_env(), alpha=0.6, ctx=std)
    fill_cpprb(rb, capacity // 10)
    base, base_ins = run_with_producers(
        std, produce_cpprb, rb, rate, lambda s: loop_cpprb(rb, s), seconds
    )
    rb = None  # free its shared memory before ours is allocated
    layout = Layout(obs_dim=OBS, act_dim=ACT)
    cfg = ReplayConfig(
        capacity=capacity, batch_size=BATCH, prioritized=True, updates_per_insert=0, min_size=1
    )
    mp = multiprocess.get_context("spawn")
    with Replay.create(layout, cfg, gamma=0.99) as replay:
        fill_wheeler(replay, capacity // 10)
        ours, ours_ins = run_with_producers(
            mp, produce_wheeler, replay.handle(), rate, lambda s: loop_wheeler(replay, s), seconds
        )
    label = f"(b) learner + {PRODUCERS} producer processes"
    return [
        (label, f"cpprb MPPrioritizedReplayBuffer (inserts {base_ins:,.0f}/s)", base, 1.0, ""),
        ("", f"wheeler2 Replay (inserts {ours_ins:,.0f}/s)", ours, ours / base, ">= 5.0x"),
    ]


def case_c(capacity: int, seconds: float) -> list[tuple]:
    layout = Layout(obs_dim=OBS, act_dim=ACT, goal_dim=GOAL)

    def relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN202
        far = np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05
        return -far.astype(np.float32)[:, None]

    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=BATCH,
        prioritized=True,
        updates_per_insert=0,
        min_size=1,
        her=HerConfig("future", 4),
    )
    with Replay.create(layout, cfg, gamma=0.98, relabel=relabel) as her:
        fill_wheeler(her, capacity, episode=50)
        plain = Replay.attach(
            dataclasses.replace(her.handle(), cfg=dataclasses.replace(cfg, her=None))
        )
        try:
            base, ours = interleaved(
                lambda s: loop_wheeler(plain, s, update=False),
                lambda s: loop_wheeler(her, s, update=False),
                seconds,
            )
        finally:
            plain.close()
    return [
        ("(c) goal buffer: sample only", "wheeler2 plain prioritized", base, 1.0, ""),
        ("", "wheeler2 HER future k=4", ours, ours / base, "cost <= 2.0x, i.e. >= 0.5x"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--insert-rate", type=float, default=20_000.0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_replay.md"))
    args = parser.parse_args()

    rows = []
    t0 = time.time()
    rows += case_a(args.capacity, args.seconds)
    rows += case_b(args.capacity, args.seconds, args.insert_rate)
    rows += case_c(args.capacity, args.seconds)
    lines = [
        f"capacity {args.capacity:,}, obs {OBS}, act {ACT}, batch {BATCH}; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"producers paced at {args.insert_rate:,.0f} transitions/s each",
        "",
        "| case | implementation | samples/s | ratio | target |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for case, impl, speed, ratio, target in rows:
        lines.append(f"| {case} | {impl} | {speed:,.0f} | {ratio:.2f}x | {target} |")
    lines.append("")
    lines.append(f"total bench time {time.time() - t0:.0f} s")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
