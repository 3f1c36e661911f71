"""Recurrent PPO on CartPoleNoVel-v1: wheeler2 (``core = "lstm"``) vs sb3-contrib RecurrentPPO.

    python -m experiments.recurrent_ppo_vs_sb3 --seeds 0 1 2 3 4
    python -m experiments.recurrent_ppo_vs_sb3 --seeds 0 --sides wheeler2 ff   # one side only

Both sides use rl-zoo's ``ppo_lstm.yml`` values for CartPoleNoVel-v1 (8 envs, n_steps 32,
batch 256, 20 epochs, gamma 0.98, GAE 0.8, lr 1e-3 and clip 0.2 both decaying linearly, no
entropy bonus, LSTM of 64 for actor and critic, ReLU layers of 64, no orthogonal init,
observations normalized by running mean/std): wheeler2 from ``cfg/cartpole_novel_rppo.toml``,
sb3-contrib as ``RecurrentPPO("MlpLstmPolicy", VecNormalize(norm_obs=True, norm_reward=False))``.
The networks differ in one place: sb3's LSTM reads the observation and its [64] layer comes
after it; wheeler2's [64] trunk comes first and its LSTM feeds the last layer (so the trunk can
sync from a feedforward learner).

The eval protocol is the same on both sides: every 2,048 env steps, 10 deterministic episodes,
one per copy of a 10-copy eval env run side by side, with the recurrent state carried per copy
and the training statistics of the observation normalizer; the wall-clock counts from the
start of training, evals included, to the first eval with mean >= 475; each run stops there
(else at 100k env steps). Seeds are interleaved (seed 0 of each side, then seed 1, ...) so a
busy spell of the shared machine hits both sides alike; torch runs one thread on both.

``ff`` is wheeler2's PPO with the same values and no core (``core = "none"``), the
memoryless baseline, expected to fail. ``core_first`` is wheeler2 with ``trunk_reads = "core"``:
the LSTM reads the observation and the [64] layers come after it, sb3-contrib's order.
Writes experiments/results/recurrent_ppo_cartpole_novel.md and ``..._runs.jsonl`` (one line
per run, appended as runs finish; the table is rebuilt from every run in it). Notes on the
results: ``results/notes/recurrent_ppo_cartpole_novel*.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.lib import CFG as CFG_DIR
from experiments.lib import RESULTS, report, runs, stats
from experiments.lib.arms import run_config, sweep
from experiments.lib.setups import recurrent_ppo_zoo_kwargs

ENV_ID = "CartPoleNoVel-v1"
CFG = CFG_DIR / "cartpole_novel_rppo.toml"
THRESHOLD = 475.0
BUDGET = 100_000
EVAL_EVERY = 2_048
EVAL_EPISODES = 10
NAME = "recurrent_ppo_cartpole_novel"


@dataclass
class Outcome:
    side: str
    seed: int
    steps: int | None  # env steps at the first eval >= THRESHOLD (None: never)
    wall_s: float | None  # seconds from the start to that eval
    last_eval: float
    total_wall_s: float


zoo_kwargs = recurrent_ppo_zoo_kwargs  # rl-zoo's ppo_lstm.yml values (experiments.lib.setups)


def run_sb3(seed: int) -> Outcome:
    import gymnasium as gym
    import wheeler2.envs.novel  # noqa: F401 - registers CartPoleNoVel-v1
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    train = VecNormalize(
        make_vec_env(ENV_ID, n_envs=8, seed=seed), norm_obs=True, norm_reward=False
    )
    copies = [lambda: gym.make(ENV_ID) for _ in range(EVAL_EPISODES)]
    evals = VecNormalize(DummyVecEnv(copies), norm_obs=True, norm_reward=False, training=False)
    evals.seed(seed + 99_991)

    class Evaluator(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = time.perf_counter()
            self.next_eval = EVAL_EVERY
            self.hit: tuple[int, float] | None = None
            self.last = math.nan

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += EVAL_EVERY
            evals.obs_rms = train.obs_rms.copy()  # the training statistics, frozen for the eval
            mean, _ = evaluate_policy(
                self.model, evals, n_eval_episodes=EVAL_EPISODES, deterministic=True
            )
            self.last = float(mean)
            if mean >= THRESHOLD:
                self.hit = (self.num_timesteps, time.perf_counter() - self.t0)
                return False
            return True

    model = RecurrentPPO("MlpLstmPolicy", train, **zoo_kwargs(), seed=seed, device="cpu")
    cb = Evaluator()
    model.learn(total_timesteps=BUDGET, callback=cb)
    hit = cb.hit
    wall = time.perf_counter() - cb.t0
    return Outcome("sb3", seed, hit and hit[0], hit and hit[1], cb.last, wall)


def run_wheeler2(seed: int, side: str, out: Path) -> Outcome:
    overrides = [
        "experiment.stop_at_threshold=true",
        f"experiment.total_steps={BUDGET}",
        f"experiment.eval_every={EVAL_EVERY}",
        f"experiment.eval_episodes={EVAL_EPISODES}",
    ]
    if side == "ff":
        overrides.append('team.0.params.core="none"')
    # Both layouts named explicitly, whatever the shipped file chooses.
    if side in ("wheeler2", "core_first"):
        reads = "core" if side == "core_first" else "obs"
        overrides.append(f'team.0.params.trunk_reads="{reads}"')
    run = run_config(CFG, overrides, seed=seed, out=out)
    evals = run.summary["eval"]
    steps, seconds = stats.to_threshold(evals, THRESHOLD, strict=False)
    last = evals[-1]["return"] if evals else math.nan
    return Outcome(side, seed, steps, seconds, last, run.call_s)


def ratio_of_medians(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """median(ours) / median(theirs) with a 95% percentile bootstrap interval, resampling seeds
    in pairs (each drawn seed brings both sides' runs); a resample where at least half of one
    side never reached the threshold counts that side as the slower one (ratio 0 or inf):
    dropping those resamples narrowed the interval to the seeds that solved."""
    return tuple(stats.ratio_ci(ours, theirs, unsolved="rank"))


def _cell(x: float | None, spec: str) -> str:
    return "never" if x is None else format(x, spec)


LABELS = {
    "wheeler2": 'wheeler2, trunk then LSTM (trunk_reads = "obs")',
    "core_first": 'wheeler2, LSTM then trunk (trunk_reads = "core", sb3\'s order)',
    "sb3": "sb3-contrib RecurrentPPO",
    "ff": 'wheeler2 PPO without a core (core = "none")',
}


def paired(by: dict, side: str, seeds: list[int]) -> list[str]:
    """The ratio-of-medians table of ``side`` against sb3 over the seeds both ran."""
    pairs = [(by[(side, s)], by[("sb3", s)]) for s in seeds]
    lines = [
        "",
        f"**{LABELS[side]} vs sb3-contrib**, paired seeds {', '.join(map(str, seeds))}:",
        "",
        "| figure | wheeler2 | sb3 | ratio of medians [95% bootstrap CI] |",
        "| --- | --- | --- | --- |",
    ]
    for attr, label, spec in (
        ("steps", "env steps to 475", ",.0f"),
        ("wall_s", "seconds to 475", ".1f"),
    ):
        ours = [stats.never(getattr(w, attr)) for w, _ in pairs]
        theirs = [stats.never(getattr(b, attr)) for _, b in pairs]
        point, lo, hi = ratio_of_medians(ours, theirs)
        mo, mt = statistics.median(ours), statistics.median(theirs)
        lines.append(
            f"| median {label} | {mo:{spec}} | {mt:{spec}} | {point:.2f} [{lo:.2f}, {hi:.2f}] |"
        )
    solved_w = sum(w.steps is not None for w, _ in pairs)
    solved_b = sum(b.steps is not None for _, b in pairs)
    lines += [
        "",
        f"Seeds solved within {BUDGET:,} env steps: wheeler2 {solved_w}/{len(pairs)}, "
        f"sb3-contrib {solved_b}/{len(pairs)}. A run that never reached {THRESHOLD:g} counts "
        "as infinitely slow in the medians (inf in the table; nan ratio where a median is inf).",
    ]
    return lines


def render(stored: list[dict[str, Any]]) -> str:
    """The tables over every stored run (the latest run of a side and seed counts)."""
    return table([Outcome(**r) for r in stored])


def table(runs: list[Outcome]) -> str:
    by = {(r.side, r.seed): r for r in runs}
    sides = [side for side in LABELS if any(r.side == side for r in runs)]
    lines = [
        f"# Recurrent PPO on {ENV_ID}: wheeler2 vs sb3-contrib RecurrentPPO",
        "",
        f"Eval mean of {EVAL_EPISODES} deterministic episodes every {EVAL_EVERY:,} env steps; "
        f"threshold {THRESHOLD:g}; budget {BUDGET:,} env steps; a run stops at its first eval "
        f">= {THRESHOLD:g}. Wall-clock from the start of training to that eval, evals included. "
        "rl-zoo ppo_lstm.yml values on both sides (see the script's docstring). Torch threads 1. "
        "Machine: 2 shared CPU cores, other jobs running beside (both sides alike, interleaved).",
        "",
        "Per run: env steps to the first eval >= 475 / seconds to it / last eval (never: not "
        f"within {BUDGET:,} steps).",
        "",
        "| seed | " + " | ".join(LABELS[side] for side in sides) + " |",
        "| --- | " + " | ".join("---" for _ in sides) + " |",
    ]
    for seed in sorted({r.seed for r in runs}):
        cells = []
        for side in sides:
            r = by.get((side, seed))
            if r is None:
                cells.append("—")
            else:
                reached = "never" if r.steps is None else f"{r.steps:,} / {r.wall_s:.0f} s"
                cells.append(f"{reached} / {r.last_eval:.1f}")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    for side in ("wheeler2", "core_first"):
        seeds = sorted({s for (sd, s) in by if sd == side} & {s for (sd, s) in by if sd == "sb3"})
        if seeds:
            lines += paired(by, side, seeds)
    ff = [r for r in runs if r.side == "ff"]
    if ff:
        solved = sum(r.steps is not None for r in ff)
        lines += [
            "",
            f'Feedforward PPO (same values, `core = "none"`): solved {solved}/{len(ff)}, last '
            f"evals {', '.join(f'{r.last_eval:.1f}' for r in ff)}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--sides",
        nargs="+",
        default=["wheeler2", "sb3", "ff"],
        choices=["wheeler2", "sb3", "ff", "core_first"],
    )
    ap.add_argument("--name", default=NAME)
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the jsonl")
    args = ap.parse_args(argv)

    jsonl = RESULTS / f"{args.name}_runs.jsonl"
    if not args.table:
        import torch

        torch.set_num_threads(1)
        with tempfile.TemporaryDirectory() as tmp:

            def run(side: str, seed: int) -> dict[str, Any]:
                outcome = run_sb3(seed) if side == "sb3" else run_wheeler2(seed, side, Path(tmp))
                return asdict(outcome)

            sweep(args.seeds, args.sides, run, jsonl)
    text = render(runs.load(jsonl))
    path = report.write(
        RESULTS / f"{args.name}.md",
        text,
        render=render,
        runs_file=jsonl,
        command=report.command_line(argv),
    )
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
