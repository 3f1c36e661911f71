"""Trackers (issue 38, item 4): ``[experiment] tracker`` picks TensorBoard and/or Weights &
Biases; a W&B run in offline mode holds the run's evals, member figures and config with no
network; a missing wandb package is one error line, exit 2, before anything is written."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from test_callbacks import config as team_config

from wheeler2 import cli
from wheeler2.config import ConfigError, load


def write(tmp_path: Path, **experiment: Any) -> Path:
    """The tiny serial Pendulum DDPG run of test_callbacks, 400 steps, with these
    ``[experiment]`` keys."""
    import tomli_w

    raw = team_config(tmp_path, 400)
    raw["experiment"].update(name="tracked", **experiment)
    path = tmp_path / "tracked.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def wandb_records(wandb_dir: Path, wait_s: float = 60.0) -> dict[str, list[Any]]:
    """The records of the one offline W&B run under ``wandb_dir``, by kind, once written.

    ``run.finish()`` returns before W&B's service has written the run to disk: under load a
    scan right after it found the file still at its 7-byte header (and the whole run there a
    second later). So this reads until the exit record is there and the file has stopped
    growing."""
    [path] = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + wait_s
    size, out = -1, _scan(path)
    while time.monotonic() < deadline and ("exit" not in out or path.stat().st_size != size):
        size = path.stat().st_size
        time.sleep(0.3)
        out = _scan(path)
    return out


def _scan(path: Path) -> dict[str, list[Any]]:
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(path))
    out: dict[str, list[Any]] = {}
    while True:
        try:
            data = store.scan_data()
        except AssertionError:  # a block still being written: what came before it
            break
        if data is None:
            break
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        out.setdefault(kind, []).append(getattr(record, kind))
    return out


def key(item: Any) -> str:
    """A W&B record item's key: W&B stores "eval/return" as the nested key [eval, return]."""
    return item.key or "/".join(item.nested_key)


def test_an_offline_wandb_run_holds_the_evals_figures_and_config(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import json

    wandb_dir = tmp_path / "wandb-files"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_SILENT", "true")
    path = write(tmp_path, tracker="wandb", wandb={"project": "w2-test", "tags": ["ci"]})
    out = tmp_path / "runs"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    [run_dir] = out.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not (run_dir / "tb").exists()  # tracker = "wandb" alone: no TensorBoard files

    records = wandb_records(wandb_dir)
    [run] = records["run"]
    assert run.project == "w2-test" and list(run.tags) == ["ci"]
    assert run.display_name == run_dir.name
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["experiment"]["total_steps"] == 400 and config["env"]["id"] == "Pendulum-v1"
    rows = [{key(i): json.loads(i.value_json) for i in h.item} for h in records["history"]]
    evals = [(r["env_steps"], r["eval/return"]) for r in rows if "eval/return" in r]
    assert evals == [(e["env_steps"], pytest.approx(e["return"])) for e in summary["eval"]]
    assert any("target/critic_loss" in r and "target/replay_fill" in r for r in rows)
    final = {key(i): i.value_json for s in records.get("summary", []) for i in s.update}
    assert json.loads(final["best_eval_return"]) == pytest.approx(summary["best_eval_return"])
    assert json.loads(final["stop"])["by"] == "total_steps"
    assert [e.exit_code for e in records["exit"]] == [0]


@pytest.mark.parametrize("interrupted, code", [(False, 0), (True, 1)])
def test_a_wandb_run_that_did_not_finish_is_marked_failed(interrupted: bool, code: int) -> None:
    """Interrupted, a failed member or a callback's error (all "interrupted" in the summary):
    W&B gets exit code 1 at finish, and shows a failed run rather than a finished one."""
    from wheeler2.trackers import WandbTracker

    class Run:
        summary: dict[str, Any] = {}
        codes: list[int] = []

        def finish(self, exit_code: int = 0) -> None:
            self.codes.append(exit_code)

    tracker = WandbTracker.__new__(WandbTracker)  # no wandb.init: the run is a stand-in
    tracker.run, tracker.exit_code = Run(), 0
    tracker.summary({"interrupted": interrupted, "stop": {"by": "interrupt"}})
    tracker.close()
    assert tracker.run.codes == [code]


def test_tensorboard_is_the_default_and_an_empty_list_keeps_metrics_csv_alone(tmp_path):
    assert load(write(tmp_path)).experiment.tracker == ("tensorboard",)
    both = load(write(tmp_path, tracker=["tensorboard", "wandb", "wandb"]))
    assert both.experiment.tracker == ("tensorboard", "wandb")

    from wheeler2.runtime import run_experiment

    config = load(write(tmp_path, tracker=[]))
    run_dir = run_experiment(config)
    assert (run_dir / "metrics.csv").exists() and not (run_dir / "tb").exists()


TRACKERS = "one of 'tensorboard', 'wandb', or a list of them"


@pytest.mark.parametrize(
    ("keys", "key", "expected"),
    [
        ({"tracker": "mlflow"}, "tracker", TRACKERS),
        ({"tracker": ["wandb", 3]}, "tracker", TRACKERS),
        ({"wandb": {"mode": "cloud"}}, "mode", "one of 'online', 'offline', 'disabled'"),
        ({"wandb": {"projekt": "x"}}, "projekt", "did you mean 'project'"),
    ],
)
def test_tracker_keys_are_checked_and_named(tmp_path, keys, key, expected):
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, **keys))
    assert info.value.key == key and expected in str(info.value)


def test_wandb_missing_is_one_error_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    out = tmp_path / "runs"
    path = write(tmp_path, tracker="wandb")
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert 'tracker "wandb" needs the wandb package' in err[0]
    assert "pip install 'wheeler2[wandb]'" in err[0]
    assert not out.exists()  # nothing was written


def test_docs_state_every_wandb_key_and_what_it_accepts() -> None:
    import dataclasses

    from test_config_schema import _doc_tables

    from wheeler2.schema import describe
    from wheeler2.trackers import WandbConfig

    documented = _doc_tables()["`[experiment.wandb]` (or `wandb = { ... }`)"]
    fields = dataclasses.fields(WandbConfig)
    assert set(documented) == {f.name for f in fields}
    for f in fields:
        assert documented[f.name].startswith(describe(WandbConfig, f, True)), f.name


def test_a_resumed_runs_tensorboard_hides_what_a_killed_session_logged_past_its_checkpoint(
    tmp_path: Path,
) -> None:
    """A session killed after its checkpoint at 200 logged 300 and 400; the resume goes on from
    200 and logs 250 and 300 again. metrics.csv drops the dead session's rows past the
    checkpoint; TensorBoard showed both sessions there, the curve running back and forth."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from wheeler2.trackers import RunFacts, make_trackers

    [killed] = make_trackers("tensorboard", RunFacts(tmp_path, "r", "", "r.toml"))
    for step in (100, 200, 300, 400):
        killed.scalars("target", step, {"critic_loss": 1.0})
    killed.close()
    [resumed] = make_trackers("tensorboard", RunFacts(tmp_path, "r", "", "r.toml", resumed_at=200))
    for step in (250, 300):
        resumed.scalars("target", step, {"critic_loss": 2.0})
    resumed.close()

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    seen = [(e.step, e.value) for e in events.Scalars("target/critic_loss")]
    assert seen == [(100, 1.0), (200, 1.0), (250, 2.0), (300, 2.0)]


def test_a_resumed_run_opens_tensorboard_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder of a resumed session tells the trackers the checkpoint's env steps (and a
    fresh run none), which is what the purge above goes by."""
    from wheeler2.runtime import experiment
    from wheeler2.runtime.experiment import Recorder, RunState

    seen: list[Any] = []
    monkeypatch.setattr(experiment, "make_trackers", lambda _k, facts, _w: seen.append(facts) or [])
    path = tmp_path / "run.toml"
    path.write_text(tomli_w.dumps(team_config(tmp_path, 400)))
    for steps in (0, 200):
        Recorder(load(path), tmp_path / f"run{steps}", RunState(env_steps=steps))
    assert [f.resumed_at for f in seen] == [None, 200]
