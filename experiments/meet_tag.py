"""simple_tag cross-play: predators and prey trained jointly against ones trained on random play.

Two arms, the same budget, seeds interleaved (seed 0 joint, seed 0 random-trained, seed 1 ...):

* ``joint``: cfg/simple_tag_joint.toml, ``[play] joint = true``: the DDPG predators (one table,
  the three adversaries) and the PPO prey (its own table) drive their agents in every copy, so
  each learns against the other's current policy;
* ``random-trained``: cfg/simple_tag_teams.toml as shipped: each side learns against uniformly
  random opponents in its own copies.

``total_steps`` counts each member's own agents' steps only in both arms (a predator copy-step is
3 agent-steps, a prey copy-step 1), and the serial backend steps the two members in turn, so both
arms take the same number of env steps (copy-steps) and the same agent-steps per table.

After the two runs of a seed, their final policies (checkpoint ``latest``, written after the
closing eval) meet in a cross-play matrix: predators in {joint, random-trained, random} x prey
in {joint, random-trained, random}, each cell ``--episodes`` whole episodes of the raw env
(``envs/arena.play``, deterministic actions), seed-matched (the trained sides of a cell are both
seed s's), every cell of a seed on the same episode seeds. A *tag* is one adversary-prey contact
in one step: simple_tag pays every adversary +10 for each (adversary, prey) pair in contact at a
step (and nothing else: ``shape = False``), so tags in an episode = an adversary's return / 10
(all three adversaries get the same reward; checked on every episode). The prey's return is
-10 per tag minus its boundary penalty. Figures over seeds: the median of the per-seed means
with a percentile-bootstrap 95% interval (experiments/lib/stats.py).

    python -m experiments.meet_tag --seeds 0 1 2 3 4
    python -m experiments.meet_tag --keep --arms random-trained-2x --seeds 0 1 2   # the control
    python -m experiments.meet_tag --table           # rebuild .md and .png from the .json

The control ``random-trained-2x`` (on request): joint predators take about twice the gradient
steps of random-trained ones (their replay also gets their agents' steps in the prey's copies,
and the ratio gate counts them); this arm is the random-trained config with the predators'
``updates_per_insert`` doubled, and its predators meet the same seed's prey.

Writes experiments/results/meet_tag.md, .json (every run and every cell, rewritten after each
step, so an interrupted sweep keeps what it finished: ``--keep`` continues it) and .png (the
matrix as a heatmap, and both arms' in-run learning curves). Notes: results/notes/meet_tag.md.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config

ENV_ID = "pettingzoo:mpe2.simple_tag_v3"
# arm -> (config, --set overrides). "random-trained-2x" is a control, run on request
# (--arms): the random-trained config with the predators' updates per insert doubled, so its
# DDPG takes as many gradient steps as the joint arm's (whose replay also gets the predators'
# steps in the prey's copies, counted by its ratio gate); its prey is the random-trained one.
ARMS: dict[str, tuple[Path, tuple[str, ...]]] = {
    "joint": (CFG / "simple_tag_joint.toml", ()),
    "random-trained": (CFG / "simple_tag_teams.toml", ()),
    "random-trained-2x": (CFG / "simple_tag_teams.toml", ("buffer.updates_per_insert=0.5",)),
}
MAIN_ARMS = ("joint", "random-trained")
SIDES = ("joint", "random-trained", "random")  # who plays a side in the matrix
CONTROL = "random-trained-2x"  # plays the predators' side only
SHORT = {"joint": "J", "random-trained": "RT", "random": "rand", CONTROL: "RT2x"}
PREDATORS, PREY = "predators", "prey"  # the learners' [[team]] names in both configs
ADVERSARIES = ("adversary_0", "adversary_1", "adversary_2")
PREY_AGENT = "agent_0"
ACT_DIM = 5  # simple_tag's continuous action: no-op, and push in four directions
TAG_REWARD = 10.0
PLAY_SEED = 1_000_000  # episode seeds of seed s's cells: PLAY_SEED + 10_000 s + k


# -- training ------------------------------------------------------------------------------------


def train(arm: str, seed: int, steps: int | None, out: Path) -> dict[str, Any]:
    from wheeler2.config import load

    sets = ["experiment.progress=false", 'experiment.backend="serial"']
    if steps:
        sets += [f"experiment.total_steps={steps}", f"experiment.eval_every={max(steps // 6, 1)}"]
    path, extra = ARMS[arm]
    config = load(path, overrides=[*sets, *extra], seed=seed, out=str(out / arm))
    run = run_config(config)
    summary = run.summary
    members = summary.get("members") or {}
    return {
        "kind": "run",
        "arm": arm,
        "seed": seed,
        "run_dir": str(run.run_dir),
        "wall_s": run.call_s,
        "env_steps": summary["env_steps"],
        "members": {
            name: {
                k: members[name].get(k)
                for k in ("env_steps", "episodes", "updates", "ended")
                if k in members[name]
            }
            | {k: v for k, v in members[name].items() if k.startswith("driven/")}
            for name in members
        },
        "tables": {
            t["learner"]: {"final": t["final_eval_return"], "evals": t["eval"]}
            for t in summary["tables"].values()
        },
    }


# -- cross-play ------------------------------------------------------------------------------------


def sides(run_dirs: dict[str, str], seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policies of each side: the trained runs' final tables, and uniform random play."""
    from wheeler2.envs.players import random_box_player

    from wheeler2.api import load_tables

    predators: dict[str, Any] = {}
    prey: dict[str, Any] = {}
    for arm, run_dir in run_dirs.items():
        tables = {t.name: t for t in load_tables(run_dir, "latest")}
        predators[arm] = tables[PREDATORS]
        if arm in SIDES:
            prey[arm] = tables[PREY]
    # A fresh random player per cell (same seed in every cell): see cell().
    predators["random"] = lambda: random_box_player(ACT_DIM, 7_000 + seed)
    prey["random"] = lambda: random_box_player(ACT_DIM, 8_000 + seed)
    return predators, prey


def cell(pred: Any, prey: Any, episodes: int, seed: int) -> dict[str, Any]:
    from wheeler2.envs.arena import play

    pred = pred() if not hasattr(pred, "agents") else pred
    prey = prey() if not hasattr(prey, "agents") else prey
    drivers = dict.fromkeys(ADVERSARIES, pred) | {PREY_AGENT: prey}
    kwargs = {"continuous_actions": True, "max_cycles": 25}
    totals = play(ENV_ID, kwargs, drivers, episodes, seed=PLAY_SEED + 10_000 * seed)
    adv = np.array([[t[a] for a in ADVERSARIES] for t in totals])
    if not np.allclose(adv, adv[:, :1]):
        raise RuntimeError("adversaries' returns differ: tags cannot be read off one of them")
    tags = adv[:, 0] / TAG_REWARD
    if not np.allclose(tags, np.round(tags)):
        raise RuntimeError("an adversary's return is not a multiple of 10: not only tags pay")
    prey_return = np.array([t[PREY_AGENT] for t in totals])
    return {
        "tags": float(tags.mean()),
        "tagged_share": float((tags > 0).mean()),  # episodes with at least one tag
        "prey_return": float(prey_return.mean()),
        # The prey's boundary penalty: its return is -10 per tag minus this.
        "prey_bound": float((-prey_return - TAG_REWARD * tags).mean()),
        "per_episode": [int(x) for x in np.round(tags)],
    }


def cross_play(
    run_dirs: dict[str, str], seed: int, episodes: int, done: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Every cell of seed ``seed`` not in ``done`` ((predators, prey) pairs)."""
    predators, prey = sides(run_dirs, seed)
    out = []
    for p in predators:
        for q in SIDES:
            if (p, q) in done or q not in prey:
                continue
            t0 = time.perf_counter()
            r = cell(predators[p], prey[q], episodes, seed)
            out.append(
                {"kind": "cell", "seed": seed, "predators": p, "prey": q, "episodes": episodes}
                | r
                | {"wall_s": time.perf_counter() - t0}
            )
            print(
                f"  seed {seed}: {p} predators vs {q} prey: {r['tags']:.2f} tags/episode "
                f"({r['tagged_share']:.0%} of episodes tagged), prey return "
                f"{r['prey_return']:.1f}",
                flush=True,
            )
    return out


# -- figures ---------------------------------------------------------------------------------------


def seeds_of(data: dict[str, Any]) -> list[int]:
    return sorted({c["seed"] for c in data["cells"]})


def tags_by_seed(data: dict[str, Any], p: str, q: str, key: str = "tags") -> dict[int, float]:
    return {c["seed"]: c[key] for c in data["cells"] if c["predators"] == p and c["prey"] == q}


def matrix(data: dict[str, Any], key: str = "tags") -> dict[tuple[str, str], stats.Interval]:
    """Each cell's median over seeds of the per-seed mean of ``key`` (tags per episode), with
    its interval."""
    out = {}
    for p in SIDES:
        for q in SIDES:
            by_seed = tags_by_seed(data, p, q, key)
            if by_seed:
                out[p, q] = stats.median_ci(list(by_seed.values()), rng=0)
    return out


def paired(
    data: dict[str, Any], a: tuple[str, str], b: tuple[str, str], key: str = "tags"
) -> dict[str, Any]:
    """Cell a minus cell b, seed by seed, and the median difference with a bootstrap interval."""
    x, y = tags_by_seed(data, *a, key), tags_by_seed(data, *b, key)
    seeds = sorted(set(x) & set(y))
    d = [x[s] - y[s] for s in seeds]
    ci = stats.median_ci(d, rng=0) if d else stats.Interval(math.nan, math.nan, math.nan)
    return {"seeds": seeds, "diff": d, "ci": ci}


def verdict(less: dict[str, Any], more: dict[str, Any]) -> str:
    """The issue's rule, read off the two paired differences: both in joint play's favour and
    their intervals clear of 0 (pays), both in its favour only by their medians (points that way,
    not resolved at this many seeds), or not."""
    a, b = less["ci"], more["ci"]
    if any(math.isnan(v) for v in (a.point, b.point)):
        return "not enough seeds to judge"
    clear = a.hi < 0 and b.lo > 0
    leaning = a.point < 0 and b.point > 0
    if clear:
        return "**joint play pays**: both differences favour it and neither interval includes 0"
    if leaning:
        return (
            "**not shown**: both medians favour joint play, but an interval includes 0, so "
            "these seeds do not resolve it"
        )
    return "**joint play does not pay** here: at least one median difference goes against it"


def control(data: dict[str, Any]) -> list[str]:
    """The updates-matched control, where it was run: its predators against each prey."""
    seeds = sorted({c["seed"] for c in data["cells"] if c["predators"] == CONTROL})
    if not seeds:
        return []
    lines = [
        "## Control: random-trained predators with as many updates as the joint ones",
        "",
        f"Seeds {seeds}. Joint predators take about twice the gradient steps of random-trained "
        "ones (their replay also receives their agents' steps in the prey's copies, and the "
        "ratio gate counts them: see the runs table). The control arm `random-trained-2x` is "
        "cfg/simple_tag_teams.toml with `buffer.updates_per_insert = 0.5` (about as many "
        "updates as the joint arm, from half the transitions), trained against random prey; "
        "its predators meet the same seed's prey. Tags per episode:",
        "",
    ]
    per = {(c["seed"], c["predators"], c["prey"]): c["tags"] for c in data["cells"]}
    preds = ("joint", "random-trained", CONTROL)
    head = ["seed"] + [f"{SHORT[p]} pred / {SHORT[q]} prey" for q in SIDES for p in preds]
    rows = [
        [s] + [f"{per[s, p, q]:.2f}" if (s, p, q) in per else "—" for q in SIDES for p in preds]
        for s in seeds
    ]
    lines += report.table(head, rows)
    diffs = [
        ("joint prey: joint predators - RT2x predators", ("joint", "joint"), (CONTROL, "joint")),
        (
            "joint prey: RT2x predators - RT predators",
            (CONTROL, "joint"),
            ("random-trained", "joint"),
        ),
        (
            "RT prey: joint predators - RT2x predators",
            ("joint", "random-trained"),
            (CONTROL, "random-trained"),
        ),
        ("random prey: joint predators - RT2x predators", ("joint", "random"), (CONTROL, "random")),
    ]
    rows = []
    for what, a, b in diffs:
        d = paired(data, a, b)
        rows.append([what, ", ".join(f"{v:+.2f}" for v in d["diff"]), d["ci"].cell("+.2f")])
    lines += ["", "Paired by seed (tags per episode):", ""]
    lines += report.table(["difference", "per seed", "median [95% interval]"], rows)
    return lines + [""]


def render(data: dict[str, Any], name: str = "meet_tag", episodes: int = 0, **_: Any) -> str:
    seeds = seeds_of(data)
    order = list(ARMS)
    run_rows = sorted(data["runs"], key=lambda r: (r["seed"], order.index(r["arm"])))
    m = matrix(data)
    lines = [
        "# simple_tag cross-play: joint play against training on random opponents",
        "",
        f"Seeds {seeds}, {len(run_rows)} runs, backend `serial`. Arms: **joint** "
        "(cfg/simple_tag_joint.toml: `[play] joint = true`, each table drives its agents in "
        "every copy) and **random-trained** (cfg/simple_tag_teams.toml: each side trains "
        "against uniformly random opponents); everything else is the same config. DDPG "
        "predators (3 adversaries, one table), PPO prey (1 agent, its own table), continuous "
        "actions, max_cycles 25. `total_steps` counts each member's own agents' steps only in "
        "both arms (predators 3 per copy-step, prey 1) and the members step in turn, so both "
        "arms take the same env steps: the table below gives each member's own agent-steps, "
        "and under joint play the agent-steps it drove for the other table.",
        "",
        "## Cross-play matrix: tags per episode",
        "",
        f"Each trained side is a run's final policy (checkpoint `latest`), acting "
        f"deterministically; random is uniform over the action box. {episodes or '?'} episodes "
        "per cell and seed (`envs/arena.play`), seed-matched (both trained sides of a cell come "
        "from seed s), every cell of a seed on the same episode seeds. A tag is one "
        "adversary-prey contact in one step: each adversary's reward in simple_tag is +10 per "
        "(adversary, prey) pair in contact and nothing else, so tags = an adversary's episode "
        "return / 10 (the three adversaries' returns were checked equal on every episode). "
        "Cells: the median over seeds of the per-seed mean, [bootstrap 95% interval].",
        "",
    ]
    head = ["predators \\ prey", *SIDES]
    rows = [
        [f"**{p}**", *(m[p, q].cell(".2f") if (p, q) in m else "—" for q in SIDES)] for p in SIDES
    ]
    lines += report.table(head, rows)
    lines += [
        "",
        "The prey's side of the same episodes: its mean episode return, and the part of it "
        "that is its penalty for leaving the unit square (return = -10 x tags - penalty), "
        "median over seeds [95% interval]:",
        "",
    ]
    ret, bound = matrix(data, "prey_return"), matrix(data, "prey_bound")
    rows = [
        [
            f"**{p}**",
            *(
                f"{ret[p, q].cell('.1f')}; penalty {bound[p, q].point:.1f}"
                if (p, q) in ret
                else "—"
                for q in SIDES
            ),
        ]
        for p in SIDES
    ]
    lines += report.table(head, rows)
    less = paired(data, ("joint", "joint"), ("joint", "random-trained"))
    more = paired(data, ("joint", "joint"), ("random-trained", "joint"))
    lines += [
        "",
        "## The issue's rule",
        "",
        '"Joint play pays if joint prey is tagged less by joint predators than random-trained '
        'prey is, and joint predators tag joint prey more than random-trained predators do." '
        "Paired by seed:",
        "",
    ]

    def row(what: str, d: dict[str, Any], sign: int, spec: str = "+.2f") -> list[Any]:
        favour = sum(1 for v in d["diff"] if v * sign > 0)
        return [
            what,
            ", ".join(format(v, spec) for v in d["diff"]),
            d["ci"].cell(spec),
            f"{'< 0' if sign < 0 else '> 0'} ({favour} of {len(d['diff'])} seeds)",
        ]

    lines += report.table(
        ["difference (tags per episode)", "per seed", "median [95% interval]", "favours joint if"],
        [
            row("joint predators: joint prey - random-trained prey", less, -1),
            row("joint prey: joint predators - random-trained predators", more, +1),
        ],
    )
    own = paired(data, ("joint", "joint"), ("joint", "random-trained"), "prey_return")
    lines += [
        "",
        "Not part of the rule, the prey's own objective in the first comparison (its return "
        "counts its boundary penalty too):",
        "",
    ]
    lines += report.table(
        [
            "difference (prey's episode return)",
            "per seed",
            "median [95% interval]",
            "favours joint if",
        ],
        [row("joint predators: joint prey - random-trained prey", own, +1, "+.1f")],
    )
    lines += ["", f"Verdict: {verdict(less, more)}.", ""]
    lines += control(data)
    lines += ["## Per seed: tags per episode, and the prey's return", ""]
    cell_head = ["seed"] + [f"{SHORT[p]} pred / {SHORT[q]} prey" for p in SIDES for q in SIDES]
    per = {(c["seed"], c["predators"], c["prey"]): c for c in data["cells"]}
    rows = []
    for s in seeds:
        rows.append(
            [s]
            + [
                f"{per[s, p, q]['tags']:.2f} ({per[s, p, q]['prey_return']:.0f})"
                if (s, p, q) in per
                else "—"
                for p in SIDES
                for q in SIDES
            ]
        )
    lines += report.table(cell_head, rows)
    lines += [
        "",
        "J = joint, RT = random-trained, rand = uniform random play. In brackets the prey's "
        "mean episode return (-10 per tag, minus its penalty for "
        "leaving the unit square).",
        "",
        "## Runs",
        "",
    ]
    rows = []
    for r in run_rows:
        mem = r["members"]
        pred, prey = mem.get(PREDATORS, {}), mem.get(PREY, {})
        tab = r["tables"]
        rows.append(
            [
                r["seed"],
                r["arm"],
                f"{r['env_steps']:,}",
                f"{pred.get('env_steps', 0):,.0f}",
                f"{prey.get('env_steps', 0):,.0f}",
                f"{pred.get('driven/prey/steps', 0):,.0f}",
                f"{prey.get('driven/main/steps', 0):,.0f}",
                f"{pred.get('updates', 0):,.0f}",
                f"{r['wall_s']:.0f}",
                f"{tab[PREDATORS]['final'] / TAG_REWARD:.2f}",
                f"{tab[PREY]['final']:.1f}",
            ]
        )
    lines += report.table(
        [
            "seed",
            "arm",
            "agent-steps (budget)",
            "predators' own",
            "prey's own",
            "prey steps driven in predators' copies",
            "predator steps driven in prey's copies",
            "DDPG updates",
            "wall s",
            "in-run eval: tags / ep (predators)",
            "in-run eval: prey return",
        ],
        rows,
    )
    lines += [
        "",
        "The in-run evals (and the curves below) are against each side's *training* opponent: "
        "the other table's current policy under joint play, random play otherwise; they are not "
        "comparable across arms, which is what the matrix is for. Under joint play the "
        "predators' replay also takes their agents' steps in the prey's copies (DDPG is "
        "off-policy, and its ratio gate counts them), so joint predators make about twice the "
        "gradient updates; the PPO prey takes only its own copies' steps in both arms.",
        "",
        f"![matrix and curves]({name}.png)",
    ]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path, **_: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    m = matrix(data)
    grid = np.array([[m[p, q].point if (p, q) in m else np.nan for q in SIDES] for p in SIDES])
    ax = axes[0]
    im = ax.imshow(grid, cmap="Reds")
    for i, p in enumerate(SIDES):
        for j, q in enumerate(SIDES):
            if (p, q) in m:
                iv = m[p, q]
                ax.text(
                    j,
                    i,
                    f"{iv.point:.2f}\n[{iv.lo:.2f}, {iv.hi:.2f}]",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if iv.point > np.nanmax(grid) * 0.6 else "black",
                )
    ax.set_xticks(range(3), [f"{s} prey" for s in SIDES], fontsize=8)
    ax.set_yticks(range(3), [f"{s}\npredators" for s in SIDES], fontsize=8)
    ax.set_title(f"tags per episode, median over {len(seeds_of(data))} seeds", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    colors = {"joint": "tab:red", "random-trained": "tab:blue", CONTROL: "tab:cyan"}
    for ax, learner, scale, title in (
        (axes[1], PREDATORS, TAG_REWARD, "predators' in-run eval: tags per episode"),
        (axes[2], PREY, 1.0, "prey's in-run eval: episode return"),
    ):
        for arm in ARMS:
            for r in (r for r in data["runs"] if r["arm"] == arm):
                if arm == CONTROL and learner == PREY:
                    continue  # the random-trained config's prey again
                ev = r["tables"][learner]["evals"]
                ax.plot(
                    [e["env_steps"] for e in ev],
                    [e["return"] / scale for e in ev],
                    color=colors[arm],
                    alpha=0.6,
                    marker=".",
                    label=f"{arm} (vs {'the other table' if arm == 'joint' else 'random'})"
                    if r["seed"] == min(x["seed"] for x in data["runs"] if x["arm"] == arm)
                    else None,
                )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("agent-steps of both members (the budget)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=None, help="agent-steps (default: the configs')")
    ap.add_argument("--episodes", type=int, default=200, help="episodes per cell and seed")
    ap.add_argument("--out", default=str(ROOT / "runs" / "meet_tag"))
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--name", default="meet_tag")
    ap.add_argument("--arms", nargs="+", default=list(MAIN_ARMS), choices=list(ARMS))
    ap.add_argument("--keep", action="store_true", help="continue the sweep in the .json")
    ap.add_argument("--table", action="store_true", help="only rebuild .md and .png from .json")
    args = ap.parse_args(argv)
    res = Path(args.results)
    store = res / f"{args.name}.json"
    fresh: dict[str, Any] = {"runs": [], "cells": []}
    data = runs.load(store) if (args.table or args.keep) and store.exists() else fresh
    if not args.table:
        for seed in args.seeds:
            dirs = {r["arm"]: r["run_dir"] for r in data["runs"] if r["seed"] == seed}
            for arm in args.arms:
                if arm in dirs:
                    continue
                record = train(arm, seed, args.steps, Path(args.out))
                data["runs"].append(record)
                runs.save(store, data)
                dirs[arm] = record["run_dir"]
                print(
                    f"seed {seed} {arm}: {record['env_steps']:,} agent-steps, "
                    f"{record['wall_s']:.0f} s, in-run predators "
                    f"{record['tables'][PREDATORS]['final']:.1f} prey "
                    f"{record['tables'][PREY]['final']:.1f}",
                    flush=True,
                )
            done = {(c["predators"], c["prey"]) for c in data["cells"] if c["seed"] == seed}
            new = cross_play(dirs, seed, args.episodes, done)
            if new:
                data["cells"] += new
                runs.save(store, data)
    episodes = max((c["episodes"] for c in data["cells"]), default=args.episodes)
    params = {"name": args.name, "episodes": episodes}
    plot(data, res / f"{args.name}.png")
    text = render(data, **params)
    report.write(
        res / f"{args.name}.md",
        text,
        render=render,
        params=params,
        runs_file=store,
        plots=[res / f"{args.name}.png"],
        command=report.command_line(argv),
    )
    print(text)


if __name__ == "__main__":
    main()
