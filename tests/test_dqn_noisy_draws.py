"""NoisyNet-DQN's noise draws in a learn step (Fortunato et al. 2018, algorithm 1): the online
net's Q(s, a), the online net's pick of a' at s' (the double-Q variant) and the target's value
at s' each use a draw of their own."""

from __future__ import annotations

import numpy as np
import torch
from wheeler2.agents.dqn import DQN, Params
from wheeler2.agents.parts.noisy import NoisyLinear

from wheeler2.agent import Batch, SpaceInfo


def _noise_per_forward(agent: DQN, batch: Batch) -> dict[str, list[torch.Tensor]]:
    """The (eps_in, eps_out) each noisy head ran with during one ``learn``, per network."""
    seen: dict[str, list[torch.Tensor]] = {"online": [], "target": []}

    def hook(name: str):
        def record(layer: NoisyLinear, args: object, out: torch.Tensor) -> None:
            seen[name].append(torch.cat([layer.eps_in, layer.eps_out]).clone())

        return record

    handles = [
        agent.q.net.head.register_forward_hook(hook("online")),
        agent.q_target.net.head.register_forward_hook(hook("target")),
    ]
    try:
        agent.learn(batch)
    finally:
        for h in handles:
            h.remove()
    return seen


def test_noisy_double_dqn_picks_the_next_action_with_a_draw_of_its_own():
    space = SpaceInfo(obs_dim=3, act_dim=4, discrete=True)
    agent = DQN(space, Params(hidden=[8], noisy=True, double=True))
    rows = 5
    batch = Batch(
        obs=torch.randn(rows, 3),
        action=torch.randint(0, 4, (rows,)),
        reward=torch.randn(rows, 1),
        next_obs=torch.randn(rows, 3),
        discount=torch.full((rows,), 0.99),
        weight=torch.ones(rows),
        index=np.arange(rows),
    )
    seen = _noise_per_forward(agent, batch)
    # The online head runs twice: at s' (no gradient, picks a') and at s (the loss's Q(s, a)).
    pick, learn = seen["online"]
    (target,) = seen["target"]
    # One shared draw would tie the pick at s' to the noise of Q(s, a): the target then moves
    # with that noise, and the noise scales' gradient is no longer the paper's.
    assert not torch.equal(pick, learn)
    assert not torch.equal(pick[:8], target[:8]) and not torch.equal(learn[:8], target[:8])
