"""Issue 37's one team for many tasks: one team file, only ``env.id`` and the threshold changed,
against each single learner at its defaults, over four tasks at one budget.

    python -m experiments.many_tasks --seeds 0 1 2 3 4 --jobs 2
    python -m experiments.many_tasks --tasks pendulum mountaincar --seeds 0 1 2 3 4
    python -m experiments.many_tasks --steps 4000 --seeds 0 --out /tmp/m.md    # a smoke run
    python -m experiments.many_tasks --table               # the files again from the runs

Tasks, with the threshold each is judged by (declared before any run): Pendulum-v1 (-200),
MountainCarContinuous-v0 (90, gymnasium's own), Swimmer-v5 (100: beyond the 30-50 where a
critic discounted at 0.99 leaves TD3) and Hopper-v5 (1,000, ``cfg/hopper_td3.toml``'s at this
budget). Every arm runs every task for ``--steps`` env steps (100k by default; all members
together), evaluated alike (10 deterministic episodes every 10k steps, the team file's).

Arms:

* ``team``: ``cfg/many_tasks_team.toml`` (a TD3 learner, three pink-noise actors and an ERL
  population) with ``env.id`` and ``experiment.eval_threshold`` set, nothing else. Its figure is
  the population's champion (``evaluate = true``, ``eval_actor = "champion"``: the last
  generation's best by episode return, the injected TD3 actor included), ERL's reported policy;
  the learner's own eval is kept beside it.
* ``ddpg``, ``td3``, ``sac``: that algorithm alone, every parameter and the ``[buffer]`` at
  wheeler2's defaults (what a user's first file gets), serial; its figure is its eval.

A run's final return is its figure's last eval (at the budget). An arm *solves* a task when
its median final over seeds is above the threshold (``>``, as a run's own ``eval_threshold`` and
``wheeler2 report`` judge); the seeds whose final is there are counted beside it. Targets
(issue 37): the team solves every task; no single learner at defaults solves every task.

Runs go ``--jobs`` at a time, seed by seed, the arms' order rotating, each in a
process of its own (the team on the local backend, a process per member). Each record is
appended to ``results/many_tasks_runs.jsonl`` as its run ends; a sweep started again skips
the (task, arm, seed) runs stored at the same steps, and a run cut short (Ctrl-C, the end of
a session) goes on from its checkpoint in ``runs/many_tasks/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

from experiments.lib import CFG, RESULTS, ROOT, arms, report, runs, stats

TASKS: dict[str, tuple[str, float]] = {
    "pendulum": ("Pendulum-v1", -200.0),
    "mountaincar": ("MountainCarContinuous-v0", 90.0),
    "swimmer": ("Swimmer-v5", 100.0),
    "hopper": ("Hopper-v5", 1000.0),
}
TEAM_FILE = "many_tasks_team.toml"
POPULATION = "population"  # the team file's cem member, evaluated as the team's figure
SOLOS = ("ddpg", "td3", "sac")
WORK = ROOT / "runs" / "many_tasks"  # runs under way, resumed across sessions
ARMS = ("team", *SOLOS)
SEEDS = (0, 1, 2, 3, 4)  # the seeds every task and arm runs (issue 37: 5 at least)


def arm_config(arm: str, task: str) -> dict[str, Any]:
    """The arm's experiment on the task as parsed TOML. The team: its file with the env and the
    threshold of the task. A solo: the team file's budget and eval protocol around one learner
    of that algorithm with nothing else set."""
    env_id, threshold = TASKS[task]
    raw = tomllib.loads((CFG / TEAM_FILE).read_text())
    raw["env"]["id"] = env_id
    raw["experiment"]["eval_threshold"] = threshold
    if arm == "team":
        return raw
    exp = raw["experiment"]
    keep = ("seed", "total_steps", "eval_every", "eval_episodes", "eval_threshold")
    return {
        "experiment": {
            "name": f"many-tasks-{arm}",
            **{k: exp[k] for k in keep},
            "backend": "serial",
        },
        "env": {"id": env_id, "num_envs": raw["env"]["num_envs"]},
        "team": [{"name": "target", "algo": arm, "role": "learner"}],
    }


def _curve(evals: list[dict[str, Any]]) -> list[list[float]]:
    return [[int(e["env_steps"]), float(e["return"])] for e in evals]


def work_dir(task: str, arm: str, seed: int, steps: int) -> Path:
    """Where a run keeps its checkpoints until its record is stored."""
    return WORK / f"{task}-{arm}-seed{seed}-{steps}"


def forget(record: dict[str, Any]) -> None:
    """Remove a stored run's checkpoints."""
    work = work_dir(record["task"], record["arm"], record["seed"], record["steps"])
    shutil.rmtree(work, ignore_errors=True)


def one_run(task: str, arm: str, seed: int, steps: int) -> dict[str, Any]:
    """One arm on one task and seed, in this (spawned) process; its record."""
    from wheeler2.process import set_compute_threads

    set_compute_threads()
    # A team run takes 13-15 minutes of a core here: one stopped by the end of a session goes on
    # from its checkpoint in the next (runs/many_tasks/, not kept in git).
    sets = (f"experiment.total_steps={steps}",)
    work = work_dir(task, arm, seed, steps)
    run = arms.run_resumable(arm_config(arm, task), sets, seed, work, checkpoint_every=25_000)
    s = run.summary
    learner = _curve(s["eval"])
    curve = learner
    if arm == "team":
        population = (s.get("member_evals") or {}).get(POPULATION)
        if population is None:
            raise RuntimeError(f"the team file's {POPULATION!r} member was not evaluated")
        curve = _curve(population["eval"])
    record = {
        "task": task,
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "threshold": TASKS[task][1],
        "env_steps": s["env_steps"],
        "wall_s": s["wall_s"],  # the run's own, summed over the sessions it ran in
        "interrupted": s["interrupted"],
        "curve": curve,
        "final": curve[-1][1],
        "learner_curve": learner,
        "learner_final": learner[-1][1],
    }
    return record  # its checkpoints stay until the record is stored (forget)


def describe(r: dict[str, Any]) -> str:
    extra = f" (learner {r['learner_final']:.1f})" if r["arm"] == "team" else ""
    return (
        f"{r['task']} {r['arm']} seed {r['seed']}: final {r['final']:.1f}{extra}, "
        f"{r['wall_s']:.0f} s"
    )


def plan(tasks: list[str], arms_: list[str], seeds: list[int]) -> list[tuple[str, str, int]]:
    """(task, arm, seed) seed by seed, task by task; the arm that starts a task moves on by one
    from task to task and from seed to seed, so neighbours in the order (what runs side by
    side) differ in arm and no arm always runs first or beside the same one."""
    order = []
    for i, seed in enumerate(seeds):
        for t, task in enumerate(tasks):
            k = (i + t) % len(arms_)
            order += [(task, arm, seed) for arm in arms_[k:] + arms_[:k]]
    return order


def table_grid(seeds: list[int]) -> dict[str, list]:
    """What the table covers whatever part of the sweep a command runs: every task and arm,
    the issue's seeds and any others asked for. A session that runs one arm of one seed must
    not rewrite the shared table as that one cell."""
    return {"tasks": list(TASKS), "arms": list(ARMS), "seeds": sorted({*SEEDS, *seeds})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side")
    ap.add_argument("--out", type=Path, default=RESULTS / "many_tasks.md")
    ap.add_argument("--table", action="store_true", help="only rebuild the files")
    args = ap.parse_args(argv)
    log = args.out.with_name(args.out.stem + "_runs.jsonl")
    if not args.table:
        stored = {
            (r["task"], r["arm"], r["seed"]) for r in runs.load(log) if r["steps"] == args.steps
        }
        todo = [t for t in plan(args.tasks, args.arms, args.seeds) if t not in stored]
        print(f"{len(todo)} runs to go ({len(stored)} stored)", flush=True)
        arms.run_parallel(
            todo, args.jobs, one_run, log, describe, after_store=forget, steps=args.steps
        )
    params = {
        **table_grid(args.seeds),
        "steps": args.steps,
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
    }
    print(report.write_from_runs(args.out, log, render, plot, params, argv))
    return 0


# -- the tables and the plot ----------------------------------------------------------------------


def chosen(
    records: list[dict[str, Any]], task: str, arm: str, seeds: list[int], steps: int
) -> dict[int, dict[str, Any]]:
    mine = [
        r
        for r in records
        if r["task"] == task and r["arm"] == arm and r["seed"] in seeds and r["steps"] == steps
    ]
    return runs.latest(mine, key=lambda r: r["seed"])  # type: ignore[return-value]


def verdict(finals: list[float], threshold: float) -> tuple[bool, int]:
    """(solved: the median final above the threshold, seeds whose final is there)."""
    return stats.median(finals) > threshold, sum(f > threshold for f in finals)


def settled(finals: list[float], n_seeds: int, threshold: float) -> bool | None:
    """The verdict over ``n_seeds`` seeds where the seeds still to run cannot change it, else
    None. The median only rises as a value does, so the missing seeds at +inf bound it from
    above and at -inf from below: 3 of 5 seeds below the threshold settle "not solved"."""
    missing = n_seeds - len(finals)
    if not verdict(finals + [float("inf")] * missing, threshold)[0]:
        return False
    if verdict(finals + [float("-inf")] * missing, threshold)[0]:
        return True
    return None


def _wall(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def render(
    records: list[dict[str, Any]],
    *,
    tasks: list[str],
    arms: list[str],
    seeds: list[int],
    steps: int,
    date: str,
    cores: int,
) -> str:
    head = ("arm", *(f"{t} (> {TASKS[t][1]:g})" for t in tasks), "tasks solved")
    rows, per_seed = [], []
    # arm -> (tasks solved, tasks settled): a task counts once the seeds still to run cannot
    # change its verdict, so a verdict never rests on the seeds that happened to finish first.
    solved_by: dict[str, tuple[int, int]] = {}
    for arm in arms:
        cells, solved, decided = [], 0, 0
        for task in tasks:
            mine = chosen(records, task, arm, seeds, steps)
            if not mine:
                cells.append("not run")
                continue
            finals = [r["final"] for r in mine.values()]
            ok, seeds_there = verdict(finals, TASKS[task][1])
            final_say = settled(finals, len(seeds), TASKS[task][1])
            ci = stats.seed_intervals(finals)["median"]
            complete = len(mine) == len(seeds)
            if final_say is None:
                mark = ("**solved**" if ok else "not solved") + " so far"
            else:
                mark = ("**solved**" if final_say else "not solved") + (
                    "" if complete else " (settled)"
                )
            ran_of = "" if complete else f" ({len(finals)} of {len(seeds)} run)"
            cells.append(
                f"{mark}: {ci.point:.1f} [{ci.lo:.1f}, {ci.hi:.1f}], "
                f"{seeds_there} of {len(finals)} seeds{ran_of}"
            )
            solved += final_say is True
            decided += final_say is not None
            for k in sorted(mine):
                r = mine[k]
                per_seed.append(
                    (
                        task,
                        arm,
                        k,
                        f"{r['final']:.1f}",
                        f"{r['learner_final']:.1f}" if arm == "team" else "",
                        f"{max(x for _, x in r['curve']):.1f}",
                        _wall(r["wall_s"]),
                    )
                )
        solved_by[arm] = (solved, decided)
        rows.append((arm, *cells, f"{solved} of {decided} settled" if decided else "—"))
    return f"""# One team for many tasks against single learners at their defaults (issue 37)

`python -m experiments.many_tasks --tasks {" ".join(tasks)} --arms {" ".join(arms)} \\
--seeds {" ".join(map(str, seeds))} --steps {steps}` ({date}, {cores} cores). {steps:,} env
steps per run, all members together; 10 deterministic eval episodes every 10k steps; the final
return is the last eval. The team is `cfg/{TEAM_FILE}` with only `env.id` and the threshold
changed, its figure the population's champion (the learner's own final in the per-seed table);
each solo is that algorithm alone at wheeler2's defaults. A cell: whether the arm solves the
task (its median final above the threshold), the median final with rliable's 95%
bootstrap interval over seeds, and the seeds whose final is above the threshold. "So
far" while the seeds still to run could change the verdict (such a task counts toward no
target); "settled" where they could not (3 of 5 seeds below the threshold already hold the
median below it, whatever the other two reach).

{chr(10).join(report.table(head, rows))}

Targets:

{chr(10).join(_targets(solved_by, len(tasks)))}

Per seed:

{chr(10).join(report.table(SEED_HEAD, per_seed))}
"""


SEED_HEAD = ("task", "arm", "seed", "final", "team learner's final", "best eval", "wall")


def _targets(solved_by: dict[str, tuple[int, int]], n_tasks: int) -> list[str]:
    """The issue's two targets from each arm's (tasks solved, tasks settled): one task settled
    unsolved decides either target for that arm."""
    lines = []
    if "team" in solved_by:
        solved, decided = solved_by["team"]
        state = "met" if solved == n_tasks else "not met" if decided > solved else "open"
        lines.append(f"- the team solves every task: {solved} of {n_tasks} (**{state}**)")
    solos = [a for a in solved_by if a != "team"]
    if solos:
        short = [a for a in solos if solved_by[a][1] > solved_by[a][0]]
        every = [a for a in solos if solved_by[a][0] == n_tasks]
        state = "not met" if every else "met" if len(short) == len(solos) else "open"
        names = ", ".join(f"{a} {solved_by[a][0]}" for a in solos)
        lines.append(f"- no single learner at defaults solves every task: {names} (**{state}**)")
    return lines


def plot(records: list[dict[str, Any]], path: Path, **params: Any) -> None:
    """A panel per task: each arm's figure against env steps, seeds thin, their median thick."""
    tasks, arms_, seeds, steps = params["tasks"], params["arms"], params["seeds"], params["steps"]
    curves = {
        (task, arm): [r["curve"] for r in chosen(records, task, arm, seeds, steps).values()]
        for task in tasks
        for arm in arms_
    }
    if not any(curves.values()):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, arm in enumerate(arms_):
            cs = [c for c in curves[(task, arm)] if c]
            for c in cs:
                ax.plot(*zip(*c), color=f"C{i}", alpha=0.25, linewidth=1)
            if cs:
                n = min(len(c) for c in cs)
                xs = [x for x, _ in cs[0][:n]]
                med = [stats.median(c[j][1] for c in cs) for j in range(n)]
                ax.plot(xs, med, color=f"C{i}", linewidth=2.5, label=f"{arm} ({len(cs)} seeds)")
        ax.axhline(TASKS[task][1], color="grey", linestyle=":", linewidth=1)
        ax.set_title(TASKS[task][0])
        ax.set_xlabel("env steps, all members")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("eval return (teams: the population's champion)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
