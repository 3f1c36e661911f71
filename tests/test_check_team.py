"""`check` builds the team without training and refuses, as one `error:` line and exit 2, what
`run` used to die on with a traceback minutes later (issue 16.5); `run` refuses it the same way,
before a run directory exists."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from wheeler2 import cli

TAG = """
[experiment]
name = "tag"
total_steps = 400
eval_every = 200
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "pettingzoo:mpe2.simple_tag_v3"
kwargs = { continuous_actions = true, max_cycles = 25 }

[[team]]
name = "predators"
algo = "ddpg"
role = "learner"
agents = ["adversary_*"]
[team.params]
learning_starts = 100
hidden = [16, 16]

[[team]]
name = "prey"
algo = "ppo"
role = "explorer"
agents = ["agent_*"]
[team.params]
n_steps = 50
batch_size = 50
hidden = [16, 16]
"""

CARTPOLE_DDPG = """
[experiment]
name = "cartpole-ddpg"
total_steps = 400
eval_every = 200

[env]
id = "CartPole-v1"

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
"""

PENDULUM_HEAD = """
[experiment]
name = "pendulum-head"
total_steps = 400
eval_every = 200

[env]
id = "Pendulum-v1"

[[task.heads]]
name = "bonus"
reward = "{module}:{function}"

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
"""

HEADS = """
import numpy as np


def raises(obs, action, next_obs, achieved_goal, desired_goal, info):
    raise KeyError("speed")


def scalar(obs, action, next_obs, achieved_goal, desired_goal, info):
    return 1.0


def fine(obs, action, next_obs, achieved_goal, desired_goal, info):
    return -np.abs(np.asarray(action, np.float32)).sum(-1)
"""


def _write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _refused(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["check", "run"])
def test_members_whose_spaces_do_not_fit_one_table_are_refused(tmp_path, capsys, command):
    # Before tables, `check` said ok and `run` crashed 15 s in with "could not broadcast input
    # array from shape (2,14) into shape (2,16)" from the prey's writer.
    path = _write(tmp_path, TAG)
    argv = [command, str(path)] + (["--out", str(tmp_path / "runs")] if command == "run" else [])
    line = _refused(capsys, argv)
    assert f"{path}: [[team]] prey table:" in line
    assert "obs 14" in line and "obs 16" in line and 'table = "prey"' in line
    assert not (tmp_path / "runs").exists()


def test_the_same_team_with_a_table_per_side_checks_ok(tmp_path, capsys):
    text = TAG.replace('role = "explorer"', 'role = "learner"\ntable = "prey"')
    path = _write(tmp_path, text)
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err


def test_an_algorithm_that_cannot_act_in_the_env_is_refused(tmp_path, capsys):
    line = _refused(capsys, ["check", str(_write(tmp_path, CARTPOLE_DDPG))])
    assert "[[team]] target algo:" in line
    assert "'ddpg' cannot be built for this env" in line and "discrete actions 2" in line
    assert "continuous (Box) action space" in line


@pytest.mark.parametrize(
    "function, expected",
    [
        ("raises", "a reward head raised on a probe batch of Pendulum-v1: KeyError: 'speed'"),
        ("scalar", "bonus"),
    ],
)
def test_a_reward_head_that_raises_or_has_the_wrong_shape_is_refused(
    tmp_path, capsys, monkeypatch, function, expected
):
    (tmp_path / "w2_check_heads.py").write_text(HEADS)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = PENDULUM_HEAD.format(module="w2_check_heads", function=function)
    line = _refused(capsys, ["check", str(_write(tmp_path, text))])
    assert "[task] heads:" in line and expected in line


def test_a_working_head_passes(tmp_path, capsys, monkeypatch):
    (tmp_path / "w2_check_heads.py").write_text(HEADS)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = PENDULUM_HEAD.format(module="w2_check_heads", function="fine")
    assert cli.main(["check", str(_write(tmp_path, text))]) == 0, capsys.readouterr().err


def test_a_sync_that_cannot_work_is_refused_naming_the_member(tmp_path, capsys):
    text = """
    [experiment]
    name = "sync-mismatch"
    total_steps = 400
    eval_every = 200

    [env]
    id = "Pendulum-v1"

    [[team]]
    name = "target"
    algo = "ddpg"
    role = "learner"
    [team.params]
    hidden = [32, 32]

    [[team]]
    name = "explorer"
    algo = "ppo"
    role = "explorer"
    sync = { every = 100, keep = ["actor.head"] }
    [team.params]
    hidden = [64, 64]
    """
    line = _refused(capsys, ["check", str(_write(tmp_path, text))])
    assert "[[team]] explorer sync:" in line and "hidden" in line
