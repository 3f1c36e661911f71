"""Sequence sampling against transition sampling, per sampled step (issue 15's throughput target).

    python -m experiments.bench_sequence [--rounds 7] [--seconds 1.0] [--capacity 100000]

One buffer layout (obs 17, act 6, a GRU-64 state column), filled with 200-step episodes from 8
env copies, capacity 100k, prioritized. Two arms, each in its own buffer with the same content:

* transitions: ``sample()`` of 256 + ``update_priorities``;
* sequences: ``sample()`` of 32 sequences of length 40 + burn-in 20 (stride 20, n-step 1) +
  ``update_priorities`` with the per-sequence priority (``sequence_priority``).

Rates are steps per second: a transition batch hands out 256 steps; a sequence batch 32 x 60
steps (every position the learner unrolls, burn-in included) of which 32 x 40 are trained. The
target (>= 0.5x) is read on the steps handed out, the trained-steps ratio is reported beside it.
The arms alternate for ``--rounds`` rounds (order rotating) and the medians are reported, so
load from other processes hits both alike. Writes every round's rates to
``<out stem>_runs.json`` and the table to ``--out`` (experiments/results/sequence_bench.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, report, runs
from wheeler2.buffer import Layout, Replay, ReplayConfig, SequenceConfig
from wheeler2.buffer.sequence import sequence_priority

OBS, ACT, STATE = 17, 6, 64
BATCH, SEQ_BATCH, LENGTH, BURN_IN = 256, 32, 40, 20
ENVS, EPISODE = 8, 200


def fill(replay: Replay, n: int) -> None:
    rng = np.random.default_rng(1)
    w = replay.writer(ENVS)
    obs = rng.standard_normal((ENVS, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (ENVS, ACT)).astype(np.float32)
    rew = rng.standard_normal((ENVS, 1)).astype(np.float32)
    state = rng.standard_normal((ENVS, STATE)).astype(np.float32)
    no = np.zeros(ENVS, dtype=bool)
    for t in range(n // ENVS):
        end = np.full(ENVS, (t + 1) % EPISODE == 0)
        w.add(obs, act, rew, obs, no, end, state=state)
    w.flush()


def make(capacity: int, sequence: bool) -> Replay:
    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=SEQ_BATCH if sequence else BATCH,
        prioritized=True,
        updates_per_insert=0,  # no ratio gate: the learner samples as fast as it can
        min_size=1,
        sequence=SequenceConfig(length=LENGTH, burn_in=BURN_IN) if sequence else None,
    )
    replay = Replay.create(Layout(obs_dim=OBS, act_dim=ACT, state_dim=STATE), cfg, gamma=0.99)
    fill(replay, capacity)
    return replay


def loop(replay: Replay, seconds: float) -> tuple[float, float]:
    """(steps handed out per s, trained steps per s)."""
    rng = np.random.default_rng(0)
    seq = replay.cfg.sequence
    out_steps = trained = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch = replay.sample()
        if seq is None:
            n = batch["index"].shape[0]
            replay.update_priorities(batch["index"], rng.random(n))
            out_steps += n
            trained += n
        else:
            mask = batch["mask"]
            prio = sequence_priority(rng.random(mask.shape), mask, seq.eta)
            replay.update_priorities(batch["index"], prio)
            out_steps += mask.size
            trained += int(mask.sum())
    dt = time.perf_counter() - t0
    return out_steps / dt, trained / dt


def render(stored: dict[str, Any]) -> str:
    """The table of one run: median steps/s of each arm and the per-round ratios."""
    tr = np.array(stored["rates"]["transitions"])
    sq = np.array(stored["rates"]["sequences"])
    ratio_out = sq[:, 0] / tr[:, 0]
    ratio_trained = sq[:, 1] / tr[:, 1]
    c = stored["conditions"]
    lines = [
        "# Sequence sampling vs transition sampling (issue 15)",
        "",
        f"capacity {c['capacity']:,}, obs {OBS}, act {ACT}, state column {STATE}, prioritized; "
        f"{c['machine']}; Python {c['python']}, numpy {c['numpy']}, numba {c['numba']}; "
        f"load average {c['load_start']:.1f} at the start, {c['load_end']:.1f} at the end; "
        f"{c['rounds']} interleaved rounds of {c['seconds']:g} s per arm",
        "",
        "| arm | batch | steps/s handed out (median) | trained steps/s (median) |",
        "| --- | --- | ---: | ---: |",
        f"| transitions | {BATCH} | {np.median(tr[:, 0]):,.0f} | {np.median(tr[:, 1]):,.0f} |",
        f"| sequences | {SEQ_BATCH} x ({BURN_IN} burn-in + {LENGTH}) "
        f"| {np.median(sq[:, 0]):,.0f} | {np.median(sq[:, 1]):,.0f} |",
        "",
        f"sequences / transitions per step handed out: **{np.median(ratio_out):.2f}x** "
        f"(rounds {ratio_out.min():.2f}-{ratio_out.max():.2f}x; target >= 0.5x); per trained "
        f"step: {np.median(ratio_trained):.2f}x ({ratio_trained.min():.2f}-"
        f"{ratio_trained.max():.2f}x)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--out", default=str(RESULTS / "sequence_bench.md"))
    args = ap.parse_args(argv)
    import numba

    load0 = os.getloadavg()[0]
    arms = {"transitions": make(args.capacity, False), "sequences": make(args.capacity, True)}
    for replay in arms.values():
        loop(replay, 0.2)  # compile the kernels and warm the caches before timing
    rates: dict[str, list[tuple[float, float]]] = {k: [] for k in arms}
    names = list(arms)
    for r in range(args.rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            rates[name].append(loop(arms[name], args.seconds))
    for replay in arms.values():
        replay.close()
    stored = {
        "conditions": {
            "capacity": args.capacity,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "load_start": load0,
            "load_end": os.getloadavg()[0],
            "rounds": args.rounds,
            "seconds": args.seconds,
        },
        "rates": rates,  # per round: (steps handed out per s, trained steps per s)
    }
    out = Path(args.out)
    log = out.with_name(out.stem + "_runs.json")
    runs.save(log, stored)
    text = render(stored)
    print(text)
    report.write(out, text, render=render, runs_file=log, command=report.command_line(argv))


if __name__ == "__main__":
    main()
