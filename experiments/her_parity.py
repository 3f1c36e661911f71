"""FetchReach-v4 DDPG + HER, like for like: wheeler2 arms against Stable-Baselines3, seed by seed.

    python -m experiments.her_parity --seeds 0 1 2 3 4 --arms sb3 w2 w2-per-step
    python -m experiments.her_parity --table            # the table of --jsonl only

Every arm runs the same hyperparameters (cfg/fetchreach_her.toml, as in
experiments/fetch_her_vs_sb3.py) and is judged at its first eval (20 deterministic episodes every
1,000 env steps) with success >= 0.9, within --max-steps. Arms run one after another,
interleaved seed by seed, so machine load drifts over all arms alike. Each finished run is
appended to ``--jsonl`` at once (a killed sweep keeps what it finished); the table
(``results/<jsonl stem without _runs>.md``) is rebuilt from that file. Notes on the results:
``results/notes/her_parity.md``.

SB3's runs stop at that eval. wheeler2's run to --max-steps: the engine stops a run only on an
eval *return* (``experiment.stop_at_threshold``), not on success, so the steps to 0.9 are read
from the eval curve (the same figure; only the run's cost is higher) and the seconds to it from
that eval's ``wall_s``.

Arms (``sb3*`` are Stable-Baselines3, the rest wheeler2):

* ``sb3``: SB3 DDPG + HerReplayBuffer, no normalization.
* ``sb3-norm``: the same under VecNormalize(norm_obs=True, norm_reward=False).
* ``w2``: wheeler2 as shipped, ``normalize_obs = false``: the policy sees
  [observation, desired_goal].
* ``w2-norm``: wheeler2 as shipped, ``normalize_obs = true``.
* ``w2-ag``, ``w2-norm-ag``: the same with ``[env] achieved_goal_in_obs = true``, i.e.
  [observation, achieved_goal, desired_goal], the information SB3's MultiInputPolicy sees.
* ``w2-per-step``, ``w2-norm-per-step``: ``w2`` whose learner takes at most one gradient step
  per env step, so the 50 updates an episode unlocks are spread over the next episode's steps,
  SB3's schedule (SB3 trains one step per env step on the episodes finished so far), instead of
  one burst at the episode's end. The learner is :class:`PerStepDDPG`
  (``algo = "experiments.her_parity:PerStepDDPG"``).
* ``w2-sb3-layout``: ``w2`` whose DDPG sees SB3's input in SB3's order,
  [achieved_goal, desired_goal, observation] (16 inputs): :class:`SB3LayoutDDPG`
  (``algo = "experiments.her_parity:SB3LayoutDDPG"``); the experiment that led to
  ``achieved_goal_in_obs``.
* ``w2:<override>;<override>``: ``w2`` with config overrides, e.g.
  ``w2:buffer.her.future_offset=1``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config
from wheeler2 import registry
from wheeler2.agent import LearnOut

THRESHOLD = 0.9
EVAL_EVERY = 1_000
EVAL_EPISODES = 20
SPEC = "experiments.her_parity"  # the module the registry imports the learners below from


# -- learners reached by spec string (``team.target.algo``), not by patching agents.ddpg --------

DDPG: Any = registry.resolve_algo("ddpg")


def sb3_input(x: Any) -> Any:
    """FetchReach's [observation (10), desired_goal (3)] as SB3's MultiInputPolicy sees it: the
    sorted dict keys [achieved_goal, desired_goal, observation] (16); the achieved goal is the
    gripper position, observation[0:3]."""
    cat = torch.cat if isinstance(x, torch.Tensor) else np.concatenate
    return cat([x[:, 0:3], x[:, 10:13], x[:, 0:10]], -1)


class SB3LayoutDDPG(DDPG):
    """DDPG whose networks take SB3's 16 inputs, rebuilt from wheeler2's 13 wherever the agent
    meets an observation (acting, observing, learning, head values)."""

    def __init__(self, space: Any, params: Any, device: str = "cpu", seed: int = 0) -> None:
        if space.obs_dim != 13:
            raise ValueError(f"the sb3 layout is FetchReach's 13 inputs, got {space.obs_dim}")
        super().__init__(dataclasses.replace(space, obs_dim=16), params, device, seed)

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> Any:
        return super().act(sb3_input(obs), explore, state)

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        return super().head_values(sb3_input(obs))

    def observe(self, step: Any) -> Any:
        return super().observe(dataclasses.replace(step, obs=sb3_input(step.obs)))

    def learn(self, batch: Any) -> Any:
        widened = dataclasses.replace(
            batch, obs=sb3_input(batch.obs), next_obs=sb3_input(batch.next_obs)
        )
        return super().learn(widened)


class PerStepDDPG(DDPG):
    """DDPG on SB3's update schedule: at most one gradient step per env step.

    The trainer hands the learner every update the replay's gate allows as soon as it allows it:
    50 at each FetchReach episode's end, when the episode is inserted. Here each of those calls
    only queues its batch, and :meth:`observe` (once per env step, one env copy) takes one
    queued step, so the 50 updates run over the next episode's 50 steps, as SB3's do. The
    batches are the ones the trainer drew at the episode's end; the replay does not change until
    the next episode's end, so they come from the same contents SB3's draws would. What differs
    from an engine-side schedule: each step runs one env step later, and updates still queued
    when the budget ends (up to one episode's) are not taken before the closing eval.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queued: collections.deque = collections.deque()
        self._last: dict[str, float] = {}

    def learn(self, batch: Any) -> Any:
        self._queued.append(batch)
        return LearnOut(dict(self._last))  # the figures of the latest step taken

    def observe(self, step: Any) -> Any:
        out = super().observe(step)
        if self._queued:
            self._last = super().learn(self._queued.popleft()).metrics
        return out


# -- the arms --------------------------------------------------------------------------------


def run_w2(
    seed: int, max_steps: int, overrides: list[str], per_step: bool, sb3_layout: bool = False
) -> dict[str, Any]:
    sets = [
        f"experiment.total_steps={max_steps}",
        f"experiment.eval_every={EVAL_EVERY}",
        f"experiment.eval_episodes={EVAL_EPISODES}",
        *overrides,
    ]
    if per_step or sb3_layout:
        learner = "PerStepDDPG" if per_step else "SB3LayoutDDPG"
        sets.append(f'team.target.algo="{SPEC}:{learner}"')
    run = run_config(CFG / "fetchreach_her.toml", sets, seed=seed, out=ROOT / "runs" / "her_parity")
    evals = run.summary["eval"]
    curve = [(e["env_steps"], e["success"] or 0.0) for e in evals]
    steps, seconds = stats.to_threshold(evals, THRESHOLD, key="success", strict=False)
    # The curve up to the threshold's eval, as an early-stopped run would have recorded it.
    cut = [p for p in curve if steps is None or p[0] <= steps]
    return {
        "steps": steps,
        "wall": run.summary["wall_s"] if steps is None else seconds,
        "curve": cut,
    }


def run_sb3(seed: int, max_steps: int, normalize: bool) -> dict[str, Any]:
    import gymnasium as gym
    import gymnasium_robotics
    from stable_baselines3 import DDPG, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    gym.register_envs(gymnasium_robotics)
    env: Any = DummyVecEnv([lambda: gym.make("FetchReach-v4")])
    if normalize:
        env = VecNormalize(env, norm_obs=True, norm_reward=False)
    eval_env = gym.make("FetchReach-v4")

    def evaluate(model: DDPG) -> float:
        hits = []
        for ep in range(EVAL_EPISODES):
            obs, _ = eval_env.reset(seed=seed + 99_991 + ep)
            done, info = False, {}
            while not done:
                x = env.normalize_obs(obs) if normalize else obs
                action, _ = model.predict(x, deterministic=True)
                obs, _, term, trunc, info = eval_env.step(action)
                done = term or trunc
            hits.append(float(info["is_success"]))
        return float(np.mean(hits))

    class Evaluator(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float]] = []
            self.hit: int | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                s = evaluate(self.model)
                self.curve.append((self.num_timesteps, s))
                if s >= THRESHOLD:
                    self.hit = self.num_timesteps
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
    t0 = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=cb)
    return {"steps": cb.hit, "wall": time.perf_counter() - t0, "curve": cb.curve}


def run_arm(arm: str, seed: int, max_steps: int) -> dict[str, Any]:
    if arm in ("sb3", "sb3-norm"):
        return run_sb3(seed, max_steps, normalize=arm == "sb3-norm")
    base, _, extra = arm.partition(":")
    overrides = [o for o in extra.split(";") if o]
    norm = base.startswith("w2-norm")
    overrides.insert(0, f"team.target.params.normalize_obs={'true' if norm else 'false'}")
    if base.endswith("-ag"):
        overrides.insert(1, "env.achieved_goal_in_obs=true")
        base = base.removesuffix("-ag")
    known = ("w2", "w2-norm", "w2-per-step", "w2-norm-per-step", "w2-sb3-layout")
    if base not in known:
        raise SystemExit(f"unknown arm {arm!r}")
    return run_w2(
        seed,
        max_steps,
        overrides,
        per_step=base.endswith("per-step"),
        sb3_layout=base == "w2-sb3-layout",
    )


def render(runs: list[dict[str, Any]], max_steps: int, eval_every: int = EVAL_EVERY) -> str:
    """Steps to 0.9 success per arm and seed over the stored runs (the latest run of an arm and
    seed counts), the median with unsolved runs counted one eval past the budget."""
    arms: dict[str, dict[int, dict[str, Any]]] = {}
    for r in runs:
        arms.setdefault(r["arm"], {})[r["seed"]] = r  # the latest run of an (arm, seed) wins
    seeds = sorted({s for by_seed in arms.values() for s in by_seed})
    head = "| arm | " + " | ".join(f"seed {s}" for s in seeds) + " | median | solved |"
    lines = [
        f"FetchReach-v4, DDPG + HER, env steps to the first eval with success >= {THRESHOLD} "
        f"({EVAL_EPISODES} episodes every {eval_every} steps); '—': not within "
        f"{max_steps:,} steps, counted as {max_steps + eval_every:,} in the median.",
        "",
        head,
        "|" + " --- |" * (len(seeds) + 3),
    ]
    for arm, by_seed in arms.items():
        cells, vals = [], []
        for s in seeds:
            r = by_seed.get(s)
            if r is None:
                cells.append("")
                continue
            cells.append("—" if r["steps"] is None else f"{r['steps']:,}")
            vals.append(steps_or_cap(r["steps"], max_steps, eval_every))
        med = statistics.median(vals) if vals else None
        solved = stats.solved(by_seed[s]["steps"] for s in seeds if s in by_seed)
        med_s = "—" if med is None else f"{med:,.0f}"
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {med_s} | {solved}/{len(by_seed)} |")
    return "\n".join(lines)


def steps_or_cap(steps: int | None, max_steps: int, eval_every: int = EVAL_EVERY) -> int:
    """Steps to the threshold; a run that never got there counts as one eval past the budget."""
    return max_steps + eval_every if steps is None else int(steps)


def write_reference(
    runs: list[dict[str, Any]], arm: str, max_steps: int, path: Path, test_seeds: int = 10
) -> None:
    """The like-for-like reference tests/test_her_parity.py checks wheeler2 against.

    Steps to the threshold are bimodal (a seed either learns in 4,000-8,000 steps or its actor
    saturates and it never does, on both sides), so the check is split in two: the median of
    the runs that solved, against SB3's, and how many of ``test_seeds`` runs solved. Both bounds
    are the seed noise of both sides' reference runs pooled (the parity claim is that they are
    one population): a one-sided 95% bootstrap bound on a median of ``test_seeds`` solved runs,
    and the 5% binomial quantile of the number solved."""
    from scipy.stats import binom

    by = {a: {r["seed"]: r for r in runs if r["arm"] == a} for a in ("sb3", arm)}
    seeds = sorted(set(by["sb3"]) & set(by[arm]))
    solved_steps = {a: [by[a][s]["steps"] for s in seeds if by[a][s]["steps"]] for a in by}
    pooled = np.array(solved_steps["sb3"] + solved_steps[arm], float)
    rng = np.random.default_rng(0)
    meds = np.median(rng.choice(pooled, (20_000, test_seeds)), axis=1)
    tolerance = max(EVAL_EVERY, float(np.percentile(meds, 95) - np.median(pooled)))
    p = len(pooled) / (2 * len(seeds))
    import stable_baselines3

    ref = {
        "env": "FetchReach-v4",
        "config": "cfg/fetchreach_her.toml with normalize_obs = false (both sides unnormalized)",
        "made_by": "python -m experiments.her_parity --write-reference " + arm,
        "arm": arm,
        "threshold": THRESHOLD,
        "eval_every": EVAL_EVERY,
        "eval_episodes": EVAL_EPISODES,
        "max_steps": max_steps,
        "sb3_version": stable_baselines3.__version__,
        "seeds": seeds,
        "sb3_steps": [by["sb3"][s]["steps"] for s in seeds],
        "wheeler2_steps": [by[arm][s]["steps"] for s in seeds],
        "sb3_solved_median": float(np.median(solved_steps["sb3"])),
        "wheeler2_solved_median": float(np.median(solved_steps[arm])),
        "solve_rate_pooled": p,
        "test_seeds": seeds[:test_seeds],
        # wheeler2's median over its solved test runs may exceed SB3's by this much.
        "tolerance": tolerance,
        # At least this many of the test runs must solve: 5% quantile of Binomial(n, p).
        "min_solved": int(binom.ppf(0.05, test_seeds, p)),
    }
    path.write_text(json.dumps(ref, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    global EVAL_EVERY
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--arms", nargs="+", default=["sb3", "w2"])
    ap.add_argument("--max-steps", type=int, default=10_000)
    ap.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="env steps between evals")
    ap.add_argument("--jsonl", default=str(RESULTS / "her_parity_runs.jsonl"))
    ap.add_argument("--table", action="store_true", help="only rebuild the table of --jsonl")
    ap.add_argument(
        "--write-reference",
        metavar="ARM",
        help="write experiments/results/her_parity_reference.json from sb3 and ARM's runs",
    )
    args = ap.parse_args(argv)
    EVAL_EVERY = args.eval_every
    path = Path(args.jsonl)
    if not args.table and not args.write_reference:
        torch.set_num_threads(1)
        for seed in args.seeds:
            for arm in args.arms:
                r = run_arm(arm, seed, args.max_steps)
                row = {"arm": arm, "seed": seed, "max_steps": args.max_steps, **r}
                print(json.dumps(row), flush=True)
                runs.append(path, row)
    stored = runs.load(path)
    params = {"max_steps": args.max_steps, "eval_every": args.eval_every}
    text = render(stored, **params)
    print(text)
    name = path.name.removesuffix(".jsonl").removesuffix("_runs")
    report.write(
        path.parent / f"{name}.md",
        text,
        render=render,
        params=params,
        runs_file=path,
        command=report.command_line(argv),
    )
    if args.write_reference:
        out = RESULTS / "her_parity_reference.json"
        write_reference(stored, args.write_reference, args.max_steps, out)
        print(out.read_text())


if __name__ == "__main__":
    main()
