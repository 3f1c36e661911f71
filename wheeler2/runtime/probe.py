"""Checks that need the environment built once: ``wheeler2 check`` runs them after ``load``.

``config.load`` stays cheap and only parses (no env is built, and ``wheeler2.config`` imports
nothing of the runtime); what only the built team can tell is checked here, so
that ``check`` refuses what a run would fail on minutes later: an algorithm that cannot act in
the env, a reward head that raises or has the wrong shape, members whose spaces do not fit
their replay table, a sync that cannot work, HER on an env without goals, a buffer that does
not fit in memory.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from wheeler2.buffer import Layout
from wheeler2.buffer.storage import field_specs
from wheeler2.config import Config, ConfigError
from wheeler2.env import EnvInfo
from wheeler2.runtime.resources import available_ram
from wheeler2.runtime.team import prepare_team

SHM = Path("/dev/shm")


def check_with_env(config: Config, free: Callable[[], dict[str, int]] | None = None) -> None:
    """Build the team once without training (each table's env copy, reward heads on a probe
    batch, every member's agent, spaces, sync plans, replay layouts) and check the config
    against it: what ``run`` would fail on is refused here, as one ConfigError naming the
    table and key.

    ``free``: where the buffers could go -> free bytes (default: /dev/shm and available RAM).
    """
    setup = prepare_team(config, {})
    check_against_env(config, [t.info for t in setup.tables if t.uses_replay], free)


def check_against_env(
    config: Config,
    infos: Sequence[EnvInfo],
    free: Callable[[], dict[str, int]] | None = None,
) -> None:
    """The env-dependent checks, given the spaces of the tables that keep a replay (``run``
    calls this with the team it builds anyway, so it refuses what ``check`` refuses before any
    memory is taken)."""
    file = str(config.path)
    if config.buffer.her is not None and any(info.goal_dim == 0 for info in infos):
        raise ConfigError(
            file,
            "[buffer]",
            "her",
            f"needs a goal env (observations with achieved_goal and desired_goal); "
            f"'{config.env.id}' has none: remove her or pick a goal env",
        )
    buffer = config.buffer
    if buffer.forget != "oldest" and any(info.obs_shape for info in infos):
        # The replay refuses it too, but only once a run has built the team.
        raise ConfigError(
            file,
            "[buffer]",
            "forget",
            f'expected "oldest" with image observations, got "{buffer.forget}": a row carried '
            "forward keeps its frame references, not the frames the ring overwrites",
        )
    # A Ray cluster places the buffer on its own nodes, whose memory this machine cannot see.
    if not infos or (config.experiment.backend == "ray" and config.experiment.ray_address):
        return
    need = sum(buffer_bytes(config, info) for info in infos)
    room = (free or free_memory)()
    if room and need > min(room.values()):
        per = need // (config.buffer.capacity * len(infos))
        where = ", ".join(f"{name} {amount:_} bytes" for name, amount in room.items())
        tables = "" if len(infos) == 1 else f" in each of {len(infos)} tables"
        raise ConfigError(
            file,
            "[buffer]",
            "capacity",
            f"{config.buffer.capacity:_} transitions{tables} of ~{per} bytes need {need:_} "
            f"bytes ({need / 2**30:.1f} GiB) of shared memory; free: {where}",
        )


def buffer_bytes(config: Config, info: EnvInfo) -> int:
    """Bytes of shared memory the central buffer allocates for this env (all shards together)."""
    layout = Layout(
        obs_dim=info.obs_dim,
        act_dim=info.act_dim,
        discrete=info.discrete,
        num_heads=len(config.task.heads),
        goal_dim=info.goal_dim,
        logp=True,  # an upper bound: set when some explorer stores a behaviour log-prob
        frame_shape=info.frame_shape,
        stack=info.stack,
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
    ram = available_ram()
    if ram is not None:
        room["RAM"] = ram
    return room
