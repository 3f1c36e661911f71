"""The replay facade: one object per process over the shared storage.

The owner (``Replay.create``) allocates every segment and is the only one that unlinks them;
members (``Replay.attach(handle)``) map them by name. Sampling state (trees, RNG) is private
to the sampling process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import sequence as sequences
from .config import Layout, ReplayConfig, ReplayError
from .forgetting import Forgetting
from .gate import RatioGate
from .her import Reached, Relabel, call_relabel, choose_goals, relabel_rewards
from .nstep import fold_returns, gather_window
from .priority import PriorityTerms
from .sampler import PrioritizedSampler, UniformSampler
from .shm import new_prefix, register_cleanup, unregister_cleanup
from .storage import (
    CARRIED,
    FORGET_CREDIT,
    FRAMES,
    LAST_UPDATE,
    LEARNER_PID,
    MAX_PRIORITY,
    RELEASED,
    SLEEP_LEARNER,
    SLEEP_PRODUCER,
    SYNCED,
    TOTAL,
    UPDATES,
    WRITER_UID,
    Block,
    Storage,
)
from .writer import Writer

_MAX_REDRAWS = 8


@dataclass(frozen=True)
class ReplayHandle:
    """Everything a member needs to attach: names, shapes, settings. Picklable (pickle, dill)."""

    prefix: str
    layout: Layout
    cfg: ReplayConfig
    gamma: float
    relabel: Relabel | None
    seed: int
    reached: Reached | None = None  # HER with terminate_on_goal


class Replay:
    def __init__(self, handle: ReplayHandle, create: bool) -> None:
        self._handle = handle
        self.layout = handle.layout
        self.cfg = handle.cfg
        self.gamma = float(handle.gamma)
        self.relabel = handle.relabel
        self.reached = handle.reached
        self.owner = create
        self.storage = Storage(handle.prefix, handle.layout, handle.cfg, create)
        self._cleanup_key: int | None = None
        if create:
            storage = self.storage
            self._cleanup_key = register_cleanup(self, lambda: _destroy(storage))
        self.gate = RatioGate(self.storage, self.cfg)
        # The owner is reproducible from the seed; members mix in their pid so that two
        # processes sampling the same buffer never draw identical batches.
        seed = handle.seed if create else [handle.seed, os.getpid()]
        self._rng = np.random.default_rng(seed)
        self._sampler: PrioritizedSampler | UniformSampler | None = None
        self._closed = False
        self._her_extra = ("obs", "action", "next_obs", "next_achieved_goal")
        # Any process that inserts applies the rule under the insert's lock (forgetting.py).
        self._forget = Forgetting(self.cfg, seed) if self.cfg.forget != "oldest" else None
        # This process's heartbeat while its inserts wait on the gate (a member's report): a
        # producer the gate holds for long, as a learner's step_share does, is not hung.
        self.on_wait: Callable[[], None] | None = None
        # A resumed learner's updates that this table's own count lacks (its checkpoint held no
        # replay): PER's beta schedule counts them too (:meth:`continue_updates`).
        self._updates_before = 0
        self._terms: PriorityTerms | None = None
        if self.cfg.priority_novelty > 0.0 or self.cfg.priority_td != 1.0:
            self._terms = PriorityTerms(
                self.cfg.priority_td, self.cfg.priority_novelty, handle.seed
            )

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        layout: Layout,
        cfg: ReplayConfig,
        gamma: float,
        relabel: Relabel | None = None,
        seed: int = 0,
        reached: Reached | None = None,
    ) -> Replay:
        """Allocate the shared buffer in this (owner) process."""
        if cfg.her is not None and (layout.goal_dim <= 0 or relabel is None):
            raise ReplayError("HER needs a goal layout (goal_dim > 0) and a relabel function")
        if cfg.her is not None and cfg.her.terminate_on_goal:
            if reached is None or cfg.n_step != 1:
                raise ReplayError("HER terminate_on_goal needs a reached function and n_step = 1")
        if not 0.0 <= gamma <= 1.0:
            raise ReplayError(f"gamma must lie in [0, 1], got {gamma}")
        if cfg.sequence is not None:
            sequences.check(layout, cfg)
        if layout.images and layout.goal_dim:
            raise ReplayError("image observations with goals are not stored (no HER on images)")
        if cfg.priority_novelty > 0.0 and not cfg.prioritized:
            raise ReplayError(
                "priority_novelty needs prioritized = true (a uniform replay has no priorities)"
            )
        if cfg.priority_td == 0.0 and cfg.priority_novelty == 0.0:
            raise ReplayError("priority_td and priority_novelty are both 0: no priority is left")
        if cfg.forget != "oldest":
            _check_forgetting(layout, cfg)
        if cfg.keep < 1.0 and cfg.admit == "transition":
            _check_transition_admission(layout, cfg)
        handle = ReplayHandle(new_prefix(), layout, cfg, float(gamma), relabel, seed, reached)
        return cls(handle, True)

    @classmethod
    def attach(cls, handle: ReplayHandle) -> Replay:
        """Map an existing buffer in a member process."""
        return cls(handle, False)

    def handle(self) -> ReplayHandle:
        return self._handle

    def writer(self, num_envs: int, block: bool | None = None) -> Writer:
        """Producer-side staging for ``num_envs`` env copies (one per producing member).

        ``block``: whether flushes wait on the ratio gate. ``None`` (default) waits only once a
        learner in another process has started sampling, so a process that both writes and
        samples (serial backend, a learner that also acts) never waits for itself.
        """
        self._check_open()
        st = self.storage
        st.acquire()
        try:
            st.hdr[WRITER_UID] += 1
            uid = int(st.hdr[WRITER_UID])
        finally:
            st.release()
        return Writer(self, self.layout, self.cfg, num_envs, uid, block, self._handle.seed)

    # -- producer side ---------------------------------------------------------------------

    def insert(self, block: Block, wait: bool) -> int:
        """One staged block into the ring (a :class:`Writer`'s flush; see ``writer.Inserter``)."""
        self._check_open()
        st = self.storage
        st.acquire()
        try:
            if wait:
                self.gate.wait_producer(self.on_wait)
            if self._forget is not None:
                self._forget.carry(st, block.n)
            start = st.insert(block)
            if st.hdr[SLEEP_LEARNER]:
                st.inserted.notify_all()
        finally:
            st.release()
        return start

    def learner_pid(self) -> int:
        return int(self.storage.hdr[LEARNER_PID])

    # -- learner side ----------------------------------------------------------------------

    @property
    def sampler(self) -> PrioritizedSampler | UniformSampler:
        if self._sampler is None:
            kind = PrioritizedSampler if self.cfg.prioritized else UniformSampler
            if self.cfg.sequence is not None:
                kind = sequences.SequenceSampler
            self._sampler = kind(self.storage, self.cfg, self._rng)
        return self._sampler

    def can_sample(self) -> bool:
        """The ratio gate without blocking (the serial backend's check)."""
        return self.gate.learner_may_update()

    def sample(
        self, batch_size: int | None = None, timeout: float | None = None
    ) -> dict[str, np.ndarray]:
        """One batch; blocks while the learner is ahead of the inserts (ratio gate).

        With ``cfg.sequence`` the batch is one of sequences (:meth:`sample_sequences`)."""
        self._check_open()
        if self.cfg.sequence is not None:
            return self.sample_sequences(batch_size, timeout)
        b = int(batch_size or self.cfg.batch_size)
        st = self.storage
        sampler = self.sampler
        updates = self._take_turn(timeout)
        j, weight = sampler.draw(b, updates)
        st.acquire()
        try:
            total = int(st.hdr[TOTAL])
            ok = st.valid(j, total)
            redraws = 0
            while not ok.all():
                # Overwritten since the draw (or half-written by a dead producer): redraw
                # those rows against the ring as it is now, which cannot move while we hold it.
                if redraws == _MAX_REDRAWS:
                    raise ReplayError(
                        f"could not draw valid transitions in {_MAX_REDRAWS} redraws: the buffer "
                        "is empty, or most of its slots lost frames to newer writes (a [buffer] "
                        "capacity small against writers x env copies x chunk; raise it)"
                    )
                redraws += 1
                bad = ~ok
                sampler.sync(total)
                stale = j[bad]
                sampler.discard(stale[(stale >= total - self.cfg.capacity) & (stale < total)])
                j[bad], weight[bad] = sampler.draw(int(bad.sum()), updates)
                ok = st.valid(j, total)
            raw = self._gather(j, total)
        finally:
            st.release()
        return self._finish(raw, j, weight)

    def _take_turn(self, timeout: float | None) -> int:
        """Pass the ratio gate as the learner and count the update; returns the update count
        (beta's schedule). Syncs the sampler with the inserts so far."""
        st = self.storage
        hdr = st.hdr
        sampler = self.sampler
        st.acquire()
        try:
            # Announce the learner before waiting: producers start honouring the gate now.
            hdr[LEARNER_PID] = os.getpid()
            self.gate.wait_learner(timeout)
            hdr[UPDATES] += 1
            st.fhdr[LAST_UPDATE] = time.time()
            if hdr[SLEEP_PRODUCER]:
                st.updated.notify_all()
            updates = int(hdr[UPDATES])
            sampler.sync(int(hdr[TOTAL]))
        finally:
            st.release()
        return updates + self._updates_before

    def continue_updates(self, updates: int) -> None:
        """The sampling learner has taken ``updates`` updates already (a resumed agent's count):
        beta's schedule goes on from there, not from this table's own count, which a resume
        without the replay in its checkpoint starts at 0 (the ratio gate keeps counting from
        this table's own). Call in the process that samples."""
        self._updates_before = max(0, int(updates) - int(self.storage.hdr[UPDATES]))

    def sample_sequences(
        self, batch_size: int | None = None, timeout: float | None = None
    ) -> dict[str, np.ndarray]:
        """``batch_size`` sequences of ``cfg.sequence`` (``buffer.sequence`` says how they are
        cut), batch first: ``obs``, ``action``, ``alive``, ``mask`` [B, T, ...] with
        T = burn_in + length; ``reward`` (n-step), ``discount``, ``boot`` [B, T]; ``next_obs``
        [B, T + n - 1, ...]; ``state`` [B, state_dim] stored at each first step (layouts with
        a state column); ``weight``, ``index`` [B]. Priorities go back through
        ``update_priorities(index, sequence_priority(td, mask, eta))``."""
        self._check_open()
        seq = self.cfg.sequence
        if seq is None:
            raise ReplayError("this buffer was built without [sequence] settings")
        b = int(batch_size or self.cfg.batch_size)
        st = self.storage
        sampler = self.sampler
        updates = self._take_turn(timeout)
        steps = seq.span + self.cfg.n_step - 1
        j, weight = sampler.draw(b, updates)
        st.acquire()
        try:
            total = int(st.hdr[TOTAL])
            bad = np.ones(b, dtype=bool)
            slots = np.empty((b, steps), dtype=np.int64)
            alive = np.empty((b, steps), dtype=bool)
            burn = np.empty(b, dtype=np.int64)
            for redraw in range(_MAX_REDRAWS + 1):
                idx = np.flatnonzero(bad)
                ok = st.valid(j[idx], total)
                drop = idx[~ok]
                drop = drop[(j[drop] >= total - self.cfg.capacity) & (j[drop] < total)]
                good = idx[ok]
                if good.shape[0]:
                    slots[good], alive[good] = sequences.walk(st, j[good], total, steps)
                    burn[good] = sequences.burn_of(st, slots[good, 0], seq)
                    empty = ~sequences.trained(alive[good], burn[good], seq).any(axis=1)
                    # A start whose episode ends inside its burn-in never trains anything,
                    # nor one whose next step is gone: drop it for good. One cut short by the
                    # write head waits for more steps.
                    over = sequences.ended(st, slots[good])
                    over |= sequences.cut_off(st, slots[good], total)
                    drop = np.concatenate([drop, good[empty & over]])
                    ok[ok] = ~empty
                bad[idx[ok]] = False
                if not bad.any():
                    break
                if redraw == _MAX_REDRAWS:
                    raise ReplayError("could not draw valid sequences; is the buffer empty?")
                sampler.sync(total)
                sampler.discard(j[drop])
                j[bad], weight[bad] = sampler.draw(int(bad.sum()), updates)
            raw = sequences.gather(st, self.cfg, j, slots, alive, burn, total, self._rng)
        finally:
            st.release()
        return sequences.finish(raw, st, self.cfg, self.gamma, self.relabel, weight)

    def _gather(self, j: np.ndarray, total: int) -> dict[str, Any]:
        """Copy out everything the batch needs; lock held, ``j`` valid."""
        st = self.storage
        a = st.arrays
        slot0 = j % self.cfg.capacity
        # One gather brings every float field of the sampled rows (see packed_columns).
        rows0 = np.take(st.packed, slot0, axis=0)
        cols = st.columns

        def col(name: str) -> np.ndarray:
            lo, hi = cols[name]
            return rows0[:, lo:hi]

        images = self.layout.images  # frames rebuilt into stacks (buffer/frames.py)
        pair = st.stack_pair(slot0) if images and self.cfg.n_step == 1 else None
        obs = pair[0] if pair is not None else st.gather("obs", slot0) if images else col("obs")
        raw: dict[str, Any] = {"obs": obs}
        raw["action"] = np.take(a["action"], slot0) if self.layout.discrete else col("action")
        if self.layout.logp:
            raw["logp"] = col("logp")[:, 0]
        her = self.cfg.her
        extra = self._her_extra if her is not None else ()
        if her is not None:
            # New goals are written over the desired goals in rows0 (the batch's own copy).
            rows = choose_goals(st, her, j, slot0, total, self._rng, rows0)
            raw["relabelled"] = rows
        if self.layout.goal_dim:
            raw["goal"] = col("desired_goal")
        n = self.cfg.n_step
        if n == 1:
            # The common case without window bookkeeping.
            raw["reward"] = col("reward").copy()  # relabelling writes into it
            raw["terminated"] = np.take(a["terminated"], slot0)
            raw["next_obs"] = pair[1] if pair is not None else col("next_obs")
            if her is not None:
                # Everything the relabelled rows' new rewards need, in one gather of their
                # packed rows (column views of it are handed to the relabel function).
                raw["her_rows"] = np.take(rows0, rows, axis=0)
            return raw
        win = gather_window(self.storage, slot0, total, n, extra)
        raw["window"] = win
        raw["next_obs"] = st.gather("next_obs", win.last)
        return raw

    def _finish(
        self, raw: dict[str, Any], j: np.ndarray, weight: np.ndarray
    ) -> dict[str, np.ndarray]:
        win = raw.get("window")
        if win is None:
            reward = raw["reward"]
            rows = raw.get("relabelled")
            if rows is not None and rows.shape[0]:
                # A one-step window is the sample itself: relabel those rows in place.
                sub = raw["her_rows"]
                cols = self.storage.columns

                def col(name: str) -> np.ndarray:
                    lo, hi = cols[name]
                    return sub[:, lo:hi]

                action = raw["action"][rows] if self.layout.discrete else col("action")
                next_achieved, goal = col("next_achieved_goal"), col("desired_goal")
                reward[rows] = call_relabel(
                    self._relabel_fn(),
                    col("obs"),
                    action,
                    col("next_obs"),
                    next_achieved,
                    goal,
                    reward.shape[1],
                )
            terminated = raw["terminated"]
            if rows is not None and rows.shape[0] and self.reached is not None:
                # The env ended the episode for its own goal; for a new goal the transition
                # ends exactly where it reaches that goal.
                terminated = terminated.copy()
                terminated[rows] = self.reached(next_achieved, goal)
            discount = np.where(terminated, 0.0, self.gamma).astype(np.float32)
        else:
            rewards = win.reward
            if "relabelled" in raw:
                rewards = relabel_rewards(
                    self._relabel_fn(),
                    rewards,
                    win.alive,
                    raw["relabelled"],
                    raw["goal"],
                    win.extra,
                )
            reward, discount = fold_returns(rewards, win.alive, win.terminated, self.gamma)
        obs, next_obs = raw["obs"], raw["next_obs"]
        if "goal" in raw:
            obs = np.concatenate([obs, raw["goal"]], axis=1)
            next_obs = np.concatenate([next_obs, raw["goal"]], axis=1)
        # Column slices of the packed gather are strided; learners may .view() them. Image
        # stacks stay the two row views of one gather (stack_pair): the encoders reshape, and
        # a copy here would cost what sharing the frames saved.
        contiguous = np.ascontiguousarray
        rows = np.asarray if self.layout.images else contiguous
        out = {
            "obs": rows(obs),
            "action": contiguous(raw["action"]),
            "reward": reward,
            "next_obs": rows(next_obs),
            "discount": discount,
            "weight": weight,
            "index": j,
        }
        if "logp" in raw:
            out["logp"] = contiguous(raw["logp"])
        return out

    def _relabel_fn(self) -> Relabel:
        """HER's relabel function (:meth:`create` refuses HER without one)."""
        if self.relabel is None:
            raise ReplayError("HER relabelling needs a relabel function")
        return self.relabel

    def update_priorities(self, index: np.ndarray, td_error: np.ndarray) -> None:
        """New priorities ``|td_error| + eps`` for a sample's ``index`` (stale ones are ignored);
        with ``priority_td`` / ``priority_novelty`` set, the mixed priority of buffer/priority.py
        in place of ``|td_error|``."""
        index, td_error = np.asarray(index), np.asarray(td_error)
        if self._terms is not None and self.sampler.prioritized:
            next_obs = None
            if self._terms.novelty_weight > 0.0:
                # Rows overwritten since the draw get a value here too; the tree skips them.
                next_obs = self.storage.gather("next_obs", index % self.cfg.capacity)
            td_error = self._terms.mix(td_error, next_obs)
        self.sampler.update(index, td_error)

    def priority_state(self) -> dict[str, Any] | None:
        """What this process's priority terms learned (the RND of ``priority_novelty``), for the
        sampling member's checkpoint; None where no term has a state."""
        if self._terms is None or self._terms.novelty_weight == 0.0:
            return None
        return self._terms.state_dict()

    def load_priority_state(self, state: dict[str, Any] | None) -> None:
        """Take back :meth:`priority_state`'s output (None: nothing to restore)."""
        if state is not None and self._terms is not None:
            self._terms.load_state_dict(state)

    # -- bookkeeping -----------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        hdr = self.storage.hdr
        carried = int(hdr[CARRIED])  # rows [buffer] forget copied forward: not new inserts
        inserts = int(hdr[TOTAL]) - carried
        updates = int(hdr[UPDATES])
        return {
            "inserts": inserts,
            "carried": carried,
            "updates": updates,
            "size": int(min(inserts + carried, self.cfg.capacity)),
            "updates_per_insert": updates / max(1, inserts - self.cfg.min_size),
            "updates_per_insert_target": float(self.cfg.updates_per_insert),
            "max_priority": float(self.storage.fhdr[MAX_PRIORITY]),
        }

    def state_dict(self) -> dict[str, Any]:
        """Stored items (in slot order), counters and priorities, as tensors and scalars.

        Tensors rather than numpy arrays because ``torch.load(weights_only=True)`` refuses
        numpy's pickles. torch is imported here only: members that just write never pay for it.
        """
        import torch

        st = self.storage
        st.acquire()
        try:
            arrays = {
                name: torch.from_numpy(arr.copy())
                for name, arr in st.arrays.items()
                if name not in ("hdr", "fhdr")
            }
            hdr = st.hdr
            return {
                "format": "wheeler2.replay/1",
                "capacity": int(self.cfg.capacity),
                "layout": repr(self.layout),
                "arrays": arrays,
                "total": int(hdr[TOTAL]),
                "frames_total": int(hdr[FRAMES]),
                "carried": int(hdr[CARRIED]),
                "updates": int(hdr[UPDATES]),
                "writer_uid": int(hdr[WRITER_UID]),
                "synced": int(hdr[SYNCED]),
                "max_priority": float(st.fhdr[MAX_PRIORITY]),
                "forget_credit": float(st.fhdr[FORGET_CREDIT]),
            }
        finally:
            st.release()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != "wheeler2.replay/1":
            raise ReplayError("not a wheeler2 replay state")
        # Checkpoints from before the state column (or the image fields) spell the layout
        # without them.
        now = repr(self.layout)
        flat = now.replace(", frame_shape=(), stack=1)", ")")
        layouts = {now, flat, flat.replace(", state_dim=0)", ")")}
        if state["capacity"] != self.cfg.capacity or state["layout"] not in layouts:
            raise ReplayError(
                f"replay checkpoint is for capacity {state['capacity']} and {state['layout']}, "
                f"this buffer has capacity {self.cfg.capacity} and {self.layout!r}"
            )
        import torch

        st = self.storage
        saved_frames = state["arrays"].get("frames")
        if saved_frames is not None and "frames" in st.arrays:
            if len(saved_frames) != len(st.arrays["frames"]):
                raise ReplayError(
                    f"replay checkpoint holds a frame ring of {len(saved_frames)} frames, this "
                    f"buffer one of {len(st.arrays['frames'])}: resume with the [buffer] "
                    "frame_slack the run was saved with"
                )
        st.acquire()
        try:
            for name, value in state["arrays"].items():
                if name not in st.arrays:
                    continue  # e.g. priorities saved from a prioritized buffer into a uniform one
                arr = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
                st.arrays[name][...] = arr.astype(st.arrays[name].dtype, copy=False)
            hdr = st.hdr
            a = st.arrays
            # A resumed run's envs start new episodes (resumed_env_seed), so each episode still
            # open at the save ends there: its last row is a truncation. Flagged, a sequence
            # start in such a tail is dropped once, not redrawn forever as if awaiting steps.
            tail = (a["abs"] >= 0) & (a["next"] < 0) & ~a["terminated"] & ~a["truncated"]
            a["truncated"][tail] = True
            hdr[TOTAL] = hdr[1] = state["total"]  # RESERVED = TOTAL: nothing in flight
            hdr[FRAMES] = state.get("frames_total", 0)
            hdr[CARRIED] = state.get("carried", 0)
            hdr[UPDATES] = state["updates"]
            hdr[WRITER_UID] = max(int(hdr[WRITER_UID]), state["writer_uid"])
            hdr[SYNCED] = state["synced"] if "priority" in state["arrays"] else 0
            st.fhdr[MAX_PRIORITY] = state["max_priority"]
            st.fhdr[FORGET_CREDIT] = state.get("forget_credit", 0.0)
            st.fhdr[LAST_UPDATE] = st.fhdr[0] = time.time()
        finally:
            st.release()
        if self._sampler is not None:
            self._sampler.rebuild()

    # -- lifecycle -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ReplayError("replay buffer is closed")

    def release(self) -> None:
        """The run is stopping: producers waiting on the gate (or about to) insert at once.

        Without this, an explorer that ran ahead of a learner which has just stopped sampling
        would sit in the gate until ``timeout_s`` instead of seeing the stop.
        """
        self._check_open()
        st = self.storage
        st.acquire()
        try:
            st.hdr[RELEASED] = 1
            if st.hdr[SLEEP_PRODUCER]:
                st.updated.notify_all()
        finally:
            st.release()

    def finish(self) -> None:
        """The learner's sampling is over. Nothing is in flight in shared memory; a remote
        replay (``buffer.ray_shard.ShardedReplay``) collects its outstanding calls here."""

    def alive(self) -> None:
        """The learner lives but is not sampling (an eval, the closing updates' wait): a
        producer held at the gate counts its ``timeout_s`` of silence from now. Without it, an
        eval longer than ``timeout_s`` (long episodes, a loaded machine) killed every
        producer waiting for the learner with ``ReplayTimeout``."""
        self.storage.fhdr[LAST_UPDATE] = time.time()

    def close(self) -> None:
        """Members detach; the owner also unlinks every shared-memory segment."""
        if self._closed:
            return
        self._closed = True
        self._sampler = None
        if self.owner:
            if self._cleanup_key is not None:
                unregister_cleanup(self._cleanup_key)
            _destroy(self.storage)
        else:
            self.storage.close()

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> None:
        raise TypeError("pass replay.handle() to other processes, not the Replay itself")


def _check_transition_admission(layout: Layout, cfg: ReplayConfig) -> None:
    """Per-row admission leaves holes in episodes: refuse it where a sample reads across steps
    (buffer/admission.py says why ``admit = "episode"`` is the safe unit)."""
    reads_across = {
        "HER": cfg.her is not None,
        f"n_step = {cfg.n_step}": cfg.n_step > 1,
        "sequences": cfg.sequence is not None,
        "image stacks": layout.images,
    }
    found = [name for name, on in reads_across.items() if on]
    if found:
        raise ReplayError(
            f'admit = "transition" cannot be used with {", ".join(found)}: a refused step '
            'would break its episode\'s links; use admit = "episode"'
        )


def _check_forgetting(layout: Layout, cfg: ReplayConfig) -> None:
    """Rules other than "oldest" carry rows forward (forgetting.py), which an image row's frames
    would not survive, nor a HER sequence's steps (HER renumbers a carried episode)."""
    if cfg.forget == "priority" and not cfg.prioritized:
        raise ReplayError('forget = "priority" needs prioritized = true')
    if layout.images or (cfg.sequence is not None and cfg.her is not None):
        raise ReplayError(
            f'forget = "{cfg.forget}" cannot be used with image stacks or with sequences and '
            'HER together: use forget = "oldest"'
        )


def _destroy(storage: Storage) -> None:
    storage.unlink()
    storage.close()
