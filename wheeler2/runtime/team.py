"""The team settled in the driver before any member starts: its replay tables (:class:`TableSetup`,
each with its learner, heads, spaces and what its explorers pull) and every check that needs the
env built once. ``check`` and every ``run`` build this first (:func:`prepare_team`), so a bad
team fails as one ConfigError naming the member and key, before a process or actor exists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from wheeler2 import registry
from wheeler2.agent import Agent, ParamError, SpaceInfo
from wheeler2.buffer import Layout
from wheeler2.config import Config, ConfigError
from wheeler2.config.model import params_of
from wheeler2.env import EnvInfo, FrameStackError, VecEnv
from wheeler2.runtime.curriculum import check_curriculum
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.meeting import check_meeting
from wheeler2.runtime.parts import make_agent, make_env, negamax_of, replay_layout, space_info
from wheeler2.runtime.plan import MemberPlan, learner_plan, plan_team
from wheeler2.runtime.resources import check_members
from wheeler2.runtime.seeds import member_seed
from wheeler2.shared import SharedBlock, shared_signature, shared_tensors
from wheeler2.sync import SyncError, check_pulls, publish_view
from wheeler2.task import RewardHeads


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
    # [[team]] names whose members share parameters with the learner (A3C, wheeler2/shared.py).
    sharing: tuple[str, ...] = ()

    def shares(self, plan: MemberPlan) -> bool:
        return plan.team in self.sharing

    @property
    def uses_replay(self) -> bool:
        """An on-policy learner learns from its own rollouts: no replay to fill."""
        return self.learner.uses_replay

    @property
    def syncs(self) -> bool:
        return any(p.spec.sync is not None for p in self.plans)

    def layout(self) -> Layout:
        """The rows its replay stores; the state column is its learner's policy state."""
        state_dim = int(getattr(self.learner, "state_dim", 0))
        return replay_layout(self.info, self.heads, logp=self.uses_logp, state_dim=state_dim)

    @property
    def published(self) -> nn.Module:
        """What the learner publishes: its actor, plus the modules its explorers pull."""
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

    def shared_blocks(self) -> dict[str, SharedBlock]:
        """One block per table whose members share parameters, holding its learner's (resumed)
        values; the caller owns and closes them."""
        blocks: dict[str, SharedBlock] = {}
        try:
            for table in self.tables:
                tensors = shared_tensors(table.learner) if table.sharing else None
                if tensors is not None:
                    blocks[table.name] = SharedBlock.create(tensors)
        except BaseException:
            for block in blocks.values():
                block.close()
            raise
        return blocks


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
    check_meeting(config, tables)
    check_curriculum(config, tables[0].lead)
    return TeamSetup(plans, tables)


def _prepare_table(
    config: Config, name: str, index: int, plans: list[MemberPlan], payload: dict[str, Any]
) -> TableSetup:
    lead = learner_plan(plans)
    info, heads = _probe_lead(config, lead)
    space = space_info(info, heads, negamax_of(config))
    for p in plans:
        _check_member(config, p, heads.names)
    # Devices and network sizes, before the first network is built.
    check_members(config, plans, space)
    learner = _agent(config, lead, space, member_seed(config, lead))
    # A checkpoint written before the learner's first report has no state for it: start fresh.
    state = (payload.get("members") or {}).get(lead.name) if payload else None
    if state is not None:
        learner.load_state_dict(state)
    uses_logp = False
    pulls: list[str] = []
    shared = shared_tensors(learner)
    sharing = [] if shared is None else [lead.team]
    checked: set[str] = set()
    for p in plans:
        if p.role == "learner" or p.team in checked:
            continue
        checked.add(p.team)
        if p.spec.agents != lead.spec.agents:  # other agents may see other spaces
            _check_same_space(config, p, _probe(config, p), lead, info, name)
        explorer = _agent(config, p, space, 0)
        uses_logp = uses_logp or not explorer.uses_replay
        if _shares(config, p, shared, explorer, lead, learner):
            sharing.append(p.team)
        if p.spec.sync is not None:
            try:
                pulled = check_pulls(learner, explorer, list(p.spec.sync.keep), p.team, lead.team)
            except SyncError as exc:  # its text names the member already: said once here
                text = str(exc).removeprefix(f"[[team]] {p.team}: ")
                raise _error(config, p, "sync", text) from None
            sync = p.spec.sync
            if pulled and (sync.alpha < 1 or sync.keep):
                # A module taken by name is the learner's, whole: a blend or a kept layer would
                # mix it with the member's own untrained copy (a critic read half from random
                # weights, an injected actor that is not the learner's).
                what = f"alpha = {sync.alpha:g}" if sync.alpha < 1 else f"keep = {sync.keep}"
                raise _error(
                    config,
                    p,
                    "sync",
                    f"it takes the learner's {', '.join(pulled)} whole, by name, and {what} "
                    f"would mix them with its own untrained copies: remove alpha and keep "
                    f"from its sync",
                )
            pulls += [m for m in pulled if m not in pulls]
    if shared is not None and config.experiment.backend == "ray":
        raise _error(
            config,
            lead,
            "algo",
            f"{lead.algo!r} shares one set of parameters between its members in this machine's "
            f'memory, and ray may place them on other nodes: use backend = "local" or "serial"',
        )
    return TableSetup(
        name, index, plans, lead, heads, info, learner, uses_logp, tuple(pulls), tuple(sharing)
    )


def _shares(
    config: Config,
    plan: MemberPlan,
    shared: dict[str, Any] | None,
    explorer: Agent,
    lead: MemberPlan,
    learner: Agent,
) -> bool:
    """Whether ``plan``'s members share the learner's parameters (both algorithms offer
    ``shared_tensors``); a ConfigError where only the explorer does or the two do not fit."""
    mine = shared_tensors(explorer)
    if mine is None:
        return False
    if shared is None:
        raise _error(
            config,
            plan,
            "algo",
            f"{plan.algo!r} shares its parameters with the table's learner, and the learner "
            f"({lead.team!r}, {lead.algo!r}) shares none: make the learner {plan.algo!r} too",
        )
    theirs = {k: tuple(v.shape) for k, v in shared.items()}
    if {k: tuple(v.shape) for k, v in mine.items()} != theirs:
        raise _error(
            config,
            plan,
            "params",
            f"its shared parameters differ in shape from those of the learner {lead.team!r}: "
            f"set the same network options (hidden, core, ...) in both members' [team.params]",
        )
    mine_sig, theirs_sig = shared_signature(explorer), shared_signature(learner)
    if mine_sig.get("networks") != theirs_sig.get("networks"):
        # Same shapes, other functions (an activation, a core): one theta would serve both.
        raise _error(
            config,
            plan,
            "params",
            f"its networks differ from those of the learner {lead.team!r} (layers or "
            f"activations), so the parameters they share would mean different functions: set "
            f"the same network options (activation, core, ...) in both members' [team.params]",
        )
    differ = [
        k
        for k in sorted(mine_sig.keys() | theirs_sig.keys())
        if k != "networks" and mine_sig.get(k) != theirs_sig.get(k)
    ]
    if differ:
        # One optimizer steps the one set all of them act from: settings of that step (or of
        # the return its critic learns) that differ per member would have no single meaning.
        pairs = ", ".join(
            f"{k} = {mine_sig.get(k)} here, {theirs_sig.get(k)} there" for k in differ
        )
        raise _error(
            config,
            plan,
            "params",
            f"its {', '.join(differ)} differ from the learner {lead.team!r}'s ({pairs}): "
            f"members that share one set of parameters share its optimizer and its critic's "
            f"return, so set the same values in both members' [team.params]",
        )
    if plan.spec.sync is not None:
        # Every update already lands on the one theta it acts from; a sync would overwrite
        # its copy mid-rollout with the learner's, which lags the others' updates.
        raise _error(
            config,
            plan,
            "sync",
            f"its members share the learner's parameters ({plan.algo!r}): every update goes "
            "to the one set they all act from, so there is nothing to sync: remove sync",
        )
    return True


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


def _probe(config: Config, plan: MemberPlan) -> EnvInfo:
    """The static facts of one env copy as ``plan`` sees it."""
    env = _probe_env(config, plan)
    try:
        return env.info
    finally:
        env.close()


def _probe_lead(config: Config, plan: MemberPlan) -> tuple[EnvInfo, RewardHeads]:
    """A table's lead: its env facts and the reward heads, run once on a probe batch (a head
    that raises or has the wrong shape fails here)."""
    file = str(config.path)
    env = _probe_env(config, plan)
    try:
        try:
            task = make_task(config)
        except Exception as exc:  # noqa: BLE001 - the user's task class raised when made
            name = str(config.task.spec).rpartition(":")[2]
            raise ConfigError(
                file, "[task]", "spec", f"{name}() raised: {_code_text(config, exc)}"
            ) from None
        try:
            heads = make_heads(config, env, task)
        except ValueError as exc:  # validate_heads: names the head and what is wrong
            raise ConfigError(file, "[task]", "heads", str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a user's head function raised
            raise ConfigError(
                file,
                "[task]",
                "heads",
                f"a reward head raised on a probe batch of {config.env.id}: "
                f"{_code_text(config, exc)}",
            ) from None
        return env.info, heads
    finally:
        env.close()


def _probe_env(config: Config, plan: MemberPlan) -> VecEnv:
    """One env copy as ``plan`` sees it; a failure to build it is a ConfigError."""
    file = str(config.path)
    try:
        return make_env(config, 1, 0, plan)
    except FrameStackError as exc:  # [env] stack on an env it cannot stack
        raise ConfigError(file, "[env]", "stack", str(exc)) from None
    except ConfigError as exc:  # an adapter's own key (envs/mo.py): the file is known here
        raise ConfigError(file, exc.table, exc.key, exc.message) from None
    except registry.CodeError as exc:  # "./myenv.py:MyEnv" that fails to import
        raise ConfigError(file, "[env]", "id", exc.text(config.path.parent)) from None
    except Exception as exc:  # noqa: BLE001 - any failure to build is the env's to report
        msg = f"cannot build it: {_code_text(config, exc)}"
        # The env refused a keyword it was given: the key to fix is kwargs, not the id.
        key = "kwargs" if config.env.kwargs and "keyword argument" in str(exc) else "id"
        raise ConfigError(file, "[env]", key, msg) from None


def _code_text(config: Config, exc: BaseException) -> str:
    """``exc`` as its type and text, then the line of the user's code that raised it where it
    came from their file: ``ValueError: size must be >= 1 (at ./myenv.py line 9)``."""
    if isinstance(exc, registry.CodeError):
        return exc.text(config.path.parent)
    found = registry.code_error(exc)
    if found.path is None or found.line is None:
        return found.reason
    where = registry.shown_path(found.path, config.path.parent)
    return f"{found.reason} (at {where} line {found.line})"


def _agent(config: Config, plan: MemberPlan, space: SpaceInfo, seed: int) -> Agent:
    try:
        return make_agent(config, plan, space, seed)
    except ParamError as exc:
        # The location names the key: its "key: " prefix (for one who builds the agent by hand)
        # would say it twice.
        text = str(exc).removeprefix(f"{exc.key}: ")
        raise _error(config, plan, f"params.{exc.key}", text) from None
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
