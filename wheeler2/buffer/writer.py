"""Producer-side staging: one vector step at a time in, contiguous chunks out.

Each env copy stages its own steps; a flush concatenates the staged runs of several copies and
inserts them as one block under one lock acquisition. Without HER a copy's run is flushed at
its episode end or when it reaches ``chunk`` steps, and the link from the previous run's last
step is patched to the new run's head at insert time. With HER a run is an entire episode
(goals are looked up by offset inside it), so runs grow until the episode ends.

A writer knows its table only as an :class:`Inserter` (``Replay`` is one): it inserts blocks and
asks who samples; it never reaches into the replay's storage or private methods.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from .admission import Admission
from .config import Layout, ReplayConfig, ReplayError
from .frames import FrameStager
from .storage import DATA_FIELDS, Block


class Inserter(Protocol):
    """The side of a replay table a :class:`Writer` writes through."""

    def insert(self, block: Block, wait: bool) -> int:
        """Insert ``block`` as one contiguous run (after the ratio gate lets a producer in,
        when ``wait``); returns the absolute insert number of its first row."""
        ...

    def learner_pid(self) -> int:
        """The process that samples the table (0 while none has sampled yet)."""
        ...


class Writer:
    """Stages one producer's vector steps and inserts them in blocks; get it from
    ``Replay.writer(num_envs)``. Not shared between processes: each producer makes its own."""

    def __init__(
        self,
        table: Inserter,
        layout: Layout,
        cfg: ReplayConfig,
        num_envs: int,
        uid: int,
        block: bool | None = None,
        seed: int = 0,
    ) -> None:
        self.table = table
        self.block = block
        self.layout = layout
        self.num_envs = num_envs
        self.her = cfg.her is not None
        # A filter (keep < 1) decides per row or per whole episode (buffer/admission.py);
        # an episode is decided at its end, so its rows stay staged until then, as with HER.
        self.admission: Admission | None = None
        if cfg.keep < 1.0:
            self.admission = Admission(cfg.keep, cfg.admit, np.random.default_rng([seed, uid]))
        per_episode = self.admission is not None and self.admission.per_episode
        self.whole_episodes = self.her or per_episode
        self.chunk = cfg.chunk
        self.cap = self.chunk if not self.whole_episodes else max(self.chunk, 64)
        lay = self.layout
        n = num_envs
        # Image rows are staged whole and become frames and references at flush (frames.py).
        obs_type = np.uint8 if lay.images else np.float32
        self.frames = FrameStager(lay, num_envs) if lay.images else None
        self._shapes: dict[str, tuple[tuple[int, ...], type]] = {
            "obs": ((lay.obs_dim,), obs_type),
            "next_obs": ((lay.obs_dim,), obs_type),
            "action": ((), np.int64) if lay.discrete else ((lay.act_dim,), np.float32),
            "reward": ((lay.num_heads,), np.float32),
            "terminated": ((), np.bool_),
            "truncated": ((), np.bool_),
            "episode": ((), np.int64),
            "step": ((), np.int64),
        }
        if lay.logp:
            self._shapes["logp"] = ((), np.float32)
        if lay.goal_dim:
            for name in ("achieved_goal", "desired_goal", "next_achieved_goal"):
                self._shapes[name] = ((lay.goal_dim,), np.float32)
        if lay.state_dim:
            self._shapes["state"] = ((lay.state_dim,), np.float32)
            self._no_state = np.zeros((n, lay.state_dim), np.float32)
        self.fields = [f for f in DATA_FIELDS if f in self._shapes]
        shapes = self._shapes.items()
        self.stage: dict[str, np.ndarray] = {
            f: np.zeros((n, self.cap, *s), dtype=d) for f, (s, d) in shapes
        }
        # The task's worth_keeping flag of each staged row (admission only).
        self.worth = np.zeros((n, self.cap), dtype=np.bool_)
        self.count = np.zeros(n, dtype=np.int64)
        self.ep_step = np.zeros(n, dtype=np.int64)
        # Episode ids: writer uid in the high bits, a per-writer counter below: globally unique.
        self._next_episode = (uid << 32) + n
        self.episode = (uid << 32) + np.arange(n, dtype=np.int64)
        self.tail = np.full(n, -1, dtype=np.int64)  # abs number of each copy's last inserted step
        self._rows = np.arange(n)
        self.inserted = 0

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        logp: np.ndarray | None = None,
        achieved_goal: np.ndarray | None = None,
        desired_goal: np.ndarray | None = None,
        next_achieved_goal: np.ndarray | None = None,
        valid: np.ndarray | None = None,
        state: np.ndarray | None = None,
        worth: np.ndarray | None = None,
    ) -> None:
        """Stage one vector step (N rows); flushes by itself at episode ends and every chunk.

        ``worth`` ([N] bool): the task's ``worth_keeping`` flags; with ``[buffer] keep < 1`` a
        flagged row (or an episode with one) is always stored, the rest with chance ``keep``.

        ``state`` ([N, state_dim] float32): the policy state each ``obs`` was seen in, stored
        where the layout has a state column (zeros when omitted; ignored without the column).

        ``valid`` ([N] bool, default all True) leaves rows out entirely: an absent multi-agent row
        is not staged and does not advance its copy's step-in-episode or links, so the row's
        next valid step continues (or, after a done flag, starts) its episode seamlessly.
        """
        n = self.num_envs
        if self.whole_episodes and int(self.count.max()) >= self.cap:
            self._grow()
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if valid.all():
                valid = None
        r: np.ndarray | slice
        pos: np.ndarray | int
        if valid is None:
            pos = self.count
            r = self._rows
            c0 = int(pos[0])
            if (pos == c0).all():
                # Every copy at the same staging position (the usual case): a basic slice
                # assignment per field is several times cheaper than fancy indexing.
                r, pos = slice(None), c0
        else:
            r = np.flatnonzero(valid)
            pos = self.count[r]
        st = self.stage
        reward = np.asarray(reward, dtype=np.float32)
        if reward.ndim == 1:
            reward = reward[:, None]
        values = {
            "obs": obs,
            "next_obs": next_obs,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "episode": self.episode,
            "step": self.ep_step,
        }
        if self.layout.logp:
            if logp is None:
                raise ReplayError("this buffer stores logp: pass the behaviour log-probabilities")
            values["logp"] = logp
        if self.layout.goal_dim:
            if achieved_goal is None or desired_goal is None or next_achieved_goal is None:
                raise ReplayError(
                    "goal buffer: pass achieved_goal, desired_goal and next_achieved_goal"
                )
            values["achieved_goal"] = achieved_goal
            values["desired_goal"] = desired_goal
            values["next_achieved_goal"] = next_achieved_goal
        if self.layout.state_dim:
            values["state"] = self._no_state if state is None else state
        for name, v in values.items():
            v = np.asarray(v)
            if v.shape[0] != n:
                raise ReplayError(f"{name} has {v.shape[0]} rows, the writer has {n} envs")
            st[name][r, pos] = v if valid is None else v[r]
        if self.admission is not None:
            flags = np.zeros(n, np.bool_) if worth is None else np.asarray(worth, np.bool_)
            self.worth[r, pos] = flags if valid is None else flags[r]
        if valid is None:
            self.count += 1
            self.ep_step += 1
        else:
            self.count[r] += 1
            self.ep_step[r] += 1
        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        if valid is not None:
            done = done & valid
        if done.any():
            ended = np.flatnonzero(done)
            self.ep_step[ended] = 0
            self.episode[ended] = self._next_episode + np.arange(ended.shape[0])
            self._next_episode += ended.shape[0]
        full = self.count >= self.chunk
        if self.whole_episodes:
            if done.any():
                self._flush(done)
        elif done.any() or full.any():
            # One lock acquisition for every copy that has something staged.
            self._flush(self.count > 0)

    def flush(self) -> None:
        """Insert what is staged. With HER only finished episodes are ever inserted, so this
        is a no-op there (runs of unfinished episodes stay staged)."""
        if not self.whole_episodes and self.count.any():
            self._flush(self.count > 0)

    def _grow(self) -> None:
        self.cap *= 2
        for name, arr in self.stage.items():
            new = np.zeros((arr.shape[0], self.cap, *arr.shape[2:]), dtype=arr.dtype)
            new[:, : arr.shape[1]] = arr
            self.stage[name] = new
        worth = np.zeros((self.worth.shape[0], self.cap), dtype=np.bool_)
        worth[:, : self.worth.shape[1]] = self.worth
        self.worth = worth

    def _flush(self, which: np.ndarray) -> None:
        adm = self.admission
        if adm is not None and adm.per_episode:
            which = self._admit_episodes(which)
            if not which.any():
                return
        elif adm is not None:
            self._flush_admitted(which, adm)
            return
        envs = np.flatnonzero(which)
        counts = self.count[envs]
        n = int(counts.sum())
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        # Rows of every flushed copy, concatenated in copy order.
        env_of_row = np.repeat(envs, counts)
        pos_of_row = np.arange(n) - np.repeat(offsets, counts)
        data = {f: self.stage[f][env_of_row, pos_of_row] for f in self.fields}
        rel_next = np.arange(1, n + 1, dtype=np.int64)
        last_rows = offsets + counts - 1
        rel_next[last_rows] = -1  # filled in by the next chunk's patch, or the episode ended
        rel_ep_end = np.repeat(last_rows, counts) if self.her else None
        tails = self.tail[envs]
        has_tail = tails >= 0
        patches = np.stack([tails[has_tail], offsets[has_tail]], axis=1).astype(np.int64)
        frames = None
        if self.frames is not None:
            obs, next_obs = data.pop("obs"), data.pop("next_obs")
            frames, data["refs"] = self.frames.pack(obs, next_obs, env_of_row, data["step"])
        block = Block(data, rel_next, rel_ep_end, patches, n, frames)
        start = self.table.insert(block, wait=self._may_wait())
        last_done = (
            self.stage["terminated"][envs, counts - 1] | self.stage["truncated"][envs, counts - 1]
        )
        if self.frames is not None:
            self.frames.inserted(block.frame_start)
        self.tail[envs] = np.where(last_done, -1, start + offsets + counts - 1)
        self.count[envs] = 0
        self.inserted += n

    def _admit_episodes(self, which: np.ndarray) -> np.ndarray:
        """Drop the staged episodes the admission refuses; returns the copies still to flush."""
        assert self.admission is not None
        envs = np.flatnonzero(which)
        counts = self.count[envs]
        flagged = np.array([self.worth[e, :c].any() for e, c in zip(envs, counts)], np.bool_)
        keep = self.admission.episodes(flagged, counts)
        refused = envs[~keep]
        # A refused episode leaves nothing behind: no rows, no link into it (it ended, so the
        # copy's tail is -1 already) and no frames (its copy's next episode starts afresh).
        self.count[refused] = 0
        self.tail[refused] = -1
        out = np.zeros_like(which)
        out[envs[keep]] = True
        return out

    def _flush_admitted(self, which: np.ndarray, adm: Admission) -> None:
        """Per-row admission (``admit = "transition"``): insert the kept rows of the copies
        ``which``, each refused row a hole that no link crosses."""
        envs = np.flatnonzero(which)
        counts = self.count[envs]
        env_of_row = np.repeat(envs, counts)
        pos_of_row = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        kept = adm.rows(self.worth[env_of_row, pos_of_row])
        first = np.cumsum(counts) - counts  # each copy's first row, in the concatenation
        last = first + counts - 1
        env_of_row, pos_of_row = env_of_row[kept], pos_of_row[kept]
        n = int(kept.sum())
        ended = (
            self.stage["terminated"][envs, counts - 1] | self.stage["truncated"][envs, counts - 1]
        )
        if n:
            data = {f: self.stage[f][env_of_row, pos_of_row] for f in self.fields}
            # A kept row links to the next row only where that row was the next step of the
            # same copy and was kept too; after a hole the link is -1.
            pos_next = np.arange(1, n + 1, dtype=np.int64)
            same = np.append(
                (env_of_row[1:] == env_of_row[:-1]) & (pos_of_row[1:] == pos_of_row[:-1] + 1), False
            )
            rel_next = np.where(same, pos_next, -1)
            # The previous run's tail links to this run's head only if the head was kept.
            head_kept = kept[first]
            new_index = np.cumsum(kept) - 1
            tails = self.tail[envs]
            link = head_kept & (tails >= 0)
            patches = np.stack([tails[link], new_index[first[link]]], axis=1).astype(np.int64)
            block = Block(data, rel_next, None, patches, n, None)
            start = self.table.insert(block, wait=self._may_wait())
            last_kept = kept[last]
            self.tail[envs] = np.where(last_kept & ~ended, start + new_index[last], -1)
        else:
            self.tail[envs] = -1
        self.count[envs] = 0
        self.inserted += n

    def _may_wait(self) -> bool:
        # Only wait for a learner that exists and lives in another process: the serial
        # backend samples from this very process, and blocking here would deadlock it.
        if self.block is not None:
            return self.block
        learner = self.table.learner_pid()
        return learner != 0 and learner != os.getpid()

    def __repr__(self) -> str:
        return f"Writer(num_envs={self.num_envs}, staged={int(self.count.sum())})"
