"""HER end to end: a batch sampled from a real run's buffer carries, for every head, the reward
of that head's function recomputed for the (relabelled) goal the batch shows the learner."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from wheeler2.config import load
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.member import Member
from wheeler2.runtime.parts import make_agent, make_env, replay_layout, space_info
from wheeler2.runtime.plan import learner_plan, needs_of, plan_team
from wheeler2.runtime.replays import replay_config

N_BITS = 6

TASK = """
    import numpy as np
    from wheeler2.task import Task, reward_head

    class TwoHeads(Task):
        @reward_head(weight=1.0)
        def reached(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return -np.any(achieved_goal != desired_goal, axis=-1).astype(np.float32)

        @reward_head(weight=0.5)
        def shaped(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            # Depends on the goal, the action and obs: every argument has to arrive right.
            wrong = np.mean(achieved_goal != desired_goal, axis=-1)
            return -wrong + 0.01 * np.asarray(action).reshape(-1) + 0.001 * obs.sum(-1)
"""

CFG = f"""
[experiment]
name = "her-heads"
total_steps = 2000
eval_every = 2000
progress = false

[env]
id = "wheeler2/BitFlip-v0"
kwargs = {{ n_bits = {N_BITS} }}

[task]
spec = "herheads_task:TwoHeads"

[buffer]
capacity = 10_000
batch_size = 512
her = {{ strategy = "future", k = 4 }}

[[team]]
name = "dqn"
algo = "dqn"
role = "learner"
[team.params]
learning_starts = 100
hidden = [8]
"""


def _by_hand(
    obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray, achieved_in_obs: bool
) -> np.ndarray:
    # Policy inputs are [bits, goal], or [bits, achieved goal, goal] with achieved_goal_in_obs;
    # the heads see the stored observation (all but the goal); BitFlip's achieved goal is its bits.
    stored, next_bits, goal = obs[:, :-N_BITS], next_obs[:, :N_BITS], next_obs[:, -N_BITS:]
    assert stored.shape[1] == (2 if achieved_in_obs else 1) * N_BITS
    if achieved_in_obs:
        np.testing.assert_array_equal(stored[:, :N_BITS], stored[:, N_BITS:])
    reached = -np.any(next_bits != goal, axis=-1).astype(np.float32)
    wrong = np.mean(next_bits != goal, axis=-1)
    shaped = -wrong + 0.01 * action.reshape(-1) + 0.001 * stored.sum(-1)
    return np.stack([reached, shaped], axis=1)


@pytest.fixture(params=[False, True], ids=["obs-goal", "obs-achieved-goal"])
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):  # noqa: ANN201
    (tmp_path / "herheads_task.py").write_text(textwrap.dedent(TASK))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("herheads_task", None)
    path = tmp_path / "her.toml"
    path.write_text(CFG)
    flag = str(request.param).lower()
    return load(path, overrides=[f"env.achieved_goal_in_obs={flag}"], out=str(tmp_path / "runs"))


def test_her_batch_recomputes_every_head(config) -> None:  # noqa: ANN001
    from wheeler2.buffer import Replay

    env = make_env(config, 2, 0)
    heads = make_heads(config, env, make_task(config))
    assert heads.names == ("reached", "shaped")
    plan = learner_plan(plan_team(config))
    agent = make_agent(config, plan, space_info(env.info, heads), 0)
    replay = Replay.create(
        replay_layout(env.info, heads, logp=False),
        replay_config(config, needs_of(plan)),
        gamma=0.95,
        relabel=heads.relabel,
        seed=0,
    )
    try:
        member = Member("dqn", "learner", agent, env, heads, replay.writer(num_envs=2), 0)
        for _ in range(600):
            member.step()
        member.writer.flush()
        batch = replay.sample(timeout=5.0)
        expected = _by_hand(
            batch["obs"], batch["action"], batch["next_obs"], config.env.achieved_goal_in_obs
        )
        np.testing.assert_allclose(batch["reward"].reshape(-1, 2), expected, rtol=1e-5, atol=1e-6)
        # Random walks on 6 bits almost never hit their own goal: the 0 rewards of the first
        # head are HER's doing (about k / (k + 1) of rows relabelled, many to a reached goal).
        reached_frac = float((batch["reward"].reshape(-1, 2)[:, 0] == 0).mean())
        assert reached_frac > 0.2, reached_frac
        # The goals the learner sees differ from the envs' own for relabelled rows.
        goals = batch["next_obs"][:, -N_BITS:]
        assert len({g.tobytes() for g in goals}) > 10
    finally:
        member.close()
        replay.close()
