"""``wheeler2 export`` and ``wheeler2 eval --video`` (issue 16): exported files act exactly as
load_policy does, normalization and action scaling included; videos hold every frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import wheeler2
from wheeler2 import cli
from wheeler2.env import legal_actions
from wheeler2.export import sample_inputs

RUN = """
[experiment]
name = "{name}"
seed = 0
total_steps = {steps}
eval_every = {steps}
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
{params}
"""

RUNS = {
    # Box actions on [-2, 2] and observation normalization.
    "ddpg": dict(
        env="Pendulum-v1", algo="ddpg", params="learning_starts = 100\nnormalize_obs = true"
    ),
    # Discrete, normalized.
    "dqn": dict(
        env="CartPole-v1", algo="dqn", params="learning_starts = 100\nnormalize_obs = true"
    ),
    # A Gaussian actor, whose mean is clipped to [-1, 1] before scaling.
    "ppo": dict(env="Pendulum-v1", algo="ppo", params="n_steps = 64\nbatch_size = 64"),
    # A population that evaluates its last generation's best, not the actor sync copies (2 elites:
    # the new mean is a blend of both, so it is not the champion).
    "cem": dict(
        env="Pendulum-v1",
        algo="cem",
        steps=512,  # a whole Pendulum episode on each of the 2 envs: one generation told
        params='pop_size = 2\nelites = 2\nsigma_init = 0.1\neval_actor = "champion"',
    ),
    # A goal env: the flat input is [observation, achieved_goal, desired_goal].
    "bitflip": dict(
        env="wheeler2/BitFlip-v0",
        # The wider of the two goal layouts (achieved_goal_in_obs; the default is narrower).
        env_extra="kwargs = { n_bits = 5 }\nachieved_goal_in_obs = true",
        algo="dqn",
        params="learning_starts = 100\nnormalize_obs = true",
    ),
    # Flat observations stacked by the engine ([env] stack): the input is the 3 last rows.
    "stack": dict(
        env="PendulumNoVel-v1",
        env_extra="stack = 3",
        algo="ddpg",
        params="learning_starts = 100\nnormalize_obs = true",
    ),
    # A turn-based game: each row ends with the legal-action mask, which normalization leaves
    # raw and the greedy action must respect.
    "masked": dict(
        env="pettingzoo:classic.tictactoe_v3",
        algo="dqn",
        params="learning_starts = 100\nnormalize_obs = true",
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("export")
    out = {}
    for key, spec in RUNS.items():
        path = tmp / f"{key}.toml"
        path.write_text(RUN.format(**{"name": key, "steps": 256, "env_extra": "", **spec}))
        out[key] = wheeler2.run(path, out=str(tmp / "runs"))
    return out


def exported_actions(path: Path, fmt: str, flat: np.ndarray) -> np.ndarray:
    if fmt == "torchscript":
        module = torch.jit.load(str(path))
        with torch.no_grad():
            return module(torch.as_tensor(flat)).numpy()
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["action"], {"obs": flat})[0]


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("key", list(RUNS))
def test_export_matches_load_policy(
    runs: dict[str, Path], key: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / f"policy.{fmt}"
    assert cli.main(["export", str(runs[key]), "--format", fmt, "-o", str(out)]) == 0
    policy = wheeler2.load_policy(runs[key])
    printed = capsys.readouterr().out
    assert f"[{policy.input_layout}]" in printed
    # It says which learner and which checkpoint the file holds (best.pt once an eval ran).
    loaded = policy.loaded
    assert loaded.member == loaded.config.team[0].name and loaded.checkpoint.name == "best.pt"
    assert f"from: learner {loaded.member!r} ({loaded.algo}), best.pt\n" in printed
    flat = sample_inputs(policy)  # real observations of the run's env
    got = exported_actions(out, fmt, flat)
    want = policy.env_action(policy.engine_action(flat))
    assert got.shape[0] == len(flat)
    if policy.discrete:
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want.reshape(got.shape), atol=1e-5)
        # Env units: Pendulum's Box is [-2, 2], so twice the agent's clipped [-1, 1] action.
        engine = np.clip(policy.engine_action(flat), -1.0, 1.0).reshape(got.shape)
        np.testing.assert_allclose(got, 2.0 * engine, atol=1e-5)


def test_export_takes_raw_observations_flattened_by_load_policy(runs: dict[str, Path]) -> None:
    """A goal env's dict, flattened as documented, through the TorchScript file."""
    policy = wheeler2.load_policy(runs["bitflip"])
    rng = np.random.default_rng(0)
    obs = {
        k: rng.integers(0, 2, (7, 5)).astype(np.float32)
        for k in ("observation", "achieved_goal", "desired_goal")
    }
    obs["achieved_goal"] = obs["observation"]
    flat = np.concatenate([obs["observation"], obs["achieved_goal"], obs["desired_goal"]], -1)
    path = wheeler2.export_policy(runs["bitflip"], "torchscript")
    assert path == runs["bitflip"] / "policy.pt"
    np.testing.assert_array_equal(exported_actions(path, "torchscript", flat), policy(obs))


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_keeps_to_the_legal_actions(runs: dict[str, Path], fmt: str, tmp_path: Path) -> None:
    """Masked rows: the file's greedy action is the agent's, among the legal actions only, with
    the mask columns left out of the normalization (any mask, not just those of real games)."""
    policy = wheeler2.load_policy(runs["masked"])
    out = wheeler2.export_policy(runs["masked"], fmt, tmp_path / f"policy.{fmt}")
    n_act = policy.loaded.info.act_dim
    rows = np.repeat(sample_inputs(policy)[:8], 25, axis=0)
    rows[:, -n_act:] = np.random.default_rng(0).integers(0, 2, (len(rows), n_act))
    rows[:3, -n_act:] = 0  # no legal action: every action counts legal
    got = exported_actions(out, fmt, rows)
    np.testing.assert_array_equal(got, policy.engine_action(rows))
    assert legal_actions(rows, n_act)[np.arange(len(rows)), got].all()


def test_failed_export_leaves_the_previous_file(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exporter that dies half-way (disk full, Ctrl-C) leaves no half-written file."""
    out = tmp_path / "policy.onnx"
    out.write_bytes(b"the previous export")

    def dies_half_way(module: object, args: object, f: str, **kwargs: object) -> None:
        Path(f).write_bytes(b"half a fi")
        raise OSError("No space left on device")

    pytest.importorskip("onnx")
    monkeypatch.setattr(torch.onnx, "export", dies_half_way)
    with pytest.raises(OSError, match="No space left"):
        wheeler2.export_policy(runs["ddpg"], "onnx", out)
    assert out.read_bytes() == b"the previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["policy.onnx"]


def test_eval_video_stacks_flat_observations(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """[env] stack on flat observations: the video's episodes get the stacked rows the policy
    was trained on, and are the very episodes eval scores."""
    pytest.importorskip("imageio")
    out = tmp_path / "clip.gif"
    assert cli.main(["eval", str(runs["stack"]), "--episodes", "1", "--video", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    mean = lines[0].split("return ")[1].split(" +-")[0]
    assert lines[1] == f"wrote {tmp_path / 'clip_ep0.gif'} (201 frames, return {mean})"


@pytest.mark.parametrize(("suffix", "episodes"), [(".gif", 1), (".mp4", 2)])
def test_eval_video_writes_one_file_per_episode(
    runs: dict[str, Path],
    suffix: str,
    episodes: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    iio = pytest.importorskip("imageio.v2")
    out = tmp_path / f"clip{suffix}"
    stale = tmp_path / f"clip_ep5{suffix}"  # an earlier call's sixth episode
    stale.write_bytes(b"older")
    argv = ["eval", str(runs["ddpg"]), "--episodes", str(episodes), "--video", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert len(list(tmp_path.glob("clip_ep*"))) == episodes + 1
    assert f"note: {stale.name} in {tmp_path} are from an earlier call" in printed
    assert stale.read_bytes() == b"older"  # the user's: told of, not removed
    for i in range(episodes):
        path = tmp_path / f"clip_ep{i}{suffix}"
        assert f"wrote {path} (201 frames" in printed
        reader = iio.get_reader(path)
        frames = reader.count_frames() if suffix == ".mp4" else len(iio.mimread(path))
        assert frames == 201  # the reset frame and one per step of Pendulum's 200
        assert reader.get_data(0).ndim == 3


def test_bad_requests_exit_2_without_traceback(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cases = [
        (["export", str(tmp_path / "nope"), "--format", "onnx"], "no such run directory"),
        (["eval", str(runs["bitflip"]), "--video", str(tmp_path / "v.mp4")], "rgb_array"),
        (["eval", str(runs["ddpg"]), "--video", str(tmp_path / "v.avi")], ".mp4 or .gif"),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.toml").write_text((runs["ddpg"] / "config.toml").read_text())
    cases.append((["export", str(empty), "--format", "torchscript"], "no checkpoint"))
    for argv, message in cases:
        assert cli.main(argv) == cli.EXIT_INVALID, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", str(runs["ddpg"]), "--format", "tflite"])
    assert exit_info.value.code == 2
    assert not list(tmp_path.glob("v*"))


def test_load_policy_takes_a_turn_based_games_raw_observation(runs: dict[str, Path]) -> None:
    """A PettingZoo game's ``{"observation", "action_mask"}``, one or a batch, is read as the
    engine's masked row (the observation space is a Dict with no shape: every call raised)."""
    policy = wheeler2.load_policy(runs["masked"])
    space = policy.observation_space
    space.seed(0)
    raws = [space.sample() for _ in range(16)]
    for raw in raws[:4]:
        raw["action_mask"][:] = 0
        raw["action_mask"][[1, 5]] = 1
    flat = np.stack(
        [np.concatenate([r["observation"].reshape(-1), r["action_mask"]]) for r in raws]
    ).astype(np.float32)
    want = policy.engine_action(flat)
    assert [policy(r) for r in raws] == want.tolist()
    batch = {key: np.stack([r[key] for r in raws]) for key in ("observation", "action_mask")}
    np.testing.assert_array_equal(policy(batch), want)
    np.testing.assert_array_equal(policy(flat), want)  # the engine's rows, as they are
    assert set(want[:4].tolist()) <= {1, 5}


UNITY_RUN = """
[experiment]
name = "unity-export"
total_steps = 200
eval_every = 200
eval_episodes = 1
backend = "serial"

[env]
id = "unity:mock"
kwargs = {{ num_agents = 2, discrete_action = {discrete} }}

[buffer]
capacity = 1000
batch_size = 16

[[team]]
name = "learner"
algo = "{algo}"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 50
"""


@pytest.mark.usefixtures("quiet_mlagents")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    ("discrete", "algo", "output"),
    [("false", "ddpg", "float32 [B, 2] in [-1, 1]"), ("true", "dqn", "int64 [B] in 0..5")],
)
def test_export_of_a_unity_run_says_what_it_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture, discrete: str, algo: str, output: str
) -> None:
    """Unity has no gymnasium action space: the export described its output from one and
    failed with a traceback (exit 1) after writing the file."""
    pytest.importorskip("mlagents_envs")
    path = tmp_path / "unity.toml"
    path.write_text(UNITY_RUN.format(discrete=discrete, algo=algo))
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    capsys.readouterr()
    out = tmp_path / "policy.pt"
    assert cli.main(["export", str(run), "--format", "torchscript", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"output: action, {output}" in printed, printed
    policy = wheeler2.load_policy(run)
    rows = sample_inputs(policy)[:8]
    # float rounding between the module and the agent's numpy forward, as above
    np.testing.assert_allclose(exported_actions(out, "torchscript", rows), policy(rows), atol=1e-5)


def test_a_flat_stack_policy_stacks_raw_observations_itself(runs: dict[str, Path]) -> None:
    """Under a flat ``[env] stack = 3`` the policy takes raw observations and keeps the last 3
    as the engine does (an episode's first repeated; ``reset(where=...)`` restarts a row); it
    took only rows stacked by the caller, and refused a raw observation."""
    import gymnasium as gym

    policy = wheeler2.load_policy(runs["stack"])
    assert policy.input_layout == "observation[6]: 3 of [2], oldest first"
    envs = [gym.make("PendulumNoVel-v1") for _ in range(2)]
    obs = np.stack([env.reset(seed=3 + i)[0] for i, env in enumerate(envs)])
    history = [[o, o, o] for o in obs]
    policy.reset()
    for t in range(30):
        got = policy(obs)
        stacked = np.stack([np.concatenate(h[-3:]) for h in history]).astype(np.float32)
        np.testing.assert_array_equal(got, policy.env_action(policy.engine_action(stacked)))
        obs = np.stack([env.step(a)[0] for env, a in zip(envs, got)])
        for h, o in zip(history, obs):
            h.append(o)
        if t == 10:  # row 0 starts a new episode
            obs[0] = envs[0].reset(seed=99)[0]
            history[0] = [obs[0]] * 3
            policy.reset(where=np.array([True, False]))
    for env in envs:
        env.close()
