"""The team as concrete members: one :class:`MemberPlan` per copy of each ``[[team]]`` table,
and what each member's algorithm declares the engine must know of it (:func:`needs_of`)."""

from __future__ import annotations

from dataclasses import dataclass

from wheeler2 import registry
from wheeler2.config import Config, ConfigError, MemberConfig
from wheeler2.config.model import params_of
from wheeler2.needs import AgentNeeds


@dataclass(frozen=True)
class MemberPlan:
    """One concrete member: a ``[[team]]`` table with ``count = 3`` gives three plans."""

    name: str  # unique: the team name, suffixed with the index when count > 1
    team: str
    index: int  # position in the whole team, used for seeds
    role: str
    algo: str
    spec: MemberConfig  # the member's [[team]] table
    copy: int = 0  # which copy of its [[team]] entry (per_copy values differ by it)


def plan_team(config: Config) -> list[MemberPlan]:
    plans: list[MemberPlan] = []
    made: dict[str, str] = {}  # member name -> the [[team]] entry that made it
    for spec in config.team:
        for k in range(spec.count):
            name = spec.name if spec.count == 1 else f"{spec.name}-{k}"
            if name in made:
                # The reader sees distinct [[team]] names ("explorer" with count = 2 beside
                # "explorer-1"); the coordinator keys members by name and would wait forever
                # for a Finished the other member of that name already sent.
                raise ConfigError(
                    str(config.path),
                    f"[[team]] {spec.name}",
                    "name",
                    f"its member {name!r} has the name of a member of [[team]] {made[name]} "
                    f"(copies of a count > 1 entry are named <name>-<copy>); rename one",
                )
            made[name] = spec.name
            plans.append(MemberPlan(name, spec.name, len(plans), spec.role, spec.algo, spec, k))
    return plans


def learner_plan(plans: list[MemberPlan]) -> MemberPlan:
    return next(p for p in plans if p.role == "learner")


def table_learner(plans: list[MemberPlan], plan: MemberPlan) -> MemberPlan:
    """The learner of ``plan``'s table: the one whose replay ``plan`` writes into."""
    return learner_plan([p for p in plans if p.spec.table == plan.spec.table])


# The recurrent options that fix what each column of a policy state holds (agents/recurrent.py
# SequenceParams): the same algorithm with these equal keeps its cores' states in the same order.
_STATE_KEYS = ("core", "core_size", "trunk_reads")


def shares_policy_state(plan: MemberPlan, learner: MemberPlan) -> bool:
    """Whether ``plan``'s policy state means to ``learner`` what its own does: the same
    algorithm with the same recurrent core, so the learner's sequences may start from the
    state the member stored (R2D2's stored state). Any other member stores zeros in the state
    column, as one of another width does, and the learner's burn-in rebuilds the state."""
    if plan.name == learner.name:
        return True
    if registry.resolve_algo(plan.algo) is not registry.resolve_algo(learner.algo):
        return False
    mine, its = params_of(plan.spec, plan.copy), params_of(learner.spec, learner.copy)
    return all(getattr(mine, k, None) == getattr(its, k, None) for k in _STATE_KEYS)


def needs_of(plan: MemberPlan) -> AgentNeeds:
    """What ``plan``'s algorithm declares the engine must know of it (its params read there)."""
    return registry.resolve_algo(plan.algo).needs(params_of(plan.spec, plan.copy))
