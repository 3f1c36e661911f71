"""One team member in the current process: its env copies, its agent and its replay writer.

This is the actor half of Acme's split; the learner half is :class:`Trainer`. Every backend runs
members through these two classes, whether they share one process (serial) or each have their
own (local, ray).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wheeler2.agent import Agent, Batch, Transitions
from wheeler2.env import EnvStep, VecEnv, policy_obs
from wheeler2.task import RewardHeads


@dataclass
class MemberStats:
    env_steps: int = 0
    episodes: int = 0
    recent_returns: deque = field(default_factory=lambda: deque(maxlen=20))
    started: float = field(default_factory=time.perf_counter)

    def steps_per_s(self) -> float:
        return self.env_steps / max(time.perf_counter() - self.started, 1e-9)


def _valid_mask(st: EnvStep) -> np.ndarray | None:
    """Which rows' transitions are real (docs/envs.md, "Active mask"); None means all, which is
    every gymnasium env, so the single-agent path pays one dict lookup and nothing else."""
    infos = st.infos
    if not infos or "active" not in infos[0]:
        return None
    valid = np.fromiter((info.get("active", True) for info in infos), bool, len(infos))
    return None if valid.all() else valid


class Member:
    """Steps ``env`` with ``agent`` and pushes every transition into the central replay."""

    def __init__(
        self,
        name: str,
        role: str,
        agent: Agent,
        env: VecEnv,
        heads: RewardHeads,
        writer: Any | None,
        seed: int,
    ) -> None:
        self.name = name
        self.role = role
        self.agent = agent
        self.env = env
        self.heads = heads
        self.writer = writer
        self.stats = MemberStats()
        first = env.reset(seed=seed)
        self._obs, self._ag, self._dg = first.obs, first.achieved_goal, first.desired_goal
        self._ep_return = np.zeros(env.num_envs, np.float64)
        # Per-head episode returns, only with several heads (one head is episode_return).
        self._head_return = np.zeros((env.num_envs, len(heads)), np.float64)
        self._recent_heads: deque = deque(maxlen=20)
        self.last_metrics: dict[str, float] = {}
        self._store_logp = writer is not None and bool(writer.layout.logp)
        self._no_logp = np.full(env.num_envs, np.nan, np.float32)

    def step(self) -> int:
        """One vector step of every copy. Returns the number of env steps taken."""
        obs, ag, dg = self._obs, self._ag, self._dg
        pin = policy_obs(obs, dg)
        out = self.agent.act(pin, explore=True)
        st: EnvStep = self.env.step(out.action)
        valid = _valid_mask(st)
        reward = self.heads.compute(
            obs,
            out.action,
            st.final_obs,
            st.final_achieved_goal,
            st.final_desired_goal,
            st.infos,
            st.reward,
        )
        metrics = self.agent.observe(
            Transitions(
                obs=pin,
                action=out.action,
                reward=reward,
                next_obs=policy_obs(st.final_obs, st.final_desired_goal),
                terminated=st.terminated,
                truncated=st.truncated,
                reset_obs=policy_obs(st.obs, st.desired_goal),
                act_out=out,
                active=valid,
            )
        )
        if metrics:
            self.last_metrics.update(metrics)
        if self.writer is not None:
            logp = out.logp
            if logp is None and self._store_logp:
                # A deterministic policy has no behaviour probability: NaN says "unknown".
                logp = self._no_logp
            self.writer.add(
                obs,
                out.action,
                reward,
                st.final_obs,
                st.terminated,
                st.truncated,
                logp=logp,
                achieved_goal=ag,
                desired_goal=dg,
                next_achieved_goal=st.final_achieved_goal,
                valid=valid,
            )
        self._track_returns(st, reward)
        self._obs, self._ag, self._dg = st.obs, st.achieved_goal, st.desired_goal
        # Env steps count real agent-steps: an absent multi-agent row took none.
        n = self.env.num_envs if valid is None else int(valid.sum())
        self.stats.env_steps += n
        return n

    def _track_returns(self, st: EnvStep, reward: np.ndarray) -> None:
        self._ep_return += st.reward
        if len(self.heads) > 1:
            self._head_return += reward
        done = st.terminated | st.truncated
        if done.any():
            if len(self.heads) > 1:
                self._recent_heads.extend(self._head_return[done])
                self._head_return[done] = 0.0
            for i in np.flatnonzero(done):
                self.stats.recent_returns.append(float(self._ep_return[i]))
                self.stats.episodes += 1
            self._ep_return[done] = 0.0

    def figures(self) -> dict[str, float]:
        out = {
            "env_steps": float(self.stats.env_steps),
            "episodes": float(self.stats.episodes),
            "steps_per_s": self.stats.steps_per_s(),
        }
        if self.stats.recent_returns:
            out["episode_return"] = float(np.mean(self.stats.recent_returns))
        if self._recent_heads:
            for name, value in zip(self.heads.names, np.mean(self._recent_heads, axis=0)):
                out[f"episode_return/{name}"] = float(value)
        out.update(self.last_metrics)
        return out

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
        self.env.close()


class Trainer:
    """The learner half: samples the central replay and takes gradient steps."""

    def __init__(self, agent: Agent, replay: Any) -> None:
        self.agent = agent
        self.replay = replay
        self.updates = 0
        self._sums: dict[str, float] = {}
        self._count = 0

    def _step(self, sample: dict[str, np.ndarray]) -> None:
        out = self.agent.learn(Batch.from_numpy(sample, self.agent.device))
        if out.td_error is not None:
            self.replay.update_priorities(sample["index"], out.td_error)
        self.updates += 1
        for k, v in out.metrics.items():
            self._sums[k] = self._sums.get(k, 0.0) + float(v)
        self._count += 1

    def train_available(self, max_updates: int | None = None) -> int:
        """Take the gradient steps the ratio gate allows now (at most ``max_updates``), without
        blocking: the caller also acts, evaluates and publishes between calls."""
        done = 0
        while (max_updates is None or done < max_updates) and self.replay.can_sample():
            self._step(self.replay.sample())
            done += 1
        return done

    def train_blocking(self, timeout: float | None) -> None:
        """One gradient step, waiting on the gate for inserts (a learner in its own process)."""
        self._step(self.replay.sample(timeout=timeout))

    def pop_metrics(self) -> dict[str, float]:
        """Mean of each metric since the last call (keeps logging off the per-update path)."""
        out = {k: v / self._count for k, v in self._sums.items()} if self._count else {}
        out["updates"] = float(self.updates)
        self._sums.clear()
        self._count = 0
        return out
