"""What issue 41's replay rules cost: sample + update_priorities with inserts, per rule, as a
ratio to today's TD-prioritized FIFO replay, side by side in one run.

    python -m experiments.bench_replay_choice [--rounds 5] [--seconds 1.0] [--capacity 100000]

Obs 17, act 6, batch 256 (bench_replay's shapes), a full ring, one process, one torch thread.
Each learner step is: one vector step of 8 env copies written (flushed every ``chunk`` = 64
steps, so the ring evicts as it goes), one sample of 256, one ``update_priorities``.
Arms: ``td`` (today's default with ``prioritized = true``),
``td+novelty`` (``priority_novelty = 0.5``: an RND forward and Adam step on the 256 next
observations per update), ``forget=priority`` and ``forget=reservoir`` (``forget_keep
0.5``). Each arm runs three times: the replay alone; with a critic step after each sample
(one Adam step of a 2 x 256 ReLU critic on the batch, DDPG's critic size); and as a DDPG
learner takes its steps (``runtime.trainer.Trainer``: sample, move to torch, ``DDPG.learn``
with 256-256 actor and critic and their targets, write the priorities back), the "sample +
update" a learner pays. Rounds are interleaved with the arm order rotating, and the median
per-round ratio to ``td`` is reported (issue 41's target: >= 0.8x).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from experiments.bench_replay import ACT, BATCH, OBS, fill_wheeler
from experiments.lib import RESULTS, report
from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.process import set_compute_threads

ENVS = 8
# What follows each sample, by the key it is stored under ("False"/"True": runs stored before
# the DDPG learner's row was added).
UPDATES = {"False": "none", "True": "2x256 critic step", "ddpg": "DDPG learner step"}
ARMS: dict[str, dict[str, object]] = {
    "td": {},
    "td+novelty": {"priority_novelty": 0.5},
    "forget=priority": {"forget": "priority"},
    "forget=reservoir": {"forget": "reservoir"},
}


def make(capacity: int, keys: dict[str, object]) -> Replay:
    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=BATCH,
        prioritized=True,
        min_size=BATCH,
        updates_per_insert=0,  # no gate: the loop sets the pace
        **keys,  # type: ignore[arg-type]
    )
    replay = Replay.create(Layout(obs_dim=OBS, act_dim=ACT), cfg, gamma=0.99, seed=0)
    fill_wheeler(replay, capacity + ENVS * 100)  # full, with the ring already wrapped
    return replay


def critic_step() -> Callable[[dict[str, np.ndarray]], None]:
    """One Adam step of a DDPG-sized critic (2 x 256 ReLU) on a batch: the learner's update."""
    import torch

    net = torch.nn.Sequential(
        torch.nn.Linear(OBS + ACT, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(b: dict[str, np.ndarray]) -> None:
        x = torch.from_numpy(np.concatenate([b["obs"], b["action"]], axis=1))
        loss = ((net(x)[:, 0] - torch.from_numpy(b["reward"][:, 0])) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def ddpg_step(replay: Replay) -> Callable[[], None]:
    """One step of a DDPG learner on ``replay`` as a run takes it (sample, learn, priorities)."""
    from wheeler2 import registry
    from wheeler2.agent import SpaceInfo
    from wheeler2.runtime.trainer import Trainer

    ddpg = registry.resolve_algo("ddpg")
    params = ddpg.Params(hidden=[256, 256], gamma=0.99, tau=0.005, learning_starts=0)
    trainer = Trainer(ddpg(SpaceInfo(OBS, ACT, False), params), replay)

    def step() -> None:
        assert trainer.train_available(max_updates=1) == 1

    return step


def rate(
    replay: Replay,
    seconds: float,
    rng: np.random.Generator,
    learn: Callable[[dict[str, np.ndarray]], None] | None,
    learner: Callable[[], None] | None = None,
) -> float:
    """Learner steps (write 8 rows, sample 256, [learn,] update priorities) per second; with
    ``learner``, that learner's own step in place of sample, learn and priorities."""
    w = replay.writer(ENVS)
    obs = rng.standard_normal((ENVS, OBS)).astype(np.float32)
    act = rng.uniform(-1, 1, (ENVS, ACT)).astype(np.float32)
    rew = rng.standard_normal((ENVS, 1)).astype(np.float32)
    no = np.zeros(ENVS, bool)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        w.add(obs, act, rew, obs, no, no)
        if learner is not None:
            learner()
            steps += 1
            continue
        b = replay.sample(BATCH)
        if learn is not None:
            learn(b)
        replay.update_priorities(b["index"], rng.standard_normal(BATCH))
        steps += 1
    return steps / (time.perf_counter() - start)


def render(data: dict[str, object], **_: object) -> str:
    """The cost table from the stored rates (``{"setup": ..., "rates": {"arm|update": [...]}}``)."""
    setup = data["setup"]
    assert isinstance(setup, dict)
    rates = data["rates"]
    assert isinstance(rates, dict)
    lines = [
        "# Replay rules of issue 41: cost",
        "",
        f"capacity {setup['capacity']:,}, obs {OBS}, act {ACT}, batch {BATCH}, {ENVS} rows "
        f"written per step, {setup['rounds']} interleaved rounds of {setup['seconds']:g} s, one "
        "process, one torch thread",
        "",
        "| arm | learner update | steps/s (median) | ratio to td (median of rounds) |",
        "| --- | --- | ---: | ---: |",
    ]
    for kind, update in UPDATES.items():
        if f"td|{kind}" not in rates:
            continue  # stored before the DDPG rows existed
        base = np.array(rates[f"td|{kind}"])
        for name in ARMS:
            got = np.array(rates[f"{name}|{kind}"])
            ratio = float(np.median(got / base))
            lines.append(f"| {name} | {update} | {np.median(got):,.0f} | {ratio:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--name", default="bench_replay_choice")
    args = parser.parse_args(argv)
    set_compute_threads()  # one torch thread, as in every wheeler2 process (the RND arm)
    replays = {name: make(args.capacity, keys) for name, keys in ARMS.items()}
    rng = np.random.default_rng(0)
    learn = critic_step()
    learners = {name: ddpg_step(replay) for name, replay in replays.items()}
    cases = [(name, kind) for kind in UPDATES for name in ARMS]
    rates: dict[tuple[str, str], list[float]] = {case: [] for case in cases}

    def run(name: str, kind: str, seconds: float) -> float:
        critic = learn if kind == "True" else None
        return rate(replays[name], seconds, rng, critic, learners[name] if kind == "ddpg" else None)

    try:
        for name, kind in cases:  # untimed: numba compiles and the allocator warms up
            run(name, kind, 0.2)
        for r in range(args.rounds):
            order = cases[r % len(cases) :] + cases[: r % len(cases)]
            for name, kind in order:
                rates[(name, kind)].append(run(name, kind, args.seconds))
    finally:
        for replay in replays.values():
            replay.close()
    data = {
        "setup": {"capacity": args.capacity, "rounds": args.rounds, "seconds": args.seconds},
        "rates": {f"{name}|{kind}": v for (name, kind), v in rates.items()},
    }
    text = report.publish(RESULTS / f"{args.name}.md", data, render, argv)
    print(text)


if __name__ == "__main__":
    main()
