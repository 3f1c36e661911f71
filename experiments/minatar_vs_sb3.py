"""DQN on MinAtar, like for like with Stable-Baselines3 (issue 40, "Measure", the learning row).

    python -m experiments.minatar_vs_sb3 [--games Breakout SpaceInvaders] [--seeds 0 1 2 3 4]
                                         [--steps 500000] [--eval-episodes 10] [--jobs 2]
    python -m experiments.minatar_vs_sb3 --table     # the files again from the stored runs

Both sides: ``MinAtar/<Game>-v1`` as channels-first uint8 images of 0 / 255 (wheeler2's
adapter; SB3 gets the same through a wrapper), the MinAtar paper's network (16 3x3
convolutions, 128 units, the Q layer: wheeler2 ``encoder = "small_cnn"``, ``hidden = [128]``;
SB3 a features extractor of the same convolution and ``net_arch = [128]``), replay 100k, batch
32, Adam 2.5e-4, gamma 0.99, one update per step, target every 1,000 updates, epsilon 1 ->
0.1 over the first 100k steps (a fifth of ``--steps`` when shorter), warm-up 5k (idem), Huber
loss, gradients clipped at 10, vanilla DQN targets (wheeler2 ``double = false``). wheeler2
runs ``cfg/minatar_<game>.toml`` through ``wheeler2.run``.

Evaluation, the same on both sides: ``--eval-episodes`` greedy episodes every ``--eval-every``
steps (wheeler2's in-run eval; SB3's ``EvalCallback``), and the final return is the mean of
``--eval-episodes`` greedy episodes after the last step (wheeler2's closing eval; SB3's
``evaluate_policy``). Wall-clock: wheeler2 the whole ``wheeler2.run`` (start-up and closing
eval included), SB3 ``learn`` (its in-run evals included).

The sweep is interleaved (seed by seed, the side that starts alternating) and ``--jobs`` runs
side by side, each in a process of its own, so machine load falls on both sides alike. Each
run's record is appended to ``<out>_runs.jsonl`` as it ends; a sweep started again skips the
(game, seed, side) runs stored at the same steps and eval settings (``--fresh`` starts over), so
an interrupted sweep goes on where it stopped. The table (per game: each side's median final
return with rliable's 95% bootstrap interval over seeds, the ratio of medians with a paired
interval, seeds where wheeler2 ends at or above SB3, wall-clock) and the plot (eval return
against env steps, each seed thin and the median thick) are rebuilt from those records.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, ROOT, arms, report, runs, stats

SIDES = ["wheeler2", "sb3"]
CONFIGS = {"Breakout": "minatar_breakout.toml", "SpaceInvaders": "minatar_space_invaders.toml"}


def schedule(steps: int) -> tuple[int, int]:
    """(warm-up steps, epsilon decay steps): the paper's 5k and 100k, or a fifth of a shorter
    run."""
    return min(5_000, steps // 5), min(100_000, steps // 5)


def wheeler2_run(
    game: str, seed: int, steps: int, episodes: int, every: int, out: Path, device: str = "cpu"
) -> dict[str, Any]:
    import wheeler2

    warm, decay = schedule(steps)
    overrides: dict[str, Any] = {
        "seed": seed,
        "experiment__total_steps": steps,
        "experiment__eval_every": every,
        "experiment__eval_episodes": episodes,
        "experiment__progress": False,
        "team__dqn__params__learning_starts": warm,
        "team__dqn__params__eps_decay_steps": decay,
        "team__dqn__params__double": False,
        "team__dqn__params__device": device,
    }
    start = time.perf_counter()
    run = wheeler2.run(ROOT / "cfg" / CONFIGS[game], out=str(out), **overrides)
    summary = json.loads((run / "summary.json").read_text())
    curve = [[int(e["env_steps"]), float(e["return"])] for e in summary["eval"]]
    return {
        "final_return": summary["final_eval_return"],
        "wall_s": time.perf_counter() - start,
        "curve": curve,
    }


def sb3_model(game: str, seed: int, steps: int, device: str = "cpu") -> tuple[Any, Any]:
    """SB3's side of the comparison: (its ``DQN`` on ``MinAtar/<game>-v1`` with the settings of
    the docstring, a function making another such env)."""
    import gymnasium as gym
    import torch
    import wheeler2.envs.pixels  # noqa: F401 - registers the MinAtar ids
    from stable_baselines3 import DQN
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class Bytes(gym.ObservationWrapper):
        """MinAtar's (10, 10, C) bool state as (C, 10, 10) uint8 of 0 / 255, as wheeler2's
        adapter gives it."""

        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            shape = env.observation_space.shape
            assert shape is not None
            h, w, c = shape
            self.observation_space = gym.spaces.Box(0, 255, (c, h, w), np.uint8)

        def observation(self, obs: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(obs.transpose(2, 0, 1)).astype(np.uint8) * np.uint8(255)

    class SmallCNN(BaseFeaturesExtractor):
        def __init__(self, space: gym.spaces.Box) -> None:
            c, h, w = space.shape
            super().__init__(space, features_dim=16 * (h - 2) * (w - 2))
            self.body = nn.Sequential(nn.Conv2d(c, 16, 3), nn.ReLU(), nn.Flatten())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    def make() -> gym.Env:
        return Bytes(gym.make(f"MinAtar/{game}-v1"))

    warm, decay = schedule(steps)
    model = DQN(
        "CnnPolicy",
        make(),
        learning_rate=2.5e-4,
        buffer_size=100_000,
        learning_starts=warm,
        batch_size=32,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=1_000,
        exploration_fraction=decay / steps,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.1,
        max_grad_norm=10,
        policy_kwargs={"features_extractor_class": SmallCNN, "net_arch": [128]},
        device=device,
        seed=seed,
    )
    return model, make


def sb3_run(
    game: str, seed: int, steps: int, episodes: int, every: int, device: str = "cpu"
) -> dict[str, Any]:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    model, make = sb3_model(game, seed, steps, device)
    env = model.get_env()
    curve: list[list[float]] = []
    eval_env = make()

    class Evals(BaseCallback):
        """``episodes`` greedy episodes every ``every`` steps, as wheeler2's in-run eval."""

        def _on_step(self) -> bool:
            if self.num_timesteps % every == 0 and self.num_timesteps < steps:
                mean, _ = evaluate_policy(
                    model, eval_env, n_eval_episodes=episodes, deterministic=True
                )
                curve.append([self.num_timesteps, float(mean)])
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Evals())
    wall = time.perf_counter() - start
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True)
    curve.append([steps, float(mean)])
    env.close()
    eval_env.close()
    return {"final_return": float(mean), "wall_s": wall, "curve": curve}


# -- the sweep ------------------------------------------------------------------------------------


def plan(games: list[str], seeds: list[int], sides: list[str]) -> Iterator[tuple[str, int, str]]:
    """(game, seed, side) seed by seed, games alternating inside a seed and the side that starts
    alternating from one seed to the next: neighbours in the order (what runs side by side)
    are the two sides of one seed."""
    for i, seed in enumerate(seeds):
        for game in games:
            for side in sides if i % 2 == 0 else sides[::-1]:
                yield game, seed, side


def one_run(
    game: str, seed: int, side: str, steps: int, episodes: int, every: int, device: str
) -> dict[str, Any]:
    """One run in a process of its own (a fresh interpreter: neither side's imports or threads
    reach the other's runs)."""
    from wheeler2.process import set_compute_threads

    set_compute_threads()  # one torch thread, as sb3_run sets for SB3
    if side == "wheeler2":
        with tempfile.TemporaryDirectory() as tmp:
            res = wheeler2_run(game, seed, steps, episodes, every, Path(tmp), device)
    else:
        res = sb3_run(game, seed, steps, episodes, every, device)
    return {"game": game, "seed": seed, "side": side, **settings(steps, episodes, every), **res}


def describe(record: dict[str, Any]) -> str:
    return (
        f"{record['game']} seed {record['seed']} {record['side']}: final "
        f"{record['final_return']:.2f}, {record['wall_s']:.0f} s"
    )


def settings(steps: int, episodes: int, every: int) -> dict[str, int]:
    return {"steps": steps, "eval_episodes": episodes, "eval_every": every}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=500_000)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=None, help="default: a tenth of --steps")
    ap.add_argument("--sides", nargs="+", default=SIDES, choices=SIDES)
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (one core each)")
    ap.add_argument("--device", default="cpu", help="both sides' torch device (cpu, cuda)")
    ap.add_argument("--out", type=Path, default=RESULTS / "minatar_vs_sb3.md")
    ap.add_argument("--fresh", action="store_true", help="forget the stored runs first")
    ap.add_argument("--table", action="store_true", help="only rebuild the files")
    args = ap.parse_args(argv)
    every = args.eval_every or max(1, args.steps // 10)
    log = args.out.with_name(args.out.stem + "_runs.jsonl")
    if args.fresh:
        log.unlink(missing_ok=True)
    same = settings(args.steps, args.eval_episodes, every)
    if not args.table:
        stored = {
            (r["game"], r["seed"], r["side"])
            for r in runs.load(log)
            if all(r.get(k) == v for k, v in same.items())
        }
        todo = [t for t in plan(args.games, args.seeds, args.sides) if t not in stored]
        print(f"{len(todo)} runs to go ({len(stored)} stored)", flush=True)
        arms.run_parallel(
            todo,
            args.jobs,
            one_run,
            log,
            describe,
            steps=args.steps,
            episodes=args.eval_episodes,
            every=every,
            device=args.device,
        )
    params = {
        "games": args.games,
        "seeds": args.seeds,
        "steps": args.steps,
        "eval_episodes": args.eval_episodes,
        "eval_every": every,
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "device": args.device,
    }
    print(report.write_from_runs(args.out, log, render, plot, params, argv))
    return 0


# -- the table and the plot -----------------------------------------------------------------------


def chosen(
    records: list[dict[str, Any]], game: str, side: str, seeds: list[int], steps: int
) -> dict[int, dict[str, Any]]:
    """The last stored run of each seed of ``game`` on ``side`` at ``steps``."""
    mine = [
        r
        for r in records
        if r["game"] == game
        and r["side"] == side
        and r["seed"] in seeds
        and r.get("steps", steps) == steps
    ]
    return runs.latest(mine, key=lambda r: r["seed"])  # type: ignore[return-value]


SUMMARY_HEAD = (
    "game",
    "seeds",
    "wheeler2 final",
    "SB3 final",
    "final ratio",
    "wheeler2 >= SB3",
    "wheeler2 wall",
    "SB3 wall",
    "wall ratio",
)


def render(
    records: list[dict[str, Any]],
    *,
    games: list[str],
    seeds: list[int],
    steps: int,
    eval_episodes: int,
    date: str,
    cores: int,
    device: str = "cpu",
    eval_every: int | None = None,
) -> str:
    """The tables from the stored runs (one record per game, seed and side) and the sweep's
    arguments, date and core count (the result file's params)."""
    summary, per_seed = [], []
    for game in games:
        w = chosen(records, game, "wheeler2", seeds, steps)
        s = chosen(records, game, "sb3", seeds, steps)
        both = sorted(set(w) & set(s))
        if not both:
            continue
        fw = [w[k]["final_return"] for k in both]
        fs = [s[k]["final_return"] for k in both]
        tw = [w[k]["wall_s"] for k in both]
        ts = [s[k]["wall_s"] for k in both]
        iw, is_ = stats.seed_intervals(fw)["median"], stats.seed_intervals(fs)["median"]
        ratio = stats.ratio_ci(fw, fs)
        wall = stats.ratio_ci(tw, ts)
        ahead = sum(a >= b for a, b in zip(fw, fs))
        summary.append(
            f"| {game} | {len(both)} | {iw.point:.2f} [{iw.lo:.2f}, {iw.hi:.2f}] | "
            f"{is_.point:.2f} [{is_.lo:.2f}, {is_.hi:.2f}] | {ratio.point:.2f} "
            f"[{ratio.lo:.2f}, {ratio.hi:.2f}] | {ahead} of {len(both)} | "
            f"{stats.median(tw):.0f} s | {stats.median(ts):.0f} s | {wall.point:.2f}x "
            f"[{wall.lo:.2f}, {wall.hi:.2f}] |"
        )
        for k in both:
            per_seed.append(
                f"| {game} | {k} | {w[k]['final_return']:.2f} | {s[k]['final_return']:.2f} | "
                f"{w[k]['wall_s']:.0f} s | {s[k]['wall_s']:.0f} s |"
            )
    evals = (
        f"{eval_episodes} greedy episodes every {eval_every:,} steps on both sides (wheeler2's "
        "in-run eval, SB3's `EvalCallback`) and "
        if eval_every and eval_every < steps
        else ""
    )
    return f"""# DQN on MinAtar: wheeler2 against SB3, like for like

`python -m experiments.minatar_vs_sb3 --games {" ".join(games)} --seeds \
{" ".join(map(str, seeds))} --steps {steps} --eval-episodes {eval_episodes} --device {device}` \
({date}, {cores} cores, networks on {device}; the settings of both sides are in the script's
docstring). Evaluation: {evals}the final return, the mean of {eval_episodes} greedy episodes
after the last step. Wall-clock per run: wheeler2 the whole `wheeler2.run` (start-up and
closing eval included), SB3 `learn` (with its evals). Medians over seeds with rliable's 95%
percentile bootstrap interval; ratios are ratios of medians (wheeler2 / SB3) with a paired
bootstrap interval over seeds.

{chr(10).join(report.table(SUMMARY_HEAD, []) + summary)}

Per seed:

| game | seed | wheeler2 final | SB3 final | wheeler2 wall | SB3 wall |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(per_seed)}
"""


def plot(records: list[dict[str, Any]], path: Path, **params: Any) -> None:
    """Eval return against env steps, a panel per game: each seed a thin line, each side's
    median over seeds a thick one. Nothing is drawn when no record has a curve."""
    games, seeds, steps = params["games"], params["seeds"], params["steps"]
    if not any(r.get("curve") for r in records):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4), squeeze=False)
    for ax, game in zip(axes[0], games):
        for side, colour in (("wheeler2", "tab:blue"), ("sb3", "tab:orange")):
            curves = [r["curve"] for r in chosen(records, game, side, seeds, steps).values()]
            curves = [c for c in curves if c]
            for c in curves:
                ax.plot(*zip(*c), color=colour, alpha=0.3, linewidth=1)
            if curves:
                n = min(len(c) for c in curves)
                xs = [x for x, _ in curves[0][:n]]
                med = [stats.median(c[i][1] for c in curves) for i in range(n)]
                label = f"{side}: median, {len(curves)} seeds"
                ax.plot(xs, med, color=colour, linewidth=2.5, label=label)
        ax.set_title(f"MinAtar/{game}-v1, DQN")
        ax.set_xlabel("env steps")
        ax.set_ylabel(f"eval return ({params['eval_episodes']} greedy episodes)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
