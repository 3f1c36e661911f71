"""The one exception a config mistake becomes, and the warning an old key name gives."""

from __future__ import annotations

from pathlib import Path

from wheeler2.errors import KeepsFields


class ConfigError(KeepsFields, Exception):
    """A config mistake, located: ``cfg/x.toml: [buffer] capacity: expected an integer > 0``."""

    def __init__(
        self,
        file: str | Path | None,
        table: str | None,
        key: str | None,
        message: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.file = None if file is None else str(file)
        self.table = table
        self.key = key
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = " ".join(part for part in (self.table, self.key) if part)
        head = self.file or "<config>"
        if self.line is not None:
            head += f": line {self.line}, column {self.column}"
        return f"{head}: {where}: {self.message}" if where else f"{head}: {self.message}"


class ConfigDeprecationWarning(FutureWarning):
    """An old key name was used; shown to users by default (unlike DeprecationWarning)."""
