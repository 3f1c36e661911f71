"""Shared networks: the names weight sync relies on, and the shapes every builder returns."""

from __future__ import annotations

import pytest
import torch
from wheeler2.agents.parts.distributions import evaluate_actions, gaussian_log_prob, sample_action
from wheeler2.agents.parts.heads import DeterministicActor, QCritic, VCritic, build_actor
from wheeler2.agents.parts.targets import polyak_


def _shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


@pytest.mark.parametrize("hidden", [[64, 64], [400, 300], [8]])
def test_ddpg_and_ppo_actors_share_trunk_and_head_names_and_shapes(hidden):
    ddpg = _shapes(DeterministicActor(5, hidden, 2, "relu"))
    ppo = _shapes(build_actor(5, 2, False, hidden, "tanh"))
    assert ppo.pop("log_std") == (2,)
    assert ddpg == ppo
    trunk = {f"trunk.{2 * i}.{k}" for i in range(len(hidden)) for k in ("weight", "bias")}
    assert set(ddpg) == trunk | {"head.weight", "head.bias"}


def test_sync_keeps_the_explorer_head_and_copies_the_trunk():
    from wheeler2.sync import check_sync, match_keep

    learner = DeterministicActor(5, [64, 64], 2, "relu")
    explorer = build_actor(5, 2, False, [64, 64], "relu")
    check_sync(learner, explorer, ["actor.head"], "explorer")
    kept = [n for n, _ in explorer.named_parameters() if match_keep(n, ["actor.head"])]
    assert kept == ["head.weight", "head.bias"]


def test_critic_shapes():
    obs, act = torch.randn(7, 5), torch.randn(7, 2)
    assert QCritic(5, 2, [16], 1, "separate")(obs, act).shape == (7, 1)
    assert QCritic(5, 2, [16], 3, "separate")(obs, act).shape == (7, 3)
    assert QCritic(5, 2, [16], 3, "shared")(obs, act).shape == (7, 3)
    assert len(QCritic(5, 2, [16], 3, "separate").nets) == 3
    assert VCritic(5, [16])(obs).shape == (7,)
    with pytest.raises(ValueError):
        QCritic(5, 2, [16], 2, "bogus")


def test_deterministic_actor_is_bounded():
    actor = DeterministicActor(3, [16], 2)
    with torch.no_grad():
        actor.head.bias.fill_(100.0)
    out = actor(torch.randn(4, 3))
    assert out.abs().max() <= 1.0


def test_gaussian_sample_logp_is_of_the_unclipped_sample():
    actor = build_actor(3, 2, False, [16], log_std_init=1.5)  # wide: many samples clip
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(256, 3)
    with torch.no_grad():
        action, raw, logp = sample_action(actor, obs, True, gen)
        mean = actor(obs)
    assert action.abs().max() <= 1.0 and raw.abs().max() > 1.0
    torch.testing.assert_close(action, raw.clamp(-1, 1))
    ref = torch.distributions.Normal(mean, actor.log_std.exp()).log_prob(raw).sum(-1)
    torch.testing.assert_close(logp, ref)
    torch.testing.assert_close(gaussian_log_prob(raw, mean, actor.log_std.expand_as(mean)), ref)
    logp2, entropy = evaluate_actions(actor, obs, raw)
    torch.testing.assert_close(logp2, ref)
    ent_ref = torch.distributions.Normal(mean, actor.log_std.exp()).entropy().sum(-1)
    torch.testing.assert_close(entropy.expand_as(ent_ref), ent_ref)


def test_categorical_sample_and_evaluate():
    actor = build_actor(3, 4, True, [16])
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(64, 3)
    with torch.no_grad():
        action, _, logp = sample_action(actor, obs, True, gen)
        dist = torch.distributions.Categorical(logits=actor(obs))
        greedy, _, _ = sample_action(actor, obs, False, gen)
    assert action.dtype == torch.long and action.shape == (64,)
    torch.testing.assert_close(logp, dist.log_prob(action))
    torch.testing.assert_close(greedy, dist.probs.argmax(-1))
    logp2, entropy = evaluate_actions(actor, obs, action)
    torch.testing.assert_close(logp2, dist.log_prob(action))
    torch.testing.assert_close(entropy, dist.entropy())


def test_polyak():
    target = [torch.zeros(3), torch.full((2,), 4.0)]
    online = [torch.ones(3), torch.zeros(2)]
    polyak_(target, online, 0.25)
    torch.testing.assert_close(target[0], torch.full((3,), 0.25))
    torch.testing.assert_close(target[1], torch.full((2,), 3.0))


def test_numpy_forward_matches_torch_and_follows_in_place_weight_changes() -> None:
    import numpy as np
    from wheeler2.agents.parts.heads import DeterministicActor
    from wheeler2.agents.parts.numpy_forward import NumpyForward

    torch.manual_seed(0)
    net = DeterministicActor(5, [32, 16], 2, "relu")
    fast = NumpyForward.of(net, squash=True)
    assert fast is not None
    x = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)

    def torch_out() -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor(x)).numpy()

    np.testing.assert_allclose(fast(x), torch_out(), rtol=1e-5, atol=1e-6)
    # An optimizer step, a sync-style blend and load_state_dict all write in place.
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.as_tensor(x)).sum().backward()
    opt.step()
    np.testing.assert_allclose(fast(x), torch_out(), rtol=1e-5, atol=1e-6)
    other = DeterministicActor(5, [32, 16], 2, "relu")
    net.load_state_dict(other.state_dict())
    np.testing.assert_allclose(fast(x), torch_out(), rtol=1e-5, atol=1e-6)
    # A replaced storage is noticed, not read stale.
    net.head.weight.data = torch.randn_like(net.head.weight)
    np.testing.assert_allclose(fast(x), torch_out(), rtol=1e-5, atol=1e-6)
    # So is a replaced Parameter (a layer's attribute set anew).
    net.trunk[0].bias = torch.nn.Parameter(torch.randn_like(net.trunk[0].bias))
    np.testing.assert_allclose(fast(x), torch_out(), rtol=1e-5, atol=1e-6)


def test_numpy_forward_declines_what_it_cannot_run() -> None:
    from wheeler2.agents.parts.encoders import MLP
    from wheeler2.agents.parts.numpy_forward import NumpyForward

    assert NumpyForward.of(MLP(3, [8], 1, "elu"), squash=False) is None
    assert NumpyForward.of(MLP(3, [8], 1, "relu").double(), squash=False) is None
