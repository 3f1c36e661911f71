"""TD3: the clipped double-Q target with smoothed target actions and the losses by hand, per-head
shapes, the policy delay, importance weights, checkpoints, runs through the CLI (solo, team with
a PPO explorer and an Ape-X actor, HER), and a Pendulum learning check (slow)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from offpolicy_runs import config, run_text
from recurrent_seq import SEQ, positions
from wheeler2.agents.noise import KINDS
from wheeler2.agents.offpolicy import actor_step, loss_step
from wheeler2.agents.td3 import TD3, Params

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


def _set(linear: torch.nn.Linear, weight: list[float], bias: float) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([weight]))
        linear.bias.fill_(bias)


# Linear nets (no hidden layers): mu(s) = tanh(W s + b), Qj_h(s, a) = w_jh . [s, a] + b_jh.
ACTOR = ([1.0, 0.0], 0.0)
ACTOR_T = ([0.5, -0.5], 0.0)
Q = {("q1", 0): ([0.5, 0.5, 0.5], 0.0), ("q1", 1): ([1.0, -1.0, 0.0], 0.2)}
Q |= {("q2", 0): ([0.0, 0.0, 1.0], 0.0), ("q2", 1): ([1.0, 1.0, 1.0], 0.0)}
Q_T = {("q1", 0): ([1.0, 0.0, 2.0], 0.1), ("q1", 1): ([0.0, 1.0, -1.0], 0.0)}
Q_T |= {("q2", 0): ([0.5, 0.0, 1.0], 0.0), ("q2", 1): ([0.0, 2.0, 0.0], 0.0)}


def _linear_agent(**overrides) -> TD3:
    params = Params(hidden=[], learning_starts=0, **overrides)
    agent = TD3(TWO_HEADS, params)
    _set(agent.actor_net.head, *ACTOR)
    _set(agent.actor_target.head, *ACTOR_T)
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
    """[2, B, H] from the weight table, computed in numpy."""
    x = np.concatenate([s, a], axis=1)
    return np.array(
        [[x @ np.array(table[(j, h)][0]) + table[(j, h)][1] for h in (0, 1)] for j in ("q1", "q2")]
    ).transpose(0, 2, 1)


def test_noise_free_target_is_the_min_of_the_pair_per_head_and_losses_by_hand():
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=0.0)
    out = agent.learn(_batch())
    # mu'(s') = tanh(.5 s1 - .5 s2) = [0, tanh(1)].
    # s'_1: Q1' = [1.1, 1], Q2' = [.5, 2] -> min [.5, 1];  y_1 = [1 + .9 * .5, 0 + .9 * 1]
    # s'_2: Q1' = [2 + 2t + .1, -t], Q2' = [1 + t, 0] -> min [1 + t, -t]
    #       y_2 = [.5 (1 + t), 2 - .5 t]
    t = np.tanh(1.0)
    y = np.array([[1.45, 0.9], [0.5 * (1 + t), 2 - 0.5 * t]])
    # Q1(s, a) = [[.75, 1.2], [.25, -.8]], Q2(s, a) = [[.5, 1.5], [-.5, .5]]
    q = np.array([[[0.75, 1.2], [0.25, -0.8]], [[0.5, 1.5], [-0.5, 0.5]]])
    w = np.array([1.0, 2.0])[None, :, None]
    head_losses = (w * (y - q) ** 2).mean(1).sum(0)
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    assert out.metrics["critic_loss"] == pytest.approx(head_losses.sum(), rel=1e-5)
    assert out.metrics["q_mean"] == pytest.approx(q.mean(), abs=1e-6)
    # Priorities: |td| averaged over the pair, then over the heads with their weights.
    expected = (np.abs(y - q).mean(0) * C).sum(-1) / C.sum()
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)
    assert out.td_error.shape == (2,)


def test_target_action_adds_clipped_noise_then_clips_to_the_action_box():
    # A huge std makes every noise draw hit the clip: eps = +-0.5, by the sign of the draw.
    agent = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=100.0, target_noise_clip=0.5)
    replay = torch.Generator().manual_seed(0)
    replay.set_state(agent.gen.get_state())
    z = torch.randn((2, 1), generator=replay).numpy()
    out = agent.learn(_batch())
    b = _batch()
    s2 = b.next_obs.numpy()
    mu_t = np.tanh(s2 @ np.array(ACTOR_T[0]))[:, None]
    a2 = np.clip(mu_t + np.clip(100.0 * z, -0.5, 0.5), -1.0, 1.0)
    assert np.all(np.abs(np.clip(100.0 * z, -0.5, 0.5)) == 0.5)
    y = b.reward.numpy() + b.discount.numpy()[:, None] * _q(Q_T, s2, a2).min(0)
    q = _q(Q, b.obs.numpy(), b.action.numpy())
    head_losses = (np.array([1.0, 2.0])[None, :, None] * (y - q) ** 2).mean(1).sum(0)
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    # And the smoothing really happened: without noise the loss is another one.
    plain = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=0.0).learn(_batch())
    assert plain.metrics["critic_loss"] != pytest.approx(out.metrics["critic_loss"], rel=1e-3)


@pytest.mark.parametrize("actor_q", ["q1", "min"])
def test_actor_loss_is_the_weighted_sum_of_head_values(actor_q):
    agent = _linear_agent(lr_critic=0.0, policy_delay=1, actor_q=actor_q)
    out = agent.learn(_batch())
    s = _batch().obs.numpy()
    mu = np.tanh(s @ np.array(ACTOR[0]))[:, None]
    q = _q(Q, s, mu)  # [2, B, H]
    q_pi = q[0] if actor_q == "q1" else q.min(0)
    assert out.metrics["actor_loss"] == pytest.approx(-(q_pi * C).sum(-1).mean(), abs=1e-6)


def test_two_heads_give_one_twin_pair_each_and_one_priority_per_sample():
    for mode, nets, width in (("separate", 2, 1), ("shared", 1, 2)):
        agent = TD3(TWO_HEADS, Params(hidden=[8], critic=mode))
        for j in ("q1", "q2"):
            critic = getattr(agent.critic, j)
            assert len(critic.nets) == nets and critic.nets[0].head.out_features == width
        b = _batch()
        assert agent.critic(b.obs, b.action).shape == (2, 2, 2)  # [pair, B, H]
        out = agent.learn(b)
        assert out.td_error.shape == (2,)
        assert {"critic_loss/a", "critic_loss/b"} <= set(out.metrics)


def test_priorities_weigh_the_heads_by_the_size_of_their_weights():
    # The first step's priorities do not depend on the head weights' signs: a cost head
    # (negative weight) counts by its size, weights that sum to 0 (they gave inf) or are all 0
    # give the plain mean over the heads.
    def priorities(weights: tuple[float, float]) -> np.ndarray:
        space = dataclasses.replace(TWO_HEADS, head_weights=weights)
        return TD3(space, Params(hidden=[8], learning_starts=0)).learn(_batch()).td_error

    np.testing.assert_allclose(priorities((1.0, -0.5)), priorities((1.0, 0.5)), rtol=1e-6)
    same = priorities((1.0, 1.0))
    np.testing.assert_allclose(priorities((1.0, -1.0)), same, rtol=1e-6)
    np.testing.assert_allclose(priorities((0.0, 0.0)), same, rtol=1e-6)


def test_policy_delay_leaves_actor_and_targets_alone_on_the_other_steps():
    agent = TD3(TWO_HEADS, Params(hidden=[8], policy_delay=3))
    actor0 = [p.detach().clone() for p in agent.actor_params]
    target0 = [p.detach().clone() for p in agent.target_params]
    critic0 = [p.detach().clone() for p in agent.critic_params]
    for _ in range(2):
        agent.learn(_batch())
        assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))
        assert all(torch.equal(a, b) for a, b in zip(target0, agent.target_params))
    assert any(not torch.equal(a, b) for a, b in zip(critic0, agent.critic_params))
    agent.learn(_batch())  # the 3rd critic step: the actor and the targets move
    assert any(not torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))
    assert any(not torch.equal(a, b) for a, b in zip(target0, agent.target_params))


def test_soft_update_formula_on_delayed_steps():
    tau = 0.1
    agent = TD3(TWO_HEADS, Params(hidden=[8], tau=tau, policy_delay=1))
    with torch.no_grad():
        for p in agent.target_params:
            p.add_(1.0)
    old = [p.detach().clone() for p in agent.target_params]
    agent.learn(_batch())
    for target, o, new in zip(agent.target_params, old, agent.online_params):
        torch.testing.assert_close(target, (1 - tau) * o + tau * new.detach())


def test_importance_weights_scale_the_critic_loss():
    one = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=0.0).learn(_batch((1.0, 1.0)))
    three = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=0.0).learn(_batch((3.0, 3.0)))
    assert three.metrics["critic_loss"] == pytest.approx(3 * one.metrics["critic_loss"], rel=1e-6)
    # Weight 0 on a sample removes it: the loss is that of the other sample alone, halved.
    only = _linear_agent(lr_critic=0.0, lr_actor=0.0, target_noise=0.0).learn(_batch((2.0, 0.0)))
    np.testing.assert_allclose(only.td_error, one.td_error)  # priorities are not weighted
    assert 0 < only.metrics["critic_loss"] < 2 * one.metrics["critic_loss"]


@pytest.mark.parametrize("kind", KINDS)
def test_uniform_actions_until_learning_starts_then_policy_plus_noise(kind):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = TD3(space, Params(hidden=[8], learning_starts=3, noise=kind, noise_std=0.5))
    obs = np.zeros((3, 3), np.float32)
    greedy = agent.act(obs, explore=False).action
    first = agent.act(obs, explore=True).action
    assert first.dtype == np.float32 and first.shape == (3, 2)
    assert not np.allclose(first, greedy)
    zeros = np.zeros(3, bool)
    step = Transitions(
        obs, first, np.zeros((3, 1), np.float32), obs, zeros, zeros, obs, ActOut(first)
    )
    agent.observe(step)
    noisy = agent.act(obs, explore=True).action
    assert np.abs(noisy).max() <= 1.0
    assert np.allclose(noisy, greedy) == (kind == "none")


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
    agent = TD3(TWO_HEADS, params, seed=0)
    for _ in range(3):
        agent.learn(_batch())
    agent.env_steps = 123
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    restored = TD3(TWO_HEADS, params, seed=1)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    _assert_same(agent.state_dict(), restored.state_dict())
    assert restored.actor_opt.state_dict()["state"]
    # Same state, same smoothing-noise stream -> the same next step, bit for bit.
    out_a, out_b = agent.learn(_batch()), restored.learn(_batch())
    assert out_a.metrics == out_b.metrics
    _assert_same(agent.state_dict(), restored.state_dict())


# ------------------------------------------------------------------------------------------
# recurrent TD3 (sequences): with a silent core the losses are the feedforward ones per
# trained position


def _recurrent_linear_agent(**overrides) -> TD3:
    """``_linear_agent``'s nets behind GRU cores whose weights are all 0: from the zero state
    every core output is 0, so the MLPs on [core output, obs] see the feedforward inputs."""
    params = Params(
        hidden=[], learning_starts=0, core="gru", core_size=2, seq_length=2, seq_burn_in=0
    )
    agent = TD3(TWO_HEADS, dataclasses.replace(params, **overrides))
    nets = (agent.actor_net, agent.actor_target, agent.critic, agent.critic_target)
    with torch.no_grad():
        for net in nets:
            for w in net.core.parameters():
                w.zero_()
    silent = [0.0, 0.0]  # the weights of the core's two outputs
    _set(agent.actor_net.mlp.head, silent + ACTOR[0], ACTOR[1])
    _set(agent.actor_target.mlp.head, silent + ACTOR_T[0], ACTOR_T[1])
    for (j, h), (w, b) in Q.items():
        _set(getattr(agent.critic.q, j).nets[h].head, silent + w, b)
    for (j, h), (w, b) in Q_T.items():
        _set(getattr(agent.critic_target.q, j).nets[h].head, silent + w, b)
    return agent


def test_recurrent_target_losses_and_priorities_by_hand_per_position():
    agent = _recurrent_linear_agent(
        lr_critic=0.0, lr_actor=0.0, policy_delay=1, target_noise=100.0, target_noise_clip=0.5
    )
    replay = torch.Generator().manual_seed(0)
    replay.set_state(agent.gen.get_state())
    z = torch.randn((2, 2, 1), generator=replay).numpy().reshape(4, 1)[:3]  # [T, B, A] drawn
    out = agent.learn(Batch.from_numpy(SEQ, "cpu"))
    s, a, r, s2 = (positions(k) for k in ("obs", "action", "reward", "next_obs"))
    discount, w = positions("discount"), np.array([1.0, 2.0, 1.0])
    # The smoothed target action, every noise draw clipped to +-0.5, then into [-1, 1].
    eps = np.clip(100.0 * z, -0.5, 0.5)
    assert np.all(np.abs(eps) == 0.5)
    a2 = np.clip(np.tanh(s2 @ np.array(ACTOR_T[0]))[:, None] + eps, -1.0, 1.0)
    y = r + discount[:, None] * _q(Q_T, s2, a2).min(0)
    q = _q(Q, s, a)
    # Each head: the pair's squared errors, importance-weighted, summed over the 3 trained
    # positions and divided by their count.
    head_losses = (w[None, :, None] * (y - q) ** 2).sum((0, 1)) / 3
    assert out.metrics["critic_loss/a"] == pytest.approx(head_losses[0], rel=1e-5)
    assert out.metrics["critic_loss/b"] == pytest.approx(head_losses[1], rel=1e-5)
    assert out.metrics["q_mean"] == pytest.approx(q.mean(), rel=1e-5)
    mu = np.tanh(s @ np.array(ACTOR[0]))[:, None]
    actor_loss = -(_q(Q, s, mu)[0] * C).sum(-1).mean()  # Q1, as in the paper
    assert out.metrics["actor_loss"] == pytest.approx(actor_loss, rel=1e-5)
    # One priority per sequence: 0.9 max + 0.1 mean of its positions' |TD| (pair averaged,
    # heads weighted).
    abs_td = (np.abs(y - q).mean(0) * C).sum(-1) / C.sum()  # (t, b) = (0, 0), (0, 1), (1, 0)
    first = abs_td[[0, 2]]  # the first sequence's two positions; the second has one
    expected = [0.9 * first.max() + 0.1 * first.mean(), abs_td[1]]
    np.testing.assert_allclose(out.td_error, expected, rtol=1e-5)


def test_recurrent_policy_delay_moves_the_actor_on_every_second_step_only():
    agent = _recurrent_linear_agent(policy_delay=2)
    actor0 = [p.detach().clone() for p in agent.actor_params]
    target0 = [p.detach().clone() for p in agent.target_params]
    batch = Batch.from_numpy(SEQ, "cpu")
    out = agent.learn(batch)
    assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))
    assert all(torch.equal(a, b) for a, b in zip(target0, agent.target_params))
    assert out.metrics["actor_loss"] == 0.0  # no actor step yet
    out = agent.learn(batch)
    assert any(not torch.equal(a, b) for a, b in zip(actor0, agent.actor_params))
    assert any(not torch.equal(a, b) for a, b in zip(target0, agent.target_params))
    assert out.metrics["actor_loss"] != 0.0 and agent.updates == 2


@pytest.mark.parametrize("core", ["none", "gru"])
def test_actions_before_learning_starts_are_uniform_over_the_action_box(core):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    agent = TD3(space, Params(hidden=[8], learning_starts=10**6, core=core, core_size=4))
    a = agent.act(np.zeros((2000, 3), np.float32), explore=True).action
    assert a.shape == (2000, 2) and a.min() >= -1.0 and a.max() <= 1.0
    # The whole box, half the draws on each side of 0 (the count's std is ~32 of 4000).
    assert a.min() < -0.99 and a.max() > 0.99
    assert abs((a > 0).mean() - 0.5) < 0.05


# ------------------------------------------------------------------------------------------
# the optimizer steps DDPG, TD3 and SAC share (agents/offpolicy.py)


@pytest.mark.parametrize("step", [loss_step, actor_step])
@pytest.mark.parametrize(("max_norm", "after"), [(0.5, [2.7, 3.6]), (0.0, [-3.0, -4.0])])
def test_steps_clip_the_gradient_norm_unless_it_is_zero(step, max_norm, after):
    # Gradient [6, 8], norm 10; SGD with step size 1. Clipped to 0.5: [0.3, 0.4].
    p = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    other = torch.nn.Parameter(torch.tensor([1.0, 1.0]))  # a critic weight the loss runs through
    loss = (p * torch.tensor([6.0, 8.0]) * other).sum()
    step(loss, torch.optim.SGD([p], lr=1.0), [p], max_norm)
    torch.testing.assert_close(p.detach(), torch.tensor(after))
    if step is actor_step:
        assert other.grad is None  # the actor's step leaves the critic's gradients alone


def test_one_head_reports_its_losses_without_per_head_names():
    agent = TD3(SpaceInfo(2, 1, False), Params(hidden=[8], policy_delay=1))
    b = _batch()
    out = agent.learn(dataclasses.replace(b, reward=b.reward[:, :1]))
    assert set(out.metrics) == {"critic_loss", "actor_loss", "q_mean"}


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
algo = "td3"
role = "actor"
sync = { every = 50 }
[team.params]
learning_starts = 0
hidden = [16, 16]
noise = "pink"
noise_std = 0.3
"""


def _run(tmp_path: Path, capsys, text: str) -> tuple[Path, dict]:
    return run_text(tmp_path, capsys, text)


def _config(total: int = 400, team: str = "", **kw) -> str:
    return config("td3", total, team, **kw)


def test_solo_run_through_the_cli_learns_and_writes_a_loadable_checkpoint(tmp_path, capsys):
    run, summary = _run(tmp_path, capsys, _config())
    assert summary["env_steps"] == 400 and len(summary["eval"]) == 1
    assert summary["members"]["target"]["updates"] > 0
    state = ckpt.load(run / "checkpoints" / "latest.pt")["members"]["target"]
    assert state["algo"] == "td3" and state["updates"] > 0
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0


def test_team_ppo_explorer_syncs_from_td3_and_an_apex_actor_never_learns(tmp_path, capsys):
    run, summary = _run(tmp_path, capsys, _config(total=600, name="team", team=TEAM))
    members = ckpt.load(run / "checkpoints" / "latest.pt")["members"]
    learner, apex = members["target"], members["apex"]
    assert learner["updates"] > 0 and apex["updates"] == 0 and apex["env_steps"] > 0
    assert summary["members"]["explorer"]["env_steps"] > 0
    team = json.loads((run / "team.json").read_text())
    # The PPO explorer takes TD3's trunk and keeps its own head; the Ape-X actor takes it all.
    print(team)
    assert {n.rsplit(".", 1)[0] for n in team["explorer"]["synced"]} == {"trunk.0", "trunk.2"}
    assert {n.rsplit(".", 1)[0] for n in team["apex"]["synced"]} == {"trunk.0", "trunk.2", "head"}
    # The Ape-X actor holds the learner's actor (synced), not its own initial one.
    config = load(run / "config.toml")
    plan = prepare_team(config, {}).plans[2]
    space = SpaceInfo(3, 1, False)
    own = make_agent(config, plan, space, member_seed(config, plan)).actor
    assert not torch.equal(apex["actor"]["head.weight"], own.head.weight)


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


def test_docs_state_every_td3_key_and_bound():
    from wheeler2.schema import describe

    rows = _doc_rows("`td3` (`agents/td3.py`)")
    fields = {f.name: f for f in dataclasses.fields(Params)}
    assert set(rows) == set(fields)
    for name, f in fields.items():
        assert rows[name].startswith(describe(Params, f)), name


def _doc_rows(heading: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    current = ""
    for line in (ROOT / "docs" / "config.md").read_text().splitlines():
        if line.startswith("#"):
            current = line.lstrip("#").strip()
        elif current == heading and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_defaults_are_within_their_own_bounds_and_the_registry_finds_td3():
    from wheeler2.registry import resolve_algo
    from wheeler2.schema import field_checker

    params = Params()
    for f in dataclasses.fields(params):
        field_checker(Params, f)(getattr(params, f.name))  # Mismatch if out of bounds
    assert resolve_algo("td3") is TD3


# ------------------------------------------------------------------------------------------
# learning check


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_td3_learns_pendulum(tmp_path):
    from wheeler2.runtime import run_experiment

    overrides = [
        "experiment.progress=false",
        "experiment.total_steps=15000",
        "experiment.stop_at_threshold=true",  # at -200: past -400 by then
        "team.target.params.learning_starts=1000",
    ]
    config = load(ROOT / "cfg" / "pendulum_td3.toml", overrides=overrides, out=str(tmp_path))
    summary = json.loads((run_experiment(config) / "summary.json").read_text())
    for e in summary["eval"]:
        print(f"TD3 Pendulum-v1: {e['env_steps']} env steps, eval {e['return']:.1f}")
    assert summary["best_eval_return"] > -400
