"""Central replay buffer shared by every member of a team (issue 3).

Modules: ``storage`` (shared ring + header), ``sumtree`` (sum/min tree), ``sampler``
(prioritized / uniform draws and weights), ``nstep`` (windows and returns), ``her`` (goal
relabelling), ``gate`` (updates-per-insert ratio), ``writer`` (producer staging), ``replay``
(the facade the engine uses), ``sequence`` (sequence replay for recurrent learners), ``locks``
and ``shm`` (process-safe primitives).
"""

from .config import (
    HerConfig,
    Layout,
    ReplayConfig,
    ReplayError,
    ReplayTimeout,
    SequenceConfig,
)
from .replay import Replay, ReplayHandle
from .writer import Writer

__all__ = [
    "HerConfig",
    "Layout",
    "Replay",
    "ReplayConfig",
    "ReplayError",
    "ReplayHandle",
    "ReplayTimeout",
    "SequenceConfig",
    "Writer",
]
