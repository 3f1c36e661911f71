"""An eval that outlasts ``heartbeat_s`` is not a hang: the member reports (its heartbeat)
every 2 s while it evaluates, and the serial backend's alarm counts from those reports, as the
coordinator's heartbeat does for the other backends. Before, a healthy run whose eval (long
episodes, a slow env) took longer than ``heartbeat_s`` was killed as hung."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wheeler2.config import load
from wheeler2.runtime import run_experiment

# One eval: 200 vector steps of 2 copies at >= 15 ms each, >= 6 s against a heartbeat of 4 s.
RUN = """
[experiment]
name = "long-eval"
seed = 1
total_steps = 40
eval_every = 40
eval_episodes = 2
backend = "{backend}"
heartbeat_s = 4
progress = false

[env]
id = "wheeler2/Slow-v0"
kwargs = {{ env_id = "Pendulum-v1", step_ms = 15.0 }}

[buffer]
capacity = 1_000
batch_size = 8

[[team]]
name = "learner"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 16
hidden = [8]
"""


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_an_eval_longer_than_heartbeat_s_is_not_a_hang(tmp_path: Path, backend: str) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN.format(backend=backend))
    run_dir = run_experiment(load(cfg, out=str(tmp_path / "runs")))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop"]["by"] == "total_steps", summary["stop"]
    assert [e["env_steps"] for e in summary["eval"]] == [40]
