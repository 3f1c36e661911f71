"""The Python API (issue 16): load_policy on raw observations equals the engine's own acting,
normalization and action scaling included; run / validate / evaluate; a cheap ``import``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import wheeler2
from wheeler2 import cli, registry
from wheeler2.checkpoint import CheckpointError
from wheeler2.config import ConfigError, load
from wheeler2.env import AchievedGoalInObs, policy_obs
from wheeler2.runtime.seeds import eval_reset_seed

REPO = Path(__file__).resolve().parent.parent

BASE = """
[experiment]
name = "{name}"
seed = 0
total_steps = {steps}
eval_every = {eval_every}
eval_episodes = 2
backend = "serial"

[env]
id = "{env}"
num_envs = 2
{env_extra}

[buffer]
capacity = 2000
batch_size = 32

[[team]]
name = "learner"
algo = "{algo}"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100
normalize_obs = true
{params}
"""

RUNS = {
    "pendulum": dict(name="pend", env="Pendulum-v1", algo="ddpg", steps=300, eval_every=150),
    "cartpole": dict(
        name="cart", env="CartPole-v1", algo="dqn", steps=300, eval_every=150, params=""
    ),
    "bitflip": dict(
        name="bits",
        env="wheeler2/BitFlip-v0",
        # The wider of the two goal layouts (achieved_goal_in_obs; the default is narrower).
        env_extra="kwargs = { n_bits = 5 }\nachieved_goal_in_obs = true",
        algo="dqn",
        steps=200,
        eval_every=100,
    ),
}


def write_config(tmp: Path, key: str) -> Path:
    spec = {"env_extra": "", "params": "", **RUNS[key]}
    path = tmp / f"{key}.toml"
    path.write_text(BASE.format(**spec))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("api")
    return {k: wheeler2.run(write_config(tmp, k), out=str(tmp / "runs")) for k in RUNS}


def raw_observations(env_id: str, kwargs: dict, n: int, seed: int, steps: int = 5) -> list:
    """Raw gymnasium observations: ``n`` envs reset with ``seed + i`` and stepped randomly."""
    registry.import_builtin_envs()
    rows = []
    for i in range(n):
        env = gym.make(env_id, **kwargs)
        obs, _ = env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
        rows.append(obs)
        for _ in range(steps):
            obs, *_, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                obs, _ = env.reset()
            rows.append(obs)
        env.close()
    return rows


def engine_actions(run_dir: Path, raw: list, checkpoint: str = "best") -> np.ndarray:
    """What the engine does with these observations: the flat input the adapter and
    AchievedGoalInObs build, ``agent.act(explore=False)``, the adapter's action mapping."""
    loaded = wheeler2.api.load_learner(run_dir, checkpoint)
    env = registry.make_env(loaded.config.env, len(raw), 0)
    try:
        if isinstance(raw[0], dict):
            assert isinstance(env, AchievedGoalInObs)  # the default: achieved goal fed too
            part = {k: np.stack([r[k] for r in raw]).astype(np.float32) for k in raw[0]}
            head = np.concatenate([part["observation"], part["achieved_goal"]], axis=-1)
            flat = policy_obs(head, part["desired_goal"])
            adapter = env.env
        else:
            flat = policy_obs(np.stack(raw), None)
            adapter = env
        action = loaded.agent.act(flat, explore=False).action
        return np.asarray(adapter._to_env_action(action))
    finally:
        env.close()


def test_pendulum_policy_matches_engine_with_normalization(runs: dict[str, Path]) -> None:
    run_dir = runs["pendulum"]
    policy = wheeler2.load_policy(run_dir)
    raw = raw_observations("Pendulum-v1", {}, 6, seed=3)
    got = policy(np.stack(raw))
    want = engine_actions(run_dir, raw)
    assert got.shape == (len(raw), 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, want.reshape(got.shape), atol=1e-6)
    # Actions are in the Box ([-2, 2]), not the actor's [-1, 1]: the scaling is inside.
    assert np.all(np.abs(got) <= 2.0)
    # One observation in, one action out, equal to its row of the batch.
    single = policy(raw[0])
    assert single.shape == (1,)
    np.testing.assert_allclose(single, got[0], atol=1e-6)
    # The normalizer is in use, and leaving it out (the actor alone) is another policy.
    agent = policy.agent
    assert agent.obs_norm.count > 0
    with torch.no_grad():
        bare = agent.actor(torch.as_tensor(np.stack(raw), dtype=torch.float32)).numpy() * 2.0
    assert np.abs(bare - got).max() > 1e-3


def test_cartpole_policy_returns_discrete_actions(runs: dict[str, Path]) -> None:
    run_dir = runs["cartpole"]
    policy = wheeler2.load_policy(run_dir, checkpoint="latest")
    raw = raw_observations("CartPole-v1", {}, 6, seed=11)
    got = policy(np.stack(raw))
    assert got.dtype == np.int64 and got.shape == (len(raw),)
    # The same checkpoint on both sides: best.pt and latest.pt hold different policies.
    np.testing.assert_array_equal(got, engine_actions(run_dir, raw, "latest"))
    one = policy(raw[0])
    assert isinstance(one, int) and one == got[0]


def test_goal_env_dict_observations(runs: dict[str, Path]) -> None:
    run_dir = runs["bitflip"]
    policy = wheeler2.load_policy(run_dir)
    assert policy.input_layout == "observation[5], achieved_goal[5], desired_goal[5]"
    raw = raw_observations("wheeler2/BitFlip-v0", {"n_bits": 5}, 4, seed=5)
    batch = {k: np.stack([r[k] for r in raw]) for k in raw[0]}
    got = policy(batch)
    np.testing.assert_array_equal(got, engine_actions(run_dir, raw))
    assert [policy(r) for r in raw] == list(got)
    # The flat input is [observation, achieved_goal, desired_goal], as the engine feeds it.
    flat, single = policy.flat_input(raw[0])
    assert single and flat.shape == (1, 15)
    parts = [raw[0][k] for k in ("observation", "achieved_goal", "desired_goal")]
    np.testing.assert_array_equal(flat[0], np.concatenate(parts))


def test_goal_parts_of_other_batch_sizes_are_named(runs: dict[str, Path]) -> None:
    policy = wheeler2.load_policy(runs["bitflip"])
    obs = {
        "observation": np.zeros(5),
        "achieved_goal": np.zeros(5),
        "desired_goal": np.zeros((4, 5)),
    }
    with pytest.raises(ValueError, match=r"observation 1, achieved_goal 1, desired_goal 4"):
        policy(obs)


def test_evaluate_is_load_policy_played_on_the_eval_seeds(runs: dict[str, Path]) -> None:
    run_dir = runs["pendulum"]
    result = wheeler2.evaluate(run_dir, episodes=2)
    assert result["episodes"] == 2
    policy = wheeler2.load_policy(run_dir)
    seed = eval_reset_seed(load(run_dir / "config.toml"))
    returns = []
    for i in range(2):
        env = gym.make("Pendulum-v1")
        obs, _ = env.reset(seed=seed + i)
        total, over = 0.0, False
        while not over:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += float(r)
            over = term or trunc
        returns.append(total)
    assert result["mean_return"] == pytest.approx(np.mean(returns), abs=1e-3)


def test_run_overrides_and_validate(tmp_path: Path) -> None:
    path = write_config(tmp_path, "pendulum")
    config = wheeler2.validate(path, experiment__total_steps=1234, seed=7)
    assert config.experiment.total_steps == 1234 and config.experiment.seed == 7
    assert wheeler2.validate(config, **{"team.learner.params.tau": 0.5}).learner.params.tau == 0.5
    with pytest.raises(ConfigError, match="total_steps"):
        wheeler2.validate(path, experiment__total_steps=-5)
    bad_her = path.read_text() + "\n"
    (tmp_path / "her.toml").write_text(bad_her.replace("[buffer]", "[buffer]\nher = {}"))
    with pytest.raises(ConfigError, match="goal env"):
        wheeler2.validate(tmp_path / "her.toml")


def test_bad_run_dirs_are_named(tmp_path: Path, runs: dict[str, Path]) -> None:
    with pytest.raises(wheeler2.UsageError, match="no such run directory"):
        wheeler2.load_policy(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.toml").write_text((runs["pendulum"] / "config.toml").read_text())
    with pytest.raises(CheckpointError, match="no checkpoint"):
        wheeler2.load_policy(empty)
    assert cli.main(["eval", str(tmp_path / "missing")]) == cli.EXIT_INVALID


def test_import_stays_cheap() -> None:
    code = "import sys, wheeler2; assert 'torch' not in sys.modules; print(wheeler2.load_policy)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "function load_policy" in done.stdout


RECURRENT = """
[experiment]
name = "rppo"
seed = 0
total_steps = 256
eval_every = 128
eval_episodes = 1
backend = "serial"

[env]
id = "CartPoleNoVel-v1"
num_envs = 2

[[team]]
name = "learner"
algo = "ppo"
role = "learner"
[team.params]
hidden = [16]
core = "gru"
core_size = 8
n_steps = 64
batch_size = 64
"""


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("api_rnn")
    (tmp / "rppo.toml").write_text(RECURRENT)
    return wheeler2.run(tmp / "rppo.toml", out=str(tmp / "runs"))


def test_recurrent_policy_carries_its_state_like_the_engine(recurrent_run: Path) -> None:
    policy = wheeler2.load_policy(recurrent_run)
    assert policy.recurrent
    raw = raw_observations("CartPoleNoVel-v1", {}, 1, seed=4, steps=12)
    # The engine's way: the state from initial_state, threaded through act step by step.
    agent = policy.agent
    state = agent.initial_state(1)
    want, states = [], []
    for obs in raw:
        out = agent.act(policy_obs(obs[None], None), explore=False, state=state)
        want.append(int(out.action[0]))
        states.append(out.state)
        state = out.state
    assert not np.allclose(states[0], states[-1])  # the memory does move
    policy.reset()
    assert [policy(obs) for obs in raw] == want
    np.testing.assert_array_equal(policy.state, states[-1])
    # reset() puts the initial state back: the same observations give the same actions again.
    policy.reset()
    assert [policy(obs) for obs in raw] == want
    # Two episodes side by side; ending one resets that row only.
    policy.reset(2)
    batch = np.stack([raw[0], raw[0]])
    policy(batch)
    policy(batch)
    kept = policy.state[1].copy()
    policy.reset(where=np.array([True, False]))
    np.testing.assert_array_equal(policy.state[0], agent.initial_state(1)[0])
    np.testing.assert_array_equal(policy.state[1], kept)
    with pytest.raises(ValueError, match=r"memory for 2 observations and got 1.*reset\(1\)"):
        policy(raw[0])


def test_recurrent_policy_is_not_exported(recurrent_run: Path) -> None:
    from wheeler2.export import export_policy

    with pytest.raises(cli.UsageError, match="recurrent core"):
        export_policy(recurrent_run, "torchscript", recurrent_run / "p.pt")
    assert not (recurrent_run / "p.pt").exists()
