"""A novelty bonus as a reward head: random network distillation (Burda et al., 2018).

A fixed, randomly initialized *target* network f maps the next observation to a feature vector;
a *predictor* g is trained to match it on the observations the member actually reaches. The
prediction error mean((g(s') − f(s'))²) stays large for states unlike those seen so far and shrinks
where the member has been, so it is a count-free "how new is this state" signal::

    [[task.heads]]
    name = "novelty"
    reward = "wheeler2.novelty:rnd"
    weight = 0.1

As in the paper, observations are normalized by running mean / std and clipped to [−5, 5] (so
the random target sees inputs of the same scale whatever the env's units), and the bonus is
divided by a running estimate of its own std (so ``weight`` means the same thing in every env).

Each call with ``info`` (a member's vector step, or ``validate_heads``' probe) folds the batch
into the observation statistics (so a first batch is not normalized by empty ones), computes its
bonus with the current predictor, then takes one Adam step of the predictor on it and folds the
bonuses into their statistics before dividing them by its std. A call with ``info=None`` is HER
recomputing rewards for a new goal: the bonus depends only on ``next_obs``, so it is computed
without training, which would otherwise count replayed (not visited) states as visits. Calls
on an evaluation episode (:func:`wheeler2.task.is_evaluating`) do not train either.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from wheeler2.task import is_evaluating

OBS_CLIP = 5.0


class RunningMeanStd:
    """Mean and (population) variance of every row seen, per column, merged batch by batch
    (Chan et al.'s parallel update; float64, so long runs do not drift)."""

    def __init__(self, dim: int) -> None:
        self.count = 0
        self.mean = np.zeros(dim, np.float64)
        self._m2 = np.zeros(dim, np.float64)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        n = len(x)
        if n == 0:
            return
        mean_b = x.mean(axis=0)
        m2_b = ((x - mean_b) ** 2).sum(axis=0)
        total = self.count + n
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n / total)
        self._m2 = self._m2 + m2_b + delta**2 * (self.count * n / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self._m2 / max(self.count, 1))

    def state_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": torch.from_numpy(self.mean.copy()),
            "m2": torch.from_numpy(self._m2.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])
        self.mean = np.asarray(state["mean"], np.float64).copy()
        self._m2 = np.asarray(state["m2"], np.float64).copy()


def _mlp(inp: int, hidden: Sequence[int], out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inp, h), nn.ReLU()]
        inp = h
    layers.append(nn.Linear(inp, out))
    return nn.Sequential(*layers)


class RND:
    """One RND bonus: a fixed random target, a trained predictor and their running statistics.

    Called as a reward head, ``rnd(obs, action, next_obs, achieved_goal, desired_goal, info)``
    returns the normalized bonus of every row of ``next_obs``, float32 ``[N]``. The networks are
    built on the first call, from its observation width.
    """

    def __init__(
        self,
        seed: int = 0,
        hidden: Sequence[int] = (64, 64),
        out_dim: int = 64,
        lr: float = 1e-3,
    ) -> None:
        self.seed = int(seed)
        self.hidden = tuple(int(h) for h in hidden)
        self.out_dim = int(out_dim)
        self.lr = float(lr)
        self.obs_dim: int | None = None
        self.target: nn.Module | None = None
        self.predictor: nn.Module | None = None
        self.steps = 0  # predictor updates taken

    def _build(self, dim: int) -> None:
        # A private seed: the global torch RNG belongs to the agent, whose runs must not change
        # because a head was added (fork_rng restores it afterwards).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.target = _mlp(dim, self.hidden, self.out_dim)
            self.predictor = _mlp(dim, self.hidden, self.out_dim)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=self.lr)
        self.obs_rms = RunningMeanStd(dim)
        self.bonus_rms = RunningMeanStd(1)
        self.obs_dim = dim

    def __call__(
        self,
        obs: np.ndarray,
        action: np.ndarray | None,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
    ) -> np.ndarray:
        x = np.asarray(next_obs, np.float32).reshape(len(next_obs), -1)
        if self.obs_dim is None:
            self._build(x.shape[1])
        elif x.shape[1] != self.obs_dim:
            raise ValueError(
                f"RND head built for observations of width {self.obs_dim}, got {x.shape[1]}"
            )
        # None: HER relabelling a stored transition; an eval episode is no visit either.
        learn = info is not None and not is_evaluating()
        if learn:
            self.obs_rms.update(x)
        raw = self._error(self._normalized(x), learn)
        if learn:
            self.bonus_rms.update(raw[:, None])
        return (raw / self._bonus_scale()).astype(np.float32)

    def bonus(self, next_obs: np.ndarray) -> np.ndarray:
        """The normalized bonus of ``next_obs`` with no training and no statistics update."""
        return self(next_obs, None, next_obs, None, None, None)

    def _normalized(self, x: np.ndarray) -> torch.Tensor:
        z = (x - self.obs_rms.mean) / (self.obs_rms.std + 1e-8)
        return torch.as_tensor(np.clip(z, -OBS_CLIP, OBS_CLIP), dtype=torch.float32)

    def _error(self, z: torch.Tensor, learn: bool) -> np.ndarray:
        """Per-row squared prediction error before this batch's update; then one Adam step."""
        assert self.target is not None and self.predictor is not None
        with torch.no_grad():
            goal = self.target(z)
        if not learn:
            with torch.no_grad():
                return ((self.predictor(z) - goal) ** 2).mean(-1).double().numpy()
        err = ((self.predictor(z) - goal) ** 2).mean(-1)
        self.optimizer.zero_grad(set_to_none=True)
        err.mean().backward()
        self.optimizer.step()
        self.steps += 1
        return err.detach().double().numpy()

    def state_dict(self) -> dict[str, Any]:
        """Both networks, the predictor's optimizer and the running statistics, as tensors and
        numbers (what ``torch.load(weights_only=True)`` takes back); empty before first use."""
        if self.predictor is None or self.target is None:
            return {}
        return {
            "obs_dim": self.obs_dim,
            "target": self.target.state_dict(),
            "predictor": self.predictor.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state_dict(),
            "bonus_rms": self.bonus_rms.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back :meth:`state_dict`'s output (an empty one leaves the RND unbuilt)."""
        if not state:
            return
        self._build(int(state["obs_dim"]))
        assert self.target is not None and self.predictor is not None
        self.target.load_state_dict(state["target"])
        self.predictor.load_state_dict(state["predictor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.bonus_rms.load_state_dict(state["bonus_rms"])
        self.steps = int(state["steps"])

    def _bonus_scale(self) -> float:
        std = float(self.bonus_rms.std[0])
        if self.bonus_rms.count >= 2 and std > 0.0:
            return std
        # Too few bonuses for a std yet (a first batch of one row): its mean sets the scale.
        mean = float(self.bonus_rms.mean[0])
        return mean if mean > 0.0 else 1.0


class RNDHead:
    """A reward head whose :class:`RND` is made lazily, one per process and observation width.

    The engine resolves ``"module:attr"`` to one object per process, and every member process
    (local and Ray backends) imports it afresh, so each member there trains its own predictor
    on its own visits. Within one process (the serial backend, a ``wheeler2.api.run`` call,
    tests) members with the same observation width share one predictor: the bonus then counts
    the whole team's visits, and a second run in the same process continues the first run's
    predictor unless :meth:`reset` is called between them. The state is not checkpointed:
    a resumed run starts a new predictor.
    """

    def __init__(self, name: str = "rnd", **rnd_kwargs: Any) -> None:
        # head_reward_spec writes a head back as "module:qualname" (the run's config.toml).
        self.__name__ = self.__qualname__ = name
        self.rnd_kwargs = rnd_kwargs
        self._states: dict[tuple[int, int], RND] = {}

    def state(self, obs_dim: int) -> RND:
        """This process's RND for observations of width ``obs_dim``, made on first use."""
        # The pid: a process forked after the parent used the head starts its own predictor.
        key = (os.getpid(), int(obs_dim))
        if key not in self._states:
            self._states[key] = RND(**self.rnd_kwargs)
        return self._states[key]

    def reset(self) -> None:
        """Forget every predictor and statistic (the next call starts from scratch)."""
        self._states.clear()

    def __call__(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
    ) -> np.ndarray:
        width = int(np.prod(np.shape(next_obs)[1:]))
        return self.state(width)(obs, action, next_obs, achieved_goal, desired_goal, info)

    def __repr__(self) -> str:
        return f"RNDHead({self.__name__!r}, {self.rnd_kwargs})"


# The head the config names: reward = "wheeler2.novelty:rnd".
rnd = RNDHead("rnd")
