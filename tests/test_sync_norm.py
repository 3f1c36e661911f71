"""Normalization travels with weights (issue 39.2): a normalizing learner publishes the input
statistics its actor expects, a syncing member that takes its input layer acts with them (or the
check refuses, naming ``normalize_obs``), and activations and layer kinds are part of the match.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
import pytest
import torch

from wheeler2 import cli, registry
from wheeler2.agent import Agent, SpaceInfo
from wheeler2.sync import (
    SyncError,
    SyncPlan,
    WeightClient,
    WeightPublisher,
    check_pulls,
    float_state,
    publish_view,
    source_shapes,
    sync_target,
)

CARTPOLE = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)
MOUNTAINCAR = SpaceInfo(obs_dim=2, act_dim=1, discrete=False)


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any) -> Agent:
    cls = registry.resolve_algo(algo)
    return cls(space, cls.Params(**params), seed=seed)


def feed(agent: Agent, rows: np.ndarray) -> None:
    """Fold acting rows into an agent's running statistics, as its observe does."""
    agent.obs_norm.update(rows)  # type: ignore[attr-defined]


def rows(seed: int, n: int, dim: int, scale: float, shift: float) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, dim)) * scale + shift).astype(np.float32)


def normalized_out(agent: Agent, obs: np.ndarray) -> torch.Tensor:
    """What ``agent``'s actor computes on raw ``obs``, through its own normalizer."""
    with torch.no_grad():
        x = agent.obs_norm.normalize(torch.as_tensor(obs))  # type: ignore[attr-defined]
        return agent.actor(x)


def cartpole_pair(**explorer: Any) -> tuple[Agent, Agent]:
    learner = make("dqn", CARTPOLE, seed=1, hidden=[16, 16], normalize_obs=True)
    params = {"hidden": [16, 16], "activation": "relu", "normalize_obs": True} | explorer
    return learner, make("ppo", CARTPOLE, seed=2, **params)


def test_a_dqn_learner_seeds_a_ppo_explorer_with_its_statistics_every_publish():
    learner, explorer = cartpole_pair()
    feed(learner, rows(0, 256, 4, scale=3.0, shift=5.0))
    feed(explorer, rows(1, 256, 4, scale=0.1, shift=-2.0))  # its own, far from the learner's
    check_pulls(learner, explorer, [], "explorer", "learner")
    probe = rows(2, 32, 4, scale=3.0, shift=5.0)
    view = publish_view(learner, ())
    with WeightPublisher.create(view) as pub:
        names = [name for name, _, _ in pub.handle().layout]
        assert {"obs_norm/mean", "obs_norm/inv_std", "obs_norm/clip"} <= set(names)
        client = WeightClient.attach(pub.handle(), sync_target(explorer), keep=[], alpha=1.0)
        assert "obs_norm/mean" in client.synced
        for round_ in range(2):  # the statistics move between publishes: each pull takes them
            pub.publish(view)
            assert client.pull() is not None
            want = normalized_out(learner, probe)
            torch.testing.assert_close(normalized_out(explorer, probe), want)
            # Its action on the raw observation is the learner's greedy one.
            act = explorer.act(probe, explore=False).action
            np.testing.assert_array_equal(act, want.argmax(-1).numpy())
            # Acting and observing fold none of its own rows in while it follows.
            explorer.act(probe * 0.0, explore=True)
            explorer.obs_norm.update(probe * 0.0)  # type: ignore[attr-defined]
            torch.testing.assert_close(normalized_out(explorer, probe), want)
            feed(learner, rows(10 + round_, 256, 4, scale=7.0, shift=-3.0 * round_))
        client.close()


def test_the_object_store_transport_carries_the_statistics_too():
    # Ray's path: source_shapes / float_state of the published view, one SyncPlan.
    learner, explorer = cartpole_pair()
    feed(learner, rows(0, 128, 4, scale=2.0, shift=1.0))
    view = publish_view(learner, ())
    plan = SyncPlan(source_shapes(view), sync_target(explorer), [], 1.0, "explorer")
    plan.apply(float_state(view))
    probe = rows(3, 16, 4, scale=2.0, shift=1.0)
    torch.testing.assert_close(normalized_out(explorer, probe), normalized_out(learner, probe))


def test_an_explorer_keeping_its_input_layer_keeps_its_own_statistics():
    learner, explorer = cartpole_pair()
    feed(learner, rows(0, 128, 4, scale=3.0, shift=5.0))
    feed(explorer, rows(1, 128, 4, scale=0.5, shift=-1.0))
    own_mean = explorer.obs_norm.stats.mean.clone()  # type: ignore[attr-defined]
    check_pulls(learner, explorer, ["trunk.0"], "explorer", "learner")
    view = publish_view(learner, ())
    plan = SyncPlan(source_shapes(view), sync_target(explorer), ["trunk.0"], 1.0, "explorer")
    assert not any(n.startswith("obs_norm/") for n in plan.names)
    plan.apply(float_state(view))
    assert torch.equal(explorer.obs_norm.stats.mean, own_mean)  # type: ignore[attr-defined]
    assert not explorer.obs_norm.follows  # type: ignore[attr-defined]
    feed(explorer, rows(4, 8, 4, scale=1.0, shift=0.0))  # and goes on folding in its own
    assert not torch.equal(explorer.obs_norm.stats.mean, own_mean)  # type: ignore[attr-defined]


@pytest.mark.parametrize("side", ["explorer", "learner"])
def test_only_one_side_normalizing_is_refused_naming_normalize_obs(side):
    learner, explorer = cartpole_pair(normalize_obs=side != "explorer")
    if side == "learner":
        learner = make("dqn", CARTPOLE, seed=1, hidden=[16, 16], normalize_obs=False)
    with pytest.raises(SyncError, match=r"\[\[team\]\] scout: .*normalize_obs"):
        check_pulls(learner, explorer, [], "scout", "learner")
    # Keeping the input layer, each acts with its own inputs: nothing to refuse.
    check_pulls(learner, explorer, ["trunk"], "scout", "learner")


def test_mountaincar_team_actors_act_with_the_learners_statistics():
    # cfg/mountaincar_team.toml: a DDPG learner and DDPG actors, all normalize_obs = true,
    # synced whole (keep nothing).
    params = {"hidden": [16, 16], "normalize_obs": True, "learning_starts": 0}
    learner = make("ddpg", MOUNTAINCAR, seed=1, **params)
    actor = make("ddpg", MOUNTAINCAR, seed=2, **params)
    feed(learner, rows(0, 256, 2, scale=0.05, shift=-0.5))
    feed(actor, rows(1, 16, 2, scale=1.0, shift=3.0))
    check_pulls(learner, actor, [], "actor", "learner")
    view = publish_view(learner, ())
    with WeightPublisher.create(view) as pub:
        pub.publish(view)
        with WeightClient.attach(pub.handle(), sync_target(actor), keep=[], alpha=1.0) as c:
            assert c.pull() == 1
    probe = rows(5, 32, 2, scale=0.05, shift=-0.5)
    np.testing.assert_array_equal(
        actor.act(probe, explore=False).action, learner.act(probe, explore=False).action
    )


@pytest.mark.parametrize("algo", ["ddpg", "ppo"])
def test_a_member_keeping_its_core_takes_the_statistics_its_core_obs_layers_read(algo):
    # trunk_reads = "core+obs" (the recurrent off-policy default): the layer after the core reads
    # the observation beside the core's output. A member that keeps its core but takes that
    # layer must feed it the learner's statistics, or it acts unlike the learner's actor.
    params: dict[str, Any] = {"hidden": [16, 16], "core": "gru", "core_size": 8}
    params |= {"normalize_obs": True, "trunk_reads": "core+obs"}
    learner = make(algo, MOUNTAINCAR, seed=0, **params)
    member = make(algo, MOUNTAINCAR, seed=0, **params)  # the same core as the learner's
    feed(learner, rows(0, 256, 2, scale=3.0, shift=5.0))
    feed(member, rows(1, 256, 2, scale=0.2, shift=-1.0))
    check_pulls(learner, member, ["core"], "member", "learner")
    view = publish_view(learner, ())
    plan = SyncPlan(source_shapes(view), sync_target(member), ["core"], 1.0, "member")
    assert "obs_norm/mean" in plan.names and not any(n.startswith("core") for n in plan.names)
    plan.apply(float_state(view))
    probe = rows(2, 16, 2, scale=3.0, shift=5.0)
    state = np.zeros((16, learner.state_dim), np.float32)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(
        member.act(probe, explore=False, state=state).action,
        learner.act(probe, explore=False, state=state).action,
    )


def test_check_refuses_a_team_whose_explorer_cannot_take_the_statistics(tmp_path, capsys):
    text = """
    [experiment]
    name = "norm-sync"
    total_steps = 400
    eval_every = 200

    [env]
    id = "CartPole-v1"

    [[team]]
    name = "boss"
    algo = "dqn"
    role = "learner"
    [team.params]
    hidden = [16]
    normalize_obs = true

    [[team]]
    name = "scout"
    algo = "ppo"
    role = "explorer"
    sync = { every = 100 }
    [team.params]
    hidden = [16]
    activation = "relu"
    """
    path = tmp_path / "exp.toml"
    path.write_text(textwrap.dedent(text).lstrip())
    assert cli.main(["check", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "[[team]] scout sync:" in lines[0], lines
    assert "normalize_obs" in lines[0]
    path.write_text(path.read_text() + "normalize_obs = true\n")
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("transport", ["shared memory", "object store"])
def test_a_blending_member_copies_the_statistics_and_blends_only_the_weights(transport):
    # sync.alpha < 1 averages weights; the statistics it follows are the learner's, copied. A
    # blend of them started from the identity (mean 0, inv_std 1): inputs of scale 100 stayed
    # clipped for tens of pulls.
    learner, explorer = cartpole_pair()
    feed(learner, rows(0, 512, 4, scale=100.0, shift=300.0))
    before = float_state(explorer.actor)
    view = publish_view(learner, ())
    target = sync_target(explorer)
    if transport == "object store":
        SyncPlan(source_shapes(view), target, [], 0.25, "explorer").apply(float_state(view))
    else:
        with WeightPublisher.create(view) as pub:
            pub.publish(view)
            with WeightClient.attach(pub.handle(), target, keep=[], alpha=0.25) as client:
                assert client.pull() == 1
    stats, theirs = explorer.obs_norm.stats, learner.obs_norm.stats  # type: ignore[attr-defined]
    for name in ("mean", "inv_std", "clip", "count"):
        assert torch.equal(getattr(stats, name), getattr(theirs, name)), name
    lead, after = float_state(learner.actor), float_state(explorer.actor)
    assert set(after) == set(lead)
    for name, own in before.items():
        torch.testing.assert_close(after[name], 0.25 * lead[name] + 0.75 * own)
