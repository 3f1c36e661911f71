"""The user-facing error of the command line and the Python API, in a leaf module.

:class:`UsageError` is raised by the API (``wheeler2.api``, ``export``, ``video``) and caught by
the CLI (``wheeler2.cli``), so it lives below both: neither imports the other for it. It
imports nothing of wheeler2; the errors of one part stay with that part (``ConfigError`` in
``wheeler2.config``, ``CheckpointError`` in ``wheeler2.checkpoint``, ``MemberFailed`` in
``wheeler2.runtime.experiment``).
"""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in what was asked for (not a bug): message only, exit 2."""
