"""wheeler2 against Stable-Baselines3, side by side in one run, with the same hyperparameters.

    python experiments/compare_sb3.py ddpg --seeds 0 1 2      # Pendulum-v1, DDPG, eval > -200
    python experiments/compare_sb3.py td3 --seeds 0 1 2 3 4   # Pendulum-v1, TD3, eval > -200
    python experiments/compare_sb3.py sac --seeds 0 1 2 3 4   # Pendulum-v1, SAC, eval > -200
    python experiments/compare_sb3.py ppo --seeds 0 1 2       # CartPole-v1, PPO, eval >= 475
    python experiments/compare_sb3.py td3-hopper --seeds 0 1 2 --full   # Hopper-v5, 100k steps
    python experiments/compare_sb3.py sac-hopper --seeds 0 1 2 --full   # Hopper-v5, 100k steps
    (--hidden 64 64: smaller nets on both sides, for a machine where 256-256 takes too long)

Both sides evaluate the same way (mean of 10 deterministic episodes every ``eval_every`` env
steps, eval time included in the wall-clock) and run with the same number of torch threads, one
after the other in this process, the arms interleaved seed by seed (even seeds wheeler2 first,
odd seeds SB3 first, so neither side always runs on a warmer or a busier machine). The table
gives env steps and wall-clock to the threshold per seed and their ratios (wheeler2 / SB3: below
1 means wheeler2 needs less), each side's median (a seed that never reached the threshold counts
as never, i.e. last), the ratio of the medians with a 95% bootstrap interval over seeds, and the
seeds solved. Each finished run is appended to ``results/compare_sb3_<algo>_runs.jsonl``.
Needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
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
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    prob = PROBLEMS[algo]
    overrides = ["experiment.progress=false"]
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


def _never(x: float | int | None) -> float:
    """A run that never reached the threshold ranks after every run that did."""
    return math.inf if x is None else float(x)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)  # inf where more than half never reached the threshold


def ratio_of_medians(
    w: list[float], s: list[float], resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """median(w) / median(s), and a 95% percentile bootstrap interval over seeds (paired: a
    resample draws seeds, each with both sides' runs). Resamples whose medians are not finite
    are left out; nan when none is."""
    point = _median(w) / _median(s) if math.isfinite(_median(w) + _median(s)) else math.nan
    rng = np.random.default_rng(seed)
    n, stats = len(w), []
    wa, sa = np.array(w), np.array(s)
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        mw, ms = float(np.median(wa[idx])), float(np.median(sa[idx]))
        if math.isfinite(mw) and math.isfinite(ms) and ms > 0:
            stats.append(mw / ms)
    if not stats:
        return point, math.nan, math.nan
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return point, float(lo), float(hi)


def table(algo: str, rows: list[tuple[Outcome, Outcome]], full: bool = False) -> str:
    prob = PROBLEMS[algo]
    lines = [
        f"{algo.upper()} on {prob['env']}, threshold {prob['threshold']:g}, "
        f"budget {prob['total_steps']:,} env steps, eval every {prob['eval_every']:,} "
        f"(10 deterministic episodes), torch threads {torch.get_num_threads()}"
        + (f", hidden {prob['hidden']} on both sides" if "hidden" in prob else ""),
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
        w = [_never(getattr(o, key)) for o, _ in rows]
        s = [_never(getattr(o, key)) for _, o in rows]
        point, lo, hi = ratio_of_medians(w, s)
        mw, ms = _median(w), _median(s)
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
            f"| whole budget, wall-clock s | {_median(w):.1f} | {_median(s):.1f} | {point:.2f} "
            f"| [{lo:.2f}, {hi:.2f}] |"
        )
    if full and all(o.final_return > 0 for pair in rows for o in pair):
        # A ratio of returns means something only where returns are positive (Hopper, not
        # Pendulum); above 1 means wheeler2's final eval is higher.
        w = [o.final_return for o, _ in rows]
        s = [o.final_return for _, o in rows]
        point, lo, hi = ratio_of_medians(w, s)
        lines.append(
            f"| final eval return (higher is better) | {_median(w):.1f} | {_median(s):.1f} "
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
    args = ap.parse_args(argv)
    if args.hidden:
        if "sb3" not in PROBLEMS[args.algo]:
            ap.error("--hidden applies to the Hopper problems only")
        PROBLEMS[args.algo]["hidden"] = args.hidden
    torch.set_num_threads(args.threads)
    RESULTS.mkdir(parents=True, exist_ok=True)
    # Hopper runs at other net sizes than the default keep their own tables.
    stem = f"compare_sb3_{args.algo}" + (
        "_h" + "-".join(map(str, args.hidden)) if args.hidden else ""
    )
    log = RESULTS / f"{stem}_runs.jsonl"
    rows = []
    for i, seed in enumerate(args.seeds):
        # Interleaved: even positions run wheeler2 first, odd ones SB3 first.
        sides = ["wheeler2", "sb3"] if i % 2 == 0 else ["sb3", "wheeler2"]
        got: dict[str, Outcome] = {}
        for side in sides:
            if side == "wheeler2":
                got[side] = run_wheeler2(
                    args.algo, seed, Path(args.out), stop_at_threshold=not args.full
                )
            else:
                got[side] = run_sb3(args.algo, seed, stop_at_threshold=not args.full)
            with log.open("a") as f:
                f.write(json.dumps({"algo": args.algo, **asdict(got[side])}) + "\n")
        w, s = got["wheeler2"], got["sb3"]
        print(f"seed {seed}: wheeler2 {w}\n        SB3      {s}", flush=True)
        rows.append((w, s))
    text = table(args.algo, rows, full=args.full)
    print()
    print(text)
    command = "python experiments/compare_sb3.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (RESULTS / f"{stem}.md").write_text(
        f"{text}\n\n`{command}`, finished {stamp}; raw runs in `{stem}_runs.jsonl`.\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
