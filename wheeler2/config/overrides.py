"""``--set table.key=value``: changes to a file's parsed data before validation."""

from __future__ import annotations

import tomllib
from typing import Any

from .errors import ConfigError
from .files import SourcedTable


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
    set_key(raw, path.split("."), value, file, "--set", expr)


def set_key(
    raw: dict[str, Any],
    parts: list[str],
    value: Any,
    file: str,
    flag: str,
    expr: str | None = None,
) -> None:
    """``raw[parts[0]][parts[1]]... = value``, written by ``flag`` (``--set`` with ``expr``,
    ``--seed``, ``--out``).

    Where ``raw``'s tables are :class:`SourcedTable` s (``load`` makes them so), each key written
    here names the flag as its writer: a refused value is reported as the flag's, not as the
    file's, whose line the user would look for in vain.
    """
    source = flag if expr is None else f"{flag} {expr}"
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = _list_item(node, part, ".".join(parts[:depth]), file, flag, expr)
        elif isinstance(node, dict):
            if part not in node:
                node[part] = _new_table(node)
                _written(node, part, source)
            node = node[part]
        if not isinstance(node, dict | list):
            raise ConfigError(file, flag, expr, f"'{where}' is a value, not a table")
    last = parts[-1]
    if isinstance(node, list):
        array, entry = ".".join(parts[:-1]), ".".join(parts)
        raise ConfigError(
            file,
            flag,
            expr,
            f"'{array}' is an array of tables and '{entry}' one of its tables; set a key of "
            f"it ({entry}.KEY=VALUE)",
        )
    node[last] = value
    _written(node, last, source)


def canonical_key(raw: dict[str, Any], key: str) -> str:
    """``key`` with each index into an array of tables written as that table's name
    (``team.0.params.lr`` -> ``team.target.params.lr``), so two ways of writing one key compare
    equal; parts that do not resolve are left as written."""
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts):
        if isinstance(node, list):
            if part.isdigit() and int(part) < len(node) and isinstance(node[int(part)], dict):
                item = node[int(part)]
                name = _name_of(item)
                if isinstance(name, str):
                    parts[i] = name
                node = item
                continue
            node = next((t for t in node if _name_of(t) == part), None)
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            break
    return ".".join(parts)


def _new_table(parent: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(parent, SourcedTable):
        return {}
    table = SourcedTable()
    table.sources = {}
    return table


def _written(table: dict[str, Any], key: str, source: str) -> None:
    if isinstance(table, SourcedTable):
        table.sources[key] = source


def _list_item(
    items: list[Any], part: str, where: str, file: str, flag: str, expr: str | None
) -> Any:
    if part.isdigit():
        if int(part) < len(items):
            return items[int(part)]
        raise ConfigError(file, flag, expr, f"'{where}' has {len(items)} entries")
    for item in items:
        if _name_of(item) == part:
            return item
    names = [str(_name_of(i)) for i in items if isinstance(i, dict)]
    raise ConfigError(file, flag, expr, f"no [[{where}]] named '{part}'; names: {', '.join(names)}")


def _name_of(item: Any) -> Any:
    """The name a table of an array goes by in a key (its ``name``, else its ``algo``)."""
    return item.get("name", item.get("algo")) if isinstance(item, dict) else None
