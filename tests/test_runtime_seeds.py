"""The seeds a run hands out (``wheeler2/runtime/seeds.py``): the env copies of its members and
its eval episodes never share a seed, and runs of other seeds evaluate on other episodes."""

from __future__ import annotations

import copy
import dataclasses
import operator
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils import seeding

from wheeler2.agent import SpaceInfo
from wheeler2.config import Config, load
from wheeler2.runtime.parts import make_agent
from wheeler2.runtime.plan import plan_team
from wheeler2.runtime.seeds import eval_env_seed, eval_reset_seed, member_seed, resumed_env_seed

TEAM = """
[experiment]
name = "seeds"
total_steps = 1000
eval_every = 500
eval_episodes = 10

[env]
id = "Pendulum-v1"
num_envs = 8

[[team]]
name = "target"
algo = "ddpg"
role = "learner"

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
count = 2
"""


def _config(tmp_path: Path, seed: int) -> Config:
    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    config = load(path)
    return dataclasses.replace(config, experiment=dataclasses.replace(config.experiment, seed=seed))


def _seeds(config: Config) -> tuple[set[int], set[int]]:
    """(the first-reset seeds of every member's env copies, the eval episodes' reset seeds)."""
    copies, episodes = int(config.env.num_envs), int(config.experiment.eval_episodes)
    train = {member_seed(config, p) + i for p in plan_team(config) for i in range(copies)}
    evals = {eval_reset_seed(config) + i for i in range(episodes)}
    evals |= {eval_env_seed(config) + i for i in range(episodes)}
    return train, evals


def test_train_and_eval_seeds_are_disjoint_within_and_across_runs(tmp_path: Path) -> None:
    # Run seed 0 with 8 copies once gave its training copy 7 the seed of eval episode 0, and
    # consecutive run seeds shared 9 of their 10 eval episodes (19 distinct over seeds 0..9).
    evals_of: dict[int, set[int]] = {}
    train_of: dict[int, set[int]] = {}
    for seed in range(10):
        train_of[seed], evals_of[seed] = _seeds(_config(tmp_path, seed))
        assert len(train_of[seed]) == 3 * 8  # no two copies of the team share a seed
        assert not train_of[seed] & evals_of[seed], f"run seed {seed}"
    for a in range(10):
        for b in range(a + 1, 10):
            assert not evals_of[a] & evals_of[b], f"run seeds {a} and {b} share eval episodes"
            assert not train_of[a] & train_of[b], f"run seeds {a} and {b} share env seeds"
            assert not train_of[a] & evals_of[b] and not evals_of[a] & train_of[b]


def test_seeds_are_a_function_of_the_run_seed(tmp_path: Path) -> None:
    # Same --seed, same episodes: every eval and every rerun resets with the same seeds.
    assert _seeds(_config(tmp_path, 3)) == _seeds(_config(tmp_path, 3))


def test_a_resumed_members_env_seeds_fit_int32_and_move_on() -> None:
    # A 32-bit draw was at or over 2**31 half the time: envpool (int32 seeds) refused the
    # resumed run with a bare AssertionError.
    draws = [
        resumed_env_seed(seed, steps) for seed in (0, 10_007, 99_000) for steps in range(1, 200)
    ]
    assert max(draws) + 1024 < 2**31  # room for a copy index on top
    assert len(set(draws)) == len(draws)
    assert resumed_env_seed(0, 5_000) == resumed_env_seed(0, 5_000)


AGENT_TEAM = """
[experiment]
name = "streams"
total_steps = 1000
eval_every = 500
seed = {seed}

[env]
id = "{env}"
num_envs = 4

[[team]]
name = "target"
algo = "{algo}"
role = "learner"
"""


def _first_draws(rng: np.random.Generator) -> np.ndarray:
    return copy.deepcopy(rng).random(16)  # a copy: the generator itself is left where it was


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize(
    ("env_id", "algo", "space", "streams"),
    [
        ("CartPole-v1", "dqn", SpaceInfo(4, 2, True), ("rng",)),  # epsilon-greedy draws
        # warm-up actions, action noise
        ("Pendulum-v1", "ddpg", SpaceInfo(3, 1, False), ("rng", "noise.rng")),
    ],
)
def test_an_agents_generators_draw_apart_from_its_env_copies(
    tmp_path: Path, seed: int, env_id: str, algo: str, space: SpaceInfo, streams: tuple[str, ...]
) -> None:
    # With the member's seed as its own, DQN's epsilon generator (seed) drew env copy 0's reset
    # stream, and DDPG's noise (seed + 1) and warm-up draws (seed + 2) copies 1's and 2's:
    # numpy seeds both kinds of generator the same way.
    path = tmp_path / "team.toml"
    path.write_text(AGENT_TEAM.format(seed=seed, env=env_id, algo=algo))
    config = load(path)
    (plan,) = plan_team(config)
    agent = make_agent(config, plan, space, member_seed(config, plan))
    # The stream copy i draws its episodes from: env.reset(seed=member seed + i) (registry.make_env)
    # sets the env's np_random to gymnasium's seeding.np_random of that seed.
    copies = [_first_draws(seeding.np_random(member_seed(config, plan) + i)[0]) for i in range(4)]
    for stream in streams:
        draws = _first_draws(operator.attrgetter(stream)(agent))
        for i, env_draws in enumerate(copies):
            assert not np.array_equal(draws, env_draws), f"{algo}'s {stream} is env copy {i}'s"
