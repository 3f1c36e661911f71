"""The learner takes every update the ratio gate owes at each of its steps, however many: a cap
of ``PUBLISH_EVERY`` (50) per step once left it behind for good wherever ``updates_per_insert``
x the rows inserted per step exceeded it (a lone SAC learner with 32 env copies at ratio 4 ran
at 1.56 updates per insert, then tried to catch up at the end and was killed as hung)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from wheeler2.config import load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.member import PUBLISH_EVERY, MemberLoop

RATIO, NUM_ENVS, MIN_SIZE = 20.0, 4, 16

RUN = f"""
[experiment]
name = "pace"
seed = 0
total_steps = 48
eval_every = 48
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"
num_envs = {NUM_ENVS}

[buffer]
capacity = 1_000
batch_size = 8
updates_per_insert = {RATIO}

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = {MIN_SIZE}
hidden = [8]
"""


def test_a_learner_takes_every_owed_update_at_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert RATIO * NUM_ENVS > PUBLISH_EVERY  # owed per step: more than one publish's worth
    seen: list[tuple[int, int]] = []
    learn = MemberLoop._learn

    def spy(self: MemberLoop) -> None:
        learn(self)
        assert self.trainer is not None
        seen.append((int(self.trainer.replay.stats()["inserts"]), self.trainer.updates))

    monkeypatch.setattr(MemberLoop, "_learn", spy)
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN)
    run_experiment(load(cfg, out=str(tmp_path / "runs")))
    assert len(seen) == 48 // NUM_ENVS
    for inserts, updates in seen:
        # The gate's count: update u + 1 once u <= ratio * (inserts - min_size).
        want = 0 if inserts < MIN_SIZE else math.floor(RATIO * (inserts - MIN_SIZE)) + 1
        assert updates == want, seen


def test_a_learner_trains_on_its_last_staged_rows(tmp_path: Path) -> None:
    """On local, a learner's own rows reach the replay a chunk per copy at a time; the rows still
    staged at the end are inserted before the owed updates are taken, so the gate's count covers
    every row (here all of them: 50 steps per copy never fill a chunk of 64)."""
    total, ratio, min_size = 200, 1.0, 16
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        RUN.replace("total_steps = 48", f"total_steps = {total}")
        .replace("eval_every = 48", f"eval_every = {total}")
        .replace('backend = "serial"', 'backend = "local"')
        .replace(f"updates_per_insert = {RATIO}", f"updates_per_insert = {ratio}\nchunk = 64")
    )
    run_experiment(load(cfg, out=str(tmp_path / "runs")))
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    target = json.loads(summary.read_text())["members"]["target"]
    assert (target["replay_rows"], target["updates"]) == (total, total - min_size + 1), target
