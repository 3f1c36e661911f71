"""n-step windows: follow episode links from a sampled step, then fold rewards into returns.

Gathering happens under the lock (the ring may move underneath otherwise); folding happens
outside it. A window stops after a terminal or truncated step, or where the next step is not
stored (not inserted yet, or already overwritten, or a different episode now sits in its slot).
A window cut short after k steps is still a correct k-step target: the bootstrap discount is
``gamma ** k`` from the next observation of the last step taken, and 0 after a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .storage import Storage


@dataclass
class Window:
    """Per-step arrays stacked as [n, B, ...]; ``alive[k]`` says whether step k is in the window."""

    slots: np.ndarray  # int64 [n, B]
    alive: np.ndarray  # bool [n, B]
    reward: np.ndarray  # float32 [n, B, H]
    terminated: np.ndarray  # bool [n, B]
    last: np.ndarray  # int64 [B] slot of the last step taken
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # [n, B, ...] fields for HER


def gather_window(
    storage: Storage, slot0: np.ndarray, total: int, n: int, extra: tuple[str, ...] = ()
) -> Window:
    """Walk up to ``n`` steps from ``slot0`` (which the caller validated); lock held."""
    a = storage.arrays
    c = storage.capacity
    b = slot0.shape[0]
    slots = np.empty((n, b), dtype=np.int64)
    alive = np.zeros((n, b), dtype=bool)
    slots[0] = slot0
    alive[0] = True
    slot = slot0
    live = alive[0].copy()
    for k in range(1, n):
        done = np.take(a["terminated"], slot) | np.take(a["truncated"], slot)
        link = np.take(a["next"], slot)
        live = live & ~done & (link >= 0)
        if live.any():
            nxt = np.where(live, link, 0) % c
            live &= storage.valid(np.where(live, link, -1), total)
            live &= np.take(a["episode"], nxt) == np.take(a["episode"], slot)
            live &= np.take(a["step"], nxt) == np.take(a["step"], slot) + 1
            slot = np.where(live, nxt, slot)
        slots[k] = slot
        alive[k] = live
        if not live.any():
            slots[k + 1 :] = slot
            break
    # alive is monotone along k, so the last step taken is the deepest alive one.
    flat = slots.reshape(-1)
    reward = storage.gather("reward", flat).reshape(n, b, -1)
    terminated = np.take(a["terminated"], flat).reshape(n, b)
    extras = {name: storage.gather(name, flat).reshape(n, b, -1) for name in extra}
    return Window(slots, alive, reward, terminated, slot, extras)


def fold_returns(
    reward: np.ndarray, alive: np.ndarray, terminated: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(n-step return [B, H] float32, bootstrap discount [B] float32) of stacked windows."""
    n = reward.shape[0]
    powers = gamma ** np.arange(n, dtype=np.float64)
    mask = alive * powers[:, None]  # [n, B]
    ret = np.einsum("nb,nbh->bh", mask, reward.astype(np.float64))
    length = alive.sum(axis=0)
    last = length - 1
    ended = terminated[last, np.arange(alive.shape[1])]
    discount = np.where(ended, 0.0, gamma**length)
    return ret.astype(np.float32), discount.astype(np.float32)
