"""Algorithms that misbehave on purpose, for the fault tests (``algo = "w2_faults:FaultyPPO"``).

Each acts like its parent until its ``fault_at``-th ``act`` call, then: ``"exit"`` ends its
process at once (a crash: no traceback, no message), ``"raise"`` raises, ``"hang"`` sleeps
forever (a member stuck in its env or a C call). The tests put ``tests/`` on PYTHONPATH so
member processes and Ray workers import this module by name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
from wheeler2.agents.ddpg import DDPG
from wheeler2.agents.ddpg import Params as DDPGParams
from wheeler2.agents.ppo import PPO
from wheeler2.agents.ppo import Params as PPOParams

from wheeler2.agent import ActOut


def _misbehave(fault: str) -> None:
    if fault == "exit":
        os._exit(3)
    if fault == "raise":
        raise RuntimeError("injected fault")
    if fault == "hang":
        while True:
            time.sleep(3600)


@dataclass
class FaultyPPOParams(PPOParams):
    fault: str = ""  # "", "exit", "raise", "hang"
    fault_at: int = 0  # act() calls before the fault
    build_delay: float = 0.0  # seconds its build takes in a member process (not the driver's)


class FaultyPPO(PPO):
    Params = FaultyPPOParams

    def __init__(self, space, params, device: str = "cpu", seed: int = 0) -> None:  # noqa: ANN001
        import multiprocess

        # A member still building when the test acts: members start in milliseconds now.
        if params.build_delay and multiprocess.parent_process() is not None:
            time.sleep(params.build_delay)
        super().__init__(space, params, device=device, seed=seed)

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:
        self._calls = getattr(self, "_calls", 0) + 1
        if self.params.fault and explore and self._calls > self.params.fault_at:
            _misbehave(self.params.fault)
        return super().act(obs, explore)


@dataclass
class FaultyDDPGParams(DDPGParams):
    fault: str = ""
    fault_at: int = 0


class FaultyDDPG(DDPG):
    Params = FaultyDDPGParams

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:
        self._calls = getattr(self, "_calls", 0) + 1
        if self.params.fault and explore and self._calls > self.params.fault_at:
            _misbehave(self.params.fault)
        return super().act(obs, explore)


_reward_calls = 0


def nan_after_300(obs, action, next_obs, achieved_goal, desired_goal, info) -> np.ndarray:
    """A reward head that turns NaN after 300 calls (a bug in a user's reward code)."""
    global _reward_calls
    _reward_calls += 1
    return np.full(len(obs), np.nan if _reward_calls > 300 else 0.0, np.float32)


def huge(obs, action, next_obs, achieved_goal, desired_goal, info) -> np.ndarray:
    """A finite reward so large that the critic's squared TD error overflows to inf."""
    return np.full(len(obs), 3e38, np.float32)


@dataclass
class SlowStartDDPGParams(DDPGParams):
    start_delay: float = 0.0  # seconds this member takes to come up (a slow env build, say)
    start_burn: float = 0.0  # CPU seconds it takes first (imports on a loaded machine, say)


class SlowStartDDPG(DDPG):
    """A member whose construction burns ``start_burn`` CPU seconds, as imports on a loaded
    machine do, then waits ``start_delay`` seconds, as a Unity build's launch does: the team's
    start line must hold the others until it is up. Not in the process named by
    ``W2_DRIVER_PID`` (the driver builds each member's agent once to check the team)."""

    Params = SlowStartDDPGParams

    def __init__(self, space, params, device: str = "cpu", seed: int = 0) -> None:  # noqa: ANN001
        if str(os.getpid()) != os.environ.get("W2_DRIVER_PID"):
            end = time.process_time() + params.start_burn
            while time.process_time() < end:
                pass
            time.sleep(params.start_delay)
        super().__init__(space, params, device=device, seed=seed)
