"""The names scripts in ``experiments/`` import from here, kept until they import the modules
that now hold them: ``runtime.plan`` (members), ``runtime.seeds``, ``runtime.parts`` (envs,
spaces, agents), ``runtime.heads``, and ``wheeler2.process`` (threads). The engine and the tests
import those modules directly; nothing new goes here.
"""

from __future__ import annotations

from wheeler2.process import set_compute_threads
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.parts import make_agent, make_env, space_info
from wheeler2.runtime.plan import learner_plan, plan_team
from wheeler2.runtime.seeds import member_seed

__all__ = [
    "learner_plan",
    "make_agent",
    "make_env",
    "make_heads",
    "make_task",
    "member_seed",
    "plan_team",
    "set_compute_threads",
    "space_info",
]
