"""What a transition's priority is made of: the TD error and a novelty term, each weighted.

``[buffer] priority_td`` (default 1) and ``priority_novelty`` (default 0: TD only, as before)
make the raw priority of a sampled transition

    p_i = priority_td * |delta_i| + priority_novelty * novelty(s'_i)        (+ eps, as before)

and the sum tree holds ``p_i ** alpha``, so the sampling probability ``P_i = p_i^alpha / sum_k
p_k^alpha`` and the importance weights ``(N P_i)^-beta / max_k w_k`` (the sampler's) are those
of the mixed priority exactly: nothing downstream knows there are two terms.

The novelty is random network distillation (``wheeler2.novelty.RND``), refreshed when a
transition's priority is written back after a sample: its predictor takes one step on every
``TRAIN_EVERY``-th sampled batch's next observations, so a state stays novel until the learner
has trained on states like it, and new transitions enter at the running max priority as
always. Why not every batch: the Adam step costs about three times the forward passes, and
training on one batch in four brings sample + a critic step + priorities from 0.68x to 0.75x
of TD-only, and a whole DDPG learner step to 0.87x (experiments/bench_replay_choice.py).
The RND lives in the sampling process (never in producers): the learner's checkpointed state
carries it (``Replay.priority_state``), or on Ray the shard's, so a resumed run goes on with
the same predictor and statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TRAIN_EVERY = 4  # sampled batches per predictor step (the module docstring says why)


class PriorityTerms:
    """Mixes TD errors and novelty into raw priorities (one per sampling process)."""

    def __init__(self, td_weight: float, novelty_weight: float, seed: int) -> None:
        self.td_weight = float(td_weight)
        self.novelty_weight = float(novelty_weight)
        self.seed = int(seed)
        self._rnd: Any = None  # built on first use: torch is imported by samplers only
        self._calls = 0

    def novelty(self, next_obs: np.ndarray) -> np.ndarray:
        """RND's normalized bonus of each row ([B] float64); on every ``TRAIN_EVERY``-th call
        the predictor then trains on them once (these states have now been replayed)."""
        if self._rnd is None:
            from wheeler2.novelty import RND

            self._rnd = RND(seed=self.seed)
        x = np.asarray(next_obs, np.float32).reshape(len(next_obs), -1)
        # A non-None info makes the RND learn from the batch, None only evaluates it
        # (novelty.py's convention).
        info = () if self._calls % TRAIN_EVERY == 0 else None
        self._calls += 1
        return np.asarray(self._rnd(x, None, x, None, None, info=info), np.float64)

    def state_dict(self) -> dict[str, Any]:
        """The RND (empty before the first novelty) and the batch count of its training."""
        return {"rnd": {} if self._rnd is None else self._rnd.state_dict(), "calls": self._calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._calls = int(state.get("calls", 0))
        if state.get("rnd"):
            from wheeler2.novelty import RND

            self._rnd = RND(seed=self.seed)
            self._rnd.load_state_dict(state["rnd"])

    def mix(self, td_error: np.ndarray, next_obs: np.ndarray | None) -> np.ndarray:
        """Raw priorities ``td_weight * |td| + novelty_weight * novelty`` ([B] float64)."""
        p = self.td_weight * np.abs(np.asarray(td_error, np.float64))
        if self.novelty_weight > 0.0 and next_obs is not None:
            p = p + self.novelty_weight * self.novelty(next_obs)
        return p
