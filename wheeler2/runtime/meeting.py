"""Checks of how a team meets in a multi-agent env ([play], turn-based games), run by
``check`` and every ``run`` before a process starts: each failure is one ConfigError naming
the file, the member (or table) and the key."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from wheeler2 import registry
from wheeler2.config import Config, ConfigError
from wheeler2.config.model import params_of
from wheeler2.runtime.parts import make_env
from wheeler2.runtime.plan import MemberPlan


def check_meeting(config: Config, tables: list[Any]) -> None:
    """``tables``: the run's TableSetups (runtime/team.py, which calls this)."""
    if not config.env.id.startswith("pettingzoo:"):
        if config.play.negamax:
            raise _negamax_error(config, f"{config.env.id!r} is not a turn-based game")
        if config.play.joint:
            raise ConfigError(
                str(config.path),
                "[play]",
                "joint",
                f"joint play needs a multi-agent env ('pettingzoo:...'); {config.env.id!r} "
                "has one agent",
            )
        return
    # The lead's probe copy: any adapter knows every agent of its env, claimed or not.
    env: Any = make_env(config, 1, int(config.experiment.seed), tables[0].lead)
    try:
        agents = list(getattr(env, "possible_agents", None) or env.info.agents or ())
        if hasattr(env, "seats") and not env.info.action_mask:
            raise ConfigError(
                str(config.path),
                "[env]",
                "id",
                f"{config.env.id} is a turn-based game whose observations carry no "
                "'action_mask': no member could be kept from sending an illegal move "
                "(wrap it so each observation is {'observation': ..., 'action_mask': ...})",
            )
        if config.play.joint:
            _check_claims(config, agents)
        if config.play.negamax:
            _check_negamax(config, tables, agents, turn_based=hasattr(env, "seats"))
        for table in tables:
            _check_driven(config, table, agents, turn_based=hasattr(env, "seats"))
    finally:
        env.close()


def _claimants(config: Config, agent: str) -> list[str]:
    return list(
        dict.fromkeys(
            m.table for m in config.team if any(fnmatchcase(agent, g) for g in m.agents or ("*",))
        )
    )


def _check_claims(config: Config, agents: list[str]) -> None:
    """Joint play drives each agent by the one table that claims it."""
    file = str(config.path)
    for agent in agents:
        tables = _claimants(config, agent)
        if not tables:
            raise ConfigError(
                file,
                "[[team]]",
                "agents",
                f"agent {agent!r} is claimed by no table: with [play] joint every agent is "
                f"driven by the table whose members' 'agents' globs match it "
                f"(the env's agents: {', '.join(agents)})",
            )
        if len(tables) > 1:
            owners = [m.name for m in config.team if m.table in tables]
            raise ConfigError(
                file,
                f"[[team]] {owners[-1]}",
                "agents",
                f"agent {agent!r} is claimed by tables {' and '.join(map(repr, tables))}: "
                f"with [play] joint each agent belongs to one table",
            )


def _check_driven(config: Config, table: Any, agents: list[str], turn_based: bool) -> None:
    """A table whose policy drives agents outside its members' own rows (another member's
    copies in joint play, or its own other seats in self-play) acts through a plain forward
    pass of its published actor."""
    lead = table.lead
    claimed = [a for a in agents if table.name in _claimants(config, a)]
    driven_elsewhere = config.play.joint and len(config.tables) > 1
    self_play = turn_based and len(claimed) > 1
    if not (driven_elsewhere or self_play):
        return
    why = "its agents are driven in other tables' copies (joint play)"
    if self_play:
        why = "it plays its own other seats (self-play)"
    learner = table.learner
    if int(getattr(learner, "state_dim", 0)) > 0:
        raise _member_error(
            config,
            lead,
            "params",
            f"{why} with a feedforward copy of its policy; a recurrent core cannot be driven "
            "there yet (drop the core for this table)",
        )
    params = params_of(lead.spec, lead.copy)
    if driven_elsewhere and getattr(params, "normalize_obs", False):
        raise _member_error(
            config,
            lead,
            "normalize_obs",
            f"{why} by its published actor, which does not carry its observation statistics: "
            "set normalize_obs = false for this table",
        )
    if driven_elsewhere and any(h.reward != "env" for h in config.task.heads):
        raise ConfigError(
            str(config.path),
            "[task]",
            "heads",
            "joint play writes the steps of other tables' agents with the env's reward; "
            "reward heads other than 'env' are not supported with [play] joint",
        )


def _negamax_error(config: Config, why: str) -> ConfigError:
    return ConfigError(
        str(config.path),
        "[play]",
        "negamax",
        f"negamax values need self-play in a two-player turn-based game, one table playing "
        f"both seats: {why}",
    )


def _check_negamax(config: Config, tables: list[Any], agents: list[str], turn_based: bool) -> None:
    """A negamax table learns from one ply at a time and values a move by the opponent's reply,
    which its own network judges: the game must alternate two players of one table, and the
    learner must read transitions that way (a ``negamax`` algorithm, one-step returns)."""
    if not turn_based or len(agents) != 2:
        raise _negamax_error(
            config, f"{config.env.id} is not a two-player turn-based game (agents: {agents})"
        )
    if config.play.joint:
        raise _negamax_error(config, "[play] joint has other tables drive seats")
    for table in tables:
        claimed = [a for a in agents if table.name in _claimants(config, a)]
        if len(claimed) != len(agents):
            raise _negamax_error(
                config, f"table {table.name!r} claims {claimed}, not both of {agents}"
            )
    for m in config.team:
        if not getattr(registry.resolve_algo(m.algo), "negamax", False):
            raise ConfigError(
                str(config.path),
                f"[[team]] {m.name}",
                "algo",
                f"{m.algo!r} cannot learn negamax values ([play] negamax); use dqn",
            )
    if config.buffer.n_step != 1:
        raise ConfigError(
            str(config.path),
            "[buffer]",
            "n_step",
            f"{config.buffer.n_step}: [play] negamax learns one ply at a time, whose returns "
            "alternate sides; expected n_step = 1",
        )
    if any(h.reward != "env" for h in config.task.heads):
        raise ConfigError(
            str(config.path),
            "[task]",
            "heads",
            "[play] negamax values the game's own reward; reward heads other than 'env' are "
            "not supported with it",
        )


def _member_error(config: Config, plan: MemberPlan, key: str, message: str) -> ConfigError:
    return ConfigError(str(config.path), f"[[team]] {plan.team}", key, message)
