"""simple_spread: a team of two algorithms under joint play against one algorithm for all agents.

Two arms, the same agent-step budget, seeds interleaved (seed 0 mixed, seed 0 ppo-team, ...):

* ``mixed``: cfg/simple_spread_mixed.toml, ``[play] joint = true``: a PPO table drives agent_0
  and agent_1 (shared parameters), a DDPG table agent_2, in every copy of both members;
* ``ppo-team``: cfg/simple_spread_team.toml: one PPO member drives all three agents.

``total_steps`` counts each member's own agents' steps only. A ppo-team copy-step is 3 of them;
the mixed team's PPO member counts 2 per copy-step of its copies and its DDPG member 1 per
copy-step of its own, so at one budget the mixed arm steps twice as many env copies (every one
of them with all three agents acting): the agent-steps each table learned from are in the runs
table. The control ``mixed-half`` (on request) is the mixed team at half the budget: as many
env copy-steps as ppo-team.

After the two runs of a seed, each final team (checkpoint ``latest``, written after the closing
eval) plays ``--episodes`` whole episodes of the raw env with ``envs/arena.play``, every agent
driven deterministically by the table that claims it, and so does uniformly random play, all
three on the same episode seeds. The figure is the mean episode return per agent: simple_spread
pays each agent ``(1 - local_ratio)`` times the shared coverage reward (minus the sum over
landmarks of the distance to the nearest agent) plus ``local_ratio`` times its own collision
penalty (-1 per other agent touching it), ``local_ratio = 0.5`` by default; the mean over the
three agents is the team's score. Over seeds: the median of the per-seed means with a
percentile-bootstrap 95% interval (experiments/lib/stats.py), and the paired difference.

    python -m experiments.meet_spread --seeds 0 1 2 3 4
    python -m experiments.meet_spread --keep --arms mixed-half --seeds 0 1 2 3 4   # the control
    python -m experiments.meet_spread --table         # rebuild .md and .png from the .json

Writes experiments/results/meet_spread.md, .json (rewritten after each step; ``--keep``
continues an interrupted sweep) and .png. Notes: results/notes/meet_tag.md.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import CFG, RESULTS, ROOT, report, runs, stats
from experiments.lib.arms import run_config

ENV_ID = "pettingzoo:mpe2.simple_spread_v3"
ENV_KWARGS = {"continuous_actions": True, "max_cycles": 25}
ARMS = {
    "mixed": CFG / "simple_spread_mixed.toml",
    "ppo-team": CFG / "simple_spread_team.toml",
    # A control, run on request (--arms): the mixed team at half the budget, which is as many
    # env copy-steps as ppo-team takes at the full one.
    "mixed-half": CFG / "simple_spread_mixed.toml",
}
MAIN_ARMS = ("mixed", "ppo-team")
BUDGET_SHARE = {"mixed-half": 0.5}
TABLES = {"main": "ppo"}  # the mixed config's table names, as its learners are named
AGENTS = ("agent_0", "agent_1", "agent_2")
ACT_DIM = 5
PLAY_SEED = 2_000_000  # episode seeds of seed s: PLAY_SEED + 10_000 s + k
STEPS = 120_000  # the budget of both arms, in counted agent-steps


def train(arm: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    from wheeler2.config import load

    steps = int(steps * BUDGET_SHARE.get(arm, 1.0))
    sets = [
        "experiment.progress=false",
        'experiment.backend="serial"',
        f"experiment.total_steps={steps}",
        f"experiment.eval_every={max(steps // 6, 1)}",
    ]
    config = load(ARMS[arm], overrides=sets, seed=seed, out=str(out / arm))
    run = run_config(config)
    summary = run.summary
    members = summary.get("members") or {}
    tables = summary.get("tables") or {
        "main": {
            "learner": config.learner.name,
            "final_eval_return": summary["final_eval_return"],
            "eval": summary["eval"],
        }
    }
    return {
        "kind": "run",
        "arm": arm,
        "seed": seed,
        "run_dir": str(run.run_dir),
        "wall_s": run.call_s,
        "env_steps": summary["env_steps"],
        "members": {
            name: {
                k: v
                for k, v in members[name].items()
                if k in ("env_steps", "episodes", "updates", "ended") or k.startswith("driven/")
            }
            for name in members
        },
        "tables": {
            t["learner"]: {"final": t["final_eval_return"], "evals": t["eval"]}
            for t in tables.values()
        },
    }


def team_drivers(run_dir: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Every agent's driver: the first table of the run that claims it."""
    from wheeler2.envs.arena import claimed

    from wheeler2.api import load_tables

    drivers: dict[str, Any] = {}
    who: dict[str, str] = {}
    for t in load_tables(run_dir, "latest"):
        for a in claimed(list(AGENTS), t.agents):
            if a not in drivers:
                drivers[a], who[a] = t, t.name
    missing = [a for a in AGENTS if a not in drivers]
    if missing:
        raise RuntimeError(f"{run_dir}: no table drives {missing}")
    return drivers, who


def measure(drivers: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    from wheeler2.envs.arena import play

    totals = play(ENV_ID, ENV_KWARGS, drivers, episodes, seed=PLAY_SEED + 10_000 * seed)
    per_agent = np.array([[t[a] for a in AGENTS] for t in totals])
    return {
        "episodes": episodes,
        "return": float(per_agent.mean()),  # mean episode return per agent
        "per_agent": {a: float(per_agent[:, i].mean()) for i, a in enumerate(AGENTS)},
        "per_episode": [round(float(x), 4) for x in per_agent.mean(axis=1)],
    }


def evaluate_seed(
    dirs: dict[str, str], seed: int, episodes: int, done: set[str]
) -> list[dict[str, Any]]:
    """The teams of seed ``seed`` not in ``done``, and random play."""
    from wheeler2.envs.players import random_box_player

    out = []
    for arm, run_dir in dirs.items():
        if arm in done:
            continue
        drivers, who = team_drivers(run_dir)
        r = measure(drivers, episodes, seed)
        out.append({"kind": "team", "arm": arm, "seed": seed, "drivers": who} | r)
    if "random" not in done:
        rand = random_box_player(ACT_DIM, 9_000 + seed)
        r = measure(dict.fromkeys(AGENTS, rand), episodes, seed)
        out.append({"kind": "team", "arm": "random", "seed": seed, "drivers": {}} | r)
    for o in out:
        print(
            f"  seed {seed} {o['arm']}: {o['return']:.2f} per agent "
            f"({', '.join(f'{a} {v:.2f}' for a, v in o['per_agent'].items())})",
            flush=True,
        )
    return out


# -- figures ---------------------------------------------------------------------------------------

SHOWN = ("mixed", "ppo-team", "mixed-half", "random")


def by_seed(data: dict[str, Any], arm: str, key: str = "return") -> dict[int, float]:
    return {
        t["seed"]: (t[key] if key == "return" else t["per_agent"][key])
        for t in data["teams"]
        if t["arm"] == arm
    }


def paired(data: dict[str, Any], a: str, b: str) -> tuple[list[int], list[float], Any]:
    x, y = by_seed(data, a), by_seed(data, b)
    seeds = sorted(set(x) & set(y))
    d = [x[s] - y[s] for s in seeds]
    ci = stats.median_ci(d, rng=0) if d else stats.Interval(math.nan, math.nan, math.nan)
    return seeds, d, ci


def render(data: dict[str, Any], name: str = "meet_spread", steps: int = 0, **_: Any) -> str:
    seeds = sorted({t["seed"] for t in data["teams"]})
    episodes = max((t["episodes"] for t in data["teams"]), default=0)
    lines = [
        "# simple_spread: two algorithms sharing a cooperative task",
        "",
        f"Seeds {seeds}, backend `serial`, {steps:,} agent-steps per run (the budget counts "
        "each member's own agents' steps). **mixed**: cfg/simple_spread_mixed.toml, joint play, "
        "a PPO table for agent_0 and agent_1 and a DDPG table for agent_2, each driving its "
        "agents in every copy of both members. **ppo-team**: cfg/simple_spread_team.toml, one "
        "PPO member drives all three agents with shared parameters. **random**: uniform "
        "random actions for all three. MPE2 simple_spread_v3, 3 agents, continuous actions, "
        "max_cycles 25, local_ratio 0.5 (the default): each agent's reward is half the shared "
        "coverage reward (minus the summed distance from each landmark to its nearest agent) "
        "plus half its own collision penalty (-1 per agent touching it).",
        "",
        "The budget counts each member's own agents only, so at one budget the mixed team steps "
        "twice the env copies ppo-team does (each of its members counts 2 or 1 agents per "
        "copy-step, ppo-team 3): see the runs table."
        + (
            " **mixed-half** (a control, where run) is the mixed team at half the budget: as "
            "many env copy-steps as ppo-team."
            if by_seed(data, "mixed-half")
            else ""
        ),
        "",
        f"The figure: mean episode return per agent with all three agents driven by their "
        f"team's final policies (checkpoint `latest`, deterministic actions), {episodes} "
        "episodes per seed with `envs/arena.play`, every arm on the same episode seeds. Over "
        "seeds: median [bootstrap 95% interval]. Higher is better.",
        "",
    ]
    rows = []
    for arm in [a for a in SHOWN if by_seed(data, a)]:
        x = by_seed(data, arm)
        if x:
            ci = stats.median_ci(list(x.values()), rng=0)
            rows.append([f"**{arm}**", ci.cell(".2f"), stats.mean_sd(list(x.values()), ".2f")])
    lines += report.table(["team", "median [95% interval]", "mean ± sd"], rows)
    lines += ["", "Paired by seed:", ""]
    rows = []
    pairs = [("mixed", "ppo-team"), ("mixed-half", "ppo-team"), ("mixed", "random")]
    for a, b in [*pairs, ("ppo-team", "random")]:
        s, d, ci = paired(data, a, b)
        if d:
            rows.append([f"{a} - {b}", ", ".join(f"{v:+.2f}" for v in d), ci.cell("+.2f"), len(s)])
    lines += report.table(["difference", "per seed", "median [95% interval]", "seeds"], rows)
    lines += ["", "## Per seed", ""]
    team = {(t["seed"], t["arm"]): t for t in data["teams"]}
    shown = [a for a in SHOWN if by_seed(data, a)]
    rows = []
    for s in seeds:
        row: list[Any] = [s]
        for arm in shown:
            t = team.get((s, arm))
            row.append(f"{t['return']:.2f}" if t else "—")
        t = team.get((s, "mixed"))
        if t:
            pa = t["per_agent"]
            row += [f"{(pa['agent_0'] + pa['agent_1']) / 2:.2f}", f"{pa['agent_2']:.2f}"]
        else:
            row += ["—", "—"]
        rows.append(row)
    lines += report.table(
        [
            "seed",
            *shown,
            "mixed: PPO agents (0, 1)",
            "mixed: DDPG agent (2)",
        ],
        rows,
    )
    lines += [
        "",
        "The last two columns split the mixed team's score by who drives the agent; the "
        "shared half of the reward is the same for all three, so they differ only in the "
        "collision penalties.",
        "",
        "## Runs",
        "",
    ]
    rows = []
    for r in sorted(data["runs"], key=lambda r: (r["seed"], r["arm"] != "mixed")):
        mem = r["members"]
        own = ", ".join(f"{n} {m.get('env_steps', 0):,.0f}" for n, m in mem.items())
        driven = ", ".join(
            f"{TABLES.get(k.split('/')[1], k.split('/')[1])} {v:,.0f} in {n}'s copies"
            for n, m in mem.items()
            for k, v in m.items()
            if k.startswith("driven/") and k.endswith("/steps")
        )
        updates = ", ".join(f"{n} {m['updates']:,.0f}" for n, m in mem.items() if "updates" in m)
        inrun = ", ".join(f"{n} {t['final']:.2f}" for n, t in r["tables"].items())
        rows.append(
            [
                r["seed"],
                r["arm"],
                f"{r['env_steps']:,}",
                own,
                driven or "—",
                updates or "—",
                f"{r['wall_s']:.0f}",
                inrun,
            ]
        )
    lines += report.table(
        [
            "seed",
            "arm",
            "agent-steps (budget)",
            "own agent-steps per member",
            "agent-steps driven for a table",
            "DDPG updates",
            "wall s",
            "in-run final eval per table",
        ],
        rows,
    )
    lines += [
        "",
        "Copy-steps (one step of one env copy, all three agents acting): ppo-team takes "
        "budget / 3; mixed takes (budget / 3) x 2, half in each member's copies. The in-run "
        "evals (10 episodes, the curves below) are of whole teams here too (under joint play a "
        "table's eval copies have the other table's current policy in them), each table "
        "scored on its own agents' rows.",
        "",
        f"![returns and curves]({name}.png)",
        "",
        "Notes on this and the simple_tag cross-play (what each figure means, what was and was "
        "not tuned): [notes/meet_tag.md](notes/meet_tag.md).",
    ]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path, **_: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    ax = axes[0]
    colors = {
        "mixed": "tab:purple",
        "ppo-team": "tab:green",
        "mixed-half": "tab:orange",
        "random": "tab:gray",
    }
    shown = [a for a in SHOWN if by_seed(data, a)]
    for i, arm in enumerate(shown):
        x = by_seed(data, arm)
        if not x:
            continue
        vals = list(x.values())
        ax.scatter([i] * len(vals), vals, color=colors[arm], alpha=0.6, zorder=3)
        for s, v in x.items():
            ax.annotate(str(s), (i, v), xytext=(5, 0), textcoords="offset points", fontsize=7)
        ci = stats.median_ci(vals, rng=0)
        ax.errorbar(
            [i + 0.2],
            [ci.point],
            yerr=[[ci.point - ci.lo], [ci.hi - ci.point]],
            fmt="D",
            color="k",
            capsize=4,
        )
    ax.set_xticks(range(len(shown)), shown)
    ax.set_ylabel("mean episode return per agent")
    ax.set_title("arena: whole teams, per seed (dots) and median [95% CI]", fontsize=10)
    ax = axes[1]
    styles = {
        ("mixed", "ppo"): "-",
        ("mixed", "ddpg"): "--",
        ("mixed-half", "ppo"): "-",
        ("mixed-half", "ddpg"): "--",
        ("ppo-team", "spread"): "-",
    }
    labelled = set()
    for r in data["runs"]:
        for learner, t in r["tables"].items():
            key = (r["arm"], learner)
            label = f"{r['arm']}: {learner} table" if key not in labelled else None
            labelled.add(key)
            ev = t["evals"]
            ax.plot(
                [e["env_steps"] for e in ev],
                [e["return"] for e in ev],
                styles.get(key, ":"),
                color=colors[r["arm"]],
                alpha=0.6,
                marker=".",
                label=label,
            )
    rand = by_seed(data, "random")
    if rand:
        ax.axhline(float(np.median(list(rand.values()))), color="k", ls=":", label="random")
    ax.set_title("in-run evals (10 episodes; each table on its own agents)", fontsize=10)
    ax.set_xlabel("agent-steps (the budget)")
    ax.set_ylabel("mean episode return per agent")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=STEPS, help="agent-steps per run")
    ap.add_argument("--episodes", type=int, default=100, help="arena episodes per seed")
    ap.add_argument("--out", default=str(ROOT / "runs" / "meet_spread"))
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--name", default="meet_spread")
    ap.add_argument("--arms", nargs="+", default=list(MAIN_ARMS), choices=list(ARMS))
    ap.add_argument("--keep", action="store_true", help="continue the sweep in the .json")
    ap.add_argument("--table", action="store_true", help="only rebuild .md and .png from .json")
    args = ap.parse_args(argv)
    res = Path(args.results)
    store = res / f"{args.name}.json"
    fresh: dict[str, Any] = {"runs": [], "teams": [], "steps": args.steps}
    data = runs.load(store) if (args.table or args.keep) and store.exists() else fresh
    if not args.table:
        for seed in args.seeds:
            dirs = {r["arm"]: r["run_dir"] for r in data["runs"] if r["seed"] == seed}
            for arm in args.arms:
                if arm in dirs:
                    continue
                record = train(arm, seed, data["steps"], Path(args.out))
                data["runs"].append(record)
                runs.save(store, data)
                dirs[arm] = record["run_dir"]
                print(
                    f"seed {seed} {arm}: {record['env_steps']:,} agent-steps, "
                    f"{record['wall_s']:.0f} s, in-run "
                    + ", ".join(f"{n} {t['final']:.2f}" for n, t in record["tables"].items()),
                    flush=True,
                )
            done = {t["arm"] for t in data["teams"] if t["seed"] == seed}
            new = evaluate_seed(dirs, seed, args.episodes, done)
            if new:
                data["teams"] += new
                runs.save(store, data)
    params = {"name": args.name, "steps": data["steps"]}
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
