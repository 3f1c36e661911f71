"""FetchReach-v4, DDPG + HER: wheeler2 against Stable-Baselines3, side by side in one run.

    python -m experiments.fetch_her_vs_sb3 --seeds 0 1

Both sides use the same hyperparameters (buffer 1e6, batch 256, gamma 0.95, lr 1e-3, learning
starts 1000, tau 0.05, 3 x 256 nets, Gaussian noise 0.2, HER future k = 4), one torch thread, and
evaluate 20 deterministic episodes every 1,000 env steps (eval time counted in the wall-clock).
A side stops at its first eval with success >= 0.9. The ratios are wheeler2 / SB3: below 1 means
wheeler2 needs less. Needs the ``robotics`` extra. Appends each run to
experiments/results/fetch_her_vs_sb3[_nonorm]_runs.jsonl and writes the table of that sweep to
fetch_her_vs_sb3[_nonorm].md (``--table`` only rewrites it).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config

ENV_ID = "FetchReach-v4"
THRESHOLD = 0.9
EVAL_EVERY = 1_000
EVAL_EPISODES = 20


@dataclass
class Outcome:
    side: str
    seed: int
    steps: int | None  # env steps at the first eval with success >= THRESHOLD
    wall: float | None  # seconds from the start to that eval (its own time included)
    final_success: float
    curve: list[tuple[int, float]]


def run_sb3(seed: int, max_steps: int) -> Outcome:
    import gymnasium as gym
    import gymnasium_robotics
    from stable_baselines3 import DDPG, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    gym.register_envs(gymnasium_robotics)
    env = gym.make(ENV_ID)
    eval_env = gym.make(ENV_ID)

    def evaluate(model: DDPG) -> float:
        hits = []
        for ep in range(EVAL_EPISODES):
            obs, _ = eval_env.reset(seed=seed + 99_991 + ep)
            done = False
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
                if s >= THRESHOLD:
                    self.hit = (self.num_timesteps, time.perf_counter() - self.t0)
                    return False
            return True

    cb = Evaluator()
    model = DDPG(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
        buffer_size=1_000_000,
        batch_size=256,
        gamma=0.95,
        learning_rate=1e-3,
        learning_starts=1_000,
        tau=0.05,
        action_noise=NormalActionNoise(np.zeros(4), 0.2 * np.ones(4)),
        policy_kwargs=dict(net_arch=[256, 256, 256]),
        train_freq=1,
        gradient_steps=1,
        seed=seed,
        device="cpu",
    )
    cb.t0 = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=cb)
    return Outcome(
        "sb3", seed, *(cb.hit or (None, None)), cb.curve[-1][1] if cb.curve else 0.0, cb.curve
    )


def run_wheeler2(seed: int, max_steps: int, out: Path, normalize: bool) -> Outcome:
    overrides = [
        f"experiment.total_steps={max_steps}",
        f"experiment.eval_every={EVAL_EVERY}",
        f"experiment.eval_episodes={EVAL_EPISODES}",
        # success is not a return: stop at the threshold by the return it implies is not exact,
        # so the run goes on and the first eval >= THRESHOLD is read from summary.json.
    ]
    # Explicit both ways: the config file turns normalization on.
    overrides.append(f"team.target.params.normalize_obs={'true' if normalize else 'false'}")
    summary = run_config(CFG / "fetchreach_her.toml", overrides, seed=seed, out=out).summary
    curve = [(e["env_steps"], e["success"] or 0.0) for e in summary["eval"]]
    steps, seconds = stats.to_threshold(summary["eval"], THRESHOLD, key="success", strict=False)
    return Outcome("wheeler2", seed, steps, seconds, curve[-1][1] if curve else 0.0, curve)


def _fmt(x: float | int | None, spec: str = "") -> str:
    return "—" if x is None else format(x, spec)


def render(stored: list[dict[str, Any]]) -> str:
    """The table of the stored runs, a row per seed both sides ran (the latest of each)."""
    latest = runs.latest(stored, lambda r: (r["side"], r["seed"]))
    seeds = sorted({r["seed"] for r in stored})
    rows = [
        (Outcome(**latest[("wheeler2", s)]), Outcome(**latest[("sb3", s)]))
        for s in seeds
        if ("wheeler2", s) in latest and ("sb3", s) in latest
    ]
    return table(rows)


def table(rows: list[tuple[Outcome, Outcome]]) -> str:
    lines = [
        f"FetchReach-v4, DDPG + HER, first eval with success >= {THRESHOLD} over "
        f"{EVAL_EPISODES} episodes (every {EVAL_EVERY} env steps), torch threads 1",
        "",
        "| seed | wheeler2 steps | SB3 steps | steps ratio | wheeler2 s | SB3 s | wall ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for w, s in rows:
        sr = w.steps / s.steps if w.steps and s.steps else None
        wr = w.wall / s.wall if w.wall and s.wall else None
        lines.append(
            f"| {w.seed} | {_fmt(w.steps)} | {_fmt(s.steps)} | {_fmt(sr, '.2f')} "
            f"| {_fmt(w.wall, '.1f')} | {_fmt(s.wall, '.1f')} | {_fmt(wr, '.2f')} |"
        )
    lines += ["", "Success curves (env steps: success):", ""]
    for w, s in rows:
        for o in (w, s):
            pts = ", ".join(f"{k}: {v:.2f}" for k, v in o.curve)
            lines.append(f"- {o.side} seed {o.seed}: {pts}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--max-steps", type=int, default=5_000, help="wheeler2 budget")
    ap.add_argument("--sb3-max-steps", type=int, default=8_000)
    ap.add_argument("--no-normalize", action="store_true", help="wheeler2 without normalize_obs")
    ap.add_argument("--out", default=str(ROOT / "runs" / "fetch_her_vs_sb3"))
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the runs")
    args = ap.parse_args(argv)
    name = "fetch_her_vs_sb3" + ("_nonorm" if args.no_normalize else "")
    log = RESULTS / f"{name}_runs.jsonl"
    if not args.table:
        import torch

        torch.set_num_threads(1)
        log.unlink(missing_ok=True)  # the table is this sweep's runs
        for seed in args.seeds:
            w = run_wheeler2(seed, args.max_steps, Path(args.out), not args.no_normalize)
            runs.append(log, asdict(w))
            print(f"wheeler2 seed {seed}: steps {w.steps} wall {w.wall} curve {w.curve}")
            s = run_sb3(seed, args.sb3_max_steps)
            runs.append(log, asdict(s))
            print(f"sb3 seed {seed}: steps {s.steps} wall {s.wall} curve {s.curve}", flush=True)
    text = render(runs.load(log))
    print(text)
    report.write(
        RESULTS / f"{name}.md", text, render=render, runs_file=log,
        command=report.command_line(argv),
    )  # fmt: skip


if __name__ == "__main__":
    main()
