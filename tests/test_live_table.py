"""The live table and metrics (issue 38, item 6): a loss column per kind (critic, actor, policy,
value) instead of one "loss" mixing a DDPG critic with a PPO policy; learner updates/s, replay
fill and sync lag; the best eval so far; metrics.csv and the trackers under the same names."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rich.console import Console

from wheeler2 import log as runlog

TARGET = "target-learner-long-name"


def figures() -> dict[str, dict[str, Any]]:
    """What the members of a DDPG + PPO + DQN team report (member.py, the algorithms' names)."""
    return {
        TARGET: {
            "env_steps": 1_234_567,
            "episode_return": -123.456,
            "episode_return/upright": -100.0,
            "episode_return/effort": -23.456,
            "episode_return/third": -1.0,
            "actor_loss": 9.0,
            "critic_loss": 0.25,
            "updates": 1_000.0,
            "wall_s": 10.0,
            "replay_rows": 37_200.0,
            "replay_fill": 0.372,
        },
        "ppo": {
            "env_steps": 42,
            "approx_kl": 0.01,
            "clip_fraction": 0.2,
            "policy_loss": -0.5,
            "value_loss": 3.0,
            "sync_version_lag": 2.0,
        },
        "dqn": {"env_steps": 7, "loss": 0.75, "epsilon": 0.5},
    }


def reported(log: runlog.RunLog) -> dict[str, dict[str, Any]]:
    """Two reports of each member, as the coordinator hands them over, 2 s apart."""
    named = {}
    for member, values in figures().items():
        log.report(member, 100, values)
        later = dict(values)
        if "updates" in later:
            later.update(updates=1_800.0, wall_s=12.0)
        named[member] = log.report(member, 200, later)
    return named


def render(log: runlog.RunLog, members: dict[str, dict[str, Any]], width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(log._table(1_234_616, members, -150.0, width=width))
    return console.export_text().splitlines()


def cells(log: runlog.RunLog, members: dict[str, dict[str, Any]], width: int) -> dict:
    return dict(log._columns(members, width))


def test_losses_are_named_by_kind_in_the_table_csv_and_trackers(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    class Spy:
        def scalars(self, member: str, env_steps: int, values: dict[str, float]) -> None:
            seen.extend((member, key) for key in values)

        def summary(self, figures: dict[str, Any]) -> None: ...
        def flush(self) -> None: ...
        def close(self) -> None: ...

    with runlog.RunLog(tmp_path, total_steps=10_000_000, progress=False, trackers=[Spy()]) as log:
        members = reported(log)
        table = cells(log, members, 200)
    assert [h for h in table if h in ("critic", "actor", "policy", "value")] == [
        "critic",
        "actor",
        "policy",
        "value",
    ]
    assert "loss" not in table
    assert table["critic"] == {TARGET: "0.25", "ppo": "", "dqn": "0.75"}  # DQN's TD loss on Q
    assert table["actor"] == {TARGET: "9", "ppo": "", "dqn": ""}
    assert table["policy"] == {TARGET: "", "ppo": "-0.5", "dqn": ""}
    assert table["value"] == {TARGET: "", "ppo": "3", "dqn": ""}
    with open(tmp_path / runlog.METRICS_FILE, newline="") as f:
        rows = {(r["member"], r["key"]) for r in csv.DictReader(f)}
    assert ("dqn", "critic_loss") in rows and ("dqn", "loss") not in rows
    assert {("ppo", "policy_loss"), ("ppo", "value_loss"), (TARGET, "actor_loss")} <= rows
    assert set(seen) == rows  # the trackers get what metrics.csv gets


def test_learner_pace_replay_fill_sync_lag_and_the_best_eval(tmp_path: Path) -> None:
    with runlog.RunLog(tmp_path, total_steps=10_000_000, progress=False, tensorboard=False) as log:
        members = reported(log)
        log.eval(100, 1.0, -150.0, None)
        log.eval(200, 2.0, -180.0, None)  # worse: the best stays
        table = cells(log, members, 200)
        plain = log._plain_line(1_234_616, members, -180.0)
        headline = render(log, members, 200)[0]
    # 800 updates in the 2 s between the learner's two reports (its own clock).
    assert members[TARGET]["updates_per_s"] == 400.0
    assert table["upd/s"] == {TARGET: "400", "ppo": "", "dqn": ""}
    assert table["replay"][TARGET] == "37%" and table["lag"]["ppo"] == "2"
    assert "last eval -150.0   best -150.0" in headline
    assert "eval -180.0 (best -150.0)" in plain
    assert "upd/s 400 replay 37%" in plain and "ppo: 42 lag 2" in plain
    with open(tmp_path / runlog.METRICS_FILE, newline="") as f:
        rows = [(r["member"], r["key"], float(r["value"])) for r in csv.DictReader(f)]
    assert (TARGET, "updates_per_s", 400.0) in rows and (TARGET, "replay_fill", 0.372) in rows
    assert [v for m, k, v in rows if (m, k) == ("eval", "best_return")] == [-150.0, -150.0]


def test_a_narrow_terminal_drops_the_least_wanted_columns_never_wraps(tmp_path: Path) -> None:
    with runlog.RunLog(tmp_path, total_steps=10_000_000, progress=False, tensorboard=False) as log:
        members = reported(log)
        wide, narrow = render(log, members, 200), render(log, members, 80)
        kept = list(cells(log, members, 80))
    header = next(line for line in wide if line.lstrip().startswith("member"))
    columns = ["env steps", "steps/s", "return", "upright", "effort"]
    columns += ["critic", "actor", "policy", "value", "upd/s", "replay", "lag"]
    order = [header.index(c) for c in columns]
    assert order == sorted(order), header
    assert "third" not in header  # at most two head columns
    for absent in ("actor_loss", "approx_kl", "clip_fraction", "epsilon"):  # issue 16
        assert absent not in "\n".join(wide)
    assert max(len(line) for line in narrow) <= 80, "\n".join(narrow)
    assert kept[:4] == ["member", "env steps", "steps/s", "return"]
    assert {"critic", "policy", "value"} <= set(kept)  # the losses stay longest
    assert "effort" not in kept and "upright" not in kept  # the heads go first
    rows = {line.split()[0]: line.split() for line in narrow[3:] if line.split()}
    assert "-123" in rows["target-learner-l"][3]


def test_a_member_evaluated_beside_the_lead_shows_its_last_eval(tmp_path: Path) -> None:
    """Another table's learner or an explorer with evaluate = true: its own last eval in an
    ``eval`` column and on the plain line; the others' cells stay empty."""
    with runlog.RunLog(tmp_path, total_steps=10_000_000, progress=False, tensorboard=False) as log:
        members = reported(log)
        members["ppo"]["eval_return"] = -87.5
        table = cells(log, members, 200)
        plain = log._plain_line(1_234_616, members, -150.0)
    assert table["eval"] == {TARGET: "", "ppo": "-87.5", "dqn": ""}
    assert "ppo: 42 eval -87.5 lag 2" in plain
