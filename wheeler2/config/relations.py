"""Relations between keys: values each within its field's bounds that are impossible (or do
nothing) together. A field's metadata checks one value; the rules here check two or more, each
naming every key it reads, and run at the end of ``validate`` on the typed :class:`Config`.

:data:`RULES` is the table: an ``error`` rule refuses the file (one ``ConfigError``); a
``warning`` rule says the run will not do what the file seems to ask (a warm-up longer than the
run) and lets it go, since shortened runs of a real config are legitimate smoke tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from wheeler2 import registry

from .errors import ConfigError
from .model import Config, MemberConfig

# (table, key, message) of one broken relation.
Found = tuple[str, str, str]


@dataclass(frozen=True)
class Rule:
    name: str
    keys: tuple[str, ...]  # every key the rule reads, "table.key"
    level: str  # "error" | "warning"
    find: Callable[[Config], Iterator[Found]]


def _agent_class(member: MemberConfig) -> Any:
    return registry.resolve_algo(member.algo)


def _learners(config: Config) -> Iterator[MemberConfig]:
    return (m for m in config.team if m.role == "learner")


def _uses_replay(config: Config) -> bool:
    return any(getattr(_agent_class(m), "uses_replay", True) for m in _learners(config))


def _member_label(member: MemberConfig) -> str:
    return f"[[team]] {member.name}"


def _stop_needs_threshold(config: Config) -> Iterator[Found]:
    exp = config.experiment
    if exp.stop_at_threshold and exp.eval_threshold is None:
        yield (
            "[experiment]",
            "stop_at_threshold",
            "stops the run at the first eval above [experiment] eval_threshold, which is not "
            "set: set eval_threshold or leave stop_at_threshold out",
        )


def _steps_cover_one_vector_step(config: Config) -> Iterator[Found]:
    total, copies = config.experiment.total_steps, config.env.num_envs
    if total < copies:
        yield (
            "[experiment]",
            "total_steps",
            f"{total} is less than one step of a member's [env] num_envs = {copies} copies, "
            f"which step together: no member would take a step; raise total_steps or lower "
            f"num_envs",
        )


def _batch_fits_the_replay(config: Config) -> Iterator[Found]:
    b = config.buffer
    if _uses_replay(config) and b.batch_size > b.capacity:
        yield (
            "[buffer]",
            "batch_size",
            f"{b.batch_size} rows per batch from a replay that holds [buffer] capacity = "
            f"{b.capacity}: lower batch_size or raise capacity",
        )


def _own_share_leaves_shared_rows(config: Config) -> Iterator[Found]:
    b = config.buffer
    if b.own_share <= 0 or not _uses_replay(config):
        return
    own = max(1, round(b.own_share * b.batch_size))
    if b.batch_size - own < 1:
        yield (
            "[buffer]",
            "own_share",
            f"{b.own_share:g} of [buffer] batch_size = {b.batch_size} is {own} rows of the "
            f"learner's own table, which leaves none for the shared table: lower own_share or "
            f"raise batch_size",
        )


def _opening_range(config: Config) -> Iterator[Found]:
    play = config.play
    if play.random_opening_min is not None and play.random_opening_min > play.random_opening:
        yield (
            "[play]",
            "random_opening_min",
            f"{play.random_opening_min} is more than [play] random_opening = "
            f"{play.random_opening}, the longest opening a game draws: expected at most "
            f"random_opening",
        )


def _negamax_random_needs_negamax(config: Config) -> Iterator[Found]:
    play = config.play
    if play.negamax_random > 0 and not play.negamax:
        yield (
            "[play]",
            "negamax_random",
            f"{play.negamax_random} models the opponent's reply in the negamax target, which "
            "only [play] negamax = true learns: set negamax = true or leave negamax_random out",
        )


def _her_needs_a_replay(config: Config) -> Iterator[Found]:
    if config.buffer.her is not None and not _uses_replay(config):
        names = ", ".join(f"'{m.name}' ({m.algo})" for m in _learners(config))
        yield (
            "[buffer]",
            "her",
            f"relabels replayed transitions, and no learner samples a replay (learning from its "
            f"own rollouts: {names}): remove her or use an off-policy learner",
        )


def _agents_need_a_multiagent_env(config: Config) -> Iterator[Found]:
    prefix, sep, _ = config.env.id.partition(":")
    if sep and prefix in ("pettingzoo", "unity"):
        return
    for member in config.team:
        if member.agents is not None:
            yield (
                _member_label(member),
                "agents",
                f"picks agents of a multi-agent env ('pettingzoo:' or 'unity:' ids); [env] id "
                f"'{config.env.id}' has one agent: leave agents out",
            )
            return


def _warm_up_within_the_run(config: Config) -> Iterator[Found]:
    """An off-policy learner that only starts after the run ends never learns in it."""
    total = config.experiment.total_steps
    for member in _learners(config):
        cls = _agent_class(member)
        if not getattr(cls, "uses_replay", True):
            continue
        warm = int(cls.needs(member.params).replay_min_size)
        table, key, value = _member_label(member), "params.learning_starts", warm
        if config.buffer.batch_size > warm:
            table, key, value = "[buffer]", "batch_size", config.buffer.batch_size
        if value >= total:
            yield (
                table,
                key,
                f"{value} >= [experiment] total_steps = {total}: the learner's first update "
                f"would come after the run ends, so it never learns in this run",
            )


def _rollout_within_the_run(config: Config) -> Iterator[Found]:
    """An on-policy learner updates once per rollout of n_steps x num_envs steps."""
    total = config.experiment.total_steps
    for member in _learners(config):
        cls = _agent_class(member)
        n_steps = getattr(member.params, "n_steps", None)
        if getattr(cls, "uses_replay", True) or not isinstance(n_steps, int):
            continue
        rollout = n_steps * config.env.num_envs
        if rollout > total:
            yield (
                _member_label(member),
                "params.n_steps",
                f"a rollout of n_steps x [env] num_envs = {rollout} steps is longer than "
                f"[experiment] total_steps = {total}: the learner never updates in this run",
            )


def _sync_within_the_run(config: Config) -> Iterator[Found]:
    total = config.experiment.total_steps
    for member in config.team:
        if member.sync is not None and member.sync.every >= total:
            yield (
                _member_label(member),
                "sync",
                f"every = {member.sync.every} of its own steps is >= [experiment] total_steps "
                f"= {total}: it never takes the learner's weights in this run",
            )


def _ray_placements_need_ray(config: Config) -> Iterator[Found]:
    """A Ray placement on another backend places nothing: ``num_gpus = 1`` on local still
    trains on the member's ``params.device``, which a user may not expect."""
    backend = config.experiment.backend
    if backend == "ray":
        return
    for member in config.team:
        for key in ("num_gpus", "num_cpus", "resources"):
            value = getattr(member, key)
            if value is None:
                continue
            device = getattr(member.params, "device", None)
            trains_on = f' (it trains on params.device = "{device}")' if key == "num_gpus" else ""
            yield (
                _member_label(member),
                key,
                f'is a Ray placement, and [experiment] backend = "{backend}" places nothing by '
                f'it{trains_on}: set backend = "ray" or leave {key} out',
            )
            break


def _step_share_needs_held_producers(config: Config) -> Iterator[Found]:
    """A learner keeps its share by paying the gate fewer updates, which holds back the other
    producers of its table; with none to hold (or no gate), the share would do nothing."""
    for learner in _learners(config):
        if not learner.step_share:
            continue
        label, share = _member_label(learner), f"step_share = {learner.step_share:g}"
        if config.experiment.backend == "serial":
            yield (
                label,
                "step_share",
                f'{share}, and [experiment] backend = "serial" steps every member in turn, an '
                f'equal share each, with no gate to hold the others: use backend = "local", or '
                f"leave step_share out",
            )
        elif config.experiment.backend == "ray":
            yield (
                label,
                "step_share",
                f'{share}, and [experiment] backend = "ray": the Ray replay\'s shards count a '
                f"batch as an update when they serve it to the learner's prefetch, not when it "
                f"trains, so holding updates back does not hold the producers: use backend = "
                f'"local", or leave step_share out',
            )
        elif not getattr(_agent_class(learner), "uses_replay", True):
            yield (
                label,
                "step_share",
                f"{share} on {learner.algo!r}, which learns from its own rollouts: only a "
                f"learner that trains from the replay holds the other producers back",
            )
        elif len(config.tables) > 1:
            yield (
                label,
                "step_share",
                f"{share} is a share of the run's env steps, and the gate holds back only its "
                f"own table's producers, not the other tables' ({', '.join(config.tables)}): "
                f"one table only",
            )
        elif not any(m.role != "learner" and m.table == learner.table for m in config.team):
            yield (
                label,
                "step_share",
                f"{share}, and no explorer or actor writes into its table: alone, the learner "
                f"takes every step; leave step_share out",
            )


RULES: tuple[Rule, ...] = (
    Rule(
        "stop needs a threshold",
        ("experiment.stop_at_threshold", "experiment.eval_threshold"),
        "error",
        _stop_needs_threshold,
    ),
    Rule(
        "a run covers one vector step",
        ("experiment.total_steps", "env.num_envs"),
        "error",
        _steps_cover_one_vector_step,
    ),
    Rule(
        "a batch fits the replay",
        ("buffer.batch_size", "buffer.capacity"),
        "error",
        _batch_fits_the_replay,
    ),
    Rule(
        "own_share leaves shared rows",
        ("buffer.own_share", "buffer.batch_size"),
        "error",
        _own_share_leaves_shared_rows,
    ),
    Rule(
        "a learner's step share holds producers back",
        ("team.step_share", "experiment.backend", "team.algo", "team.role", "team.table"),
        "error",
        _step_share_needs_held_producers,
    ),
    Rule("her needs a replay", ("buffer.her", "team.algo"), "error", _her_needs_a_replay),
    Rule(
        "an opening range runs upward",
        ("play.random_opening_min", "play.random_opening"),
        "error",
        _opening_range,
    ),
    Rule(
        "negamax_random needs negamax",
        ("play.negamax_random", "play.negamax"),
        "error",
        _negamax_random_needs_negamax,
    ),
    Rule(
        "agents need a multi-agent env",
        ("team.agents", "env.id"),
        "error",
        _agents_need_a_multiagent_env,
    ),
    Rule(
        "the warm-up ends within the run",
        ("team.params.learning_starts", "buffer.batch_size", "experiment.total_steps"),
        "warning",
        _warm_up_within_the_run,
    ),
    Rule(
        "a rollout ends within the run",
        ("team.params.n_steps", "env.num_envs", "experiment.total_steps"),
        "warning",
        _rollout_within_the_run,
    ),
    Rule(
        "Ray placements need the ray backend",
        ("team.num_gpus", "team.num_cpus", "team.resources", "experiment.backend"),
        "warning",
        _ray_placements_need_ray,
    ),
    Rule(
        "a sync comes within the run",
        ("team.sync.every", "experiment.total_steps"),
        "warning",
        _sync_within_the_run,
    ),
)


def check_relations(config: Config) -> None:
    """Raise the first broken ``error`` rule as a ConfigError (``validate`` calls this)."""
    for rule in RULES:
        if rule.level == "error":
            for table, key, message in rule.find(config):
                raise ConfigError(str(config.path), table, key, message)


def relation_warnings(config: Config) -> list[str]:
    """One line per broken ``warning`` rule (``check`` and ``run`` print them)."""
    return [
        f"{config.path}: {table} {key}: {message}"
        for rule in RULES
        if rule.level == "warning"
        for table, key, message in rule.find(config)
    ]


__all__ = ["RULES", "Rule", "check_relations", "relation_warnings"]
