"""The Unity mock's camera sensor (envs/_mock_unity.py ``camera``): ML-Agents' visual
observations reach the engine as channels-first uint8 images, and a learner trains on them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("mlagents_envs")

from wheeler2.envs.unity import UnityVecEnv  # noqa: E402

H, W, C = 6, 5, 2


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("mlagents_envs").setLevel(logging.ERROR)


def make(**kw) -> UnityVecEnv:
    kwargs = {"camera": [H, W, C], "discrete_action": True, "num_agents": 2} | kw
    return UnityVecEnv("unity:mock", kwargs, num_envs=2, seed=0)


def test_a_camera_is_an_image_observation():
    env = make()
    try:
        assert env.info.obs_shape == (C, H, W) and env.info.obs_dim == C * H * W
        obs = env.reset().obs
        assert obs.dtype == np.uint8 and obs.shape == (4, C * H * W)
        img = obs.reshape(4, C, H, W)
        # Channel 0: one lit pixel at (step % H, agent index % W); channel 1: the episode level.
        for row in range(4):
            lit = np.argwhere(img[row, 0] == 255)
            assert lit.tolist() == [[0, row % 2]]
        st = env.step(np.zeros(4, np.int64))
        lit = np.argwhere(st.obs.reshape(4, C, H, W)[0, 0] == 255)
        assert lit.tolist() == [[1, 0]]  # a step later, one row down
    finally:
        env.close()


def test_a_camera_beside_vector_observations_is_refused():
    from wheeler2.envs import _mock_unity

    real = _mock_unity.ScriptedCommunicator._info

    def both(self, agent, reward, done=False, interrupted=False):  # type: ignore[no-untyped-def]
        info = real(self, agent, reward, done, interrupted)
        vector = _mock_unity.ObservationProto(
            float_data=_mock_unity.ObservationProto.FloatData(data=agent.obs()),
            shape=[_mock_unity.OBS_SIZE],
            compression_type=_mock_unity.NONE,
        )
        info.observations.append(vector)
        return info

    mp = pytest.MonkeyPatch()
    mp.setattr(_mock_unity.ScriptedCommunicator, "_info", both)
    try:
        with pytest.raises(ValueError, match="a camera beside other observations"):
            make()
    finally:
        mp.undo()


RUN = """
[experiment]
name = "unitycam"
total_steps = 200
eval_every = 200
eval_episodes = 1
backend = "serial"

[env]
id = "unity:mock"
kwargs = { camera = [6, 5, 2], discrete_action = true, num_agents = 2 }

[buffer]
capacity = 1000
batch_size = 16

[[team]]
name = "q"
algo = "dqn"
role = "learner"
[team.params]
hidden = [8]
encoder = "small_cnn"
learning_starts = 50
"""


def test_a_team_trains_on_the_camera_and_its_policy_loads(tmp_path):
    import json

    import wheeler2

    path = tmp_path / "unitycam.toml"
    path.write_text(RUN)
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    assert json.loads((run / "summary.json").read_text())["members"]["q"]["updates"] > 0
    policy = wheeler2.load_policy(run)
    # No gymnasium space behind Unity: the policy takes the engine's uint8 rows as they are.
    assert policy.input_layout.startswith("image[60]") and policy.input_dtype == "uint8"
    assert policy(np.zeros((3, C * H * W), np.uint8)).shape == (3,)
