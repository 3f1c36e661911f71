"""agents/offpolicy.py's optimizer steps: ``adam_step`` is torch's own fused Adam step, bit for
bit, and falls back to ``opt.step()`` wherever it does not apply."""

from __future__ import annotations

import pytest
import torch
from wheeler2.agents.offpolicy import adam_step, grads_step


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))


def _grads(net: torch.nn.Module, step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) for p in net.parameters()]


def _run(step_fn, steps: int, reload_at: int | None = None, **adam) -> list[torch.Tensor]:
    """``steps`` optimizer steps on fixed random gradients; with ``reload_at``, the optimizer's
    state is saved and loaded back there (its state tensors are then new objects)."""
    net = _net(0)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, **adam)
    for k in range(steps):
        if k == reload_at:
            opt.load_state_dict(opt.state_dict())
        for p, g in zip(net.parameters(), _grads(net, k)):
            p.grad = g
        step_fn(opt)
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize(
    "adam",
    [
        {"fused": True},
        {"fused": True, "betas": (0.5, 0.9), "eps": 1e-3},
        {"fused": True, "amsgrad": True},  # falls back
        {"fused": True, "weight_decay": 0.1},  # falls back
        {"foreach": True},  # not fused: falls back
    ],
)
def test_adam_step_is_the_optimizers_own_step_bit_for_bit(adam):
    """Five steps (the bias corrections change every step, so a missed step count shows) and a
    state reload in between (the state is read at each call, not kept)."""
    ref = _run(lambda o: o.step(), 5, **adam)
    mine = _run(adam_step, 5, reload_at=2, **adam)
    for a, b in zip(ref, mine):
        assert torch.equal(a, b)


def test_adam_step_counts_steps_in_the_optimizer_state():
    net = _net(0)
    opt = torch.optim.Adam(net.parameters(), fused=True)
    for k in range(3):
        for p, g in zip(net.parameters(), _grads(net, k)):
            p.grad = g
        adam_step(opt)
    assert [float(opt.state[p]["step"]) for p in net.parameters()] == [3.0] * 4


def test_grads_step_clips_the_given_gradients_to_max_norm():
    net, twin = _net(0), _net(0)
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    params = list(net.parameters())
    raw = [g * 100 for g in _grads(net, 0)]
    grads_step([g.clone() for g in raw], opt, params, max_norm=0.5)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in raw]))
    for p, q, g in zip(params, twin.parameters(), raw):  # SGD, lr 1: p = q - g * 0.5 / |g|
        torch.testing.assert_close(p.detach(), q.detach() - g * (0.5 / total), rtol=1e-4, atol=1e-6)
