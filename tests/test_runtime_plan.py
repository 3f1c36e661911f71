"""The team as members (``wheeler2/runtime/plan.py``): every member has a name of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

import wheeler2
from wheeler2.config import ConfigError, load
from wheeler2.runtime.plan import plan_team, shares_policy_state, table_learner

TEAM = """
[experiment]
name = "names"
total_steps = 1000
eval_every = 500

[env]
id = "Pendulum-v1"

[[team]]
name = "target"
algo = "ddpg"
role = "learner"

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
count = 2

[[team]]
name = "{third}"
algo = "ppo"
role = "explorer"
"""


def test_copy_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(third="scout"))
    names = [p.name for p in plan_team(load(path))]
    assert names == ["target", "explorer-0", "explorer-1", "scout"]
    assert [p.index for p in plan_team(load(path))] == [0, 1, 2, 3]


def test_a_table_named_like_another_tables_copy_is_refused(tmp_path: Path) -> None:
    # "explorer" with count = 2 makes "explorer-1", the name of the third entry's one member:
    # the reader saw distinct [[team]] names, and a run of it once hung at its end, the
    # coordinator waiting for a fourth member's Finished under a name it had heard already.
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(third="explorer-1"))
    with pytest.raises(ConfigError) as caught:
        plan_team(load(path))
    err = caught.value
    assert err.file == str(path) and err.table == "[[team]] explorer-1" and err.key == "name"
    assert "[[team]] explorer" in err.message
    with pytest.raises(ConfigError, match="explorer-1"):  # `wheeler2 check` says it too
        wheeler2.validate(path)


RECURRENT = """
[experiment]
name = "states"
total_steps = 1000
eval_every = 500

[env]
id = "PendulumNoVel-v1"

[[team]]
name = "target"
algo = "td3"
role = "learner"
params = { core = "gru", core_size = 32 }

[[team]]
name = "twin"
algo = "td3"
role = "actor"
params = { core = "gru", core_size = 32 }
sync = { every = 100 }

[[team]]
name = "lstm"
algo = "td3"
role = "actor"
params = { core = "lstm", core_size = 16 }
sync = { every = 100 }

[[team]]
name = "ppo"
algo = "ppo"
role = "explorer"
params = { core = "gru", core_size = 32 }
"""


def test_only_a_member_with_the_learners_cores_shares_its_policy_state(tmp_path: Path) -> None:
    path = tmp_path / "states.toml"
    path.write_text(RECURRENT)
    plans = {p.name: p for p in plan_team(load(path))}
    learner = table_learner(list(plans.values()), plans["ppo"])
    assert learner.name == "target"
    shares = {name: shares_policy_state(p, learner) for name, p in plans.items()}
    # The LSTM's state (h and c of 16) is as wide as the GRU's 32, and so may be PPO's: width
    # alone would store them as the learner's.
    assert shares == {"target": True, "twin": True, "lstm": False, "ppo": False}
