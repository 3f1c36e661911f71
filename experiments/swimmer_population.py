"""Issue 37's Swimmer comparison: a TD3 learner with an evolutionary population against TD3
alone (at its default gamma and at the zoo's tuned one) and against the population alone.

    python -m experiments.swimmer_population --seeds 0 1 2 3 4 --jobs 2
    python -m experiments.swimmer_population --arms td3 erl --seeds 0 --steps 20000 --out /tmp/s.md
    python -m experiments.swimmer_population --table          # the files again from the runs

Every arm runs Swimmer-v5 for ``--steps`` env steps (500k by default: all members together),
evaluated as its shipped file says (5 deterministic episodes every 10k steps):

* ``td3``: the learner of ``cfg/swimmer_erl.toml`` alone (TD3, 400-300, batch 100, gamma 0.99,
  10k warm-up steps, one update per env step), serial;
* ``td3-g0.9999``: the same at gamma 0.9999, rl-baselines3-zoo's tuned TD3 for Swimmer: the best
  single learner the issue names;
* ``cem``: ``cfg/swimmer_cem.toml``, the population alone (CEM, 10 actors, 5 elites);
* ``erl``: ``cfg/swimmer_erl.toml``, TD3 + the population, the learner's actor injected (ERL);
* ``cemrl``: ``cfg/swimmer_cemrl.toml``, TD3 + the population, half of each generation stepped on
  the learner's critic (CEM-RL).
* ``erl-g0.9999``: ``cfg/swimmer_erl.toml`` with its learner at the best solo's gamma 0.9999,
  i.e. the population added to the best single learner. Added to the default arms on
  2026-11-29, before any team run, when seed 0 showed how far apart the two gammas are
  (``td3`` ended at 47.4; ``td3-g0.9999`` evaluated 343 by 160k steps): a team can only beat the
  best solo with that solo's discount, while ``erl`` asks whether a population rescues the
  default one. Both team arms get both verdicts.
* ``erl-g0.9999-s0.5``: ``erl-g0.9999`` with the learner's ``step_share = 0.5``. Added on
  2026-12-01, after the five seeds of ``erl-g0.9999`` had run: beside the population that
  team's learner played about 8,000 of the 500,000 steps (1.6%) and left the plateau on 1
  seed of 5, where the same learner alone did on 4. With half the run its own, it plays
  250k steps, past the 90-150k at which the solo crossed 300 on the four seeds it did. The
  share was fixed before any run of this arm, from the solo's curves, not tuned on it.

What an arm's figure is, fixed before any run: for ``td3`` and ``td3-g0.9999`` the learner's
eval, for ``cem`` the distribution's mean, and for the teams their population's eval (the team
files set ``evaluate = true`` on it): ERL's champion (``eval_actor = "champion"``, the last
generation's best by fitness, the injected RL actor included) and CEM-RL's mean, what each
paper reports (their RL actor is the population's helper); the team learner's own eval is
shown beside it. The final return is
the last eval, at the budget. Targets (issue 37): the team's median final >= 2x ``td3``'s and
>= ``td3-g0.9999``'s.

Runs go ``--jobs`` at a time, interleaved seed by seed (the arms' order rotating), each in a
process of its own (the teams on the local backend, one process per member). Each record is
appended to ``results/swimmer_population_runs.jsonl`` as its run ends; a sweep started again
skips the (arm, seed) runs stored at the same steps, and a run that Ctrl-C, SIGTERM or a lost
machine stopped goes on from its last checkpoint (``runs/swimmer_population/``; its replay is
checkpointed, every 50k steps and on Ctrl-C), so a sweep longer than one sitting adds up.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, arms, report, runs, stats

FILES = {
    "td3": "swimmer_erl.toml",
    "td3-g0.9999": "swimmer_erl.toml",
    "cem": "swimmer_cem.toml",
    "erl": "swimmer_erl.toml",
    "cemrl": "swimmer_cemrl.toml",
    "erl-g0.9999": "swimmer_erl.toml",
    "erl-g0.9999-s0.5": "swimmer_erl.toml",
}
SOLO = {"td3", "td3-g0.9999"}  # the file's learner alone
SETS = {
    "td3-g0.9999": ("team.target.params.gamma=0.9999",),
    "erl-g0.9999": ("team.target.params.gamma=0.9999",),
    "erl-g0.9999-s0.5": ("team.target.params.gamma=0.9999", "team.target.step_share=0.5"),
}
POPULATION = "population"  # the cem member of the team files, evaluated as the team's figure
TEAMS = ("erl", "cemrl", "erl-g0.9999", "erl-g0.9999-s0.5")
DEFAULT_ARMS = ["td3", "td3-g0.9999", "cem", "erl-g0.9999", "erl", "erl-g0.9999-s0.5"]
WORK = ROOT / "runs" / "swimmer_population"  # runs under way, resumed across sessions


def arm_config(arm: str) -> dict[str, Any]:
    """The arm's experiment as parsed TOML: its file, or the file's learner alone (serial)."""
    raw = tomllib.loads((CFG / FILES[arm]).read_text())
    if arm in SOLO:
        raw["team"] = [m for m in raw["team"] if m["role"] == "learner"]
        raw["experiment"]["backend"] = "serial"
        raw["experiment"]["name"] = f"swimmer-{arm}"
    return raw


def work_dir(arm: str, seed: int, steps: int) -> Path:
    """Where a run keeps its checkpoints until its record is stored."""
    return WORK / f"{arm}-seed{seed}-{steps}"


def forget(record: dict[str, Any]) -> None:
    """Remove a stored run's checkpoints."""
    shutil.rmtree(work_dir(record["arm"], record["seed"], record["steps"]), ignore_errors=True)


def one_run(arm: str, seed: int, steps: int) -> dict[str, Any]:
    """One arm on one seed, in this (spawned) process; its record."""
    from wheeler2.process import set_compute_threads

    set_compute_threads()
    sets = (f"experiment.total_steps={steps}", *SETS.get(arm, ()))
    # A run takes 80-90 minutes of a core: one stopped by the end of a session goes on from
    # its checkpoint in the next (runs/swimmer_population/, not kept in git).
    work = work_dir(arm, seed, steps)
    run = arms.run_resumable(arm_config(arm), sets, seed, work, checkpoint_every=50_000)
    s = run.summary
    learner = [[int(e["env_steps"]), float(e["return"])] for e in s["eval"]]
    record: dict[str, Any] = {
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "env_steps": s["env_steps"],
        "wall_s": s["wall_s"],  # the run's own, summed over the sessions it ran in
        "interrupted": s["interrupted"],
        "learner_curve": learner,
    }
    population = (s.get("member_evals") or {}).get(POPULATION)
    if arm in TEAMS:
        if population is None:
            raise RuntimeError(f"{arm}: the team file's {POPULATION!r} member was not evaluated")
        curve = [[int(e["env_steps"]), float(e["return"])] for e in population["eval"]]
    else:
        curve = learner
    record["curve"] = curve
    record["final"] = curve[-1][1]
    record["learner_final"] = learner[-1][1]
    return record  # its checkpoints stay until the record is stored (forget)


def describe(r: dict[str, Any]) -> str:
    extra = f" (learner {r['learner_final']:.1f})" if r["arm"] in TEAMS else ""
    return f"{r['arm']} seed {r['seed']}: final {r['final']:.1f}{extra}, {r['wall_s']:.0f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(FILES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=500_000)
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side")
    ap.add_argument("--out", type=Path, default=RESULTS / "swimmer_population.md")
    ap.add_argument("--table", action="store_true", help="only rebuild the files")
    args = ap.parse_args(argv)
    log = args.out.with_name(args.out.stem + "_runs.jsonl")
    if not args.table:
        stored = {(r["arm"], r["seed"]) for r in runs.load(log) if r["steps"] == args.steps}
        order = arms.interleave(args.seeds, args.arms, rotate=True)
        todo = [(arm, seed) for seed, arm in order if (arm, seed) not in stored]
        print(f"{len(todo)} runs to go ({len(stored)} stored)", flush=True)
        arms.run_parallel(
            todo, args.jobs, one_run, log, describe, after_store=forget, steps=args.steps
        )
    params = {
        "arms": args.arms,
        "seeds": args.seeds,
        "steps": args.steps,
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
    }
    print(report.write_from_runs(args.out, log, render, plot, params, argv))
    return 0


# -- the table and the plot -----------------------------------------------------------------------


def chosen(
    records: list[dict[str, Any]], arm: str, seeds: list[int], steps: int
) -> dict[int, dict[str, Any]]:
    mine = [r for r in records if r["arm"] == arm and r["seed"] in seeds and r["steps"] == steps]
    return runs.latest(mine, key=lambda r: r["seed"])  # type: ignore[return-value]


def _ratio(a: dict[int, dict], b: dict[int, dict]) -> str:
    """The paired ratio of medians over the seeds both arms ran, with its interval."""
    both = sorted(set(a) & set(b))
    if not both:
        return "—"
    den = [b[k]["final"] for k in both]
    ci = stats.ratio_ci([a[k]["final"] for k in both], den)
    if math.isnan(ci.point):
        return "— (the other median is not above 0)"
    # A resample whose denominator median is not above 0 has no ratio and is left out: the
    # interval then speaks only for the rest.
    mark = "†" if min(den) <= 0 else ""
    return f"{ci.point:.2f}x [{stats.fmt(ci.lo, '.2f')}, {stats.fmt(ci.hi, '.2f')}]{mark}"


def _paired_over(a: dict[int, dict], b: dict[int, dict]) -> str:
    """How many seeds a ratio cell is paired over, where that is fewer than ``a``'s own (the
    row's median is over all of ``a``'s)."""
    both = len(set(a) & set(b))
    return f", {both} seeds" if 0 < both < len(a) else ""


def _partial(ran: dict[str, int], seeds: int) -> str:
    """The warning above a table some arms of which have not run every seed ('' if none)."""
    short = [f"{a} {n}" for a, n in ran.items() if n < seeds]
    if not short:
        return ""
    few = min((n for n in ran.values() if n), default=0) <= 2
    two = "; with two seeds a median's interval is their range and the IQM is the median"
    return (
        f"\n**Partial: not every seed has run** (seeds run: {', '.join(short)}, of {seeds}). "
        f"Every figure may move{two if few else ''}.\n"
    )


def _wall(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


HEAD = (
    "arm",
    "seeds",
    "final: median [95% CI]",
    "IQM",
    "/ td3 [95% CI]",
    "/ td3-g0.9999 [95% CI]",
    "team learner's final",
    "wall per run",
)


SEED_HEAD = ("arm", "seed", "final", "team learner's final", "best eval", "wall")


def render(
    records: list[dict[str, Any]],
    *,
    arms: list[str],
    seeds: list[int],
    steps: int,
    date: str,
    cores: int,
) -> str:
    by_arm = {arm: chosen(records, arm, seeds, steps) for arm in arms}
    # Each (arm, solo) ratio is bootstrapped once, for its table cell and its target's verdict.
    ratios = {
        (arm, solo): _ratio(by_arm[arm], by_arm.get(solo, {}))
        for arm in arms
        for solo in SOLO
        if by_arm[arm] and arm != solo
    }
    rows, per_seed = [], []
    for arm in arms:
        mine = by_arm[arm]
        if not mine:
            continue
        finals = [r["final"] for r in mine.values()]
        ci = stats.seed_intervals(finals)
        learner = (
            stats.fmt(stats.median(r["learner_final"] for r in mine.values()), ".1f")
            if arm in TEAMS
            else ""
        )
        rows.append(
            (
                arm,
                len(mine),
                f"{ci['median'].point:.1f} [{ci['median'].lo:.1f}, {ci['median'].hi:.1f}]",
                f"{ci['iqm'].point:.1f}",
                *(
                    ratios[(arm, solo)] + _paired_over(mine, by_arm.get(solo, {}))
                    if arm != solo
                    else "1"
                    for solo in ("td3", "td3-g0.9999")
                ),
                learner,
                _wall(stats.median(r["wall_s"] for r in mine.values())),
            )
        )
        for k in sorted(mine):
            r = mine[k]
            per_seed.append(
                (
                    arm,
                    k,
                    f"{r['final']:.1f}",
                    f"{r['learner_final']:.1f}" if arm in TEAMS else "",
                    f"{max(x for _, x in r['curve']):.1f}",
                    _wall(r["wall_s"]),
                )
            )
    partial = _partial({a: len(by_arm[a]) for a in arms}, len(seeds))
    verdicts = []
    for team in (a for a in arms if a in TEAMS and by_arm[a]):
        for solo, factor in (("td3", 2.0), ("td3-g0.9999", 1.0)):
            both = sorted(set(by_arm[team]) & set(by_arm.get(solo, {})))
            if not both:
                continue
            t = stats.median(by_arm[team][k]["final"] for k in both)
            s = stats.median(by_arm[solo][k]["final"] for k in both)
            so_far = ", so far" if len(both) < len(seeds) else ""
            n = f"{len(both)} of {len(seeds)} seeds{so_far}"
            head = f"- {team} >= {factor:g}x {solo} (median final, {n}): {t:.1f}"
            if factor != 1.0 and s <= 0:
                verdicts.append(
                    f"{head}, {solo} {s:.1f}: undefined ({solo}'s median is not above 0)"
                )
                continue
            met = t >= factor * s
            # The verdict is the declared point rule; the interval says how firmly it holds.
            verdicts.append(
                f"{head} against {factor:g} x {s:.1f}: **{'met' if met else 'not met'}** "
                f"(ratio {ratios[(team, solo)]})"
            )
    return f"""# Swimmer-v5: TD3 with a population against TD3 and the population alone (issue 37)

`python -m experiments.swimmer_population --arms {" ".join(arms)} --seeds \\
{" ".join(map(str, seeds))} --steps {steps}` ({date}, {cores} cores). {steps:,} env steps per
run, all members together; evals as the files say (5 deterministic episodes every 10k steps);
the final return is the last eval. An arm's figure: the learner's eval for `td3` and
`td3-g0.9999`, the distribution's mean for `cem`, the population's for the teams (ERL's
champion, CEM-RL's mean, as the papers report; the team learner's own final beside it).
Medians and IQMs over seeds with rliable's 95% bootstrap intervals; ratios are ratios of
medians with a paired bootstrap interval over the seeds both arms ran (how many, where that is
fewer than the row's; "—" where the other arm's median is not above 0; † where some of its
seeds are not above 0, so that the resamples without a ratio are left out of the interval).
Wall: the run's own clock (a resumed run adds its sessions, not the work it redid) beside the
sweep's other job on {cores} cores: a cost, not a speed comparison.
{partial}
{chr(10).join(report.table(HEAD, rows))}

Targets:

{chr(10).join(verdicts) or "- no team arm with a solo arm on the same seeds yet"}

Per seed:

{chr(10).join(report.table(SEED_HEAD, per_seed))}
"""


def plot(records: list[dict[str, Any]], path: Path, **params: Any) -> None:
    """Each arm's eval return against env steps: seeds thin, the median over seeds thick."""
    arms_, seeds, steps = params["arms"], params["seeds"], params["steps"]
    curves = {
        arm: [r["curve"] for r in chosen(records, arm, seeds, steps).values()] for arm in arms_
    }
    if not any(curves.values()):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, arm in enumerate(arms_):
        colour = f"C{i}"
        cs = [c for c in curves[arm] if c]
        for c in cs:
            ax.plot(*zip(*c), color=colour, alpha=0.25, linewidth=1)
        if cs:
            n = min(len(c) for c in cs)
            xs = [x for x, _ in cs[0][:n]]
            med = [stats.median(c[j][1] for c in cs) for j in range(n)]
            ax.plot(xs, med, color=colour, linewidth=2.5, label=f"{arm}: median, {len(cs)} seeds")
    ax.set_title("Swimmer-v5: each arm's figure (teams: their population's)")
    ax.set_xlabel("env steps, all members")
    ax.set_ylabel("eval return (5 deterministic episodes)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
