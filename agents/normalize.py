"""Running observation normalization for off-policy learners (``normalize_obs = true``).

Goal tasks such as FetchReach mix positions in metres with velocities and goals on other scales;
normalizing each input dimension to zero mean and unit variance (clipped, so a rare outlier cannot
saturate the first layer) lets one learning rate suit all of them. The statistics are updated only
from the transitions the agent observes while acting, never from evaluation, and are part of the
agent's ``state_dict`` so a resumed or evaluated checkpoint sees the same inputs it trained on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class NormStats(nn.Module):
    """The float32 tensors a :class:`RunningNorm` normalizes with, as buffers (not in the
    agent's checkpoint, which keeps the exact float64 statistics): what a learner publishes with
    its actor (``wheeler2.sync.publish_view``, name ``obs_norm``), and what a syncing member that
    takes the learner's input layer receives in place. ``follow`` is set on that member's copy:
    its normalizer then acts with the pulled values and folds in none of its own."""

    def __init__(self, dim: int, clip: float, device: Any) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim, device=device))
        self.register_buffer("inv_std", torch.ones(dim, device=device))
        self.register_buffer("clip", torch.full((1,), float(clip), device=device))
        self.register_buffer("count", torch.zeros(1, device=device))
        self.follow = False


class RunningNorm:
    """Per-dimension running mean / variance (parallel-merge form, exact in float64).

    ``normalize`` returns ``clip((x - mean) / max(std, eps), -clip, clip)``; ``eps`` keeps a
    constant dimension (a fixed goal coordinate) from being blown up. The last ``keep_last``
    columns pass through as they came: a legal-action mask (``agents/parts/masks.py``) must
    stay 0 / 1 wherever the agent reads it back, and a small ``clip`` would cut its 1.0.
    """

    def __init__(
        self,
        dim: int,
        clip: float = 5.0,
        eps: float = 1e-2,
        device: Any = "cpu",
        keep_last: int = 0,
    ):
        self.dim = int(dim)
        self.clip = float(clip)
        self.eps = float(eps)
        self.keep_last = int(keep_last)
        self.device = torch.device(device)
        self.count = 0
        self.mean = np.zeros(self.dim, np.float64)
        self.m2 = np.zeros(self.dim, np.float64)  # sum of squared deviations from the mean
        self.stats = NormStats(self.dim, self.clip, self.device)
        self._refresh()

    @property
    def var(self) -> np.ndarray:
        return self.m2 / self.count if self.count else np.ones(self.dim)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    @property
    def follows(self) -> bool:
        """Whether it acts with a learner's pulled statistics (see :class:`NormStats`)."""
        return self.stats.follow

    def update(self, x: np.ndarray) -> None:
        """Fold a batch ``[N, dim]`` of observed rows into the statistics (none while it
        follows a learner's)."""
        if self.stats.follow:
            return
        x = np.asarray(x, np.float64).reshape(-1, self.dim)
        n = len(x)
        if n == 0:
            return
        b_mean = x.mean(0)
        b_m2 = ((x - b_mean) ** 2).sum(0)
        total = self.count + n
        delta = b_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + b_m2 + delta**2 * (self.count * n / total)
        self.count = total
        self._refresh()

    def start(self, x: np.ndarray) -> None:
        """Fold in ``x`` only if nothing has been seen yet (an agent's first acting batch)."""
        if self.count == 0:
            self.update(x)

    def _refresh(self) -> None:
        # Cached tensors: normalize runs on every act and every update, update far less often.
        # Written in place: a weight publisher reads them from the NormStats buffers.
        s = self.stats
        if s.follow:  # the learner's values, written by the weight pull
            return
        s.mean.copy_(torch.as_tensor(self.mean, dtype=torch.float32))
        s.inv_std.copy_(torch.as_tensor(1.0 / np.maximum(self.std, self.eps), dtype=torch.float32))
        s.count.fill_(float(self.count))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stats
        if s.follow:  # the learner's clip too: its weights saw inputs clipped there
            out = torch.clamp((x - s.mean) * s.inv_std, -s.clip, s.clip)
        else:
            out = ((x - s.mean) * s.inv_std).clamp_(-self.clip, self.clip)
        if self.keep_last:
            k = self.dim - self.keep_last
            out[..., k:] = x[..., k:]
        return out

    def state_dict(self) -> dict[str, Any]:
        # Tensors, not numpy arrays: checkpoints load with weights_only=True, which refuses
        # numpy's pickled arrays (eval and resume of every normalize_obs run failed on that).
        # float64 keeps the statistics exact; CPU so a checkpoint loads on any machine.
        return {
            "count": int(self.count),
            "mean": torch.from_numpy(self.mean.copy()),
            "m2": torch.from_numpy(self.m2.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:  # a checkpoint from before normalize_obs existed: keep fresh statistics
            return
        self.count = int(state["count"])
        self.mean = _float64(state["mean"], self.dim, "mean")
        self.m2 = _float64(state["m2"], self.dim, "m2")
        self._refresh()


def _float64(value: Any, dim: int, key: str) -> np.ndarray:
    """A saved statistic (tensor; numpy array or list from older code) as a fresh float64 array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    arr = np.array(value, dtype=np.float64)  # np.array copies: the state stays untouched
    if arr.shape != (dim,):
        raise ValueError(f"obs_norm.{key} has shape {arr.shape}, expected ({dim},)")
    return arr


class IdentityNorm:
    """Stands in for :class:`RunningNorm` when ``normalize_obs = false``: no cost, no state."""

    def update(self, x: np.ndarray) -> None:
        pass

    def start(self, x: np.ndarray) -> None:
        pass

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def make_obs_norm(
    enabled: bool, dim: int, clip: float, device: Any, keep_last: int = 0
) -> RunningNorm | IdentityNorm:
    """The agent's input normalization; ``keep_last`` columns (an action mask) left raw."""
    if not enabled:
        return IdentityNorm()
    return RunningNorm(dim, clip=clip, device=device, keep_last=keep_last)
