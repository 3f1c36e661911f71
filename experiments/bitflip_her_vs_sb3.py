"""Bit flipping (random goal per episode), DQN + HER: wheeler2 against Stable-Baselines3, side by
side in one run, and wheeler2 without HER as the control.

    python -m experiments.bitflip_her_vs_sb3 --bits 15 30 50 --seeds 0

Same hyperparameters on both sides (cfg/bitflip_her.toml: 2 x 256 net, lr 1e-3, batch 256,
gamma 0.95, buffer 1e6, learning starts 1000, epsilon 1 -> 0.05 over 2000 steps, hard target
update every 500 steps, one gradient step per env step, HER future k = 4) and the same algorithm
(plain DQN target, as SB3's; Huber loss, gradient norm 10). Every 1,000 env steps 20
deterministic episodes are evaluated; the table gives the first env step count with success
>= 0.9. Appends each run to experiments/results/<name>_runs.jsonl and rewrites <name>.md from
that file (``--rebuild`` only rewrites it); ``--table JSONL`` writes the steps-to-0.9 summary of
a runs file to ``<JSONL stem without _runs>.md`` (bitflip_parity.md: her_parity's section 4).

Sides (--sides, run seed by seed in that order): ``sb3``; ``her``, wheeler2 like for like
(``terminate_on_goal = false``, ``achieved_goal_in_obs = false``); ``her-ag``, with the achieved
goal in the input (SB3's MultiInputPolicy input); ``her-tog``, with ``[buffer.her]
terminate_on_goal = true`` (relabelled transitions end where they reach their goal, as the env's
episodes do; SB3 has no such option, so this is a separate row, not a like-for-like one);
``no-her``, the control.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG as CFG_DIR
from experiments.lib import RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config

CFG = CFG_DIR / "bitflip_her.toml"
THRESHOLD = 0.9
EVAL_EVERY = 1_000
EVAL_EPISODES = 20


@dataclass
class Outcome:
    side: str
    bits: int
    seed: int
    steps: int | None
    wall: float | None
    best: float
    final: float
    curve: list[tuple[int, float]]


def run_sb3(bits: int, seed: int, max_steps: int) -> Outcome:
    import gymnasium as gym
    import wheeler2.envs.bitflip  # noqa: F401  (registers wheeler2/BitFlip-v0)
    from stable_baselines3 import DQN, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback

    env = gym.make("wheeler2/BitFlip-v0", n_bits=bits)
    eval_env = gym.make("wheeler2/BitFlip-v0", n_bits=bits)

    def evaluate(model: DQN) -> float:
        hits = []
        for ep in range(EVAL_EPISODES):
            obs, _ = eval_env.reset(seed=seed + 99_991 + ep)
            done, info = False, {}
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, _, term, trunc, info = eval_env.step(action)
                done = term or trunc
            hits.append(float(info["is_success"]))
        return float(np.mean(hits))

    class Evaluator(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = time.perf_counter()
            self.curve: list[tuple[int, float]] = []
            self.hit: tuple[int, float] | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                s = evaluate(self.model)
                self.curve.append((self.num_timesteps, s))
                if s >= THRESHOLD and self.hit is None:
                    self.hit = (self.num_timesteps, time.perf_counter() - self.t0)
                    return False
            return True

    model = DQN(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
        buffer_size=1_000_000,
        batch_size=256,
        gamma=0.95,
        learning_rate=1e-3,
        learning_starts=1_000,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=500,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.05,
        exploration_fraction=2_000 / max_steps,
        max_grad_norm=10.0,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=seed,
        device="cpu",
    )
    cb = Evaluator()
    cb.t0 = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=cb)
    succ = [s for _, s in cb.curve] or [0.0]
    return Outcome("sb3 HER", bits, seed, *(cb.hit or (None, None)), max(succ), succ[-1], cb.curve)


def run_wheeler2(
    bits: int,
    seed: int,
    max_steps: int,
    her: bool,
    out: Path,
    achieved_in_obs: bool = False,
    terminate_on_goal: bool = False,
) -> Outcome:
    text = CFG.read_text()
    if not her:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("her ="))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bitflip.toml"
        path.write_text(text)
        run = run_config(
            path,
            [
                f"experiment.total_steps={max_steps}",
                f"experiment.eval_every={EVAL_EVERY}",
                f"experiment.eval_episodes={EVAL_EPISODES}",
                f"env.kwargs.n_bits={bits}",
                "team.dqn.params.double=false",  # SB3's DQN target
                f"env.achieved_goal_in_obs={str(achieved_in_obs).lower()}",
                *([f"buffer.her.terminate_on_goal={_toml(terminate_on_goal)}"] if her else []),
            ],
            seed=seed,
            out=out,
        )
    summary = run.summary
    curve = [(e["env_steps"], e["success"] or 0.0) for e in summary["eval"]]
    steps, seconds = stats.to_threshold(summary["eval"], THRESHOLD, key="success", strict=False)
    succ = [s for _, s in curve] or [0.0]
    return Outcome(
        "wheeler2 HER" + " +ag" * achieved_in_obs + " +tog" * terminate_on_goal
        if her
        else "wheeler2 no HER",
        bits,
        seed,
        steps,
        seconds,
        max(succ),
        succ[-1],
        curve,
    )


def _toml(flag: bool) -> str:
    return str(flag).lower()


def _fmt(x: float | int | None, spec: str = "") -> str:
    return "—" if x is None else format(x, spec)


def render(stored: list[dict[str, Any]], kind: str = "runs") -> str:
    """``kind`` "runs": every stored run with its success curve; "steps": env steps to 0.9 per
    (n, side) and seed, with medians."""
    if kind == "steps":
        return steps_table(stored)
    fields = set(Outcome.__dataclass_fields__)
    rows = [Outcome(**{k: v for k, v in r.items() if k in fields}) for r in stored]
    return table(rows, {r["bits"]: r["budget"] for r in stored})


def table(rows: list[Outcome], budgets: dict[int, int]) -> str:
    lines = [
        f"Bit flipping, random goal per episode, DQN; first eval with success >= {THRESHOLD} "
        f"over {EVAL_EPISODES} episodes (every {EVAL_EVERY} env steps); torch threads 1. '—': "
        "not reached within the budget.",
        "",
        "| n bits | budget | side | seed | steps to 0.9 | s to 0.9 | best success | final |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in rows:
        lines.append(
            f"| {o.bits} | {budgets[o.bits]} | {o.side} | {o.seed} | {_fmt(o.steps)} "
            f"| {_fmt(o.wall, '.1f')} | {o.best:.2f} | {o.final:.2f} |"
        )
    lines += ["", "Success curves (env steps: success):", ""]
    for o in rows:
        pts = ", ".join(f"{k}: {v:.2f}" for k, v in o.curve)
        lines.append(f"- n={o.bits} {o.side} seed {o.seed}: {pts}")
    return "\n".join(lines)


def steps_table(rows: list[dict[str, Any]]) -> str:
    """Env steps to the first eval >= THRESHOLD, per (n, side) and seed, from stored runs."""
    groups: dict[tuple[int, str], dict[int, dict]] = {}
    for r in rows:
        groups.setdefault((r["bits"], r["side"]), {})[r["seed"]] = r  # the latest run wins
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "| n | side | budget | " + " | ".join(f"seed {s}" for s in seeds) + " | median | solved |",
        "|" + " --- |" * (len(seeds) + 5),
    ]
    for (bits, side), by_seed in sorted(groups.items()):
        budget = max(r["budget"] for r in by_seed.values())
        cells = ["" if s not in by_seed else _fmt(by_seed[s]["steps"], ",") for s in seeds]
        # An unsolved run counts as one eval past the budget.
        vals = [r["steps"] or budget + EVAL_EVERY for r in by_seed.values()]
        solved = sum(r["steps"] is not None for r in by_seed.values())
        lines.append(
            f"| {bits} | {side} | {budget:,} | "
            + " | ".join(cells)
            + f" | {np.median(vals):,.0f} | {solved}/{len(by_seed)} |"
        )
    return "\n".join(lines)


def write(runs_file: Path, kind: str, argv: list[str] | None) -> str:
    name = runs_file.name.removesuffix(".jsonl").removesuffix("_runs")
    text = render(runs.load(runs_file), kind)
    report.write(
        runs_file.parent / f"{name}.md",
        text,
        render=render,
        params={"kind": kind},
        runs_file=runs_file,
        command=report.command_line(argv),
    )
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bits", type=int, nargs="+", default=[15, 30, 50])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument(
        "--budget", type=int, nargs="+", default=None, help="env steps per n (default by n)"
    )
    ap.add_argument("--out", default=str(ROOT / "runs" / "bitflip_her_vs_sb3"))
    ap.add_argument("--name", default="bitflip_her_vs_sb3")
    ap.add_argument(
        "--sides",
        nargs="+",
        default=["her", "sb3", "no-her"],
        choices=["her", "her-ag", "her-tog", "sb3", "no-her"],
        help="arms, run seed by seed in this order (interleaved)",
    )
    ap.add_argument("--rebuild", action="store_true", help="only rewrite <name>.md from its runs")
    ap.add_argument(
        "--table",
        metavar="JSONL",
        help="only write steps-to-0.9 per side and n of a runs file (e.g. bitflip_parity_runs)",
    )
    args = ap.parse_args(argv)
    if args.table:
        print(write(Path(args.table), "steps", argv))
        return
    log = RESULTS / f"{args.name}_runs.jsonl"
    if args.rebuild:
        print(write(log, "runs", argv))
        return
    import torch

    torch.set_num_threads(1)
    default = {15: 10_000, 30: 15_000, 50: 15_000}
    budgets = (
        dict(zip(args.bits, args.budget))
        if args.budget
        else {n: default.get(n, 15_000) for n in args.bits}
    )
    for bits in args.bits:
        for seed in args.seeds:
            for side in args.sides:
                if side == "sb3":
                    o = run_sb3(bits, seed, budgets[bits])
                else:
                    o = run_wheeler2(
                        bits,
                        seed,
                        budgets[bits],
                        side != "no-her",
                        Path(args.out),
                        achieved_in_obs=side == "her-ag",
                        terminate_on_goal=side == "her-tog",
                    )
                print(f"n={bits} {o.side} seed {seed}: {o.steps} {o.wall} {o.curve}", flush=True)
                runs.append(log, {**asdict(o), "budget": budgets[bits]})
                text = write(log, "runs", argv)
    print(text)


if __name__ == "__main__":
    main()
