"""A batch of two short sequences with one padded position, shared by the recurrent TD3 and
SAC checks written out by hand (tests/test_td3.py, tests/test_sac.py)."""

from __future__ import annotations

import numpy as np

# Two sequences of T = 2 steps (no burn-in, one-step bootstraps), batch first; the second
# one's episode ends after its first step, so its position 1 is padding, outside the loss.
SEQ = dict(
    obs=np.array([[[1.0, 0.0], [0.5, -1.0]], [[0.0, 1.0], [-1.0, 0.5]]], np.float32),
    action=np.array([[[0.5], [0.2]], [[-0.5], [0.9]]], np.float32),
    reward=np.array([[[1.0, 0.0], [0.5, 1.0]], [[0.0, 2.0], [1.0, -1.0]]], np.float32),
    next_obs=np.array([[[1.0, 1.0], [0.0, 2.0]], [[2.0, 0.0], [1.0, -0.5]]], np.float32),
    discount=np.array([[0.9, 0.8], [0.5, 0.7]], np.float32),
    boot=np.array([[0, 1], [0, 1]]),
    alive=np.array([[True, True], [True, False]]),
    mask=np.array([[True, True], [True, False]]),
    burn=np.array([0, 0]),
    weight=np.array([1.0, 2.0], np.float32),
    index=np.arange(2),
)


def positions(key: str) -> np.ndarray:
    """A ``SEQ`` array time-major, flattened (row t * B + b is position t of sequence b), at
    the three trained positions."""
    x = SEQ[key].swapaxes(0, 1)
    return x.reshape(4, *x.shape[2:]).astype(np.float64)[:3]
