"""Image observations end to end: the gymnasium adapter and [env] stack on images, MinAtar's
channels, `check`'s memory refusal with the image replay's byte figure, a serial team on
pixels (a DQN learner seeding a PPO explorer), and load_policy / export / eval --video of an
image policy. The task is wheeler2/Catch-v0 on a 6x6 screen (envs/pixels.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import wheeler2.envs.pixels  # noqa: F401 - registers wheeler2/Catch-v0 and the MinAtar ids
from gymnasium import spaces
from wheeler2.envs.gym import GymVecEnv

import wheeler2
from wheeler2 import cli
from wheeler2.config import ConfigError, load
from wheeler2.registry import make_env
from wheeler2.runtime.probe import buffer_bytes, check_against_env, check_with_env

RUN = """
[experiment]
name = "{name}"
seed = 0
total_steps = {steps}
eval_every = {steps}
eval_episodes = 2
backend = "serial"

[env]
id = "wheeler2/Catch-v0"
kwargs = {{ size = 6 }}
num_envs = 2
stack = {stack}

[buffer]
capacity = {capacity}
batch_size = 16

[[team]]
name = "q"
algo = "dqn"
role = "learner"
[team.params]
hidden = [16]
learning_starts = 64
encoder = "small_cnn"
augment = "shift"
shift_pad = 1
{extra}
"""

EXPLORER = """
[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
sync = { every = 64, keep = ["head"] }
[team.params]
hidden = [16]
activation = "relu"
encoder = "small_cnn"
n_steps = 32
batch_size = 32
"""


def write(tmp_path: Path, name: str = "catch", steps: int = 256, stack: int = 2, **kw) -> Path:
    path = tmp_path / f"{name}.toml"
    fields = {"capacity": 1000, "extra": ""} | kw
    path.write_text(RUN.format(name=name, steps=steps, stack=stack, **fields))
    return path


def test_the_adapter_gives_channels_first_uint8_rows_and_stacks_them():
    env = GymVecEnv("wheeler2/Catch-v0", {"size": 6}, 2, seed=0)
    assert env.info.obs_shape == (1, 6, 6) and env.info.obs_dim == 36
    first = env.reset().obs
    assert first.dtype == np.uint8 and set(np.unique(first)) <= {0, 255}
    env.close()
    cfg = load_env_cfg(stack=3)
    stacked = make_env(cfg, 2, seed=0)
    assert stacked.info.obs_shape == (3, 6, 6) and stacked.info.stack == 3
    assert stacked.info.frame_shape == (1, 6, 6)
    obs = stacked.reset().obs
    assert obs.dtype == np.uint8 and obs.shape == (2, 108)
    frames = obs.reshape(2, 3, 36)
    assert (frames == frames[:, :1]).all()  # an episode starts with its first frame repeated
    st = stacked.step(np.ones(2, np.int64))
    f = st.obs.reshape(2, 3, 36)
    assert (f[:, 1] == frames[:, 2]).all() and st.obs.dtype == np.uint8
    stacked.close()


def load_env_cfg(stack: int):
    from wheeler2.config.model import EnvConfig

    return EnvConfig(id="wheeler2/Catch-v0", kwargs={"size": 6}, stack=stack)


def test_minatar_channels_become_channels_first_bytes():
    pytest.importorskip("minatar")
    env = GymVecEnv("MinAtar/Breakout-v1", {}, 1, seed=0)
    raw_env = env.envs[0]
    raw, _ = raw_env.reset(seed=0)
    assert raw.shape == (10, 10, 4) and raw.dtype == bool
    assert env.info.obs_shape == (4, 10, 10)
    obs = env.reset(seed=0).obs[0].reshape(4, 10, 10)
    np.testing.assert_array_equal(obs, np.moveaxis(raw, 2, 0).astype(np.uint8) * 255)
    env.close()


def test_check_refuses_a_capacity_that_does_not_fit_with_its_byte_figure(tmp_path):
    config = load(write(tmp_path, stack=4, capacity=1_000_000))
    env = make_env(config.env, 1, seed=0)
    info = env.info
    env.close()
    need = buffer_bytes(config, info)
    # Each 6x6 frame once per transition (+ the ring's slack), not 2 x 4 stacked float32 copies.
    per = need / 1_000_000
    assert 36 < per < 36 * 1.1 + 120, per
    with pytest.raises(ConfigError) as err:
        check_against_env(config, [info], free=lambda: {"/dev/shm": need - 1})
    assert (err.value.table, err.value.key) == ("[buffer]", "capacity")
    assert f"need {need:_} bytes" in err.value.message
    check_against_env(config, [info], free=lambda: {"/dev/shm": need})  # fits exactly: fine


def test_check_refuses_forgetting_rules_on_images_before_the_run(tmp_path):
    path = write(tmp_path, capacity='1000\nforget = "reservoir"')
    with pytest.raises(ConfigError) as err:
        check_with_env(load(path))
    assert (err.value.table, err.value.key) == ("[buffer]", "forget")
    assert 'expected "oldest" with image observations, got "reservoir"' in err.value.message


def test_a_team_on_pixels_runs_and_its_policy_loads_exports_and_films(tmp_path, capsys):
    path = write(tmp_path, stack=2, extra=EXPLORER)
    check_with_env(load(path))
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    import json

    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 256 and summary["eval"]
    # The PPO explorer took the DQN learner's convolutions with its trunk.
    synced = json.loads((run / "team.json").read_text())["explorer"]["synced"]
    assert "trunk.0.body.0.weight" in synced
    policy = wheeler2.load_policy(run)
    # One raw 6x6 frame per call; the policy keeps the stack of 2 itself.
    frame = np.zeros((6, 6), np.uint8)
    action = policy(frame)
    assert isinstance(action, int)
    assert policy.frames is not None and policy.frames.shape == (1, 2, 36)
    # Or a whole stack, shaped as gymnasium's FrameStackObservation gives it. That shape is
    # also two envs' frames: the caller says which, and each reading gives its own answer.
    two = np.zeros((2, 6, 6), np.uint8)
    with pytest.raises(ValueError, match="stacked=True"):
        policy(two)
    assert isinstance(policy(two, stacked=True), int)
    policy.reset()
    assert policy(two, stacked=False).shape == (2,)
    assert policy.frames.shape == (2, 2, 36)
    batch = np.zeros((5, 2, 6, 6), np.uint8)
    assert policy(batch).shape == (5,)
    for fmt in ("torchscript", "onnx"):
        out = tmp_path / f"policy.{fmt}"
        assert cli.main(["export", str(run), "--format", fmt, "-o", str(out)]) == 0
    import torch

    from wheeler2.export import sample_inputs

    flat = sample_inputs(policy)
    assert flat.dtype == np.uint8
    module = torch.jit.load(str(tmp_path / "policy.torchscript"))
    np.testing.assert_array_equal(
        module(torch.as_tensor(flat)).numpy(), policy.env_action(policy.engine_action(flat))
    )
    pytest.importorskip("imageio")
    out = tmp_path / "clip.gif"
    assert cli.main(["eval", str(run), "--episodes", "1", "--video", str(out)]) == 0
    assert (tmp_path / "clip_ep0.gif").exists()
    assert "wrote" in capsys.readouterr().out


PIXEL_PZ = '''
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Pixels(ParallelEnv):
    """Two agents, each seeing a 5x4 RGB image (channels last) whose red channel counts steps."""

    metadata = {"name": "pixels_v0"}

    def __init__(self):
        self.possible_agents = ["a_0", "a_1"]
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0, 255, (5, 4, 3), np.uint8)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        out = {}
        for k, a in enumerate(self.agents):
            img = np.zeros((5, 4, 3), np.uint8)
            img[:, :, 0] = self.t
            img[:, :, 1] = k
            out[a] = img
        return out

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 3
        obs = self._obs()
        rew = {a: float(actions[a]) for a in self.agents}
        term = {a: done for a in self.agents}
        trunc = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rew, term, trunc, infos


def parallel_env(**kwargs):
    return Pixels()
'''


def test_pettingzoo_image_observations_are_channels_first_bytes(tmp_path, monkeypatch):
    pytest.importorskip("pettingzoo")
    from wheeler2.envs.pettingzoo import PettingZooVecEnv

    (tmp_path / "pixels_pz.py").write_text(PIXEL_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = PettingZooVecEnv("pettingzoo:pixels_pz", {}, num_envs=2, seed=0)
    try:
        assert env.info.obs_shape == (3, 5, 4) and env.info.obs_dim == 60
        obs = env.reset().obs
        assert obs.dtype == np.uint8 and obs.shape == (4, 60)
        img = obs.reshape(4, 3, 5, 4)
        assert (img[:, 0] == 0).all() and (img[1, 1] == 1).all()  # step 0; agent a_1's mark
        st = env.step(np.zeros(4, np.int64))
        assert (st.obs.reshape(4, 3, 5, 4)[:, 0] == 1).all()  # one step on
        assert st.final_obs.dtype == np.uint8
    finally:
        env.close()


def test_a_recurrent_learner_trains_on_image_sequences(tmp_path):
    # Sequence replay over stored frames, DrQ's shift over [B, T] images, a GRU on the encoder.
    import json

    extra = 'core = "gru"\ncore_size = 8\nseq_length = 4\nseq_burn_in = 2'
    path = write(tmp_path, name="catch_gru", steps=300, stack=2, extra=extra)
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    member = json.loads((run / "summary.json").read_text())["members"]["q"]
    assert member["updates"] > 0 and member["ended"] == "finished"


WIDE = """
import gymnasium as gym
import numpy as np


class Wide(gym.ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, (3, 12), np.uint8)

    def observation(self, obs):
        return obs.reshape(3, 12)
"""


def test_eval_video_plays_inside_the_runs_wrappers(tmp_path, capsys):
    # The wrapper reshapes Catch's 6x6 frames to 3x12: a policy trained on those refuses the
    # plain env's 6x6 ones, so the video must play inside the same wrappers.
    pytest.importorskip("imageio")
    (tmp_path / "wide.py").write_text(WIDE)
    wrap = '\nwrappers = ["./wide.py:Wide"]'
    path = write(tmp_path, name="reshaped", steps=128, stack=1)
    path.write_text(path.read_text().replace("stack = 1", "stack = 1" + wrap))
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    assert wheeler2.load_policy(run).loaded.info.obs_shape == (1, 3, 12)
    out = tmp_path / "clip.gif"
    assert cli.main(["eval", str(run), "--episodes", "1", "--video", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "clip_ep0.gif").exists()


def test_a_square_channels_last_image_is_transposed():
    # MinAtar's Seaquest observes (10, 10, 10): as many channels as rows and columns. gymnasium
    # images are channels-last, so a tie must be read as (H, W, C), not left as it is.
    from gymnasium import spaces as gs
    from wheeler2.envs.spaces import ObsFlattener, image_shape

    space = gs.Box(0, 1, (3, 3, 3), dtype=bool)
    assert image_shape(space) == (3, 3, 3)
    raw = np.zeros((3, 3, 3), bool)
    raw[0, 1, 2] = True  # row 0, column 1, channel 2
    flat = ObsFlattener(space)
    out = np.empty(27, np.uint8)
    flat(raw, out)
    img = out.reshape(3, 3, 3)
    assert img[2, 0, 1] == 255 and img.sum() == 255
    # A channels-first image with fewer channels than rows stays as it is.
    assert image_shape(gs.Box(0, 255, (2, 8, 8), dtype=np.uint8)) == (2, 8, 8)
    assert image_shape(gs.Box(0, 255, (8, 8, 2), dtype=np.uint8)) == (2, 8, 8)


def test_minatar_seaquest_channels_become_channels_first_bytes():
    pytest.importorskip("minatar")
    env = GymVecEnv("MinAtar/Seaquest-v1", {}, 1, seed=0)
    raw, _ = env.envs[0].reset(seed=0)
    assert raw.shape == (10, 10, 10)
    obs = env.reset(seed=0).obs[0].reshape(10, 10, 10)
    np.testing.assert_array_equal(obs, np.moveaxis(raw, 2, 0).astype(np.uint8) * 255)
    env.close()


class _FakePool:
    """envpool's pool as the adapter uses it, for an Atari-like id: (2, 5, 5) uint8 frames
    stacked channels-first (envpool's Atari layout), one pixel counting the steps."""

    def __init__(self, num_envs: int, **_: object) -> None:
        from types import SimpleNamespace

        from gymnasium import spaces as gs

        self.n = num_envs
        self.t = np.zeros(num_envs, np.int64)
        self.observation_space = gs.Box(0, 255, (2, 5, 5), np.uint8)
        self.action_space = gs.Discrete(3)
        self.spec = SimpleNamespace(config=SimpleNamespace(max_episode_steps=10))

    def _obs(self, rows: np.ndarray) -> np.ndarray:
        obs = np.zeros((len(rows), 2, 5, 5), np.uint8)
        obs[:, 1, 0, 0] = 200 + self.t[rows]
        return obs

    def reset(self, env_id: np.ndarray | None = None):
        rows = np.arange(self.n) if env_id is None else np.asarray(env_id)
        self.t[rows] = 0
        return self._obs(rows), {"env_id": rows}

    def step(self, action: np.ndarray):
        self.t += 1
        rows = np.arange(self.n)
        done = self.t >= 3
        return self._obs(rows), np.ones(self.n), done, np.zeros(self.n, bool), {"env_id": rows}


def test_envpool_image_observations_stay_channels_first_bytes(monkeypatch):
    # envpool's Atari ids give uint8 frames: they must reach the encoders as image rows (bytes,
    # obs_shape set), not as float32 columns of an MLP that nothing scales.
    import sys
    from types import SimpleNamespace

    fake = SimpleNamespace(
        list_all_envs=lambda: ["Fake-v5"],
        make_gymnasium=lambda env_id, num_envs, batch_size, seed, **kw: _FakePool(num_envs),
    )
    monkeypatch.setitem(sys.modules, "envpool", fake)
    from wheeler2.envs.envpool_vec import EnvpoolVecEnv

    env = EnvpoolVecEnv("Fake-v5", {}, 2, 0)
    assert env.info.obs_shape == (2, 5, 5) and env.info.obs_dim == 50
    obs = env.reset().obs
    assert obs.dtype == np.uint8 and obs.shape == (2, 50)
    assert (obs.reshape(2, 2, 5, 5)[:, 1, 0, 0] == 200).all()
    env.step(np.zeros(2, np.int64))
    st = env.step(np.zeros(2, np.int64))
    st = env.step(np.zeros(2, np.int64))  # the third step ends both episodes
    assert st.obs.dtype == np.uint8 and st.final_obs.dtype == np.uint8
    assert (st.final_obs.reshape(2, 2, 5, 5)[:, 1, 0, 0] == 203).all()
    assert (st.obs.reshape(2, 2, 5, 5)[:, 1, 0, 0] == 200).all()  # the next episode's first


@pytest.mark.parametrize(
    "space, says",
    [
        (spaces.Box(0, 255, (4, 12, 12, 3), np.uint8), "[env] stack"),  # stacked RGB
        (spaces.Box(0.0, 1.0, (12, 12, 3), np.float32), "scale_obs=False"),  # scaled frames
    ],
)
def test_an_image_that_will_be_read_as_flat_floats_is_warned_of(space, says):
    from wheeler2.envs.spaces import ObsFlattener

    with pytest.warns(UserWarning, match="not read as an image") as record:
        flat = ObsFlattener(space)
    assert flat.image_shape == () and says in str(record[0].message)


def test_images_and_flat_vectors_pass_without_a_warning():
    import warnings

    from wheeler2.envs.spaces import ObsFlattener

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ObsFlattener(spaces.Box(0, 255, (12, 12, 3), np.uint8))
        ObsFlattener(spaces.Box(-1.0, 1.0, (5,), np.float32))
        ObsFlattener(spaces.Box(-1.0, 1.0, (2, 3), np.float32))
