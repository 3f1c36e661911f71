"""What a run reports while it runs: metrics.csv, its trackers (TensorBoard, W&B), progress.

``metrics.csv`` is in long format (one value per row) so members with different metrics share one
file, and a resumed run appends to it. The trackers (wheeler2/trackers.py) get the same rows
under the same names. Progress goes to a rich live table on a terminal; when stdout is not a
terminal (CI, ``nohup``) or ``progress = false``, a plain line every few seconds instead, so logs
stay readable.

A member's figures are named here once (:meth:`RunLog.report`), for the table and every sink
alike: losses by kind (``critic_loss``, ``actor_loss``, ``policy_loss``, ``value_loss``; DQN's
``loss``, a TD loss on Q, is a critic's) and ``updates_per_s`` from its ``updates`` count.
"""

from __future__ import annotations

import atexit
import csv
import json
import math
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wheeler2.trackers import TENSORBOARD_DIR, TensorBoardTracker, Tracker

METRICS_FILE = "metrics.csv"
SUMMARY_FILE = "summary.json"
CSV_FIELDS = ("wall_s", "env_steps", "member", "key", "value")

_FLUSH_EVERY_S = 5.0
_PLAIN_EVERY_S = 10.0
_LIVE_EVERY_S = 0.25
# The time left is read off the rate over this trailing window, not the session's average: an
# off-policy run's random warm-up steps go ten times faster than its learning ones, and an average
# over both put "left" at a third of the truth for the first hour of a long run.
_ETA_WINDOW_S = 120.0
_ETA_MIN_SPAN_S = 20.0


class RunLog:
    """One run's metric sinks. Call :meth:`close` (also on errors) to flush and stop the display.

    ``wall_offset_s`` continues the clock of a resumed run, so ``wall_s`` keeps increasing.
    ``trackers``: where figures go besides metrics.csv; None: TensorBoard where ``tensorboard``.
    """

    def __init__(
        self,
        run_dir: str | Path,
        total_steps: int | None = None,
        progress: bool = True,
        tensorboard: bool = True,
        wall_offset_s: float = 0.0,
        trackers: Sequence[Tracker] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self._t0 = time.perf_counter() - wall_offset_s
        self._session_t0 = time.perf_counter()
        self._session_start_steps: int | None = None
        # (time, total env steps) about once a second, back to _ETA_WINDOW_S ago
        self._recent: deque[tuple[float, int]] = deque()

        path = self.run_dir / METRICS_FILE
        _drop_torn_row(path)
        if wall_offset_s > 0:
            _drop_rows_after(path, wall_offset_s)
        new_file = not path.exists() or path.stat().st_size == 0
        self._csv_file = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115
        self._csv = csv.writer(self._csv_file)
        if new_file:
            self._csv.writerow(CSV_FIELDS)
        self._last_flush = time.perf_counter()

        if trackers is None:
            trackers = [TensorBoardTracker(self.run_dir / TENSORBOARD_DIR)] if tensorboard else []
        self.trackers = list(trackers)

        self.evals: list[dict[str, Any]] = []
        # The final step's eval, written once no closing eval at that step can replace it.
        self._held: tuple[int, dict[str, float], float] | None = None
        # member -> (time its steps last changed, those steps, rate; None before a second report)
        self._rates: dict[str, tuple[float, int, float | None]] = {}
        # member -> (its own clock, its updates) at its last report: updates_per_s between two
        self._updates: dict[str, tuple[float, float]] = {}
        # The last figures the live table was not redrawn with (throttled): drawn at close.
        self._undrawn: tuple[int, dict[str, dict[str, Any]], float | None] | None = None
        # The run's curriculum stage for the headline and the plain line ("stage 1/2"), if any.
        self.curriculum: str | None = None
        # The best eval return so far (a resumed run's Recorder sets its earlier sessions' best).
        self.best_eval: float | None = None
        self._live_enabled = progress and sys.stdout.isatty()
        self._live: Any = None
        self._last_display = -math.inf
        self._closed = False

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self._t0

    # -- metrics -----------------------------------------------------------------------------

    def report(self, member: str, env_steps: int, values: dict[str, float]) -> dict[str, float]:
        """Record one member's periodic figures under their kind's names; returns them so
        named, with ``updates_per_s`` (between this report and its last) where it learns."""
        named = {_kind_name(k, values): v for k, v in values.items()}
        if "updates" in named:
            clock = float(named.get("wall_s", self.wall_s))
            last = self._updates.get(member)
            self._updates[member] = (clock, float(named["updates"]))
            if last is not None and clock > last[0]:
                named["updates_per_s"] = (float(named["updates"]) - last[1]) / (clock - last[0])
        self.scalars(member, env_steps, named)
        return named

    def scalars(
        self, member: str, env_steps: int, values: dict[str, float], wall_s: float | None = None
    ) -> None:
        """Record one member's metrics at ``env_steps`` (all members together); ``wall_s``: when
        they were measured, if not now."""
        wall = round(self.wall_s if wall_s is None else wall_s, 3)
        numbers = {key: _number(value) for key, value in values.items()}
        for key, value in numbers.items():
            self._csv.writerow((wall, int(env_steps), member, key, value))
        for tracker in self.trackers:
            tracker.scalars(member, int(env_steps), numbers)
        self._maybe_flush()

    def eval(
        self,
        env_steps: int,
        wall_s: float,
        ret: float,
        success: float | None,
        matches: dict[str, float] | None = None,
        extra: dict[str, float] | None = None,
    ) -> None:
        """Record an evaluation of the learner's actor (also kept in :attr:`evals`);
        ``matches``: head-to-head figures of a turn-based game (W/D/L per opponent, Elo);
        ``extra``: more figures of the same eval (each head's value error).

        A second eval at the step of the last one replaces it: a learner whose budget is spent
        evaluates again after the updates it still owed (its closing eval), and the curve ends
        on that one, not on a vertical jump. So an eval at or past ``total_steps`` is written
        to metrics.csv when the next eval at another step comes, or at :meth:`close`."""
        entry: dict[str, Any] = {
            "env_steps": int(env_steps),
            "wall_s": float(wall_s),
            "return": float(ret),
            "success": None if success is None else float(success),
        }
        if matches:
            entry["matches"] = dict(matches)
        if self.evals and self.evals[-1]["env_steps"] == int(env_steps):
            self.evals[-1] = entry
        else:
            self.evals.append(entry)
        if self.best_eval is None or ret > self.best_eval:
            self.best_eval = float(ret)
        values = {"return": ret} if success is None else {"return": ret, "success": success}
        values = values | {"best_return": self.best_eval} | dict(matches or {}) | dict(extra or {})
        if self._held is not None and self._held[0] != int(env_steps):
            self._write_held()
        if self.total_steps is not None and env_steps >= self.total_steps:
            self._held = (int(env_steps), values, self.wall_s)
        else:
            self.scalars("eval", env_steps, values)
        self.flush()

    def _write_held(self) -> None:
        if self._held is not None:
            steps, values, wall = self._held
            self._held = None
            self.scalars("eval", steps, values, wall_s=wall)

    def summarize(self, figures: dict[str, Any]) -> None:
        """Hand the run's final figures to the trackers that keep them (a W&B run summary)."""
        for tracker in self.trackers:
            tracker.summary(_json_safe(figures))

    def flush(self) -> None:
        self._csv_file.flush()
        for tracker in self.trackers:
            tracker.flush()
        self._last_flush = time.perf_counter()

    def _maybe_flush(self) -> None:
        if time.perf_counter() - self._last_flush >= _FLUSH_EVERY_S:
            self.flush()

    # -- progress ----------------------------------------------------------------------------

    def progress(
        self,
        env_steps_total: int,
        members: dict[str, dict[str, Any]],
        last_eval: float | None = None,
    ) -> None:
        """Refresh the display. ``members[name]`` holds that member's ``env_steps`` and any other
        figures worth a glance (``updates``, ``episode_return``, ...)."""
        now = time.perf_counter()
        if self._session_start_steps is None:
            self._session_start_steps = int(env_steps_total)
        self._note_total(now, int(env_steps_total))
        for name, figures in members.items():
            self._update_rate(name, now, int(figures.get("env_steps", 0)))
        if last_eval is None and self.evals:
            last_eval = self.evals[-1]["return"]
        interval = _LIVE_EVERY_S if self._live_enabled else _PLAIN_EVERY_S
        if now - self._last_display < interval:
            if self._live is not None:
                self._undrawn = (
                    env_steps_total,
                    {k: dict(v) for k, v in members.items()},
                    last_eval,
                )
            return
        self._last_display = now
        self._undrawn = None
        if self._live_enabled:
            self._show_live(env_steps_total, members, last_eval)
        else:
            print(self._plain_line(env_steps_total, members, last_eval), flush=True)

    def _update_rate(self, name: str, now: float, steps: int) -> None:
        # Steps/s between two reports that moved the member's steps (figures arrive every few
        # seconds; calls in between see the same steps and would read as 0/s), smoothed so the
        # display does not jitter. None until a second report: no rate yet, not 0/s.
        if name not in self._rates:
            self._rates[name] = (now, steps, None)
            return
        t, s, rate = self._rates[name]
        if steps == s or now - t < 0.5:
            return
        new = (steps - s) / (now - t)
        self._rates[name] = (now, steps, new if rate is None else 0.7 * rate + 0.3 * new)

    def rate(self, name: str) -> float | None:
        """A member's env steps per second, or None before two of its reports moved."""
        return self._rates.get(name, (0.0, 0, None))[2]

    def _note_total(self, now: float, total: int) -> None:
        if self._recent and now - self._recent[-1][0] < 1.0:
            return
        self._recent.append((now, total))
        # Keep one sample at least a window old, so the rate spans the whole window.
        while len(self._recent) > 2 and now - self._recent[1][0] >= _ETA_WINDOW_S:
            self._recent.popleft()

    def eta_s(self, env_steps_total: int) -> float | None:
        """Seconds left at the rate of the last two minutes (this session's average rate until
        they span 20 s), or None before there is a rate."""
        if self.total_steps is None or self._session_start_steps is None:
            return None
        left = max(self.total_steps - env_steps_total, 0)
        if len(self._recent) >= 2:
            (t0, s0), (t1, s1) = self._recent[0], self._recent[-1]
            if t1 - t0 >= _ETA_MIN_SPAN_S and s1 > s0:
                return left / ((s1 - s0) / (t1 - t0))
        done = env_steps_total - self._session_start_steps
        elapsed = time.perf_counter() - self._session_t0
        if done <= 0 or elapsed <= 0:
            return None
        return left / (done / elapsed)

    def _plain_line(self, total: int, members: dict[str, dict], last: float | None) -> str:
        parts = [f"[{_clock(self.wall_s)}] steps {total:,}" + self._of_total()]
        eta = self.eta_s(total)
        if eta is not None:
            parts.append(f"left {_clock(eta)}")
        if self.curriculum:
            parts.append(self.curriculum)
        if last is not None:
            parts.append(f"eval {last:.1f}{self._best_text()}" + self._matches_text())
        for name, figures in members.items():
            rate = self.rate(name)
            part = f"{name}: {int(figures.get('env_steps', 0)):,}"
            if rate is not None:
                part += f" ({rate:,.0f}/s)"
            if figures.get("episode_return") is not None:
                part += f" return {_cell(figures['episode_return'])}"
            for label, key, fmt in LEARNER_FIGURES:
                if figures.get(key) is not None:
                    part += f" {label} {fmt(figures[key])}"
            parts.append(part)
        return " | ".join(parts)

    def _best_text(self) -> str:
        return "" if self.best_eval is None else f" (best {self.best_eval:.1f})"

    def _matches_text(self) -> str:
        """The last eval's head-to-head line: W/D/L against each opponent, and the Elo."""
        matches = self.evals[-1].get("matches") if self.evals else None
        if not matches:
            return ""
        parts = []
        for key in matches:
            if key.endswith("/win") and key.startswith("vs_"):
                who = key[3:].removesuffix("/win")
                w, d = matches[key], matches.get(f"vs_{who}/draw", 0.0)
                loss = matches.get(f"vs_{who}/loss", 0.0)
                parts.append(f"vs {who} W/D/L {w:.2f}/{d:.2f}/{loss:.2f}")
        if "elo" in matches and math.isfinite(matches["elo"]):
            parts.append(f"Elo {matches['elo']:+.0f}")
        return ("   " + "   ".join(parts)) if parts else ""

    def _of_total(self) -> str:
        return f"/{self.total_steps:,}" if self.total_steps else ""

    def _show_live(self, total: int, members: dict[str, dict], last: float | None) -> None:
        from rich.live import Live

        if self._live is None:
            self._live = Live(auto_refresh=False, transient=False)
            self._live.start()
            # A run that dies without close() must still give the terminal its cursor back.
            atexit.register(self.close)
        table = self._table(total, members, last, width=self._live.console.width)
        self._live.update(table, refresh=True)

    def _table(
        self, total: int, members: dict[str, dict[str, Any]], last: float | None, width: int = 80
    ) -> Any:
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        eta = self.eta_s(total)
        headline = f"steps {total:,}{self._of_total()}   elapsed {_clock(self.wall_s)}"
        if eta is not None:
            headline += f"   left {_clock(eta)}"
        if self.curriculum:
            headline += f"   {self.curriculum}"
        if last is not None:
            headline += f"   last eval {last:.1f}"
        if self.best_eval is not None:
            headline += f"   best {self.best_eval:.1f}"
        headline += self._matches_text()
        columns = self._columns(members, width)
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        for header, _ in columns:
            table.add_column(header, justify="left" if header == "member" else "right")
        for name in members:
            table.add_row(*(cells[name] for _, cells in columns))
        # The headline sits above the table, not as its title, so a narrow table never wraps it.
        return Group(Text(headline, style="bold"), table)

    def _columns(
        self, members: dict[str, dict[str, Any]], width: int
    ) -> list[tuple[str, dict[str, str]]]:
        """(header, member -> cell) of each column that fits in ``width``: the fixed four, then
        those some member reports, dropping the least wanted (:data:`COLUMN_WANTED`, then the
        heads) until the table fits."""
        fixed: list[tuple[str, dict[str, str]]] = [
            ("member", {n: n[:16] for n in members}),
            ("env steps", {n: f"{int(f.get('env_steps', 0)):,}" for n, f in members.items()}),
            ("steps/s", {n: _cell(_whole(self.rate(n))) or "-" for n in members}),
            ("return", {n: _cell(f.get("episode_return")) for n, f in members.items()}),
        ]
        # In the order the member reports them, i.e. the task's head order.
        reported = (k for f in members.values() for k in f if k.startswith("episode_return/"))
        heads = list(dict.fromkeys(reported))[:MAX_HEAD_COLUMNS]
        optional: list[tuple[str, str, Callable[[Any], str]]]
        optional = [(h.removeprefix("episode_return/"), h, _cell) for h in heads]
        optional += [(header, key, _cell) for header, key in LOSS_COLUMNS]
        optional += list(LEARNER_FIGURES)
        shown = [
            (header, {n: "" if f.get(key) is None else fmt(f[key]) for n, f in members.items()})
            for header, key, fmt in optional
            if any(f.get(key) is not None for f in members.values())
        ]
        order = [*COLUMN_WANTED, *(h.removeprefix("episode_return/") for h in heads)]
        while shown and _table_width(fixed + shown) > width:
            shown.remove(max(shown, key=lambda column: order.index(column[0])))
        return fixed + shown

    # -- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._write_held()
        if self._live is not None:
            if self._undrawn is not None:  # the last figures, not the last frame drawn
                self._show_live(*self._undrawn)
            self._live.stop()
            atexit.unregister(self.close)
        self._csv_file.close()
        for tracker in self.trackers:
            tracker.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# At most two head columns; a narrower terminal drops columns (RunLog._columns), never wraps.
MAX_HEAD_COLUMNS = 2
# Figures an algorithm reports under another name than their kind's: DQN's TD loss on Q is a
# critic's loss. metrics.csv, the trackers and the table all use the kind's name.
LOSS_NAMES = {"loss": "critic_loss"}
# The live table's loss columns, one per kind, instead of one "loss" column that put a DDPG
# critic's loss beside a PPO policy's.
LOSS_COLUMNS = (
    ("critic", "critic_loss"),
    ("actor", "actor_loss"),
    ("policy", "policy_loss"),
    ("value", "value_loss"),
)


def _whole(v: float | None) -> int | None:
    return None if v is None else round(v)


def _whole_cell(v: float) -> str:
    return _cell(_whole(v))


def _percent(v: float) -> str:
    return f"{v:.0%}"


# A member's last eval where it is not the run's (another table's learner, an explorer with
# evaluate = true), a learner's pace and its replay, an explorer's sync lag:
# (column, figure, format).
LEARNER_FIGURES: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("eval", "eval_return", lambda v: _cell(v)),  # (_cell is defined below)
    ("upd/s", "updates_per_s", _whole_cell),
    ("replay", "replay_fill", _percent),  # rows / capacity
    ("lag", "sync_version_lag", _whole_cell),  # weight versions the explorer is behind
)
# The optional columns a narrow terminal keeps longest, most wanted first; heads go first.
COLUMN_WANTED = ("critic", "policy", "value", "eval", "upd/s", "replay", "lag", "actor")


def _kind_name(key: str, values: dict[str, Any]) -> str:
    kind = LOSS_NAMES.get(key)
    return kind if kind is not None and kind not in values else key


def _table_width(columns: list[tuple[str, dict[str, str]]]) -> int:
    """The live table's width (box.SIMPLE_HEAD, padding (0, 1), no edge padding): each column
    as wide as its widest cell, three cells between columns and one at each edge."""
    from rich.cells import cell_len

    widths = [max([cell_len(h), *(cell_len(c) for c in cells.values())]) for h, cells in columns]
    return sum(widths) + 3 * (len(widths) - 1) + 2


def _number(value: Any) -> float:
    if isinstance(value, np.ndarray | np.generic):
        value = value.item()
    if hasattr(value, "item"):  # 0-d tensors
        value = value.item()
    return float(value)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _json_safe(obj: Any) -> Any:
    """Numpy / torch scalars to Python, non-finite floats to null: strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if hasattr(obj, "item"):
        return _json_safe(obj.item())
    return str(obj)


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """Write ``run_dir/summary.json`` atomically (readers never see half a file)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return write_json_atomic(run_dir / SUMMARY_FILE, _json_safe(summary), indent=2)


def write_json_atomic(path: Path, obj: Any, indent: int = 1) -> Path:
    """``path`` holds the whole of ``obj`` as JSON or its previous content, never half a file:
    a run's files are read from outside while it runs (by people, tools and the tests)."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def _drop_torn_row(path: Path) -> None:
    """Cut a last row a killed session left half-written, so the rows a resume appends start a
    line of their own (else the first of them is glued to the torn one and both are lost)."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Rows are short: the last newline is in the last few KiB, or the file is one torn row.
        start = max(0, size - 65536)
        f.seek(start)
        tail = f.read()
        cut = tail.rfind(b"\n")
        f.truncate(start + cut + 1 if cut >= 0 else 0)


def _drop_rows_after(path: Path, wall_s: float) -> None:
    """Drop the rows a session wrote after the checkpoint a resume starts from (``wall_s``,
    the checkpoint's clock). A killed session (SIGKILL, OOM, a lost node) wrote rows past its
    last checkpoint; the resume measures those steps again, so keeping them put two values at
    one step of every curve, the dead session's and the resumed one's."""
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    kept = [rows[0]] + [r for r in rows[1:] if not _after(r, wall_s)]
    if len(kept) == len(rows):
        return
    fd, tmp = temp_file_beside(path)
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(kept)
    os.replace(tmp, path)


def _after(row: list[str], wall_s: float) -> bool:
    try:
        return float(row[0]) > wall_s
    except (IndexError, ValueError):  # not a row this file's writer wrote: leave it
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once, at import: os.umask can only be read by setting it, which races other threads.
_FILE_MODE = 0o666 & ~_umask()


def temp_file_beside(path: Path) -> tuple[int, str]:
    """An open temp file in ``path``'s folder, to be renamed over ``path`` once whole, with
    the mode a plain ``open`` would give (mkstemp's 0600 would make a summary or checkpoint
    unreadable to the group a shared machine's runs are read by)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, _FILE_MODE)
    return fd, tmp


def write_text_atomic(path: Path, text: str) -> Path:
    """``path`` holds the whole of ``text`` or its previous content, never half a file (a
    Ctrl-C or a kill in the middle of the write leaves the old one)."""
    fd, tmp = temp_file_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
