"""Tasks with reward heads: declaring heads, rejection at start, user modules, the docs example,
and the shipped tasks' heads against their envs' own rewards."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from wheeler2.config import load
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.parts import make_env
from wheeler2.task import Task, reward_head

ROOT = Path(__file__).resolve().parents[1]

BITFLIP_CFG = """
[experiment]
name = "{name}"
total_steps = {steps}
eval_every = {steps}
eval_episodes = 2
backend = "serial"
progress = false

[env]
id = "wheeler2/BitFlip-v0"
kwargs = {{ n_bits = 4 }}

[task]
spec = "{spec}"
{heads}

[buffer]
capacity = 10_000
batch_size = 32
her = {{ strategy = "future", k = 4 }}

[[team]]
name = "dqn"
algo = "dqn"
role = "learner"
[team.params]
learning_starts = 64
hidden = [32]
"""


def _cfg(tmp_path: Path, spec: str, heads: str = "", steps: int = 200, name: str = "t") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(BITFLIP_CFG.format(name=name, steps=steps, spec=spec, heads=heads))
    return path


def _write_module(tmp_path: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "userpkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[mod]


USER_TASK = """
    import numpy as np
    from wheeler2.task import Task, reward_head

    class Flip(Task):
        @reward_head(weight=1.0)
        def goal(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return -np.any(achieved_goal != desired_goal, axis=-1).astype(np.float32)

        @reward_head(weight=0.1)
        def closeness(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return -np.abs(achieved_goal - desired_goal).mean(-1)

        def broken(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return np.zeros((len(obs), 2))  # two columns: not one reward per transition

        def scalar(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return 0.0
"""


def test_declared_heads_in_definition_order_with_weights() -> None:
    class A(Task):
        @reward_head(weight=2.0)
        def first(self, *args):  # noqa: ANN002, ANN202
            return 0

        @reward_head(name="renamed")
        def second(self, *args):  # noqa: ANN002, ANN202
            return 0

        def not_a_head(self, *args):  # noqa: ANN002, ANN202
            return 0

    assert A.declared_heads() == [("first", "first", 2.0), ("renamed", "second", 1.0)]


def test_user_task_module_outside_the_repo_runs(tmp_path: Path, monkeypatch) -> None:
    _write_module(tmp_path, "mytask", USER_TASK, monkeypatch)
    config = load(_cfg(tmp_path, "userpkg.mytask:Flip"), out=str(tmp_path / "runs"))
    probe = make_env(config, 1, 0)
    heads = make_heads(config, probe, make_task(config))
    assert heads.names == ("goal", "closeness") and heads.weights == (1.0, 0.1)
    from wheeler2.runtime import run_experiment

    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 200


@pytest.mark.parametrize("method", ["broken", "scalar"])
def test_wrong_reward_shape_is_rejected_at_start_naming_the_head(
    tmp_path: Path, monkeypatch, method: str
) -> None:
    _write_module(tmp_path, "mytask", USER_TASK, monkeypatch)
    heads = f'[[task.heads]]\nname = "my_{method}"\nreward = "userpkg.mytask:Flip.{method}"\n'
    config = load(_cfg(tmp_path, "userpkg.mytask:Flip", heads), out=str(tmp_path / "runs"))
    from wheeler2.config import ConfigError
    from wheeler2.runtime import run_experiment

    # A ConfigError (one `error:` line, exit 2 from the CLI), as `check` reports it too.
    with pytest.raises(ConfigError, match=f"reward head 'my_{method}'") as info:
        run_experiment(config)
    assert (info.value.table, info.value.key) == ("[task]", "heads")
    # Rejected while the run was built, before the run directory was made: nothing was written
    # (no run directory, so no summary, metrics or checkpoint of a started run).
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.rglob("*")) == []


def test_function_head_by_module_path(tmp_path: Path, monkeypatch) -> None:
    _write_module(
        tmp_path,
        "rewards",
        """
        import numpy as np
        def bits_on(obs, action, next_obs, achieved_goal, desired_goal, info):
            return next_obs.sum(-1)
        """,
        monkeypatch,
    )
    heads = (
        '[[task.heads]]\nname = "env"\nreward = "env"\n'
        '[[task.heads]]\nname = "on"\nreward = "userpkg.rewards:bits_on"\nweight = 0.5\n'
    )
    config = load(_cfg(tmp_path, "tasks.bitflip:BitFlip", heads))
    probe = make_env(config, 1, 0)
    heads_ = make_heads(config, probe, make_task(config))
    assert heads_.names == ("env", "on") and heads_.weights == (1.0, 0.5)


def _docs_example() -> tuple[str, str]:
    text = (ROOT / "docs" / "tasks.md").read_text()
    py = re.search(r"```python\n(.*?)```", text, re.S)
    toml = re.search(r"```toml\n(.*?)```", text, re.S)
    assert py and toml, "docs/tasks.md lost its python or toml example"
    return py.group(1), toml.group(1)


def test_docs_example_runs(tmp_path: Path, monkeypatch) -> None:
    source, toml = _docs_example()
    # The docs put the task in mytasks/goal_reach.py; write it exactly as shown.
    pkg = tmp_path / "mytasks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "goal_reach.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "example.toml"
    path.write_text(toml)
    config = load(
        path,
        overrides=[
            "experiment.total_steps=300",
            "experiment.eval_every=300",
            "experiment.eval_episodes=2",
            "experiment.progress=false",
            "team.target.params.learning_starts=100",
            "team.target.params.hidden=[32]",
        ],
        out=str(tmp_path / "runs"),
    )
    from wheeler2.runtime import run_experiment

    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 300
    probe = make_env(config, 1, 0)
    heads = make_heads(config, probe, make_task(config))
    assert heads.names == ("reached", "matching") and heads.weights == (1.0, 0.2)
    # Each head's episode return is reported with the member's figures.
    figures = next(iter(summary["members"].values()))
    assert {"episode_return/reached", "episode_return/matching"} <= set(figures), figures
    assert figures["episode_return/reached"] <= 0.0


def test_bitflip_task_head_equals_env_reward() -> None:
    from wheeler2.tasks.bitflip import BitFlip

    rng = np.random.default_rng(0)
    ag = rng.integers(0, 2, (64, 5)).astype(np.float32)
    dg = ag.copy()
    dg[::2, 0] = 1 - dg[::2, 0]
    from wheeler2.envs.bitflip import BitFlipEnv

    expected = BitFlipEnv(5).compute_reward(ag, dg)
    got = BitFlip().match(None, None, None, ag, dg, None)
    np.testing.assert_array_equal(got, expected)
    assert expected.min() == -1 and expected.max() == 0


def test_reacher_heads_sum_to_the_env_reward() -> None:
    pytest.importorskip("mujoco")
    import gymnasium as gym
    from wheeler2.tasks.reacher import Reacher

    env = gym.make("Reacher-v5")
    obs, _ = env.reset(seed=0)
    task = Reacher()
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.uniform(-1, 1, 2).astype(np.float32)
        nxt, r, *_, info = env.step(a)
        args = (obs[None], a[None], nxt[None], None, None, None)
        assert task.distance(*args)[0] == pytest.approx(info["reward_dist"], abs=1e-5)
        assert task.effort(*args)[0] == pytest.approx(info["reward_ctrl"], abs=1e-5)
        assert task.distance(*args)[0] + task.effort(*args)[0] == pytest.approx(r, abs=1e-5)
        obs = nxt


def test_reacher_heads_sum_to_the_env_reward_with_stacked_observations() -> None:
    """With ``[env] stack = 2`` next_obs is two observations, oldest first: the heads must read
    the newest one (the state the action reached), not the one before the action."""
    pytest.importorskip("mujoco")
    from wheeler2.tasks.reacher import Reacher

    from wheeler2.config.model import EnvConfig
    from wheeler2.registry import make_env as make_vec_env

    env = make_vec_env(EnvConfig(id="Reacher-v5", stack=2), 1, 0)
    try:
        obs, task, rng = env.reset(seed=0).obs, Reacher(), np.random.default_rng(0)
        assert obs.shape == (1, 20)
        for _ in range(5):
            a = rng.uniform(-1, 1, (1, 2)).astype(np.float32)
            st = env.step(a)
            args = (obs, a, st.final_obs, None, None, None)
            np.testing.assert_allclose(
                task.distance(*args) + task.effort(*args), st.reward, atol=1e-5
            )
            obs = st.obs
    finally:
        env.close()


def test_fetch_task_head_equals_compute_reward() -> None:
    pytest.importorskip("gymnasium_robotics")
    import gymnasium as gym
    from wheeler2.tasks.fetch import Reach

    env = gym.make("FetchReach-v4")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    ag = rng.normal(1.3, 0.05, (128, 3))
    dg = ag + rng.normal(0, 0.04, (128, 3))
    expected = env.unwrapped.compute_reward(ag, dg, None)
    np.testing.assert_array_equal(Reach().reach(None, None, None, ag, dg, None), expected)
    assert set(np.unique(expected)) == {-1.0, 0.0}


BAD_TASK = """
    import numpy as np
    from wheeler2.task import Task, reward_head

    def _miss(achieved_goal, desired_goal):
        return -np.any(achieved_goal != desired_goal, axis=-1).astype(np.float32)

    class Signature(Task):
        @reward_head()
        def goal(self, achieved_goal, desired_goal, info):  # not the heads' signature
            return _miss(achieved_goal, desired_goal)

    class WrongAxis(Task):
        @reward_head()
        def goal(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            # Over the batch, not the goal: [goal_dim] rewards, right only by chance.
            return -np.any(achieved_goal != desired_goal, axis=0).astype(np.float32)

    class Success(Task):
        @reward_head()
        def goal(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return _miss(achieved_goal, desired_goal)

        def success(self, achieved_goal, desired_goal, info=None):
            return np.all(achieved_goal == desired_goal, axis=-1, keepdims=True)  # [B, 1]

    class Worth(Task):
        @reward_head()
        def goal(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return _miss(achieved_goal, desired_goal)

        def worth_keeping(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return np.ones(len(obs), bool)  # misses the reward argument
"""


@pytest.mark.parametrize(
    ("cls", "what", "sets"),
    [
        (
            "Signature",
            r"reward head 'goal' cannot be called .* \(Signature.goal at .*badtask.py line 9\)",
            [],
        ),
        (
            "WrongAxis",
            r"reward head 'goal' returned shape .* \(WrongAxis.goal at .*badtask.py line 14\)",
            [],
        ),
        (
            "Success",
            r"success returned shape .* \(Success.success at .*badtask.py line 24\)",
            ["buffer.her.terminate_on_goal=true"],
        ),
        (
            "Worth",
            r"worth_keeping cannot be called .* \(Worth.worth_keeping at .*badtask.py line 32\)",
            ["buffer.keep=0.5"],
        ),
    ],
)
def test_task_functions_are_refused_by_check_naming_file_and_line(
    tmp_path: Path, cls: str, what: str, sets: list[str]
) -> None:
    """What a run would only meet at its first step or sample (a signature the engine cannot
    call, a reward per goal bit that matches the probe's length, success or worth_keeping of
    the wrong shape or signature) is refused by ``check``, naming the function's file and line.
    """
    from wheeler2.config import ConfigError
    from wheeler2.runtime.probe import check_with_env

    (tmp_path / "badtask.py").write_text(textwrap.dedent(BAD_TASK))
    path = _cfg(tmp_path, f"./badtask.py:{cls}")
    # 3 bits and one copy: the probe's 3 rows would be as many as the goal's bits.
    config = load(path, overrides=["env.kwargs.n_bits=3", *sets], out=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=what) as info:
        check_with_env(config)
    assert (info.value.table, info.value.key) == ("[task]", "heads")


def test_a_head_named_by_the_documented_short_spec_is_the_tasks_bound_method() -> None:
    """docs/tasks.md names a task method as "tasks.reacher:Reacher.distance_x": the class's own
    module is wheeler2.tasks.reacher, and the short name must still find the run's instance
    (resolved as a plain attribute it is an unbound function, missing self)."""
    from wheeler2.tasks.reacher import Reacher

    from wheeler2.runtime.heads import _task_method

    task = Reacher()
    for spec in ("tasks.reacher:Reacher.distance_x", "wheeler2.tasks.reacher:Reacher.distance_x"):
        fn = _task_method(task, spec)
        assert fn is not None and fn.__self__ is task, spec
