"""The experiment scripts' shared library: arms, statistics, stored runs and reports.

* :mod:`experiments.lib.arms`: named variants of an experiment run over seeds, interleaved;
* :mod:`experiments.lib.stats`: medians, IQM, bootstrap intervals, steps to a threshold;
* :mod:`experiments.lib.runs`: the per-run records stored beside each result table;
* :mod:`experiments.lib.report`: markdown result files, rewritten whole, with the command and
  the date that made them, and their regeneration from the stored runs;
* :mod:`experiments.lib.setups`: setups several scripts share (SB3 sides, Reacher's heads).

Scripts run from the repository root as ``python -m experiments.<name>``; they import each
other's pieces only through this package. Importing it is cheap (numpy at most).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "cfg"
RESULTS = ROOT / "experiments" / "results"
NOTES = RESULTS / "notes"
