"""Vanilla policy gradient (REINFORCE with a learned baseline): the loss by hand on a fixed net,
plain REINFORCE without the baseline, episode ends, shapes, checkpoints, a run through the
engine, as an explorer syncing from a DDPG learner, and a CartPole learning check (slow)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.pg import PG, Params, policy_gradient_loss

from wheeler2.agent import SpaceInfo, Transitions

LOG_HALF = math.log(0.5)


def fixed_agent(**params) -> PG:
    """Two actions, one copy; every policy weight 0 (pi = [.5, .5] everywhere, log pi = log .5)
    and a baseline worth 1 everywhere (critic weights 0, its output bias 1)."""
    space = SpaceInfo(obs_dim=2, act_dim=2, discrete=True)
    p = dict(n_steps=3, gamma=0.5, hidden=[4], normalize_advantage=False, vf_iters=1)
    agent = PG(space, Params(**{**p, **params}))
    with torch.no_grad():
        for w in [*agent.policy.parameters(), *agent.critic.parameters()]:
            w.zero_()
        agent.critic.net.head.bias.fill_(1.0)
    return agent


def feed_episode(
    agent: PG, last: str, rewards: tuple[float, ...] = (1.0, 1.0, 1.0)
) -> dict[str, float]:
    """Three steps of ``rewards`` (1 each unless told) with actions 0, 1, 0; the third ends as
    ``last``."""
    rng = np.random.default_rng(0)
    metrics = None
    for t, a in enumerate([0, 1, 0]):
        obs = rng.normal(size=(1, 2)).astype(np.float32)
        nxt = rng.normal(size=(1, 2)).astype(np.float32)
        out = agent.act(obs, explore=True)
        out.action = np.array([a])
        term = np.array([t == 2 and last == "terminated"])
        trunc = np.array([t == 2 and last == "truncated"])
        reward = np.full((1, 1), rewards[t], np.float32)
        metrics = agent.observe(Transitions(obs, out.action, reward, nxt, term, trunc, nxt, out))
        assert (metrics is None) == (t < 2)
    assert metrics is not None
    return metrics


@pytest.mark.parametrize(
    ("last", "baseline", "expected"),
    [
        # gamma .5, rewards 1, 1, 1. Terminated: G = 1.75, 1.5, 1. Baseline V = 1:
        # A = .75, .5, 0, L = -(1.25 / 3) log .5 = 0.288811.
        ("terminated", True, -(1.25 / 3) * LOG_HALF),
        # Truncated: the last step bootstraps from V(final obs) = 1: G = 1.875, 1.75, 1.5,
        # A = .875, .75, .5, L = -(2.125 / 3) log .5 = 0.490981.
        ("truncated", True, -(2.125 / 3) * LOG_HALF),
        # The rollout ends mid-episode: the same bootstrap as a truncation.
        ("running", True, -(2.125 / 3) * LOG_HALF),
        # No baseline, plain REINFORCE: A = G = 1.75, 1.5, 1, L = -(4.25 / 3) log .5 = 0.981961.
        ("terminated", False, -(4.25 / 3) * LOG_HALF),
    ],
)
def test_policy_loss_by_hand_on_a_fixed_net(last, baseline, expected):
    agent = fixed_agent(baseline=baseline)
    metrics = feed_episode(agent, last)
    assert metrics["policy_loss"] == pytest.approx(expected, rel=1e-6)
    assert metrics["entropy"] == pytest.approx(math.log(2), rel=1e-6)


def test_td_lambda_moves_the_baseline_target_not_the_policy_return():
    """td_lambda = 0: the baseline regresses on r + gamma V(s') (= 1.5, 1.5, 1 here), but the
    policy's return stays Monte Carlo: the same loss as above."""
    agent = fixed_agent(td_lambda=0.0)
    metrics = feed_episode(agent, "terminated")
    assert metrics["policy_loss"] == pytest.approx(-(1.25 / 3) * LOG_HALF, rel=1e-6)
    # mean((target - V)^2) with V = 1: (.25 + .25 + 0) / 3 (Monte Carlo would give .8125 / 3)
    assert metrics["value_loss"] == pytest.approx(0.5 / 3, rel=1e-6)


def test_policy_gradient_by_hand_on_a_fixed_net():
    """With every weight 0 only the output bias b gets a gradient:
    dL/db = - mean_t A_t (onehot(a_t) - pi) with pi = [.5, .5]; terminated, A = .75, .5, 0
    and actions 0, 1, 0: - (.75 [.5, -.5] + .5 [-.5, .5]) / 3 = [-1/24, 1/24]."""
    agent = fixed_agent()
    feed_episode(agent, "terminated")
    grad = agent.policy.head.bias.grad
    torch.testing.assert_close(grad, torch.tensor([-1 / 24, 1 / 24]))
    # Adam's first step moves each coordinate by lr against the gradient's sign.
    torch.testing.assert_close(agent.policy.head.bias.detach(), torch.tensor([1e-3, -1e-3]))


def test_normalized_advantages_by_hand():
    """normalize_advantage: A = .75, .5, 0 (terminated) become (A - mean) / std, the sample
    std over the rollout, 1/(N-1) as SB3's: deviations 1/3, 1/12, -5/12, squares summing to
    7/24, variance 7/48. Their sum is 0, so the loss is 0 whatever the scale: the gradient
    shows it. As above, dL/db = - mean_t A_t (onehot(a_t) - pi) with actions 0, 1, 0:
    [-1, 1] (A_0 - A_1 + A_2) / 6 = [1, -1] / (36 sqrt(7/48))."""
    agent = fixed_agent(normalize_advantage=True)
    metrics = feed_episode(agent, "terminated")
    assert metrics["policy_loss"] == pytest.approx(0.0, abs=1e-6)
    g = 1 / (36 * math.sqrt(7 / 48))  # 0.0727393
    torch.testing.assert_close(agent.policy.head.bias.grad, torch.tensor([g, -g]))


def test_explained_variance_of_a_constant_baseline_and_of_constant_returns():
    """1 - Var[G - V] / Var[G]: a baseline worth 1 everywhere explains none of the returns'
    variance (G = 1.75, 1.5, 1), and returns that are all alike (rewards .5, .5, 1 with gamma
    .5: G = 1, 1, 1) have no variance to explain, which reads 0, not nan."""
    metrics = feed_episode(fixed_agent(), "terminated")
    assert metrics["explained_variance"] == pytest.approx(0.0, abs=1e-6)
    flat = feed_episode(fixed_agent(), "terminated", rewards=(0.5, 0.5, 1.0))
    assert flat["value_loss"] == pytest.approx(0.0, abs=1e-6)  # the targets are V's value
    assert flat["explained_variance"] == 0.0


def test_policy_gradient_loss_leaves_out_rows_of_weight_zero():
    logp = torch.tensor([-1.0, -2.0, -3.0])
    adv = torch.tensor([1.0, 2.0, 4.0])
    # - (1 * -1 + 4 * -3) / 2 rows: the absent middle row counts neither in the sum nor the mean.
    assert policy_gradient_loss(logp, adv, torch.tensor([1.0, 0.0, 1.0])).item() == 6.5
    assert policy_gradient_loss(logp, adv).item() == pytest.approx(17 / 3)
    assert policy_gradient_loss(logp, adv, torch.ones(3)).item() == pytest.approx(17 / 3)
    assert policy_gradient_loss(logp, adv, torch.zeros(3)).item() == 0.0  # no row: no step


def test_baseline_regresses_on_the_returns_with_its_own_steps():
    agent = fixed_agent(vf_iters=3)
    metrics = feed_episode(agent, "terminated")
    assert agent.updates == 1
    # The first of the three steps saw mean((G - 1)^2) = (.5625 + .25 + 0) / 3; later ones less.
    assert metrics["value_loss"] < (0.5625 + 0.25) / 3
    # Adam's three steps of size ~vf_lr on the output bias, toward the returns' mean (1.42).
    assert agent.critic.net.head.bias.item() == pytest.approx(1.0 + 3 * 1e-3, rel=1e-3)


def test_several_heads_are_summed_with_their_weights():
    space = SpaceInfo(obs_dim=2, act_dim=2, discrete=True, heads=("a", "b"), head_weights=(1, 2))
    one = fixed_agent()
    two = PG(space, one.params)
    two.policy.load_state_dict(one.policy.state_dict())
    two.critic.load_state_dict(one.critic.state_dict())
    rng = np.random.default_rng(0)
    for t, a in enumerate([0, 1, 0]):
        obs = rng.normal(size=(1, 2)).astype(np.float32)
        out = two.act(obs, explore=True)
        out.action = np.array([a])
        term = np.array([t == 2])
        # heads .5 and .25, weighted 1 and 2: a summed reward of 1 per step, as above
        reward = np.array([[0.5, 0.25]], np.float32)
        z = np.zeros(1, bool)
        m = two.observe(Transitions(obs, out.action, reward, obs, term, z, obs, out))
    assert m["policy_loss"] == pytest.approx(-(1.25 / 3) * LOG_HALF, rel=1e-6)


def random_steps(agent: PG, n: int, steps: int, seed: int) -> list[dict[str, float] | None]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, agent.space.obs_dim)).astype(np.float32)
    metrics = []
    for _ in range(steps):
        out = agent.act(obs, explore=True)
        nxt = rng.normal(size=obs.shape).astype(np.float32)
        term, trunc = rng.random(n) < 0.1, rng.random(n) < 0.1
        reward = rng.normal(size=(n, 1)).astype(np.float32)
        step = Transitions(obs, out.action, reward, nxt, term, trunc & ~term, nxt, out)
        metrics.append(agent.observe(step))
        obs = nxt
    return metrics


@pytest.mark.parametrize("discrete", [True, False])
def test_act_and_learn_shapes(discrete):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=discrete)
    agent = PG(space, Params(n_steps=5, hidden=[16]), seed=0)
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    for explore in (True, False):
        out = agent.act(obs, explore=explore)
        assert out.logp.shape == (4,)
        if discrete:
            assert out.action.shape == (4,) and out.action.dtype == np.int64
            assert set(out.action) <= {0, 1}
        else:
            assert out.action.shape == (4, 2) and out.action.dtype == np.float32
            assert np.all(np.abs(out.action) <= 1.0)
            assert out.extras["raw_action"].shape == (4, 2)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    metrics = random_steps(agent, 4, 12, seed=1)
    assert [i for i, m in enumerate(metrics) if m is not None] == [4, 9]
    assert set(metrics[4]) == {
        "policy_loss",
        "value_loss",
        "entropy",
        "explained_variance",
        "updates",
    }
    assert all(math.isfinite(v) for v in metrics[9].values())
    assert agent.updates == 2 and agent.env_steps == 48 and agent.rollout.t == 2
    assert any(not torch.equal(b, a) for b, a in zip(before, agent.actor.parameters()))


def test_absent_rows_have_no_weight():
    """A multi-agent row marked inactive changes nothing: the same update as without it."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    a = PG(space, Params(n_steps=2, hidden=[8]), seed=0)
    b = PG(space, Params(n_steps=2, hidden=[8]), seed=0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 2, 3)).astype(np.float32)
    nxt = rng.normal(size=(2, 2, 3)).astype(np.float32)
    rewards = rng.normal(size=(2, 2, 1)).astype(np.float32)
    z = np.zeros(2, bool)
    for t in range(2):
        out = a.act(obs[t], explore=True)
        out.action = np.array([1, 0])
        m_a = a.observe(Transitions(obs[t], out.action, rewards[t], nxt[t], z, z, nxt[t], out))
        junk = rewards[t].copy()
        junk[1] = 99.0  # the absent row's reward must not count
        act = np.array([True, t == 0])
        m_b = b.observe(
            Transitions(obs[t], out.action, junk, nxt[t], z, z, nxt[t], out, active=act)
        )
    assert m_a is not None and m_b is not None
    assert m_b["policy_loss"] != pytest.approx(m_a["policy_loss"])
    assert all(math.isfinite(v) for v in m_b.values())
    assert b.env_steps == 3


def _assert_same(a, b, where: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("discrete", [True, False])
def test_state_dict_round_trip(discrete):
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=discrete)
    params = Params(n_steps=5, hidden=[8])
    agent = PG(space, params, seed=0)
    random_steps(agent, 2, 10, seed=0)
    assert agent.updates == 2
    buf = io.BytesIO()
    torch.save(agent.state_dict(), buf)
    buf.seek(0)
    other = PG(space, params, seed=1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    _assert_same(other.state_dict(), agent.state_dict())
    assert other.state_dict()["algo"] == "pg"
    assert other.pi_opt.state_dict()["state"] and other.vf_opt.state_dict()["state"]
    obs = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        other.act(obs, explore=False).action, agent.act(obs, explore=False).action
    )
    agent.gen.manual_seed(3)
    other.gen.manual_seed(3)
    m_a = random_steps(agent, 2, 5, seed=2)[-1]
    m_b = random_steps(other, 2, 5, seed=2)[-1]
    assert m_a is not None and m_a == m_b
    _assert_same(other.state_dict(), agent.state_dict())


def test_every_param_is_documented_with_its_bound():
    """docs/config.md's pg table states each key with the text ``describe()`` produces (as
    tests/test_config_schema.py checks for the other algorithms)."""
    from wheeler2.schema import describe

    text = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()
    section = text.split("#### `pg` (`agents/pg.py`)", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1]
    fields = {f.name: f for f in dataclasses.fields(Params)}
    assert set(rows) == set(fields)
    for name, f in fields.items():
        assert rows[name].startswith(describe(Params, f, False)), name
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert f"`{json.dumps(default)}`" in section.split(f"| `{name}` |", 1)[1].split("\n")[0]


# -- through the engine ------------------------------------------------------------------------

SOLO = """
[experiment]
name = "pg-solo"
seed = 1
total_steps = 800
eval_every = 400
eval_episodes = 2
backend = "serial"
progress = false

[env]
id = "CartPole-v1"
num_envs = 4

[[team]]
name = "pg"
algo = "pg"
role = "learner"
[team.params]
n_steps = 25
hidden = [16]
"""

TEAM = """
[experiment]
name = "pg-team"
seed = 0
total_steps = 600
eval_every = 300
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 2_000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 100
hidden = [16, 16]

[[team]]
name = "explorer"
algo = "pg"
role = "explorer"
sync = { every = 100, keep = ["actor.head"] }
[team.params]
hidden = [16, 16]
activation = "relu"
n_steps = 50
"""


def test_solo_run_through_the_engine(tmp_path: Path) -> None:
    from wheeler2 import checkpoint as ckpt
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    cfg = tmp_path / "solo.toml"
    cfg.write_text(SOLO)
    run = Path(run_experiment(load(cfg), tmp_path / "runs"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 800
    assert [e["env_steps"] for e in summary["eval"]] == [400, 800]
    metrics = (run / "metrics.csv").read_text()
    assert ",pg,policy_loss," in metrics and ",pg,value_loss," in metrics
    state = ckpt.load(run / "checkpoints" / "latest.pt")["members"]["pg"]
    assert state["algo"] == "pg" and state["updates"] == 8  # 800 steps / (25 steps x 4 copies)


def test_explorer_in_a_team_syncs_from_a_ddpg_learner(tmp_path: Path) -> None:
    """PG explorers learn on their own rollouts, push every transition into the central replay
    the DDPG learner samples, and take the learner's actor trunk (keeping their own head)."""
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    cfg = tmp_path / "team.toml"
    cfg.write_text(TEAM)
    run = Path(run_experiment(load(cfg), tmp_path / "runs"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 600
    members = summary["members"]
    assert members["target"]["updates"] > 0 and members["explorer"]["env_steps"] > 0
    team = json.loads((run / "team.json").read_text())
    synced = team["explorer"]["synced"]
    assert synced and all(name.startswith("trunk.") for name in synced)
    metrics = (run / "metrics.csv").read_text()
    assert ",explorer,policy_loss," in metrics and ",target,critic_loss," in metrics


def test_a_dqn_learner_seeds_a_pg_explorer_by_role():
    """CartPole: DQN's Q-net keeps its layers at ``net.trunk`` / ``net.head``; the PG explorer
    takes the trunk by role and keeps its own head, as PPO and A2C explorers do."""
    from wheeler2 import registry
    from wheeler2.sync import WeightClient, WeightPublisher, check_sync

    space = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)
    dqn_cls = registry.resolve_algo("dqn")
    dqn = dqn_cls(space, dqn_cls.Params(hidden=[32, 32]), seed=1)
    pg = registry.resolve_algo("pg")(space, Params(hidden=[32, 32], activation="relu"), seed=2)
    assert isinstance(pg, PG)
    own_head = {k: v.clone() for k, v in pg.actor.head.state_dict().items()}
    check_sync(dqn.actor, pg.actor, ["actor.head"], "explorer")
    with WeightPublisher.create(dqn.actor) as pub:
        client = WeightClient.attach(pub.handle(), pg.actor, keep=["actor.head"], alpha=1.0)
        pub.publish(dqn.actor)
        client.pull()
        client.close()
    for k, v in dqn.actor.net.trunk.state_dict().items():
        assert torch.equal(pg.actor.trunk.state_dict()[k], v), k
    for k, v in pg.actor.head.state_dict().items():
        assert torch.equal(v, own_head[k]), k


# -- learning check ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pg_solves_cartpole(tmp_path: Path) -> None:
    """cfg/cartpole_pg.toml as shipped: the framework's eval (mean of 10 deterministic
    episodes) reaches 475 within 100k env steps."""
    from wheeler2.api import run

    root = Path(__file__).resolve().parents[1]
    run_dir = run(root / "cfg" / "cartpole_pg.toml", seed=0, out=str(tmp_path))
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = summary["steps_to_threshold"]
    print(f"PG CartPole-v1: eval >= 475 at {steps} env steps, {summary['wall_s']:.1f} s")
    assert steps is not None and steps <= 100_000
