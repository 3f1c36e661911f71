"""Shared-memory ring of transitions plus the header that the gate and the lock live in.

Every slot records its absolute insert number (``abs``). A slot's content is the transition
with absolute number ``j`` exactly when ``j`` is among the last ``capacity`` inserts and
``abs[j % capacity] == j``; readers check both, which is how overwritten or half-written steps
are never used. ``next`` links a step to the absolute number of the next step of its episode
(-1: episode ended there, or the next chunk is not in yet), ``episode`` ids are unique per
writer, so a link is followed only when the target still holds the same episode's next step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from . import frames as frame_ring
from .config import BufferConfig, Layout, ReplayConfig
from .locks import RobustLock, SharedCondition
from .shm import NamedSemaphore, Segment
from .sumtree import padded_size

# Integer header slots.
TOTAL = 0  # committed inserts: slots of [TOTAL - capacity, TOTAL) are readable
RESERVED = 1  # TOTAL + rows being copied right now (> TOTAL only inside an insert)
UPDATES = 2  # learner gradient steps (samples) so far
WRITER_UID = 3  # last writer id handed out (episode ids are uid << 32 | counter)
HOLDER = 4  # pid holding the lock
LOCK_GEN = 5  # lock acquisitions so far (tells a stuck lock from a busy one)
SLEEP_LEARNER = 6  # processes waiting for inserts
SLEEP_PRODUCER = 7  # processes waiting for updates
SYNCED = 8  # inserts the prioritized sampler has given leaves to (for checkpoints)
LEARNER_PID = 9  # the process that samples; its own writers never block on the gate
REPAIR = 10  # set when the lock was taken back from a dead holder
RELEASED = 11  # the run is stopping: producers insert without waiting on the gate
FRAMES = 12  # frames inserted so far (image replays, buffer/frames.py)
CARRIED = 13  # rows copied forward by [buffer] forget (buffer/forgetting.py): not new inserts
INT_HEADER = 16
# Float header slots.
LAST_INSERT = 0  # wall time of the last insert
LAST_UPDATE = 1  # wall time of the last sample
MAX_PRIORITY = 2  # running max of raw priorities (before alpha)
FORGET_CREDIT = 3  # rows [buffer] forget may still carry (buffer/forgetting.py)
FLOAT_HEADER = 8


def packed_columns(layout: Layout) -> dict[str, tuple[int, int]]:
    """name -> (first, last + 1) column of the float32 fields packed into one row per slot.

    A batch gathers rows at random, and each row of each array costs a cache miss: packing
    obs, next_obs, action, reward, logp and goals side by side turns five to eight random
    gathers into one (the arrays the rest of the code sees are column views of it). Image
    observations are not packed: their frames are stored once each (buffer/frames.py).
    """
    widths = [] if layout.images else [("obs", layout.obs_dim), ("next_obs", layout.obs_dim)]
    if not layout.discrete:
        widths.append(("action", layout.act_dim))
    widths.append(("reward", layout.num_heads))
    if layout.logp:
        widths.append(("logp", 1))
    if layout.goal_dim:
        widths += [
            (g, layout.goal_dim) for g in ("desired_goal", "next_achieved_goal", "achieved_goal")
        ]
    cols, at = {}, 0
    for name, width in widths:
        cols[name] = (at, at + width)
        at += width
    return cols


def field_specs(layout: Layout, cfg: BufferConfig) -> dict[str, tuple[tuple[int, ...], type]]:
    """name -> (shape, dtype) of every shared segment (float fields live in ``packed``); of
    ``cfg`` it reads ``capacity`` and ``prioritized``, which a ReplayConfig extends."""
    c = cfg.capacity
    width = max(hi for _, hi in packed_columns(layout).values())
    specs: dict[str, tuple[tuple[int, ...], type]] = {
        "packed": ((c, width), np.float32),
        "terminated": ((c,), np.bool_),
        "truncated": ((c,), np.bool_),
        "abs": ((c,), np.int64),
        "next": ((c,), np.int64),
        "episode": ((c,), np.int64),
        "step": ((c,), np.int64),
    }
    if layout.discrete:
        specs["action"] = ((c,), np.int64)
    if layout.goal_dim:
        specs["ep_end"] = ((c,), np.int64)  # absolute number of the episode's last step
    if layout.state_dim:
        # A segment of its own, not a packed column: only a sequence's first step is read, and
        # in the packed rows it would widen every gathered step by state_dim floats.
        specs["state"] = ((c, layout.state_dim), np.float32)
    if layout.images:
        specs |= frame_ring.frame_specs(layout, cfg)
    if cfg.prioritized:
        specs["priority"] = ((padded_size(c),), np.float64)  # priority ** alpha per slot
    specs["hdr"] = ((INT_HEADER,), np.int64)
    specs["fhdr"] = ((FLOAT_HEADER,), np.float64)
    return specs


# Fields a writer stages and copies per row, in insert order.
DATA_FIELDS = (
    "obs",
    "next_obs",
    "action",
    "reward",
    "terminated",
    "truncated",
    "logp",
    "achieved_goal",
    "desired_goal",
    "next_achieved_goal",
    "state",
    "episode",
    "step",
    "refs",
)


@dataclass
class Block:
    """A contiguous run of rows ready to insert; link fields are relative to the block start."""

    data: dict[str, np.ndarray]
    rel_next: np.ndarray  # int64 [n]: block-relative index of the next step, -1 for none
    rel_ep_end: np.ndarray | None  # int64 [n]: block-relative index of the episode's last step
    patches: np.ndarray  # int64 [m, 2]: (absolute number of a previous tail, relative head)
    n: int
    # Image replays: the block's new frames [f, frame_size] uint8 (data["refs"] names them in
    # the encoding of frames.decode) and, once inserted, the absolute number of the first.
    frames: np.ndarray | None = None
    frame_start: int = -1


class Storage:
    """The shared arrays plus the lock and the two conditions of the ratio gate."""

    def __init__(self, prefix: str, layout: Layout, cfg: ReplayConfig, create: bool) -> None:
        self.prefix = prefix
        self.layout = layout
        self.cfg = cfg
        self.capacity = cfg.capacity
        self.owner = create
        self.segments: dict[str, Segment] = {}
        self.semaphores: dict[str, NamedSemaphore] = {}
        try:
            for name, (shape, dtype) in field_specs(layout, cfg).items():
                self.segments[name] = Segment(f"{prefix}_{name}", shape, dtype, create)
            for name, value in (("lock", 1), ("guard", 1), ("ins", 0), ("upd", 0)):
                self.semaphores[name] = NamedSemaphore(f"{prefix}_{name}", value, create)
        except BaseException:
            self.close()
            if create:
                self.unlink()
            raise
        self.arrays = {name: seg.array for name, seg in self.segments.items()}
        self.packed = self.arrays.pop("packed")
        self.columns = packed_columns(layout)
        for name, (lo, hi) in self.columns.items():
            view = self.packed[:, lo:hi]
            self.arrays[name] = view[:, 0] if name == "logp" else view
        self.hdr = self.arrays["hdr"]
        self.fhdr = self.arrays["fhdr"]
        self.images = layout.images
        if self.images:
            self.frames = self.arrays["frames"].reshape(len(self.arrays["frames"]), -1)
            self.frame_abs = self.arrays["frame_abs"]
            self.num_frames = self.frame_abs.shape[0]
            if create:
                self.frame_abs[:] = -1
        if create:
            self.arrays["abs"][:] = -1
            self.arrays["next"][:] = -1
            self.fhdr[LAST_INSERT] = self.fhdr[LAST_UPDATE] = time.time()
            self.fhdr[MAX_PRIORITY] = 1.0
        sem = self.semaphores
        self.lock = RobustLock(
            sem["lock"], sem["guard"], self.hdr, HOLDER, LOCK_GEN, REPAIR, cfg.timeout_s
        )
        self.inserted = SharedCondition(self.lock, sem["ins"], self.hdr, SLEEP_LEARNER)
        self.updated = SharedCondition(self.lock, sem["upd"], self.hdr, SLEEP_PRODUCER)

    # -- lock helpers ----------------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> None:
        self.lock.acquire(timeout)
        if self.hdr[REPAIR]:
            self._repair()

    def release(self) -> None:
        self.lock.release()

    def _repair(self) -> None:
        """A holder died inside the lock: forget whatever it was half-way through writing."""
        total, reserved = int(self.hdr[TOTAL]), int(self.hdr[RESERVED])
        if reserved > total:
            slots = np.arange(total, reserved) % self.capacity
            self.arrays["abs"][slots] = -1
        self.hdr[RESERVED] = total
        self.hdr[REPAIR] = 0

    # -- producer side ---------------------------------------------------------------------

    def insert(self, block: Block) -> int:
        """Copy ``block`` into the ring; call with the lock held. Returns its first abs number."""
        a = self.arrays
        c = self.capacity
        n = block.n
        start = int(self.hdr[TOTAL])
        # Publish the reservation first: if we die mid-copy, the repair knows what to discard.
        self.hdr[RESERVED] = start + n
        # A block larger than the ring keeps only its newest `capacity` rows (the others would
        # be overwritten by this very insert); links into the dropped rows then fail validity.
        drop = max(0, n - c)
        m = n - drop
        s0 = (start + drop) % c
        first = min(m, c - s0)
        # Invalidate before copying so a torn slot never matches its old absolute number.
        a["abs"][s0 : s0 + first] = -1
        if first < m:
            a["abs"][: m - first] = -1
        data = block.data
        if block.frames is not None:
            data = {**data, "refs": self._insert_frames(block)}
        for name, values in data.items():
            self._put(a[name], s0, first, values[drop:])
        links = np.where(block.rel_next >= 0, block.rel_next + start, -1)
        self._put(a["next"], s0, first, links[drop:])
        if block.rel_ep_end is not None:
            self._put(a["ep_end"], s0, first, block.rel_ep_end[drop:] + start)
        if block.patches.shape[0]:
            tail, head = block.patches[:, 0], block.patches[:, 1]
            slot = tail % c
            # Only patch a tail that is still stored; an overwritten one just loses its link.
            ok = a["abs"][slot] == tail
            a["next"][slot[ok]] = head[ok] + start
        self._put(a["abs"], s0, first, np.arange(start + drop, start + n, dtype=np.int64))
        self.hdr[TOTAL] = start + n
        self.fhdr[LAST_INSERT] = time.time()
        return start

    def _insert_frames(self, block: Block) -> np.ndarray:
        """Copy the block's new frames into the frame ring; returns its references as
        absolute frame numbers. Lock held."""
        assert block.frames is not None
        f = self.num_frames
        m = block.frames.shape[0]
        start = int(self.hdr[FRAMES])
        drop = max(0, m - f)
        s0 = (start + drop) % f
        first = min(m - drop, f - s0)
        # As for transitions: invalid first, so a torn frame never matches its number.
        self.frame_abs[s0 : s0 + first] = -1
        if first < m - drop:
            self.frame_abs[: m - drop - first] = -1
        self._put(self.frames, s0, first, block.frames[drop:])
        self._put(self.frame_abs, s0, first, np.arange(start + drop, start + m, dtype=np.int64))
        self.hdr[FRAMES] = start + m
        block.frame_start = start
        return frame_ring.decode(block.data["refs"], start)

    @staticmethod
    def _put(dst: np.ndarray, s0: int, first: int, values: np.ndarray) -> None:
        dst[s0 : s0 + first] = values[:first]
        if first < values.shape[0]:
            dst[: values.shape[0] - first] = values[first:]

    # -- reader side -----------------------------------------------------------------------

    def valid(self, j: np.ndarray, total: int) -> np.ndarray:
        """Which absolute numbers ``j`` are still stored intact, given ``total`` inserts."""
        ok = (j >= max(0, total - self.capacity)) & (j < total)
        slot = np.where(ok, j, 0) % self.capacity
        ok &= self.arrays["abs"][slot] == j
        if self.images:
            # A slot is whole only while the frame ring still holds every frame it names.
            refs = self.arrays["refs"][slot]
            ok &= (self.frame_abs[refs % self.num_frames] == refs).all(axis=1)
        return ok

    def gather(self, name: str, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` of field ``name``. Float fields are column views of ``packed``, and
        ``np.take`` on a strided view first copies the whole view: index ``packed`` instead.
        Image ``obs`` / ``next_obs`` are rebuilt from their frames (flat uint8 rows)."""
        if self.images and name in ("obs", "next_obs"):
            return self.stacks(index, name == "next_obs")
        cols = self.columns.get(name)
        if cols is None:
            return np.take(self.arrays[name], index, axis=0)
        lo, hi = cols
        out = self.packed[index, lo:hi]
        return out[..., 0] if name == "logp" else out

    def stacks(self, index: np.ndarray, following: bool) -> np.ndarray:
        """The stacked observations (``following``: next observations) of slots ``index``
        (any shape), as flat uint8 rows ``[..., stack * frame_size]``: one gather of frames."""
        refs = np.take(self.arrays["refs"], index, axis=0)
        refs = refs[..., 1:] if following else refs[..., :-1]
        rows = self.frames[refs % self.num_frames]
        return rows.reshape(*np.shape(index), -1)

    def stack_pair(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(obs, next_obs) stacks of slots ``index [B]`` from one gather of their ``k + 1``
        frames: two row views of it (``[B, stack * frame_size]``, rows ``k + 1`` frames apart),
        since a transition's stacks share ``k - 1`` frames: k + 1 frames copied, not 2 k."""
        refs = np.take(self.arrays["refs"], index, axis=0)
        # np.take: ~15 % faster than fancy indexing for these scattered 7 KB rows.
        rows = np.take(self.frames, refs % self.num_frames, axis=0)  # [B, k + 1, frame_size]
        b = rows.shape[0]
        return rows[:, :-1].reshape(b, -1), rows[:, 1:].reshape(b, -1)

    def size(self) -> int:
        return int(min(self.hdr[TOTAL], self.capacity))

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self.arrays = {}
        self.packed = None  # type: ignore[assignment]
        if self.images:  # views of a segment keep it mapped
            self.frames = self.frame_abs = None  # type: ignore[assignment]
        for seg in self.segments.values():
            seg.close()

    def unlink(self) -> None:
        for seg in self.segments.values():
            seg.unlink()
        for sem in self.semaphores.values():
            sem.unlink()
