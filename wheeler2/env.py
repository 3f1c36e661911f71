"""The contract between the engine and an environment adapter.

Adapters live in ``envs/`` (gymnasium, PettingZoo, Unity). Each one is a vector of ``num_envs``
copies that autoresets: when copy ``i`` ends its episode, ``step`` returns the true last
observation in ``final_obs[i]`` and the first observation of the next episode in ``obs[i]``, so
rollouts run on across calls without the engine ever calling ``reset`` again.

Continuous actions cross this boundary in ``[-1, 1]``; the adapter maps them onto the Box.
Goal environments (gymnasium ``GoalEnv`` dict observations) report the observation part in
``obs`` and the goals in ``achieved_goal`` / ``desired_goal``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class EnvInfo:
    """Static facts about an adapter, read by the engine to size buffers and networks."""

    obs_dim: int  # the observation part only (goal envs: without the goals)
    act_dim: int  # Box: dimension; Discrete: number of actions
    discrete: bool
    goal_dim: int = 0  # 0 for envs without goals
    max_episode_steps: int | None = None
    # Multi-agent adapters: the agents (PettingZoo names, Unity behaviors) this vector drives.
    agents: tuple[str, ...] | None = None
    # Turn-based games: the last act_dim observation columns are the legal-action mask
    # (envs/spaces.py encode_masked); discrete actions only.
    action_mask: bool = False
    # Image observations: the channels-first (C, H, W) of one observation, rows of obs_dim =
    # C * H * W uint8 values (frames stacked along C with [env] stack); () for flat float32.
    obs_shape: tuple[int, ...] = ()
    # Frames per observation (an image stack's k, obs_shape[0] = stack * channels per frame).
    stack: int = 1

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """The (C, H, W) of one frame of an image observation; () for flat ones."""
        if not self.obs_shape:
            return ()
        c, *hw = self.obs_shape
        return (c // self.stack, *hw)


@dataclass
class PlyStep:
    """What a turn-based game's member learns from where the table uses negamax values
    (``[play] negamax``, envs/turns.py): the move to the opponent's reply, not the move to the
    member's next turn. ``next_obs`` is the opponent's view after the move; ``terminated``:
    the move ended the game; ``truncated``: the game ended later in the row's step (the
    opponent's move ended it), so the move is valued from ``next_obs`` as any other."""

    reward: np.ndarray  # [N] float32, the mover's reward for the move itself
    next_obs: np.ndarray  # [N, obs_dim]
    terminated: np.ndarray  # [N] bool
    truncated: np.ndarray  # [N] bool


@dataclass
class EnvStep:
    """The result of one vector step; every array has N rows."""

    obs: np.ndarray  # [N, obs_dim] what to act on next (already reset where an episode ended)
    reward: np.ndarray  # [N] float32, the env's own reward
    terminated: np.ndarray  # [N] bool
    truncated: np.ndarray  # [N] bool
    final_obs: np.ndarray  # [N, obs_dim] the true next observation of this transition
    infos: list[dict[str, Any]]  # per copy; the last step's info where the episode ended
    achieved_goal: np.ndarray | None = None  # [N, G] for the next obs to act on
    desired_goal: np.ndarray | None = None  # [N, G]
    final_achieved_goal: np.ndarray | None = None  # [N, G] of the true next observation
    final_desired_goal: np.ndarray | None = None  # [N, G]
    # Negamax self-play: what the replay keeps instead of (reward, final_obs, terminated,
    # truncated); the fields above stay what happened, for returns and episode ends.
    ply: PlyStep | None = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


@dataclass
class EnvReset:
    obs: np.ndarray
    achieved_goal: np.ndarray | None = None
    desired_goal: np.ndarray | None = None


@dataclass
class GroupStep:
    """One vector step of the agents of another table (joint play), row by row as that table's
    own members lay them out (``row = copy * len(names) + k``). Only rows with ``valid`` True
    took a step; the rest are placeholders."""

    obs: np.ndarray  # [R, D] what they acted on
    action: np.ndarray  # [R] int64 or [R, A] float32 in [-1, 1]
    reward: np.ndarray  # [R] float32
    terminated: np.ndarray  # [R] bool
    truncated: np.ndarray  # [R] bool
    final_obs: np.ndarray  # [R, D] the true next observation
    valid: np.ndarray  # [R] bool


class OtherAgents(Protocol):
    """Drives the agents of a multi-agent env that a member does not own (docs/envs.md, "Agents
    that meet"): ``group`` names who claims them (another table, or this table's opponent pool
    in self-play). ``act`` gets that group's observation rows (placeholders where a row is not
    to act) and returns one action per row; ``record`` gets each finished step of those rows."""

    def act(self, group: str, obs: np.ndarray) -> np.ndarray: ...

    def record(self, group: str, step: GroupStep) -> None: ...

    def episode_ended(self, copy: int, outcome: float) -> None:
        """Turn-based games: copy ``copy``'s game is over, with the member's seat's return
        ``outcome``; called before the copy resets, so self-play can pick the next opponent."""
        ...


def legal_actions(obs: np.ndarray, act_dim: int) -> np.ndarray:
    """``[N, act_dim]`` bool: the legal actions of masked rows ``obs [N, D]`` (the mask in the
    last ``act_dim`` columns). A row with no legal action (an absent agent's placeholder, a
    terminal observation) counts every action legal, so nothing downstream meets an empty
    choice. Agents, drivers and reference players all read masks through this one function."""
    legal = np.asarray(obs)[:, -act_dim:] > 0.5
    return legal | ~legal.any(-1, keepdims=True)


def random_legal(rng: np.random.Generator, legal: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: one action per row of ``legal [N, A]``, uniform among its legal ones."""
    counts = legal.sum(1)
    # The k-th legal action of each row, k uniform in [0, count): the first column whose
    # running count of legal actions exceeds k.
    k = np.floor(rng.random(len(legal)) * counts).astype(np.int64)
    return np.argmax(np.cumsum(legal, 1) > k[:, None], axis=1).astype(np.int64)


class VecEnv(Protocol):
    """What the engine needs from an adapter."""

    num_envs: int
    info: EnvInfo

    def reset(self, seed: int | None = None) -> EnvReset: ...

    def step(self, action: np.ndarray) -> EnvStep: ...

    def close(self) -> None: ...


def policy_obs(obs: np.ndarray, desired_goal: np.ndarray | None) -> np.ndarray:
    """The flat float32 input of actor and critic: the observation, then the goal if any.
    Image rows stay uint8 (the encoders scale them inside the network)."""
    if desired_goal is None:
        obs = np.asarray(obs)
        return obs if obs.dtype == np.uint8 else obs.astype(np.float32, copy=False)
    return np.concatenate([obs, desired_goal], axis=-1).astype(np.float32, copy=False)


class AchievedGoalInObs:
    """A goal env whose ``obs`` ends with the achieved goal: ``[observation, achieved_goal]``.

    The policy input is then ``[observation, achieved_goal, desired_goal]``, the information
    Stable-Baselines3's ``MultiInputPolicy`` gives its networks for a goal env (issue 20;
    docs/config.md ``[env] achieved_goal_in_obs``, off by default). Doing it here, once, keeps
    every stored, sampled, relabelled and evaluated observation consistent: HER only ever
    replaces the desired goal, and the achieved goal of a stored observation is a fact of that
    state.
    """

    def __init__(self, env: VecEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        inner = env.info
        self.info = dataclasses.replace(inner, obs_dim=inner.obs_dim + inner.goal_dim)

    def __getattr__(self, name: str) -> Any:
        # Adapter extras (compute_reward, render, ...) pass through.
        return getattr(self.env, name)

    def reset(self, seed: int | None = None) -> EnvReset:
        first = self.env.reset(seed=seed)
        return dataclasses.replace(first, obs=_with_goal(first.obs, first.achieved_goal))

    def step(self, action: np.ndarray) -> EnvStep:
        st = self.env.step(action)
        return dataclasses.replace(
            st,
            obs=_with_goal(st.obs, st.achieved_goal),
            final_obs=_with_goal(st.final_obs, st.final_achieved_goal),
        )

    def close(self) -> None:
        self.env.close()


def _with_goal(obs: np.ndarray, goal: np.ndarray | None) -> np.ndarray:
    if goal is None:
        raise ValueError("achieved_goal_in_obs: the env returned no achieved_goal")
    return np.concatenate([obs, goal], axis=-1).astype(np.float32, copy=False)


class FrameStackError(ValueError):
    """``[env] stack`` cannot apply to this env (``wheeler2 check`` names the key)."""


class FrameStack:
    """``[env] stack = k``: the policy sees the last ``k`` observations, oldest first,
    concatenated along the feature axis (``[N, k * obs_dim]``; the same layout as gymnasium's
    ``FrameStackObservation`` flattened). For images (channels-first rows) that is a stack
    along the channel axis: ``(k * C, H, W)``, uint8 kept.

    At an episode start the history is the first observation repeated (gymnasium's
    ``padding_type="reset"``) rather than zeros: a repeated frame reads as a system at rest (its
    finite differences, the velocities a policy infers from a stack, are zero), while a zero frame
    can be a real state (CartPole's upright pole at the origin) and would pull running
    normalization statistics toward it.

    Autoreset: for a row whose episode ended, ``final_obs`` is the stack ending with the true last
    observation (the next obs stored for that transition, truncations included), and ``obs``
    is the new episode's first observation repeated ``k`` times.

    A wrapper of the engine's VecEnv rather than gymnasium's per-copy wrapper: it serves every
    adapter the same way (in-process and subprocess copies), and the VecEnv already reports the
    true final observation of a row that reset, which is all the stack needs.
    """

    def __init__(self, env: VecEnv, k: int) -> None:
        inner = env.info
        if k < 1:
            raise FrameStackError(f"expected an integer >= 1, got {k}")
        if inner.goal_dim:
            raise FrameStackError(
                "stacks flat observations only, and this is a goal env (dict observations with "
                "achieved_goal / desired_goal); HER relabels single observations. Remove stack "
                "or use a non-goal env"
            )
        if inner.agents is not None:
            raise FrameStackError(
                "stacks single-agent gymnasium observations only; a multi-agent adapter's rows "
                "can be inactive (stale observations), which a stack would mix in. Remove stack"
            )
        if inner.stack > 1:
            # A stack of stacks is no sliding window of frames: the image replay, which
            # rebuilds stacks from single frames, would rebuild other ones.
            raise FrameStackError(f"this env's observations are stacked already ({inner.stack})")
        space = getattr(env, "observation_space", None)
        shape = getattr(space, "shape", None)
        image = bool(inner.obs_shape)
        if shape is not None and len(shape) > 1 and not image:
            raise FrameStackError(
                f"stacks flat (1-D) observations and images (uint8 or bool Box); this env's are "
                f"{tuple(shape)}. Remove stack, or flatten the observation in a gymnasium wrapper"
            )
        self.env = env
        self.k = int(k)
        self.num_envs = env.num_envs
        stacked: dict[str, Any] = {"obs_dim": inner.obs_dim * self.k}
        if image:
            c, *hw = inner.obs_shape
            stacked |= {"obs_shape": (c * self.k, *hw), "stack": inner.stack * self.k}
        self.info = dataclasses.replace(inner, **stacked)
        dtype = np.uint8 if image else np.float32
        self._frames = np.zeros((env.num_envs, self.k, inner.obs_dim), dtype)
        self.observation_space = _stacked_space(space, self.k)
        self.frame_space = space  # one observation's, which load_policy stacks itself

    def __getattr__(self, name: str) -> Any:
        # Adapter extras (action_space, render, ...) pass through.
        return getattr(self.env, name)

    def reset(self, seed: int | None = None) -> EnvReset:
        first = self.env.reset(seed=seed)
        self._frames[:] = np.asarray(first.obs, self._frames.dtype)[:, None, :]
        return dataclasses.replace(first, obs=self._frames.reshape(self.num_envs, -1).copy())

    def step(self, action: np.ndarray) -> EnvStep:
        st = self.env.step(action)
        # The stack of the true next observation: the history shifted, final_obs appended.
        final = np.empty_like(self._frames)
        final[:, :-1] = self._frames[:, 1:]
        final[:, -1] = st.final_obs
        frames = final.copy()
        done = st.done
        if done.any():
            frames[done] = np.asarray(st.obs, frames.dtype)[done][:, None, :]
        self._frames = frames
        n = self.num_envs
        return dataclasses.replace(
            st, obs=frames.reshape(n, -1).copy(), final_obs=final.reshape(n, -1)
        )

    def close(self) -> None:
        self.env.close()


def _stacked_space(space: Any, k: int) -> Any:
    """The gymnasium space of a stacked flat observation (what ``load_policy`` and export take:
    the ``k`` last raw observations concatenated, oldest first), or None without one."""
    if space is None:
        return None
    from gymnasium import spaces

    if (
        isinstance(space, spaces.Box)
        and space.dtype in (np.uint8, np.bool_)
        and len(space.shape) > 1
    ):
        # An image: the k raw frames along a new first axis, oldest first (gymnasium's
        # FrameStackObservation), which load_policy flattens frame by frame as the env does.
        low = np.broadcast_to(space.low, (k, *space.shape))
        high = np.broadcast_to(space.high, (k, *space.shape))
        return spaces.Box(low, high, dtype=space.dtype)
    if isinstance(space, spaces.Box):
        low, high = space.low.reshape(-1), space.high.reshape(-1)
        return spaces.Box(np.tile(low, k), np.tile(high, k), dtype=np.float32)
    if isinstance(space, spaces.Discrete | spaces.MultiBinary):  # one-hot / 0-1 rows
        n = int(space.n) if isinstance(space, spaces.Discrete) else int(np.prod(space.shape))
        return spaces.Box(0.0, 1.0, (k * n,), dtype=np.float32)
    return None
