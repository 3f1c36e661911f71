"""Atari Pong from pixels: env steps/s and learner updates/s, wheeler2 against Stable-Baselines3
at the same settings on this machine (issue 40, "Measure", the Atari row).

    python -m experiments.atari_vs_sb3 [--steps 2000] [--collect-steps 8000] [--learning-starts 500]

Both sides: ``ALE/Pong-v5`` (frameskip 1, no sticky actions) in gymnasium's
``AtariPreprocessing`` (4-frame skip, 84x84 grayscale, up to 30 no-ops), 4 frames stacked, one
env copy, DQN with the Nature network (SB3's ``CnnPolicy``: NatureCNN's 512 features then the
Q layer; wheeler2: ``encoder = "nature_cnn"``, ``hidden = [512]``, ``double = false`` as SB3's
target), batch 32, one update per 4
env steps, a replay of 10,000, one torch thread, on the CPU. wheeler2 runs ``cfg/atari_pong.toml``
through ``wheeler2.run`` (serial backend) with those values set; SB3 runs ``DQN.learn``.

Two settings per side: collecting only (``learning_starts`` past the budget: acting, env
steps and replay inserts) and learning (updates from ``--learning-starts`` on). Reported: env
steps/s and updates/s over each run's steady stretch (the table's note says which). Writes
experiments/results/atari_vs_sb3.md (through ``experiments.lib.report``: rebuild it with
``python -m experiments regen``) and the raw figures and setup beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.lib import RESULTS, ROOT, report


def wheeler2_arm(steps: int, learning_starts: int, out: Path, device: str) -> dict[str, float]:
    import wheeler2

    sets: dict[str, Any] = {
        "experiment__total_steps": steps,
        "experiment__eval_every": 10 * steps,
        "experiment__progress": False,
        "buffer__capacity": 10_000,
        "team__dqn__params__learning_starts": learning_starts,
        "team__dqn__params__double": False,  # SB3's DQN bootstraps from the target's max
        "team__dqn__params__device": device,
    }
    run = wheeler2.run(ROOT / "cfg" / "atari_pong.toml", out=str(out), **sets)
    # (wall_s, env_steps, updates) of each of the member's reports (every ~2 s).
    points: dict[float, dict[str, float]] = {}
    with open(run / "metrics.csv") as f:
        next(f)
        for line in f:
            wall, _, member, key, value = line.rstrip("\n").split(",")
            if member == "dqn" and key in ("env_steps", "updates"):
                points.setdefault(float(wall), {})[key] = float(value)
    trace = [(w, p["env_steps"], p.get("updates", 0.0)) for w, p in sorted(points.items())]
    # The member's last report comes after the run's closing evaluation: end at the one before.
    return steady([p for p in trace if p[1] < steps], learning_starts)


def steady(trace: list[tuple[float, float, float]], learning_starts: int) -> dict[str, float]:
    """Rates over the steady stretch of a (wall_s, env_steps, updates) trace: from the first
    point past start-up (and past the warm-up when it learns) to the last point."""
    first = 100 if learning_starts >= trace[-1][1] else learning_starts + 50
    start = next(p for p in trace if p[1] >= first)
    end = trace[-1]
    dt = end[0] - start[0]
    return {
        "env_steps_per_s": (end[1] - start[1]) / dt,
        "updates_per_s": (end[2] - start[2]) / dt,
        "seconds": dt,
        "env_steps": end[1] - start[1],
        "updates": end[2] - start[2],
    }


def sb3_arm(steps: int, learning_starts: int, device: str) -> dict[str, float]:
    import ale_py
    import gymnasium as gym
    import torch
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
    from stable_baselines3 import DQN

    gym.register_envs(ale_py)
    torch.set_num_threads(1)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False
    )
    env = FrameStackObservation(env, 4)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=10_000,
        learning_starts=learning_starts,
        batch_size=32,
        train_freq=4,
        gradient_steps=1,
        target_update_interval=1000,
        learning_rate=1e-4,
        device=device,
        seed=0,
    )
    from stable_baselines3.common.callbacks import BaseCallback

    trace: list[tuple[float, float, float]] = []

    class Trace(BaseCallback):
        def _on_step(self) -> bool:
            now = time.perf_counter()
            if not trace or now - trace[-1][0] >= 0.5:
                trace.append((now, float(self.num_timesteps), float(self.model._n_updates)))
            return True

    model.learn(total_timesteps=steps, callback=Trace())
    trace.append((time.perf_counter(), float(steps), float(model._n_updates)))
    env.close()
    return steady(trace, learning_starts)


def _gpu_name(device: str) -> str | None:
    import torch

    return torch.cuda.get_device_name() if device.startswith("cuda") else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--collect-steps", type=int, default=8000)
    ap.add_argument("--learning-starts", type=int, default=500)
    ap.add_argument("--device", default="cpu", help="both sides' torch device (cpu, cuda)")
    ap.add_argument("--out", type=Path, default=RESULTS / "atari_vs_sb3.md")
    args = ap.parse_args(argv)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = (
            ("collect", args.collect_steps, 10 * args.collect_steps),
            ("learn", args.steps, args.learning_starts),
        )
        for setting, steps, starts in settings:
            figures[setting] = {
                "wheeler2": wheeler2_arm(steps, starts, Path(tmp), args.device),
                "sb3": sb3_arm(steps, starts, args.device),
            }
            print(setting, figures[setting], flush=True)

    data = {
        "setup": {
            "steps": args.steps,
            "collect_steps": args.collect_steps,
            "learning_starts": args.learning_starts,
            "date": time.strftime("%Y-%m-%d"),
            "cores": os.cpu_count(),
            "load": os.getloadavg()[0],
            "python": platform.python_version(),
            "device": args.device,
            "gpu": _gpu_name(args.device),
        },
        **figures,
    }
    text = report.publish(args.out, data, render, argv)
    print(text)
    return 0


def _where(setup: dict[str, Any]) -> str:
    """Where the networks ran: the CPU, or the GPU by name (``--device cuda``)."""
    device = setup.get("device", "cpu")
    return "CPU" if device == "cpu" else f"networks on {setup.get('gpu') or device}"


def render(data: dict[str, Any], **_: object) -> str:
    """The table from the stored figures (``{"setup": {...}, "collect": {side: rates},
    "learn": {side: rates}}``)."""
    setup = data["setup"]

    def row(setting: str, side: str) -> str:
        f = data[setting][side]
        ups = f", {f['updates_per_s']:.1f} updates/s" if setting == "learn" else ""
        return f"{f['env_steps_per_s']:,.0f} env steps/s{ups}"

    def ratio(setting: str, key: str) -> float:
        return float(data[setting]["wheeler2"][key] / data[setting]["sb3"][key])

    return f"""# Atari Pong from pixels: wheeler2 against SB3 at the same settings

`python -m experiments.atari_vs_sb3 --steps {setup["steps"]} --collect-steps \
{setup["collect_steps"]} --learning-starts {setup["learning_starts"]}\
{"" if setup.get("device", "cpu") == "cpu" else " --device " + setup["device"]}` \
({setup["date"]}, {setup["cores"]} cores shared with other work, load \
{setup["load"]:.1f}, Python {setup["python"]}, {_where(setup)}, one torch thread).
ALE/Pong-v5 + AtariPreprocessing, 4 frames stacked, DQN with the Nature network, batch 32, one
update per 4 env steps. One run each: a throughput check, not a learning comparison.

| setting | wheeler2 | SB3 | ratio |
| --- | --- | --- | --- |
| collecting only ({setup["collect_steps"]:,} steps) | {row("collect", "wheeler2")} | \
{row("collect", "sb3")} | {ratio("collect", "env_steps_per_s"):.2f}x env steps/s |
| learning from step {setup["learning_starts"]:,} | {row("learn", "wheeler2")} | \
{row("learn", "sb3")} | {ratio("learn", "updates_per_s"):.2f}x updates/s |

Rates over each run's steady stretch: from the first point past start-up (collecting: 100 env
steps; learning: 50 steps past the warm-up) to the last point before the end (wheeler2: its
member's reports in metrics.csv, every ~2 s, the last one before its closing evaluation; SB3:
a callback's clock every 0.5 s), so start-up, imports and evaluation are left out. Both draw
the actions of the epsilon = 1 start without their network; wheeler2's DQN runs with
`double = false`, SB3's target (max over the target network).
"""


if __name__ == "__main__":
    raise SystemExit(main())
