"""SAC: the squashed Gaussian's log-prob against a direct computation, the soft target and the
losses by hand, the temperature's direction, per-head shapes, importance weights, checkpoints,
runs through the CLI (solo, team with a PPO explorer and an Ape-X actor, HER), and a Pendulum
learning check (slow)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from offpolicy_runs import config, run_text
from recurrent_seq import SEQ, positions
from wheeler2.agents.crossq import CrossQ
from wheeler2.agents.crossq import Params as CrossQParams
from wheeler2.agents.parts.distributions import squashed_log_prob
from wheeler2.agents.parts.heads import SquashedGaussianActor
from wheeler2.agents.sac import SAC, Params

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli
from wheeler2.agent import ActOut, Batch, SpaceInfo, Transitions
from wheeler2.config import load
from wheeler2.runtime.parts import make_agent
from wheeler2.runtime.seeds import member_seed
from wheeler2.runtime.team import prepare_team

ROOT = Path(__file__).resolve().parents[1]
TWO_HEADS = SpaceInfo(
    obs_dim=2, act_dim=1, discrete=False, heads=("a", "b"), head_weights=(1.0, 0.5)
)
C = np.array([1.0, 0.5])  # the head weights
SHARE = C / (C**2).sum()  # each head's share of the entropy bonus: sum_h c_h share_h = 1


def _set(linear: torch.nn.Linear, weight: list[float], bias: float) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([weight]))
        linear.bias.fill_(bias)


# Linear nets (no hidden layers): mean(s) = W s + b, log_std(s) = V s + c, Q_jh = w . [s, a] + b.
MEAN = ([1.0, 0.0], 0.1)
LOG_STD = ([0.0, 0.5], -1.0)
Q = {("q1", 0): ([0.5, 0.5, 0.5], 0.0), ("q1", 1): ([1.0, -1.0, 0.0], 0.2)}
Q |= {("q2", 0): ([0.0, 0.0, 1.0], 0.0), ("q2", 1): ([1.0, 1.0, 1.0], 0.0)}
Q_T = {("q1", 0): ([1.0, 0.0, 2.0], 0.1), ("q1", 1): ([0.0, 1.0, -1.0], 0.0)}
Q_T |= {("q2", 0): ([0.5, 0.0, 1.0], 0.0), ("q2", 1): ([0.0, 2.0, 0.0], 0.0)}


def _linear_agent(**overrides) -> SAC:
    params = Params(hidden=[], learning_starts=0, **overrides)
    agent = SAC(TWO_HEADS, params)
    _set(agent.actor_net.head, *MEAN)
    _set(agent.actor_net.log_std_head, *LOG_STD)
    for (j, h), (w, b) in Q.items():
        _set(getattr(agent.critic, j).nets[h].head, w, b)
    for (j, h), (w, b) in Q_T.items():
        _set(getattr(agent.critic_target, j).nets[h].head, w, b)
    return agent


def _batch(weight: tuple[float, float] = (1.0, 2.0)) -> Batch:
    return Batch(
        obs=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        action=torch.tensor([[0.5], [-0.5]]),
        reward=torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
        next_obs=torch.tensor([[1.0, 1.0], [2.0, 0.0]]),
        discount=torch.tensor([0.9, 0.5]),
        weight=torch.tensor(weight),
        index=np.arange(2),
    )


def _q(table: dict, s: np.ndarray, a: np.ndarray) -> np.ndarray:
    """[2, B, H] from the weight table, in numpy."""
    x = np.concatenate([s, a], axis=1)
    return np.array(
        [[x @ np.array(table[(j, h)][0]) + table[(j, h)][1] for h in (0, 1)] for j in ("q1", "q2")]
    ).transpose(0, 2, 1)


def _policy_sample(s: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a = tanh(u), u = mean + std eps, and log pi(a|s) by the change of variables, in float64."""
    mean = (s @ np.array(MEAN[0]) + MEAN[1])[:, None]
    log_std = (s @ np.array(LOG_STD[0]) + LOG_STD[1])[:, None]
    u = mean + np.exp(log_std) * eps
    a = np.tanh(u)
    normal = -0.5 * ((u - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return a, (normal - np.log(1.0 - a**2)).sum(-1)


def _draws(gen: torch.Generator, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    """A generator's next standard-normal draws, replayed from a copy of it."""
    g = torch.Generator().manual_seed(0)
    g.set_state(gen.get_state())
    return [torch.randn(shape, generator=g).double().numpy() for shape in shapes]


def test_squashed_log_prob_is_the_gaussian_minus_the_tanh_jacobian():
    g = torch.Generator().manual_seed(3)
    mean = torch.randn(64, 3, generator=g, dtype=torch.float64)
    log_std = torch.randn(64, 3, generator=g, dtype=torch.float64) - 0.5
    u = mean + log_std.exp() * torch.randn(64, 3, generator=g, dtype=torch.float64)
    # Direct: the density of u, divided by |da/du| = 1 - tanh(u)^2, per dimension.
    normal = torch.distributions.Normal(mean, log_std.exp()).log_prob(u)
    direct = (normal - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(squashed_log_prob(u, mean, log_std), direct)
    # Where tanh(u) rounds to 1 in float32, the stable form stays finite (the direct one is inf).
    big = torch.tensor([[12.0]])
    assert torch.isfinite(squashed_log_prob(big, torch.zeros(1, 1), torch.zeros(1, 1))).all()


def test_actor_sample_draws_tanh_of_a_gaussian_with_that_log_prob():
    actor = SquashedGaussianActor(2, [], 1)
    _set(actor.head, *MEAN)
    _set(actor.log_std_head, *LOG_STD)
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, -2.0]])
    g = torch.Generator().manual_seed(5)
    (eps,) = _draws(g, (3, 1))
    a, logp = actor.sample(s, g)
    a_hand, logp_hand = _policy_sample(s.double().numpy(), eps)
    np.testing.assert_allclose(a.detach().numpy(), a_hand, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp.detach().numpy(), logp_hand, rtol=1e-5, atol=1e-5)
    # The deterministic action is the squashed mean.
    np.testing.assert_allclose(
        actor(s).detach().numpy(), np.tanh(s.numpy() @ np.array(MEAN[0]) + MEAN[1])[:, None]
    )


def test_soft_target_and_critic_losses_by_hand():
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0, lr_alpha=1e-12, alpha_init=0.3)
    (eps_next,) = _draws(agent.gen, (2, 1))  # the first draw of learn: a' ~ pi(.|s')
    out = agent.learn(_batch())
    b = _batch()
    s2 = b.next_obs.double().numpy()
    a2, logp2 = _policy_sample(s2, eps_next)
    # y_h = r_h + discount (min_j Qj'_h(s', a') - (c_h / C) alpha log pi(a'|s'))
    soft = _q(Q_T, s2, a2).min(0) - SHARE[None] * 0.3 * logp2[:, None]
    y = b.reward.double().numpy() + b.discount.double().numpy()[:, None] * soft
    q = _q(Q, b.obs.double().numpy(), b.action.double().numpy())
    head_losses = (np.array([1.0, 2.0])[None, :, None] * (y - q) ** 2).mean(1).sum(0)
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    assert out.metrics["critic_loss"] == pytest.approx(head_losses.sum(), rel=1e-5)
    assert out.metrics["alpha"] == pytest.approx(0.3, rel=1e-6)
    expected = (np.abs(y - q).mean(0) * C).sum(-1) / C.sum()
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)
    assert out.td_error.shape == (2,)


def test_actor_loss_by_hand_and_the_entropy_it_reports():
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0, lr_alpha=1e-12, alpha_init=0.3)
    _, eps = _draws(agent.gen, (2, 1), (2, 1))  # the second draw: a ~ pi(.|s), reparameterized
    out = agent.learn(_batch())
    s = _batch().obs.double().numpy()
    a, logp = _policy_sample(s, eps)
    q_pi = _q(Q, s, a).min(0)  # [B, H], the pair's minimum per head
    expected = np.mean(0.3 * logp - (q_pi * C).sum(-1))
    assert out.metrics["actor_loss"] == pytest.approx(expected, rel=1e-5)
    assert out.metrics["entropy"] == pytest.approx(-logp.mean(), rel=1e-5)
    # L_alpha = -mean log(alpha) (logp + target), target = -act_dim = -1.
    assert out.metrics["alpha_loss"] == pytest.approx(
        -math.log(0.3) * np.mean(logp - 1.0), rel=1e-5
    )


@pytest.mark.parametrize(
    "log_std_bias, target_per_dim, moves",
    [
        (0.0, -20.0, "down"),  # entropy (~1) far above the target -20: alpha must fall
        (-10.0, 0.0, "up"),  # entropy (~ -8) below the target 0: alpha must rise
    ],
)
def test_temperature_moves_toward_the_target_entropy(log_std_bias, target_per_dim, moves):
    agent = SAC(TWO_HEADS, Params(hidden=[8], target_entropy_per_dim=target_per_dim, lr_alpha=0.01))
    with torch.no_grad():
        agent.actor_net.log_std_head.weight.zero_()
        agent.actor_net.log_std_head.bias.fill_(log_std_bias)
    alphas = [agent.alpha]
    for _ in range(5):
        out = agent.learn(_batch())
        alphas.append(agent.alpha)
    assert (out.metrics["entropy"] > target_per_dim) == (moves == "down")
    steps = np.diff(alphas)
    assert np.all(steps < 0) if moves == "down" else np.all(steps > 0), alphas


def test_a_fixed_temperature_stays_put():
    agent = SAC(TWO_HEADS, Params(hidden=[8], learn_alpha=False, alpha_init=0.2))
    for _ in range(3):
        assert agent.learn(_batch()).metrics["alpha"] == pytest.approx(0.2)
    assert agent.alpha == pytest.approx(0.2)
    assert agent.updates == 3  # one per learn call, what the run's summary reports


def test_two_heads_give_one_twin_pair_each_and_one_priority_per_sample():
    for mode, nets, width in (("separate", 2, 1), ("shared", 1, 2)):
        agent = SAC(TWO_HEADS, Params(hidden=[8], critic=mode))
        for j in ("q1", "q2"):
            critic = getattr(agent.critic, j)
            assert len(critic.nets) == nets and critic.nets[0].head.out_features == width
        b = _batch()
        assert agent.critic(b.obs, b.action).shape == (2, 2, 2)  # [pair, B, H]
        out = agent.learn(b)
        assert out.td_error.shape == (2,)
        assert {"critic_loss/a", "critic_loss/b"} <= set(out.metrics)
    np.testing.assert_allclose(agent.entropy_share.numpy(), SHARE)


@pytest.mark.parametrize("weights", [(1.0,), (0.5, 0.5), (2.0, 1.0), (1.0, -0.5), (1.0, 1e-3)])
def test_the_weighted_heads_soft_target_is_the_weighted_rewards(weights) -> None:
    """sum_h c_h y_h must be r + d (Q' - alpha logp') of the weighted reward: sum_h c_h s_h = 1.
    With s_h = c_h / sum c, weights (0.5, 0.5) halved the critics' temperature and (2, 1)
    raised it by 5/3 against the actor's."""
    heads = tuple(f"h{i}" for i in range(len(weights)))
    space = SpaceInfo(obs_dim=2, act_dim=1, discrete=False, heads=heads, head_weights=weights)
    c = torch.tensor(weights, dtype=torch.float32)
    for agent in (SAC(space, Params(hidden=[8])), CrossQ(space, CrossQParams(hidden=[8]))):
        share = agent.entropy_share
        assert float((c * share).sum()) == pytest.approx(1.0, abs=1e-6), (type(agent), weights)
        ratio = share / c  # in proportion to the weights
        np.testing.assert_allclose(ratio.numpy(), ratio[0].item(), rtol=1e-6)


def test_importance_weights_scale_the_critic_loss():
    # Agents built alike draw alike, so their targets are the same.
    kw = dict(lr_critic=0.0, lr_actor=0.0)
    one = _linear_agent(**kw).learn(_batch((1.0, 1.0)))
    three = _linear_agent(**kw).learn(_batch((3.0, 3.0)))
    assert three.metrics["critic_loss"] == pytest.approx(3 * one.metrics["critic_loss"], rel=1e-6)
    only = _linear_agent(**kw).learn(_batch((2.0, 0.0)))
    np.testing.assert_allclose(only.td_error, one.td_error)  # priorities are not weighted
    assert 0 < only.metrics["critic_loss"] < 2 * one.metrics["critic_loss"]


def test_critic_targets_follow_every_step_by_polyak():
    tau = 0.1
    agent = SAC(TWO_HEADS, Params(hidden=[8], tau=tau))
    with torch.no_grad():
        for p in agent.target_params:
            p.add_(1.0)
    old = [p.detach().clone() for p in agent.target_params]
    agent.learn(_batch())
    for target, o, new in zip(agent.target_params, old, agent.critic_params):
        torch.testing.assert_close(target, (1 - tau) * o + tau * new.detach())


def test_acting_uniform_then_sampled_and_the_mean_for_evaluation():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = SAC(space, Params(hidden=[8], learning_starts=3))
    obs = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    greedy = agent.act(obs, explore=False).action
    with torch.no_grad():
        mean = agent.actor_net(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(greedy, mean, rtol=1e-5, atol=1e-6)  # numpy path = torch path
    first = agent.act(obs, explore=True).action
    assert first.dtype == np.float32 and first.shape == (3, 2)
    zeros = np.zeros(3, bool)
    step = Transitions(
        obs, first, np.zeros((3, 1), np.float32), obs, zeros, zeros, obs, ActOut(first)
    )
    agent.observe(step)
    a, b = agent.act(obs, explore=True).action, agent.act(obs, explore=True).action
    assert a.dtype == np.float32 and np.abs(a).max() < 1.0
    assert not np.allclose(a, b) and not np.allclose(a, greedy)  # samples, not the mean
    np.testing.assert_array_equal(agent.act(obs, explore=False).action, greedy)


def _assert_same(a, b, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_checkpoint_round_trip_restores_everything_and_the_next_step():
    params = Params(hidden=[8, 8], learning_starts=0, normalize_obs=True)
    agent = SAC(TWO_HEADS, params, seed=0)
    for _ in range(3):
        agent.learn(_batch())
    agent.env_steps = 123
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    restored = SAC(TWO_HEADS, params, seed=1)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    _assert_same(agent.state_dict(), restored.state_dict())
    assert restored.alpha == agent.alpha != 1.0
    assert restored.alpha_opt.state_dict()["state"]
    out_a, out_b = agent.learn(_batch()), restored.learn(_batch())
    assert out_a.metrics == out_b.metrics
    _assert_same(agent.state_dict(), restored.state_dict())


# ------------------------------------------------------------------------------------------
# recurrent SAC (sequences): with a silent core the losses are the feedforward ones per
# trained position


def _recurrent_linear_agent(**overrides) -> SAC:
    """``_linear_agent``'s nets behind GRU cores whose weights are all 0: from the zero state
    every core output is 0, so the MLPs on [core output, obs] see the feedforward inputs."""
    params = Params(
        hidden=[], learning_starts=0, core="gru", core_size=2, seq_length=2, seq_burn_in=0
    )
    agent = SAC(TWO_HEADS, dataclasses.replace(params, **overrides))
    with torch.no_grad():
        for net in (agent.actor_net, agent.critic, agent.critic_target):
            for w in net.core.parameters():
                w.zero_()
    silent = [0.0, 0.0]  # the weights of the core's two outputs
    _set(agent.actor_net.mlp.head, silent + MEAN[0], MEAN[1])
    _set(agent.actor_net.mlp.log_std_head, silent + LOG_STD[0], LOG_STD[1])
    for (j, h), (w, b) in Q.items():
        _set(getattr(agent.critic.q, j).nets[h].head, silent + w, b)
    for (j, h), (w, b) in Q_T.items():
        _set(getattr(agent.critic_target.q, j).nets[h].head, silent + w, b)
    return agent


def test_recurrent_soft_target_losses_and_priorities_by_hand_per_position():
    agent = _recurrent_linear_agent(lr_critic=0.0, lr_actor=0.0, lr_alpha=1e-12, alpha_init=0.3)
    # The draws of learn: a' ~ pi(.|s') at the next observations, then a ~ pi(.|s), [T, B, A].
    eps_next, eps = (e.reshape(4, 1)[:3] for e in _draws(agent.gen, (2, 2, 1), (2, 2, 1)))
    out = agent.learn(Batch.from_numpy(SEQ, "cpu"))
    s, a, r, s2 = (positions(k) for k in ("obs", "action", "reward", "next_obs"))
    discount, w = positions("discount"), np.array([1.0, 2.0, 1.0])
    a2, logp2 = _policy_sample(s2, eps_next)
    soft = _q(Q_T, s2, a2).min(0) - SHARE[None] * 0.3 * logp2[:, None]
    y = r + discount[:, None] * soft
    q = _q(Q, s, a)
    # Each head: the pair's squared errors, importance-weighted, summed over the 3 trained
    # positions and divided by their count.
    head_losses = (w[None, :, None] * (y - q) ** 2).sum((0, 1)) / 3
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    assert out.metrics["q_mean"] == pytest.approx(q.mean(), rel=1e-5)
    a_pi, logp = _policy_sample(s, eps)
    actor_loss = np.mean(0.3 * logp - (_q(Q, s, a_pi).min(0) * C).sum(-1))
    assert out.metrics["actor_loss"] == pytest.approx(actor_loss, rel=1e-5)
    assert out.metrics["entropy"] == pytest.approx(-logp.mean(), rel=1e-5)
    assert out.metrics["alpha_loss"] == pytest.approx(
        -math.log(0.3) * np.mean(logp - 1.0), rel=1e-5
    )
    # One priority per sequence: 0.9 max + 0.1 mean of its positions' |TD| (pair averaged,
    # heads weighted).
    abs_td = (np.abs(y - q).mean(0) * C).sum(-1) / C.sum()  # (t, b) = (0, 0), (0, 1), (1, 0)
    first = abs_td[[0, 2]]  # the first sequence's two positions; the second has one
    expected = [0.9 * first.max() + 0.1 * first.mean(), abs_td[1]]
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# runs through the CLI

TEAM = """
[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
sync = { every = 50, keep = ["head"] }
[team.params]
hidden = [16, 16]
activation = "relu"
n_steps = 64
batch_size = 32

[[team]]
name = "apex"
algo = "sac"
role = "actor"
sync = { every = 50 }
[team.params]
learning_starts = 0
hidden = [16, 16]
"""


def _run(tmp_path: Path, capsys, text: str) -> tuple[Path, dict]:
    return run_text(tmp_path, capsys, text)


def _config(total: int = 400, team: str = "", **kw) -> str:
    return config("sac", total, team, **kw)


def test_solo_run_through_the_cli_learns_and_writes_a_loadable_checkpoint(tmp_path, capsys):
    run, summary = _run(tmp_path, capsys, _config())
    assert summary["env_steps"] == 400 and len(summary["eval"]) == 1
    assert summary["members"]["target"]["updates"] > 0
    state = ckpt.load(run / "checkpoints" / "latest.pt")["members"]["target"]
    assert state["algo"] == "sac" and state["updates"] > 0
    assert float(state["log_alpha"]) != 0.0  # alpha moved from its initial 1
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0


def test_team_ppo_explorer_takes_the_mean_path_and_an_apex_actor_the_whole_policy(tmp_path, capsys):
    run, summary = _run(tmp_path, capsys, _config(total=600, name="team", team=TEAM))
    members = ckpt.load(run / "checkpoints" / "latest.pt")["members"]
    learner, apex = members["target"], members["apex"]
    assert learner["updates"] > 0 and apex["updates"] == 0 and apex["env_steps"] > 0
    assert summary["members"]["explorer"]["env_steps"] > 0
    team = json.loads((run / "team.json").read_text())
    # PPO keeps its head and its own log_std: it takes the trunk of SAC's mean path only.
    assert {n.rsplit(".", 1)[0] for n in team["explorer"]["synced"]} == {"trunk.0", "trunk.2"}
    # Another SAC takes all of it, the std layer included.
    assert {n.rsplit(".", 1)[0] for n in team["apex"]["synced"]} == {
        "trunk.0",
        "trunk.2",
        "head",
        "log_std_head",
    }
    config = load(run / "config.toml")
    plan = prepare_team(config, {}).plans[2]
    own = make_agent(config, plan, SpaceInfo(3, 1, False), member_seed(config, plan))
    assert not torch.equal(apex["actor"]["log_std_head.weight"], own.actor.log_std_head.weight)


def test_a_ppo_explorer_without_keep_takes_the_mean_head_too():
    from wheeler2.agents.ppo import PPO
    from wheeler2.agents.ppo import Params as PPOParams

    from wheeler2.sync import SyncPlan, check_sync, source_shapes

    space = SpaceInfo(3, 1, False)
    sac = SAC(space, Params(hidden=[16, 16]))
    ppo = PPO(space, PPOParams(hidden=[16, 16], activation="relu"))
    check_sync(sac.actor, ppo.actor, [], "explorer")
    names = set(SyncPlan(source_shapes(sac.actor), ppo.actor, [], 1.0, "explorer").names)
    assert {"head.weight", "head.bias"} <= names and not any("log_std" in n for n in names)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_her_on_a_goal_env_with_normalized_inputs(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    text = _config(
        total=300,
        name="her",
        env="gymnasium_robotics:FetchReach-v4",
        task='[task]\nspec = "tasks.fetch:Reach"\n',
        her='her = { strategy = "future", k = 4 }',
        norm="true",
    )
    run, summary = _run(tmp_path, capsys, text)
    state = ckpt.load(run / "checkpoints" / "latest.pt")["members"]["target"]
    # FetchReach: 10 observation + 3 goal inputs, the goal concatenated by the engine.
    assert state["actor"]["trunk.0.weight"].shape == (16, 13)
    assert state["updates"] > 0 and summary["env_steps"] == 300


def test_docs_state_every_sac_key_and_bound():
    from wheeler2.schema import describe

    rows: dict[str, str] = {}
    current = ""
    for line in (ROOT / "docs" / "config.md").read_text().splitlines():
        if line.startswith("#"):
            current = line.lstrip("#").strip()
        elif current == "`sac` (`agents/sac.py`)" and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1]
    fields = {f.name: f for f in dataclasses.fields(Params)}
    assert set(rows) == set(fields)
    for name, f in fields.items():
        assert rows[name].startswith(describe(Params, f)), name


def test_defaults_are_within_their_own_bounds_and_the_registry_finds_sac():
    from wheeler2.registry import resolve_algo
    from wheeler2.schema import field_checker

    params = Params()
    for f in dataclasses.fields(params):
        field_checker(Params, f)(getattr(params, f.name))  # Mismatch if out of bounds
    assert resolve_algo("sac") is SAC


# ------------------------------------------------------------------------------------------
# learning check


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sac_learns_pendulum(tmp_path):
    from wheeler2.runtime import run_experiment

    overrides = [
        "experiment.progress=false",
        "experiment.total_steps=15000",
        "experiment.stop_at_threshold=true",  # at -200: past -400 by then
    ]
    config = load(ROOT / "cfg" / "pendulum_sac.toml", overrides=overrides, out=str(tmp_path))
    summary = json.loads((run_experiment(config) / "summary.json").read_text())
    for e in summary["eval"]:
        print(f"SAC Pendulum-v1: {e['env_steps']} env steps, eval {e['return']:.1f}")
    assert summary["best_eval_return"] > -400
