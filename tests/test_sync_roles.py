"""Weight sync by role (trunk, head) between algorithm families, with the real agents.

DQN's actor keeps its layers at ``net.trunk`` / ``net.head``, the PPO / A2C / DDPG actors at
``trunk`` / ``head``; sync matches them by the roles each actor declares, not by module path.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from wheeler2 import registry
from wheeler2.agent import Agent, SpaceInfo
from wheeler2.sync import (
    SyncError,
    SyncPlan,
    WeightClient,
    WeightPublisher,
    check_sync,
    float_state,
    source_shapes,
)

CARTPOLE = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)
PENDULUM = SpaceInfo(obs_dim=3, act_dim=1, discrete=False)


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any) -> Agent:
    cls = registry.resolve_algo(algo)
    return cls(space, cls.Params(**params), seed=seed)


def tensors(module: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """``prefix``'s tensors by their path below it, cloned."""
    sub = module.get_submodule(prefix)
    return {k: v.detach().clone() for k, v in sub.state_dict().items()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def assert_all_differ(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert not torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("keep", [[], ["head"], ["actor.head"], ["head.*"]])
def test_dqn_learner_seeds_a_ppo_explorer_through_shared_memory(keep):
    dqn = make("dqn", CARTPOLE, seed=1, hidden=[64, 64])
    ppo = make("ppo", CARTPOLE, seed=2, hidden=[64, 64])
    learner_trunk = tensors(dqn.actor, "net.trunk")
    learner_head = tensors(dqn.actor, "net.head")
    own_head = tensors(ppo.actor, "head")
    assert_all_differ(learner_trunk, tensors(ppo.actor, "trunk"))  # so a copy shows

    with WeightPublisher.create(dqn.actor) as pub:
        client = WeightClient.attach(pub.handle(), ppo.actor, keep=keep, alpha=1.0)
        assert pub.publish(dqn.actor) == 1
        assert client.pull() == 1
        client.close()

    assert_same(tensors(ppo.actor, "trunk"), learner_trunk)
    if keep:
        assert_same(tensors(ppo.actor, "head"), own_head)
    else:
        assert_same(tensors(ppo.actor, "head"), learner_head)
    # team.json reports role names, the same for every family.
    trunk = {f"trunk.{i}.{k}" for i in (0, 2) for k in ("weight", "bias")}
    head = {"head.weight", "head.bias"}
    assert set(client.synced) == (trunk if keep else trunk | head)


def test_published_layout_is_named_by_role():
    dqn = make("dqn", CARTPOLE, hidden=[8])
    with WeightPublisher.create(dqn.actor) as pub:
        names = [name for name, _, _ in pub.handle().layout]
    assert names == ["trunk.0.weight", "trunk.0.bias", "head.weight", "head.bias"]
    assert list(source_shapes(dqn.actor)) == names
    assert list(float_state(dqn.actor)) == names


def test_dqn_explorer_keeps_its_head_by_module_path_or_role():
    # A DQN explorer's keep may name the module path ("net.head") as before, or the role.
    learner = make("dqn", CARTPOLE, seed=1, hidden=[16])
    for keep in (["net.head"], ["actor.head"]):
        explorer = make("dqn", CARTPOLE, seed=2, hidden=[16])
        own_head = tensors(explorer.actor, "net.head")
        plan = SyncPlan(source_shapes(learner.actor), explorer.actor, keep, 1.0, "explorer")
        assert plan.names == ("trunk.0.weight", "trunk.0.bias")
        plan.apply(float_state(learner.actor))
        assert_same(tensors(explorer.actor, "net.trunk"), tensors(learner.actor, "net.trunk"))
        assert_same(tensors(explorer.actor, "net.head"), own_head)


@pytest.mark.parametrize("explorer_algo", ["ppo", "a2c"])
def test_dqn_to_on_policy_explorers_passes_check_and_the_object_store_plan(explorer_algo):
    dqn = make("dqn", CARTPOLE, seed=1, hidden=[32, 32])
    explorer = make(explorer_algo, CARTPOLE, seed=2, hidden=[32, 32], activation="relu")
    check_sync(dqn.actor, explorer.actor, ["actor.head"], "explorer")
    # Ray's transport: the learner's shapes and float_state, blended by the same SyncPlan.
    plan = SyncPlan(source_shapes(dqn.actor), explorer.actor, [], 1.0, "explorer")
    plan.apply(float_state(dqn.actor))
    assert_same(tensors(explorer.actor, "trunk"), tensors(dqn.actor, "net.trunk"))
    assert_same(tensors(explorer.actor, "head"), tensors(dqn.actor, "net.head"))


def test_ddpg_to_ppo_continuous_still_syncs():
    ddpg = make("ddpg", PENDULUM, seed=1, hidden=[32, 32])
    ppo = make("ppo", PENDULUM, seed=2, hidden=[32, 32], activation="relu")
    log_std = ppo.actor.log_std.detach().clone()
    check_sync(ddpg.actor, ppo.actor, ["actor.head"], "explorer")
    with WeightPublisher.create(ddpg.actor) as pub:
        client = WeightClient.attach(pub.handle(), ppo.actor, keep=["actor.head"], alpha=1.0)
        pub.publish(ddpg.actor)
        client.pull()
        client.close()
    assert_same(tensors(ppo.actor, "trunk"), tensors(ddpg.actor, "trunk"))
    assert torch.equal(ppo.actor.log_std, log_std)  # explorer-only: left alone


def test_hidden_size_mismatch_names_the_role_both_shapes_and_hidden():
    dqn = make("dqn", CARTPOLE, hidden=[64, 64])
    ppo = make("ppo", CARTPOLE, hidden=[32, 32])
    with pytest.raises(SyncError) as err:
        check_sync(dqn.actor, ppo.actor, ["actor.head"], "ppo_explorer")
    msg = str(err.value)
    assert "\n" not in msg
    assert "[[team]] ppo_explorer" in msg
    assert "role trunk" in msg and "4->64->64" in msg and "4->32->32" in msg
    assert "hidden" in msg
    assert "role head" not in msg  # kept, so not a problem


def test_layer_count_mismatch_is_not_a_partial_copy():
    # By name, trunk.0 and the head would match and trunk.2 be skipped: a role syncs whole.
    dqn = make("dqn", CARTPOLE, hidden=[64, 64])
    ppo = make("ppo", CARTPOLE, hidden=[64])
    with pytest.raises(SyncError) as err:
        check_sync(dqn.actor, ppo.actor, [], "explorer")
    msg = str(err.value)
    assert "role trunk" in msg and "4->64->64" in msg and "4->64 " in msg
    assert "trunk.2.weight: learner [64, 64] vs explorer absent" in msg


def test_discrete_learner_and_continuous_explorer_are_refused():
    dqn = make("dqn", CARTPOLE, hidden=[64, 64])
    ppo = make("ppo", SpaceInfo(obs_dim=4, act_dim=2, discrete=False), hidden=[64, 64])
    with pytest.raises(SyncError) as err:
        check_sync(dqn.actor, ppo.actor, ["actor.head"], "cont")
    msg = str(err.value)
    assert "\n" not in msg
    assert "[[team]] cont" in msg and "DiscreteQ" in msg and "GaussianActor" in msg
    assert "discrete" in msg and "continuous" in msg


def test_learner_without_the_role_says_so():
    learner = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
    ppo = make("ppo", CARTPOLE, hidden=[64])
    with pytest.raises(SyncError) as err:
        check_sync(learner, ppo.actor, ["head"], "explorer")
    msg = str(err.value)
    assert "[[team]] explorer" in msg and "learner's actor has no role 'trunk'" in msg
