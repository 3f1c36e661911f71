"""Detached per-head explorers (issue 14): a DDPG explorer with ``head = "<name>"`` pulls the
learner's critic by weight sync and trains its own actor on that one head's Q; the learner's
actor stays the common one. Checked: the DPG step against a hand-made linear critic, the pulled
critic against the learner's, the learner's actor left alone, the config errors, and a short
local team run with two such explorers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG, Params

from wheeler2.agent import ActOut, Batch, SpaceInfo, Transitions
from wheeler2.config import ConfigError, load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.team import prepare_team
from wheeler2.sync import (
    ModuleSet,
    WeightClient,
    WeightPublisher,
    publish_view,
    pull_target,
)

OBS, ACT = 3, 2
SPACE = SpaceInfo(obs_dim=OBS, act_dim=ACT, discrete=False, heads=("a", "b"), head_weights=(1, 1))
W = np.array([2.0, -0.5], np.float32)  # Q_b(s, a) = W . a; Q_a = -Q_b


def _agent(head: str = "", **kw: object) -> DDPG:
    params = Params(hidden=[4], learning_starts=0, head=head, head_updates=1.0, head_batch=8, **kw)
    return DDPG(SPACE, params, seed=1)


@torch.no_grad()
def _linear_critic(agent: DDPG) -> None:
    """Head b's net computes W . a exactly through its relu layer (relu(a) - relu(-a) = a); head
    a's net its negation, so the sum of both heads, what the learner's actor climbs, is flat."""
    for net, sign in zip(agent.critic.nets, (-1.0, 1.0)):
        first, last = net.trunk[0], net.head
        first.weight.zero_()
        first.bias.zero_()
        for j in range(ACT):
            first.weight[j, OBS + j] = 1.0
            first.weight[ACT + j, OBS + j] = -1.0
        last.weight.copy_(torch.tensor([[*W, *(-W)]]) * sign)
        last.bias.zero_()


def _step(agent: DDPG, obs: np.ndarray) -> dict[str, float] | None:
    n = len(obs)
    action = np.zeros((n, ACT), np.float32)
    return agent.observe(
        Transitions(
            obs=obs,
            action=action,
            reward=np.zeros((n, 2), np.float32),
            next_obs=obs,
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            reset_obs=obs,
            act_out=ActOut(action=action),
        )
    )


def _pulled(learner: DDPG, explorer: DDPG) -> tuple[WeightPublisher, WeightClient]:
    pub = WeightPublisher.create(publish_view(learner, ("critic",)))
    client = WeightClient(pub.handle(), pull_target(explorer), [], 1.0, "reach")
    pub.publish(publish_view(learner, ("critic",)))
    assert client.pull() == 1
    return pub, client


def test_actor_climbs_the_synced_heads_q_and_only_that_head():
    learner, explorer = _agent(), _agent("b", lr_actor=1e-3)
    _linear_critic(learner)
    pub, client = _pulled(learner, explorer)
    try:
        obs = np.random.default_rng(0).normal(size=(64, OBS)).astype(np.float32)
        bias0 = explorer.actor.head.bias.detach().clone()
        _step(explorer, obs[:1])  # one env step, head_updates = 1: exactly one Adam step
        # Adam's first step is lr * g / (|g| + eps): each output's bias moves by lr toward the
        # sign of its Q_b slope, dQ_b/da_j = W_j, whatever the states.
        moved = explorer.actor.head.bias.detach() - bias0
        torch.testing.assert_close(moved, torch.tensor([1e-3, -1e-3]), atol=1e-6, rtol=0)

        def q_b() -> float:
            with torch.no_grad():
                return float((explorer.actor(torch.as_tensor(obs)).numpy() @ W).mean())

        before = q_b()
        for i in range(0, 64 * 10, 4):
            _step(explorer, obs[np.arange(i, i + 4) % 64])
        # Q_b's maximum over [-1, 1]^2 is |W|_1 = 2.5, at sign(W).
        assert q_b() > before + 0.5
        with torch.no_grad():
            mu = explorer.actor(torch.as_tensor(obs)).numpy()
        assert (np.sign(mu) == np.sign(W)).all()
    finally:
        client.close()
        pub.close()


def test_head_a_moves_the_other_way():
    learner, explorer = _agent(), _agent("a", lr_actor=1e-3)
    _linear_critic(learner)
    pub, client = _pulled(learner, explorer)
    try:
        bias0 = explorer.actor.head.bias.detach().clone()
        _step(explorer, np.ones((1, OBS), np.float32))
        moved = explorer.actor.head.bias.detach() - bias0
        torch.testing.assert_close(moved, torch.tensor([-1e-3, 1e-3]), atol=1e-6, rtol=0)
    finally:
        client.close()
        pub.close()


def _train_learner(learner: DDPG, steps: int = 3) -> None:
    rng = np.random.default_rng(0)
    for _ in range(steps):
        b = 16
        learner.learn(
            Batch.from_numpy(
                {
                    "obs": rng.normal(size=(b, OBS)).astype(np.float32),
                    "action": rng.uniform(-1, 1, (b, ACT)).astype(np.float32),
                    "reward": rng.normal(size=(b, 2)).astype(np.float32),
                    "next_obs": rng.normal(size=(b, OBS)).astype(np.float32),
                    "discount": np.full(b, 0.98, np.float32),
                    "weight": np.ones(b, np.float32),
                    "index": np.arange(b),
                },
                "cpu",
            )
        )


@pytest.mark.parametrize("critic", ["separate", "shared"])
def test_pulled_critic_is_the_learners_and_the_learners_actor_is_left_alone(critic):
    learner, explorer = _agent(critic=critic), _agent("b", critic=critic)
    view = publish_view(learner, ("critic",))
    pub = WeightPublisher.create(view)
    client = WeightClient(pub.handle(), pull_target(explorer), [], 1.0, "reach")
    try:
        _train_learner(learner)
        pub.publish(view)
        assert client.pull() == 1
        obs = torch.randn(32, OBS)
        act = torch.rand(32, ACT) * 2 - 1
        with torch.no_grad():
            want = learner.critic(obs, act)[:, 1]
            got = explorer.head_trainer.q(obs, act)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        for mine, theirs in zip(explorer.critic.parameters(), learner.critic.parameters()):
            assert torch.equal(mine, theirs)
        # Only the critic is synced: the explorer's actor is its own.
        assert set(client.synced) == {f"critic/{k}" for k in learner.critic.state_dict()}

        actor0 = {k: v.clone() for k, v in learner.actor.state_dict().items()}
        explorer_actor0 = {k: v.clone() for k, v in explorer.actor.state_dict().items()}
        obs_np = np.random.default_rng(1).normal(size=(200, OBS)).astype(np.float32)
        for row in obs_np:
            _step(explorer, row[None])
        assert explorer.head_trainer.updates == 200
        for k, v in learner.actor.state_dict().items():
            assert torch.equal(v, actor0[k]), k
        assert any(
            not torch.equal(v, explorer_actor0[k]) for k, v in explorer.actor.state_dict().items()
        )
        # The explorer never trains the critic it reads: it still is the learner's.
        for mine, theirs in zip(explorer.critic.parameters(), learner.critic.parameters()):
            assert torch.equal(mine, theirs)

        # A later publish reaches the explorer's critic, not its actor.
        _train_learner(learner, steps=2)
        pub.publish(view)
        mu = {k: v.clone() for k, v in explorer.actor.state_dict().items()}
        assert client.pull() == 2
        for mine, theirs in zip(explorer.critic.parameters(), learner.critic.parameters()):
            assert torch.equal(mine, theirs)
        for k, v in explorer.actor.state_dict().items():
            assert torch.equal(v, mu[k]), k
    finally:
        client.close()
        pub.close()


def test_nothing_but_the_actor_is_published_when_nobody_pulls():
    learner = _agent()
    assert publish_view(learner, ()) is learner.actor
    both = publish_view(learner, ("critic",))
    assert isinstance(both, ModuleSet)
    pub = WeightPublisher.create(both)
    try:
        assert pub.pulls == ("critic",)
        names = [n for n, _, _ in pub.handle().layout]
        # The actor keeps the names it syncs under alone, so actor-syncing explorers still match.
        assert names[: len(learner.actor.state_dict())] == list(learner.actor.state_dict())
        # An ordinary explorer of the same table takes the actor from that block, not the critic.
        other = _agent()
        client = WeightClient(pub.handle(), other.actor, [], 1.0, "plain")
        try:
            _train_learner(learner)
            pub.publish(both)
            assert client.pull() == 1
            assert set(client.synced) == set(learner.actor.state_dict())
            for k, v in other.actor.state_dict().items():
                assert torch.equal(v, learner.actor.state_dict()[k]), k
        finally:
            client.close()
    finally:
        pub.close()


def test_the_detached_explorer_waits_for_learning_starts():
    learner, explorer = (
        _agent(),
        DDPG(SPACE, Params(hidden=[4], learning_starts=5, head="b"), seed=1),
    )
    pub, client = _pulled(learner, explorer)
    try:
        obs = np.ones((1, OBS), np.float32)
        assert [_step(explorer, obs) for _ in range(4)] == [None] * 4
        assert explorer.head_trainer.updates == 0
        for _ in range(4):  # head_updates = 0.5: one update every second step
            _step(explorer, obs)
        assert explorer.head_trainer.updates == 2
    finally:
        client.close()
        pub.close()


# -- config ---------------------------------------------------------------------------------

TEAM = """
[experiment]
name = "detached"
seed = 0
total_steps = {total}
eval_every = 200
eval_episodes = 1
backend = "{backend}"
progress = false
out = "{out}"

[env]
id = "Reacher-v5"

[task]
spec = "tasks.reacher:Reacher"

[buffer]
capacity = 5_000
batch_size = 32
prioritized = false

[[team]]
name = "target"
algo = "{learner_algo}"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100
{learner_extra}

[[team]]
name = "reach"
algo = "{algo}"
role = "{role}"
count = 2
{sync}
{per_copy}
[team.params]
hidden = [{hidden}]
{extra}
"""


def _config(tmp_path: Path, **kw: object) -> Path:
    values = {
        "total": 400,
        "backend": "serial",
        "out": tmp_path / "runs",
        "learner_algo": "ddpg",
        "learner_extra": "",
        "algo": "ddpg",
        "role": "explorer",
        "sync": "sync = { every = 100 }",
        "per_copy": 'per_copy = {{ head = ["distance", "{head}"] }}',
        "head": "effort",
        "hidden": "16, 16",
        "extra": "learning_starts = 100",
    }
    values.update(kw)
    values["per_copy"] = str(values["per_copy"]).format(head=values["head"])
    path = tmp_path / "detached.toml"
    path.write_text(TEAM.format(**values))
    return path


def _refused(tmp_path: Path, **kw: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        prepare_team(load(_config(tmp_path, **kw)), {})
    return info.value


def test_unknown_head_names_file_member_key_and_the_tasks_heads(tmp_path):
    err = _refused(tmp_path, head="upright")
    assert err.file == str(tmp_path / "detached.toml")
    assert (err.table, err.key) == ("[[team]] reach", "head")
    assert "'upright'" in err.message and "distance, effort" in err.message


def test_head_on_a_learner_is_refused(tmp_path):
    err = _refused(tmp_path, learner_extra='head = "distance"')
    assert (err.table, err.key) == ("[[team]] target", "head")
    assert "learner" in err.message


def test_head_on_an_actor_or_without_sync_or_with_normalize_obs_is_refused(tmp_path):
    err = _refused(tmp_path, role="actor")
    assert (err.table, err.key) == ("[[team]] reach", "head")
    assert 'role = "explorer"' in err.message
    err = _refused(tmp_path, sync="")
    assert (err.table, err.key) == ("[[team]] reach", "sync")
    err = _refused(tmp_path, extra="learning_starts = 100\nnormalize_obs = true")
    assert (err.table, err.key) == ("[[team]] reach", "normalize_obs")


@pytest.mark.parametrize("algo", ["td3", "ppo"])
def test_head_on_an_algorithm_without_it_is_refused(tmp_path, algo):
    with pytest.raises(ConfigError) as info:
        load(_config(tmp_path, algo=algo, per_copy="", extra='head = "distance"'))
    err = info.value
    assert (err.table, err.key) == ("[[team]] #2 (reach).params", "head")


def test_a_learner_that_publishes_no_critic_is_refused(tmp_path):
    # (TD3 publishes its twin critic since issue 37, for CEM-RL; SAC still publishes none.)
    err = _refused(tmp_path, learner_algo="sac")
    assert (err.table, err.key) == ("[[team]] reach", "sync")
    assert "'critic'" in err.message and "SAC" in err.message


def test_a_critic_of_other_sizes_is_refused(tmp_path):
    err = _refused(tmp_path, hidden="16, 8")
    assert (err.table, err.key) == ("[[team]] reach", "sync")
    assert "critic" in err.message and "[8, 16]" in err.message and "hidden" in err.message


def test_ray_publishes_the_pulled_critic_too(tmp_path):
    # Since issue 37 the ray board carries the modules explorers pull by name, as the shared
    # block does (tests/test_ray.py runs CEM-RL's critic pull on a cluster).
    setup = prepare_team(load(_config(tmp_path, backend="ray")), {})
    assert setup.tables[0].pulls == ("critic",)


def test_the_table_pulls_the_critic_only_when_a_member_asks(tmp_path):
    setup = prepare_team(load(_config(tmp_path)), {})
    assert setup.tables[0].pulls == ("critic",)
    table = prepare_team(load(_config(tmp_path, per_copy="")), {}).tables[0]
    assert table.pulls == ()
    assert table.published is table.learner.actor


# -- a team run -----------------------------------------------------------------------------


def _trained(run_dir: Path) -> set[str]:
    """The members that logged a head-actor loss: the detached explorers that trained."""
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    return {r.split(",")[2] for r in rows if ",head_actor_loss," in r}


def test_serial_team_trains_each_detached_explorer_on_its_own_head(tmp_path):
    run_dir = run_experiment(load(_config(tmp_path, total=600)))
    members = json.loads((run_dir / "summary.json").read_text())["members"]
    # Serial turns are round robin: 200 steps each, past the explorers' learning_starts = 100.
    assert [members[m]["env_steps"] for m in ("target", "reach-0", "reach-1")] == [200] * 3
    assert _trained(run_dir) == {"reach-0", "reach-1"}
    # Each climbed a different head's critic from a different actor: different losses.
    assert members["reach-0"]["head_actor_loss"] != members["reach-1"]["head_actor_loss"]


def test_local_team_with_a_detached_explorer_per_head_runs(tmp_path):
    config = load(_config(tmp_path, backend="local", total=600))
    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 600
    team = json.loads((run_dir / "team.json").read_text())
    for name in ("reach-0", "reach-1"):
        assert team[name]["synced"] and all(s.startswith("critic/") for s in team[name]["synced"])
    assert team["target"]["synced"] == []
    # How the 600 steps split between processes is the scheduler's: under load one explorer
    # may start late and take few. An explorer trains once its own steps pass learning_starts
    # (100) and the first whole update is earned (0.5 per step), and never before.
    trained = _trained(run_dir)
    for name in ("reach-0", "reach-1"):
        steps = summary["members"][name]["env_steps"]
        assert summary["members"][name]["ended"] == "finished"
        assert (name in trained) == (steps >= 101), f"{name} took {steps} steps"


def test_a_normalizing_learner_is_refused_with_the_one_fix_that_works(tmp_path):
    # The detached explorer copies the critic whole: neither normalizing this member (refused
    # above) nor keeping the critic's input layer (refused for modules taken whole) can work.
    err = _refused(tmp_path, learner_extra="normalize_obs = true")
    assert (err.table, err.key) == ("[[team]] reach", "sync")
    assert "copies the learner's critic whole" in err.message
    assert "normalize_obs = false in the learner's" in err.message
    assert "sync.keep" not in err.message and "normalize_obs = true in its" not in err.message
