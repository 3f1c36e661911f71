"""The cases of the agent regression test (tests/test_agent_regression.py) and their recorder.

Each case builds one algorithm from the registry name and ``Params`` written here, feeds it a
fixed input from fixed weights, and ends with the parameters the recording holds:

* ``replay`` cases (DDPG, TD3, SAC, DQN): one fixed batch, ``agent.learn`` ``UPDATES`` times.
  Feedforward: a :class:`~wheeler2.agent.Batch` of random arrays (discounts 0 or gamma^k, k up
  to ``n_step``, uneven importance weights). Recurrent (``core``): a real sample of the
  project's sequence replay (burn-in, padding, stored policy states), filled by a twin of the
  agent acting on random observations.
* ``observe`` cases (PPO, A2C, PG, and DDPG's detached head explorer): a fixed rollout of
  :class:`~wheeler2.agent.Transitions` (whose ``ActOut`` came from a twin of the agent: same
  seed, same weights), fed through ``agent.observe`` over and over until about ``UPDATES``
  gradient steps have run.

The recording (``tests/data/agent_regression.pt``) holds per case: the Params and space it was
made with, the agent's ``state_dict()`` before (``initial``), the inputs, and after: every
tensor and counter of ``state_dict()`` except the optimizers' (``final``, flat ``top/sub.key``
names), the last ``td_error`` and metrics, and a ``trace`` of the metrics at updates 1-20 and
every 10th. The test rebuilds each agent with the current code, loads ``initial``, replays the
inputs and compares.

How strict that is: 200 Adam steps amplify float rounding (ReLU kinks, the twin critics' min,
DQN's argmax and clipping turn a last-bit difference into a different path). With every initial
weight nudged by one ulp, 12 of the 37 cases ended outside rtol 1e-5 / atol 1e-6 (td3, sac,
sac_two_heads_normalize_obs_clip and a2c_gru by 1000x and more), yet their traced metrics
agreed through update 110 or later. So the same math in another float order (another summation
order, one batched matmul for the twin critics) can fail a case without being wrong. The
failure says at which update the metrics first left the recording: rounding alone (the nudge)
first showed at update 110 or later, the mutations tried at update 1 to 3, or 11 for one that
only rare draws reach (TD3 without its target-noise clip, which 1 in 80 draws exceed).

Re-record only on purpose (a change meant to move the numbers, or one shown to be rounding that
way), from a clean checkout of the new code:

    python -m tests.agent_regression_cases --record tests/data/agent_regression.pt \\
        --source "git <commit>"

A copy of the repository outside the editable install (``git archive`` into a folder) imports
``wheeler2.agents`` from the install unless the copy has the installed layout: link its
folders under its ``wheeler2/`` first (``for d in agents envs tasks; do ln -s ../$d
wheeler2/$d; done``) and pass ``--expect-root`` to check.
"""

from __future__ import annotations

import argparse
import contextlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wheeler2.agent import ActOut, Agent, Batch, LearnOut, SpaceInfo, Transitions
from wheeler2.registry import resolve_algo

SEED = 0
UPDATES = 200  # gradient steps of each replay case (about as many for the observe cases)
OBS_DIM, ACT_DIM, N_ACTIONS = 3, 2, 3
BATCH = 32  # feedforward replay batch
SEQ_BATCH = 8  # sequences per recurrent replay batch
NUM_ENVS = 4  # env copies of an observe case's rollout
HIDDEN = [16, 16]  # tiny nets keep the recording small (about 40 KB a case)
CORE = dict(core_size=16, seq_length=6, seq_burn_in=3)


@dataclass(frozen=True)
class Case:
    id: str
    algo: str  # registry name, as in [[team]] algo = "..."
    params: dict[str, Any]
    discrete: bool = False
    heads: tuple[str, ...] = ("env",)
    head_weights: tuple[float, ...] = (1.0,)
    kind: str = "replay"  # "replay": learn on one batch | "observe": learn inside observe
    n_step: int = 1  # replay: the largest k of the discounts gamma^k (the replay's n_step)
    n_steps: int = 0  # observe: vector steps in the fixed rollout
    repeats: int = 0  # observe: how many times the rollout is fed
    active: bool = False  # observe: some multi-agent rows absent (Transitions.active)

    @property
    def space(self) -> SpaceInfo:
        act = N_ACTIONS if self.discrete else ACT_DIM
        return SpaceInfo(OBS_DIM, act, self.discrete, self.heads, self.head_weights)

    @property
    def recurrent(self) -> bool:
        return self.params.get("core", "none") != "none"


TWO = dict(heads=("a", "b"), head_weights=(1.0, 0.5))
OFF = dict(hidden=HIDDEN, learning_starts=0, tau=0.05)
DQN = dict(hidden=HIDDEN, learning_starts=0, lr=1e-3, target_update=10)
PPO = dict(hidden=HIDDEN, n_steps=8, batch_size=16, n_epochs=5)
A2C = dict(hidden=HIDDEN, n_steps=5)
PG = dict(hidden=HIDDEN, n_steps=8, vf_iters=2)
PPO_RUN = dict(kind="observe", n_steps=8, repeats=20)  # 20 updates x 5 epochs x 2 minibatches
A2C_RUN = dict(kind="observe", n_steps=5, repeats=UPDATES)  # one step per update
PG_RUN = dict(kind="observe", n_steps=8, repeats=70)  # 70 x (1 policy + 2 baseline steps)

CASES: list[Case] = [
    # -- DDPG ------------------------------------------------------------------------------
    Case("ddpg", "ddpg", OFF),
    Case("ddpg_two_heads", "ddpg", OFF, **TWO),
    Case(
        "ddpg_two_heads_shared_normalize_heads",
        "ddpg",
        OFF | dict(critic="shared", normalize_heads=True),
        **TWO,
    ),
    Case("ddpg_noisy", "ddpg", OFF | dict(noisy=True)),
    Case("ddpg_rbf", "ddpg", OFF | dict(features="rbf", rbf_centers=16)),
    Case("ddpg_normalize_obs", "ddpg", OFF | dict(normalize_obs=True)),
    Case(
        "ddpg_nstep_delay_clip",
        "ddpg",
        OFF | dict(policy_delay=2, max_grad_norm=0.5, gamma=0.9),
        n_step=3,
    ),
    Case(
        "ddpg_detached_head",
        "ddpg",
        OFF | dict(head="b", head_batch=16, head_states=64, head_updates=0.5),
        kind="observe",
        n_steps=4,
        repeats=25,  # 100 observes of 4 rows x 0.5 updates per row
        **TWO,
    ),
    Case("ddpg_gru", "ddpg", OFF | CORE | dict(core="gru")),
    Case(
        "ddpg_gru_noisy_two_heads",
        "ddpg",
        OFF | CORE | dict(core="gru", noisy=True, normalize_heads=True),
        **TWO,
    ),
    # -- TD3 -------------------------------------------------------------------------------
    Case("td3", "td3", OFF),
    Case("td3_normalize_obs", "td3", OFF | dict(normalize_obs=True)),
    Case(
        "td3_two_heads_shared_min_nstep",
        "td3",
        OFF | dict(critic="shared", actor_q="min", gamma=0.9),
        n_step=3,
        **TWO,
    ),
    Case("td3_gru", "td3", OFF | CORE | dict(core="gru")),
    Case("td3_lstm_nstep3", "td3", OFF | CORE | dict(core="lstm", gamma=0.9), n_step=3),
    # -- SAC -------------------------------------------------------------------------------
    Case("sac", "sac", OFF),  # learn_alpha = true: the automatic entropy temperature
    Case("sac_fixed_alpha", "sac", OFF | dict(learn_alpha=False, alpha_init=0.2)),
    Case(
        "sac_two_heads_normalize_obs_clip",
        "sac",
        OFF | dict(normalize_obs=True, max_grad_norm=0.5),
        **TWO,
    ),
    Case("sac_gru", "sac", OFF | CORE | dict(core="gru")),
    # -- DQN (double Q; no dueling head in this code) -------------------------------------
    Case("dqn", "dqn", DQN, discrete=True),
    Case(
        "dqn_single_mse_polyak_two_heads",
        "dqn",
        DQN | dict(double=False, loss="mse", tau=0.1, target_update=1, max_grad_norm=0.0),
        discrete=True,
        n_step=3,
        **TWO,
    ),
    Case("dqn_noisy", "dqn", DQN | dict(noisy=True), discrete=True),
    Case(
        "dqn_rbf_normalize_obs",
        "dqn",
        DQN | dict(features="rbf", rbf_centers=16, normalize_obs=True),
        discrete=True,
    ),
    Case("dqn_gru", "dqn", DQN | CORE | dict(core="gru"), discrete=True),
    Case(
        "dqn_gru_noskip_nstep3",
        "dqn",
        DQN | CORE | dict(core="gru", trunk_reads="core"),
        discrete=True,
        n_step=3,
    ),
    # -- PPO -------------------------------------------------------------------------------
    Case("ppo_discrete", "ppo", PPO | dict(ent_coef=0.01), discrete=True, **PPO_RUN),
    Case("ppo_continuous", "ppo", PPO, **PPO_RUN),
    Case(
        "ppo_continuous_flags",
        "ppo",
        PPO
        | dict(
            clip_range_vf=0.2,
            ent_coef=0.01,
            normalize_obs=True,
            lr_schedule="linear",
            clip_schedule="linear",
            total_steps=2000,
            activation="relu",
            ortho_init=False,
        ),
        **PPO_RUN,
    ),
    Case("ppo_discrete_active_two_heads", "ppo", PPO, discrete=True, active=True, **TWO, **PPO_RUN),
    Case("ppo_gru", "ppo", PPO | dict(core="gru", core_size=16), **PPO_RUN),
    Case(
        "ppo_gru_discrete_core_first",
        "ppo",
        PPO | dict(core="gru", core_size=16, trunk_reads="core", critic_core=False),
        discrete=True,
        **PPO_RUN,
    ),
    # -- A2C -------------------------------------------------------------------------------
    Case("a2c_discrete", "a2c", A2C, discrete=True, **A2C_RUN),
    Case(
        "a2c_continuous_flags",
        "a2c",
        A2C | dict(td_lambda=0.8, normalize_advantage=True, ent_coef=0.01),
        **A2C_RUN,
    ),
    Case("a2c_gru", "a2c", A2C | dict(core="gru", core_size=16), discrete=True, **A2C_RUN),
    # -- PG (REINFORCE with a baseline; it has no recurrent core) ------------------------
    Case("pg_discrete", "pg", PG, discrete=True, **PG_RUN),
    Case("pg_continuous", "pg", PG, **PG_RUN),
    Case(
        "pg_flags_active",
        "pg",
        PG | dict(baseline=False, td_lambda=0.5, ent_coef=0.01, max_grad_norm=0.5),
        discrete=True,
        active=True,
        **PG_RUN,
    ),
]

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"


# -- building and running ---------------------------------------------------------------------


def build(case: Case) -> Agent:
    """The case's agent from the current code (registry name, Params, space, seed)."""
    cls = resolve_algo(case.algo)
    return cls(case.space, cls.Params(**case.params), "cpu", SEED)


@dataclass
class Outcome:
    metrics: dict[str, float]  # the last update's
    td_error: np.ndarray | None  # the last learn step's (replay cases)
    # (update number from 1, its metrics) at the updates of TRACE_AT: where a failing case
    # first left the recording tells a real change (update 1 or 2) from float rounding that
    # 200 steps amplified (late, after many updates that agree).
    trace: list[tuple[int, dict[str, float]]]


def traced(update: int) -> bool:
    return update <= 20 or update % 10 == 0


def run(agent: Agent, case: Case, inputs: dict[str, Any]) -> Outcome:
    """Feed ``inputs`` to ``agent`` as the case says."""
    trace: list[tuple[int, dict[str, float]]] = []
    if case.kind == "replay":
        arrays = {k: v.numpy() for k, v in inputs["batch"].items()}
        out: LearnOut | None = None
        for u in range(1, UPDATES + 1):
            out = agent.learn(Batch.from_numpy(arrays, "cpu"))
            if traced(u):
                trace.append((u, dict(out.metrics)))
        assert out is not None
        return Outcome(dict(out.metrics), out.td_error, trace)
    steps = [transitions(s) for s in inputs["steps"]]
    metrics: dict[str, float] | None = None
    u = 0
    for _ in range(case.repeats):
        for step in steps:
            m = agent.observe(step)
            if m is not None:
                metrics, u = m, u + 1
                if traced(u):
                    trace.append((u, dict(m)))
    assert metrics is not None, f"{case.id}: observe never returned metrics"
    return Outcome(dict(metrics), None, trace)


def pack_trace(trace: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    names = sorted(trace[-1][1])
    values = [[float(m.get(n, float("nan"))) for n in names] for _, m in trace]
    return dict(
        updates=torch.tensor([u for u, _ in trace], dtype=torch.int64),
        names=names,
        values=torch.tensor(values, dtype=torch.float64),
    )


def transitions(s: dict[str, Any]) -> Transitions:
    """A stored step (tensors) as the :class:`Transitions` the engine hands ``observe``."""

    def arr(key: str, src: dict[str, Any] = s) -> np.ndarray | None:
        v = src.get(key)
        return None if v is None else v.numpy()

    a = s["act_out"]
    act_out = ActOut(
        action=arr("action", a),
        logp=arr("logp", a),
        extras={k: v.numpy() for k, v in a["extras"].items()},
        state=arr("state", a),
    )
    return Transitions(
        obs=arr("obs"),
        action=arr("action"),
        reward=arr("reward"),
        next_obs=arr("next_obs"),
        terminated=arr("terminated"),
        truncated=arr("truncated"),
        reset_obs=arr("reset_obs"),
        act_out=act_out,
        active=arr("active"),
        state=arr("state"),
    )


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and "param_groups" in value and "state" in value


def final_values(agent: Agent) -> dict[str, Any]:
    """Every tensor and number of ``agent.state_dict()`` except the optimizers' state, by flat
    name (``actor/mlp.trunk.0.weight``, ``updates``); strings (``algo``) left out."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if _is_optimizer_state(value):
            return
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}/{k}" if prefix else str(k), v)
        elif isinstance(value, torch.Tensor):
            flat[prefix] = value.detach().cpu().clone()
        elif isinstance(value, (bool, int, float)):
            flat[prefix] = value

    walk("", agent.state_dict())
    return flat


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -- making the inputs (the recorder only) ---------------------------------------------------


def _to_tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v).copy()) for k, v in arrays.items()}


def _warm_up(agent: Agent, case: Case, rng: np.random.Generator) -> None:
    """Three observed vector steps before learning (they set normalize_obs statistics and the
    env step counter), on observations off zero mean and unit scale."""
    n = 4
    for _ in range(3):
        obs = (rng.standard_normal((n, OBS_DIM)) * 2.0 + 1.0).astype(np.float32)
        nxt = (rng.standard_normal((n, OBS_DIM)) * 2.0 + 1.0).astype(np.float32)
        action = _actions(case, rng, n)
        reward = rng.standard_normal((n, len(case.heads))).astype(np.float32)
        no = np.zeros(n, bool)
        agent.observe(Transitions(obs, action, reward, nxt, no, no, nxt, ActOut(action)))


def _actions(case: Case, rng: np.random.Generator, *shape: int) -> np.ndarray:
    if case.discrete:
        return rng.integers(0, N_ACTIONS, shape).astype(np.int64)
    return rng.uniform(-1.0, 1.0, (*shape, ACT_DIM)).astype(np.float32)


def _transition_batch(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    gamma = float(resolve_algo(case.algo).Params(**case.params).gamma)
    k = rng.integers(1, case.n_step + 1, BATCH)
    discount = (gamma**k).astype(np.float32)
    discount[rng.random(BATCH) < 0.25] = 0.0  # terminal within the window: no bootstrap
    return dict(
        obs=(rng.standard_normal((BATCH, OBS_DIM)) * 2.0 + 1.0).astype(np.float32),
        action=_actions(case, rng, BATCH),
        reward=rng.standard_normal((BATCH, len(case.heads))).astype(np.float32),
        next_obs=(rng.standard_normal((BATCH, OBS_DIM)) * 2.0 + 1.0).astype(np.float32),
        discount=discount,
        weight=rng.uniform(0.3, 1.0, BATCH).astype(np.float32),
        index=np.arange(BATCH, dtype=np.int64),
    )


def _sequence_batch(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One sample of the sequence replay, filled by a twin of the agent acting (so the stored
    states are states its cores reach) on random observations with random episode ends."""
    from wheeler2.buffer import Layout, Replay, ReplayConfig

    twin = build(case)
    p = twin.params
    cfg = ReplayConfig(
        capacity=1024,
        batch_size=SEQ_BATCH,
        min_size=0,
        n_step=case.n_step,
        prioritized=True,
        updates_per_insert=0,
        sequence=p.replay_sequence,
    )
    layout = Layout(
        obs_dim=OBS_DIM,
        act_dim=case.space.act_dim,
        discrete=case.discrete,
        num_heads=len(case.heads),
        state_dim=twin.state_dim,
    )
    n = 2
    with Replay.create(layout, cfg, gamma=p.gamma, seed=SEED) as replay:
        w = replay.writer(num_envs=n)
        obs = rng.standard_normal((n, OBS_DIM)).astype(np.float32)
        state = twin.initial_state(n)
        for _ in range(150):
            out = twin.act(obs, explore=True, state=state)
            nxt = rng.standard_normal((n, OBS_DIM)).astype(np.float32)
            ends = rng.random(n)
            term, trunc = ends < 0.04, (ends >= 0.04) & (ends < 0.07)
            reward = rng.standard_normal((n, len(case.heads))).astype(np.float32)
            w.add(obs, out.action, reward, nxt, term, trunc, state=state)
            done = term | trunc
            state = out.state.copy()
            state[done] = twin.initial_state(int(done.sum()))
            obs = nxt.copy()
            obs[done] = rng.standard_normal((int(done.sum()), OBS_DIM)).astype(np.float32)
        w.flush()
        first = replay.sample()
        # Uneven priorities, so the batch used has uneven importance weights.
        replay.update_priorities(first["index"], rng.uniform(0.1, 2.0, len(first["index"])))
        sample = replay.sample()
    arrays = {k: np.array(v) for k, v in sample.items()}
    assert arrays["mask"].any() and not arrays["mask"].all(), "want padding or burn-in rows"
    assert (arrays["burn"] > 0).any(), "want rows with a burn-in"
    return arrays


def _rollout(case: Case, rng: np.random.Generator) -> list[dict[str, Any]]:
    """``n_steps`` vector steps of ``NUM_ENVS`` copies, acted by a twin of the agent (same seed,
    so the behaviour log-probs are the agent's own at the start), as stored steps."""
    twin = build(case)
    n = NUM_ENVS
    recurrent = twin.state_dim > 0
    obs = rng.standard_normal((n, OBS_DIM)).astype(np.float32)
    state = twin.initial_state(n) if recurrent else None
    steps = []
    for t in range(case.n_steps):
        out = twin.act(obs, True, state) if recurrent else twin.act(obs, True)
        nxt = rng.standard_normal((n, OBS_DIM)).astype(np.float32)
        # Fixed episode ends: copy 0 terminates at step 2, copy 1 is truncated at step 3.
        term = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        if t == 2:
            term[0] = True
        if t == 3:
            trunc[1] = True
        done = term | trunc
        reset = nxt.copy()
        reset[done] = rng.standard_normal((int(done.sum()), OBS_DIM)).astype(np.float32)
        reward = rng.standard_normal((n, len(case.heads))).astype(np.float32)
        step: dict[str, Any] = dict(
            obs=obs,
            action=out.action,
            reward=reward,
            next_obs=nxt,
            terminated=term,
            truncated=trunc,
            reset_obs=reset,
        )
        if case.active:
            step["active"] = np.array([True, True, t % 3 != 1, True])
        if recurrent:
            step["state"] = state
        stored = _to_tensors(step)
        act = dict(action=out.action, logp=out.logp)
        if out.state is not None:
            act["state"] = out.state
        stored["act_out"] = _to_tensors({k: v for k, v in act.items() if v is not None})
        stored["act_out"]["extras"] = _to_tensors(out.extras)
        steps.append(stored)
        if recurrent:
            state = out.state.copy()
            state[done] = twin.initial_state(int(done.sum()))
        obs = reset
    return steps


def record_case(case: Case) -> dict[str, Any]:
    rng = np.random.default_rng(_case_seed(case))
    torch.manual_seed(SEED)
    agent = build(case)
    inputs: dict[str, Any] = {}
    if case.kind == "replay":
        _warm_up(agent, case, rng)
        batch = _sequence_batch(case, rng) if case.recurrent else _transition_batch(case, rng)
        inputs["batch"] = _to_tensors(batch)
    else:
        inputs["steps"] = _rollout(case, rng)
    initial = agent.state_dict()
    # The recording starts from the loaded state, exactly as the test does.
    torch.manual_seed(SEED)
    agent = build(case)
    agent.load_state_dict(initial)
    out = run(agent, case, inputs)
    data = dict(
        initial=initial,
        inputs=inputs,
        final=final_values(agent),
        td_error=None if out.td_error is None else torch.from_numpy(np.array(out.td_error)),
        trace=pack_trace(out.trace),
    )
    return dict(
        algo=case.algo,
        params=dict(case.params),
        space=dict(
            obs_dim=case.space.obs_dim,
            act_dim=case.space.act_dim,
            discrete=case.discrete,
            heads=list(case.heads),
            head_weights=list(case.head_weights),
        ),
        metrics={k: float(v) for k, v in out.metrics.items()},
        **pack(data),
    )


# -- the recording's format -------------------------------------------------------------------
# torch.save writes each tensor as a record of its own (about 140 bytes of overhead each, and
# these nets have hundreds of small tensors), so a case's tensors are stored packed: one flat
# tensor per dtype ("blobs"), identical tensors once (the targets start as copies of the nets),
# and a "tree" of plain dicts, lists and values in which a tuple is a marker: ("t", dtype, at,
# shape) a tensor, ("u", [items]) a tuple. All of it loads with torch.load(weights_only=True).


def pack(obj: Any) -> dict[str, Any]:
    """``{"tree": ..., "blobs": {dtype: flat tensor}}`` of a nest of dicts, lists, tuples,
    tensors and plain values."""
    parts: dict[str, list[torch.Tensor]] = {}
    sizes: dict[str, int] = {}
    seen: dict[tuple[str, tuple[int, ...], bytes], int] = {}

    def enc(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            name = str(t.dtype).removeprefix("torch.")
            key = (name, tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes())
            if key not in seen:
                seen[key] = sizes.get(name, 0)
                parts.setdefault(name, []).append(t.reshape(-1).clone())
                sizes[name] = seen[key] + t.numel()
            return ("t", name, seen[key], tuple(t.shape))
        if isinstance(x, np.ndarray):
            raise TypeError("convert numpy arrays to tensors before packing")
        if isinstance(x, dict):
            return {k: enc(v) for k, v in x.items()}
        if isinstance(x, tuple):
            return ("u", [enc(v) for v in x])
        if isinstance(x, list):
            return [enc(v) for v in x]
        return x

    tree = enc(obj)
    return {"tree": tree, "blobs": {k: torch.cat(v) for k, v in parts.items()}}


def unpack(packed: dict[str, Any]) -> Any:
    """The nest :func:`pack` stored, with fresh tensors."""
    blobs = packed["blobs"]

    def dec(x: Any) -> Any:
        if isinstance(x, tuple):
            if x[0] == "u":
                return tuple(dec(v) for v in x[1])
            _, name, at, shape = x
            n = int(np.prod(shape)) if shape else 1
            return blobs[name][at : at + n].reshape(shape).clone()
        if isinstance(x, dict):
            return {k: dec(v) for k, v in x.items()}
        if isinstance(x, list):
            return [dec(v) for v in x]
        return x

    return dec(packed["tree"])


def _case_seed(case: Case) -> int:
    """A fixed seed per case id (not Python's salted ``hash``)."""
    return zlib.crc32(case.id.encode())


def record(path: str, ids: list[str] | None = None, source: str = "") -> dict[str, Any]:
    import wheeler2.agents as agents

    import wheeler2

    print(f"agents: {agents.__file__}\nwheeler2: {wheeler2.__file__}")
    out: dict[str, Any] = {
        "updates": UPDATES,
        "source": source,  # the code it was recorded from, e.g. "git 143cab2"
        "torch": str(torch.__version__),
        "cases": {},
    }
    with one_thread():
        for case in CASES:
            if ids and case.id not in ids:
                continue
            out["cases"][case.id] = record_case(case)
            print(f"recorded {case.id}: {out['cases'][case.id]['metrics']}")
    torch.save(out, path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", metavar="OUT", required=True, help="where to write the .pt")
    parser.add_argument("--only", nargs="*", help="case ids (default: all)")
    parser.add_argument("--source", default="", help="what code this is, e.g. 'git 143cab2'")
    parser.add_argument(
        "--expect-root",
        help="refuse unless agents/ and wheeler2/ are imported from under this folder",
    )
    args = parser.parse_args()
    if args.expect_root:
        import os

        import wheeler2.agents as agents

        import wheeler2

        root = os.path.realpath(args.expect_root) + os.sep
        for mod in (agents, wheeler2):
            where = os.path.realpath(mod.__file__)
            assert where.startswith(root), (
                f"{mod.__name__} imported from {where}, not {root}: link the copy's agents/, "
                "envs/ and tasks/ under its wheeler2/ (the module docstring says how)"
            )
    record(args.record, args.only, args.source)


if __name__ == "__main__":
    main()
