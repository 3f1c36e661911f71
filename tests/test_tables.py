"""Teams of unlike agents (issue 16.3): members with other observation or action spaces go in
replay tables of their own, each with its own learner, replay (or none) and weight sync.

MPE2 simple_tag: the adversaries see 16 numbers, the prey 14, so predators and prey cannot
share one replay. Before tables existed a config could hold one learner only, and a prey
member writing into the predators' replay crashed the run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2.config import ConfigError, load, validate
from wheeler2.runtime import run_experiment
from wheeler2.runtime.member import MemberLoop
from wheeler2.runtime.replays import replay_spec
from wheeler2.runtime.team import prepare_team

TEAMS = """
[experiment]
name = "tag-tables"
seed = 0
total_steps = {steps}
eval_every = 300
eval_episodes = 2
backend = "{backend}"
progress = false

[env]
id = "pettingzoo:mpe2.simple_tag_v3"
kwargs = {{ continuous_actions = true, max_cycles = 25 }}

[buffer]
capacity = 2_000
batch_size = 16
checkpoint = true

[[team]]
name = "predators"
algo = "ddpg"
role = "learner"
agents = ["adversary_*"]
[team.params]
learning_starts = 60
hidden = [16, 16]

[[team]]
name = "prey"
algo = "ddpg"
role = "learner"
table = "prey"
agents = ["agent_*"]
[team.params]
learning_starts = 60
hidden = [16, 16]

[[team]]
name = "prey-explorer"
algo = "ppo"
role = "explorer"
table = "prey"
agents = ["agent_*"]
sync = {{ every = 50, keep = ["actor.head"] }}
[team.params]
n_steps = 25
batch_size = 25
hidden = [16, 16]
activation = "relu"
"""


def _config(tmp_path: Path, backend: str = "serial", steps: int = 600, **sets: str):
    path = tmp_path / "teams.toml"
    path.write_text(TEAMS.format(backend=backend, steps=steps))
    return load(path, [f"{k}={v}" for k, v in sets.items()], out=str(tmp_path / "runs"))


def _raw(members: list[dict], backend: str = "serial") -> dict:
    return {
        "experiment": {"name": "t", "total_steps": 100, "eval_every": 50, "backend": backend},
        "env": {"id": "Pendulum-v1"},
        "team": members,
    }


def test_a_member_is_in_the_main_table_unless_it_names_another() -> None:
    config = validate(
        _raw(
            [
                {"name": "a", "algo": "ddpg", "role": "learner"},
                {"name": "b", "algo": "ddpg", "role": "learner", "table": "other"},
                {"name": "c", "algo": "ppo", "role": "explorer"},
            ]
        )
    )
    assert [m.table for m in config.team] == ["main", "other", "main"]
    assert config.tables == ("main", "other") and config.learner.name == "a"
    # The resolved config names only tables other than the default, and reads back equal.
    assert validate(__import__("tomllib").loads(config.to_toml())) == config
    assert config.to_toml().count("table = ") == 1


@pytest.mark.parametrize(
    "members, message",
    [
        (
            [
                {"name": "a", "algo": "ddpg", "role": "learner"},
                {"name": "b", "algo": "ddpg", "role": "learner"},
            ],
            "exactly one learner allowed, found 'a' (count 1), 'b' (count 1); "
            'give each its own table = "..."',
        ),
        (
            [
                {"name": "a", "algo": "ddpg", "role": "learner"},
                {"name": "b", "algo": "ppo", "role": "explorer", "table": "x"},
            ],
            "no learner of table 'x': exactly one member needs role = \"learner\" (members: 'b')",
        ),
        (
            [{"name": "a", "algo": "ddpg", "role": "learner", "table": "../up"}],
            "a plain name",
        ),
    ],
)
def test_each_table_needs_exactly_one_learner(members, message) -> None:
    with pytest.raises(ConfigError) as info:
        validate(_raw(members))
    assert message in str(info.value)


def test_ray_takes_several_tables() -> None:
    members = [
        {"name": "a", "algo": "ddpg", "role": "learner"},
        {"name": "b", "algo": "ddpg", "role": "learner", "table": "other"},
    ]
    assert validate(_raw(members, backend="ray")).tables == ("main", "other")


def test_prepare_gives_each_table_its_own_space_learner_and_layout(tmp_path) -> None:
    setup = prepare_team(_config(tmp_path), {})
    main, prey = setup.tables
    assert (main.name, main.lead.name, prey.name, prey.lead.name) == (
        "main",
        "predators",
        "prey",
        "prey",
    )
    assert (main.info.obs_dim, prey.info.obs_dim) == (16, 14)
    assert main.layout().obs_dim == 16 and prey.layout().obs_dim == 14
    assert [p.name for p in prey.plans] == ["prey", "prey-explorer"]
    assert prey.uses_logp and not main.uses_logp  # only the prey table has a PPO producer
    assert replay_spec(_config(tmp_path), prey).seed != replay_spec(_config(tmp_path), main).seed


@pytest.fixture
def replays_at_start(monkeypatch) -> dict[str, dict]:
    """Each member loop's replay as it was handed over: counters and stored observations."""
    seen: dict[str, dict] = {}
    init = MemberLoop.__init__

    def spy(self, config, plan, wiring) -> None:  # noqa: ANN001
        init(self, config, plan, wiring)
        if wiring.replay is not None:
            seen[plan.name] = {
                "replay": wiring.replay,
                "stats": wiring.replay.stats(),
                "obs": wiring.replay.storage.arrays["obs"].copy(),
            }

    monkeypatch.setattr(MemberLoop, "__init__", spy)
    return seen


def test_serial_two_tables_run_evaluate_checkpoint_and_resume(tmp_path, replays_at_start):
    run_dir = run_experiment(_config(tmp_path))
    # Members of a table share its replay; the tables do not share one.
    assert replays_at_start["prey"]["replay"] is replays_at_start["prey-explorer"]["replay"]
    assert replays_at_start["prey"]["replay"] is not replays_at_start["predators"]["replay"]

    summary = json.loads((run_dir / "summary.json").read_text())
    tables = summary["tables"]
    assert tables["main"]["learner"] == "predators" and tables["prey"]["learner"] == "prey"
    assert tables["main"]["eval"] == summary["eval"]  # the lead's evals are the run's
    assert [e["env_steps"] for e in tables["prey"]["eval"]][-1] == summary["env_steps"] == 600
    assert len(tables["prey"]["eval"]) >= 2
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert any(",prey,eval_return," in r for r in rows)

    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    steps = payload["member_steps"]
    main_total, prey_total = payload["replay"]["total"], payload["table_replays"]["prey"]["total"]
    # Each replay holds exactly its own members' transitions (the prey's rows are 14 wide).
    assert main_total == steps["predators"]
    assert prey_total == steps["prey"] + steps["prey-explorer"]
    prey_obs = payload["table_replays"]["prey"]["arrays"]["obs"].numpy()
    assert prey_obs.shape[1] == 14 and np.abs(prey_obs[:prey_total]).sum() > 0

    replays_at_start.clear()
    config = load(run_dir / "config.toml", overrides=["experiment.total_steps=900"])
    run_experiment(config, run_dir, resume=True)
    for name, total in (("predators", main_total), ("prey", prey_total)):
        assert replays_at_start[name]["stats"]["inserts"] == total, name
    np.testing.assert_array_equal(replays_at_start["prey"]["obs"], prey_obs)
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["env_steps"] == 900
    assert len(resumed["tables"]["prey"]["eval"]) > len(tables["prey"]["eval"])


def test_local_two_tables_each_explorer_syncs_from_its_own_tables_learner(tmp_path):
    # The prey explorer's actor (obs 14) cannot take the predators' (obs 16) weights: a sync
    # routed to the wrong table's learner fails on shapes and the run exits with an error.
    run_dir = run_experiment(_config(tmp_path, backend="local"))
    team = json.loads((run_dir / "team.json").read_text())
    assert team["prey-explorer"]["synced"] and "head.weight" not in team["prey-explorer"]["synced"]
    assert team["predators"]["agents"] == ["adversary_0", "adversary_1", "adversary_2"]
    assert team["prey"]["agents"] == ["agent_0"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 600
    assert summary["members"]["prey-explorer"].get("sync_version", 0) >= 1
    assert summary["tables"]["prey"]["final_eval_return"] is not None


def test_shipped_simple_tag_config_is_two_tables() -> None:
    root = Path(__file__).resolve().parents[1]
    config = load(root / "cfg" / "simple_tag_teams.toml")
    assert config.tables == ("main", "prey")
    assert {m.name: m.algo for m in config.team} == {"predators": "ddpg", "prey": "ppo"}
    assert textwrap.dedent(config.to_toml()).count('table = "prey"') == 1
