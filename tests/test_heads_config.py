"""Reward heads: what the experiment file declares wins over the heads a task class declares, and
the run directory's config.toml records the heads that actually ran, so ``resume`` and ``eval``
(which read that file) build the same heads and critics."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from wheeler2.config import load
from wheeler2.runtime.heads import head_reward_spec, make_heads, make_task, resolved_heads_config
from wheeler2.runtime.parts import make_env

TASK_MODULE = "w2test_heads_task"

TASK = '''
"""A Pendulum task whose class declares two heads of its own."""
import numpy as np

from wheeler2.task import Task, reward_head


class Balance(Task):
    @reward_head(weight=1.0)
    def upright(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return next_obs[:, 0]  # cos(theta): 1 when upright

    @reward_head(weight=0.25)
    def effort(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return -np.square(action).sum(-1)
'''

EXPERIMENT = """
[experiment]
name = "heads"
seed = 0
total_steps = 128
eval_every = 128
eval_episodes = 1
backend = "serial"
progress = false
out = "{out}"

[env]
id = "Pendulum-v1"

[task]
spec = "{module}:Balance"
{heads}
[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 32
"""

EXPLICIT_ENV_HEAD = """
[[task.heads]]
name = "env"
reward = "env"
"""


@pytest.fixture
def experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / f"{TASK_MODULE}.py").write_text(textwrap.dedent(TASK))
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(heads: str) -> Path:
        path = tmp_path / "experiment.toml"
        out = (tmp_path / "runs").as_posix()
        path.write_text(EXPERIMENT.format(out=out, module=TASK_MODULE, heads=heads))
        return path

    return write


def _heads(config):
    env = make_env(config, 1, 0)
    try:
        heads = make_heads(config, env, make_task(config))
    finally:
        env.close()
    return heads


def _summary(heads) -> list[tuple[str, str, float]]:
    return [(h.name, head_reward_spec(h), h.weight) for h in heads.heads]


TASK_HEADS = [
    ("upright", f"{TASK_MODULE}:Balance.upright", 1.0),
    ("effort", f"{TASK_MODULE}:Balance.effort", 0.25),
]


def test_an_explicit_env_head_wins_over_the_task_class_heads(experiment) -> None:
    heads = _heads(load(experiment(EXPLICIT_ENV_HEAD)))
    assert _summary(heads) == [("env", "env", 1.0)]


def test_without_heads_in_the_file_the_task_class_heads_run(experiment) -> None:
    heads = _heads(load(experiment("")))
    assert _summary(heads) == TASK_HEADS
    assert all(h.fn is not None and h.fn.__self__ is not None for h in heads.heads)


def test_the_resolved_config_records_the_heads_and_reads_back_to_them(
    experiment, tmp_path: Path
) -> None:
    config = load(experiment(""))
    heads = _heads(config)
    resolved = resolved_heads_config(config, heads)
    assert [(h.name, h.reward, h.weight) for h in resolved.task.heads] == TASK_HEADS
    # What config.toml holds when the run directory is written from the resolved config.
    saved = tmp_path / "config.toml"
    saved.write_text(resolved.to_toml())
    assert "upright" in saved.read_text() and "effort" in saved.read_text()
    again = load(saved)
    assert _summary(_heads(again)) == TASK_HEADS
    # Resolving a config whose heads are already explicit changes nothing.
    explicit = load(experiment(EXPLICIT_ENV_HEAD))
    assert resolved_heads_config(explicit, _heads(explicit)).task == explicit.task


def test_a_run_records_its_task_heads_and_resumes_with_them(experiment) -> None:
    from wheeler2 import cli

    assert cli.main(["run", str(experiment(""))]) == 0
    (run_dir,) = (experiment("").parent / "runs").iterdir()
    recorded = load(run_dir / "config.toml")
    assert [(h.name, h.reward, h.weight) for h in recorded.task.heads] == TASK_HEADS
    assert cli.main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert cli.main(["resume", str(run_dir)]) == 0
