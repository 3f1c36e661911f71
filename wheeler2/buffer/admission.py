"""Which staged rows a writer stores: the task's ``worth_keeping`` flags, and a keep fraction.

``[buffer] keep`` (default 1.0: every row is stored, no filter) is the chance that a row the
task does not flag is stored anyway; a flagged row is always stored. ``[buffer] admit`` says
what one decision covers:

* ``"episode"`` (default): a whole episode, stored when any of its steps is flagged, else with
  probability ``keep``. The writer then stages whole episodes and decides at their end, so an
  episode is stored with every step or not at all: its ``next`` links, its n-step windows, its
  HER goals (``ep_end``) and its sequences are exactly those of an unfiltered replay. This is
  the one unit that is safe with HER, ``n_step > 1``, sequences and image stacks, and the one a
  sparse task wants (keep the episode that reached the goal, not only the step that did).
* ``"transition"``: each row alone (``n_step = 1``, no HER, no sequences, no images). A refused
  row is a hole in its episode: the stored step before it links to nothing (-1), as at a write
  head, so nothing ever follows a link across the hole.

The decision is made in the producer's writer before anything reaches shared memory, so a
refused row costs no slot, no priority leaf and no gate credit.
"""

from __future__ import annotations

import numpy as np

ADMIT_UNITS = ("episode", "transition")


class AdmissionCounts:
    """Rows a writer stored and refused: its figures (a Ray producer holds the counts its
    shard's writer sent back, buffer/ray_shard.py)."""

    def __init__(self, admitted: int = 0, refused: int = 0) -> None:
        self.admitted = int(admitted)  # rows stored
        self.refused = int(refused)  # rows dropped before the insert

    def figures(self) -> dict[str, float]:
        """``replay_admitted`` / ``replay_refused``: rows this writer stored and dropped."""
        return {"replay_admitted": float(self.admitted), "replay_refused": float(self.refused)}


class Admission(AdmissionCounts):
    """The keep decisions of one writer, with its own random stream and counters."""

    def __init__(self, keep: float, unit: str, rng: np.random.Generator) -> None:
        super().__init__()
        self.keep = float(keep)
        self.per_episode = unit == "episode"
        self.rng = rng

    def rows(self, worth: np.ndarray) -> np.ndarray:
        """Keep mask of rows with flags ``worth`` ([n] bool), each decided alone."""
        keep = worth | (self.rng.random(worth.shape[0]) < self.keep)
        self._count(keep, np.ones(worth.shape[0], np.int64))
        return keep

    def episodes(self, worth: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Keep mask of whole episodes: ``worth`` ([m] bool) says whether any step of each was
        flagged, ``lengths`` ([m]) how many rows each holds (for the counters)."""
        keep = worth | (self.rng.random(worth.shape[0]) < self.keep)
        self._count(keep, lengths)
        return keep

    def _count(self, keep: np.ndarray, rows: np.ndarray) -> None:
        kept = int(rows[keep].sum())
        self.admitted += kept
        self.refused += int(rows.sum()) - kept
