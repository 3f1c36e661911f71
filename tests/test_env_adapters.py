"""Env adapters at their edges: a Unity player's protocol (specs with the first agents, ports taken
side by side, kwarg typos), Discrete observations with a start, MinAtar's seeded reset, and an
async copy's error reaching the parent. Each test failed before its fix."""

from __future__ import annotations

import multiprocessing
import socket
import threading
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from wheeler2.envs.spaces import ObsFlattener

ROOT = Path(__file__).resolve().parents[1]


def test_discrete_observation_with_a_start_is_one_hot_from_its_start() -> None:
    """Discrete(3, start=1) observes 1, 2 or 3: column value - 1 (an IndexError for 3 before)."""
    flat = ObsFlattener(spaces.Discrete(3, start=1))
    out = np.full(3, 7.0, np.float32)
    flat(1, out)
    np.testing.assert_array_equal(out, [1, 0, 0])
    flat(3, out)
    np.testing.assert_array_equal(out, [0, 0, 1])
    # load_policy's raw observations are read the same way.
    from wheeler2.api import _rows

    rows, single = _rows(np.array([1, 3]), spaces.Discrete(3, start=1), 3, "obs")
    np.testing.assert_array_equal(rows, [[1, 0, 0], [0, 0, 1]])
    assert not single


# -- Unity ---------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_unity_specs_arrive_with_the_first_reset_and_the_adapter_waits(quiet_mlagents) -> None:
    """A Unity player sends a behavior's spec with the first message carrying its agents, not at
    initialization (ML-Agents issue 5183): the mock does the same, and the adapter resets to read
    it (it raised "the environment reports no behavior" before, with every real player)."""
    pytest.importorskip("mlagents_envs")
    from wheeler2.envs._mock_unity import MockUnityEnvironment
    from wheeler2.envs.unity import make

    raw = MockUnityEnvironment(num_agents=2, behaviors=["Walker", "Crawler"])
    try:
        assert list(raw.behavior_specs) == []
        raw.reset()
        assert list(raw.behavior_specs) == ["Walker", "Crawler"]
    finally:
        raw.close()
    env = make("mock", {"num_agents": 2, "behaviors": ["Walker", "Crawler"]}, 2, 0)
    try:
        assert env.behavior == "Walker" and env.num_envs == 4
        np.testing.assert_array_equal(env.reset().obs[:, 0], [0, 1, 0, 1])
    finally:
        env.close()


def _port_player():
    """The mock, holding its port as a player's UnityEnvironment does: mlagents' own
    RpcCommunicator serves on base_port + worker_id (UnityWorkerInUseException if taken)."""
    from mlagents_envs.rpc_communicator import RpcCommunicator
    from wheeler2.envs._mock_unity import MockUnityEnvironment

    class PortPlayer(MockUnityEnvironment):
        def __init__(self, file_name, worker_id=0, base_port=None, seed=0, **_kwargs):
            self.rpc = RpcCommunicator(worker_id, base_port)
            super().__init__(seed=seed, num_agents=2)

        def close(self):
            super().close()
            self.rpc.close()

    return PortPlayer


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_unity_players_open_side_by_side_take_ports_of_their_own(
    quiet_mlagents, monkeypatch
) -> None:
    """A member's copies and the learner's eval copies (or another member's) open players from
    the same kwargs at once: each takes the next free port (before, the second adapter asked
    for worker 0 again and mlagents refused it with UnityWorkerInUseException)."""
    pytest.importorskip("mlagents_envs")
    from wheeler2.envs import unity

    monkeypatch.setattr(unity, "UnityEnvironment", _port_player())
    with socket.socket() as s:
        s.bind(("localhost", 0))
        base = s.getsockname()[1]
    train = unity.make("/nowhere/Player.x86_64", {"base_port": base}, 2, 0)
    try:
        evals = unity.make("/nowhere/Player.x86_64", {"base_port": base}, 2, 100)
        try:
            ports = [c.rpc.port - base for c in train.copies + evals.copies]
            assert ports == [0, 1, 2, 3]
            assert evals.step(np.zeros((4, 2), np.float32)).obs.shape == (4, 4)
        finally:
            evals.close()
    finally:
        train.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_unity_player_kwarg_typo_names_env_kwargs() -> None:
    """An unknown player keyword is the [env] kwargs key's fault, not [env] id's."""
    pytest.importorskip("mlagents_envs")
    from wheeler2.config import ConfigError, load
    from wheeler2.runtime import team
    from wheeler2.runtime.plan import plan_team

    cfg = load(
        ROOT / "cfg" / "unity_mock_team.toml",
        overrides=['env.id="unity:/nowhere/Player.x86_64"', "env.kwargs={no_graphic=true}"],
    )
    with pytest.raises(ConfigError) as err:
        team._probe_env(cfg, plan_team(cfg)[0])
    text = str(err.value)
    assert "[env] kwargs" in text and "no_graphic" in text and "no_graphics" in text, text


def test_minatar_seeded_reset_repeats_its_episode_after_play() -> None:
    """MinAtar's sticky action repeats the game's last action, which its reset kept: after
    earlier play, reset(seed=3) (whose first step draws a sticky action) played the previous
    episode's last action (left) where a fresh env plays no-op, so evals diverged."""
    pytest.importorskip("minatar")
    from wheeler2.envs.pixels import MinAtarEnv

    def play(env: MinAtarEnv, seed: int, actions: list[int]) -> np.ndarray:
        frames = [env.reset(seed=seed)[0]]
        for a in actions:
            obs, _, done, _, _ = env.step(a)
            frames.append(obs)
            if done:
                break
        return np.array(frames)

    right = [2] * 6  # Breakout's minimal set (0, 1, 3): index 2 is right, 1 is left
    fresh = play(MinAtarEnv("breakout"), 3, right)
    used = MinAtarEnv("breakout")
    play(used, 123, [1] * 5)
    again = play(used, 3, right)
    assert fresh.shape == again.shape and np.array_equal(fresh, again)


class _Diverges(gymnasium.Env):
    """Raises in its third step, as a user's simulator may."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == 3:
            raise ValueError("the simulation diverged at t=3")
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_an_async_copys_env_error_reaches_the_parent_as_itself() -> None:
    """An exception in a ``vector = "async"`` copy's env killed its worker and the parent saw a
    bare EOFError; now the parent raises the env's own error. The worker runs in a thread here
    (a subprocess start costs seconds), answering the parent's side of AsyncGymVecEnv."""
    from wheeler2.envs.gym import AsyncGymVecEnv, GymVecEnv, _worker

    env_id = "review-envs/Diverges-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=_Diverges)
    parent, child = multiprocessing.Pipe()
    worker = threading.Thread(target=_worker, args=(child, env_id, {}, 0, ()), daemon=True)
    worker.start()
    env = AsyncGymVecEnv.__new__(AsyncGymVecEnv)
    env.env_id, env.num_envs, env._seed = env_id, 1, 0
    env._conns, env._procs, env._probe = [parent], [], GymVecEnv(env_id, {}, 1, 0)
    try:
        assert parent.recv() == ("ok", None)
        env.reset()
        env.step(np.zeros(1, np.int64))
        env.step(np.zeros(1, np.int64))
        with pytest.raises(ValueError, match="diverged at t=3"):
            env.step(np.zeros(1, np.int64))
        assert env.reset().obs.shape == (1, 2)  # the copy still answers
    finally:
        env.close()
        worker.join(timeout=10)
