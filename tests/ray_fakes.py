"""Stand-ins the Ray tests share: an actor handle called in-process, and a member's insert."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np


class Handle:
    """An actor handle whose ``.remote`` calls are the actor's own methods, called here."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(remote=getattr(self.obj, name))


def vector_steps(t: int, start: float = 0.0) -> dict[str, np.ndarray]:
    """``t`` Pendulum vector steps of one env copy, shaped as a member sends them."""
    obs = np.full((t, 1, 3), start, np.float32) + np.arange(t, dtype=np.float32)[:, None, None]
    return {
        "obs": obs,
        "action": np.zeros((t, 1, 1), np.float32),
        "reward": np.ones((t, 1), np.float32),
        "next_obs": obs + 1,
        "terminated": np.zeros((t, 1), bool),
        "truncated": np.zeros((t, 1), bool),
    }
