"""wheeler2's central replay against cpprb 11 and TorchRL, side by side in one run.

    python -m experiments.bench_replay [--rounds 5] [--seconds 1.0] [--capacity 1000000]

Capacity 1M, obs 17, act 6, batch 256 (TorchRL's own replay benchmark settings). Every case
runs its arms in interleaved rounds (the order rotating each round) and reports the median
rate per arm and the median of the per-round ratios, so that load from other processes on the
machine hits every arm alike. Four cases:

(a) one process, prioritized sample + update_priorities in a loop: wheeler2 vs cpprb's
    PrioritizedReplayBuffer vs TorchRL's PrioritizedReplayBuffer (LazyTensorStorage, one torch
    thread like the others); target >= 2.0x each. An arm that cannot run here (TorchRL's
    compiled segment tree must match the installed torch) is reported with the reason;
(b) the learner alternating sample -> update_priorities while 2 producer processes insert
    (target: >= 5x cpprb MPPrioritizedReplayBuffer in the same set-up). Producers add one
    vector step of 8 envs at a time, paced to the same rate for both libraries (--insert-rate
    transitions/s each, a fast simulator's pace), so the learner's throughput is what differs;
    one round per library (each needs its own processes);
(d) the learner alternating sample -> update_priorities while 8 producer processes insert,
    against its own rate while those processes are paused (target: >= 0.8x): what inserting
    costs the learner (locks, the tree's new leaves, cache traffic), not cpprb. The producers
    are paced at --many-rate transitions/s each (an env-bound explorer's pace: 1,000/s is 8
    copies of a 8 ms simulator step); they run in every round and only pause in the "none"
    arm, which alternates with the "8 inserting" arm round by round;
(c) HER future k=4 sample vs a plain prioritized sample on the same goal buffer (target:
    >= 0.8x). The relabel function is a vectorized distance threshold, as gymnasium-robotics'
    compute_reward; a third arm relabels with a function that returns zeros, to show the
    buffer's own share of HER's cost.

Prints a markdown table and writes it to ``--out`` (experiments/results/bench_replay.md), and
its rows with the run's conditions to ``<out stem>_runs.json``, from which it is rebuilt.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, report, runs
from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig

OBS, ACT, BATCH, GOAL = 17, 6, 256, 3
PRODUCERS, PRODUCER_ENVS = 2, 8
MANY_PRODUCERS = 8  # case d


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


def make_torchrl(capacity: int) -> object:
    """TorchRL's PrioritizedReplayBuffer filled with ``capacity`` transitions, or a string
    saying why it cannot run here."""
    try:
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer
    except ImportError as exc:
        return f"torchrl not installed ({exc})"
    torch.set_num_threads(1)  # one thread, like cpprb and wheeler2's learner
    try:
        rb = PrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity), batch_size=BATCH
        )
    except Exception as exc:  # noqa: BLE001 - whatever stops it is the note
        import torchrl

        reason = str(exc)
        try:
            import torchrl._torchrl  # noqa: F401 - the compiled segment trees
        except ImportError as inner:
            reason = str(inner)
        if "undefined symbol" in reason:
            reason = (
                "its compiled segment trees (torchrl._torchrl) do not load, undefined symbol: "
                "built against another torch"
            )
        return f"torchrl {torchrl.__version__} on torch {torch.__version__}: {reason}"
    step = 100_000
    g = torch.Generator().manual_seed(1)
    for _ in range(capacity // step):
        rb.extend(
            TensorDict(
                {
                    "obs": torch.randn(step, OBS, generator=g),
                    "act": torch.rand(step, ACT, generator=g),
                    "rew": torch.randn(step, 1, generator=g),
                    "next_obs": torch.randn(step, OBS, generator=g),
                    "done": torch.zeros(step, 1),
                },
                batch_size=[step],
            )
        )
    return rb


def loop_torchrl(rb: object, seconds: float) -> float:
    import torch

    td = torch.from_numpy(np.random.default_rng(2).random(BATCH))
    n = 0
    t0 = time.perf_counter()
    while True:
        _, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], td)
        n += 1
        if n % 16 == 0 and time.perf_counter() - t0 > seconds:
            break
    return n * BATCH / (time.perf_counter() - t0)


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


def interleaved(arms: dict[str, object], seconds: float, rounds: int) -> dict[str, list[float]]:
    """Rates of each arm over ``rounds`` rounds; within a round every arm runs ``seconds``, in
    an order that rotates from round to round."""
    names = list(arms)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        arms[name](min(0.3, seconds))  # warm-up: caches, compiled code, allocator
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rates[name].append(arms[name](seconds))
    return rates


def summary(rates: dict[str, list[float]], base: str, arm: str) -> tuple[float, float, str]:
    """(median rate of ``arm``, median of its per-round ratios to ``base``, their range)."""
    ratio = np.array(rates[arm]) / np.array(rates[base])
    spread = f"{ratio.min():.2f}-{ratio.max():.2f}x"
    return float(np.median(rates[arm])), float(np.median(ratio)), spread


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


def _vector_steps(replay: Replay, seed: int) -> Callable[[], None]:
    """One vector step of PRODUCER_ENVS rows into ``replay`` per call (episodes end at random)."""
    rng = np.random.default_rng(seed)
    w = replay.writer(PRODUCER_ENVS)
    obs = rng.standard_normal((PRODUCER_ENVS, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (PRODUCER_ENVS, ACT)).astype(np.float32)
    rew = rng.standard_normal((PRODUCER_ENVS, 1)).astype(np.float32)
    zeros = np.zeros(PRODUCER_ENVS, dtype=bool)

    def step() -> None:
        w.add(obs, act, rew, obs, rng.random(PRODUCER_ENVS) < 0.005, zeros)

    return step


def produce_wheeler(handle: object, rate: float, stop: object, out: object, seed: int) -> None:
    replay = Replay.attach(handle)
    step = _vector_steps(replay, seed)
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


def produce_paused(
    handle: object, rate: float, go: object, stop: object, out: object, seed: int
) -> None:
    """Like :func:`produce_wheeler`, but inserting only while ``go`` is set."""
    replay = Replay.attach(handle)
    step = _vector_steps(replay, seed)
    n, active = 0, 0.0
    while not stop.is_set():
        if not go.wait(0.05):
            continue
        t0 = time.perf_counter()
        step()
        n += PRODUCER_ENVS
        left = PRODUCER_ENVS / rate - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
        active += time.perf_counter() - t0
    out.put(n / max(active, 1e-9))
    replay.close()


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


def case_a(capacity: int, seconds: float, rounds: int) -> tuple[list[tuple], list[str]]:
    import cpprb

    rb = cpprb.PrioritizedReplayBuffer(capacity, cpprb_env(), alpha=0.6)
    fill_cpprb(rb, capacity)
    trl = make_torchrl(capacity)
    notes = []
    layout = Layout(obs_dim=OBS, act_dim=ACT)
    cfg = ReplayConfig(
        capacity=capacity, batch_size=BATCH, prioritized=True, updates_per_insert=0, min_size=1
    )
    with Replay.create(layout, cfg, gamma=0.99) as replay:
        fill_wheeler(replay, capacity)
        arms = {
            "cpprb": lambda s: loop_cpprb(rb, s),
            "wheeler2": lambda s: loop_wheeler(replay, s),
        }
        if isinstance(trl, str):
            notes.append(f"(a) TorchRL arm skipped: {trl}.")
        else:
            arms["torchrl"] = lambda s: loop_torchrl(trl, s)
        rates = interleaved(arms, seconds, rounds)
    rb = trl = None  # free them before the next case allocates
    label = "(a) 1 process: sample + update_priorities"
    rows = [(label, "cpprb PrioritizedReplayBuffer", float(np.median(rates["cpprb"])), 1.0, "", "")]
    if "torchrl" in rates:
        speed, ratio, spread = summary(rates, "cpprb", "torchrl")
        rows.append(("", "TorchRL PrioritizedReplayBuffer", speed, ratio, spread, ""))
    speed, ratio, spread = summary(rates, "cpprb", "wheeler2")
    rows.append(("", "wheeler2 Replay, vs cpprb", speed, ratio, spread, ">= 2.0x"))
    if "torchrl" in rates:
        _, ratio, spread = summary(rates, "torchrl", "wheeler2")
        rows.append(("", "wheeler2 Replay, vs TorchRL", speed, ratio, spread, ">= 2.0x"))
    else:
        rows.append(("", "wheeler2 Replay, vs TorchRL", speed, float("nan"), "", ">= 2.0x"))
    return rows, notes


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
        (label, f"cpprb MPPrioritizedReplayBuffer (inserts {base_ins:,.0f}/s)", base, 1.0, "", ""),
        (
            "",
            f"wheeler2 Replay (inserts {ours_ins:,.0f}/s)",
            ours,
            ours / base,
            "1 round",
            ">= 5.0x",
        ),
    ]


def free_relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN201
    return np.zeros((obs.shape[0], 1), np.float32)


def case_c(capacity: int, seconds: float, rounds: int) -> list[tuple]:
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
        # The same HER sampling with a reward function that costs nothing: what the buffer's
        # own HER machinery costs, apart from the user's reward function.
        free = Replay.attach(dataclasses.replace(her.handle(), relabel=free_relabel))
        try:
            rates = interleaved(
                {
                    "plain": lambda s: loop_wheeler(plain, s, update=False),
                    "her": lambda s: loop_wheeler(her, s, update=False),
                    "free": lambda s: loop_wheeler(free, s, update=False),
                },
                seconds,
                rounds,
            )
        finally:
            plain.close()
            free.close()
    speed, ratio, spread = summary(rates, "plain", "her")
    fspeed, fratio, fspread = summary(rates, "plain", "free")
    return [
        (
            "(c) goal buffer: sample only",
            "wheeler2 plain prioritized",
            float(np.median(rates["plain"])),
            1.0,
            "",
            "",
        ),
        ("", "wheeler2 HER future k=4", speed, ratio, spread, ">= 0.8x"),
        ("", "wheeler2 HER future k=4, reward fn returning zeros", fspeed, fratio, fspread, ""),
    ]


def case_d(capacity: int, seconds: float, rounds: int, rate: float) -> list[tuple]:
    import multiprocess

    layout = Layout(obs_dim=OBS, act_dim=ACT)
    cfg = ReplayConfig(
        capacity=capacity, batch_size=BATCH, prioritized=True, updates_per_insert=0, min_size=1
    )
    mp = multiprocess.get_context("spawn")
    go, stop, out = mp.Event(), mp.Event(), mp.Queue()
    with Replay.create(layout, cfg, gamma=0.99) as replay:
        fill_wheeler(replay, capacity)
        procs = [
            mp.Process(target=produce_paused, args=(replay.handle(), rate, go, stop, out, 20 + i))
            for i in range(MANY_PRODUCERS)
        ]
        for p in procs:
            p.start()
        time.sleep(3.0)  # spawned processes import numpy and attach before the first round

        def with_producers(on: bool) -> Callable[[float], float]:
            def arm(s: float) -> float:
                if on:
                    go.set()
                    time.sleep(0.2)  # every producer past its pause
                else:
                    go.clear()
                    time.sleep(0.1)  # an insert in progress ends
                return loop_wheeler(replay, s)

            return arm

        try:
            rates = interleaved(
                {"none": with_producers(False), "many": with_producers(True)}, seconds, rounds
            )
        finally:
            go.clear()
            stop.set()
            inserted = [out.get(timeout=60) for _ in procs]
            for p in procs:
                p.join(timeout=30)
    speed, ratio, spread = summary(rates, "none", "many")
    label = f"(d) learner, {MANY_PRODUCERS} producer processes inserting vs paused"
    return [
        (label, "wheeler2 Replay, producers paused", float(np.median(rates["none"])), 1.0, "", ""),
        (
            "",
            f"wheeler2 Replay, {MANY_PRODUCERS} inserting ({sum(inserted):,.0f}/s in all)",
            speed,
            ratio,
            spread,
            ">= 0.8x",
        ),
    ]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def render(stored: dict[str, Any]) -> str:
    """The table of one run: its conditions, then a row per case and arm."""
    c = stored["conditions"]
    lines = [
        f"capacity {c['capacity']:,}, obs {OBS}, act {ACT}, batch {BATCH}; {c['machine']}; "
        f"Python {c['python']}, numpy {c['numpy']}, numba {c['numba']}, cpprb {c['cpprb']}; "
        f"load average {c['load_start']} at the start, {c['load_end']} at the end (shared "
        f"machine); {c['rounds']} interleaved rounds of {c['seconds']:g} s per arm; producers "
        f"paced at {c['insert_rate']:,.0f} transitions/s each in case b, {c['many_rate']:,.0f}/s "
        "each in case d",
        "",
        "| case | implementation | samples/s (median) | ratio (median of rounds) "
        "| range over rounds | target |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for case, impl, speed, ratio, spread, target in stored["rows"]:
        shown = "n/a" if ratio is None or ratio != ratio else f"{ratio:.2f}x"
        lines.append(f"| {case} | {impl} | {speed:,.0f} | {shown} | {spread} | {target} |")
    lines.append("")
    lines += stored["notes"]
    lines.append(f"total bench time {stored['seconds_total']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per arm and round")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--insert-rate", type=float, default=20_000.0)
    parser.add_argument(
        "--many-rate", type=float, default=1_000.0, help="case d: each producer's transitions/s"
    )
    parser.add_argument("--cases", default="abdc", help="which cases to run, e.g. ac")
    parser.add_argument("--out", default=str(RESULTS / "bench_replay.md"))
    args = parser.parse_args(argv)

    import cpprb
    import numba

    rows: list[tuple] = []
    notes: list[str] = []
    t0 = time.time()
    load0 = load()
    if "a" in args.cases:
        more, why = case_a(args.capacity, args.seconds, args.rounds)
        rows += more
        notes += why
    if "b" in args.cases:
        rows += case_b(args.capacity, 2 * args.seconds, args.insert_rate)
    if "d" in args.cases:
        rows += case_d(args.capacity, args.seconds, args.rounds, args.many_rate)
    if "c" in args.cases:
        rows += case_c(args.capacity, args.seconds, args.rounds)
    stored = {
        "conditions": {
            "capacity": args.capacity,
            "machine": machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "cpprb": getattr(cpprb, "__version__", "11.0.0"),
            "load_start": load0,
            "load_end": load(),
            "rounds": args.rounds,
            "seconds": args.seconds,
            "insert_rate": args.insert_rate,
            "many_rate": args.many_rate,
        },
        # (case, implementation, samples/s, ratio or None, range, target); None: not measured
        "rows": [[*r[:3], None if r[3] != r[3] else r[3], *r[4:]] for r in rows],
        "notes": notes,
        "seconds_total": time.time() - t0,
    }
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    print(text)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))


if __name__ == "__main__":
    main()
