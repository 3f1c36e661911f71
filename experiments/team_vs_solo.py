"""Does a team pay? Teams against their own learner alone, on the same quantity, seed by seed.

    python -m experiments.team_vs_solo --task mountaincar --seeds 0 1 2 3 4 5 6 7 8 9
    python -m experiments.team_vs_solo --task pendulum --seeds 0 1 2 3 4 --arms solo ppo diverse
    python -m experiments.team_vs_solo --task pendulum-slow --seeds 0 1 2 3 4 --arms solo diverse
    python -m experiments.team_vs_solo --task pendulum-shape --seeds 0 1 2 3 4 \
        --arms solo solo-ou diverse
    python -m experiments.team_vs_solo --task mountaincar --table      # tables from the runs file

Tasks: ``pendulum`` and ``mountaincar`` run their team files; ``pendulum-slow`` is the Pendulum
file on ``wheeler2/Slow-v0`` (every step takes 2 ms, as a remote simulator's would), and
``pendulum-shape`` the MountainCar file on Pendulum-v1 (one team shape, only env and threshold
changed).

Every arm starts from the learner of ``cfg/<task>_team.toml`` (same network, buffer, env-step
budget and ``updates_per_insert``, hence the same number of learner updates) and differs only
in who else feeds the replay:

* ``solo``: the learner alone (serial backend, its fastest home), with its own noise;
* ``solo-ou``: the same with Ornstein-Uhlenbeck noise (rl-zoo's MountainCar choice, std 0.5);
* ``apex``: the learner plus 3 Ape-X actors of its own algorithm (``role = "actor"``: they act
  with the learner's synced weights and their own Gaussian noise, spread ``0.4 ** (1 + 7 i / 2)``,
  and never learn);
* ``ppo``: the learner plus 2 PPO explorers that learn on their own rollouts and sync the
  learner's trunk (the original heterogeneous team);
* ``pink``: the learner plus 3 actors with pink (1/f) noise of scales 0.3, 0.6 and 1.0, the
  shape of ``cfg/mountaincar_team.toml`` on any task's learner;
* ``diverse``: the task's team file as shipped (``cfg/mountaincar_team.toml``: the learner plus
  3 actors with pink (1/f) noise of scales 0.3, 0.6 and 1.0);
* ``solo-<noise>-<std>`` (e.g. ``solo-pink-0.6``): the learner alone with that action noise
  (``gaussian``, ``pink`` or ``ou``, at the learner's other noise settings: pink's horizon
  1,000 steps by default);
* ``best-solo``: the learner alone with the noise ``--select`` chose for the task.

The best single learner, chosen honestly (issue 37): ``--select`` runs the learner alone with
every noise of ``SOLO_GRID`` (three kinds at three scales) on its own seeds (not the ones
reported: pass e.g. ``--seeds 100 101 102``) at the same budget, ranks them on the seeds every
noise ran by seeds solved, then seeds still there at the end, then median env steps to the
threshold, then mean AUC, and writes the winner to ``team_vs_solo_<task>_best_solo.json`` with
the ranking table (``team_vs_solo_<task>_select.md``); an unfinished grid is not ranked.
``best-solo`` then runs that noise on the reported seeds, and refuses any selection seed:

    python -m experiments.team_vs_solo --task mountaincar --select --seeds 100 101 102
    python -m experiments.team_vs_solo --task mountaincar --arms best-solo diverse --seeds 0 1 ...

For each run: env steps (all members) and wall-clock at the first eval above the task's
threshold, whether it was reached, whether the final eval is still there, and the area under
the eval curve (mean eval return over the budget). Per arm: seeds solved, the median and
interquartile mean of steps and seconds to the threshold (an unsolved seed counts as never,
i.e. infinity), and each arm's ratio to ``solo`` of the median, with a 95% bootstrap interval
over seeds (resampled in pairs: the same seeds on both sides). Arms run interleaved, seed by
seed, so machine load hits every arm alike. Every finished run is appended to
``experiments/results/team_vs_solo_<task>_runs.jsonl``, so an interrupted sweep keeps its runs;
the table and plot (``team_vs_solo_<task><suffix>.md``, ``.png``) are rebuilt from that file
alone (``--table``, or ``python -m experiments regen``). Notes on the results:
``experiments/results/notes/team_vs_solo.md``.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config, sweep

SLOW_PENDULUM = [  # a remote simulator: every env step (eval's too) takes 2 ms of wall-clock
    'env.id="wheeler2/Slow-v0"',
    'env.kwargs={env_id="Pendulum-v1", step_ms=2.0}',
    'env.vector="async"',  # eval's copies wait side by side, as remote ones would
    "experiment.total_steps=20000",  # every arm reaches -200 by ~14,000 steps
]
TASKS = {
    "pendulum": {"file": ROOT / "cfg" / "pendulum_team.toml", "threshold": -200.0},
    "pendulum-slow": {
        "file": ROOT / "cfg" / "pendulum_team.toml",
        "threshold": -200.0,
        "sets": SLOW_PENDULUM,
    },
    "mountaincar": {"file": ROOT / "cfg" / "mountaincar_team.toml", "threshold": 90.0},
    # One team shape for both tasks: the MountainCar file with only env and threshold changed.
    "pendulum-shape": {
        "file": ROOT / "cfg" / "mountaincar_team.toml",
        "threshold": -200.0,
        "sets": ['env.id="Pendulum-v1"'],
    },
}
COST_KEYS = ("env_steps", "steps_per_s", "wall_s", "cpu_s", "updates")
ARMS = ("solo", "solo-ou", "best-solo", "apex", "ppo", "pink", "diverse")
# The single learner's noises --select tries: three kinds at three scales each.
SOLO_GRID = tuple(
    f"solo-{kind}-{std:g}"
    for kind, scales in (
        ("gaussian", (0.1, 0.3, 0.6)),
        ("pink", (0.3, 0.6, 1.0)),
        ("ou", (0.2, 0.5, 1.0)),
    )
    for std in scales
)
NOISES = ("gaussian", "pink", "ou")


def solo_noise(arm: str) -> tuple[str, float] | None:
    """``solo-<noise>-<std>`` -> (noise, std); None for any other arm name."""
    parts = arm.split("-")
    if len(parts) != 3 or parts[0] != "solo" or parts[1] not in NOISES:
        return None
    try:
        return parts[1], float(parts[2])
    except ValueError:
        return None


def arm_name(value: str) -> str:
    """argparse type: a named arm or ``solo-<noise>-<std>``."""
    if value in ARMS or solo_noise(value) is not None:
        return value
    raise argparse.ArgumentTypeError(
        f"unknown arm {value!r}: expected one of {', '.join(ARMS)} or solo-<noise>-<std> with "
        f"noise one of {', '.join(NOISES)} (e.g. solo-pink-0.6)"
    )


def arms_in(rs: list[dict[str, Any]]) -> list[str]:
    """The arms the runs hold, in table order: the named ones, then the noise grid's."""
    held = {r["arm"] for r in rs}
    grid = sorted(a for a in held if a not in ARMS)
    return [a for a in ARMS if a in held] + grid


def best_solo_file(task: str) -> Path:
    return RESULTS / f"team_vs_solo_{task}_best_solo.json"


def _learner(raw: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(next(t for t in raw["team"] if t.get("role") == "learner"))


def _actors(learner: dict[str, Any], noise: str, per_copy: Any) -> dict[str, Any]:
    """Actors of the learner's own algorithm and network: synced whole, their own noise."""
    params = {"hidden": learner.get("params", {}).get("hidden", [400, 300])}
    params.update(learning_starts=0, noise=noise, noise_horizon=1_000)
    if learner.get("params", {}).get("normalize_obs"):
        params["normalize_obs"] = True
    return {
        "name": "actor",
        "algo": learner["algo"],
        "role": "actor",
        "count": 3,
        "sync": {"every": 1_000},
        "per_copy": {"noise_std": per_copy},
        "params": params,
    }


def _ppo(learner: dict[str, Any]) -> dict[str, Any]:
    params = learner.get("params", {})
    return {
        "name": "explorer",
        "algo": "ppo",
        "role": "explorer",
        "count": 2,
        "sync": {"every": 1_000, "keep": ["actor.head"], "alpha": 1.0},
        "params": {
            "hidden": params.get("hidden", [400, 300]),
            "activation": "relu",
            "n_steps": 1_024,
            "batch_size": 64,
            "gamma": params.get("gamma", 0.99),
            "ent_coef": 0.0,
            "lr": 3e-4,
        },
    }


def arm_raw(task_raw: dict[str, Any], arm: str, best: str | None = None) -> dict[str, Any]:
    """The experiment of one arm: the task file's learner, and who else feeds its replay.
    ``best`` is the ``solo-<noise>-<std>`` arm that ``best-solo`` stands for."""
    raw = copy.deepcopy(task_raw)
    learner = _learner(raw)
    raw["experiment"]["backend"] = "local"
    raw["experiment"]["name"] = f"{raw['experiment']['name']}-{arm}"
    # solo-ou (rl-zoo's MountainCar noise) and best-solo are names for solo-<noise>-<std> arms.
    noise = solo_noise({"solo-ou": "solo-ou-0.5", "best-solo": best or ""}.get(arm, arm))
    if arm == "best-solo" and noise is None:
        raise ValueError(f"best-solo needs the chosen noise (got {best!r}): run --select first")
    if arm == "solo" or noise is not None:
        raw["experiment"]["backend"] = "serial"
        if noise is not None:
            kind, std = noise
            learner.setdefault("params", {}).update(noise=kind, noise_std=std)
        raw["team"] = [learner]
    elif arm == "apex":
        raw["team"] = [learner, _actors(learner, "gaussian", {"base": 0.4, "alpha": 7.0})]
    elif arm == "ppo":
        raw["team"] = [learner, _ppo(learner)]
    elif arm == "pink":
        raw["team"] = [learner, _actors(learner, "pink", [0.3, 0.6, 1.0])]
    elif arm != "diverse":  # diverse: the file's own team
        raise ValueError(f"unknown arm {arm!r}; expected one of {ARMS}")
    return raw


def run_arm(task: str, arm: str, seed: int, out: Path, sets: list[str]) -> dict[str, Any]:
    from wheeler2.config import load, validate

    spec = TASKS[task]
    overrides = ["experiment.progress=false", *spec.get("sets", []), *sets]
    base = load(spec["file"], overrides=overrides, seed=seed)
    best = chosen_solo(task, [seed]) if arm == "best-solo" else None
    raw = arm_raw(base.raw, arm, best)
    raw["experiment"].update(seed=seed, out=str(out), eval_threshold=spec["threshold"])
    run = run_config(validate(raw, spec["file"]))
    return figures(task, arm, seed, run.summary, str(run.run_dir))


def chosen_solo(task: str, seeds: list[int]) -> str:
    """The arm ``--select`` chose for ``task``, to be run on ``seeds``: refused where one of
    them was a selection seed (the choice is judged on seeds it was not made on)."""
    path = best_solo_file(task)
    if not path.exists():
        raise SystemExit(
            f"error: {path}: no best single learner chosen for {task}: "
            f"run --task {task} --select --seeds 100 101 102 first"
        )
    chosen = runs.load(path)
    shared = sorted(set(seeds) & set(chosen.get("seeds", ())))
    if shared:
        raise SystemExit(
            f"error: {path}: best-solo ({chosen['arm']}) was chosen on seeds {chosen['seeds']}; "
            f"seeds {shared} cannot report it: pass --seeds disjoint from the selection's"
        )
    return str(chosen["arm"])


def figures(task: str, arm: str, seed: int, summary: dict, run_dir: str) -> dict[str, Any]:
    threshold = TASKS[task]["threshold"]
    evals = summary["eval"]
    # "above", as the run's own eval_threshold (steps_to_threshold) counts it
    steps_to, seconds_to = stats.to_threshold(evals, threshold, strict=True)
    budget = max(summary["env_steps"], 1)
    xs = [0] + [e["env_steps"] for e in evals]
    ys = [evals[0]["return"]] + [e["return"] for e in evals] if evals else [0.0, 0.0]
    auc = float(np.trapezoid(ys, xs) / budget) if len(xs) > 1 else float("nan")
    return {
        "task": task,
        "arm": arm,
        "seed": seed,
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "solved": steps_to is not None,
        "steps_to": steps_to,
        "seconds_to": seconds_to,
        "final": summary["final_eval_return"],
        "stays": summary["final_eval_return"] is not None
        and summary["final_eval_return"] > threshold,
        "auc": auc,
        "eval": evals,
        "learner_updates": (summary["members"].get("target") or {}).get("updates"),
        # Where the time went: each member's env steps/s, wall and CPU seconds, updates.
        "members": {
            name: {k: m[k] for k in COST_KEYS if k in m} for name, m in summary["members"].items()
        },
        "run_dir": run_dir,
    }


# -- the tables (from stored runs alone) --


def _values(rs: list[dict], key: str) -> np.ndarray:
    return stats.censored(r[key] for r in rs)


def _ratio_cell(vals: np.ndarray, base: np.ndarray) -> str:
    if np.isinf(np.median(base)):
        return "— (neither)" if np.isinf(np.median(vals)) else "— (only this arm)"
    if np.isinf(np.median(vals)):
        return "— (only the baseline)"
    return stats.ratio_ci(vals, base, unsolved="rank").cell(",.2f")


_fmt = stats.fmt


def table(task: str, runs: list[dict[str, Any]]) -> str:
    arms = arms_in(runs)
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["arm"], r["seed"]): r for r in runs}
    complete = [s for s in seeds if all((a, s) in by for a in arms)]
    # Ratios to each solo arm run: the learner alone with its own noise, and with OU noise.
    bases = [a for a in ("solo", "solo-ou", "best-solo") if a in arms]
    head = "".join(f" steps / {b} [95% CI] | seconds / {b} [95% CI] |" for b in bases)
    lines = [
        f"### {task}: threshold {TASKS[task]['threshold']:g}, seeds {complete}",
        "",
        "| arm | solved | final > threshold | median steps | IQM steps | median s | IQM s |"
        + head
        + " mean AUC |",
        "| --- " * (7 + 2 * len(bases) + 1) + "|",
    ]
    for arm in arms:
        rs = [by[(arm, s)] for s in complete]
        steps, secs = _values(rs, "steps_to"), _values(rs, "seconds_to")
        cells = [
            arm,
            f"{sum(r['solved'] for r in rs)}/{len(rs)}",
            f"{sum(r['stays'] for r in rs)}/{len(rs)}",
            _fmt(stats.median(steps), ",.0f"),
            _fmt(stats.iqm(steps), ",.0f"),
            _fmt(stats.median(secs), ",.1f"),
            _fmt(stats.iqm(secs), ",.1f"),
        ]
        for base in bases:
            b_runs = [by[(base, s)] for s in complete]
            if arm == base:
                cells += ["1", "1"]
                continue
            cells.append(_ratio_cell(steps, _values(b_runs, "steps_to")))
            cells.append(_ratio_cell(secs, _values(b_runs, "seconds_to")))
        cells.append(_fmt(float(np.mean([r["auc"] for r in rs])), ",.1f"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per seed, env steps to the threshold ('—': not reached):", ""]
    lines.append("| arm | " + " | ".join(f"seed {s}" for s in complete) + " |")
    lines.append("| --- |" + " --- |" * len(complete))
    for arm in arms:
        row = [
            _fmt(by[(arm, s)]["steps_to"], ",") if by[(arm, s)]["solved"] else "—" for s in complete
        ]
        lines.append(f"| {arm} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def cost_table(runs: list[dict[str, Any]]) -> str:
    """Why an arm is as fast as it is: the learner's updates/s, every member's env steps/s and
    the share of the machine's cores the members' processes took (medians over seeds)."""
    cores = os.cpu_count() or 1
    lines = [
        f"Where the time went (medians over seeds; CPU share of all {cores} cores over the run):",
        "",
        "| arm | run wall s | learner updates/s | env steps/s, per member | CPU share |",
        "| --- | --- | --- | --- | --- |",
    ]
    for arm in arms_in(runs):
        rs = [r for r in runs if r["arm"] == arm and r.get("members")]
        if not rs:
            continue
        ups = [r["learner_updates"] / r["members"]["target"]["wall_s"] for r in rs]
        names = list(rs[0]["members"])
        rates = ", ".join(
            f"{n} {np.median([r['members'][n]['steps_per_s'] for r in rs]):,.0f}" for n in names
        )
        shares = [
            sum(m.get("cpu_s", math.nan) for m in r["members"].values()) / (r["wall_s"] * cores)
            for r in rs
        ]
        lines.append(
            f"| {arm} | {np.median([r['wall_s'] for r in rs]):.0f} | {np.median(ups):.0f}"
            f" | {rates} | {_fmt(float(np.median(shares)) * 100, ',.0f')}% |"
        )
    return "\n".join(lines)


def curves(task: str, runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for arm in arms_in(runs):
        rs = [r for r in runs if r["arm"] == arm and r["eval"]]
        n = min(len(r["eval"]) for r in rs)
        steps = np.array([e["env_steps"] for e in rs[0]["eval"][:n]])
        ret = np.array([[e["return"] for e in r["eval"][:n]] for r in rs])
        q1, med, q3 = np.percentile(ret, [25, 50, 75], axis=0)
        (line,) = axes[0].plot(steps, med, label=f"{arm} ({len(rs)} seeds)")
        axes[0].fill_between(steps, q1, q3, alpha=0.2, color=line.get_color())
        grid = np.linspace(0, max(r["eval"][-1]["wall_s"] for r in rs), 60)
        on_grid = np.array(
            [
                np.interp(grid, [e["wall_s"] for e in r["eval"]], [e["return"] for e in r["eval"]])
                for r in rs
            ]
        )
        q1, med, q3 = np.percentile(on_grid, [25, 50, 75], axis=0)
        axes[1].plot(grid, med, color=line.get_color())
        axes[1].fill_between(grid, q1, q3, alpha=0.2, color=line.get_color())
    for ax, label in zip(axes, ("env steps (all members)", "wall-clock (s)")):
        ax.axhline(TASKS[task]["threshold"], color="k", linestyle="--", linewidth=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("eval return: median, quartile band")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{task}: teams against their learner alone")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _chosen(rs: list[dict[str, Any]], task: str, arms_: list[str] | None) -> list[dict[str, Any]]:
    """The runs of ``task`` and of ``arms_`` (None: every arm)."""
    return [r for r in rs if r["task"] == task and (arms_ is None or r["arm"] in arms_)]


def rank_solos(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The single-learner arms of ``rs``, best first: most seeds solved, then most still there
    at the end, then fewest median env steps to the threshold, then the highest mean AUC.
    Every arm is judged on the same seeds, those every arm ran: counted over whatever each
    had finished, an arm would be credited with seeds the others never got (an interrupted
    selection ranked with --table)."""
    common = _common_seeds(rs)
    rows = []
    for arm in arms_in(rs):
        mine = [r for r in rs if r["arm"] == arm and r["seed"] in common]
        if not mine:
            continue
        rows.append(
            {
                "arm": arm,
                "seeds": len(mine),
                "solved": sum(r["solved"] for r in mine),
                "stays": sum(r["stays"] for r in mine),
                "median_steps": stats.median(_values(mine, "steps_to")),
                "auc": float(np.mean([r["auc"] for r in mine])),
            }
        )
    return sorted(rows, key=lambda x: (-x["solved"], -x["stays"], x["median_steps"], -x["auc"]))


def _common_seeds(rs: list[dict[str, Any]]) -> set[int]:
    """The seeds every arm of ``rs`` ran (what :func:`rank_solos` judges on)."""
    ran = [{r["seed"] for r in rs if r["arm"] == arm} for arm in arms_in(rs)]
    return set.intersection(*ran) if ran else set()


def select_render(rs: list[dict[str, Any]], task: str) -> str:
    """The selection of the best single learner: every noise tried, ranked."""
    solos = _chosen(rs, task, None)
    ranked = rank_solos(solos)
    seeds = sorted(_common_seeds(solos))
    lines = [
        f"### {task}: the learner alone under each noise, seeds {seeds} (selection seeds, not "
        "the reported ones), threshold "
        f"{TASKS[task]['threshold']:g}",
        "",
        "Ranked by seeds solved, then seeds still at the threshold at the end, then median env "
        "steps to it, then mean AUC (mean eval return over the budget).",
        "",
        "| rank | arm | solved | final > threshold | median steps | mean AUC |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, x in enumerate(ranked, 1):
        lines.append(
            f"| {i} | {x['arm']} | {x['solved']}/{x['seeds']} | {x['stays']}/{x['seeds']} | "
            f"{_fmt(x['median_steps'], ',.0f')} | {x['auc']:,.1f} |"
        )
    if ranked:
        lines += ["", f"Chosen as `best-solo`: **{ranked[0]['arm']}**."]
    return "\n".join(lines)


def render(rs: Any, task: str | None = None, arms: list[str] | None = None) -> str:
    """The tables of ``task`` over the stored runs of ``arms``; given every runs file (a dict
    of names to their runs), the summary of all of them, every arm."""
    if isinstance(rs, dict):
        return summary(rs)
    rs = _chosen(rs, task, arms)
    text = table(task, rs)
    if any(r.get("members") for r in rs):
        text += "\n\n" + cost_table(rs)
    return text


def summary(files: dict[str, list[dict[str, Any]]]) -> str:
    """One section per runs file: its tables over every arm it holds, and where its plot is."""
    parts = [
        "# Teams against their own learner alone: every stored sweep",
        "",
        "One section per runs file (`team_vs_solo_<name>_runs.jsonl`), every arm it holds; the "
        "per-file tables and plots are `team_vs_solo_<name>*.md` / `.png`. Notes on these "
        "results: [notes/team_vs_solo.md](notes/team_vs_solo.md).",
    ]
    for name, rs in files.items():
        task = rs[0]["task"]
        parts += ["", f"## {name} (`team_vs_solo_{name}_runs.jsonl`)", ""]
        parts.append(render(rs, task, None))
    return "\n".join(parts)


def plot(rs: list[dict[str, Any]], path: Path, task: str, arms: list[str]) -> None:
    """Median eval curves with quartile bands, against env steps and wall-clock."""
    curves(task, _chosen(rs, task, arms), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--task", choices=sorted(TASKS))
    ap.add_argument(
        "--summary", action="store_true", help="only write team_vs_solo.md over every runs file"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument(
        "--arms",
        nargs="+",
        type=arm_name,
        default=[a for a in ARMS if a != "best-solo"],
        help=f"any of {', '.join(ARMS)} or solo-<noise>-<std> (e.g. solo-pink-0.6)",
    )
    ap.add_argument(
        "--select",
        action="store_true",
        help="run the learner alone under every noise of SOLO_GRID on --seeds and choose the "
        "best single learner (best-solo) for the task",
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", default=str(ROOT / "runs" / "team_vs_solo"))
    ap.add_argument("--runs", default=None, help="jsonl of runs (default: results/…_runs.jsonl)")
    ap.add_argument("--table", action="store_true", help="only rebuild tables from the runs file")
    ap.add_argument("--suffix", default="", help="appended to the table and plot file names")
    args = ap.parse_args(argv)
    if args.summary:
        files = {
            p.name.removeprefix("team_vs_solo_").removesuffix("_runs.jsonl"): p
            for p in sorted(RESULTS.glob("team_vs_solo_*_runs.jsonl"))
        }
        text = render({k: runs.load(v) for k, v in files.items()})
        report.write(
            RESULTS / "team_vs_solo.md",
            text,
            render=render,
            runs_file=files,
            command=report.command_line(argv),
        )
        print(text)
        return 0
    if args.task is None:
        ap.error("--task is required (or --summary)")
    if args.select:
        return select(args, argv)
    runs_path = Path(args.runs or RESULTS / f"team_vs_solo_{args.task}_runs.jsonl")
    if not args.table:
        if "best-solo" in args.arms:
            chosen_solo(args.task, args.seeds)  # before any run: not halfway through the sweep
        sweep(args.seeds, args.arms, _runner(args), runs_path, describe=_describe)
    params = {"task": args.task, "arms": list(dict.fromkeys(args.arms))}
    stored = runs.load(runs_path)
    name = f"team_vs_solo_{args.task}{args.suffix}"
    plot(stored, RESULTS / f"{name}.png", **params)
    text = render(stored, **params)
    report.write(
        RESULTS / f"{name}.md",
        text,
        render=render,
        params=params,
        runs_file=runs_path,
        plots=[RESULTS / f"{name}.png"],
        command=report.command_line(argv),
    )
    print(text)
    return 0


def _runner(args: argparse.Namespace) -> Any:
    def run(arm: str, seed: int) -> dict[str, Any]:
        return run_arm(args.task, arm, seed, Path(args.out), args.overrides)

    return run


def _describe(r: dict[str, Any]) -> str:
    reached = f"solved at {r['steps_to']:,}" if r["solved"] else "not solved"
    return (
        f"{r['task']} {r['arm']} seed {r['seed']}: {reached}, final {r['final']:.1f}, "
        f"{r['wall_s']:.0f} s"
    )


def select(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--select``: every noise of SOLO_GRID on the selection seeds; the winner is written to
    ``team_vs_solo_<task>_best_solo.json`` and the ranking to ``..._select.md``."""
    task = args.task
    runs_path = Path(args.runs or RESULTS / f"team_vs_solo_{task}_select_runs.jsonl")
    if not args.table:
        # Resumable: the runs an interrupted selection finished are not run again.
        done = {(r["seed"], r["arm"]) for r in runs.load(runs_path) if r["task"] == task}
        sweep(args.seeds, list(SOLO_GRID), _runner(args), runs_path, describe=_describe, skip=done)
    stored = runs.load(runs_path)
    held = {r["arm"] for r in _chosen(stored, task, None)}
    missing = [a for a in SOLO_GRID if a not in held]
    if held and missing:  # an interrupted selection: the choice would be among some noises
        raise SystemExit(
            f"error: {runs_path}: no selection run of {', '.join(missing)} for {task}: "
            f"run --task {task} --select again to finish the grid"
        )
    ranked = rank_solos(_chosen(stored, task, None))
    if not ranked:
        raise SystemExit(f"error: {runs_path}: no selection runs for {task}")
    seeds = sorted({r["seed"] for r in stored if r["task"] == task})
    runs.save(best_solo_file(task), {"task": task, "arm": ranked[0]["arm"], "seeds": seeds})
    text = select_render(stored, task)
    report.write(
        RESULTS / f"team_vs_solo_{task}_select.md",
        text,
        render=select_render,
        params={"task": task},
        runs_file=runs_path,
        command=report.command_line(argv),
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
