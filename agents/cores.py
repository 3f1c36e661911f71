"""The old home of the recurrent pieces, kept so that old imports keep working:
:class:`RecurrentCore` is in ``agents/parts/memory.py``, the on-policy :class:`RecurrentActor` and
:class:`RecurrentCritic` are in ``agents/onpolicy.py``."""

from agents.onpolicy import RecurrentActor, RecurrentCritic
from agents.parts.memory import CORE_KINDS, RecurrentCore

__all__ = ["CORE_KINDS", "RecurrentCore", "RecurrentActor", "RecurrentCritic"]
