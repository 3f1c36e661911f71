"""Activations and layer kinds are part of the role match (issue 39.2): a role a member takes
must be built from the same layers as the learner's, or the check refuses before anything is
spawned, naming both members, the role, both sides' layers and the key that fixes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from wheeler2 import cli, registry
from wheeler2.agent import Agent, SpaceInfo
from wheeler2.sync import SyncError, SyncPlan, check_pulls, check_sync, float_state, source_shapes

CARTPOLE = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)
PENDULUM = SpaceInfo(obs_dim=3, act_dim=1, discrete=False)


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any) -> Agent:
    cls = registry.resolve_algo(algo)
    return cls(space, cls.Params(**params), seed=seed)


def refused(learner: Agent, explorer: Agent, keep: list[str]) -> str:
    with pytest.raises(SyncError) as err:
        check_pulls(learner, explorer, keep, "scout", "lead")
    msg = str(err.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "learner, explorer, space",
    [
        ("ddpg", "ppo", PENDULUM),
        ("td3", "a2c", PENDULUM),
        ("sac", "ppo", PENDULUM),
        ("dqn", "ppo", CARTPOLE),
        ("dqn", "pg", CARTPOLE),
    ],
)
def test_a_relu_learner_and_a_tanh_explorer_are_refused_naming_role_kinds_and_key(
    learner, explorer, space
):
    msg = refused(
        make(learner, space, hidden=[16, 16]), make(explorer, space, hidden=[16, 16]), ["head"]
    )
    assert msg.startswith("[[team]] scout: ") and "learner 'lead'" in msg
    assert "role trunk" in msg and "role head" not in msg
    assert "Linear, ReLU, Linear, ReLU" in msg and "Linear, Tanh, Linear, Tanh" in msg
    assert "trunk.1: learner ReLU vs scout Tanh" in msg
    assert 'params.activation = "relu" on scout' in msg and '"trunk" to sync.keep' in msg


@pytest.mark.parametrize("keep", [[], ["head"]])
def test_the_same_activation_is_accepted_and_syncs(keep):
    ddpg = make("ddpg", PENDULUM, seed=1, hidden=[16, 16])
    ppo = make("ppo", PENDULUM, seed=2, hidden=[16, 16], activation="relu")
    assert check_pulls(ddpg, ppo, keep, "scout", "lead") == ()
    plan = SyncPlan(source_shapes(ddpg.actor), ppo.actor, keep, 1.0, "scout")
    plan.apply(float_state(ddpg.actor))
    for a, b in zip(ddpg.actor.trunk.parameters(), ppo.actor.trunk.parameters()):
        assert torch.equal(a, b)


def test_a_role_kept_whole_is_not_compared():
    # The heads are both one Linear: only the trunk differs, and the member keeps it.
    ddpg = make("ddpg", PENDULUM, hidden=[16, 16])
    ppo = make("ppo", PENDULUM, hidden=[16, 16])
    assert check_pulls(ddpg, ppo, ["trunk"], "scout", "lead") == ()


def test_a_tanh_learner_names_its_own_key_when_the_member_has_none():
    ppo = make("ppo", PENDULUM, hidden=[16, 16])
    ddpg = make("ddpg", PENDULUM, hidden=[16, 16])
    msg = refused(ppo, ddpg, ["head"])
    assert "trunk.1: learner Tanh vs scout ReLU" in msg
    assert "params.activation = \"relu\" on learner 'lead'" in msg


def test_two_on_policy_members_with_other_activations_are_refused():
    msg = refused(
        make("ppo", CARTPOLE, hidden=[16]), make("a2c", CARTPOLE, hidden=[16], activation="elu"), []
    )
    assert "learner Tanh vs scout ELU" in msg and 'params.activation = "tanh" on scout' in msg


class Actor(nn.Module):
    """A minimal actor with roles, whose trunk may hold a LayerNorm without tensors (so shapes
    alone cannot tell the two apart)."""

    sync_roles: ClassVar[dict[str, str]] = {"trunk": "trunk", "head": "head"}

    def __init__(self, norm: bool) -> None:
        super().__init__()
        extra = [nn.LayerNorm(8, elementwise_affine=False)] if norm else []
        self.trunk = nn.Sequential(nn.Linear(4, 8), *extra, nn.ReLU())
        self.head = nn.Linear(8, 2)


def test_a_layer_on_one_side_only_is_refused_though_shapes_match():
    with pytest.raises(SyncError) as err:
        check_sync(Actor(norm=True), Actor(norm=False), ["head"], "explorer")
    msg = str(err.value)
    assert "role trunk" in msg and "Linear, LayerNorm, ReLU vs explorer Linear, ReLU" in msg
    assert "trunk.1: learner LayerNorm vs explorer ReLU" in msg
    assert "the same layer options" in msg and "activation" not in msg
    check_sync(Actor(norm=True), Actor(norm=True), ["head"], "explorer")
    check_sync(Actor(norm=True), Actor(norm=False), ["trunk"], "explorer")


ROOT = Path(__file__).resolve().parents[1]
RELU = 'activation = "relu"\n'


def default_team(tmp_path: Path, explorer_activation: str) -> Path:
    """A copy of cfg/default.toml (a DDPG learner, PPO explorers that take its trunk) whose
    explorers' ``activation`` line is ``explorer_activation`` instead of the relu it ships with."""
    text = (ROOT / "cfg" / "default.toml").read_text()
    assert text.count(RELU) == 1
    path = tmp_path / "team.toml"
    path.write_text(text.replace(RELU, explorer_activation))
    return path


@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_run_refuse_the_team_in_one_line_naming_the_file(tmp_path, capsys, command):
    path = default_team(tmp_path, "")  # PPO's default: tanh
    out = ["--out", str(tmp_path / "runs")] if command == "run" else []
    assert cli.main([command, str(path), *out]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: [[team]] explorer sync: "), err
    assert "learner 'target'" in err and "role trunk" in err and "ReLU" in err and "Tanh" in err
    assert 'params.activation = "relu" on explorer' in err
    assert not (tmp_path / "runs").exists()


def test_check_passes_the_team_with_the_learners_activation(tmp_path, capsys):
    path = default_team(tmp_path, RELU)
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
