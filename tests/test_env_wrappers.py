"""``[env] wrappers``: gymnasium wrappers around each env copy, by module (``"module:Name"``) or by
a file next to the config (``"./file.py:Name"``), with keyword arguments in an inline table;
applied by the builder every member and eval env goes through, and each bad entry refused as one
line naming the file and ``wrappers[i]`` (docs/config.md, "[env] wrappers")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from wheeler2 import cli, registry
from wheeler2.config import ConfigError, load
from wheeler2.config.model import WrapperConfig
from wheeler2.runtime.parts import make_env

SCALE = """
import gymnasium as gym


class Scale(gym.RewardWrapper):
    def __init__(self, env, factor):
        super().__init__(env)
        self.factor = factor

    def reward(self, reward):
        return reward * self.factor
"""

CFG = """
[experiment]
name = "wrapped"
total_steps = 200
eval_every = 200
eval_episodes = 1
progress = false

[env]
id = "{env}"
wrappers = [{wrappers}]

[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "target"
algo = "{algo}"
role = "learner"
"""

SCALED_HALF = '{ wrapper = "./scale.py:Scale", kwargs = { factor = 0.5 } }'


def write_config(
    folder: Path, wrappers: str, env: str = "Pendulum-v1", algo: str = "ddpg", name: str = "x"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scale.py").write_text(SCALE)
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(CFG).format(env=env, wrappers=wrappers, algo=algo).lstrip())
    return path


def rollout(path: Path, copies: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Observations and rewards of five fixed actions, in the env the run would build."""
    config = load(path)
    env = make_env(config, copies, seed=0)
    try:
        obs = [env.reset().obs]
        rewards = []
        for _ in range(5):
            step = env.step(np.full((copies, env.info.act_dim), 0.5, np.float32))
            obs.append(step.obs)
            rewards.append(step.reward)
        return np.stack(obs), np.stack(rewards)
    finally:
        env.close()


def test_a_wrapper_by_path_with_kwargs_changes_the_rewards(tmp_path: Path) -> None:
    plain_obs, plain = rollout(write_config(tmp_path, "", name="plain"))
    scaled = '{ wrapper = "./scale.py:Scale", kwargs = { factor = 3.0 } }'
    obs, rewards = rollout(write_config(tmp_path, scaled))
    np.testing.assert_allclose(rewards, 3.0 * plain, rtol=1e-6)
    np.testing.assert_array_equal(obs, plain_obs)


def test_a_wrapper_by_module_changes_the_observations_and_they_apply_in_order(
    tmp_path: Path,
) -> None:
    # TimeAwareObservation appends the episode's step count: Pendulum's 3 numbers become 4.
    path = write_config(tmp_path, f'"gymnasium.wrappers:TimeAwareObservation", {SCALED_HALF}')
    obs, rewards = rollout(path)
    _, plain = rollout(write_config(tmp_path, "", name="plain"))
    assert obs.shape[-1] == 4
    np.testing.assert_array_equal(obs[:, 0, 3], np.arange(6))
    np.testing.assert_allclose(rewards, 0.5 * plain, rtol=1e-6)


def test_an_async_copys_worker_wraps_its_env(tmp_path: Path) -> None:
    """The loop a ``vector = "async"`` copy runs in its subprocess, here in a thread (a
    subprocess start alone costs seconds): it builds its copy with the wrappers it is sent."""
    import multiprocessing
    import threading

    from wheeler2.envs.gym import _worker

    _, plain = rollout(write_config(tmp_path, "", name="plain"), copies=1)
    config = load(write_config(tmp_path, SCALED_HALF.replace("0.5", "2.0")))
    wrappers = [(w.wrapper, w.kwargs) for w in config.env.wrappers]
    parent, child = multiprocessing.Pipe()
    worker = threading.Thread(target=_worker, args=(child, "Pendulum-v1", {}, 0, wrappers))
    worker.start()
    try:
        assert parent.recv() == ("ok", None)
        parent.send(("reset", 0))
        parent.recv()
        rewards = []
        for _ in range(5):
            parent.send(("step", np.full((1, 1), 0.5, np.float32)))
            rewards.append(parent.recv().reward)
    finally:
        parent.send(("close", None))
        worker.join(timeout=10)
    np.testing.assert_allclose(np.stack(rewards), 2.0 * plain, rtol=1e-6)


def test_a_base_files_wrapper_path_is_its_own_folders(tmp_path: Path) -> None:
    base = write_config(tmp_path / "shared", SCALED_HALF, name="base")
    child = tmp_path / "exp" / "child.toml"
    child.parent.mkdir()
    child.write_text(f'extends = "../shared/{base.name}"\n[experiment]\nseed = 2\n')
    (wrapper,) = load(child).env.wrappers
    assert wrapper == WrapperConfig(f"{tmp_path / 'shared' / 'scale.py'}:Scale", {"factor": 0.5})


def test_the_saved_config_keeps_the_wrappers_and_reloads_equal(tmp_path: Path) -> None:
    path = write_config(tmp_path, f'"gymnasium.wrappers:TimeAwareObservation", {SCALED_HALF}')
    config = load(path)
    saved = tmp_path / "elsewhere" / "config.toml"
    saved.parent.mkdir()
    saved.write_text(config.to_toml())
    assert load(saved) == config
    assert load(saved).env.wrappers[1].wrapper == f"{tmp_path / 'scale.py'}:Scale"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            '"gymnasium.wrapperz:ClipAction"',
            "no module named 'gymnasium.wrapperz' (from 'gymnasium.wrapperz:ClipAction'); a "
            "wrapper is 'module:Name'",
        ),
        ('"gymnasium.wrappers:ClipActon"', "has no 'ClipActon'; did you mean 'ClipAction'?"),
        ('"math:pi"', "'math:pi' is not callable"),
        ('"./broken.py:Wrap"', "./broken.py line 3: RuntimeError: boom"),
        ('"./nothere.py:Wrap"', "no file"),
        ('"ClipAction"', "expected 'module:Name'"),
        ("3", 'expected a "module:Name" string or a { wrapper = "module:Name"'),
        (
            '{ wrapper = "./scale.py:Scale", kwargs = { factr = 2 } }',
            "Scale takes no argument 'factr'; did you mean 'factor'? it takes: factor",
        ),
        (
            '{ wrapper = "./scale.py:Scale" }',
            "Scale(env, **kwargs): missing a required argument: 'factor'",
        ),
    ],
)
def test_a_bad_entry_is_one_line_naming_file_and_key(
    tmp_path: Path, capsys, entry: str, message: str
) -> None:
    path = write_config(tmp_path, f'"gymnasium.wrappers:TimeAwareObservation", {entry}')
    (tmp_path / "broken.py").write_text("import gymnasium\n\nraise RuntimeError('boom')\n")
    runs = tmp_path / "runs"
    for argv in (["check", str(path)], ["run", str(path), "--out", str(runs)]):
        assert cli.main(argv) == 2
        _, err = capsys.readouterr()
        assert err.count("\n") == 1, err
        assert err.startswith(f"error: {path}: [env] wrappers[1]: "), err
        assert message in err, err
    assert not runs.exists()


def test_a_wrapper_that_refuses_the_env_is_named_by_check(tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, '"gymnasium.wrappers:ClipAction"', "CartPole-v1", "ppo")
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: [env] wrappers[0]: ClipAction cannot wrap CartPole-v1: ")
    assert err.count("\n") == 1, err


def test_adapters_that_build_their_own_copies_refuse_wrappers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(write_config(tmp_path, '"./scale.py:Scale"', env="unity:mock"))
    assert (info.value.table, info.value.key) == ("[env]", "wrappers")
    assert "'unity:' ids are built by their own adapter" in info.value.message
    assert "envpool" in str(registry.wrappers_problem("Pendulum-v1", "envpool"))
    assert registry.wrappers_problem("Pendulum-v1", "async") is None
