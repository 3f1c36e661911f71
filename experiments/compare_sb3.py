"""wheeler2 against Stable-Baselines3, side by side in one run, with the same hyperparameters.

    python -m experiments.compare_sb3 ddpg --seeds 0 1 2      # Pendulum-v1, DDPG, eval > -200
    python -m experiments.compare_sb3 td3 --seeds 0 1 2 3 4   # Pendulum-v1, TD3, eval > -200
    python -m experiments.compare_sb3 sac --seeds 0 1 2 3 4   # Pendulum-v1, SAC, eval > -200
    python -m experiments.compare_sb3 ppo --seeds 0 1 2       # CartPole-v1, PPO, eval >= 475
    python -m experiments.compare_sb3 td3-hopper --seeds 0 1 2 --full   # Hopper-v5, 100k steps
    python -m experiments.compare_sb3 sac-hopper --seeds 0 1 2 --full   # Hopper-v5, 100k steps
    (--hidden 64 64: smaller nets on both sides, for a machine where 256-256 takes too long)

Both sides evaluate the same way (mean of 10 deterministic episodes every ``eval_every`` env
steps, eval time included in the wall-clock) and run with the same number of torch threads, one
after the other in this process, the arms interleaved seed by seed (even seeds wheeler2 first,
odd seeds SB3 first, so neither side always runs on a warmer or a busier machine). The table
gives env steps and wall-clock to the threshold per seed and their ratios (wheeler2 / SB3: below
1 means wheeler2 needs less), each side's median (a seed that never reached the threshold counts
as never, i.e. last), the ratio of the medians with a 95% bootstrap interval over seeds, and the
seeds solved. Each finished run is appended to ``results/compare_sb3_<algo>_runs.jsonl``, and
the table ``compare_sb3_<algo>.md`` is rebuilt from every run in that file (``--table`` rebuilds
it without running; notes on the results: ``results/notes/compare_sb3_<algo>.md``). Needs the
``bench`` extra.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import interleave, run_config


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
    # TD3 and SAC: the rl-zoo Pendulum-v1 hyperparameters on both sides (cfg/pendulum_td3.toml,
    # cfg/pendulum_sac.toml and the SB3 constructors below state the same values).
    "td3": {
        "env": "Pendulum-v1",
        "cfg": ROOT / "cfg" / "pendulum_td3.toml",
        "threshold": -200.0,
        "above": lambda r, t: r > t,
        "total_steps": 20_000,
        "eval_every": 1_000,
    },
    "sac": {
        "env": "Pendulum-v1",
        "cfg": ROOT / "cfg" / "pendulum_sac.toml",
        "threshold": -200.0,
        "above": lambda r, t: r > t,
        "total_steps": 20_000,
        "eval_every": 1_000,
    },
    # Hopper-v5 at 100k env steps: the rl-zoo MuJoCo values on 256-256 nets (cfg/hopper_*.toml).
    # Judged on the final eval and on the wall-clock of the whole budget (run with --full).
    "td3-hopper": {
        "algo": "td3",
        "env": "Hopper-v5",
        "cfg": ROOT / "cfg" / "hopper_td3.toml",
        "threshold": 1_000.0,
        "above": lambda r, t: r >= t,
        "total_steps": 100_000,
        "eval_every": 10_000,
        "sb3": dict(
            learning_starts=10_000,
            learning_rate=1e-3,
            policy_delay=2,
            target_policy_noise=0.2,
            target_noise_clip=0.5,
            noise_std=0.1,
        ),
    },
    "sac-hopper": {
        "algo": "sac",
        "env": "Hopper-v5",
        "cfg": ROOT / "cfg" / "hopper_sac.toml",
        "threshold": 1_000.0,
        "above": lambda r, t: r >= t,
        "total_steps": 100_000,
        "eval_every": 10_000,
        "sb3": dict(learning_starts=10_000, learning_rate=3e-4),
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
    from stable_baselines3 import DDPG, PPO, SAC, TD3
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

    # rl-zoo's Pendulum values, shared by its DDPG and TD3 entries (TD3 adds its own three).
    zoo = dict(
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
    if "sb3" in prob:
        env = gym.make(prob["env"])
        kw = dict(prob["sb3"])
        act_dim = env.action_space.shape[0]
        common = dict(
            gamma=0.99,
            buffer_size=1_000_000,
            batch_size=256,
            tau=0.005,
            train_freq=1,
            gradient_steps=1,
            policy_kwargs=dict(net_arch=list(prob.get("hidden", [256, 256]))),
            seed=seed,
            device="cpu",
        )
        if prob["algo"] == "td3":
            std = kw.pop("noise_std")
            noise = NormalActionNoise(np.zeros(act_dim), std * np.ones(act_dim))
            model = TD3("MlpPolicy", env, action_noise=noise, **common, **kw)
        else:
            model = SAC("MlpPolicy", env, ent_coef="auto", target_entropy="auto", **common, **kw)
    elif algo == "ddpg":
        env = gym.make(prob["env"])
        model = DDPG("MlpPolicy", env, **zoo)
    elif algo == "td3":
        env = gym.make(prob["env"])
        model = TD3(
            "MlpPolicy",
            env,
            policy_delay=2,
            target_policy_noise=0.2,
            target_noise_clip=0.5,
            **zoo,
        )
    elif algo == "sac":
        env = gym.make(prob["env"])
        model = SAC(
            "MlpPolicy",
            env,
            gamma=0.99,
            buffer_size=200_000,
            learning_starts=100,
            gradient_steps=1,
            train_freq=1,
            learning_rate=1e-3,
            batch_size=256,
            tau=0.005,
            ent_coef="auto",
            target_entropy="auto",
            policy_kwargs=dict(net_arch=[256, 256]),
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
    prob = PROBLEMS[algo]
    overrides = []
    if prob.get("algo", algo) in ("td3", "sac"):
        # The same budget and eval schedule as the SB3 side, whatever the shipped file says.
        overrides += [
            f"experiment.total_steps={prob['total_steps']}",
            f"experiment.eval_every={prob['eval_every']}",
        ]
    if "hidden" in prob:  # --hidden: both sides' actor and critic sizes
        overrides.append(f"team.target.params.hidden={list(prob['hidden'])}")
    if stop_at_threshold:
        overrides.append("experiment.stop_at_threshold=true")
    run = run_config(prob["cfg"], overrides, seed=seed, out=out)
    strict = not prob["above"](prob["threshold"], prob["threshold"])  # ">" rather than ">="
    steps, seconds = stats.to_threshold(run.summary["eval"], prob["threshold"], strict=strict)
    return Outcome("wheeler2", seed, steps, seconds, run.summary["final_eval_return"], run.call_s)


def _fmt(x: float | int | None, spec: str = "") -> str:
    return "—" if x is None else format(x, spec)


def ratio_of_medians(w: list[float], s: list[float]) -> tuple[float, float, float]:
    """median(w) / median(s) and its paired 95% bootstrap interval over seeds; a resample where
    at least half of one side never reached the threshold counts that side as the slower one
    (ratio 0 or inf), so unsolved seeds widen the interval instead of leaving it."""
    return tuple(stats.ratio_ci(w, s, unsolved="rank"))


def render(
    stored: list[dict[str, Any]],
    algo: str,
    full: bool = False,
    hidden: list[int] | None = None,
    threads: int = 1,
) -> str:
    """The table over every stored run, one row per seed both sides ran (the latest run of a
    side and seed counts)."""
    latest = runs.latest(stored, lambda r: (r["side"], r["seed"]))
    seeds = sorted({r["seed"] for r in stored})
    fields = {k for k in Outcome.__dataclass_fields__}
    rows = [
        tuple(
            Outcome(**{k: v for k, v in latest[(side, seed)].items() if k in fields})
            for side in ("wheeler2", "sb3")
        )
        for seed in seeds
        if ("wheeler2", seed) in latest and ("sb3", seed) in latest
    ]
    return table(algo, rows, full, hidden, threads)


def table(
    algo: str,
    rows: list[tuple[Outcome, Outcome]],
    full: bool = False,
    hidden: list[int] | None = None,
    threads: int = 1,
) -> str:
    prob = PROBLEMS[algo]
    lines = [
        f"{algo.upper()} on {prob['env']}, threshold {prob['threshold']:g}, "
        f"budget {prob['total_steps']:,} env steps, eval every {prob['eval_every']:,} "
        f"(10 deterministic episodes), torch threads {threads}"
        + (f", hidden {list(hidden)} on both sides" if hidden else ""),
        "",
        "| seed | wheeler2 steps | SB3 steps | steps ratio | wheeler2 s | SB3 s | wall ratio "
        "| wheeler2 final | SB3 final |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
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
        lines.append(
            f"| {w.seed} | {_fmt(w.steps_to_threshold)} | {_fmt(s.steps_to_threshold)} "
            f"| {_fmt(sr, '.2f')} | {_fmt(w.wall_to_threshold, '.1f')} "
            f"| {_fmt(s.wall_to_threshold, '.1f')} | {_fmt(wr, '.2f')} "
            f"| {w.final_return:.1f} | {s.final_return:.1f} |"
        )
    lines += [
        "",
        "| to the threshold | wheeler2 median | SB3 median | ratio of medians | 95% bootstrap CI |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, key, spec in (
        ("env steps", "steps_to_threshold", ".0f"),
        ("wall-clock s", "wall_to_threshold", ".1f"),
    ):
        w = [stats.never(getattr(o, key)) for o, _ in rows]
        s = [stats.never(getattr(o, key)) for _, o in rows]
        point, lo, hi = ratio_of_medians(w, s)
        mw, ms = stats.median(w), stats.median(s)
        lines.append(
            f"| {label} | {_fmt(mw if math.isfinite(mw) else None, spec)} "
            f"| {_fmt(ms if math.isfinite(ms) else None, spec)} "
            f"| {_fmt(None if math.isnan(point) else point, '.2f')} "
            f"| {'—' if math.isnan(lo) else f'[{lo:.2f}, {hi:.2f}]'} |"
        )
    if full:
        # Both sides ran the whole budget: their total wall-clock is the same quantity.
        w = [o.wall_total for o, _ in rows]
        s = [o.wall_total for _, o in rows]
        point, lo, hi = ratio_of_medians(w, s)
        lines.append(
            f"| whole budget, wall-clock s | {stats.median(w):.1f} | {stats.median(s):.1f} "
            f"| {point:.2f} "
            f"| [{lo:.2f}, {hi:.2f}] |"
        )
    if full and all(o.final_return > 0 for pair in rows for o in pair):
        # A ratio of returns means something only where returns are positive (Hopper, not
        # Pendulum); above 1 means wheeler2's final eval is higher.
        w = [o.final_return for o, _ in rows]
        s = [o.final_return for _, o in rows]
        point, lo, hi = ratio_of_medians(w, s)
        lines.append(
            f"| final eval return (higher is better) | {stats.median(w):.1f} "
            f"| {stats.median(s):.1f} "
            f"| {point:.2f} | [{lo:.2f}, {hi:.2f}] |"
        )
    solved_w = sum(o.steps_to_threshold is not None for o, _ in rows)
    solved_s = sum(o.steps_to_threshold is not None for _, o in rows)
    lines += [
        "",
        f"Seeds solved (eval above {prob['threshold']:g} within the budget): wheeler2 "
        f"{solved_w}/{len(rows)}, SB3 {solved_s}/{len(rows)}. A seed that never reached the "
        "threshold counts as last in the medians; the bootstrap resamples seeds, both sides "
        "of a seed together.",
    ]
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
    ap.add_argument(
        "--hidden",
        type=int,
        nargs="+",
        help="Hopper problems: actor and critic hidden sizes on both sides (default 256 256)",
    )
    ap.add_argument("--table", action="store_true", help="only rebuild the table from the runs")
    args = ap.parse_args(argv)
    if args.hidden:
        if "sb3" not in PROBLEMS[args.algo]:
            ap.error("--hidden applies to the Hopper problems only")
        PROBLEMS[args.algo]["hidden"] = args.hidden
    # Hopper runs at other net sizes than the default keep their own tables.
    stem = f"compare_sb3_{args.algo}" + (
        "_h" + "-".join(map(str, args.hidden)) if args.hidden else ""
    )
    log = RESULTS / f"{stem}_runs.jsonl"
    if not args.table:
        import torch

        torch.set_num_threads(args.threads)
        # Interleaved: even positions run wheeler2 first, odd ones SB3 first.
        for seed, side in interleave(args.seeds, ["wheeler2", "sb3"], rotate=True):
            if side == "wheeler2":
                o = run_wheeler2(args.algo, seed, Path(args.out), stop_at_threshold=not args.full)
            else:
                o = run_sb3(args.algo, seed, stop_at_threshold=not args.full)
            runs.append(log, {"algo": args.algo, **asdict(o)})
            print(f"seed {seed}: {o}", flush=True)
    params = {"algo": args.algo, "full": args.full, "hidden": args.hidden, "threads": args.threads}
    text = render(runs.load(log), **params)
    print()
    print(text)
    report.write(
        RESULTS / f"{stem}.md",
        text,
        render=render,
        params=params,
        runs_file=log,
        command=report.command_line(argv),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
