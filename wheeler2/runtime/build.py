"""Builds the pieces of a run from a validated config: envs, heads, agents, the central replay.

Every backend calls these, in the main process or inside a member's process, so a member is
made the same way wherever it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wheeler2 import registry
from wheeler2.agent import Agent, SpaceInfo
from wheeler2.config import Config, ConfigError, HeadConfig
from wheeler2.config.model import params_of
from wheeler2.env import EnvInfo, FrameStackError, VecEnv
from wheeler2.needs import AgentNeeds
from wheeler2.task import Head, RewardHeads, Task, validate_heads


@dataclass(frozen=True)
class MemberPlan:
    """One concrete member: a ``[[team]]`` table with ``count = 3`` gives three plans."""

    name: str  # unique: the team name, suffixed with the index when count > 1
    team: str
    index: int  # position in the whole team, used for seeds
    role: str
    algo: str
    spec: Any  # the config's member spec
    copy: int = 0  # which copy of its [[team]] entry (per_copy values differ by it)


def plan_team(config: Config) -> list[MemberPlan]:
    plans: list[MemberPlan] = []
    for spec in config.team:
        for k in range(spec.count):
            name = spec.name if spec.count == 1 else f"{spec.name}-{k}"
            plans.append(MemberPlan(name, spec.name, len(plans), spec.role, spec.algo, spec, k))
    return plans


def learner_plan(plans: list[MemberPlan]) -> MemberPlan:
    return next(p for p in plans if p.role == "learner")


# Every seed of a run derives from experiment.seed through these, so the offsets live here once.
MEMBER_SEED_STRIDE = 10_007  # runs with consecutive seeds give members disjoint seed ranges
MEMBER_SEED_SPACING = 1_000  # a member's env copies take seed + 0 .. seed + num_envs - 1
EVAL_ENV_SEED_OFFSET = 99_991  # the eval env copies: a prime far from every member's range
EVAL_RESET_SEED_OFFSET = 7  # the reset seed of every eval: each eval sees the same episodes
SHARD_SEED_STRIDE = 1_000  # replay shard i samples with seed * stride + i
TABLE_SEED_STRIDE = 1_000_003  # table k's replay samples apart from table 0's
OWN_SEED_OFFSET = 500_009  # a learner's own table (own_share) samples apart from the shared one


def member_seed(config: Config, plan: MemberPlan) -> int:
    # Spread members far apart so their env copies (seed + i) never share a seed.
    return int(config.experiment.seed) * MEMBER_SEED_STRIDE + plan.index * MEMBER_SEED_SPACING


def eval_env_seed(config: Config) -> int:
    return int(config.experiment.seed) + EVAL_ENV_SEED_OFFSET


def eval_reset_seed(config: Config) -> int:
    return int(config.experiment.seed) + EVAL_RESET_SEED_OFFSET


def replay_seed(config: Config, shard: int = 0, shards: int = 1) -> int:
    seed = int(config.experiment.seed)
    return seed if shards == 1 else seed * SHARD_SEED_STRIDE + shard


def make_env(config: Config, num_envs: int, seed: int, plan: MemberPlan | None = None) -> VecEnv:
    """``plan``'s own agents of a multi-agent env (its ``agents`` globs); without a plan, or
    when the member names none, the agents ``[env] kwargs`` select (default: all)."""
    agents = None if plan is None else plan.spec.agents
    return registry.make_env(config.env, num_envs, seed, agents=agents)


def make_task(config: Config) -> Task | None:
    if not config.task.spec:
        return None
    cls = registry.resolve_object(config.task.spec)
    return cls()


def make_heads(config: Config, env: VecEnv, task: Task | None) -> RewardHeads:
    """The run's reward heads: the ``[[task.heads]]`` the file wrote, else those the task class
    declares (:func:`wheeler2.task.reward_head`), else those the env adapter declares
    (``reward_heads``), else the env reward alone."""
    head_specs = list(config.task.heads)
    goal_reward = getattr(env, "compute_reward", None) if env.info.goal_dim else None
    if task is not None and not _heads_written(config) and task.declared_heads():
        head_specs = [HeadConfig(n, m, w) for n, m, w in task.declared_heads()]
    elif not _heads_written(config) and getattr(env, "reward_heads", None):
        # An adapter with a vector reward (envs/mo.py) names its heads as "module:attr" specs.
        head_specs = [HeadConfig(h.name, head_reward_spec(h), h.weight) for h in env.reward_heads]
    if not head_specs:
        return RewardHeads([Head("env", 1.0, None)], goal_reward)
    heads = []
    for h in head_specs:
        if h.reward == "env":
            fn = None
        elif task is not None and ":" not in h.reward and hasattr(task, h.reward):
            fn = getattr(task, h.reward)
        else:
            fn = _task_method(task, h.reward) or registry.resolve_object(h.reward)
        heads.append(Head(h.name, float(h.weight), fn))
    reached = task.success if task is not None and task.defines_success() else None
    out = RewardHeads(heads, goal_reward, reached)
    if any(h.fn is not None for h in heads):
        validate_heads(out, env)  # a wrong shape fails here, before training, naming the head
    return out


def _heads_written(config: Config) -> bool:
    """Did the experiment file (or a --set override) write ``[[task.heads]]``?

    The validated config fills in one "env" head when the file has none, so only the parsed
    TOML (``config.raw``) tells a written ``name = "env"`` head, which must win over the task
    class's heads, from that default.
    """
    task = config.raw.get("task")
    return isinstance(task, dict) and "heads" in task


def head_reward_spec(head: Head) -> str:
    """The ``reward`` a ``[[task.heads]]`` table needs to make ``head`` again: ``"env"``, a
    task method as ``"module:Class.method"`` (see :func:`_task_method`) or ``"module:function"``.
    """
    fn = head.fn
    if fn is None:
        return "env"
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        cls = type(owner)
        return f"{cls.__module__}:{cls.__qualname__}.{fn.__name__}"
    return f"{fn.__module__}:{fn.__qualname__}"


def resolved_heads_config(config: Config, heads: RewardHeads) -> Any:
    """``config`` with ``task.heads`` set to the heads the run actually uses.

    Write this one (``.to_toml()``) as the run directory's ``config.toml``: a run whose heads
    came from its task class then records them, and ``resume`` / ``eval``, which read that
    file, build the same heads (and critics) instead of the one-"env"-head default.
    """
    written = tuple(HeadConfig(h.name, head_reward_spec(h), float(h.weight)) for h in heads.heads)
    task = dataclasses.replace(config.task, heads=written)
    raw = dict(config.raw)
    # The heads now count as written (see _heads_written), as they will once read back.
    raw["task"] = {
        **(raw.get("task") or {}),
        "heads": [dataclasses.asdict(h) for h in written],
    }
    return dataclasses.replace(config, task=task, raw=raw)


def _task_method(task: Task | None, spec: str) -> Any:
    """``"module:Class.method"`` naming the run's own task class -> that task's bound method
    (resolved as a plain attribute it would be an unbound function, missing ``self``)."""
    module, _, attr = spec.partition(":")
    owner, _, method = attr.rpartition(".")
    cls = type(task)
    module = registry.module_name(module)
    if task is not None and owner and (cls.__module__, cls.__qualname__) == (module, owner):
        return getattr(task, method)
    return None


def space_info(info: EnvInfo, heads: RewardHeads) -> SpaceInfo:
    return SpaceInfo(
        obs_dim=info.obs_dim + info.goal_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        heads=heads.names,
        head_weights=heads.weights,
    )


def make_agent(config: Config, plan: MemberPlan, space: SpaceInfo, seed: int) -> Agent:
    cls = registry.resolve_algo(plan.algo)
    params = params_of(plan.spec, plan.copy)
    # Schedules (linear lr / clip annealing) need the run's length; fill it where left at 0.
    if dataclasses.is_dataclass(params) and "total_steps" in {
        f.name for f in dataclasses.fields(params)
    }:
        if not params.total_steps:
            params = dataclasses.replace(params, total_steps=int(config.experiment.total_steps))
    device = cls.needs(params).device
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    return cls(space, params, device=device, seed=seed)


def replay_layout(info: EnvInfo, heads: RewardHeads, logp: bool, state_dim: int = 0) -> Any:
    """``state_dim``: the learner's policy-state width, the buffer's state column (0: none)."""
    from wheeler2.buffer import Layout

    return Layout(
        obs_dim=info.obs_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        num_heads=len(heads),
        goal_dim=info.goal_dim,
        logp=logp,
        state_dim=state_dim,
    )


def own_batch(config: Config) -> int:
    """Rows of each learner batch drawn from its own table (``[buffer] own_share``)."""
    b = config.buffer
    return 0 if b.own_share <= 0 else max(1, round(b.own_share * b.batch_size))


def needs_of(plan: MemberPlan) -> AgentNeeds:
    """What ``plan``'s algorithm declares the engine must know of it (its params read there)."""
    return registry.resolve_algo(plan.algo).needs(params_of(plan.spec, plan.copy))


def replay_config(config: Config, needs: AgentNeeds, chunk: int | None = None) -> Any:
    """The replay settings of a table whose learner declared ``needs``."""
    from wheeler2.buffer import ReplayConfig

    b = config.buffer
    min_size = max(int(needs.replay_min_size), int(b.batch_size))
    updates = max(1, int((config.experiment.total_steps - min_size) * b.updates_per_insert))
    her = None if b.her is None else dataclasses.replace(b.her)
    return ReplayConfig(
        capacity=int(b.capacity),
        # With own_share, the shared table gives the rest of the batch, the own table its share.
        batch_size=int(b.batch_size) - own_batch(config),
        prioritized=bool(b.prioritized),
        alpha=float(b.alpha),
        beta=float(b.beta),
        beta_steps=updates,
        n_step=int(b.n_step),
        updates_per_insert=float(b.updates_per_insert),
        min_size=min_size,
        her=her,
        chunk=int(chunk if chunk is not None else b.chunk),
        # How far producers may run ahead of the learner: enough to absorb a slow update or an
        # eval, small against the run so the measured ratio tracks the target throughout.
        gate_tolerance=max(int(b.batch_size), min(2048, int(config.experiment.total_steps) // 50)),
        # A recurrent learner declares its replayed sequences (batch_size counts them).
        sequence=needs.sequence,
    )


def set_niceness(plan: MemberPlan) -> None:
    """Raise this member process's niceness to its ``nice`` (a process of its own only)."""
    import os

    want, now = plan.spec.nice, os.nice(0)
    if want > now:
        os.nice(want - now)


def set_compute_threads() -> int:
    """One intra-op thread per process, for torch and numpy's BLAS, unless
    ``WHEELER2_TORCH_THREADS`` says otherwise.

    The networks here are small (a 256 x 400 matmul): a second thread gains little and, when the
    other core is busy with an env or another member, each op waits for it. Measured here on a
    loaded 2-core machine: a DDPG update took 15-23 ms with 2 torch threads against ~1 ms with 1,
    and acting through numpy (agents.nets.NumpyForward) ~430 µs with OpenBLAS's default threads
    against ~120 µs with 1.
    """
    import os

    from threadpoolctl import threadpool_limits

    n = max(1, int(os.environ.get("WHEELER2_TORCH_THREADS", "1")))
    torch.set_num_threads(n)
    threadpool_limits(n, user_api="blas")
    return n


@dataclass
class TableSetup:
    """One replay table: its learner and the members that write into it and sync from it.

    Members of one table share its observation and action sizes (they write the same rows);
    members that see other spaces (predators and prey) form tables of their own.
    """

    name: str
    index: int  # position among the run's tables; table 0 is the lead's
    plans: list[MemberPlan]
    lead: MemberPlan
    heads: RewardHeads
    info: EnvInfo
    learner: Agent  # the driver's copy: sync checks, the replay's gamma, the publish layout
    uses_logp: bool  # some explorer stores a behaviour log-prob
    # Modules besides the actor that its explorers pull by name (detached explorers: "critic").
    pulls: tuple[str, ...] = ()

    @property
    def uses_replay(self) -> bool:
        """An on-policy learner learns from its own rollouts: no replay to fill."""
        return self.learner.uses_replay

    @property
    def syncs(self) -> bool:
        return any(p.spec.sync is not None for p in self.plans)

    def layout(self) -> Any:
        state_dim = int(getattr(self.learner, "state_dim", 0))
        return replay_layout(self.info, self.heads, logp=self.uses_logp, state_dim=state_dim)

    @property
    def published(self) -> Any:
        """What the learner publishes: its actor, plus the modules its explorers pull."""
        from wheeler2.sync import publish_view

        return publish_view(self.learner, self.pulls)


@dataclass
class TeamSetup:
    """What every backend settles in the driver before any member starts."""

    plans: list[MemberPlan]
    tables: list[TableSetup]  # tables[0] holds the lead learner, whose evals are the run's

    @property
    def lead(self) -> MemberPlan:
        return self.tables[0].lead

    @property
    def heads(self) -> RewardHeads:
        return self.tables[0].heads

    def table_of(self, plan: MemberPlan) -> TableSetup:
        return next(t for t in self.tables if t.name == plan.spec.table)


def prepare_team(config: Config, payload: dict[str, Any]) -> TeamSetup:
    """Probe the env, build each table's learner (resumed from ``payload``) and one agent per
    explorer, and check spaces and weight sync, so a bad team fails here, before a process or
    actor exists. Every failure is a ConfigError naming the member and key (``check`` and
    ``run`` both end with one line and exit 2)."""
    plans = plan_team(config)
    tables = []
    for index, name in enumerate(config.tables):
        members = [p for p in plans if p.spec.table == name]
        tables.append(_prepare_table(config, name, index, members, payload))
    return TeamSetup(plans, tables)


def _prepare_table(
    config: Config, name: str, index: int, plans: list[MemberPlan], payload: dict[str, Any]
) -> TableSetup:
    from wheeler2.sync import SyncError, check_pulls

    lead = learner_plan(plans)
    info, heads = _probe(config, lead, with_heads=True)
    space = space_info(info, heads)
    for p in plans:
        _check_member(config, p, heads.names)
    learner = _agent(config, lead, space, member_seed(config, lead))
    # A checkpoint written before the learner's first report has no state for it: start fresh.
    state = (payload.get("members") or {}).get(lead.name) if payload else None
    if state is not None:
        learner.load_state_dict(state)
    uses_logp = False
    pulls: list[str] = []
    checked: set[str] = set()
    for p in plans:
        if p.role == "learner" or p.team in checked:
            continue
        checked.add(p.team)
        if p.spec.agents != lead.spec.agents:  # other agents may see other spaces
            _check_same_space(config, p, _probe(config, p)[0], lead, info, name)
        explorer = _agent(config, p, space, 0)
        uses_logp = uses_logp or not explorer.uses_replay
        if p.spec.sync is not None:
            try:
                pulled = check_pulls(learner, explorer, list(p.spec.sync.keep), p.team)
            except SyncError as exc:  # its text names the member already: said once here
                text = str(exc).removeprefix(f"[[team]] {p.team}: ")
                raise _error(config, p, "sync", text) from None
            if pulled and config.experiment.backend == "ray":
                raise _error(
                    config,
                    p,
                    "sync",
                    f"it pulls the learner's {', '.join(pulled)} (not only its actor), which the "
                    f'ray backend does not publish yet: use backend = "local" or "serial"',
                )
            pulls += [m for m in pulled if m not in pulls]
    return TableSetup(name, index, plans, lead, heads, info, learner, uses_logp, tuple(pulls))


def _error(config: Config, plan: MemberPlan, key: str, message: str) -> ConfigError:
    return ConfigError(str(config.path), f"[[team]] {plan.team}", key, message)


def _check_member(config: Config, plan: MemberPlan, heads: tuple[str, ...]) -> None:
    """An algorithm's own rule on a member's params, role and the run's heads (its optional
    ``check_member``), raised as a ConfigError naming the member and the key."""
    check = getattr(registry.resolve_algo(plan.algo), "check_member", None)
    if check is None:
        return
    params = params_of(plan.spec, plan.copy)
    problem = check(params, role=plan.role, heads=tuple(heads), syncs=plan.spec.sync is not None)
    if problem is not None:
        key, message = problem
        raise _error(config, plan, key, message)


def _probe(
    config: Config, plan: MemberPlan, with_heads: bool = False
) -> tuple[EnvInfo, RewardHeads | None]:
    """One env copy as ``plan`` sees it: its static facts and, for a table's lead, the reward
    heads run once on a probe batch (a head that raises or has the wrong shape fails here)."""
    file = str(config.path)
    try:
        env = make_env(config, 1, 0, plan)
    except FrameStackError as exc:  # [env] stack on an env it cannot stack
        raise ConfigError(file, "[env]", "stack", str(exc)) from None
    except ConfigError as exc:  # an adapter's own key (envs/mo.py): the file is known here
        raise ConfigError(file, exc.table, exc.key, exc.message) from None
    except Exception as exc:  # noqa: BLE001 - any failure to build is the env's to report
        msg = f"cannot build it: {type(exc).__name__}: {exc}"
        raise ConfigError(file, "[env]", "id", msg) from None
    try:
        heads = None
        if with_heads:
            try:
                heads = make_heads(config, env, make_task(config))
            except ValueError as exc:  # validate_heads: names the head and what is wrong
                raise ConfigError(file, "[task]", "heads", str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - a user's head function raised
                raise ConfigError(
                    file,
                    "[task]",
                    "heads",
                    f"a reward head raised on a probe batch of {config.env.id}: "
                    f"{type(exc).__name__}: {exc}",
                ) from None
        return env.info, heads
    finally:
        env.close()


def _agent(config: Config, plan: MemberPlan, space: SpaceInfo, seed: int) -> Agent:
    try:
        return make_agent(config, plan, space, seed)
    except (ValueError, TypeError) as exc:
        kind = "discrete" if space.discrete else "continuous"
        raise _error(
            config,
            plan,
            "algo",
            f"{plan.algo!r} cannot be built for this env (obs {space.obs_dim}, {kind} actions "
            f"{space.act_dim}): {exc}",
        ) from None


def _describe_space(info: EnvInfo) -> str:
    kind = "discrete" if info.discrete else "continuous"
    goal = f", goal {info.goal_dim}" if info.goal_dim else ""
    return f"obs {info.obs_dim}{goal}, {kind} actions {info.act_dim}"


def _check_same_space(
    config: Config,
    plan: MemberPlan,
    info: EnvInfo,
    lead: MemberPlan,
    lead_info: EnvInfo,
    table: str,
) -> None:
    """Members of one table write the same rows: their spaces must be the learner's."""
    fields = ("obs_dim", "act_dim", "discrete", "goal_dim")
    if all(getattr(info, f) == getattr(lead_info, f) for f in fields):
        return
    raise _error(
        config,
        plan,
        "table",
        f"its agents ({_describe_space(info)}) do not fit table {table!r}, whose learner "
        f"{lead.team!r} stores {_describe_space(lead_info)}: give it a table of its own "
        f'(table = "{plan.team}") with its own learner',
    )


@dataclass(frozen=True)
class ReplaySpec:
    """Everything :meth:`Replay.create` takes, settled in the driver; picklable, so a Ray
    shard actor creates its part of the buffer from the very same spec."""

    layout: Any
    cfg: Any
    gamma: float
    relabel: Any
    seed: int
    reached: Any = None

    def create(self) -> Any:
        from wheeler2.buffer import Replay

        return Replay.create(
            self.layout, self.cfg, self.gamma, self.relabel, self.seed, reached=self.reached
        )


def replay_spec(
    config: Config,
    table: TableSetup,
    chunk: int | None = None,
    shard: int = 0,
    shards: int = 1,
) -> ReplaySpec:
    """A table's replay (or one shard of it): the one place its settings are made, whatever
    the backend."""
    needs = needs_of(table.lead)
    cfg = replay_config(config, needs, chunk=chunk)
    if shards > 1:
        cfg = shard_config(cfg, shards)
    her = config.buffer.her
    return ReplaySpec(
        layout=table.layout(),
        cfg=cfg,
        # A learner without a discount never bootstraps: its replay's discount column is unread.
        gamma=1.0 if needs.gamma is None else float(needs.gamma),
        relabel=table.heads.relabel if her is not None else None,
        seed=replay_seed(config, shard, shards) + TABLE_SEED_STRIDE * table.index,
        reached=table.heads.reached if her is not None and her.terminate_on_goal else None,
    )


def own_replay_spec(
    config: Config, table: TableSetup, chunk: int | None = None
) -> ReplaySpec | None:
    """The private table of a learner with ``[buffer] own_share``: only its own transitions,
    made in its process. The shared table's gate paces the learner, so this one has none.
    Until it holds a share's rows, the learner's batches are the shared part alone."""
    rows = own_batch(config)
    if not rows or not table.uses_replay:
        return None
    spec = replay_spec(config, table, chunk=chunk)
    cfg = dataclasses.replace(
        spec.cfg, batch_size=rows, min_size=rows, updates_per_insert=0.0, gate_tolerance=0
    )
    return dataclasses.replace(spec, cfg=cfg, seed=spec.seed + OWN_SEED_OFFSET)


def make_replay(config: Config, table: TableSetup, chunk: int | None = None) -> Any:
    """A table's replay, owned (and unlinked at close) by the calling process."""
    return replay_spec(config, table, chunk=chunk).create()


def saved_replay(payload: dict[str, Any], table: TableSetup) -> dict[str, Any] | None:
    """A table's replay contents in a checkpoint (``buffer.checkpoint = true``): the lead
    table's under ``replay``, as before tables existed, the others' under ``table_replays``."""
    if not payload:
        return None
    if table.index == 0:
        return payload.get("replay")
    return (payload.get("table_replays") or {}).get(table.name)


def shard_config(replay_cfg: Any, shards: int) -> Any:
    """One shard's share of the buffer: capacity, warm-up and gate slack split N ways, so that N
    shards together behave like the one buffer of the local backend."""
    return dataclasses.replace(
        replay_cfg,
        capacity=max(1, replay_cfg.capacity // shards),
        min_size=max(replay_cfg.batch_size, -(-replay_cfg.min_size // shards)),
        gate_tolerance=max(replay_cfg.batch_size, replay_cfg.gate_tolerance // shards),
        beta_steps=None
        if replay_cfg.beta_steps is None
        else max(1, replay_cfg.beta_steps // shards),
    )


def member_payload(payload: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, int]:
    """A member's resumed agent state (None: start fresh) and env steps."""
    if not payload:
        return None, 0
    state = (payload.get("members") or {}).get(name)
    steps = int((payload.get("member_steps") or {}).get(name, 0))
    return state, steps
