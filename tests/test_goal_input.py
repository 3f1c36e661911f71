"""``[env] achieved_goal_in_obs``: a goal env's policy input is [observation, achieved goal,
desired goal], built once at the adapter so every stored, sampled and evaluated row agrees."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2 import config, registry
from wheeler2.env import AchievedGoalInObs, EnvInfo, EnvReset, EnvStep, policy_obs


class _Goals:
    """Two copies; observation 10+t, achieved goal 20+t, desired goal 30+t at step t. Copy 1's
    episode ends at every step, so its final values (t+0.5) differ from the reset ones."""

    num_envs = 2
    info = EnvInfo(obs_dim=2, act_dim=1, discrete=False, goal_dim=1)

    def __init__(self) -> None:
        self.t = 0
        self.closed = False

    def compute_reward(self, ag: np.ndarray, dg: np.ndarray, info: object) -> np.ndarray:
        return -(ag != dg).astype(np.float32)

    def _arrays(self, base: float, t: float) -> np.ndarray:
        return np.full((2, 1), base + t, np.float32)

    def reset(self, seed: int | None = None) -> EnvReset:
        return EnvReset(
            obs=np.full((2, 2), 10.0, np.float32),
            achieved_goal=self._arrays(20, 0),
            desired_goal=self._arrays(30, 0),
        )

    def step(self, action: np.ndarray) -> EnvStep:
        self.t += 1
        t = float(self.t)
        final_obs = np.full((2, 2), 10 + t, np.float32)
        final_ag = self._arrays(20, t)
        final_obs[1], final_ag[1] = 10 + t + 0.5, 20 + t + 0.5
        return EnvStep(
            obs=np.full((2, 2), 10 + t, np.float32),
            reward=np.zeros(2, np.float32),
            terminated=np.array([False, True]),
            truncated=np.zeros(2, bool),
            final_obs=final_obs,
            infos=[{}, {}],
            achieved_goal=self._arrays(20, t),
            desired_goal=self._arrays(30, t),
            final_achieved_goal=final_ag,
            final_desired_goal=self._arrays(30, t),
        )

    def close(self) -> None:
        self.closed = True


def test_obs_ends_with_the_achieved_goal_of_the_same_state() -> None:
    inner = _Goals()
    env = AchievedGoalInObs(inner)
    assert env.info.obs_dim == 3 and env.info.goal_dim == 1 and env.num_envs == 2
    first = env.reset(seed=0)
    np.testing.assert_array_equal(first.obs, [[10, 10, 20], [10, 10, 20]])
    st = env.step(np.zeros((2, 1), np.float32))
    np.testing.assert_array_equal(st.obs, [[11, 11, 21], [11, 11, 21]])
    # The true next observation carries the achieved goal of that state, not the reset one.
    np.testing.assert_array_equal(st.final_obs, [[11, 11, 21], [11.5, 11.5, 21.5]])
    # Goals themselves are untouched: HER relabels the desired goal only.
    np.testing.assert_array_equal(st.desired_goal, [[31], [31]])
    np.testing.assert_array_equal(
        policy_obs(st.obs, st.desired_goal), [[11, 11, 21, 31], [11, 11, 21, 31]]
    )
    assert env.compute_reward is not None  # adapter extras pass through
    env.close()
    assert inner.closed


@pytest.mark.parametrize(("flag", "width"), [(True, 2 * 7), (False, 7)])
def test_registry_applies_the_key_to_goal_envs(flag: bool, width: int) -> None:
    pytest.importorskip("wheeler2.envs.bitflip")
    cfg = config.EnvConfig(
        id="wheeler2/BitFlip-v0", kwargs={"n_bits": 7}, achieved_goal_in_obs=flag
    )
    env = registry.make_env(cfg, num_envs=1, seed=0)
    try:
        assert env.info.obs_dim == width
        first = env.reset(seed=0)
        assert first.obs.shape == (1, width)
        if flag:  # BitFlip's achieved goal is its bits
            np.testing.assert_array_equal(first.obs[:, 7:], first.achieved_goal)
    finally:
        env.close()


def test_envs_without_goals_are_not_wrapped() -> None:
    pytest.importorskip("wheeler2.envs.gym")
    env = registry.make_env(config.EnvConfig(id="Pendulum-v1"), num_envs=1, seed=0)
    try:
        assert not isinstance(env, AchievedGoalInObs) and env.info.obs_dim == 3
    finally:
        env.close()


@pytest.mark.parametrize("case", ["n_step", "no_success"])
def test_terminate_on_goal_is_refused_where_it_cannot_hold(tmp_path, case: str) -> None:  # noqa: ANN001
    from pathlib import Path

    from wheeler2.config import ConfigError, load

    (tmp_path / "plain.py").write_text(
        "from wheeler2.task import Task\n\nclass NoSuccess(Task):\n    pass\n"
    )
    overrides, message = {
        "n_step": (["buffer.n_step=3"], "needs n_step = 1 (the file has n_step = 3)"),
        "no_success": ([f'task.spec="{tmp_path}/plain.py:NoSuccess"'], "defines success"),
    }[case]
    cfg = Path(__file__).resolve().parents[1] / "cfg" / "bitflip_her.toml"
    base = ["buffer.her.terminate_on_goal=true"]
    assert load(cfg, overrides=base).buffer.her.terminate_on_goal  # the shipped task has success
    with pytest.raises(ConfigError) as err:
        load(cfg, overrides=base + overrides)
    text = str(err.value)
    assert "bitflip_her.toml" in text and "[buffer.her]" in text and "terminate_on_goal" in text
    assert message in text, text
