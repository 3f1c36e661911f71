"""A task (or a reward head) given by a file path: ``spec = "./mytask.py:Heads"`` resolves
against the config file's folder, not the working directory or PYTHONPATH, and the run
directory records the absolute path so ``eval`` and ``resume`` work from anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from wheeler2 import cli, registry
from wheeler2.config import ConfigError, load
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.parts import make_env

TASK = """
import numpy as np
from wheeler2.task import Task, reward_head


class Heads(Task):
    @reward_head(weight=1.0)
    def upright(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return next_obs[:, 0] - 1.0  # cos(theta) - 1: 0 when upright

    @reward_head(weight=0.1)
    def effort(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return -np.square(action).sum(-1)


def spin(obs, action, next_obs, achieved_goal, desired_goal, info):
    return -np.abs(next_obs[:, 2])
"""

CFG = """
[experiment]
name = "pathtask"
seed = 1
total_steps = {total}
eval_every = 200
eval_episodes = 1
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"

[task]
spec = "./tasks_here/mytask.py:Heads"

[buffer]
capacity = 2_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [16]
"""


def _write(tmp_path: Path, total: int = 400, backend: str = "serial", extra: str = "") -> Path:
    folder = tmp_path / "project"
    (folder / "tasks_here").mkdir(parents=True)
    (folder / "tasks_here" / "mytask.py").write_text(TASK)
    path = folder / "exp.toml"
    path.write_text(CFG.format(total=total, backend=backend) + extra)
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # Another folder and no PYTHONPATH: only the config's own folder can find the task file.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "wheeler2", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env=env,
    )


def test_spec_is_resolved_against_the_config_folder(tmp_path: Path) -> None:
    path = _write(tmp_path)
    config = load(path)
    expected = (path.parent / "tasks_here" / "mytask.py").resolve()
    assert config.task.spec == f"{expected}:Heads"
    task = make_task(config)
    assert type(task).__name__ == "Heads"
    # Loaded once under a name of its own; resolving it again gives the same class.
    assert registry.resolve_object(config.task.spec) is type(task)
    assert type(task).__module__.startswith("wheeler2_file_mytask_")


def test_a_head_function_by_path_is_called(tmp_path: Path) -> None:
    extra = """
[[task.heads]]
name = "spin"
reward = "tasks_here/mytask.py:spin"
"""
    path = _write(tmp_path, extra=extra)
    config = load(path)
    env = make_env(config, 2, 0)
    try:
        heads = make_heads(config, env, make_task(config))
        assert heads.names == ("spin",)
        next_obs = np.array([[1.0, 0.0, -3.0], [0.0, 1.0, 2.0]], np.float32)
        out = heads.compute(
            next_obs, np.zeros((2, 1)), next_obs, None, None, [{}, {}], np.zeros(2, np.float32)
        )
        np.testing.assert_allclose(out[:, 0], [-3.0, -2.0])
    finally:
        env.close()


def test_a_head_function_by_path_is_recorded_by_its_path_for_another_process(
    tmp_path: Path,
) -> None:
    """The run directory's config.toml names a head function from a file by the file's path:
    the module name it was loaded under here means nothing to the process that evals or
    resumes the run (with no [task] spec to load the file first)."""
    from wheeler2.runtime.heads import resolved_heads_config

    extra = """
[[task.heads]]
name = "spin"
reward = "tasks_here/mytask.py:spin"
"""
    path = _write(tmp_path, extra=extra)
    path.write_text(path.read_text().replace('[task]\nspec = "./tasks_here/mytask.py:Heads"', ""))
    config = load(path)
    env = make_env(config, 1, 0)
    try:
        written = resolved_heads_config(config, make_heads(config, env, make_task(config)))
    finally:
        env.close()
    (head,) = written.task.heads
    assert head.reward == f"{(path.parent / 'tasks_here' / 'mytask.py').resolve()}:spin"
    saved = tmp_path / "run" / "config.toml"
    saved.parent.mkdir()
    saved.write_text(written.to_toml())
    code = "import sys; from wheeler2.config import load; load(sys.argv[1])"
    res = subprocess.run(
        [sys.executable, "-c", code, str(saved)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr


def test_missing_file_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("mytask.py", "nosuch.py"))
    with pytest.raises(ConfigError) as err:
        load(path)
    text = str(err.value)
    assert "[task]" in text and "spec" in text and "nosuch.py" in text, text


def test_run_eval_and_resume_from_other_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The local backend: its member processes resolve the task file from the config too.
    path = _write(tmp_path, backend="local")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "runs"
    res = _cli("run", str(path), "--out", str(out), cwd=elsewhere)
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    recorded = tomllib.loads((run / "config.toml").read_text())["task"]["spec"]
    assert Path(recorded.rpartition(":")[0]).is_absolute(), recorded

    third = tmp_path / "third"
    third.mkdir()
    # eval in this process (cli.main, what `python -m wheeler2` calls; a subprocess paid a torch
    # import), from the third folder without PYTHONPATH; the task file's module name is new
    # to this process (its name carries the file's absolute path), so eval resolves it itself.
    monkeypatch.chdir(third)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0, capsys.readouterr()
    text = (run / "config.toml").read_text().replace("total_steps = 400", "total_steps = 600")
    (run / "config.toml").write_text(text)
    res = _cli("resume", str(run), cwd=third)  # a fresh process: resolves the file anew
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_relative_module_spec_is_refused_in_one_line() -> None:
    # importlib would need a package to resolve ".tasks" against: a TypeError traceback before.
    with pytest.raises(registry.RegistryError, match="names a relative module"):
        registry.resolve_object(".tasks:Reach")


def test_an_old_top_level_spec_names_the_installed_module_object() -> None:
    old = registry.resolve_object("tasks.bitflip:BitFlip")
    assert old is registry.resolve_object("wheeler2.tasks.bitflip:BitFlip")
    assert registry.installed_module("tasks.nothing_here") == "tasks.nothing_here"


TWIN_ENV = """
import gymnasium as gym
import numpy as np


class Twin(gym.Env):
    WHO = "{who}"
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return np.zeros(2, np.float32), {{}}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {{}}


gym.register("Twin-v0", entry_point=Twin, max_episode_steps={steps})
"""


def test_two_files_registering_one_id_each_build_their_own_env(tmp_path: Path) -> None:
    """A notebook runs two configs whose env files both register "Twin-v0": each config's id
    builds its own file's env, whichever was imported last, with its registered settings."""
    import gymnasium as gym

    ids = {}
    for who, steps in (("first", 7), ("second", 9)):
        (tmp_path / who).mkdir()
        (tmp_path / who / "env.py").write_text(TWIN_ENV.format(who=who, steps=steps))
        ids[who] = f"{tmp_path / who / 'env.py'}:Twin-v0"
    made = {who: registry.gymnasium_id(spec) for who, spec in ids.items()}
    again = registry.gymnasium_id(ids["first"])  # after the second file took "Twin-v0"
    assert again == made["first"] != made["second"]
    for who, steps in (("first", 7), ("second", 9)):
        env = gym.make(made[who])
        assert (env.unwrapped.WHO, env.spec.max_episode_steps) == (who, steps)
        env.close()
