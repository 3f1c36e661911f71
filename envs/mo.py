"""MO-Gymnasium adapter: a vector-reward env whose objectives become the run's reward heads.

``[env] id = "mo:mo-hopper-v5"`` builds ``mo_gymnasium.make("mo-hopper-v5")`` copies. Two keys
of ``[env] kwargs`` belong to this adapter (every other key goes to the env):

* ``head_weights``: one weight per objective (default all ones). The env's scalar reward, the
  one evaluation sums, is the weighted sum ``sum_k w_k r_k``; with ``heads = "vector"`` the same
  weights are the heads' weights, so a multi-critic actor maximizes that very sum.
* ``heads``: ``"vector"`` (default) gives one reward head per objective, named from the env;
  ``"sum"`` gives the single ``env`` head (the weighted sum), for a one-critic baseline on the
  same env and the same eval return.

The vector reward of each step travels in ``info["reward_vector"]``: the heads read it there
(:class:`Objective`), so the engine's reward-head path, replay and logging serve it unchanged.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import gymnasium as gym
import numpy as np
from wheeler2.envs.gym import GymVecEnv

from wheeler2.config import ConfigError
from wheeler2.task import Head

INFO_KEY = "reward_vector"
HEAD_MODES = ("vector", "sum")
# MO-Gymnasium's reward spaces carry no names; these follow its env docstrings, by id without
# the version and by reward dimension (a variant with another dimension falls back to r0..).
KNOWN_NAMES: dict[tuple[str, int], tuple[str, ...]] = {
    ("mo-hopper", 3): ("forward", "height", "energy"),
    ("mo-hopper-2obj", 2): ("forward", "height"),
    ("mo-hopper", 2): ("forward", "height"),  # cost_objective = false
    ("mo-halfcheetah", 2): ("forward", "energy"),
    ("mo-walker2d", 2): ("forward", "energy"),
    ("mo-swimmer", 2): ("forward", "energy"),
    ("mo-humanoid", 2): ("forward", "energy"),
    ("mo-ant", 3): ("x_velocity", "y_velocity", "energy"),
    ("mo-ant-2obj", 2): ("x_velocity", "y_velocity"),
    ("mo-ant", 2): ("x_velocity", "y_velocity"),  # cost_objective = false
    ("mo-lunar-lander-continuous", 4): ("landing", "shaping", "main_fuel", "side_fuel"),
    ("mo-lunar-lander", 4): ("landing", "shaping", "main_fuel", "side_fuel"),
    ("mo-mountaincarcontinuous", 2): ("time", "fuel"),
    ("mo-mountaincar", 3): ("time", "reverse", "forward"),
    ("mo-reacher", 4): ("target1", "target2", "target3", "target4"),
}
_OBJECTIVE = re.compile(r"objective_(\d+)")


MISSING_PACKAGE = (
    "'mo:' ids need the mo-gymnasium package, which is not installed; install it with "
    "pip install 'wheeler2[mo]' (or pip install mo-gymnasium)"
)


def mo_ids() -> list[str] | None:
    """The vector-reward ids MO-Gymnasium registers (importing it registers them), or None when
    the package is missing."""
    try:
        import mo_gymnasium  # noqa: F401 - registers the ids
    except ImportError:
        return None
    return sorted(i for i in gym.registry if i.startswith("mo-"))


def id_problem(env_id: str) -> str | None:
    """What is wrong with ``mo:<env_id>`` (package missing, unknown id), or None."""
    ids = mo_ids()
    if ids is None:
        return MISSING_PACKAGE
    if env_id in ids:
        return None
    close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"unknown MO-Gymnasium env 'mo:{env_id}'; {hint}expected 'mo:<id>' with one of its "
        f"{len(ids)} vector-reward ids, e.g. 'mo:mo-hopper-v5'"
    )


def head_names(env_id: str, env: gym.Env, dim: int) -> tuple[str, ...]:
    """The env's own objective names (a ``reward_names`` attribute, for envs that have one),
    else the known MO-Gymnasium names, else ``r0..r{dim-1}``."""
    own = getattr(env.unwrapped, "reward_names", None)
    if own is not None and len(own) == dim:
        return tuple(str(n) for n in own)
    base = re.sub(r"-v\d+$", "", env_id)
    return KNOWN_NAMES.get((base, dim), tuple(f"r{k}" for k in range(dim)))


class Objective:
    """Reward head ``k``: objective ``k`` of the vector reward, read from each row's info.

    A module attribute as ``wheeler2.envs.mo:objective_<k>`` (see :func:`__getattr__`), so a run's
    written ``config.toml`` names its heads and ``resume`` / ``eval`` build them again.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.__module__ = __name__
        self.__qualname__ = self.__name__ = f"objective_{k}"

    def __call__(
        self, obs: Any, action: Any, next_obs: Any, achieved_goal: Any, desired_goal: Any, info: Any
    ) -> np.ndarray:
        if info is None:  # only HER asks without infos, and an MO env has no goals
            raise ValueError(f"{self.__qualname__} reads info['{INFO_KEY}'] and got no infos")
        return np.array([row[INFO_KEY][self.k] for row in info], np.float32)

    def __reduce__(self) -> tuple:
        return (Objective, (self.k,))


def __getattr__(name: str) -> Objective:
    match = _OBJECTIVE.fullmatch(name)
    if match is None:
        raise AttributeError(f"module '{__name__}' has no attribute '{name}'")
    return Objective(int(match.group(1)))


class VectorReward(gym.Wrapper):
    """Scalar reward ``w . r`` for the engine; the vector itself in ``info["reward_vector"]``."""

    def __init__(self, env: gym.Env, weights: np.ndarray) -> None:
        super().__init__(env)
        self.weights = weights

    def step(self, action: Any) -> tuple:
        obs, vec, terminated, truncated, info = self.env.step(action)
        vec = np.asarray(vec, np.float32).reshape(-1)
        info = dict(info)
        info[INFO_KEY] = vec
        # float64 accumulation, then one cast: the eval return is this sum, summed over steps.
        return obs, float(np.dot(vec.astype(np.float64), self.weights)), terminated, truncated, info


def _weights(raw: Any, dim: int, env_id: str) -> np.ndarray:
    key = "kwargs.head_weights"
    if raw is None:
        return np.ones(dim)
    ok = isinstance(raw, (list, tuple)) and all(
        isinstance(w, (int, float)) and not isinstance(w, bool) for w in raw
    )
    if not ok:
        raise ConfigError(None, "[env]", key, f"expected an array of {dim} numbers, got {raw!r}")
    if len(raw) != dim:
        raise ConfigError(
            None,
            "[env]",
            key,
            f"expected {dim} weights, one per objective of {env_id} (its reward has {dim}), "
            f"got {len(raw)}",
        )
    w = np.asarray(raw, np.float64)
    if not np.all(np.isfinite(w)):
        raise ConfigError(None, "[env]", key, f"expected finite numbers, got {raw!r}")
    return w


class MOVecEnv(GymVecEnv):
    """``num_envs`` copies of an MO-Gymnasium env, stepped like any gymnasium id, whose scalar
    reward is the weighted sum of the objectives. ``reward_heads`` tells the engine the heads."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> None:
        problem = id_problem(env_id)
        if problem:
            raise ConfigError(None, "[env]", "id", problem)
        kwargs = dict(kwargs)
        raw_weights = kwargs.pop("head_weights", None)
        mode = kwargs.pop("heads", "vector")
        if mode not in HEAD_MODES:
            raise ConfigError(
                None,
                "[env]",
                "kwargs.heads",
                f"expected one of {', '.join(repr(m) for m in HEAD_MODES)}, got {mode!r}",
            )
        # The passive checker would warn on every vector reward; MO envs break that rule by design.
        probe = gym.make(env_id, disable_env_checker=True, **kwargs)
        try:
            space = probe.unwrapped.reward_space
            dim = int(np.prod(space.shape))
            self.objective_names = head_names(env_id, probe, dim)
        finally:
            probe.close()
        self.weights = _weights(raw_weights, dim, env_id)
        self.head_mode = mode
        super().__init__(env_id, kwargs, num_envs, seed)

    def _make_one(self, env_id: str, kwargs: dict[str, Any]) -> gym.Env:
        return VectorReward(gym.make(env_id, disable_env_checker=True, **kwargs), self.weights)

    @property
    def reward_heads(self) -> list[Head] | None:
        """One head per objective with its weight, or None (``heads = "sum"``): the engine's
        default single ``env`` head, the weighted sum."""
        if self.head_mode == "sum":
            return None
        return [
            Head(name, float(w), Objective(k))
            for k, (name, w) in enumerate(zip(self.objective_names, self.weights))
        ]


def make(env_id: str, kwargs: dict[str, Any], num_envs: int, seed: int) -> MOVecEnv:
    """Registry entry point for ``"mo:<id>"``."""
    return MOVecEnv(env_id, kwargs, num_envs, seed)
