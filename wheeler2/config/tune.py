"""The ``[tune]`` table: what ``wheeler2 tune`` searches (wheeler2/tune.py runs the study).

Read here, in the config package, so that ``check`` checks the table with the rest of the file
without importing the study's runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

METRICS = ("final", "best")
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "none")
KEYS = ("trials", "seeds", "metric", "sampler", "pruner", "space")


@dataclass(frozen=True)
class Dimension:
    """One key of the space: a range (ints give an integer) or a list of choices."""

    key: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None

    def suggest(self, trial: Any) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.key, self.low, self.high, log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TuneSpec:
    space: tuple[Dimension, ...]
    trials: int = 20
    seeds: tuple[int, ...] = (0,)
    metric: str = "final"
    sampler: str = "tpe"
    pruner: str = "median"


def read_tune(raw: dict[str, Any], path: Path) -> TuneSpec:
    """The ``[tune]`` table of a config file's raw TOML, checked key by key (one
    :class:`ConfigError` naming the file and key)."""
    data = raw.get("tune")
    file = str(path)
    if not isinstance(data, dict):
        raise ConfigError(file, "[tune]", None, "no [tune] table: `tune` needs [tune.space]")
    for key in data:
        if key not in KEYS:
            raise ConfigError(
                file, "[tune]", key, f"unknown key; expected one of {', '.join(KEYS)}"
            )
    trials = data.get("trials", 20)
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ConfigError(file, "[tune]", "trials", f"expected an integer >= 1, got {trials!r}")
    seed = int((raw.get("experiment") or {}).get("seed", 0))
    seeds = data.get("seeds", [seed])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise ConfigError(file, "[tune]", "seeds", f"expected a list of seeds >= 0, got {seeds!r}")
    for key, allowed in (("metric", METRICS), ("sampler", SAMPLERS), ("pruner", PRUNERS)):
        value = data.get(key, allowed[0])
        if value not in allowed:
            raise ConfigError(
                file, "[tune]", key, f"expected one of {', '.join(allowed)}, got {value!r}"
            )
    space = data.get("space")
    if not isinstance(space, dict) or not space:
        raise ConfigError(
            file,
            "[tune]",
            "space",
            'expected a table of keys, e.g. "buffer.batch_size" = '
            '{ choices = [64, 128] } or "team.x.params.lr" = { range = [1e-4, 1e-2], log = true }',
        )
    dims = tuple(_dimension(file, key, spec) for key, spec in space.items())
    return TuneSpec(
        space=dims,
        trials=trials,
        seeds=tuple(seeds),
        metric=data.get("metric", "final"),
        sampler=data.get("sampler", "tpe"),
        pruner=data.get("pruner", "median"),
    )


def _dimension(file: str, key: str, spec: Any) -> Dimension:
    where = f'space."{key}"'
    if not isinstance(spec, dict) or set(spec) - {"range", "log", "choices"}:
        raise ConfigError(
            file,
            "[tune]",
            where,
            f"expected {{ range = [low, high], log = false }} or "
            f"{{ choices = [...] }}, got {spec!r}",
        )
    if "choices" in spec:
        choices = spec["choices"]
        if "range" in spec or not isinstance(choices, list) or not choices:
            raise ConfigError(
                file, "[tune]", where, "choices: expected a non-empty list (and no range)"
            )
        return Dimension(key, choices=tuple(choices))
    bounds: Any = spec.get("range")
    log = spec.get("log", False)
    numbers = (
        isinstance(bounds, list)
        and len(bounds) == 2
        and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
    )
    if not numbers or not bounds[0] < bounds[1]:
        raise ConfigError(
            file, "[tune]", where, f"range: expected [low, high] with low < high, got {bounds!r}"
        )
    if not isinstance(log, bool) or (log and bounds[0] <= 0):
        raise ConfigError(file, "[tune]", where, "log: expected true or false; log needs low > 0")
    return Dimension(key, low=bounds[0], high=bounds[1], log=log)
