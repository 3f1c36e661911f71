"""wheeler2 against Stable-Baselines3, side by side in one run, with the same hyperparameters.

    python experiments/compare_sb3.py ddpg --seeds 0 1 2      # Pendulum-v1, DDPG, eval > -200
    python experiments/compare_sb3.py ppo --seeds 0 1 2       # CartPole-v1, PPO, eval >= 475

Both sides evaluate the same way (mean of 10 deterministic episodes every ``eval_every`` env
steps, eval time included in the wall-clock) and run with the same number of torch threads, one
after the other in this process. The table gives env steps and wall-clock to the threshold and
their ratios (wheeler2 / SB3: below 1 means wheeler2 needs less). Needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


@dataclass
class Outcome:
    side: str
    seed: int
    steps_to_threshold: int | None
    wall_to_threshold: float | None
    final_return: float
    wall_total: float


# -- the shared problem definitions ---------------------------------------------------------------
PROBLEMS = {
    "ddpg": {
        "env": "Pendulum-v1",
        "cfg": ROOT / "cfg" / "pendulum_ddpg.toml",
        "threshold": -200.0,
        "above": lambda r, t: r > t,
        "total_steps": 15_000,
        "eval_every": 1_000,
    },
    "ppo": {
        "env": "CartPole-v1",
        "cfg": ROOT / "cfg" / "cartpole_ppo.toml",
        "threshold": 475.0,
        "above": lambda r, t: r >= t,
        "total_steps": 100_000,
        "eval_every": 2_048,
    },
}


def run_sb3(algo: str, seed: int, stop_at_threshold: bool) -> Outcome:
    import gymnasium as gym
    from stable_baselines3 import DDPG, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    prob = PROBLEMS[algo]
    eval_env = gym.make(prob["env"])
    eval_env.reset(seed=seed + 99_991)

    class Evaluator(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = time.perf_counter()
            self.next_eval = prob["eval_every"]
            self.hit: tuple[int, float] | None = None
            self.last = float("nan")

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += prob["eval_every"]
                mean, _ = evaluate_policy(
                    self.model, eval_env, n_eval_episodes=10, deterministic=True
                )
                self.last = float(mean)
                if self.hit is None and prob["above"](mean, prob["threshold"]):
                    self.hit = (self.num_timesteps, time.perf_counter() - self.t0)
                    if stop_at_threshold:
                        return False
            return True

    if algo == "ddpg":
        env = gym.make(prob["env"])
        model = DDPG(
            "MlpPolicy",
            env,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
            gradient_steps=1,
            train_freq=1,
            learning_rate=1e-3,
            batch_size=256,
            tau=0.005,
            policy_kwargs=dict(net_arch=[400, 300]),
            seed=seed,
            device="cpu",
        )
    else:
        env = make_vec_env(prob["env"], n_envs=8, seed=seed)

        def linear(start: float):
            return lambda progress: progress * start

        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            seed=seed,
            device="cpu",
        )
    cb = Evaluator()
    model.learn(total_timesteps=prob["total_steps"], callback=cb)
    wall = time.perf_counter() - cb.t0
    return Outcome(
        "sb3", seed, cb.hit[0] if cb.hit else None, cb.hit[1] if cb.hit else None, cb.last, wall
    )


def run_wheeler2(algo: str, seed: int, out: Path, stop_at_threshold: bool) -> Outcome:
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    prob = PROBLEMS[algo]
    overrides = ["experiment.progress=false"]
    if stop_at_threshold:
        overrides.append("experiment.stop_at_threshold=true")
    config = load(prob["cfg"], overrides=overrides, seed=seed, out=str(out))
    t0 = time.perf_counter()
    run_dir = run_experiment(config)
    wall = time.perf_counter() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    hit = next((e for e in summary["eval"] if prob["above"](e["return"], prob["threshold"])), None)
    return Outcome(
        "wheeler2",
        seed,
        hit["env_steps"] if hit else None,
        hit["wall_s"] if hit else None,
        summary["final_eval_return"],
        wall,
    )


def _fmt(x: float | int | None, spec: str = "") -> str:
    return "—" if x is None else format(x, spec)


def table(algo: str, rows: list[tuple[Outcome, Outcome]]) -> str:
    prob = PROBLEMS[algo]
    lines = [
        f"{algo.upper()} on {prob['env']}, threshold {prob['threshold']:g}, "
        f"torch threads {torch.get_num_threads()}",
        "",
        "| seed | wheeler2 steps | SB3 steps | steps ratio | wheeler2 s | SB3 s | wall ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    steps_r, wall_r = [], []
    for w, s in rows:
        sr = (
            w.steps_to_threshold / s.steps_to_threshold
            if w.steps_to_threshold and s.steps_to_threshold
            else None
        )
        wr = (
            w.wall_to_threshold / s.wall_to_threshold
            if w.wall_to_threshold and s.wall_to_threshold
            else None
        )
        if sr is not None:
            steps_r.append(sr)
            wall_r.append(wr)
        lines.append(
            f"| {w.seed} | {_fmt(w.steps_to_threshold)} | {_fmt(s.steps_to_threshold)} "
            f"| {_fmt(sr, '.2f')} | {_fmt(w.wall_to_threshold, '.1f')} "
            f"| {_fmt(s.wall_to_threshold, '.1f')} | {_fmt(wr, '.2f')} |"
        )
    both = [(w, s) for w, s in rows if w.steps_to_threshold and s.steps_to_threshold]
    if both:
        ws = statistics.mean(w.steps_to_threshold for w, _ in both)
        ss = statistics.mean(s.steps_to_threshold for _, s in both)
        ww = statistics.mean(w.wall_to_threshold for w, _ in both)
        sw = statistics.mean(s.wall_to_threshold for _, s in both)
        lines.append(
            f"| mean of each side | {ws:.0f} | {ss:.0f} | {ws / ss:.2f} | {ww:.1f} | "
            f"{sw:.1f} | {ww / sw:.2f} |"
        )
    if steps_r:
        lines.append(
            f"| mean | | | {statistics.mean(steps_r):.2f} | | | {statistics.mean(wall_r):.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("algo", choices=sorted(PROBLEMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    ap.add_argument("--out", default=str(ROOT / "runs" / "compare_sb3"))
    ap.add_argument(
        "--full",
        action="store_true",
        help="run SB3 to the step budget instead of stopping at the threshold",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for seed in args.seeds:
        w = run_wheeler2(args.algo, seed, Path(args.out), stop_at_threshold=not args.full)
        s = run_sb3(args.algo, seed, stop_at_threshold=not args.full)
        print(f"seed {seed}: wheeler2 {w}\n        SB3      {s}", flush=True)
        rows.append((w, s))
    text = table(args.algo, rows)
    print()
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"compare_sb3_{args.algo}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
