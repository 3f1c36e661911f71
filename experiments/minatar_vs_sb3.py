"""DQN on MinAtar, like for like with Stable-Baselines3 (issue 40, "Measure", the learning row).

    python -m experiments.minatar_vs_sb3 [--games Breakout SpaceInvaders] [--seeds 0 1 2 3 4]
                                         [--steps 500000] [--eval-episodes 10]

Both sides: ``MinAtar/<Game>-v1`` as channels-first uint8 images of 0 / 255 (wheeler2's
adapter; SB3 gets the same through a wrapper), the MinAtar paper's network (16 3x3
convolutions, 128 units, the Q layer: wheeler2 ``encoder = "small_cnn"``, ``hidden = [128]``;
SB3 a features extractor of the same convolution and ``net_arch = [128]``), replay 100k, batch
32, Adam 2.5e-4, gamma 0.99, one update per step, target every 1,000 updates, epsilon 1 ->
0.1 over the first 100k steps (a fifth of ``--steps`` when shorter), warm-up 5k (idem), Huber
loss, gradients clipped at 10, vanilla DQN targets (wheeler2 ``double = false``). Each run's
final return is the mean of ``--eval-episodes`` greedy episodes after the last step. wheeler2
runs ``cfg/minatar_<game>.toml`` through ``wheeler2.run``.

The issue's comparison is 5 seeds x 500k steps x 2 games per side: about 2 x 20 CPU-hours on
this machine (MinAtar DQN runs ~150 steps/s here), not run yet; ``--steps 6000 --seeds 0
--games Breakout`` is the smoke check that both sides run. Writes
experiments/results/minatar_vs_sb3.md (through ``experiments.lib.report``: rebuild it with
``python -m experiments regen``) and each run's figures beside it (JSON lines, appended as
each run ends).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, ROOT, report, runs

SIDES = ["wheeler2", "sb3"]
CONFIGS = {"Breakout": "minatar_breakout.toml", "SpaceInvaders": "minatar_space_invaders.toml"}


def schedule(steps: int) -> tuple[int, int]:
    """(warm-up steps, epsilon decay steps): the paper's 5k and 100k, or a fifth of a shorter
    run."""
    return min(5_000, steps // 5), min(100_000, steps // 5)


def wheeler2_run(
    game: str, seed: int, steps: int, episodes: int, out: Path, device: str = "cpu"
) -> dict[str, Any]:
    import wheeler2

    warm, decay = schedule(steps)
    overrides: dict[str, Any] = {
        "seed": seed,
        "experiment__total_steps": steps,
        "experiment__eval_every": steps,
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
    return {"final_return": summary["final_eval_return"], "wall_s": time.perf_counter() - start}


def sb3_run(game: str, seed: int, steps: int, episodes: int, device: str = "cpu") -> dict[str, Any]:
    import gymnasium as gym
    import torch
    import wheeler2.envs.pixels  # noqa: F401 - registers the MinAtar ids
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    torch.set_num_threads(1)

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
    env = make()
    model = DQN(
        "CnnPolicy",
        env,
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
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    eval_env = make()
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True)
    env.close()
    eval_env.close()
    return {"final_return": float(np.mean(mean)), "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=500_000)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--sides", nargs="+", default=SIDES, choices=SIDES)
    ap.add_argument("--device", default="cpu", help="both sides' torch device (cpu, cuda)")
    ap.add_argument("--out", type=Path, default=RESULTS / "minatar_vs_sb3.md")
    args = ap.parse_args(argv)
    log = args.out.with_name(args.out.stem + "_runs.jsonl")
    log.unlink(missing_ok=True)  # this sweep's runs only, appended as each one ends
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for game in args.games:
            for seed in args.seeds:
                for side in args.sides:
                    if side == "wheeler2":
                        res = wheeler2_run(
                            game, seed, args.steps, args.eval_episodes, Path(tmp), args.device
                        )
                    else:
                        res = sb3_run(game, seed, args.steps, args.eval_episodes, args.device)
                    records.append({"game": game, "seed": seed, "side": side, **res})
                    runs.append(log, records[-1])
                    print(records[-1], flush=True)
    params = {
        "games": args.games,
        "seeds": args.seeds,
        "steps": args.steps,
        "eval_episodes": args.eval_episodes,
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "device": args.device,
    }
    text = render(records, **params)
    report.write(
        args.out,
        text,
        render=render,
        params=params,
        runs_file=log,
        command=report.command_line(argv),
    )
    print(text)
    return 0


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
) -> str:
    """The table from the stored runs (one record per game, seed and side) and the sweep's
    arguments, date and core count (the result file's params)."""
    rows = []
    for game in games:
        cell = {}
        for side in ("wheeler2", "sb3"):
            mine = [r for r in records if r["game"] == game and r["side"] == side]
            cell[side] = (
                float(np.median([r["final_return"] for r in mine])),
                float(np.median([r["wall_s"] for r in mine])),
            )
        w, s = cell["wheeler2"], cell["sb3"]
        rows.append(
            f"| {game} | {w[0]:.2f} | {s[0]:.2f} | {w[1]:.0f} s | {s[1]:.0f} s | "
            f"{w[1] / s[1]:.2f}x |"
        )
    return f"""# DQN on MinAtar: wheeler2 against SB3, like for like

`python -m experiments.minatar_vs_sb3 --games {" ".join(games)} --seeds \
{" ".join(map(str, seeds))} --steps {steps} --eval-episodes {eval_episodes} --device {device}` \
({date}, {cores} cores shared with other work, networks on {device}). Median over \
{len(seeds)} seed(s) of the final greedy return ({eval_episodes} episodes) and of the
wall-clock per run (wheeler2: the whole `wheeler2.run`, its start-up and closing evaluation
included; SB3: `learn` alone).

| game | wheeler2 return | SB3 return | wheeler2 wall | SB3 wall | wall ratio |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}
"""


if __name__ == "__main__":
    raise SystemExit(main())
