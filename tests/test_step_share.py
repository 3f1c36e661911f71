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
    # Without the share the learner played 7% here (218 of 3,000); the cap lets it fall at
    # most a few vector steps under its share before the gate has held the population back.
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
