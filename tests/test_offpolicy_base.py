"""The off-policy base (agents/offpolicy.py): checkpoints written before it load and act as
they did, renamed checkpoint keys are translated, the registry never takes the base for an
algorithm, and each algorithm refuses the other kind of action space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.dqn import DQN
from wheeler2.agents.sac import SAC
from wheeler2.agents.td3 import TD3

from wheeler2 import registry
from wheeler2.agent import SpaceInfo

# Written by the code of 6ee6fe0 (before the base): for each algorithm, feedforward and with a
# GRU core (hidden [8], core_size 4, seed 1), its state_dict after three learn steps, and the
# greedy action (and next policy state) it then took on ``obs``.
OLD = Path(__file__).resolve().parent / "data" / "offpolicy_checkpoints_6ee6fe0.pt"
ALGOS = {"ddpg": DDPG, "td3": TD3, "sac": SAC, "dqn": DQN}


def _keys(state: dict) -> dict[str, object]:
    """Checkpoint keys, with the keys of each module's state dict inside."""
    return {k: sorted(v) if isinstance(v, dict) else None for k, v in state.items()}


@pytest.mark.parametrize("name", [f"{a}_{c}" for a in ALGOS for c in ("none", "gru")])
def test_checkpoints_written_before_the_base_load_and_act_as_they_did(name: str) -> None:
    old = torch.load(OLD, weights_only=True)
    algo, core = name.split("_")
    cls = ALGOS[algo]
    params = cls.Params(hidden=[8], core=core, core_size=4, learning_starts=0)
    agent = cls(SpaceInfo(2, 2, algo == "dqn"), params, seed=7)  # other weights until loaded
    saved = old[name]
    agent.load_state_dict(saved["checkpoint"])
    obs = old["obs"].numpy()
    state = agent.initial_state(3) if agent.state_dim else None
    out = agent.act(obs, False, state) if state is not None else agent.act(obs, False)
    # To float32 rounding: another CPU's kernels round the last bit otherwise.
    np.testing.assert_allclose(out.action, saved["action"].numpy(), rtol=1e-5, atol=1e-6)
    if saved["state"] is not None:
        np.testing.assert_allclose(out.state, saved["state"].numpy(), rtol=1e-5, atol=1e-6)
    # And it writes the checkpoint it read: the same keys, modules' keys included, plus the
    # random streams a resume continues (issue 39), which checkpoints of then did not keep.
    written = _keys(agent.state_dict())
    assert written.pop("streams", None) is not None
    assert written == _keys(saved["checkpoint"])


def test_renamed_checkpoint_keys_are_translated() -> None:
    class Renamed(TD3):
        saved = {**TD3.saved, "policy": "actor_net"}
        del saved["actor"]
        renamed = {"actor": "policy"}  # a checkpoint written before the rename says "actor"

    space, params = SpaceInfo(2, 1, False), TD3.Params(hidden=[8])
    old = TD3(space, params, seed=0).state_dict()
    agent = Renamed(space, params, seed=5)
    agent.load_state_dict(old)
    for k, v in old["actor"].items():
        assert torch.equal(agent.actor_net.state_dict()[k], v), k
    assert "policy" in agent.state_dict() and "actor" not in agent.state_dict()


def test_the_registry_never_takes_the_base_for_an_algorithm() -> None:
    found = registry.algorithms()
    assert {"ddpg", "td3", "sac", "dqn", "crossq"} <= set(found)
    assert "offpolicy" not in found and "recurrent" not in found


def test_each_algorithm_refuses_the_other_kind_of_action_space() -> None:
    with pytest.raises(ValueError, match="TD3 needs a continuous"):
        TD3(SpaceInfo(2, 3, True), TD3.Params(hidden=[8]))
    with pytest.raises(ValueError, match="DQN needs a discrete"):
        DQN(SpaceInfo(2, 3, False), DQN.Params(hidden=[8]))
