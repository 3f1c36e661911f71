"""The small local-backend team several test files run: a DDPG learner on Pendulum and synced
explorers of a kind the test names (``ddpg``, ``ppo``, or a ``module:Class`` of its own with its
params)."""

from __future__ import annotations

from pathlib import Path

TEAM = """
[experiment]
name = "team"
seed = 1
total_steps = {total}
eval_every = 1_000
eval_episodes = 2
backend = "local"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 20_000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 200
hidden = [32, 32]

[[team]]
name = "explorer"
algo = "{explorer}"
role = "explorer"
count = 2
sync = {{ every = 100, keep = ["actor.head"], alpha = 1.0 }}
[team.params]
hidden = [32, 32]
{explorer_params}
"""

EXPLORER_PARAMS = {
    "ddpg": "learning_starts = 200",
    "ppo": 'n_steps = 64\nbatch_size = 32\nactivation = "relu"',
}


def write_team(tmp_path: Path, total: int, explorer: str = "ppo") -> Path:
    path = tmp_path / "team.toml"
    path.write_text(
        TEAM.format(total=total, explorer=explorer, explorer_params=EXPLORER_PARAMS[explorer])
    )
    return path
