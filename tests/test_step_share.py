"""A learner's ``step_share``: beside a fast population a TD3 learner pays the gate its owed
updates at every step and so plays only a few percent of the run (1.6% of Swimmer's 500k
beside a CEM population of ten); with a share it pays fewer per step while below it, the gate
holds the population back, and the learner's own actor plays its share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wheeler2.config import ConfigError, load
from wheeler2.runtime import run_experiment

TOTAL, MIN_SIZE = 3_000, 200

TEAM = f"""
[experiment]
name = "share"
seed = 0
total_steps = {TOTAL}
eval_every = {TOTAL}
eval_episodes = 1
backend = "local"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 10_000
batch_size = 64

[[team]]
name = "target"
algo = "td3"
role = "learner"
step_share = 0.5
[team.params]
learning_starts = {MIN_SIZE}
hidden = [64, 64]

[[team]]
name = "population"
algo = "cem"
role = "explorer"
sync = {{ every = 200 }}
[team.params]
hidden = [64, 64]
pop_size = 4
elites = 2
inject = true
"""


def test_a_learner_plays_its_step_share_beside_a_faster_population(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    run_experiment(load(path, out=str(tmp_path / "runs")))
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    members = json.loads(summary.read_text())["members"]
    own, others = members["target"]["env_steps"], members["population"]["env_steps"]
    assert own + others == TOTAL
    # Without the share the learner played 7% here (218 of 3,000). It can end under its share
    # by what the others insert before the gate holds them (the warm-up, the gate's tolerance):
    # 0.488 at 0.5 in this short run.
    assert own >= 0.45 * TOTAL, members
    # The ratio still holds: every row inserted is paid for, by the end.
    assert members["target"]["updates"] == TOTAL - MIN_SIZE + 1, members


def _refusal(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "team.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.file == str(path)
    assert info.value.key == "step_share"
    return info.value


def test_step_share_on_the_serial_backend_is_refused(tmp_path: Path) -> None:
    err = _refusal(tmp_path, TEAM.replace('backend = "local"', 'backend = "serial"'))
    assert err.table == "[[team]] target"
    assert "steps every member in turn" in str(err)


def test_step_share_on_the_ray_backend_is_refused(tmp_path: Path) -> None:
    err = _refusal(tmp_path, TEAM.replace('backend = "local"', 'backend = "ray"'))
    assert "count a batch as an update when they serve it" in str(err)


def test_step_share_on_an_explorer_is_refused(tmp_path: Path) -> None:
    text = TEAM.replace("step_share = 0.5\n", "").replace(
        'role = "explorer"\n', 'role = "explorer"\nstep_share = 0.2\n'
    )
    err = _refusal(tmp_path, text)
    assert err.table.endswith("(population)")
    assert "learner's least share" in str(err)


def test_step_share_on_an_on_policy_learner_is_refused(tmp_path: Path) -> None:
    text = (
        TEAM.split('[[team]]\nname = "population"')[0]
        .replace('algo = "td3"', 'algo = "ppo"')
        .replace(f"learning_starts = {MIN_SIZE}\n", "")
    )
    text += '[[team]]\nname = "helper"\nalgo = "ppo"\nrole = "explorer"\n'
    err = _refusal(tmp_path, text)
    assert "learns from its own rollouts" in str(err)


def test_step_share_on_a_learner_alone_is_refused(tmp_path: Path) -> None:
    text = TEAM.split('[[team]]\nname = "population"')[0]
    err = _refusal(tmp_path, text)
    assert "no explorer or actor writes into its table" in str(err)


def test_step_share_beside_another_table_is_refused(tmp_path: Path) -> None:
    other = """
[[team]]
name = "other"
algo = "td3"
role = "learner"
table = "second"
[team.params]
hidden = [64, 64]
"""
    err = _refusal(tmp_path, TEAM + other)
    assert "the gate holds back only its own table's producers" in str(err)


def test_step_share_of_one_is_refused(tmp_path: Path) -> None:
    err = _refusal(tmp_path, TEAM.replace("step_share = 0.5", "step_share = 1.0"))
    assert str(err).endswith("step_share: expected a number in [0, 1), got 1.0")


def test_step_share_survives_the_resolved_file(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    config = load(path)
    again = tmp_path / "again.toml"
    again.write_text(config.to_toml())
    assert load(again).team[0].step_share == 0.5


def test_a_producer_held_by_the_gate_beats_while_it_waits() -> None:
    """Held for seconds (a learner below its share pays few updates), a producer still calls
    its ``on_wait`` about every second, so its member keeps reporting and the coordinator does
    not kill it as hung (the first step_share runs of Swimmer lost their population so)."""
    import threading
    import time

    import numpy as np

    from wheeler2.buffer import Layout, Replay, ReplayConfig

    cfg = ReplayConfig(
        capacity=100,
        batch_size=4,
        updates_per_insert=1.0,
        min_size=10,
        chunk=1,
        gate_tolerance=0,
        timeout_s=30,
    )
    obs, act, z = np.zeros((1, 3), np.float32), np.zeros((1, 1), np.float32), np.zeros(1, bool)
    with Replay.create(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9) as replay:
        learner = replay.writer(num_envs=1, block=False)
        for _ in range(20):  # the learner's own rows: 10 past min_size, none paid yet
            learner.add(obs, act, np.zeros((1, 1)), obs, z, z)
        learner.flush()
        beats: list[float] = []
        replay.on_wait = lambda: beats.append(time.monotonic())
        producer = replay.writer(num_envs=1, block=True)
        held = threading.Thread(
            target=lambda: producer.add(obs, act, np.zeros((1, 1)), obs, z, z), daemon=True
        )
        held.start()
        time.sleep(2.5)
        assert held.is_alive(), "the gate let the producer through unpaid"
        assert len(beats) >= 2, beats
        for _ in range(11):  # pay what the gate owes: the producer goes on
            replay.sample()
        held.join(timeout=5)
        assert not held.is_alive()
        assert replay.stats()["inserts"] == 21


@pytest.mark.slow
def test_a_population_held_for_longer_than_the_heartbeat_is_not_killed(tmp_path: Path) -> None:
    """End to end: a slow learner (256-256, batch 256) catching up to its share after a warm-up
    of 1,500 steps holds the population for longer than ``heartbeat_s = 4``. Before producers
    reported while held, the coordinator killed the population as hung (17 s into this run)."""
    text = (
        TEAM.replace(f"total_steps = {TOTAL}", "total_steps = 8000\nheartbeat_s = 4")
        .replace(f"eval_every = {TOTAL}", "eval_every = 8000")
        .replace(f"learning_starts = {MIN_SIZE}", "learning_starts = 1500")
        .replace("hidden = [64, 64]", "hidden = [256, 256]")
        .replace("batch_size = 64", "batch_size = 256")
    )
    path = tmp_path / "team.toml"
    path.write_text(text)
    run_experiment(load(path, out=str(tmp_path / "runs")))
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    members = json.loads(summary.read_text())["members"]
    assert members["target"]["env_steps"] >= 0.45 * 8000, members
