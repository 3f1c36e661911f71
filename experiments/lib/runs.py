"""Stored runs: one JSON record per finished run, appended as each run ends.

A results table is rebuilt from these files alone (``python -m experiments regen``), so every
figure a table shows is in a record: per seed and arm, the raw figures, not their summary. A
``.jsonl`` file holds one record a line (an interrupted sweep keeps what it finished); a
``.json`` file holds one JSON value (a benchmark's rounds, say).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any


def append(path: str | Path, record: dict[str, Any]) -> None:
    """Append ``record`` to the ``.jsonl`` file at ``path`` (made with its folder if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def save(path: str | Path, value: Any) -> None:
    """Write ``value`` whole to the ``.json`` file at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1) + "\n")


def load(path: str | Path) -> Any:
    """A ``.jsonl`` file's records as a list (blank lines skipped), a ``.json`` file's value;
    an empty list for a ``.jsonl`` file that does not exist yet."""
    path = Path(path)
    if path.suffix == ".jsonl":
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def latest(records: Iterable[dict], key: Callable[[dict], Hashable]) -> dict[Hashable, dict]:
    """The last record of each ``key(record)``: a rerun of an (arm, seed) replaces the first."""
    out: dict[Hashable, dict] = {}
    for r in records:
        out[key(r)] = r
    return out


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """A run directory's resolved ``config.toml`` as plain data."""
    import tomllib

    return tomllib.loads((Path(run_dir) / "config.toml").read_text())
