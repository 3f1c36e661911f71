"""Gymnasium spaces as the engine sees them: flat float32 observation rows, goal dicts, and
``[-1, 1]`` actions scaled onto a Box. A leaf module (numpy and gymnasium only): every adapter
(``gym``, ``envpool_vec``, ``pettingzoo``) takes these from here, none from another adapter.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def is_goal_space(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict) and all(k in space.spaces for k in GOAL_KEYS)


def flat_dim(space: spaces.Space) -> int:
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    raise TypeError(
        f"unsupported observation space {space!r}: expected Box, Discrete or MultiBinary"
    )


def box_bounds(env_id: str, space: spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """The flat float64 bounds of a Box action space, onto which [-1, 1] actions are scaled."""
    low = space.low.astype(np.float64).reshape(-1)
    high = space.high.astype(np.float64).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"{env_id}: an unbounded Box action space cannot be scaled from [-1, 1]")
    return low, high


def scale_box_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """[N, d] float32: actions in [-1, 1] (clipped first, so an exploring policy never sends an
    out-of-range action) mapped linearly onto the flat Box bounds ``low``, ``high`` [d]."""
    a = np.clip(np.asarray(action, dtype=np.float64).reshape(-1, low.shape[0]), -1.0, 1.0)
    return (low + (a + 1.0) * 0.5 * (high - low)).astype(np.float32)


def image_shape(space: spaces.Space) -> tuple[int, ...]:
    """The channels-first ``(C, H, W)`` of an image observation space, or ``()`` for any other.

    An image is a Box of dtype uint8 (camera pixels, Atari frames) or bool (MinAtar's channels)
    with 2 axes (``(H, W)``, one channel) or 3. Three axes are read as channels-last
    ``(H, W, C)`` when the last is at most 16 long and no longer than the others (gymnasium's
    and MinAtar's habit), else as channels-first already."""
    if not isinstance(space, spaces.Box) or space.dtype not in (np.uint8, np.bool_):
        return ()
    shape = tuple(int(d) for d in space.shape)
    if len(shape) == 2:
        return (1, *shape)
    if len(shape) != 3:
        return ()
    if channels_last(shape):
        return (shape[2], shape[0], shape[1])
    return shape


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a 3-axis image ``shape`` is read as ``(H, W, C)`` (:func:`image_shape`)."""
    # A tie goes to channels-last, gymnasium's convention: MinAtar's Seaquest is (10, 10, 10).
    return len(shape) == 3 and shape[2] <= 16 and shape[2] <= min(shape[0], shape[1])


def image_bytes(img: np.ndarray, hwc: bool, is_bool: bool) -> np.ndarray:
    """Images (one, or a batch along leading axes) as channels-first uint8, bool channels as
    0 / 255: what every adapter hands the engine."""
    if hwc:
        img = np.moveaxis(img, -1, -3)
    if is_bool:
        img = img.astype(np.uint8) * np.uint8(255)
    return img


def not_an_image_note(space: spaces.Space) -> str | None:
    """Why a Box of 3 or more axes that :func:`image_shape` does not take as an image will be
    read as flat float columns, or None: such an observation silently reaching an MLP (a stack
    of RGB frames, frames scaled to floats) trains slowly or not at all."""
    if not isinstance(space, spaces.Box) or len(space.shape) < 3 or image_shape(space):
        return None
    shape = tuple(int(d) for d in space.shape)
    if space.dtype in (np.uint8, np.bool_):
        fix = (
            "images are (H, W), (H, W, C) or (C, H, W): give single frames and stack them with "
            "[env] stack (not gymnasium's FrameStackObservation)"
        )
    else:
        fix = (
            "images are read as images only as uint8 (or bool): give unscaled frames (e.g. "
            "AtariPreprocessing(scale_obs=False)); the encoders scale them"
        )
    return (
        f"an observation of shape {shape} and dtype {space.dtype} is not read as an image and "
        f"becomes {int(np.prod(shape)):,} flat float inputs to an MLP; {fix}"
    )


class ObsFlattener:
    """Turns one copy's raw observation into a flat float32 row (one-hot for Discrete), or an
    image into a flat channels-first uint8 row (bool channels as 0 / 255, so that every image
    reaches the encoders on one scale)."""

    def __init__(self, space: spaces.Space) -> None:
        self.discrete = isinstance(space, spaces.Discrete)
        # Discrete(n, start=s) takes the values s .. s + n - 1: one-hot column value - s.
        self._start = int(space.start) if isinstance(space, spaces.Discrete) else 0
        self.dim = flat_dim(space)
        self.image_shape = image_shape(space)
        raw = tuple(getattr(space, "shape", ()) or ())
        # Channels-last input is transposed to channels-first once per observation. Decided by
        # the rule itself: a square (10, 10, 10) image reads the same either way round.
        self._hwc = bool(self.image_shape) and channels_last(raw)
        self._bool = getattr(space, "dtype", None) == np.bool_
        self.dtype = np.uint8 if self.image_shape else np.float32
        looks = not_an_image_note(space)
        if looks is not None:
            warnings.warn(looks, stacklevel=2)

    def __call__(self, raw: Any, out: np.ndarray) -> None:
        if self.image_shape:
            out[:] = image_bytes(np.asarray(raw), self._hwc, self._bool).reshape(-1)
        elif self.discrete:
            out[:] = 0.0
            out[int(raw) - self._start] = 1.0
        elif getattr(raw, "ndim", 0) == 1:
            out[:] = raw  # the common flat Box: numpy casts on assignment, no temporary
        else:
            out[:] = np.asarray(raw, dtype=np.float32).reshape(-1)


def is_masked_space(space: spaces.Space) -> bool:
    """A turn-based game's observation: ``{"observation": Box, "action_mask": Box}``
    (PettingZoo classic)."""
    return isinstance(space, spaces.Dict) and set(space.spaces) >= {"observation", "action_mask"}


def masked_obs_dim(space: spaces.Space) -> int:
    """The width of a masked row: the flat observation, then one column per action."""
    return flat_dim(space["observation"]) + flat_dim(space["action_mask"])


def encode_masked(raw: dict[str, Any], out: np.ndarray) -> None:
    """One masked row (docs/envs.md, "Action masks"): the observation flattened, then the
    legal-action mask as 1.0 / 0.0 in the last ``act_dim`` columns. The mask rides in the
    observation so that it travels through every replay path (n-step, sequences, shards) with
    no column of its own."""
    mask = np.asarray(raw["action_mask"], np.float32).reshape(-1)
    out[: out.shape[0] - mask.shape[0]] = np.asarray(raw["observation"], np.float32).reshape(-1)
    out[out.shape[0] - mask.shape[0] :] = mask
