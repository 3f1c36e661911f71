"""Reading a run back from its checkpoint: :func:`restore`, the one path by which ``resume``,
``eval`` and the Python API (``wheeler2.load_policy``) get agents out of a checkpoint, and the
shares of a checkpoint's payload that a backend hands each member and table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheeler2 import checkpoint as ckpt
from wheeler2.agent import Agent
from wheeler2.config import Config
from wheeler2.env import VecEnv
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.parts import make_agent, make_env, space_info
from wheeler2.runtime.plan import MemberPlan, learner_plan, plan_team
from wheeler2.runtime.seeds import eval_env_seed
from wheeler2.runtime.team import TableSetup, prepare_team


@dataclass
class Restored:
    """A checkpoint read back and checked against the agents its config builds."""

    path: Path  # the file read
    payload: dict[str, Any]  # all of it: run counters, RNG states, member states, replays
    lead: MemberPlan  # the lead learner (its evals are the run's)
    agents: dict[str, Agent]  # fresh agents of the config, loaded from the checkpoint
    # The lead's eval env copies the agents were sized from (``eval_copies``): open, the
    # caller's to close. None when the whole team was restored.
    env: VecEnv | None = field(default=None, repr=False)

    @property
    def learner(self) -> Agent:
        return self.agents[self.lead.name]


def restore(
    config: Config, run_dir: str | Path, which: str = "latest", eval_copies: int | None = None
) -> Restored:
    """Read ``run_dir``'s checkpoint ``which`` (``"best"`` falls back to ``"latest"`` when no
    eval has improved yet) and load it into fresh agents of ``config``, built as a run builds
    them. Any checkpoint that cannot be used is a ``checkpoint.CheckpointError``, one line
    naming the file (the CLI exits 2): missing, unreadable or unsafe (``checkpoint.load``),
    without run counters, or not the team ``config`` builds (``checkpoint.check_matches``:
    other member names, algorithms or network shapes).

    ``eval_copies``: restore the lead learner alone, its networks sized from that many copies
    of the eval env and the run's heads (``eval``, the Python API); the env comes back open in
    :attr:`Restored.env`. Without it, every member of the team, as the backends build them
    (``resume``): every member the checkpoint names must be in the config.
    """
    run_dir = Path(run_dir)
    path = ckpt.checkpoint_path(run_dir, which)
    if which != "latest" and not path.exists():  # no eval beat the first yet
        path = ckpt.checkpoint_path(run_dir, "latest")
        if not path.exists():
            raise ckpt.CheckpointError(
                f"{run_dir}: no checkpoint; expected {ckpt.CHECKPOINT_DIR}/{ckpt.BEST} or "
                f"{ckpt.CHECKPOINT_DIR}/{ckpt.LATEST} (does the run have an eval yet?)"
            )
    payload = ckpt.load(path)
    run = payload.get("run")
    if not isinstance(run, dict) or "env_steps" not in run:
        raise ckpt.CheckpointError(f"{path}: not a wheeler2 run checkpoint (no run counters)")
    lead = learner_plan(plan_team(config))
    if eval_copies is None:
        agents, algos = _team_agents(config)
        # check_matches loads the saved states into the agents once they fit.
        ckpt.check_matches(path, payload, agents, algos)
        return Restored(path, payload, lead, agents)
    env = make_env(config, eval_copies, eval_env_seed(config), lead)
    try:
        heads = make_heads(config, env, make_task(config))
        agent = make_agent(config, lead, space_info(env.info, heads), 0)
        agents = {lead.name: agent}
        ckpt.check_matches(
            path, payload, agents, {lead.name: lead.algo}, subset=True, required=[lead.name]
        )
    except BaseException:
        env.close()
        raise
    return Restored(path, payload, lead, agents, env)


def _team_agents(config: Config) -> tuple[dict[str, Agent], dict[str, str]]:
    """Fresh agents of every member, built the way every backend builds them."""
    agents: dict[str, Agent] = {}
    algos: dict[str, str] = {}
    for table in prepare_team(config, {}).tables:
        space = space_info(table.info, table.heads)
        for p in table.plans:
            agents[p.name], algos[p.name] = make_agent(config, p, space, 0), p.algo
    return agents, algos


def member_payload(payload: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, int]:
    """A member's resumed agent state (None: start fresh) and env steps."""
    if not payload:
        return None, 0
    state = (payload.get("members") or {}).get(name)
    steps = int((payload.get("member_steps") or {}).get(name, 0))
    return state, steps


def saved_replay(payload: dict[str, Any], table: TableSetup) -> dict[str, Any] | None:
    """A table's replay contents in a checkpoint (``buffer.checkpoint = true``): the lead
    table's under ``replay``, as before tables existed, the others' under ``table_replays``."""
    if not payload:
        return None
    if table.index == 0:
        return payload.get("replay")
    return (payload.get("table_replays") or {}).get(table.name)
