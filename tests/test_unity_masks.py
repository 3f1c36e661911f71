"""Unity's discrete action masks (an Agent's ``WriteDiscreteActionMask``): with ``action_mask =
true`` in ``[env] kwargs`` the adapter folds the branches' masks into the engine's masked rows,
and DQN and PPO members choose only unmasked actions. The mock masks, in branch ``b``, the
action ``(t + id + b) % size_b`` and counts the masked actions it was given (``illegal``)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

pytest.importorskip(
    "mlagents_envs", reason="needs mlagents-envs==0.28.0 with protobuf==3.20.3 (see docs/envs.md)"
)
from wheeler2.envs import _mock_unity  # noqa: E402
from wheeler2.envs.unity import UnityVecEnv  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("quiet_mlagents"),
]

BRANCHES = _mock_unity.DISCRETE_BRANCHES  # (3, 2): 6 folded actions, last branch fastest
ACTS = int(np.prod(BRANCHES))


def make(action_mask: bool, num_envs: int = 2) -> UnityVecEnv:
    kwargs = {"discrete_action": True, "action_masks": True, "num_agents": 3}
    return UnityVecEnv("unity:mock", kwargs, num_envs, seed=0, action_mask=action_mask)


def expected_legal(obs: np.ndarray) -> np.ndarray:
    """The folded mask, by hand from each row's (agent id, step) columns and the mock's rule."""
    out = np.zeros((len(obs), ACTS), np.float32)
    for r, row in enumerate(obs):
        agent, t = int(row[0]), int(row[1])
        masked = [(t + agent + b) % size for b, size in enumerate(BRANCHES)]
        for k in range(ACTS):
            b0, b1 = divmod(k, BRANCHES[1])
            out[r, k] = float(b0 != masked[0] and b1 != masked[1])
    return out


def illegal(env: UnityVecEnv) -> int:
    return sum(copy.mock.illegal for copy in env.copies)


def test_rows_end_with_the_folded_mask_and_terminal_rows_with_none() -> None:
    env = make(action_mask=True)
    try:
        assert env.info.action_mask and env.info.obs_dim == _mock_unity.OBS_SIZE + ACTS
        obs = env.reset().obs
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(40):
            legal = obs[:, -ACTS:]
            np.testing.assert_array_equal(legal, expected_legal(obs))
            assert (legal.sum(1) == 2).all()  # one of 3 and one of 2 masked: 2 x 1 left
            action = np.array([rng.choice(np.flatnonzero(row)) for row in legal])
            step = env.step(action)
            for i in np.flatnonzero(step.terminated | step.truncated):
                assert not step.final_obs[i, -ACTS:].any()  # a terminal observation: no mask
                ends += 1
            obs = step.obs
        assert ends > 10 and illegal(env) == 0
        # The mock does count what it was told not to take: a masked action, once per copy.
        first = np.array([np.flatnonzero(row == 0)[0] for row in obs[:, -ACTS:]])
        env.step(first)
        assert illegal(env) == len(obs)
    finally:
        env.close()


def _acts_with(algo: str, env: UnityVecEnv, steps: int) -> None:
    """``steps`` exploring steps of a fresh ``algo`` agent built for ``env`` as a member's."""
    from wheeler2.registry import resolve_algo
    from wheeler2.runtime.parts import space_info
    from wheeler2.task import Head, RewardHeads

    cls = resolve_algo(algo)
    space = space_info(env.info, RewardHeads([Head("env", 1.0, None)], None))
    agent = cls(space, cls.Params(hidden=[16]), seed=0)
    obs = env.reset().obs
    for _ in range(steps):
        obs = env.step(agent.act(obs, explore=True).action).obs


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_a_member_chooses_only_unmasked_actions(algo: str) -> None:
    env = make(action_mask=True)
    try:
        _acts_with(algo, env, 100)
        assert illegal(env) == 0
    finally:
        env.close()


def test_without_the_key_a_masking_behavior_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = make(action_mask=False)
    try:
        with caplog.at_level(logging.WARNING, logger="wheeler2.envs.unity"):
            _acts_with("dqn", env, 100)
        assert env.info.obs_dim == _mock_unity.OBS_SIZE and not env.info.action_mask
        assert illegal(env) > 0  # what the key is for
        warned = [r for r in caplog.records if "masks actions" in r.getMessage()]
        assert len(warned) == 1 and "action_mask = true" in warned[0].getMessage()
    finally:
        env.close()


def test_action_mask_on_a_continuous_behavior_is_refused() -> None:
    with pytest.raises(ValueError, match=r"action_mask = true in \[env\] kwargs needs a discrete"):
        UnityVecEnv("unity:mock", {"num_agents": 2}, 1, seed=0, action_mask=True)


RUN = """
[experiment]
name = "unitymask"
total_steps = 400
eval_every = 400
eval_episodes = 2
backend = "serial"

[env]
id = "unity:mock"
kwargs = {{ discrete_action = true, action_masks = true, num_agents = 2, action_mask = {mask} }}

[buffer]
capacity = 1000
batch_size = 16

[[team]]
name = "q"
algo = "dqn"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 50
"""


def test_a_run_takes_the_key_and_a_bad_value_names_it(tmp_path) -> None:
    import wheeler2
    from wheeler2.config import ConfigError

    path = tmp_path / "unitymask.toml"
    path.write_text(RUN.format(mask="true"))
    run = wheeler2.run(path, out=str(tmp_path / "runs"))
    assert json.loads((run / "summary.json").read_text())["members"]["q"]["updates"] > 0
    path.write_text(RUN.format(mask='"yes"'))
    with pytest.raises(ConfigError) as info:
        wheeler2.run(path, out=str(tmp_path / "runs"))
    assert "[env]" in str(info.value) and "action_mask" in str(info.value), str(info.value)
