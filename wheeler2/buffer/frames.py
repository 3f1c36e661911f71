"""Image observations in the replay: every uint8 frame stored once.

A stacked image observation ``o_t`` is its ``k`` newest frames along the channel axis, and
``o_{t+1}`` shares ``k - 1`` of them, so storing ``obs`` and ``next_obs`` whole would keep each
frame ``2 k`` times. Here the frames live in a ring of their own (``frames [F, C, H, W]``, each
with its absolute frame number in ``frame_abs``), and each transition slot holds ``k + 1``
absolute frame numbers (``refs``): ``obs`` is frames ``refs[:k]``, ``next_obs`` frames
``refs[1:]``. A transition adds one frame, the newest of its next observation; an episode's first
transition adds the frames of its first observation too (one frame when the stack repeats it,
as ``wheeler2.env.FrameStack`` does).

Stacks are rebuilt at sample time from the references each step's writer recorded along its own
episode, so a stack never holds a frame of another episode: at step 0, and wherever a copy's
history is unknown or does not continue (the observation is not the last next observation it
stored, all ``k`` frames compared), the writer stores the observation's own frames instead of
linking back.

The frame ring holds ``F = capacity + ceil(capacity * frame_slack) + k`` frames: one per
transition, the slack for episodes' first frames. A slot whose frames the ring has overwritten
is no longer valid (``Storage.valid``): with episodes shorter than ``1 / frame_slack`` steps
that is the oldest part of the slot ring, which the samplers stop drawing from
(``sampler.first_valid``); a stray invalid slot above it is redrawn, as any overwritten slot.
"""

from __future__ import annotations

import math

import numpy as np

from .config import BufferConfig, Layout


def frame_capacity(layout: Layout, cfg: BufferConfig) -> int:
    """Frames the ring keeps for a replay of ``cfg.capacity`` transitions."""
    return int(cfg.capacity + math.ceil(cfg.capacity * cfg.frame_slack) + layout.stack)


def frame_specs(layout: Layout, cfg: BufferConfig) -> dict[str, tuple[tuple[int, ...], type]]:
    """The shared segments of an image replay, beside the transition fields."""
    f = frame_capacity(layout, cfg)
    return {
        "frames": ((f, *layout.frame_shape), np.uint8),
        "frame_abs": ((f,), np.int64),
        "refs": ((cfg.capacity, layout.stack + 1), np.int64),
    }


def decode(refs: np.ndarray, frame_start: int) -> np.ndarray:
    """A block's references as absolute frame numbers: a negative one ``-(i + 1)`` is frame
    ``i`` of the block (numbered once the block is inserted at ``frame_start``), any other is
    already absolute (a frame of an earlier block)."""
    return np.where(refs < 0, frame_start - refs - 1, refs)


class FrameStager:
    """A writer's side: turns staged ``obs`` / ``next_obs`` rows into new frames and references.

    Per env copy it remembers the absolute numbers of the ``k`` newest frames of its current
    episode and the last next observation it stored, so a block continues its copy's stacks
    from the previous block without storing their frames again."""

    def __init__(self, layout: Layout, num_envs: int) -> None:
        self.k = layout.stack
        self.size = layout.frame_size
        self.history = np.zeros((num_envs, self.k), np.int64)
        self.known = np.zeros(num_envs, bool)  # history holds this copy's last frames
        # The whole last next observation, not only its newest frame: a row left out (valid =
        # False) can move a stack on while its newest frame repeats (a still screen), and a
        # link back would then rebuild the older frames wrong.
        self.last = np.zeros((num_envs, self.k * self.size), np.uint8)
        self._pending: dict[int, list[int]] = {}

    def pack(
        self, obs: np.ndarray, next_obs: np.ndarray, env_of_row: np.ndarray, step: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(new frames ``[m, frame_size]`` uint8, references ``[n, k + 1]`` in the encoding of
        :func:`decode`) for ``n`` rows, each copy's rows consecutive and in step order."""
        k, size = self.k, self.size
        n = obs.shape[0]
        refs = np.empty((n, k + 1), np.int64)
        frames: list[np.ndarray] = []
        hist: list[int] | None = None
        env = -1
        last = self.last[0]
        for i in range(n):
            e = int(env_of_row[i])
            if e != env:
                if env >= 0 and hist is not None:
                    self._pending[env] = hist
                env = e
                hist = [int(r) for r in self.history[e]] if self.known[e] else None
                last = self.last[e]
            o = obs[i].reshape(k, size)
            if hist is None or step[i] == 0 or not np.array_equal(obs[i], last):
                # An episode starts (the one rule that keeps stacks inside episodes), or the
                # copy's history does not lead here (a row left out, a writer that starts
                # mid-episode): this observation's own frames, a repeated one stored once.
                hist = []
                for t in range(k):
                    if t and np.array_equal(o[t], o[t - 1]):
                        hist.append(hist[-1])
                    else:
                        frames.append(o[t])
                        hist.append(-len(frames))
            frames.append(next_obs[i, (k - 1) * size :])
            refs[i, :k] = hist
            refs[i, k] = -len(frames)
            hist = [*hist[1:], -len(frames)]
            last = next_obs[i]
            self.last[e] = last
        if env >= 0 and hist is not None:
            self._pending[env] = hist
        out = np.stack(frames) if frames else np.zeros((0, size), np.uint8)
        return out, refs

    def inserted(self, frame_start: int) -> None:
        """The block went in at ``frame_start``: each flushed copy's history becomes absolute
        (whether the next row continues it is decided there: step 0 never does)."""
        for e, hist in self._pending.items():
            self.history[e] = decode(np.asarray(hist, np.int64), frame_start)
            self.known[e] = True
        self._pending = {}
