"""Resume edge cases of the runtime: a checkpoint written before any member reported, and
rates that count only the steps taken in the resumed session."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli
from wheeler2.runtime.member import MemberStats

RUN = """
[experiment]
name = "early"
seed = 0
total_steps = 300
eval_every = 100
eval_episodes = 1
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 2_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
"""


def test_a_checkpoint_from_before_the_first_report_resumes_from_scratch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process (cli.main, what `python -m wheeler2` calls): resume is what is tested,
    # not the process boundary, and a subprocess each paid a torch import.
    cfg = tmp_path / "early.toml"
    cfg.write_text(RUN.format(backend="serial"))
    assert cli.main(["run", str(cfg), "--out", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    run_dir = next((tmp_path / "runs").glob("early-*"))
    latest = run_dir / "checkpoints" / "latest.pt"
    payload = ckpt.load(latest)
    # What the coordinator writes when Ctrl-C comes before any member sent a state.
    payload["members"], payload["member_steps"] = {}, {}
    payload["run"].update(env_steps=0, evals=[], steps_to_threshold=None)
    ckpt.save(latest, payload)
    assert cli.main(["resume", str(run_dir)]) == 0, capsys.readouterr()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 300 and summary["interrupted"] is False
    assert set(ckpt.load(latest)["members"]) == {"target"}


def test_steps_per_s_after_resume_counts_only_new_steps() -> None:
    stats = MemberStats()
    stats.started = time.perf_counter() - 1.0  # this session has run for one second
    stats.resume_from(10_000)  # steps restored from the checkpoint
    stats.env_steps += 50  # taken in this session
    assert 40 < stats.steps_per_s() < 60, stats.steps_per_s()
