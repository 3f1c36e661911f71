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


def needs_of(plan: MemberPlan) -> AgentNeeds:
    """What ``plan``'s algorithm declares the engine must know of it (its params read there)."""
    return registry.resolve_algo(plan.algo).needs(params_of(plan.spec, plan.copy))
