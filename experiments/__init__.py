"""Benchmark and comparison scripts, and the result files they write (``experiments/results/``).

Run a script from the repository root as ``python -m experiments.<name> --help``; rebuild a
result file from its stored runs with ``python -m experiments regen experiments/results/X.md``.
The scripts' shared code is in :mod:`experiments.lib`.
"""
