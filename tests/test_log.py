"""RunLog: metrics.csv rows, appending on resume, evals, progress lines; atomic summary.json."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from wheeler2 import log as runlog


def read_rows(run_dir):
    with open(run_dir / runlog.METRICS_FILE, newline="") as f:
        return list(csv.reader(f))


def test_metrics_csv_rows_and_append_on_resume(tmp_path):
    with runlog.RunLog(tmp_path, total_steps=100, progress=False, tensorboard=False) as log:
        log.scalars("target", 10, {"critic_loss": np.float32(0.5), "q": 2})
        log.eval(20, 1.5, -150.0, None)
    rows = read_rows(tmp_path)
    assert rows[0] == list(runlog.CSV_FIELDS)
    assert [r[1:] for r in rows[1:]] == [
        ["10", "target", "critic_loss", "0.5"],
        ["10", "target", "q", "2.0"],
        ["20", "eval", "return", "-150.0"],
        ["20", "eval", "best_return", "-150.0"],
    ]

    with runlog.RunLog(tmp_path, progress=False, tensorboard=False, wall_offset_s=100.0) as log:
        log.scalars("target", 30, {"q": 3.0})
    rows = read_rows(tmp_path)
    assert rows.count(list(runlog.CSV_FIELDS)) == 1  # no second header
    assert rows[-1][1:] == ["30", "target", "q", "3.0"]
    assert float(rows[-1][0]) >= 100.0  # the resumed clock continues


def test_eval_history_and_csv_rows(tmp_path):
    with runlog.RunLog(tmp_path, progress=False, tensorboard=False) as log:
        log.eval(1_000, 3.0, -900.0, None)
        log.eval(2_000, 6.0, -180.0, 0.5)
        log.eval(3_000, 9.0, -300.0, 1.0)
    assert [e["return"] for e in log.evals] == [-900.0, -180.0, -300.0]
    assert log.evals[1] == {"env_steps": 2_000, "wall_s": 6.0, "return": -180.0, "success": 0.5}
    keys = [r[3] for r in read_rows(tmp_path)[1:]]
    best = "best_return"  # the best eval so far, as the live table's headline shows it
    assert keys == ["return", best, "return", "success", best, "return", "success", best]


def test_tensorboard_events_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    with runlog.RunLog(tmp_path, progress=False) as log:
        log.scalars("target", 1, {"loss": 1.0})
    events = list((tmp_path / runlog.TENSORBOARD_DIR).glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_progress_prints_plain_line_when_not_a_tty(tmp_path, capsys):
    with runlog.RunLog(tmp_path, total_steps=1_000, progress=True, tensorboard=False) as log:
        log.eval(100, 1.0, -500.0, None)
        log.progress(250, {"target": {"env_steps": 200}, "explorer": {"env_steps": 50}})
        log.progress(260, {"target": {"env_steps": 210}})  # within the interval: not printed
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    assert "steps 250/1,000" in lines[0]
    assert "eval -500.0" in lines[0]
    assert "target: 200" in lines[0] and "explorer: 50" in lines[0]


def test_eta_from_session_rate(tmp_path):
    with runlog.RunLog(tmp_path, total_steps=1_000, progress=False, tensorboard=False) as log:
        assert log.eta_s(100) is None  # no rate before the first progress call
        log._session_start_steps = 0
        log._session_t0 = runlog.time.perf_counter() - 10.0
        assert log.eta_s(100) == pytest.approx(90.0, rel=0.01)  # 100 steps in 10 s, 900 to go


def test_eta_follows_the_recent_rate_not_a_fast_warm_up(tmp_path, monkeypatch):
    # 10,000 random warm-up steps in 10 s, then learning at 50 steps/s for 5 minutes: the time
    # left is read at 50/s. The session's average (about 80/s here) would put it at 60% of that.
    clock = [0.0]
    monkeypatch.setattr(runlog.time, "perf_counter", lambda: clock[0])
    with runlog.RunLog(tmp_path, total_steps=100_000, progress=False, tensorboard=False) as log:
        monkeypatch.setattr(log, "_plain_line", lambda *a: "")
        steps = 0
        log.progress(steps, {})
        for _ in range(10):
            clock[0] += 1.0
            steps += 1_000
            log.progress(steps, {})
        assert log.eta_s(steps) == pytest.approx(90_000 / 1_000)  # the warm-up's own rate
        for _ in range(300):
            clock[0] += 1.0
            steps += 50
            log.progress(steps, {})
        assert log.eta_s(steps) == pytest.approx((100_000 - steps) / 50, rel=0.01)
        average = steps / clock[0]
        assert (100_000 - steps) / average < 0.7 * log.eta_s(steps)


def test_write_summary_is_strict_json_and_leaves_no_temp(tmp_path):
    summary = {"env_steps": np.int64(5), "best": float("nan"), "arr": np.arange(2), "ok": True}
    path = runlog.write_summary(tmp_path, summary)
    assert json.loads(path.read_text()) == {"env_steps": 5, "best": None, "arr": [0, 1], "ok": True}
    assert [p.name for p in tmp_path.iterdir()] == [runlog.SUMMARY_FILE]
    assert runlog.read_summary(tmp_path)["env_steps"] == 5


def test_a_json_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """members.json and team.json are read while the run writes them (a stress run caught a
    test reading an empty members.json): a write that fails part way leaves the old file."""
    path = tmp_path / "members.json"
    runlog.write_json_atomic(path, {"target": 1})

    def fail(fd):  # noqa: ANN001, ANN202
        raise OSError("disk full")

    monkeypatch.setattr(runlog.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        runlog.write_json_atomic(path, {"target": 2})
    assert json.loads(path.read_text()) == {"target": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["members.json"]


def test_files_written_whole_get_a_plain_files_mode(tmp_path):
    """mkstemp makes 0600 files: a summary or checkpoint must read like the run's other files."""
    from wheeler2 import checkpoint

    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    summary = runlog.write_summary(tmp_path, {"env_steps": 1})
    checkpoint.save(tmp_path / "latest.pt", {"x": 1})
    want = plain.stat().st_mode & 0o777
    assert summary.stat().st_mode & 0o777 == want
    assert (tmp_path / "latest.pt").stat().st_mode & 0o777 == want


def test_a_resume_cuts_the_row_a_killed_session_left_half_written(tmp_path):
    path = tmp_path / runlog.METRICS_FILE
    path.write_text("wall_s,env_steps,member,key,value\n1.0,10,target,loss,0.5\n2.0,20,tar")
    with runlog.RunLog(tmp_path, progress=False, tensorboard=False) as log:
        log.scalars("target", 30, {"loss": 0.25})
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(runlog.CSV_FIELDS)
    assert [r[1:] for r in rows[1:]] == [
        ["10", "target", "loss", "0.5"],
        ["30", "target", "loss", "0.25"],
    ]
    # A file that is one torn header starts again with a header.
    path.write_text("wall_s,env_st")
    with runlog.RunLog(tmp_path, progress=False, tensorboard=False) as log:
        log.scalars("target", 40, {"loss": 1.0})
    assert path.read_text().splitlines()[0] == ",".join(runlog.CSV_FIELDS)


def test_a_resume_drops_the_rows_a_killed_session_wrote_past_its_checkpoint(tmp_path):
    path = tmp_path / runlog.METRICS_FILE
    path.write_text(
        "wall_s,env_steps,member,key,value\n"
        "1.0,10,target,loss,0.5\n"
        "5.0,50,target,loss,0.4\n"  # the checkpoint is at wall 5.0
        "7.0,70,target,loss,0.3\n"  # the killed session's, past it
    )
    with runlog.RunLog(tmp_path, progress=False, tensorboard=False, wall_offset_s=5.0) as log:
        log.scalars("target", 60, {"loss": 0.35})
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(runlog.CSV_FIELDS)
    assert [r[1] for r in rows[1:]] == ["10", "50", "60"]
    assert float(rows[-1][0]) >= 5.0  # the resumed session's clock goes on from the checkpoint
