"""What an algorithm declares to the engine: :class:`AgentNeeds`, from ``Agent.needs(params)``.

The engine builds replays, budgets and evaluations around a member before (and apart from)
its agent: the coordinator sizes the learner's replay without building the learner. So an
algorithm says, from its ``Params``, what the engine must know; the engine never reads a
hyperparameter by name. A leaf module (numpy and the schema only): agents/ and buffer/ both
take their shared types from here, neither from the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wheeler2.schema import bounded, problems


@dataclass(frozen=True)
class SequenceConfig:
    """Sequence replay (R2D2, Kapturowski et al. 2019) for a recurrent learner.

    A sequence starts at every ``stride``-th step of an episode (step 0, stride, 2 stride, ...)
    and spans ``burn_in + length`` steps; the first ``burn_in`` only rebuild the policy state
    from the one stored at the start, except in a sequence that starts an episode, whose stored
    state (the initial one) is exact and whose every step is trained.
    """

    length: int = bounded(40, gt=0)  # trained steps per sequence
    burn_in: int = bounded(20, ge=0)  # steps before them that only refresh the stored state
    # Steps between sequence starts; 0: length // 2 (R2D2). Past length, the steps between one
    # start's trained span and the next one's are never trained: a learner's config refuses it
    # (agents/recurrent.py core_problem); the replay itself takes it (its tests tile windows).
    stride: int = bounded(0, ge=0)
    eta: float = bounded(0.9, ge=0, le=1)  # priority: eta max|delta| + (1 - eta) mean|delta|

    def __post_init__(self) -> None:
        found = problems(self)
        if found:
            raise ValueError("invalid sequence config: " + "; ".join(found))

    @property
    def every(self) -> int:
        """Steps between sequence starts (``stride``, or half the length by default)."""
        return int(self.stride) or max(1, int(self.length) // 2)

    @property
    def span(self) -> int:
        """Steps one sequence covers: burn-in and trained."""
        return int(self.burn_in) + int(self.length)


def sequence_priority(td_error: np.ndarray, mask: np.ndarray, eta: float) -> np.ndarray:
    """``eta * max|td| + (1 - eta) * mean|td|`` over each row's ``mask``ed steps: [B, T] -> [B].

    A row with no masked step gets 0 (it is never trained on)."""
    err = np.abs(np.asarray(td_error, dtype=np.float64)) * mask
    count = mask.sum(axis=1)
    mean = err.sum(axis=1) / np.maximum(count, 1)
    return (eta * err.max(axis=1) + (1.0 - eta) * mean).astype(np.float32)


@dataclass(frozen=True)
class AgentNeeds:
    """What the engine must know of a member, declared by its algorithm from its params."""

    # The discount the replay folds into n-step returns and evaluation holds value estimates
    # against; None: the agent has none (it then gets no n-step replay or value check).
    gamma: float | None = None
    # Rows the learner's replay must hold before its first sample (an off-policy learner's
    # warm-up, ``learning_starts``); the batch size is the floor either way.
    replay_min_size: int = 0
    # Replayed sequences instead of transitions (a recurrent off-policy learner); their
    # priority rule is the sequence's ``eta``.
    sequence: SequenceConfig | None = None
    device: str = "cpu"  # where the agent's networks live: "cpu" | "cuda"
