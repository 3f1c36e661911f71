"""Recurrent PPO (``core = "gru" | "lstm"``, issue 15): the update replays what the policy did."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import wheeler2.envs.novel  # noqa: F401 - registers the NoVel ids
from wheeler2.agents.onpolicy import RecurrentActor, RecurrentCritic, Rollout
from wheeler2.agents.ppo import PPO, Params
from wheeler2.envs.gym import GymVecEnv

from wheeler2 import registry
from wheeler2.agent import SpaceInfo, Transitions
from wheeler2.runtime.member import Member
from wheeler2.sync import WeightClient, WeightPublisher, check_sync
from wheeler2.task import Head, RewardHeads

ENV_HEAD = RewardHeads([Head("env", 1.0, None)], None)


def synthetic_run(discrete: bool, **params: object) -> tuple[dict[str, float], float, PPO]:
    """12 steps of 4 copies with random transitions and episode ends: one or two updates."""
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=discrete)
    agent = PPO(
        space, Params(n_steps=6, batch_size=8, n_epochs=3, hidden=[16, 16], **params), seed=3
    )
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    state = agent.initial_state(4) if agent.state_dim else None
    metrics: dict[str, float] = {}
    for _ in range(12):
        out = agent.act(obs, explore=True, state=state)
        nxt = rng.normal(size=(4, 3)).astype(np.float32)
        term, trunc = rng.random(4) < 0.1, rng.random(4) < 0.1
        reward = rng.normal(size=(4, 1)).astype(np.float32)
        step = Transitions(obs, out.action, reward, nxt, term, trunc, nxt, out, state=state)
        metrics = agent.observe(step) or metrics
        obs = nxt
        if state is not None:
            state = out.state.copy()
            state[term | trunc] = 0.0
    total = sum(float(v.double().sum()) for v in agent.policy.state_dict().values())
    total += sum(float(v.double().sum()) for v in agent.critic.state_dict().values())
    return metrics, total, agent


@pytest.mark.parametrize(
    "discrete,weights,policy_loss,value_loss",
    [
        # Measured with agents/ppo.py as it was before recurrent cores were added (f7168d2).
        (True, -2.4796975096178357, -0.00010943371307803318, 3.72623872756958),
        (False, -2.481597146135755, -0.0011330501874908805, 3.7259368896484375),
    ],
)
def test_core_none_gives_the_same_numbers_as_before(
    discrete: bool, weights: float, policy_loss: float, value_loss: float
) -> None:
    metrics, total, agent = synthetic_run(discrete)
    assert agent.state_dim == 0
    # To float32 rounding (rtol 1e-5): another CPU's kernels round the last bits otherwise.
    assert total == pytest.approx(weights, rel=1e-5)
    assert metrics["policy_loss"] == pytest.approx(policy_loss, rel=1e-5, abs=1e-7)
    assert metrics["value_loss"] == pytest.approx(value_loss, rel=1e-5)


@pytest.mark.parametrize("kind,width", [("gru", 8 + 8), ("lstm", 16 + 16)])
def test_state_is_the_actor_core_then_the_critic_core(kind: str, width: int) -> None:
    agent = PPO(SpaceInfo(3, 2, True), Params(core=kind, core_size=8, hidden=[16]))
    assert agent.state_dim == width and agent.actor_state_dim == width // 2
    assert isinstance(agent.policy, RecurrentActor) and isinstance(agent.critic, RecurrentCritic)
    out = agent.act(np.zeros((5, 3), np.float32), explore=True, state=agent.initial_state(5))
    assert out.state.shape == (5, width) and out.state.dtype == np.float32
    alone = PPO(SpaceInfo(3, 2, True), Params(core=kind, core_size=8, critic_core=False))
    assert alone.state_dim == width // 2
    # trunk_reads = "core": the core reads the observation and the hidden layers its output.
    params = Params(core=kind, core_size=8, hidden=[16], trunk_reads="core")
    first = PPO(SpaceInfo(3, 2, True), params)
    assert first.policy.core.in_dim == 3 and first.policy.trunk[0].in_features == 8
    assert first.policy.head.in_features == 16 and first.critic.head.in_features == 16
    assert first.state_dim == width


def spy_on_update(agent: PPO) -> list[dict[str, Any]]:
    """Before each update, replay every copy's sequence and keep it beside what was stored,
    with the critic as it was (the update changes it)."""
    seen: list[dict[str, Any]] = []
    update = agent.update

    def spy() -> dict[str, float]:
        buf = agent.rollout
        with torch.no_grad():
            logp, v = agent.log_probs()[0], agent.values()
        replayed = {"replay_logp": logp, "replay_v": v, "critic": copy.deepcopy(agent.critic)}
        seen.append({"rollout": copy.deepcopy(buf)} | replayed)
        return update()

    agent.update = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize(
    "env_id,kind,norm,first",
    [
        ("CartPoleNoVel-v1", "lstm", True, False),
        ("CartPoleNoVel-v1", "gru", False, True),
        ("PendulumNoVel-v1", "gru", False, False),
    ],
)
def test_the_replayed_log_probs_are_the_behaviour_ones(
    env_id: str, kind: str, norm: bool, first: bool
) -> None:
    # Through the engine's member loop: it carries and resets the state; the agent stores the
    # chunk's initial state and episode starts; replaying them must give back, step by step,
    # the log-probs and values the actor and critic had while acting. CartPole episodes end
    # early (terminations inside every chunk); Pendulum's are cut at 200 steps (truncations).
    env = GymVecEnv(env_id, {}, 3, 0)
    space = SpaceInfo(env.info.obs_dim, env.info.act_dim, env.info.discrete)
    T = 50
    p = Params(core=kind, core_size=16, hidden=[16], n_steps=T, n_epochs=1, normalize_obs=norm)
    p.trunk_reads = "core" if first else "obs"
    agent = PPO(space, p, seed=1)
    seen = spy_on_update(agent)
    member = Member("m", "explorer", agent, env, ENV_HEAD, None, 0)
    try:
        for _ in range(5 * T):
            member.step()
    finally:
        member.close()
    assert len(seen) == 5
    starts = torch.stack([b["rollout"].starts for b in seen])
    assert starts.any(), "no episode began inside a chunk: the test would not test resets"
    for s in seen:
        buf = s["rollout"]
        n = buf.reward.shape[1]
        # Episode-start flags: step t starts an episode where step t-1 ended one.
        torch.testing.assert_close(buf.starts[1:], buf.done[:-1].bool())
        torch.testing.assert_close(s["replay_logp"].view(T, n), buf.logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(s["replay_v"].view(T, n), buf.value, atol=1e-5, rtol=0)
    if env_id == "PendulumNoVel-v1":
        rollouts = [b["rollout"] for b in seen]
        truncated = torch.stack([b.done.bool() & ~b.terminated.bool() for b in rollouts])
        assert truncated.any()


def test_a_truncated_step_bootstraps_from_the_state_after_it() -> None:
    # V(s'_t) at a truncation is the critic in the state *after* step t: replay the critic up
    # to t, one more step on the final observation, and compare with what the update uses.
    env = GymVecEnv("PendulumNoVel-v1", {}, 2, 0)
    T = 250
    agent = PPO(SpaceInfo(2, 1, False), Params(core="gru", core_size=8, hidden=[8], n_steps=T))
    seen = spy_on_update(agent)
    member = Member("m", "explorer", agent, env, ENV_HEAD, None, 0)
    for _ in range(T):
        member.step()
    member.close()
    buf = seen[0]["rollout"]
    t = 199  # both copies' first episode is cut at 200 steps
    assert buf.done[t].all() and not buf.terminated[t].any()
    critic = seen[0]["critic"]
    with torch.no_grad():
        sc0 = buf.state0[:, agent.actor_state_dim :]
        _, s_after = critic.sequence(buf.obs[: t + 1], sc0, buf.starts[: t + 1])
        expected, _ = critic.step(buf.next_obs[t], s_after)
    agent.rollout = buf  # the rollout the update used, as it was stored
    _, next_values = agent.rollout_values()
    torch.testing.assert_close(next_values[t], expected, atol=1e-5, rtol=0)
    # Elsewhere inside an episode it is simply the next step's value.
    torch.testing.assert_close(next_values[:t], buf.value[1 : t + 1])


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_a_row_back_from_absence_replays_from_the_state_the_engine_held(algo: str) -> None:
    # Multi-agent rows (docs/envs.md, "Active mask"): copy 1's agent leaves (terminated) at
    # step 2, is absent at steps 3 and 4 (the first rollout's last step and the second's first)
    # and is back at step 5. The engine holds an absent row's state (Member._next_state): the
    # initial one, where its episode ended. The replay must not move it through the absent
    # steps, or the log-probs and values of the steps after the return are not the behaviour
    # ones.
    from types import SimpleNamespace

    from wheeler2.agents.a2c import A2C
    from wheeler2.agents.a2c import Params as A2CParams

    T, N = 4, 2
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
    net = dict(core="gru", core_size=8, hidden=[8], n_steps=T, ortho_init=False)
    if algo == "ppo":
        agent: Any = PPO(space, Params(n_epochs=1, batch_size=T * N, **net), seed=2)
    else:
        agent = A2C(space, A2CParams(**net), seed=2)
    seen = spy_on_update(agent)
    engine = SimpleNamespace(_initial=agent.initial_state(N), agent=agent)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(N, 3)).astype(np.float32) * 3
    state = agent.initial_state(N)
    for step in range(2 * T):
        out = agent.act(obs, explore=True, state=state)
        active = np.array([True, step not in (3, 4)])
        term = np.array([False, step == 2])
        trunc = np.zeros(N, bool)
        nxt = rng.normal(size=(N, 3)).astype(np.float32) * 3
        reward = rng.normal(size=(N, 1)).astype(np.float32) * active[:, None]
        valid = None if active.all() else active
        agent.observe(
            Transitions(obs, out.action, reward, nxt, term, trunc, nxt, out, valid, state)
        )
        st = SimpleNamespace(terminated=term, truncated=trunc)
        state = Member._next_state(engine, out.state, st, valid, state)  # type: ignore[arg-type]
        obs = nxt
    assert len(seen) == 2
    for s in seen:
        buf = s["rollout"]
        real = buf.valid.bool()
        torch.testing.assert_close(
            s["replay_logp"].view(T, N)[real], buf.logp[real], atol=1e-6, rtol=0
        )
        torch.testing.assert_close(
            s["replay_v"].view(T, N)[real], buf.value[real], atol=1e-6, rtol=0
        )


def test_minibatches_are_whole_env_copy_sequences() -> None:
    agent = PPO(SpaceInfo(3, 2, True), Params(core="gru", n_steps=32, batch_size=64))
    agent.rollout = Rollout.empty(32, 8, agent.space, agent.state_dim, agent.device)
    mbs = [m.copies for m in agent.minibatches(64)]
    assert [len(m) for m in mbs] == [2, 2, 2, 2]
    assert sorted(torch.cat(mbs).tolist()) == list(range(8))
    # A batch smaller than one sequence still takes one whole copy.
    agent.rollout = Rollout.empty(32, 3, agent.space, agent.state_dim, agent.device)
    assert [len(m.copies) for m in agent.minibatches(8)] == [1, 1, 1]


def test_recurrent_ppo_learns_on_synthetic_rollouts_without_error() -> None:
    metrics, _, agent = synthetic_run(False, core="lstm", core_size=8)
    assert agent.updates == 2 and np.isfinite(metrics["policy_loss"])


def test_a_recurrent_explorer_keeps_its_core_when_syncing_from_ddpg() -> None:
    # Sync takes the trunk (same shapes as DDPG's) and the head where core_size equals DDPG's
    # last hidden width; the core is outside every role and DDPG has none: the explorer keeps it.
    space = SpaceInfo(obs_dim=2, act_dim=1, discrete=False)
    ddpg_cls = registry.resolve_algo("ddpg")
    ddpg = ddpg_cls(space, ddpg_cls.Params(hidden=[32, 32]), seed=1)
    ppo = PPO(space, Params(core="gru", core_size=32, hidden=[32, 32], activation="relu"), seed=2)
    check_sync(ddpg.actor, ppo.actor, [], "explorer")
    core_before = {k: v.clone() for k, v in ppo.actor.core.state_dict().items()}
    with WeightPublisher.create(ddpg.actor) as pub:
        client = WeightClient.attach(pub.handle(), ppo.actor, keep=[], alpha=1.0)
        pub.publish(ddpg.actor)
        assert client.pull() == 1
        synced = set(client.synced)
        client.close()
    for name, value in ddpg.actor.trunk.state_dict().items():
        assert torch.equal(ppo.actor.trunk.state_dict()[name], value)
    assert torch.equal(ppo.actor.head.weight, ddpg.actor.head.weight)
    for name, value in ppo.actor.core.state_dict().items():
        assert torch.equal(value, core_before[name]), name
    assert not any(name.startswith("core") for name in synced)
    assert {"trunk.0.weight", "head.weight"} <= synced


def team_cfg(tmp_path: Path, backend: str) -> Path:
    text = f"""
[experiment]
name = "recurrent-team"
seed = 0
total_steps = 800
eval_every = 400
eval_episodes = 2
backend = "{backend}"
progress = false

[env]
id = "PendulumNoVel-v1"
num_envs = 2

[buffer]
capacity = 5000
batch_size = 32
prioritized = false

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 200
hidden = [32, 32]

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
sync = {{ every = 100, keep = ["head"], alpha = 1.0 }}
[team.params]
core = "gru"
core_size = 16
hidden = [32, 32]
activation = "relu"
n_steps = 16
batch_size = 64
"""
    path = tmp_path / "team.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("backend", ["serial", "local"])
@pytest.mark.timeout(180)
def test_a_team_with_a_recurrent_explorer_runs_and_syncs(tmp_path: Path, backend: str) -> None:
    from wheeler2.api import run

    run_dir = run(team_cfg(tmp_path, backend), experiment__out=str(tmp_path / "runs"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 800
    explorer = summary["members"]["explorer"]
    assert explorer["sync_version"] >= 1
    # The explorer updated its recurrent policy (PPO reports its losses) and kept acting.
    assert np.isfinite(explorer["policy_loss"]) and explorer["env_steps"] > 0


def test_normalize_obs_feeds_the_policy_normalized_observations() -> None:
    # VecNormalize's order: each acting batch is folded into the statistics before it is
    # normalized (the first by act, later ones as the previous step's reset_obs), and the
    # rollout stores the observations as the policy saw them.
    agent = PPO(SpaceInfo(2, 2, True), Params(normalize_obs=True, n_steps=4, hidden=[8]))
    rng = np.random.default_rng(0)
    rows = [rng.normal(5.0, 2.0, size=(3, 2)).astype(np.float32) for _ in range(4)]
    zeros, no = np.zeros((3, 1), np.float32), np.zeros(3, bool)
    for obs, nxt in zip(rows[:3], rows[1:]):
        out = agent.act(obs, explore=True)
        agent.observe(Transitions(obs, out.action, zeros, nxt, no, no, nxt, out))
    seen = np.concatenate(rows).astype(np.float64)
    np.testing.assert_allclose(agent.obs_norm.mean, seen.mean(0), rtol=1e-6)
    np.testing.assert_allclose(agent.obs_norm.std, seen.std(0), rtol=1e-6)
    # The third batch was stored normalized by the statistics of the first three.
    first_three = np.concatenate(rows[:3]).astype(np.float64)
    expected = (rows[2] - first_three.mean(0)) / first_three.std(0)
    np.testing.assert_allclose(agent.rollout.obs[2].numpy(), expected, rtol=1e-4, atol=1e-5)
    assert "obs_norm" in agent.state_dict()


# -- recurrent A2C: the same cores, one update per rollout --------------------------------------


def test_a2c_core_none_gives_the_same_numbers_as_before() -> None:
    # Measured with agents/a2c.py as it was before recurrent cores were added (5c4d663).
    from wheeler2.agents.a2c import A2C
    from wheeler2.agents.a2c import Params as A2CParams

    agent = A2C(SpaceInfo(3, 2, True), A2CParams(n_steps=5, hidden=[16, 16]), seed=3)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3)).astype(np.float32)
    metrics: dict[str, float] = {}
    for _ in range(12):
        out = agent.act(obs, explore=True)
        nxt = rng.normal(size=(4, 3)).astype(np.float32)
        term, trunc = rng.random(4) < 0.1, rng.random(4) < 0.1
        reward = rng.normal(size=(4, 1)).astype(np.float32)
        metrics = (
            agent.observe(Transitions(obs, out.action, reward, nxt, term, trunc, nxt, out))
            or metrics
        )
        obs = nxt
    total = sum(float(v.double().sum()) for v in agent.policy.state_dict().values())
    total += sum(float(v.double().sum()) for v in agent.critic.state_dict().values())
    assert agent.state_dim == 0
    assert total == pytest.approx(-2.4559490316314623, rel=1e-5)  # to float32 rounding
    assert metrics["policy_loss"] == pytest.approx(-0.0341121181845665, rel=1e-5)
    assert metrics["value_loss"] == pytest.approx(5.433969497680664, rel=1e-5)


def test_recurrent_a2c_replays_the_behaviour_log_probs_and_values() -> None:
    from wheeler2.agents.a2c import A2C
    from wheeler2.agents.a2c import Params as A2CParams

    env = GymVecEnv("CartPoleNoVel-v1", {}, 3, 0)
    T = 40
    p = A2CParams(core="lstm", core_size=16, hidden=[16], n_steps=T)
    agent = A2C(SpaceInfo(2, 2, True), p, seed=1)
    assert agent.state_dim == 64
    acted: list[tuple[np.ndarray, np.ndarray]] = []
    act, update = agent.act, agent.update

    def spy_act(obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> Any:
        out = act(obs, explore, state)
        acted.append((out.logp.copy(), out.extras["value"].copy()))
        return out

    checked: list[bool] = []

    def spy_update() -> dict[str, float]:
        r = agent.rollout
        a = agent.actor_state_dim
        with torch.no_grad():
            out, _ = agent.policy.sequence(r.obs, r.state0[:, :a], r.starts)
            logp = agent.policy.evaluate(out, r.action)[0]
            v, _ = agent.critic.sequence(r.obs, r.state0[:, a:], r.starts)
        k = len(checked) * T
        np.testing.assert_allclose(
            logp.numpy(), np.stack([x[0] for x in acted[k : k + T]]), atol=1e-5
        )
        np.testing.assert_allclose(v.numpy(), np.stack([x[1] for x in acted[k : k + T]]), atol=1e-5)
        checked.append(bool(r.starts.any()))
        return update()

    agent.act = spy_act  # type: ignore[method-assign]
    agent.update = spy_update  # type: ignore[method-assign]
    member = Member("m", "explorer", agent, env, ENV_HEAD, None, 0)
    for _ in range(3 * T):
        member.step()
    member.close()
    assert len(checked) == 3 and any(checked)  # episodes began inside the rollouts
    assert agent.updates == 3


# -- checkpoints: the parts (issue 35) kept every key, so old checkpoints load as they are ------

CORE = [
    "core.rnn.weight_ih_l0",
    "core.rnn.weight_hh_l0",
    "core.rnn.bias_ih_l0",
    "core.rnn.bias_hh_l0",
]
TRUNK, HEAD = ["trunk.0.weight", "trunk.0.bias"], ["head.weight", "head.bias"]


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_checkpoint_keys_are_those_of_the_cores_layout(algo: str) -> None:
    # The keys (and their order) a recurrent actor and critic had before agents/parts/memory.py,
    # recorded at 6ee6fe0: trunk then core, or core then trunk with trunk_reads = "core".
    cls = registry.resolve_algo(algo)
    params = cls.Params
    space = SpaceInfo(3, 2, False)
    p = params(core="gru", core_size=8, hidden=[16])
    state = cls(space, p, seed=0).state_dict()
    assert list(state["policy"]) == ["log_std", *TRUNK, *CORE, *HEAD]
    assert list(state["critic"]) == [*TRUNK, *CORE, *HEAD]
    # "streams": the random generators a resume continues (issue 39), beside the recorded keys.
    top = ["algo", "policy", "critic", "opt", "env_steps", "updates", "streams"]
    assert sorted(state) == sorted(top + (["obs_norm"] if algo == "ppo" else []))
    p = params(core="lstm", core_size=8, hidden=[16], trunk_reads="core")
    first = cls(SpaceInfo(3, 2, True), p, seed=0)
    assert list(first.state_dict()["policy"]) == [*CORE, *TRUNK, *HEAD]
    # An old checkpoint's tensors load into the same places.
    other = cls(SpaceInfo(3, 2, True), p, seed=1)
    other.load_state_dict(first.state_dict())
    for a, b in zip(first.policy.parameters(), other.policy.parameters()):
        assert torch.equal(a, b)
