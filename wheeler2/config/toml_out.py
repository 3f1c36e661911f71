"""A small TOML writer, for when tomli_w is not installed (``Config.to_toml`` falls back to it)."""

from __future__ import annotations

import math
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    # fullmatch: with match and "$", a key ending in a newline would pass as a bare key.
    return k if _BARE_KEY.fullmatch(k) else _toml_string(k)


def _toml_string(s: str) -> str:
    escaped = (
        s.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
    escaped = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", lambda m: f"\\u{ord(m[0]):04x}", escaped)
    return f'"{escaped}"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps_toml(data: dict[str, Any]) -> str:
    """Write nested dicts as TOML: sub-dicts as [tables], lists of dicts as [[arrays]]."""
    lines: list[str] = []
    _write_table(lines, data, ())
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(lines: list[str], table: dict[str, Any], prefix: tuple[str, ...]) -> None:
    nested = {k: v for k, v in table.items() if isinstance(v, dict) or _is_table_array(v)}
    for k, v in table.items():
        if k not in nested:
            lines.append(f"{_key(k)} = {_toml_value(v)}")
    for k, v in nested.items():
        name = ".".join(_key(p) for p in (*prefix, k))
        if isinstance(v, dict):
            lines.extend(["", f"[{name}]"])
            _write_table(lines, v, (*prefix, k))
        else:
            for item in v:
                lines.extend(["", f"[[{name}]]"])
                _write_table(lines, item, (*prefix, k))
