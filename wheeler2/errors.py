"""The user-facing error of the command line and the Python API, in a leaf module.

:class:`UsageError` is raised by the API (``wheeler2.api``, ``export``, ``video``) and caught by
the CLI (``wheeler2.cli``), so it lives below both: neither imports the other for it. It
imports nothing of wheeler2; the errors of one part stay with that part (``ConfigError`` in
``wheeler2.config``, ``CheckpointError`` in ``wheeler2.checkpoint``, ``MemberFailed`` in
``wheeler2.runtime.experiment``).
"""

from __future__ import annotations

from typing import Any


def rebuilt(cls: type[BaseException], args: tuple, state: dict[str, Any]) -> BaseException:
    """An exception as it was pickled, without calling its ``__init__`` again."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class KeepsFields:
    """For an exception whose ``__init__`` takes other arguments than its message: pickle
    (a process pool's, an experiment script's ``--jobs``, Ray's) rebuilds it from its
    ``args`` and fields instead of calling ``__init__(*args)``, which raised TypeError on the
    receiving side and took the whole pool down with it (BrokenProcessPool)."""

    def __reduce__(self) -> tuple:
        assert isinstance(self, BaseException)
        return (rebuilt, (type(self), self.args, dict(self.__dict__)))


class UsageError(Exception):
    """A mistake in what was asked for (not a bug): message only, exit 2."""
