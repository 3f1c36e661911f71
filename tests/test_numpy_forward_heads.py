"""The numpy forward pass stands in only for the forwards it computes: a head written in an
algorithm's file (docs/adding_an_algorithm.md) acts through torch, with the action its
``decide`` gives, while DDPG, TD3 and SAC keep the numpy path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.ddpg import Params as DDPGParams
from wheeler2.agents.offpolicy import OffPolicy
from wheeler2.agents.parts.encoders import MLP
from wheeler2.agents.parts.heads import CategoricalActor, DeterministicActor, GaussianActor
from wheeler2.agents.parts.numpy_forward import NumpyForward
from wheeler2.agents.sac import SAC
from wheeler2.agents.sac import Params as SACParams
from wheeler2.agents.td3 import TD3
from wheeler2.agents.td3 import Params as TD3Params

from wheeler2.agent import Agent, SpaceInfo


class HalfRangeActor(MLP):
    """A head of a user's own: actions in [-0.5, 0.5]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * torch.tanh(self.head(self.trunk(x)))


class CategoricalPolicy(OffPolicy, Agent):
    """A user's discrete off-policy actor (SAC-discrete's shape): greedy action = argmax logits."""

    Params = SACParams
    discrete = True
    random_warmup = False

    def __init__(self, space: SpaceInfo, params: SACParams, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        torch.manual_seed(seed)
        self.actor_net = self.net(lambda d: CategoricalActor(d, params.hidden, space.act_dim))

    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return self.actor_net(z).argmax(-1)


class HalfRange(OffPolicy, Agent):
    Params = SACParams
    random_warmup = False

    def __init__(self, space: SpaceInfo, params: SACParams, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, device, seed)
        torch.manual_seed(seed)
        self.actor_net = self.net(lambda d: HalfRangeActor(d, params.hidden, space.act_dim))

    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return self.actor_net(z)


OBS = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32) * 3


@pytest.mark.parametrize(
    ("cls", "space"),
    [(CategoricalPolicy, SpaceInfo(4, 3, True)), (HalfRange, SpaceInfo(4, 2, False))],
)
def test_a_head_of_its_own_acts_with_its_decide(cls, space) -> None:  # noqa: ANN001
    agent = cls(space, SACParams(hidden=[16], learning_starts=0))
    assert agent.fast_actor is None
    with torch.no_grad():
        want = agent.decide(torch.as_tensor(OBS), False).numpy()
    got = agent.act(OBS, False).action
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_forwards_it_does_not_compute_are_declined() -> None:
    assert NumpyForward.of(HalfRangeActor(4, [8], 2), squash=True) is None
    assert NumpyForward.of(GaussianActor(4, [8], 2), squash=True) is None  # forward: the mean
    assert NumpyForward.of(DeterministicActor(4, [8], 2), squash=False) is None  # has its tanh
    assert NumpyForward.of(GaussianActor(4, [8], 2), squash=False) is not None


@pytest.mark.parametrize(
    ("cls", "params"),
    [(DDPG, DDPGParams(hidden=[16])), (TD3, TD3Params(hidden=[16])), (SAC, SACParams(hidden=[16]))],
)
def test_the_shipped_actors_keep_the_numpy_path(cls, params) -> None:  # noqa: ANN001
    agent = cls(SpaceInfo(4, 2, False), params)
    fast = agent.fast_actor
    assert fast is not None
    with torch.no_grad():
        want = agent.actor(torch.as_tensor(OBS)).numpy()
    np.testing.assert_allclose(fast(OBS), want, rtol=1e-5, atol=1e-6)


class ClampedDDPG(DDPG):
    """A user's DDPG that keeps DeterministicActor but acts within [-0.2, 0.2]."""

    def decide(self, z: torch.Tensor, sample: bool) -> torch.Tensor:
        return super().decide(z, sample).clamp(-0.2, 0.2)


def test_a_decide_of_its_own_over_a_shipped_actor_is_not_bypassed() -> None:
    agent = ClampedDDPG(SpaceInfo(4, 2, False), DDPGParams(hidden=[16]))
    assert agent.fast_actor is None
    unclamped = DDPG(SpaceInfo(4, 2, False), DDPGParams(hidden=[16])).act(OBS * 10, False).action
    assert np.abs(unclamped).max() > 0.2  # the inputs reach past the clamp
    got = agent.act(OBS * 10, False).action
    assert np.abs(got).max() <= 0.2 + 1e-7
    with torch.no_grad():
        want = agent.decide(torch.as_tensor(OBS * 10), False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
