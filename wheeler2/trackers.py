"""Where a run's figures go besides metrics.csv: TensorBoard, and Weights & Biases (optional).

``[experiment] tracker`` names them (``"tensorboard"``, the default; ``"wandb"``; a list; ``[]``
for metrics.csv alone). Each tracker gets exactly what metrics.csv gets, under the same names
(``<member>/<key>``: ``eval/return``, ``target/critic_loss``, ``target/updates_per_s``), from
the coordinator's process only: members never open a tracker.

Below the config package, as the replay's settings are (``buffer/config.py``): the
``[experiment.wandb]`` table is :class:`WandbConfig`, defined here, and nothing here imports the
config package back (``log.py`` imports this module, and the config package must not reach it).
"""

from __future__ import annotations

import hashlib
import os
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wheeler2.errors import UsageError
from wheeler2.schema import setting

TRACKERS = ("tensorboard", "wandb")
WANDB_MODES = ("online", "offline", "disabled")
WANDB_INSTALL = "pip install 'wheeler2[wandb]'"
TENSORBOARD_DIR = "tb"


@dataclass(frozen=True)
class WandbConfig:
    """``[experiment.wandb]``: the Weights & Biases run a run logs to (``tracker = "wandb"``)."""

    project: str | None = None  # None: the experiment's name
    entity: str | None = None  # None: the logged-in user's default
    group: str | None = None
    tags: tuple[str, ...] = ()
    # None: WANDB_MODE, else wandb's own default (online). WANDB_MODE, where set, wins, so a CI
    # job can force "offline" on a file that says "online".
    mode: str | None = setting(None, choices=WANDB_MODES)


class Tracker(Protocol):
    def scalars(self, member: str, env_steps: int, values: dict[str, float]) -> None: ...

    def summary(self, figures: dict[str, Any]) -> None:
        """The run's final figures (best and final eval return, why it stopped)."""
        ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    """Event files under ``run_dir/tb``; a tag per member and key.

    ``purge_step``: a resumed run's first step past its checkpoint. TensorBoard then hides what
    earlier sessions logged from that step on (a killed session's figures past its last
    checkpoint, which the resume measures again), as metrics.csv drops those rows."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        # Imported here: tensorboard costs about a second to import, wasted by `wheeler2 check`.
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def scalars(self, member: str, env_steps: int, values: dict[str, float]) -> None:
        now = time.time()
        for key, value in values.items():
            self.writer.add_scalar(f"{member}/{key}", value, int(env_steps), walltime=now)

    def summary(self, figures: dict[str, Any]) -> None:
        pass  # summary.json holds them; TensorBoard has no place for a run's final figures

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def tracker_names(tracker: str | Sequence[str]) -> tuple[str, ...]:
    """``[experiment] tracker`` as a tuple (the config reads a string as a list of one)."""
    return (tracker,) if isinstance(tracker, str) else tuple(tracker)


def check_trackers(tracker: str | Sequence[str], source: str) -> None:
    """Refuse, before anything starts, a tracker whose package is missing (one line, exit 2);
    ``source``: the config file, for the message."""
    if "wandb" in tracker_names(tracker):
        _import_wandb(source)


def _import_wandb(source: str) -> Any:
    try:
        import wandb
    except ImportError:
        raise UsageError(
            f'{source}: [experiment] tracker "wandb" needs the wandb package, which is not '
            f"installed ({WANDB_INSTALL})"
        ) from None
    return wandb


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of a run directory: its name, made unique by its absolute path, so a
    resume logs to the same W&B run and two ``out`` folders never share one."""
    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"{run_dir.name}-{digest}"


@dataclass(frozen=True)
class RunFacts:
    """What a tracker records of the run besides its figures."""

    run_dir: Path
    name: str  # the experiment's name: the default W&B project
    config_toml: str  # the resolved config, as config.toml holds it
    source: str  # the config file, for error messages
    resumed_at: int | None = None  # a resumed run: the env steps of the checkpoint it goes on from


class WandbTracker:
    """One W&B run per run directory, its x axis ``env_steps`` (members report out of step
    order, and W&B drops a ``step`` that goes back)."""

    def __init__(self, run: RunFacts, settings: WandbConfig) -> None:
        wandb = _import_wandb(run.source)
        try:
            self.run = wandb.init(
                project=settings.project or run.name,
                entity=settings.entity,
                group=settings.group,
                tags=list(settings.tags) or None,
                name=run.run_dir.name,
                id=wandb_run_id(run.run_dir),
                resume="allow",
                # The run's files go into the run directory, unless WANDB_DIR says elsewhere.
                dir=None if os.environ.get("WANDB_DIR") else str(run.run_dir),
                mode=os.environ.get("WANDB_MODE") or settings.mode,
                config=tomllib.loads(run.config_toml),
                # create_new: a W&B run the user's own code holds open stays theirs, untouched.
                reinit="create_new",
                # console off: W&B would wrap stdout, under the live table.
                settings=wandb.Settings(console="off", quiet=True),
            )
        except Exception as exc:  # not logged in, no network: say what to do, in one line
            raise UsageError(
                f'{run.source}: [experiment] tracker "wandb": wandb.init failed: {exc} '
                "(log in with `wandb login`, or run offline: WANDB_MODE=offline)"
            ) from None
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")
        self.exit_code = 0  # W&B marks a run that finishes with 1 as failed

    def scalars(self, member: str, env_steps: int, values: dict[str, float]) -> None:
        row = {f"{member}/{key}": value for key, value in values.items()}
        row["env_steps"] = int(env_steps)
        self.run.log(row)

    def summary(self, figures: dict[str, Any]) -> None:
        self.run.summary.update(figures)
        # Interrupted, failed or stopped by a callback's error: not a finished run in W&B.
        self.exit_code = 1 if figures.get("interrupted") else 0

    def flush(self) -> None:
        pass  # W&B's own service process writes and uploads as it goes

    def close(self) -> None:
        self.run.finish(exit_code=self.exit_code)


def make_trackers(
    tracker: str | Sequence[str], run: RunFacts, wandb: WandbConfig | None = None
) -> list[Tracker]:
    """The trackers ``tracker`` names, opened for ``run.run_dir``."""
    out: list[Tracker] = []
    try:
        for name in tracker_names(tracker):
            if name == "tensorboard":
                # Past the checkpoint: its own step's figures were logged before it was written.
                purge = None if run.resumed_at is None else int(run.resumed_at) + 1
                out.append(TensorBoardTracker(run.run_dir / TENSORBOARD_DIR, purge_step=purge))
            elif name == "wandb":
                out.append(WandbTracker(run, wandb or WandbConfig()))
    except BaseException:
        for opened in out:
            opened.close()
        raise
    return out
