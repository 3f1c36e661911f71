"""The run's task and reward heads: from ``[[task.heads]]``, the task class or the env adapter,
and the config that records the heads a run used (its run directory's ``config.toml``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from wheeler2 import registry
from wheeler2.config import Config, HeadConfig
from wheeler2.env import VecEnv
from wheeler2.task import Head, RewardHeads, Task, validate_heads


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
    # An adapter with a vector reward (envs/mo.py) names its heads as "module:attr" specs.
    adapter_heads = getattr(env, "reward_heads", None)
    if task is not None and not _heads_written(config) and task.declared_heads():
        head_specs = [HeadConfig(n, m, w) for n, m, w in task.declared_heads()]
    elif not _heads_written(config) and adapter_heads:
        head_specs = [HeadConfig(h.name, head_reward_spec(h), h.weight) for h in adapter_heads]
    if not head_specs:
        return RewardHeads(
            [Head("env", 1.0, None)], goal_reward, None, _worth_keeping(config, task)
        )
    heads = []
    for h in head_specs:
        if h.reward == "env":
            fn = None
        elif task is not None and ":" not in h.reward and hasattr(task, h.reward):
            fn = getattr(task, h.reward)
        else:
            fn = _task_method(task, h.reward) or registry.resolve_object(h.reward)
        heads.append(Head(h.name, float(h.weight), fn))
    reached = None
    if task is not None and task.defines_success():
        # A task that defines success returns its flags (None is the base class's "no notion").
        reached = cast(Callable[..., np.ndarray], task.success)
    out = RewardHeads(heads, goal_reward, reached, _worth_keeping(config, task))
    if any(h.fn is not None for h in heads) or out.reached is not None or out.worth_keeping:
        # A wrong signature or shape fails here, before training, naming the function.
        validate_heads(out, env)
    return out


def _worth_keeping(config: Config, task: Task | None) -> Callable[..., np.ndarray] | None:
    """The task's ``worth_keeping``, where the replay filters (``[buffer] keep < 1``)."""
    if task is None or not task.defines_worth_keeping() or config.buffer.keep >= 1.0:
        return None
    return task.worth_keeping


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
        return f"{registry.spec_module_part(cls.__module__)}:{cls.__qualname__}.{fn.__name__}"
    return f"{registry.spec_module_part(fn.__module__)}:{fn.__qualname__}"


def resolved_heads_config(config: Config, heads: RewardHeads) -> Config:
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
    # "tasks.reacher" names the installed wheeler2.tasks.reacher, the class's own module.
    module = registry.installed_module(registry.module_name(module))
    if task is not None and owner and (cls.__module__, cls.__qualname__) == (module, owner):
        return getattr(task, method)
    return None
