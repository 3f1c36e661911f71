"""``[[team]] evaluate = true``: an explorer's or actor's own policy (a population's mean, a
PPO explorer's actor) is evaluated on the run's schedule beside the lead's, into
``summary.json`` ``member_evals`` and the member's ``eval_return`` metric, on every backend
that runs members in processes of this machine, and kept across a resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

import wheeler2
from wheeler2 import cli
from wheeler2.callbacks import Eval
from wheeler2.config import ConfigError, load
from wheeler2.runtime.evaluation import evaluate
from wheeler2.runtime.parts import make_env
from wheeler2.runtime.plan import plan_team
from wheeler2.runtime.seeds import eval_env_seed, eval_reset_seed

# An explorer whose policy never changes: full torque one way. Its evals must all be the return
# of that policy on the run's eval episodes, whatever the lead learns meanwhile.
STILL = """
from dataclasses import dataclass

import numpy as np

from wheeler2.agent import ActOut, Agent


@dataclass
class Params:
    torque: float = 1.0


class Still(Agent):
    Params = Params

    def act(self, obs, explore, state=None):
        return ActOut(np.full((len(obs), self.space.act_dim), self.params.torque, np.float32))

    def observe(self, step):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass
"""

CONFIG = """
[experiment]
name = "member-evals"
total_steps = {total}
eval_every = {every}
eval_episodes = 2
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 5000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100

[[team]]
name = "still"
algo = "./still.py:Still"
role = "explorer"
evaluate = {evaluate}
"""


def _write(
    tmp_path: Path,
    backend: str = "serial",
    total: int = 600,
    evaluate: str = "true",
    every: int = 200,
) -> Path:
    (tmp_path / "still.py").write_text(STILL)
    path = tmp_path / "exp.toml"
    path.write_text(CONFIG.format(backend=backend, total=total, evaluate=evaluate, every=every))
    return path


def _by_hand(path: Path) -> float:
    """The mean return of the still policy on the run's eval episodes: the same env copies and
    reset seeds an evaluating member uses."""
    from still import Still  # type: ignore[import-not-found]

    config = load(path)
    plan = next(p for p in plan_team(config) if p.name == "still")
    env = make_env(config, int(config.experiment.eval_episodes), eval_env_seed(config), plan, {})
    try:
        agent = Still(_space(env), Still.Params())
        return evaluate(agent, env, eval_reset_seed(config)).mean_return
    finally:
        env.close()


def _space(env: Any) -> Any:
    from wheeler2.agent import SpaceInfo

    return SpaceInfo(env.info.obs_dim, env.info.act_dim, env.info.discrete)


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_an_explorer_with_evaluate_is_evaluated_on_the_runs_schedule(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three evals either way. Serially a short interval is as good as a long one (the members
    # take turns); in processes a member steps on between hearing of the others' steps, by as
    # much as the load lets it, so the local run keeps its evals 400 steps apart.
    every = 200 if backend == "serial" else 400
    path = _write(tmp_path, backend, total=3 * every, every=every)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[Eval] = []
    run = Path(wheeler2.run(path, out=str(tmp_path / "runs"), callbacks=[seen.append]))
    summary = json.loads((run / "summary.json").read_text())
    mine = summary["member_evals"]["still"]
    # On the run's schedule, as the lead's (the first step of the member at or past every
    # `every` env steps of all members together, and the closing eval at the budget). Serially
    # the members take turns, so that step is close; in processes the others step on meanwhile
    # by as much as the machine's load lets them, so only the interval is certain ...
    slack = 50 if backend == "serial" else every
    for evals in (mine["eval"], summary["eval"]):
        steps = [e["env_steps"] for e in evals]
        assert len(steps) == 3 and steps[-1] == 3 * every, steps
        assert all(every * k <= s < every * k + slack for k, s in zip((1, 2), steps)), steps
    # ... and of its own policy: the still policy's return on the same eval episodes, at every
    # eval, while the lead's changes as it learns.
    want = _by_hand(path)
    assert [e["return"] for e in mine["eval"]] == pytest.approx([want] * 3)
    assert mine["final_eval_return"] == pytest.approx(want)
    assert len({round(e["return"], 6) for e in summary["eval"]}) > 1
    # Its metric, and callbacks told it is not the lead's.
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["member"] == "still"]
    logged = [float(r["value"]) for r in rows if r["key"] == "eval_return"]
    assert logged == pytest.approx([want] * 3)
    # The live table's figures carry its last eval (the lead's has its own headline).
    shown = recorder_figures(run)
    assert shown["still"]["eval_return"] == pytest.approx(want)
    assert "eval_return" not in shown["target"]
    side = [e for e in seen if e.member == "still"]
    assert len(side) == 3 and not any(e.lead for e in side)
    assert all(e.lead for e in seen if e.member == "target")


def test_without_evaluate_no_member_is_evaluated_but_the_lead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, evaluate="false", total=400)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = Path(wheeler2.run(path, out=str(tmp_path / "runs")))
    summary = json.loads((run / "summary.json").read_text())
    assert "member_evals" not in summary and len(summary["eval"]) == 2


def test_member_evals_survive_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, total=400)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = Path(wheeler2.run(path, out=str(tmp_path / "runs")))
    assert cli.main(["resume", str(run), "--set", "experiment.total_steps=600"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    steps = [e["env_steps"] for e in summary["member_evals"]["still"]["eval"]]
    assert len(steps) == 3 and steps[-1] == 600 and 400 <= steps[1] < 450, steps
    assert len({round(e["return"], 6) for e in summary["member_evals"]["still"]["eval"]}) == 1


def test_evaluate_on_a_learner_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path)
    text = path.read_text().replace('role = "learner"', 'role = "learner"\nevaluate = true')
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    msg = str(err.value)
    assert str(path) in msg and "[[team]] #1 (target) evaluate:" in msg
    assert "a learner is always evaluated" in msg


def test_an_algorithm_by_path_crosses_to_a_member_process(tmp_path: Path) -> None:
    """A member process unpickles its config: the Params of an algorithm named by path live in
    a module imported under a made-up name, which a fresh process rebuilds from ``algo`` (this
    failed with ModuleNotFoundError on local and ray before MemberConfig.__reduce__)."""
    import multiprocessing
    import pickle

    config = load(_write(tmp_path))
    still = next(m for m in config.team if m.name == "still")
    assert type(still.params).__module__.startswith("wheeler2_file_still_")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        blob = pickle.dumps(config)
        assert pool.apply(_team_dict, (blob,)) == config.to_dict()["team"]


def _team_dict(blob: bytes) -> Any:
    import pickle

    return pickle.loads(blob).to_dict()["team"]


def recorder_figures(run: Path) -> dict[str, dict[str, float]]:
    """What the recorder of ``run`` (its summary's evals) hands the live table for figures
    that carry no eval of their own."""
    from wheeler2.runtime.experiment import Recorder, RunState

    summary = json.loads((run / "summary.json").read_text())
    state = RunState(
        evals=summary["eval"],
        member_evals={k: v["eval"] for k, v in summary["member_evals"].items()},
    )
    config = load(run / "config.toml")
    recorder = Recorder(config, run / "again", state)
    try:
        return recorder._with_side_evals({"target": {"env_steps": 1.0}, "still": {}})
    finally:
        recorder.log.close()
