"""One small team file on serial, local and ray: the same members must drive the same agents
of a multi-agent env, take the same layers from the learner, and run at the niceness they ask
for. (Under ray the explorer's ``agents`` globs were once ignored, so it drove the learner's
agents.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wheeler2.config import load
from wheeler2.runtime import run_experiment

TEAM = """
[experiment]
name = "agree"
seed = 0
total_steps = 400
eval_every = 200
eval_episodes = 1
backend = "{backend}"
progress = false

[env]
id = "unity:mock"
kwargs = {{ num_agents = 2, behaviors = ["Runner", "Helper"] }}

[buffer]
capacity = 2_000
batch_size = 16
prefetch = true  # the learner's prefetch thread on every backend that has one (not ray)

[[team]]
name = "runner"
algo = "ddpg"
role = "learner"
agents = ["Runner*"]
[team.params]
learning_starts = 100
hidden = [16, 16]

[[team]]
name = "helper"
algo = "ppo"
role = "explorer"
agents = ["Helper*"]
nice = 6
sync = {{ every = 50, keep = ["actor.head"] }}
[team.params]
hidden = [16, 16]
activation = "relu"
n_steps = 32
batch_size = 32
"""


def run_team(tmp_path: Path, backend: str) -> dict:
    cfg = tmp_path / f"{backend}.toml"
    cfg.write_text(TEAM.format(backend=backend))
    run = run_experiment(load(cfg), tmp_path / backend)
    team = json.loads((run / "team.json").read_text())
    # Each backend counts the budget its own way (ray: the Board actor's grants): spent exactly.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 400, backend
    # A run that spends its budget ends every member with its final state sent.
    ended = {n: m["ended"] for n, m in summary["members"].items()}
    assert ended == {"runner": "finished", "helper": "finished"}, (backend, ended)
    # CPU seconds only where a member has its process alone (not two members in serial's one).
    cpu = {n: "cpu_s" in m for n, m in summary["members"].items()}
    assert cpu == {n: backend != "serial" for n in summary["members"]}, (backend, cpu)
    # `nice` lowers the explorer's own process only (serial has one process: no figure).
    nice = {n: m.get("nice") for n, m in summary["members"].items()}
    base = float(os.nice(0))  # members start at this test process's niceness
    if backend == "serial":
        assert nice == {"runner": None, "helper": None}, nice
    else:
        assert nice == {"runner": base, "helper": max(6.0, base)}, (backend, nice)
    return {n: {"agents": m["agents"], "synced": m["synced"]} for n, m in team.items()}


def test_serial_local_and_ray_drive_the_same_agents_and_sync_the_same_layers(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mlagents_envs", reason="the Unity adapter needs the unity extra")
    pytest.importorskip("ray", reason="backend ray needs the optional extra")
    serial = run_team(tmp_path, "serial")
    assert serial["runner"]["agents"] == ["Runner"]
    assert serial["helper"]["agents"] == ["Helper"]
    assert serial["runner"]["synced"] == []
    synced = serial["helper"]["synced"]
    assert synced and not any(name.startswith("head") for name in synced)
    assert run_team(tmp_path, "local") == serial
    assert run_team(tmp_path, "ray") == serial
