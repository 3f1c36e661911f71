"""Tasks and reward heads, as the engine sees them.

A task declares reward heads; each head is a name, a weight and a vectorized function over a
batch of transitions::

    fn(obs, action, next_obs, achieved_goal, desired_goal, info) -> reward array [B]

The head ``reward = "env"`` is the environment's own reward; for goal environments it is
recomputed with the env's ``compute_reward`` when HER relabels a goal. A head's ``reward`` may
also name a method of the task class or a ``"module:function"`` anywhere on the import path.

A task class may also declare its heads itself with :func:`reward_head`; they are used when the
TOML file lists no ``[[task.heads]]``. Every custom head is run once on a probe batch when the run
is built (:func:`validate_heads`), so a wrong shape fails before any training, naming the head.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

RewardFn = Callable[..., np.ndarray]

_HEAD_ATTR = "_wheeler2_reward_head"

_EVALUATING: ContextVar[bool] = ContextVar("wheeler2_evaluating", default=False)


@contextmanager
def evaluating() -> Iterator[None]:
    """Heads called inside score an evaluation episode; see :func:`is_evaluating`."""
    token = _EVALUATING.set(True)
    try:
        yield
    finally:
        _EVALUATING.reset(token)


def is_evaluating() -> bool:
    """Whether the heads are being called on an evaluation episode. A head that learns from
    what it sees (a novelty bonus) must not learn then: evaluation is not a visit, and its rows
    would otherwise be a large share of what the head was trained on."""
    return _EVALUATING.get()


def reward_head(weight: float = 1.0, name: str | None = None) -> Callable[[RewardFn], RewardFn]:
    """Marks a task method as a reward head (its name defaults to the method's name)::

    class Reach(Task):
        @reward_head(weight=1.0)
        def distance(self, obs, action, next_obs, achieved_goal, desired_goal, info):
            return -np.linalg.norm(achieved_goal - desired_goal, axis=-1)
    """

    def mark(fn: RewardFn) -> RewardFn:
        setattr(fn, _HEAD_ATTR, (name or fn.__name__, float(weight)))
        return fn

    return mark


class Task:
    """Base class of user tasks (``tasks/*.py``). Subclasses add reward methods and ``success``."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    @classmethod
    def declared_heads(cls) -> list[tuple[str, str, float]]:
        """``(head name, method name, weight)`` of every :func:`reward_head` method, in
        definition order (base classes first)."""
        out: list[tuple[str, str, float]] = []
        seen: set[str] = set()
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                mark = getattr(value, _HEAD_ATTR, None)
                if mark is not None and attr not in seen:
                    seen.add(attr)
                    out.append((mark[0], attr, mark[1]))
        return out

    def success(
        self, achieved_goal: np.ndarray | None, desired_goal: np.ndarray | None, info: Any = None
    ) -> np.ndarray | None:
        """Per-row success flags at episode end, or None when the task has no notion of it."""
        return None

    @classmethod
    def defines_success(cls) -> bool:
        """Does this task say when a goal is reached (override :meth:`success`)?"""
        return cls.success is not Task.success

    def worth_keeping(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
        reward: np.ndarray,
    ) -> np.ndarray:
        """Per-row flags ``[B]`` bool: transitions the replay must keep (the seed's ``good``).

        Called on every vector step, beside the reward heads (``reward`` is their ``[B, H]``
        matrix), only when ``[buffer] keep < 1``: a flagged row, or with ``admit = "episode"``
        an episode with a flagged step, is always stored; the rest with chance ``keep``
        (``wheeler2/buffer/admission.py``). The base class flags nothing."""
        return np.zeros(len(obs), np.bool_)

    @classmethod
    def defines_worth_keeping(cls) -> bool:
        """Does this task flag transitions worth keeping (override :meth:`worth_keeping`)?"""
        return cls.worth_keeping is not Task.worth_keeping


@dataclass(frozen=True)
class Head:
    name: str
    weight: float
    fn: RewardFn | None  # None: the env's own reward


class RewardHeads:
    """Computes the ``[N, H]`` reward matrix of a vector step, and relabelled rewards for HER."""

    def __init__(
        self,
        heads: Sequence[Head],
        goal_reward: RewardFn | None = None,
        reached: Callable[..., np.ndarray] | None = None,
        worth_keeping: Callable[..., np.ndarray] | None = None,
    ) -> None:
        if not heads:
            raise ValueError("a task needs at least one reward head")
        # The task's worth_keeping (only while [buffer] keep < 1): the replay's admission flags.
        self.worth_keeping = worth_keeping
        # The task's success(achieved, desired): where HER's terminate_on_goal ends a transition.
        self.reached = reached
        self.heads = tuple(heads)
        self.names = tuple(h.name for h in heads)
        self.weights = tuple(float(h.weight) for h in heads)
        self._goal_reward = goal_reward

    def __len__(self) -> int:
        return len(self.heads)

    def compute(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
        env_reward: np.ndarray,
    ) -> np.ndarray:
        n = len(env_reward)
        out = np.empty((n, len(self.heads)), np.float32)
        for j, head in enumerate(self.heads):
            if head.fn is None:
                out[:, j] = env_reward
            else:
                out[:, j] = _checked(
                    head, head.fn(obs, action, next_obs, achieved_goal, desired_goal, info), n
                )
        return out

    def worth(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray | None,
        desired_goal: np.ndarray | None,
        info: Any,
        reward: np.ndarray,
    ) -> np.ndarray | None:
        """The task's ``worth_keeping`` flags of a vector step ([N] bool), or None without it."""
        if self.worth_keeping is None:
            return None
        n = len(reward)
        value = self.worth_keeping(obs, action, next_obs, achieved_goal, desired_goal, info, reward)
        flags = np.asarray(value)
        if flags.shape != (n,):
            raise ValueError(
                f"worth_keeping returned shape {flags.shape} for a batch of {n}; expected "
                f"({n},): one flag per transition{_where(self.worth_keeping)}"
            )
        return flags.astype(np.bool_, copy=False)

    def relabel(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        next_obs: np.ndarray,
        achieved_goal: np.ndarray,
        desired_goal: np.ndarray,
    ) -> np.ndarray:
        """Rewards of every head for new desired goals (HER); the env head uses compute_reward."""
        n = len(obs)
        out = np.empty((n, len(self.heads)), np.float32)
        for j, head in enumerate(self.heads):
            if head.fn is None:
                if self._goal_reward is None:
                    raise ValueError(
                        f"reward head {head.name!r} is the env reward, which cannot be "
                        "recomputed for a new goal: the env has no compute_reward"
                    )
                out[:, j] = _checked(head, self._goal_reward(achieved_goal, desired_goal, None), n)
            else:
                out[:, j] = _checked(
                    head, head.fn(obs, action, next_obs, achieved_goal, desired_goal, None), n
                )
        return out


def _checked(head: Head, value: Any, n: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float32)
    if arr.shape != (n,):
        arr = arr.reshape(-1) if arr.size == n else arr
        if arr.shape != (n,):
            raise ValueError(
                f"reward head {head.name!r} returned shape {np.shape(value)} for a batch of "
                f"{n}; expected ({n},): one reward per transition{_where(head.fn)}"
            )
    return arr


# What validate_heads checks each user function takes, positionally.
_HEAD_ARGS = ("obs", "action", "next_obs", "achieved_goal", "desired_goal", "info")
_SUCCESS_ARGS = ("achieved_goal", "desired_goal")
_WORTH_ARGS = (*_HEAD_ARGS, "reward")


def _where(fn: Any) -> str:
    """`` (Class.method at /path/file.py line 9)`` for a user's function, ``""`` for none."""
    if fn is None:
        return ""
    code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)
    if code is None:  # a callable object: where its __call__ is
        code = getattr(type(fn).__call__, "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    if code is None:
        return f" ({name})"
    return f" ({name} at {code.co_filename} line {code.co_firstlineno})"


def _check_signature(fn: Any, what: str, args: tuple[str, ...]) -> None:
    """``fn`` must take ``args`` positionally: a wrong signature is refused naming ``what`` and
    the function's file and line, not met as a bare TypeError at its first call."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or compiled callable: nothing to read
        return
    try:
        sig.bind(*args)
    except TypeError as exc:
        expected = ", ".join(args)
        raise ValueError(f"{what} cannot be called as ({expected}): {exc}{_where(fn)}") from None


def validate_heads(heads: RewardHeads, env: Any, steps: int = 3, seed: int = 0) -> None:
    """Run every custom head on a probe batch from a reset and ``steps`` random actions.

    A head whose function has the wrong signature, returns the wrong shape, or non-finite
    rewards, raises ``ValueError`` naming the head (and the function's file and line) here, when
    the run is built, instead of deep inside the first update (or, for HER, the first
    relabelled sample). So do the task's ``success`` (goal envs: HER's ``terminate_on_goal``
    calls it on every sample) and ``worth_keeping`` (called on every vector step). Several
    steps make the batch larger than one row, so a function that returns a scalar cannot pass
    by accident, and the batch is never as long as the goal, action or observation width, so a
    reduction over the wrong axis cannot either.
    """
    custom = [h for h in heads.heads if h.fn is not None]
    if (
        not custom
        and heads._goal_reward is None
        and heads.reached is None
        and heads.worth_keeping is None
    ):
        return
    for head in custom:
        _check_signature(head.fn, f"reward head {head.name!r}", _HEAD_ARGS)
    if heads.worth_keeping is not None:
        _check_signature(heads.worth_keeping, "worth_keeping", _WORTH_ARGS)
    info_ = env.info
    rng = np.random.default_rng(seed)
    first = env.reset(seed=seed)
    obs = first.obs
    while steps * len(obs) in (info_.goal_dim, info_.act_dim, info_.obs_dim):
        steps += 1
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "next", "ag", "dg", "info", "r")}
    for _ in range(steps):
        n = len(obs)
        if info_.discrete:
            action = rng.integers(0, info_.act_dim, n)
        else:
            action = rng.uniform(-1.0, 1.0, (n, info_.act_dim)).astype(np.float32)
        st = env.step(action)
        rows["obs"].append(obs)
        rows["act"].append(action)
        rows["next"].append(st.final_obs)
        rows["ag"].append(st.final_achieved_goal)
        rows["dg"].append(st.final_desired_goal)
        rows["info"].extend(st.infos)
        rows["r"].append(st.reward)
        obs = st.obs

    def cat(key: str) -> np.ndarray:
        return np.concatenate(rows[key])

    def cat_goal(key: str) -> np.ndarray | None:  # None for an env without goals
        return None if rows[key][0] is None else cat(key)

    batch = (cat("obs"), cat("act"), cat("next"))
    achieved, desired = cat_goal("ag"), cat_goal("dg")
    reward = heads.compute(*batch, achieved, desired, rows["info"], cat("r"))
    _check_finite(heads, reward, "its reward")
    if achieved is not None:
        # HER asks for the same rewards with other goals: the achieved goals of later steps.
        relabelled = heads.relabel(*batch, achieved, achieved[::-1].copy())
        _check_finite(heads, relabelled, "its HER-relabelled reward")
        if heads.reached is not None:
            _check_signature(heads.reached, "success", _SUCCESS_ARGS)
            flags = heads.reached(achieved, achieved[::-1].copy())
            n = len(achieved)
            # None: the task has no notion of success (the base class's answer).
            if flags is not None and np.shape(flags) != (n,):
                raise ValueError(
                    f"success returned shape {np.shape(flags)} for a batch of {n}; expected "
                    f"({n},): one flag per transition{_where(heads.reached)}"
                )
    heads.worth(*batch, achieved, desired, rows["info"], reward)  # refuses a wrong shape


def _check_finite(heads: RewardHeads, reward: np.ndarray, what: str) -> None:
    for j, name in enumerate(heads.names):
        if not np.all(np.isfinite(reward[:, j])):
            raise ValueError(f"reward head {name!r}: {what} on a probe batch is not finite")
