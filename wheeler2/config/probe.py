"""Checks that need the environment built once: ``wheeler2 check`` runs them after ``load``.

``load`` stays cheap (no env is built); what only the env can tell, such as whether it has goals
and how large one transition is, is checked here, so that ``check`` refuses what a run would
fail on minutes later: HER on an env without goals, a buffer that does not fit in memory.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from wheeler2 import registry
from wheeler2.env import EnvInfo

from .errors import ConfigError
from .model import Config

SHM = Path("/dev/shm")


def check_with_env(config: Config, free: Callable[[], dict[str, int]] | None = None) -> EnvInfo:
    """Build the env once (one copy) and check the config against it; returns its EnvInfo.

    ``free``: where the buffer could go -> free bytes (default: /dev/shm and available RAM).
    Raises :class:`ConfigError` naming the table and key at fault.
    """
    info = probe_env(config)
    check_against_env(config, info, free)
    return info


def check_against_env(
    config: Config, info: EnvInfo, free: Callable[[], dict[str, int]] | None = None
) -> None:
    """The checks of :func:`check_with_env` for an env already built (``run`` calls this with
    the env it probes anyway, so it refuses what ``check`` refuses before any memory is taken)."""
    file = str(config.path)
    if config.buffer.her is not None and info.goal_dim == 0:
        raise ConfigError(
            file,
            "[buffer]",
            "her",
            f"needs a goal env (observations with achieved_goal and desired_goal); "
            f"'{config.env.id}' has none: remove her or pick a goal env",
        )
    # A Ray cluster places the buffer on its own nodes, whose memory this machine cannot see.
    if config.experiment.backend == "ray" and config.experiment.ray_address:
        return
    need = buffer_bytes(config, info)
    room = (free or free_memory)()
    if room and need > min(room.values()):
        per = need // config.buffer.capacity
        where = ", ".join(f"{name} {amount:_} bytes" for name, amount in room.items())
        raise ConfigError(
            file,
            "[buffer]",
            "capacity",
            f"{config.buffer.capacity:_} transitions of ~{per} bytes need {need:_} bytes "
            f"({need / 2**30:.1f} GiB) of shared memory; free: {where}",
        )


def probe_env(config: Config) -> EnvInfo:
    """The env's static facts, from one copy built and closed again."""
    agents = config.learner.agents
    try:
        env = registry.make_env(config.env, num_envs=1, seed=0, agents=agents)
    except Exception as exc:  # noqa: BLE001 - any failure to build is the [env]'s to report
        raise ConfigError(
            str(config.path), "[env]", "id", f"cannot build it: {type(exc).__name__}: {exc}"
        ) from None
    try:
        return env.info
    finally:
        env.close()


def buffer_bytes(config: Config, info: EnvInfo) -> int:
    """Bytes of shared memory the central buffer allocates for this env (all shards together)."""
    from wheeler2.buffer import Layout
    from wheeler2.buffer.storage import field_specs

    layout = Layout(
        obs_dim=info.obs_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        num_heads=len(config.task.heads),
        goal_dim=info.goal_dim,
        logp=True,  # an upper bound: set when some explorer stores a behaviour log-prob
    )
    specs = field_specs(layout, config.buffer)  # reads only capacity and prioritized
    return sum(math.prod(shape) * _itemsize(dtype) for shape, dtype in specs.values())


def _itemsize(dtype: type) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def free_memory() -> dict[str, int]:
    """Free bytes where the buffer lives: /dev/shm (when mounted) and available RAM."""
    room = {}
    if SHM.is_dir():
        room["/dev/shm"] = shutil.disk_usage(SHM).free
    ram = _available_ram()
    if ram is not None:
        room["RAM"] = ram
    return room


def _available_ram() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
