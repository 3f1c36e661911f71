import importlib.util
import sys
import types

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="needs pettingzoo (pip install 'pettingzoo[sisl]')")
from gymnasium import spaces  # noqa: E402
from pettingzoo.test import parallel_api_test  # noqa: E402
from pettingzoo.utils.env import ParallelEnv  # noqa: E402
from wheeler2.envs.pettingzoo import PettingZooVecEnv, make, make_parallel_env  # noqa: E402


class Relay(ParallelEnv):
    """A tiny cooperative env with known dynamics, so every adapter output can be checked.

    Walkers ``w0..w2`` see ``[index, t]``; their reward is ``index + action``. Walker ``w1`` leaves
    (terminates) after ``leave_at`` steps; the episode is truncated for the rest at ``horizon``.
    A ``coach`` with a different space is there to be excluded by globs and driven by
    ``other_policy``.
    """

    metadata = {"name": "relay_v0", "render_modes": []}

    def __init__(self, horizon: int = 5, leave_at: int = 3):
        self.horizon, self.leave_at = horizon, leave_at
        self.possible_agents = ["w0", "w1", "w2", "coach"]
        self.coach_actions = []
        self.agents = []
        # PettingZoo expects the same space object on every call.
        walker_obs = spaces.Box(-100.0, 100.0, shape=(2,), dtype=np.float32)
        walker_act = spaces.Box(0.0, 2.0, shape=(1,), dtype=np.float32)
        self._obs_spaces = {a: walker_obs for a in self.possible_agents}
        self._act_spaces = {a: walker_act for a in self.possible_agents}
        self._obs_spaces["coach"] = spaces.Box(-100.0, 100.0, shape=(3,), dtype=np.float32)
        self._act_spaces["coach"] = spaces.Discrete(4)

    def observation_space(self, agent):
        return self._obs_spaces[agent]

    def action_space(self, agent):
        return self._act_spaces[agent]

    def _obs(self, agent):
        if agent == "coach":
            return np.array([self.t, 0.0, 0.0], np.float32)
        return np.array([float(agent[1]), self.t], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        self.coach_actions.append(actions.get("coach"))
        rew = {
            a: (0.0 if a == "coach" else float(a[1]) + float(actions[a][0])) for a in self.agents
        }
        term = {a: a == "w1" and self.t >= self.leave_at for a in self.agents}
        trunc = {a: self.t >= self.horizon for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {"t": self.t} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, infos


@pytest.fixture
def relay_module(monkeypatch):
    module = types.ModuleType("relay_v0")
    module.parallel_env = lambda **kw: Relay(**kw)
    monkeypatch.setitem(sys.modules, "relay_v0", module)
    return "relay_v0"


def test_fake_env_itself_passes_the_api_test():
    parallel_api_test(Relay(horizon=8, leave_at=3), num_cycles=50)


def test_rows_active_mask_and_agent_leaving(relay_module):
    env = PettingZooVecEnv(relay_module, {}, num_envs=2, seed=0, agents=["w*"])
    assert env.agent_names == ["w0", "w1", "w2"] and env.other_agents == ["coach"]
    assert env.num_envs == 6 and env.info.obs_dim == 2 and env.info.act_dim == 1
    out = env.reset()
    np.testing.assert_array_equal(out.obs[:, 0], [0, 1, 2, 0, 1, 2])
    assert env.active.all()
    a = np.zeros((6, 1), np.float32)  # -1 -> 0.0 on Box(0, 2), so reward = walker index - 1 + 1
    a[:] = 0.0  # 0 in [-1, 1] maps to 1.0
    for t in range(1, 6):
        before = env.active.copy()
        step = env.step(a)
        assert [i["active"] for i in step.infos] == before.tolist()
        w1 = [1, 4]
        if t < 3:
            np.testing.assert_allclose(step.reward, [1, 2, 3, 1, 2, 3])
            assert not step.done.any() and env.active.all()
        elif t == 3:
            assert step.terminated[w1].all() and not step.terminated[[0, 2, 3, 5]].any()
            np.testing.assert_allclose(step.final_obs[w1], [[1, 3], [1, 3]])
            assert env.active.tolist() == [True, False, True] * 2  # gone until the copy resets
        elif t == 4:
            assert not step.done.any()
            assert step.reward[w1].tolist() == [0.0, 0.0]  # masked rows carry nothing
            assert env.active.tolist() == [True, False, True] * 2
        else:  # horizon: the live agents are truncated, the copy resets, every row comes back
            assert step.truncated.tolist() == [True, False, True] * 2
            assert not step.terminated.any()
            np.testing.assert_allclose(step.final_obs[[0, 2]], [[0, 5], [2, 5]])
            np.testing.assert_allclose(step.obs[:, 1], 0.0)
            assert env.active.all()
    env.close()


def test_other_policy_drives_unmatched_agents_and_sees_their_obs(relay_module):
    seen = []

    def coach(name, obs):
        if name != "coach":  # w1 is unmatched as well
            return np.array([1.0], np.float32)
        seen.append((name, obs[0]))
        return 2

    env = PettingZooVecEnv(relay_module, {}, 1, 0, agents=["w0", "w2"], other_policy=coach)
    assert env.agent_names == ["w0", "w2"] and env.num_envs == 2
    env.reset()
    for _ in range(3):
        env.step(np.zeros((2, 1), np.float32))
    assert seen == [("coach", 0.0), ("coach", 1.0), ("coach", 2.0)]
    assert env.copies[0].coach_actions == [2, 2, 2]


def test_reward_modes_sum_and_heads(relay_module):
    a = np.array([[1.0], [-1.0], [0.0]], np.float32)  # -> env actions 2, 0, 1
    own = [0 + 2, 1 + 0, 2 + 1]
    row = PettingZooVecEnv(relay_module, {}, 1, 0, agents=["w*"])
    row.reset()
    np.testing.assert_allclose(row.step(a).reward, own)
    summed = make(relay_module, {"agents": ["w*"], "reward_mode": "sum"}, 1, 0)
    summed.reset()
    np.testing.assert_allclose(summed.step(a).reward, [sum(own)] * 3)
    heads = make(relay_module, {"agents": ["w*"], "reward_mode": "heads"}, 1, 0)
    heads.reset()
    step = heads.step(a)
    np.testing.assert_allclose(step.reward, own)
    assert heads.head_names == ["w0", "w1", "w2"]
    for i in range(3):
        np.testing.assert_allclose(step.infos[i]["head_rewards"], own)
    np.testing.assert_allclose(heads.head_rewards, [own] * 3)
    # what a task's reward heads see: "envs.pettingzoo:head_<k>" picks agent k's reward
    from wheeler2.envs.pettingzoo import head_2

    np.testing.assert_allclose(head_2(None, None, None, None, None, step.infos), [own[2]] * 3)


class TimeUp(Relay):
    """Relay whose time limit is ``max_cycles`` and flagged as a termination, as
    ``sisl.multiwalker_v9`` flags its own."""

    def __init__(self, horizon: int = 5, leave_at: int = 99):
        super().__init__(horizon, leave_at)
        self.max_cycles = horizon

    def step(self, actions):
        obs, rew, term, trunc, infos = super().step(actions)
        ended = {a: term[a] or trunc[a] for a in term}
        return obs, rew, ended, dict.fromkeys(term, False), infos


def test_a_time_limit_flagged_as_termination_is_a_truncation(monkeypatch):
    module = types.ModuleType("timeup_v0")
    module.parallel_env = lambda **kw: TimeUp(**kw)
    monkeypatch.setitem(sys.modules, "timeup_v0", module)
    env = PettingZooVecEnv("timeup_v0", {}, 1, 0, agents=["w*"])
    assert env.info.max_episode_steps == 5
    env.reset()
    for t in range(1, 6):
        step = env.step(np.zeros((3, 1), np.float32))
        assert not step.terminated.any()  # the time limit bootstraps
        assert step.truncated.all() == (t == 5) and step.truncated.any() == (t == 5)
    # A real termination before the time limit stays one.
    early = PettingZooVecEnv("timeup_v0", {"horizon": 5, "leave_at": 2}, 1, 0, agents=["w*"])
    early.reset()
    early.step(np.zeros((3, 1), np.float32))
    assert early.step(np.zeros((3, 1), np.float32)).terminated.tolist() == [False, True, False]


def test_mismatched_spaces_are_named(relay_module):
    with pytest.raises(ValueError, match="coach"):
        PettingZooVecEnv(relay_module, {}, 1, 0)
    with pytest.raises(ValueError, match="no agent matches"):
        PettingZooVecEnv(relay_module, {}, 1, 0, agents=["pilot*"])
    with pytest.raises(ValueError, match="reward_mode"):
        PettingZooVecEnv(relay_module, {}, 1, 0, agents=["w*"], reward_mode="mean")


def test_unknown_module_error_is_clear():
    with pytest.raises(ModuleNotFoundError, match="tried pettingzoo.nope.thing_v0, nope.thing_v0"):
        make_parallel_env("nope.thing_v0")


# -- real envs ----------------------------------------------------------------------------------
needs_mpe2 = pytest.mark.skipif(
    importlib.util.find_spec("mpe2") is None, reason="mpe2 not installed (pip install mpe2)"
)
SPREAD = ("mpe2.simple_spread_v3", {"continuous_actions": True, "max_cycles": 25})


def _has_sisl() -> bool:
    try:
        import pettingzoo.sisl.multiwalker_v9  # noqa: F401
    except ImportError:
        return False
    return True


needs_sisl = pytest.mark.skipif(
    not _has_sisl(), reason="multiwalker needs pettingzoo[sisl] (pymunk, box2d)"
)


@needs_mpe2
def test_parallel_api_simple_spread_continuous():
    parallel_api_test(make_parallel_env(*SPREAD), num_cycles=100)


@needs_sisl
def test_parallel_api_multiwalker():
    parallel_api_test(make_parallel_env("sisl.multiwalker_v9", {}), num_cycles=100)


@needs_mpe2
def test_adapter_matches_raw_stepping_on_simple_spread():
    env = make("pettingzoo:" + SPREAD[0], dict(SPREAD[1]), num_envs=1, seed=11)
    raw = make_parallel_env(*SPREAD)
    names = raw.possible_agents
    out = env.reset()
    raw_obs, _ = raw.reset(seed=11)
    np.testing.assert_allclose(out.obs, np.stack([raw_obs[a] for a in names]))
    rng = np.random.default_rng(0)
    for _ in range(10):
        a = rng.uniform(-1, 1, (3, 5)).astype(np.float32)
        step = env.step(a)
        # [-1, 1] onto Box(0, 1)
        raw_obs, rew, *_ = raw.step({n: (a[k] + 1) / 2 for k, n in enumerate(names)})
        np.testing.assert_allclose(step.obs, np.stack([raw_obs[n] for n in names]), atol=1e-5)
        np.testing.assert_allclose(step.reward, [rew[n] for n in names], atol=1e-5)


@needs_mpe2
def test_simple_spread_runs_with_autoreset():
    env = make("pettingzoo:" + SPREAD[0], dict(SPREAD[1]), num_envs=2, seed=0)
    assert env.num_envs == 6 and env.info.obs_dim == 18 and env.info.act_dim == 5
    assert not env.info.discrete and env.info.max_episode_steps == 25
    env.reset()
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(300):
        step = env.step(rng.uniform(-1, 1, (6, 5)).astype(np.float32))
        assert step.obs.shape == (6, 18) and step.final_obs.shape == (6, 18)
        assert step.reward.shape == (6,) and step.reward.dtype == np.float32
        if (t + 1) % 25 == 0:
            assert step.truncated.all()
            ends += 1
        else:
            assert not step.done.any()
        assert env.active.all()
    assert ends == 12


@needs_mpe2
def test_simple_spread_discrete_actions():
    """Discrete actions reach the env as the given integers (the adapter matches raw stepping
    with the same actions), and the episode is truncated at max_cycles then autoreset."""
    env = make("pettingzoo:mpe2.simple_spread_v3", {"max_cycles": 10}, 1, 0)
    assert env.info.discrete and env.info.act_dim == 5
    raw = make_parallel_env("mpe2.simple_spread_v3", {"max_cycles": 10})
    names = raw.possible_agents
    out = env.reset()
    raw_obs, _ = raw.reset(seed=0)
    np.testing.assert_allclose(out.obs, np.stack([raw_obs[n] for n in names]))
    rng = np.random.default_rng(0)
    for t in range(10):
        a = rng.integers(0, 5, 3)
        step = env.step(a)
        raw_obs, rew, *_ = raw.step({n: int(a[k]) for k, n in enumerate(names)})
        np.testing.assert_allclose(step.final_obs, np.stack([raw_obs[n] for n in names]), atol=1e-5)
        np.testing.assert_allclose(step.reward, [rew[n] for n in names], atol=1e-5)
        assert step.truncated.all() == (t == 9) and not step.terminated.any()
    # Autoreset: the obs to act on next is a fresh episode's, not the final one.
    assert not np.allclose(step.obs, step.final_obs)
    step = env.step(rng.integers(0, 5, 3))
    assert not step.done.any()


@needs_sisl
def test_multiwalker_walkers_fall_and_leave():
    # Without terminate_on_fall a fallen walker leaves while the others go on.
    kwargs = {"terminate_on_fall": False, "remove_on_fall": True, "max_cycles": 200}
    env = make("pettingzoo:sisl.multiwalker_v9", kwargs, num_envs=1, seed=0)
    assert env.num_envs == 3 and env.info.obs_dim == 31 and env.info.act_dim == 4
    assert env.info.max_episode_steps == 200
    env.reset()
    rng = np.random.default_rng(0)
    saw_masked = ends = 0
    for _ in range(400):
        before = env.active.copy()
        step = env.step(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
        assert [i["active"] for i in step.infos] == before.tolist()
        # a row reports a done flag only while active, so at most once per episode
        assert not (step.done & ~before).any()
        assert (step.reward[~before] == 0).all()
        saw_masked += int((~before).any())
        if step.done[before].all():
            ends += 1
            assert env.active.all()  # the copy reset
    assert ends >= 2 and saw_masked > 0


@needs_sisl
def test_multiwalker_time_limit_is_a_truncation():
    # multiwalker_v9 flags max_cycles as a termination; the adapter reports a truncation.
    kwargs = {"terminate_on_fall": False, "max_cycles": 4}
    env = make("pettingzoo:sisl.multiwalker_v9", kwargs, num_envs=1, seed=0)
    env.reset()
    for t in range(1, 5):
        step = env.step(np.zeros((3, 4), np.float32))
        assert not step.terminated.any() and step.truncated.all() == (t == 4)
