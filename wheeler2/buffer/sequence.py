"""Sequence replay for recurrent learners (R2D2, Kapturowski et al. 2019).

How sequences are cut. Every ``stride``-th step of an episode (``step % stride == 0``, stride
``length // 2`` by default, so consecutive sequences overlap by half) is a *sequence start*.
A sampled start ``w`` spans ``T = burn_in + length`` steps ``w, w+1, ...``, followed along the
episode's links (``seqjit.walk``): a sequence stops after a terminal or truncated step, at a
link to a step not inserted yet (the ring's write head) or no longer stored, and never enters
another episode; ``alive`` [B, T] says which positions hold a real step of it. The policy
state stored with ``w`` is handed back with it.

Burn-in. The stored state was made by the network that acted, older than the learner's: the
first ``burn_in`` positions only rebuild the state (``mask`` False there, no loss, and the
learner lets no gradient through them). A start at step 0 of its episode is the exception:
its stored state is the initial one, exact for any network, so it trains from its first
position, on ``length`` positions or up to the next start's first trained step (``stride +
burn_in``, within the span) if that is further, so that every step is trained somewhere.
A start whose episode ends inside its burn-in has nothing to train: its priority is zeroed and
it is drawn again (the previous start's sequence already covers those steps, given stride <=
length).

Priorities. The tree holds one leaf per slot, non-zero only at sequence starts; new starts get
the running max priority. The learner reports one priority per sequence,
``eta * max|delta| + (1 - eta) * mean|delta|`` over its trained steps (``sequence_priority``),
and importance weights are per sequence. Without ``[buffer] prioritized`` the same tree runs
with alpha = 0: every start weighs 1, other slots 0, a uniform draw over sequences.

n-step. Position t's return and bootstrap discount fold steps t .. t + n - 1 exactly as the
transition path does (``nstep.fold_returns``), so ``T + n - 1`` steps are gathered and
``boot[b, t]`` names the position whose ``next_obs`` the target bootstraps from.

HER. A relabelled sequence (a fraction k / (k + 1)) gets *one* goal for all its steps: the
next achieved goal of a step drawn after its first trained step (future), its episode's last
step (final) or any of its episode's stored steps (episode); every alive step's rewards are
recomputed for that goal through the task's relabel function. HER writers insert whole
episodes contiguously, so those steps are found by offset, as in ``her``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from wheeler2.needs import SequenceConfig
from wheeler2.needs import sequence_priority as sequence_priority  # re-exported

from .config import Layout, ReplayConfig, ReplayError
from .her import call_relabel
from .sampler import PrioritizedSampler
from .storage import MAX_PRIORITY, SYNCED, Storage
from .sumtree import SumMinTree, padded_size


class SequenceSampler(PrioritizedSampler):
    """Draws sequence starts by priority (uniformly with alpha = 0 when not prioritized)."""

    def __init__(self, storage: Storage, cfg: ReplayConfig, rng: np.random.Generator) -> None:
        assert cfg.sequence is not None
        self.storage = storage
        self.capacity = cfg.capacity
        self.every = cfg.sequence.every
        # Without prioritized replay: leaves of 1 at starts (priority ** 0), weights all 1.
        self.alpha = cfg.alpha if cfg.prioritized else 0.0
        self.beta0 = cfg.beta if cfg.prioritized else 0.0
        self.beta_steps = cfg.beta_steps if cfg.prioritized else None
        self.eps = cfg.eps
        self.rng = rng
        if cfg.prioritized:
            leaves = storage.arrays["priority"]
        else:
            leaves = np.zeros(padded_size(cfg.capacity), dtype=np.float64)
        self.tree = SumMinTree(cfg.capacity, leaves)
        self._lock = threading.Lock()
        # Shared leaves may already hold priorities (a loaded checkpoint); private ones do not.
        self.total = int(storage.hdr[SYNCED]) if cfg.prioritized else 0
        self.lo = 0

    def sync(self, total: int) -> None:
        """New slots get the max priority if they start a sequence, 0 otherwise (lock held)."""
        with self._lock:
            if total <= self.total:
                return
            c = self.capacity
            start = max(self.total, total - c)
            slots = np.arange(start, total, dtype=np.int64) % c
            is_start = self.storage.arrays["step"][slots] % self.every == 0
            value = float(self.storage.fhdr[MAX_PRIORITY]) ** self.alpha
            self.tree.update(slots, np.where(is_start, value, 0.0))
            self._drop_stale(total)
            self.total = total
            self.storage.hdr[SYNCED] = total


@dataclass
class SequenceRaw:
    """What is copied out under the lock; the rest of a batch is computed outside it."""

    j: np.ndarray  # int64 [B] absolute number of each sequence's first step
    slots: np.ndarray  # int64 [B, T + n - 1]
    alive: np.ndarray  # bool [B, T + n - 1]
    burn: np.ndarray  # int64 [B] positions of burn-in (0 for a sequence that starts its episode)
    rows: np.ndarray  # float32 [B, T + n - 1, width] packed rows
    terminated: np.ndarray  # bool [B, T + n - 1]
    action: np.ndarray | None  # int64 [B, T + n - 1] (discrete actions), else in ``rows``
    state: np.ndarray | None  # float32 [B, state_dim] stored at each first step
    relabelled: np.ndarray | None  # int64 [m] rows given a new goal
    goal: np.ndarray | None  # float32 [m, goal_dim] their goals
    # Image layouts: (obs, next_obs) uint8 [B, T + n - 1, obs_dim] rebuilt from their frames.
    images: tuple[np.ndarray, np.ndarray] | None = None


_SEQJIT: ModuleType | None = None


def _kernels() -> ModuleType:
    global _SEQJIT
    if _SEQJIT is None:
        from . import seqjit

        _SEQJIT = seqjit
    return _SEQJIT


def walk(storage: Storage, j: np.ndarray, total: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(slots, alive) [B, steps] of the sequences starting at the stored numbers ``j``."""
    a = storage.arrays
    b = j.shape[0]
    slots = np.empty((b, steps), dtype=np.int64)
    alive = np.empty((b, steps), dtype=bool)
    _kernels().walk(
        np.ascontiguousarray(j, dtype=np.int64),
        int(total),
        storage.capacity,
        a["next"],
        a["episode"],
        a["step"],
        a["abs"],
        a["terminated"],
        a["truncated"],
        slots,
        alive,
    )
    return slots, alive


def burn_of(storage: Storage, slot0: np.ndarray, seq: SequenceConfig) -> np.ndarray:
    """Burn-in positions per sequence: none where the sequence starts its episode."""
    return np.where(storage.arrays["step"][slot0] == 0, 0, int(seq.burn_in)).astype(np.int64)


def ended(storage: Storage, slots: np.ndarray) -> np.ndarray:
    """[B] bool: the walked sequences stop where their episode ended (not at the write head).

    Walks repeat the last slot they reached, so the last column is that step."""
    last = slots[:, -1]
    return storage.arrays["terminated"][last] | storage.arrays["truncated"][last]


def cut_off(storage: Storage, slots: np.ndarray, total: int) -> np.ndarray:
    """[B] bool: the walked sequences stop at a link to a step that is no longer stored (not
    one still to be written): they can never grow. Only a ring that carries rows forward
    (``[buffer] forget``) makes these, as a start's successors are otherwise newer than it."""
    nxt = storage.arrays["next"][slots[:, -1]]
    return (nxt >= 0) & ~storage.valid(nxt, total)


def trained(alive: np.ndarray, burn: np.ndarray, seq: SequenceConfig) -> np.ndarray:
    """mask [B, T]: alive positions past each row's burn-in (and within ``length`` of it).

    A row that starts its episode (burn 0) trains on up to where the next start's trained
    steps begin (``stride + burn_in``, at most the span) when that is further than ``length``:
    otherwise, with ``burn_in + stride > length``, steps ``length ..`` of every episode would
    be in no sequence's loss."""
    t = np.arange(seq.span)[None, :]
    first = min(max(seq.length, seq.every + seq.burn_in), seq.span)
    end = np.where(burn == 0, first, burn + seq.length)
    return alive[:, : seq.span] & (t >= burn[:, None]) & (t < end[:, None])


def gather(
    storage: Storage,
    cfg: ReplayConfig,
    j: np.ndarray,
    slots: np.ndarray,
    alive: np.ndarray,
    burn: np.ndarray,
    total: int,
    rng: np.random.Generator,
) -> SequenceRaw:
    """Copy every field a sequence batch needs; lock held, ``j`` valid and walked."""
    a = storage.arrays
    lay: Layout = storage.layout
    flat = slots.reshape(-1)
    shape = slots.shape
    rows = np.take(storage.packed, flat, axis=0).reshape(*shape, -1)
    terminated = np.take(a["terminated"], flat).reshape(shape)
    action = np.take(a["action"], flat).reshape(shape) if lay.discrete else None
    state = np.take(a["state"], slots[:, 0], axis=0) if lay.state_dim else None
    relabelled = goal = None
    her = cfg.her
    if her is not None:
        relabelled, g = choose_sequence_goals(storage, cfg, j, slots[:, 0], burn, total, rng)
        lo, hi = storage.columns["next_achieved_goal"]
        goal = storage.packed[g % cfg.capacity, lo:hi]
    images = None
    if lay.images:
        images = (storage.gather("obs", slots), storage.gather("next_obs", slots))
    return SequenceRaw(
        j, slots, alive, burn, rows, terminated, action, state, relabelled, goal, images
    )


def choose_sequence_goals(
    storage: Storage,
    cfg: ReplayConfig,
    j: np.ndarray,
    slot0: np.ndarray,
    burn: np.ndarray,
    total: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(relabelled rows [m], absolute number of each one's goal step [m]); lock held.

    Episodes sit contiguously in the ring (HER writers insert them whole), so every number in
    ``[max(first step, oldest stored), ep_end]`` is stored and of the same episode as ``j``."""
    her = cfg.her
    assert her is not None
    a = storage.arrays
    b = j.shape[0]
    rows = np.flatnonzero(rng.random(b) < her.fraction)
    jr = j[rows]
    end = a["ep_end"][slot0[rows]]
    u = rng.random(rows.shape[0])
    if her.strategy == "future":
        lo = np.minimum(jr + burn[rows], end)  # after the first trained step, inclusive
    elif her.strategy == "final":
        lo = end
    else:  # "episode" (random is refused when the buffer is built)
        lo = np.maximum(jr - a["step"][slot0[rows]], total - cfg.capacity)
    g = lo + np.floor(u * (end - lo + 1)).astype(np.int64)
    return rows, np.minimum(g, end)


def finish(
    raw: SequenceRaw,
    storage: Storage,
    cfg: ReplayConfig,
    gamma: float,
    relabel: Any,
    weight: np.ndarray,
) -> dict[str, np.ndarray]:
    """The batch handed to the learner ([B, T, ...] arrays, batch first)."""
    seq = cfg.sequence
    assert seq is not None
    lay: Layout = storage.layout
    cols = storage.columns
    t_len, n = seq.span, cfg.n_step
    rows = raw.rows

    def col(name: str) -> np.ndarray:
        lo, hi = cols[name]
        return rows[..., lo:hi]

    alive = raw.alive
    reward = col("reward")
    obs, next_obs = raw.images if raw.images is not None else (col("obs"), col("next_obs"))
    action = raw.action if raw.action is not None else col("action")
    if lay.goal_dim:
        goal = col("desired_goal").copy()
        if raw.relabelled is not None and raw.goal is not None and raw.relabelled.shape[0]:
            r = raw.relabelled
            goal[r] = raw.goal[:, None, :]
            # One goal for the whole sequence: every alive step's rewards for it.
            sub = alive[r]
            bi, ti = np.nonzero(sub)
            bi = r[bi]
            reward = reward.copy()
            act = action[bi, ti]
            reward[bi, ti] = call_relabel(
                relabel,
                obs[bi, ti],
                act[:, None] if raw.action is not None else act,
                next_obs[bi, ti],
                col("next_achieved_goal")[bi, ti],
                goal[bi, ti],
                reward.shape[2],
            )
        obs = np.concatenate([obs, goal], axis=2)
        next_obs = np.concatenate([next_obs, goal], axis=2)
    ret, discount, boot = fold_sequence(reward, alive, raw.terminated, gamma, n, t_len)
    mask = trained(alive, raw.burn, seq)
    contiguous = np.ascontiguousarray
    out = {
        "obs": contiguous(obs[:, :t_len]),
        "action": contiguous(action[:, :t_len]),
        "reward": ret,
        "next_obs": contiguous(next_obs),
        "discount": discount,
        "boot": boot,
        "alive": contiguous(alive[:, :t_len]),
        "mask": mask,
        "burn": raw.burn,
        "weight": weight,
        "index": raw.j,
    }
    if raw.state is not None:
        out["state"] = raw.state
    if lay.logp:
        out["logp"] = contiguous(col("logp")[:, :t_len, 0])
    return out


def fold_sequence(
    reward: np.ndarray,
    alive: np.ndarray,
    terminated: np.ndarray,
    gamma: float,
    n: int,
    t_len: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position t < ``t_len``: (n-step return [B, T, H], bootstrap discount [B, T],
    bootstrap position [B, T]) from [B, T + n - 1] steps, as ``nstep.fold_returns`` folds a
    window: steps t .. t + k - 1 where k counts the alive ones (``alive`` only turns False
    once along a row), discount ``gamma ** k``, or 0 when step t + k - 1 terminated."""
    b = reward.shape[0]
    ret = np.zeros((b, t_len, reward.shape[2]), dtype=np.float64)
    length = np.zeros((b, t_len), dtype=np.int64)
    for k in range(n):
        live = alive[:, k : k + t_len]
        ret += (gamma**k) * live[..., None] * reward[:, k : k + t_len]
        length += live
    pos = np.arange(t_len)[None, :]
    boot = pos + np.maximum(length, 1) - 1
    ended = np.take_along_axis(terminated, boot, axis=1)
    discount = np.where(ended | (length == 0), 0.0, float(gamma) ** length)
    return ret.astype(np.float32), discount.astype(np.float32), boot


def check(layout: Layout, cfg: ReplayConfig) -> None:
    """Refuse settings sequence replay does not serve."""
    her = cfg.her
    if her is not None and her.strategy == "random":
        raise ReplayError("sequence replay relabels with future, final or episode goals")
    if her is not None and her.terminate_on_goal:
        raise ReplayError("sequence replay does not end relabelled sequences at their goal")
