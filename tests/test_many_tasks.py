"""experiments/many_tasks.py (issue 37): the team arm is the shipped team file with only the env
and the threshold changed, a solo arm is one learner with nothing set, the verdicts read the
median final against the threshold, and the run order puts unlike arms side by side."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from few_resamples import few_resamples

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # experiments/ is not installed: its scripts run from the root
    sys.path.insert(0, str(ROOT))

from experiments import many_tasks as mt  # noqa: E402
from wheeler2.config import dumps_toml, load  # noqa: E402


def _diff(a: dict, b: dict, at: str = "") -> set[str]:
    """The dotted keys where two parsed TOML documents differ."""
    out: set[str] = set()
    for k in set(a) | set(b):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out |= _diff(x, y, f"{at}{k}.")
        elif x != y:
            out.add(f"{at}{k}")
    return out


def test_the_team_arm_changes_only_the_env_and_the_threshold() -> None:
    shipped = tomllib.loads((ROOT / "cfg" / mt.TEAM_FILE).read_text())
    for task, (env_id, threshold) in mt.TASKS.items():
        raw = mt.arm_config("team", task)
        changed = _diff(shipped, raw)
        assert changed <= {"env.id", "experiment.eval_threshold"}, (task, changed)
        assert raw["env"]["id"] == env_id and raw["experiment"]["eval_threshold"] == threshold
        assert raw["team"] == shipped["team"]


def test_a_solo_arm_is_its_algorithm_at_its_defaults_on_the_same_protocol(
    tmp_path: Path,
) -> None:
    team = mt.arm_config("team", "hopper")["experiment"]
    for algo in mt.SOLOS:
        raw = mt.arm_config(algo, "hopper")
        assert raw["team"] == [{"name": "target", "algo": algo, "role": "learner"}]
        assert "buffer" not in raw  # the buffer at its defaults too
        exp = raw["experiment"]
        for key in ("total_steps", "eval_every", "eval_episodes", "eval_threshold"):
            assert exp[key] == team[key], key
        # ... and it is a file wheeler2 takes.
        path = tmp_path / f"{algo}.toml"
        path.write_text(dumps_toml(raw))
        config = load(path)
        assert config.env.id == "Hopper-v5" and config.team[0].algo == algo


def test_solved_is_the_median_final_at_or_above_the_threshold() -> None:
    assert mt.verdict([95.0, 91.0, 10.0], 90.0) == (True, 2)
    assert mt.verdict([95.0, 80.0, 10.0], 90.0) == (False, 1)
    assert mt.verdict([-150.0, -199.0, -900.0], -200.0) == (True, 2)
    # Above, as the run's own eval_threshold and `wheeler2 report` judge: at it is not solved.
    assert mt.verdict([-150.0, -200.0, -900.0], -200.0) == (False, 1)
    # The targets: the team must solve all four, and every solo must fall short somewhere.
    lines = mt._targets({"team": (4, 4), "td3": (3, 4), "sac": (2, 4)}, 4)
    assert "(**met**)" in lines[0] and "(**met**)" in lines[1]
    lines = mt._targets({"team": (3, 4), "td3": (4, 4)}, 4)
    assert "(**not met**)" in lines[0] and "(**not met**)" in lines[1]
    lines = mt._targets({"team": (2, 2), "td3": (2, 2)}, 4)
    assert "(**open**)" in lines[0] and "(**open**)" in lines[1]
    # One task settled unsolved decides both: the team misses it, that solo falls short.
    lines = mt._targets({"team": (1, 2), "td3": (0, 1), "sac": (2, 2)}, 4)
    assert "(**not met**)" in lines[0] and "(**open**)" in lines[1]
    lines = mt._targets({"team": (2, 2), "td3": (0, 1), "sac": (2, 3)}, 4)
    assert "(**open**)" in lines[0] and "(**met**)" in lines[1]


def test_seeds_still_to_run_settle_nothing_until_they_cannot_move_the_median() -> None:
    assert mt.settled([33.0, 39.0], 5, 100.0) is None  # three above would put it over
    assert mt.settled([33.0, 39.0, 44.0], 5, 100.0) is False
    assert mt.settled([150.0, 120.0, 101.0], 5, 100.0) is True
    assert mt.settled([150.0, 120.0, 100.0, 10.0], 5, 100.0) is None
    assert mt.settled([150.0, 20.0, 10.0, 10.0, 200.0], 5, 100.0) is False
    assert mt.settled([], 5, 100.0) is None
    # Of an even count the median is the mean of the middle two: one seed in two decides nothing.
    assert mt.settled([10.0], 2, 5.0) is None


def test_a_task_with_seeds_still_to_run_says_so_far_and_decides_no_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    few_resamples(monkeypatch)  # the intervals' digits are not what is checked here
    curve = [[1000, -1200.0], [2000, -150.0]]
    record = {"task": "pendulum", "arm": "team", "seed": 0, "steps": 2000, "curve": curve,
              "final": -150.0, "learner_curve": curve, "learner_final": -150.0,
              "wall_s": 1.0}  # fmt: skip
    params = {"tasks": ["pendulum"], "arms": ["team"], "steps": 2000, "date": "-", "cores": 2}
    body = mt.render([record], seeds=[0, 1, 2], **params)  # type: ignore[arg-type]
    assert "**solved** so far: -150.0" in body and "1 of 1 seeds (1 of 3 run)" in body
    assert "0 of 0 settled" not in body and "(**open**)" in body
    body = mt.render([record], seeds=[0], **params)  # type: ignore[arg-type]
    assert "**solved**: -150.0" in body and "1 of 1 settled" in body and "(**met**)" in body
    # Two of three seeds below settle the task before the third has run.
    low = [{**record, "seed": k, "final": -900.0} for k in (1, 2)]
    body = mt.render(low, seeds=[0, 1, 2], **params)  # type: ignore[arg-type]
    assert "not solved (settled): -900.0" in body and "(2 of 3 run)" in body
    assert "0 of 1 settled" in body and "(**not met**)" in body


def test_every_run_is_planned_once_and_neighbours_differ_in_arm() -> None:
    tasks, arms, seeds = list(mt.TASKS), list(mt.ARMS), [0, 1, 2]
    order = mt.plan(tasks, arms, seeds)
    assert sorted(order) == sorted((t, a, s) for t in tasks for a in arms for s in seeds)
    assert all(x[1] != y[1] for x, y in zip(order, order[1:]))
    # Seed by seed, and the arm that starts a task's block moves on from seed to seed.
    assert [s for _, _, s in order] == sorted(s for _, _, s in order)
    firsts = {(t, s): a for t, a, s in reversed(order)}
    assert len({firsts[("hopper", s)] for s in seeds}) == 3


def test_a_command_that_runs_one_cell_still_writes_the_whole_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    few_resamples(monkeypatch)
    curve = [[1000, -1200.0], [2000, -150.0]]
    record = {"task": "pendulum", "arm": "ddpg", "seed": 2, "steps": 2000, "curve": curve,
              "final": -150.0, "wall_s": 1.0}  # fmt: skip
    out = tmp_path / "many_tasks.md"
    (tmp_path / "many_tasks_runs.jsonl").write_text(json.dumps(record) + "\n")
    argv = ["--tasks", "pendulum", "--arms", "ddpg", "--seeds", "2", "--steps", "2000"]
    assert mt.main([*argv, "--out", str(out)]) == 0  # the one run is stored: nothing runs
    body = out.read_text()
    header = next(line for line in body.splitlines() if line.startswith("| arm |"))
    assert all(f"| {task} (> " in header for task in mt.TASKS)
    assert all(f"\n| {arm} | " in body for arm in mt.ARMS)
    assert "1 of 1 seeds (1 of 5 run)" in body  # seeds 0-4 are the grid, 2 among them
