"""``--set table.key=value``: changes to a file's parsed data before validation."""

from __future__ import annotations

import tomllib
from typing import Any

from .errors import ConfigError


def parse_override(expr: str, file: str = "<config>") -> tuple[str, Any]:
    """``table.key=value`` as its dotted key and its value (TOML syntax, else a string)."""
    path, sep, text = expr.partition("=")
    parts = path.strip().split(".")
    if not sep or len(parts) < 2 or not all(parts):
        raise ConfigError(file, "--set", expr, "expected table.key=value, e.g. buffer.n_step=3")
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return ".".join(parts), value


def apply_override(raw: dict[str, Any], expr: str, file: str = "<config>") -> None:
    """Apply ``table.key=value`` (value in TOML syntax, else taken as a string) to ``raw``.

    Inside arrays of tables (``team``, ``task.heads``) the next part is an index or a name:
    ``team.target.params.gamma=0.9`` and ``team.0.params.gamma=0.9`` are the same.
    """
    path, value = parse_override(expr, file)
    parts = path.split(".")
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = _list_item(node, part, ".".join(parts[:depth]), file, expr)
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise ConfigError(file, "--set", expr, f"'{where}' is a value, not a table")
    last = parts[-1]
    if isinstance(node, list):
        raise ConfigError(file, "--set", expr, f"'{path}' is an array of tables; set a key in it")
    node[last] = value


def _list_item(items: list[Any], part: str, where: str, file: str, expr: str) -> Any:
    if part.isdigit():
        if int(part) < len(items):
            return items[int(part)]
        raise ConfigError(file, "--set", expr, f"'{where}' has {len(items)} entries")
    for item in items:
        if isinstance(item, dict) and item.get("name", item.get("algo")) == part:
            return item
    names = [str(i.get("name", i.get("algo"))) for i in items if isinstance(i, dict)]
    raise ConfigError(
        file, "--set", expr, f"no [[{where}]] named '{part}'; names: {', '.join(names)}"
    )
