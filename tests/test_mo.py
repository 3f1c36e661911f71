"""MO-Gymnasium as a task source (envs/mo.py): the vector reward becomes the reward heads, the
weighted sum is the env reward that evaluation reports, and each head's value is held against its
discounted return at eval time."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("mo_gymnasium")

import mo_gymnasium as mo  # noqa: E402

from wheeler2 import registry  # noqa: E402
from wheeler2.agent import ActOut  # noqa: E402
from wheeler2.config import ConfigError, load  # noqa: E402
from wheeler2.needs import AgentNeeds  # noqa: E402
from wheeler2.runtime.evaluation import evaluate  # noqa: E402
from wheeler2.runtime.heads import make_heads, resolved_heads_config  # noqa: E402
from wheeler2.runtime.parts import make_env  # noqa: E402
from wheeler2.runtime.team import prepare_team  # noqa: E402
from wheeler2.task import RewardHeads  # noqa: E402

ENV = "mo-hopper-v5"  # 3 objectives, actions already in [-1, 1] (no rescaling to undo)
WEIGHTS = [1.0, 0.5, 0.25]

EXPERIMENT = """
[experiment]
name = "mo"
seed = 0
total_steps = {steps}
eval_every = {steps}
eval_episodes = 2
backend = "serial"
progress = false
out = "{out}"

[env]
id = "{env_id}"
kwargs = {kwargs}

[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 100
gamma = 0.9
"""


def write_config(
    tmp_path: Path, kwargs: str = "{}", env_id: str = f"mo:{ENV}", steps: int = 200
) -> Path:
    path = tmp_path / "mo.toml"
    text = EXPERIMENT.format(steps=steps, out=tmp_path / "runs", env_id=env_id, kwargs=kwargs)
    path.write_text(text)
    return path


def env_heads(kwargs: dict, num_envs: int = 1, seed: int = 3) -> tuple:
    from wheeler2.envs.mo import make

    env = make(ENV, kwargs, num_envs, seed)
    heads = env.reward_heads
    return env, (None if heads is None else RewardHeads(heads))


def test_heads_are_the_env_vector_reward_step_by_step() -> None:
    env, heads = env_heads({"head_weights": WEIGHTS})
    assert heads.names == ("forward", "height", "energy")
    assert heads.weights == tuple(WEIGHTS)
    direct = mo.make(ENV)
    obs = env.reset(seed=3).obs
    ref, _ = direct.reset(seed=3)
    np.testing.assert_allclose(obs[0], ref, rtol=1e-6)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(120):  # random actions topple Hopper within ~20-60 steps: resets included
        a = rng.uniform(-1, 1, (1, 3)).astype(np.float32)
        st = env.step(a)
        vec = heads.compute(obs, a, st.final_obs, None, None, st.infos, st.reward)
        ref_obs, ref_vec, term, trunc, _ = direct.step(a[0])
        np.testing.assert_allclose(vec[0], ref_vec, rtol=1e-6)
        np.testing.assert_allclose(st.final_obs[0], ref_obs, rtol=1e-5, atol=1e-6)
        # The scalar reward is the weighted sum, worked out here from the direct env's vector.
        assert st.reward[0] == pytest.approx(float(np.dot(ref_vec, WEIGHTS)), rel=1e-5)
        assert bool(st.terminated[0]) == term
        if term or trunc:
            ends += 1
            direct.reset()
        obs = st.obs
    assert ends >= 1
    env.close()


def test_sum_mode_is_one_head_equal_to_the_weighted_sum(tmp_path: Path) -> None:
    config = load(write_config(tmp_path, '{ heads = "sum", head_weights = [1.0, 0.5, 0.25] }'))
    env = make_env(config, 1, 5)
    heads = make_heads(config, env, None)
    assert heads.names == ("env",) and heads.weights == (1.0,)
    obs = env.reset(seed=5).obs
    a = np.full((1, 3), 0.3, np.float32)
    st = env.step(a)
    vec = st.infos[0]["reward_vector"]
    r = heads.compute(obs, a, st.final_obs, None, None, st.infos, st.reward)
    assert r.shape == (1, 1)
    assert r[0, 0] == pytest.approx(vec[0] + 0.5 * vec[1] + 0.25 * vec[2], rel=1e-5)
    env.close()


def test_default_weights_are_ones_and_config_records_resolvable_heads(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    env = make_env(config, 1, 0)
    heads = make_heads(config, env, None)
    env.close()
    assert heads.names == ("forward", "height", "energy")
    assert heads.weights == (1.0, 1.0, 1.0)
    written = resolved_heads_config(config, heads)
    specs = [h.reward for h in written.task.heads]
    mo = "wheeler2.envs.mo"
    assert specs == [f"{mo}:objective_0", f"{mo}:objective_1", f"{mo}:objective_2"]
    # resume / eval read these specs back from the run's config.toml
    fn = registry.resolve_object(specs[2])
    info = [{"reward_vector": np.array([1.0, 2.0, 3.0])}]
    assert fn(None, None, None, None, None, info).tolist() == [3.0]
    assert pickle.loads(pickle.dumps(fn))(None, None, None, None, None, info).tolist() == [3.0]


class FixedAgent:
    """Always the same action; reports Q = 0 for every head, so value error = -return."""

    def __init__(self, gamma: float) -> None:
        self.params = SimpleNamespace(gamma=gamma)

    @staticmethod
    def needs(params: SimpleNamespace) -> AgentNeeds:
        """The discount the eval holds head values against, declared as every agent does."""
        return AgentNeeds(gamma=params.gamma)

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:
        return ActOut(action=np.full((len(obs), 3), 0.2, np.float32))

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 3))


def direct_episode(seed: int, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Undiscounted and discounted vector return of one FixedAgent episode, by hand."""
    env = mo.make(ENV)
    env.reset(seed=seed)
    total, disc, g = np.zeros(3), np.zeros(3), 1.0
    while True:
        _, vec, term, trunc, _ = env.step(np.full(3, 0.2, np.float32))
        total += vec
        disc += g * vec
        g *= gamma
        if term or trunc:
            return total, disc


def test_eval_return_is_the_weighted_sum_and_head_values_are_checked() -> None:
    env, heads = env_heads({"head_weights": WEIGHTS}, num_envs=2, seed=0)
    gamma = 0.9
    result = evaluate(FixedAgent(gamma), env, seed=11, heads=heads)
    env.close()
    eps = [direct_episode(11 + i, gamma) for i in range(2)]  # copy i resets with seed + i
    want = np.mean([np.dot(total, WEIGHTS) for total, _ in eps])
    assert result.mean_return == pytest.approx(want, rel=1e-5)
    want_disc = np.mean([d for _, d in eps], axis=0)
    for j, name in enumerate(heads.names):
        got = result.heads[name]
        assert got["q"] == 0.0
        assert got["return"] == pytest.approx(want_disc[j], rel=1e-5)
        assert got["error"] == pytest.approx(-want_disc[j], rel=1e-5)


def test_run_writes_each_heads_value_error(tmp_path: Path) -> None:
    from wheeler2.runtime import run_experiment

    run_dir = run_experiment(load(write_config(tmp_path, steps=200)))
    summary = json.loads((run_dir / "summary.json").read_text())
    last = summary["eval"][-1]
    assert set(last["heads"]) == {"forward", "height", "energy"}
    for v in last["heads"].values():
        assert v["error"] == pytest.approx(v["q"] - v["return"])
    metrics = (run_dir / "metrics.csv").read_text()
    assert "value_error/forward" in metrics and "value_error/energy" in metrics


def test_wrong_weight_count_names_file_key_and_expected(tmp_path: Path) -> None:
    path = write_config(tmp_path, "{ head_weights = [1.0, 2.0] }")
    with pytest.raises(ConfigError) as err:
        prepare_team(load(path), {})
    e = err.value
    assert (e.file, e.table, e.key) == (str(path), "[env]", "kwargs.head_weights")
    assert "expected 3 weights" in e.message and "got 2" in e.message


@pytest.mark.parametrize(
    ("kwargs", "key", "text"),
    [
        ('{ head_weights = "ones" }', "kwargs.head_weights", "an array of 3 numbers"),
        ('{ heads = "each" }', "kwargs.heads", "'vector', 'sum'"),
    ],
)
def test_bad_adapter_keys(tmp_path: Path, kwargs: str, key: str, text: str) -> None:
    path = write_config(tmp_path, kwargs)
    with pytest.raises(ConfigError) as err:
        prepare_team(load(path), {})
    assert (err.value.file, err.value.key) == (str(path), key)
    assert text in err.value.message


def test_unknown_id_suggests_close_ones(tmp_path: Path) -> None:
    path = write_config(tmp_path, env_id="mo:mo-hoper-v5")
    with pytest.raises(ConfigError) as err:
        load(path)
    assert (err.value.file, err.value.table, err.value.key) == (str(path), "[env]", "id")
    assert "unknown MO-Gymnasium env 'mo:mo-hoper-v5'" in err.value.message
    assert "mo-hopper-v5" in err.value.message


def test_missing_package_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mo_gymnasium", None)  # `import mo_gymnasium` now fails
    path = write_config(tmp_path)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert (err.value.file, err.value.key) == (str(path), "id")
    assert "pip install" in err.value.message and "mo-gymnasium" in err.value.message
