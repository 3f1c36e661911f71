"""What the full ring forgets: the oldest rows, or all but those a rule carries forward.

``[buffer] forget`` (default ``"oldest"``: a plain FIFO ring, as before) and ``forget_keep``:

* ``"priority"``: of the rows an insert is about to overwrite, those whose priority leaf is at
  least the ring's mean leaf (estimated from 256 random slots) are kept;
* ``"reservoir"``: each of those rows is kept with chance ``forget_keep``, so a share of old
  data survives however long the run (a reservoir of past experience).

Either way at most ``forget_keep / (1 - forget_keep)`` kept rows per inserted row, counted
over the run rather than per insert: each insert that overwrites rows adds that many rows'
worth (a fraction too) to a credit, each carried row spends one, and an insert carries at most
the credit's whole rows (so 5-row inserts at ``forget_keep = 0.1``, 0.56 rows' worth each,
still keep their share). The credit lives in the shared header (``FORGET_CREDIT``), so every
producer draws on the one count under the insert's lock; it is capped at the capacity and
checkpointed with the ring (``Replay.state_dict``).
With HER the unit is an episode's stored remainder (``[j, ep_end]``), kept or evicted whole:
one longer than the credit is evicted, and the credit builds up until a later one fits.

A kept row is *carried forward*: copied, under the lock of the insert that would overwrite it,
to the head of the ring just before that insert's rows. The ring itself stays a ring (slot =
absolute number mod capacity), so everything that relies on it holds unchanged for every
producer in shared memory: validity by absolute number, the sampler's mapping of slots to
numbers and its sync (a carried row enters the sum tree as a new one, at the max priority:
the learner looks at it again soon and writes its priority back), n-step links (a carried row
keeps its episode, step and link to its still-stored successor; consecutive rows carried by
the same insert link to each other's copies, but a successor carried by a later insert is a
copy the link does not reach, so an n-step window stops there: a shorter target, still a
correct one), and HER's episodes: a carried episode remainder is a contiguous run
again, its ``ep_end`` the copy's last row and its steps renumbered from 0, so ``[j - step,
ep_end]`` is exactly the copy. Carried rows are counted apart (``CARRIED``): they are not
inserts for the ratio gate.

With sequences (``[buffer] sequence``, without HER) the rule decides on sequence starts:
``"priority"`` keeps a start whose leaf is at least the mean start's (only starts have
leaves), ``"reservoir"`` each with chance ``forget_keep``; a kept start brings the rows of its
window (``burn_in + length + n_step - 1`` steps along its episode's links), so its carried copy
walks its whole sequence. Window rows past the ones the insert overwrites are *moved*: copied
too, and their originals dropped (``abs`` set to -1: a sampler that draws one finds it invalid
and discards it), so no row is stored twice and a later insert cannot cut the carried
sequence short. Copies keep their steps: the sampler's start test (``step % stride == 0``) and
a first step's exact state stay true. Not with image stacks (their frames are not carried)
nor sequences with HER (HER's carried episodes are renumbered from step 0): refused where the
replay is made.
"""

from __future__ import annotations

import numpy as np

from .config import ReplayConfig
from .storage import CARRIED, DATA_FIELDS, FORGET_CREDIT, TOTAL, Block, Storage

_MEAN_SAMPLE = 256


class Forgetting:
    """Carries the rows a rule keeps forward before an insert overwrites them; lock held."""

    def __init__(self, cfg: ReplayConfig, seed: int | list[int]) -> None:
        self.rule = cfg.forget
        self.keep = float(cfg.forget_keep)
        self.rate = self.keep / (1.0 - self.keep)  # kept rows allowed per overwritten row
        self.capacity = cfg.capacity
        self.her = cfg.her is not None
        # Sequences: the rule decides on sequence starts, and a kept start carries the rows of
        # its window (burn-in, trained steps, n-step tail) with it (_sequence_units).
        seq = cfg.sequence
        self.every = 0 if seq is None else seq.every
        self.window = 0 if seq is None else seq.span + cfg.n_step - 1
        # Each process that inserts draws its own stream (reservoir): the replay passes the
        # owner its bare seed, so a serial run forgets reproducibly, and a member its seed
        # with its pid, so two producers never make the same draws.
        self.rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), 41])

    def carry(self, st: Storage, n: int) -> int:
        """Before ``n`` rows are inserted: copy the kept rows among those they would overwrite
        to the head of the ring. Returns how many rows were carried."""
        c = self.capacity
        total = int(st.hdr[TOTAL])
        overwritten = min(n, total + n - c)
        if n >= c or overwritten <= 0:
            return 0
        # The credit carries the fractions of rows over from insert to insert (a per-insert
        # int() would drop them: nothing at all for 5-row inserts at forget_keep = 0.1).
        credit = min(float(st.fhdr[FORGET_CREDIT]) + self.rate * overwritten, float(c))
        st.fhdr[FORGET_CREDIT] = credit
        budget = min(int(credit + 1e-9), c - n - 1)
        if budget <= 0:
            return 0
        # The oldest stored row; below 0 on the ring's first wrap, where numbers < 0 name
        # slots never written (their abs is -1, which number -1 would match: never kept).
        lo = total - c
        moved = None
        if self.her:
            units = self._her_units(st, lo, total, n, budget)
        elif self.every:
            units, moved = self._sequence_units(st, lo, total, n, budget)
        else:
            units = self._row_units(st, lo, total, n, budget)
        if not units:
            return 0
        rows = np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in units])
        self._copy(st, rows, units)
        if moved is not None and moved.shape[0]:
            # Window rows past the overwritten ones were copied too: their originals go, so
            # no row is stored twice (the samplers drop a drawn start that is no longer valid).
            st.arrays["abs"][moved % c] = -1
        st.hdr[CARRIED] += rows.shape[0]
        st.fhdr[FORGET_CREDIT] = max(0.0, credit - rows.shape[0])
        return int(rows.shape[0])

    def _keeps(self, st: Storage, slots: list[np.ndarray]) -> np.ndarray:
        """The rule's verdict on each unit (its rows' slots)."""
        if self.rule == "reservoir":
            return self.rng.random(len(slots)) < self.keep
        leaves, mean = st.arrays["priority"], self._mean_leaf(st)
        return np.array([leaves[s].max() >= mean for s in slots], dtype=bool)

    def _mean_leaf(self, st: Storage) -> float:
        """The ring's mean priority leaf, from random slots (the whole ring would cost a read
        of every leaf per insert)."""
        probe = self.rng.integers(0, self.capacity, _MEAN_SAMPLE)
        return float(st.arrays["priority"][probe].mean())

    def _row_units(
        self, st: Storage, lo: int, total: int, n: int, budget: int
    ) -> list[tuple[int, int]]:
        """Single rows, decided together: the first ``n + budget`` oldest rows are enough, as
        at most ``budget`` of them are kept."""
        j = np.arange(lo, min(total, lo + n + budget), dtype=np.int64)
        slots = j % self.capacity
        ok = (j >= 0) & (st.arrays["abs"][slots] == j)
        if self.rule == "priority":
            keep = ok & (st.arrays["priority"][slots] >= self._mean_leaf(st))
        else:
            keep = ok & (self.rng.random(j.shape[0]) < self.keep)
        keep &= np.cumsum(keep) <= budget
        # Stop where n rows have been evicted: the rows after that are not overwritten now.
        evicted = np.cumsum(~keep)
        stop = int(np.searchsorted(evicted, n)) + 1
        kept = j[:stop][keep[:stop]]
        return [(int(a), int(a)) for a in kept]

    def _sequence_units(
        self, st: Storage, lo: int, total: int, n: int, budget: int
    ) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Sequence starts the rule keeps, each with its window: (kept rows as units, the kept
        rows past the overwritten ones, whose originals are then dropped).

        Rows are looked at oldest first, as far as the insert will overwrite: ``n`` new rows
        plus the kept copies, so every row of that span is either kept or evicted, as in
        :meth:`_row_units`. A kept start's window may reach past the span: those rows move
        (copied, their original dropped), so the carried sequence is whole and stays so."""
        a, c = st.arrays, self.capacity
        mean = 0.0
        if self.rule == "priority":
            # Only starts have leaves (0 elsewhere): compare with the mean start's.
            probe = a["priority"][self.rng.integers(0, c, _MEAN_SAMPLE)]
            mean = float(probe[probe > 0].mean()) if (probe > 0).any() else 0.0
        kept: set[int] = set()
        p = 0
        while p < len(kept) + n and lo + p < total:
            r, p = lo + p, p + 1
            slot = r % c
            if r in kept or r < 0 or a["abs"][slot] != r or a["step"][slot] % self.every:
                continue
            if self.rule == "reservoir":
                chosen = self.rng.random() < self.keep
            else:
                chosen = a["priority"][slot] >= mean > 0.0
            window = self._window(st, r, total) if chosen else []
            if window and len(kept) + len(window) <= budget:
                kept.update(window)
        rows = np.array(sorted(kept), dtype=np.int64)
        return [(int(x), int(x)) for x in rows], rows[rows >= lo + p]

    def _window(self, st: Storage, r: int, total: int) -> list[int]:
        """The stored rows of the sequence starting at ``r``, along its episode's links, as
        the sampler walks them (``burn_in + length + n_step - 1`` at most). A step whose own
        successor is not written yet (the writer will patch its link) is left in place."""
        a, c = st.arrays, self.capacity
        rows = [r]
        while len(rows) < self.window:
            s = rows[-1] % c
            nxt = int(a["next"][s])
            if a["terminated"][s] or a["truncated"][s] or not rows[-1] < nxt < total:
                break
            t = nxt % c
            if a["abs"][t] != nxt or a["episode"][t] != a["episode"][s]:
                break
            if a["next"][t] < 0 and not (a["terminated"][t] or a["truncated"][t]):
                break
            rows.append(nxt)
        return rows

    def _her_units(
        self, st: Storage, lo: int, total: int, n: int, budget: int
    ) -> list[tuple[int, int]]:
        """Episode remainders ``[j, ep_end]``, oldest first, until ``n`` rows are evicted."""
        a = st.arrays
        c = self.capacity
        units: list[tuple[int, int]] = []
        j, evicted, kept = lo, 0, 0
        while evicted < n and j < total:
            slot = j % c
            stored = j >= 0 and a["abs"][slot] == j
            end = min(int(a["ep_end"][slot]), total - 1) if stored else j
            end = max(end, j)
            length = end - j + 1
            span = np.arange(j, end + 1) % c
            if stored and kept + length <= budget and self._keeps(st, [span])[0]:
                units.append((j, end))
                kept += length
            else:
                evicted += length
            j = end + 1
        return units

    def _copy(self, st: Storage, rows: np.ndarray, units: list[tuple[int, int]]) -> None:
        """Insert copies of ``rows`` (absolute numbers, oldest first) as one block."""
        a = st.arrays
        c = self.capacity
        slots = rows % c
        fields = [f for f in DATA_FIELDS if f in a and f != "refs"]
        data = {f: np.take(a[f], slots, axis=0) for f in fields}
        m = rows.shape[0]
        old_next = a["next"][slots]
        rel_ep_end = None
        if self.her:
            # Each unit a contiguous episode remainder again: linked inside, its own end, its
            # steps from 0 (HER's episode is [j - step, ep_end]).
            rel_next = np.arange(1, m + 1, dtype=np.int64)
            rel_ep_end = np.empty(m, np.int64)
            at = 0
            for first, last in units:
                size = last - first + 1
                rel_next[at + size - 1] = -1
                rel_ep_end[at : at + size] = at + size - 1
                data["step"][at : at + size] -= data["step"][at]
                at += size
            outside = np.zeros(m, dtype=bool)
        else:
            # A carried row's successor: its copy when carried too, else the stored original.
            pos = np.searchsorted(rows, old_next)
            inside = (pos < m) & (rows[np.minimum(pos, m - 1)] == old_next)
            rel_next = np.where(inside, pos, -1).astype(np.int64)
            outside = ~inside & (old_next >= 0)
        block = Block(data, rel_next, rel_ep_end, np.zeros((0, 2), np.int64), m)
        start = st.insert(block)
        if outside.any():
            # Links back to rows still stored (older numbers); a successor that this very
            # insert overwrites fails the usual validity check, as any overwritten one does.
            a["next"][(start + np.flatnonzero(outside)) % c] = old_next[outside]
