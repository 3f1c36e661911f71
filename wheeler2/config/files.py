"""The experiment file as data: TOML parsed with errors that point at the line, ``extends``
chains merged (each key remembering the file that wrote it), and code specs (``./x.py:Name``)
made absolute against the file that names them. ``reader.py`` checks the data this returns.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, overload

from wheeler2 import registry
from wheeler2.schema import show

from .errors import ConfigError
from .toml_out import _is_table_array

# The top-level key naming the file this one extends (see parse_toml).
EXTENDS = "extends"


# ---------------------------------------------------------------------------------------------
# The file


def parse_toml(path: Path) -> dict[str, Any]:
    """An experiment file's data; with ``extends = "base.toml"`` at its top, the base's data
    (read the same way, so chains work) with this file's merged over it (:func:`with_bases`)."""
    return with_bases(_parse_one(path), path)


def _parse_one(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, None, f"cannot read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        lines = text.splitlines()
        found = re.search(r"\(at line (\d+), column (\d+)\)", message)
        if found is not None:
            line, column = int(found.group(1)), int(found.group(2))
            reason = message[: found.start()].strip()
        else:
            # "(at end of document)": point just past the last line, where the input ran out.
            line = max(len(lines), 1)
            column = len(lines[-1]) + 1 if lines else 1
            reason = re.sub(r"\s*\(at end of document\)", "", message)
        shown = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * (column - 1) + "^"
        raise ConfigError(
            path,
            None,
            None,
            f"TOML syntax error: {reason}\n    {shown}\n    {caret}",
            line=line,
            column=column,
        ) from None


# ---------------------------------------------------------------------------------------------
# Files that extend others


class SourcedTable(dict[str, Any]):
    """A table merged from several files by ``extends``; ``sources`` maps each key to the file
    that wrote it, so an unknown key is reported in its own file, not the one that was run."""

    sources: dict[str, str]


def with_bases(
    raw: dict[str, Any], path: str | Path, chain: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``raw``, the data of file ``path``, with its ``extends`` resolved: the base file (a path
    relative to ``path``'s folder) read with its own bases, and ``raw`` merged over it.

    Tables merge key by key, at every depth. Any other value replaces the base's, arrays of
    tables included: a file's ``[[team]]`` entries are the whole team, since merging list items
    by position would pair members by accident. A table written where the base has an array of
    tables changes the entries it names, as ``--set`` addresses them (``[team.explorer]
    count = 4`` over the base's member named "explorer"). ``chain``: the files that led here.
    """
    path = Path(path)
    if EXTENDS not in raw:
        _refuse_extends_in_a_table(raw, path)
        return sourced(raw, str(path)) if chain else raw
    raw = dict(raw)
    name = raw.pop(EXTENDS)
    file = str(path)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            file,
            None,
            EXTENDS,
            f"expected the base file's path (relative to this file), got {show(name)}",
        )
    # normpath: the chain reads "cfg/base.toml", not "cfg/sub/../base.toml".
    base = Path(os.path.normpath(path.parent / name))
    here = (*chain, path)
    seen = [p.resolve() for p in here]
    if base.resolve() in seen:
        start = seen.index(base.resolve())
        loop = " -> ".join(str(p) for p in (*here[start:], here[start]))
        raise ConfigError(here[start], None, EXTENDS, f"cycle {loop}")
    if not base.exists():
        looked = "" if str(base) == name else f" (looked for {base})"
        raise ConfigError(file, None, EXTENDS, f"no such file {show(name)}{looked}")
    if not base.is_file():
        raise ConfigError(file, None, EXTENDS, f"{show(name)} is a directory ({base}), not a file")
    merged = with_bases(_code_pathsabsolute_spec(_parse_one(base), base), base, here)
    return _merge(sourced(merged, str(base)), raw, file)


def _refuse_extends_in_a_table(raw: dict[str, Any], path: Path) -> None:
    """``extends`` written under a table header is that table's key to TOML, and no table has
    one: say where it goes rather than report the tables the base would have given."""
    for name, value in raw.items():
        tables = value if isinstance(value, list) else [value]
        for table in tables:
            if isinstance(table, dict) and EXTENDS in table:
                header = f"[[{name}]]" if isinstance(value, list) else f"[{name}]"
                raise ConfigError(
                    path,
                    header,
                    EXTENDS,
                    f"extends goes at the top of the file, before the first table header; "
                    f"written under {header}, TOML reads it as a key of that table",
                )


def sourced(value: Any, file: str) -> Any:
    """``value`` with each table a :class:`SourcedTable` whose keys come from ``file`` (tables
    already merged keep their sources)."""
    if isinstance(value, SourcedTable):
        return value
    if isinstance(value, dict):
        table = SourcedTable((k, sourced(v, file)) for k, v in value.items())
        table.sources = dict.fromkeys(table, file)
        return table
    if isinstance(value, list):
        return [sourced(v, file) for v in value]
    return value


def _merge(base: SourcedTable, over: dict[str, Any], file: str, where: str = "") -> SourcedTable:
    out = SourcedTable(base)
    out.sources = dict(base.sources)
    for key, value in over.items():
        old = out.get(key)
        name = f"{where}.{key}" if where else key
        if isinstance(old, SourcedTable) and isinstance(value, dict):
            out[key] = _merge(old, value, file, name)
        elif isinstance(value, dict) and _is_table_array(old):
            out[key] = _merge_entries(out[key], value, file, name)
        else:
            out[key] = sourced(value, file)
            out.sources[key] = file
    return out


def _merge_entries(
    entries: list[SourcedTable], changes: dict[str, Any], file: str, where: str
) -> list[SourcedTable]:
    """A table over an array of tables: each key names an entry (by ``name``, else ``algo``,
    or by index, as ``--set`` does) and its table merges over that entry."""
    entries = list(entries)
    names = [str(e.get("name", e.get("algo"))) for e in entries]
    for part, change in changes.items():
        at = int(part) if part.isdigit() else names.index(part) if part in names else None
        if at is None or at >= len(entries):
            raise ConfigError(
                file,
                None,
                f"{where}.{part}",
                f"the base file has no [[{where}]] entry '{part}' (its entries: "
                f"{', '.join(names)}); write [[{where}]] entries to replace them all",
            )
        if not isinstance(change, dict):
            raise ConfigError(
                file,
                None,
                f"{where}.{part}",
                f"expected a table of keys to change in the base's entry, got {show(change)}",
            )
        entries[at] = _merge(entries[at], change, file, f"{where}.{part}")
    return entries


def _code_pathsabsolute_spec(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """A base file's code specs (``"./x.py:Name"``) made absolute against its own folder, so
    that merged into a file elsewhere they still name the files beside the base. The keys are
    those the table readers (``reader.py``) pass through :func:`absolute_spec`."""
    file = str(path)

    def fix(table: Any, key: str) -> None:
        if isinstance(table, dict) and isinstance(table.get(key), str):
            table[key] = absolute_spec(table[key], file)

    env, task, team = raw.get("env"), raw.get("task"), raw.get("team")
    fix(env, "id")
    if isinstance(env, dict) and isinstance(env.get("kwargs"), dict):
        env["kwargs"] = {k: absolute_value(v, file) for k, v in env["kwargs"].items()}
    if isinstance(env, dict) and isinstance(env.get("wrappers"), list):
        env["wrappers"] = [absolute_value(w, file) for w in env["wrappers"]]
        for entry in env["wrappers"]:
            fix(entry, "wrapper")
    fix(task, "spec")
    heads = task.get("heads") if isinstance(task, dict) else None
    for entry in [
        *(heads if isinstance(heads, list) else []),
        *(team if isinstance(team, list) else []),
    ]:
        fix(entry, "reward")
        fix(entry, "algo")
    return raw


def is_code_spec(value: str) -> bool:
    """``value`` names code by a ``.py`` path: ``"./x.py:Name"``."""
    module, sep, attr = value.partition(":")
    return bool(sep and attr) and registry.is_path_spec(module)


def absolute_value(value: Any, config_path: str) -> Any:
    """``value`` made absolute where it is a code spec by path, else as it is."""
    if isinstance(value, str) and is_code_spec(value):
        return absolute_spec(value, config_path)
    return value


@overload
def absolute_spec(spec: str, config_path: str) -> str: ...
@overload
def absolute_spec(spec: None, config_path: str) -> None: ...
def absolute_spec(spec: str | None, config_path: str) -> str | None:
    """A spec whose module part is a ``.py`` path, made absolute against the config file's
    folder, so the run directory's config.toml works from anywhere (eval, resume)."""
    if spec is None:
        return None
    module, sep, attr = spec.partition(":")
    if not sep or not registry.is_path_spec(module) or Path(module).is_absolute():
        return spec
    base = Path(config_path).parent if config_path != "<config>" else Path.cwd()
    return f"{(base / module).resolve()}:{attr}"
