"""The step budget of the serial and local backends: one small block of shared counters.

``block[GRANTED]`` counts env steps handed out, ``block[STEPS + i]`` the steps member ``i``
took; claims take the lock, so the run ends at exactly ``total_steps`` (or as close as a whole
vector step of the last member allows). ``block[OPEN]`` is the start line: members take no step
before the coordinator has heard every one of them start, so a member whose process, imports or
env take longer to come up still gets its share of the run. ``block[STAGE]`` is the run's
curriculum stage (``[curriculum]``), which the coordinator moves and every member applies to its
envs at its next step. The same class serves one process
(a numpy array and no lock) and many (a ``multiprocess`` shared array and lock). The Ray
backend's budget is claimed from its board instead (``runtime.ray_member``), behind the same
start line.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

GRANTED, REQUEST, STOP, OPEN, STAGE, STEPS = 0, 1, 2, 3, 4, 5


def new_block(
    member_steps: list[int], shared: Any | None = None, opened: bool = True, stage: int = 0
) -> Any:
    """Counters for a team whose members took ``member_steps`` so far (resume); ``shared`` is a
    multiprocess context for a block the member processes can see, None for one process;
    ``opened``: whether members may step at once (else once ``block[OPEN]`` is set); ``stage``:
    the curriculum stage the run starts (or resumes) at."""
    values = [sum(member_steps), 0, 0, int(opened), int(stage), *member_steps]
    if shared is None:
        return np.array(values, np.int64)
    return shared.Array("q", values, lock=False)


class CountingBudget:
    """One member's view of the block (see :class:`wheeler2.runtime.member.Budget`)."""

    def __init__(self, block: Any, lock: Any | None, slot: int, total_steps: int) -> None:
        self.block = block
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.slot = STEPS + slot
        self.total = int(total_steps)

    def claim(self, n: int) -> bool:
        block = self.block
        with self.lock:
            if block[STOP] or block[GRANTED] + n > self.total:
                return False
            block[GRANTED] += n
        return True

    def settle(self, claimed: int, used: int) -> None:
        self.block[self.slot] += used
        if used < claimed:
            with self.lock:
                self.block[GRANTED] -= claimed - used

    def run_steps(self, own: int) -> int:
        return run_steps(self.block)

    def stopped(self) -> bool:
        return bool(self.block[STOP])

    def opened(self) -> bool:
        return bool(self.block[OPEN])

    def request(self) -> int:
        return int(self.block[REQUEST])

    def stage(self) -> int:
        return int(self.block[STAGE])


def run_steps(block: Any) -> int:
    return int(sum(block[STEPS:]))
