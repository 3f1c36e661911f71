"""The wheeler2 command: exit codes, messages, and the plot command (runtime-free parts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wheeler2 import cli, plot

REPO = Path(__file__).resolve().parent.parent

VALID = """
[experiment]
name = "cli"
total_steps = 100
eval_every = 50
backend = "local"

[env]
id = "Pendulum-v1"

[[team]]
name = "target"
algo = "w2test_fake_algo:Fake"
role = "learner"

[[team]]
name = "scout"
algo = "w2test_fake_algo:Fake"
role = "explorer"
count = 2
"""


def run_module(args, fake_modules):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(fake_modules), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "wheeler2", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_check_exit_codes_via_python_m(write_config, fake_modules):
    good = write_config(VALID)
    done = run_module(["check", str(good)], fake_modules)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok: {good} (3 members, backend local)"

    bad = write_config(VALID.replace("total_steps = 100", "total_steps = -5"))
    done = run_module(["check", str(bad)], fake_modules)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"{bad}: [experiment] total_steps: expected an integer > 0, got -5" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_in_process_with_set(write_config, capsys):
    path = write_config(VALID)
    assert cli.main(["check", str(path), "--set", "experiment.backend=serial"]) == 0
    assert "backend serial" in capsys.readouterr().out
    assert cli.main(["check", str(path), "--set", "buffer.capacity=0"]) == 2
    err = capsys.readouterr().err
    assert "[buffer] capacity: expected an integer > 0, got 0" in err


def test_interrupt_exits_130_and_bugs_exit_1_with_traceback(monkeypatch, write_config, capsys):
    path = write_config(VALID)

    def interrupted(args):
        raise KeyboardInterrupt

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setitem(cli.COMMANDS, "check", interrupted)
    assert cli.main(["check", str(path)]) == 130
    monkeypatch.setitem(cli.COMMANDS, "check", broken)
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err


def test_interrupt_before_the_command_starts_exits_130_without_traceback(
    monkeypatch, write_config, capsys
):
    # On a busy machine start-up takes seconds: reading the package metadata for --version,
    # starting the fork server, importing torch. A Ctrl-C there is a user's, not a bug.
    def interrupted() -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_version", interrupted)
    try:
        code = cli.main(["check", str(write_config(VALID))])
    except KeyboardInterrupt:  # not let through: pytest would stop the whole session
        pytest.fail("Ctrl-C escaped main(): the user sees a traceback")
    assert code == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["resume", "eval", "plot"])
def test_commands_on_a_non_run_dir_exit_2_with_a_message(tmp_path, capsys, command):
    assert cli.main([command, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}") and "Traceback" not in err
    missing = tmp_path / "nope"  # a typo in the path: said as such, not "no config.toml"
    assert cli.main([command, str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {missing}") and "Traceback" not in err
    assert command == "plot" or "no such run directory" in err


def test_usage_errors_exit_2():
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2


def fake_run(run_dir: Path, offset: float) -> Path:
    run_dir.mkdir(parents=True)
    evals = [
        {"env_steps": s, "wall_s": s / 100, "return": -1000 + offset + s / 10, "success": None}
        for s in (1_000, 2_000, 3_000)
    ]
    (run_dir / "summary.json").write_text(json.dumps({"env_steps": 3_000, "eval": evals}))
    return run_dir


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def figures(monkeypatch):
    """The figures plot_runs drew, caught as it closes them (their lines hold the curves)."""
    caught = []
    close = plot.plt.close

    def keep(fig=None):  # noqa: ANN001, ANN202
        caught.append(fig)
        return close(fig)

    monkeypatch.setattr(plot.plt, "close", keep)
    return caught


def _curves(fig) -> dict[str, list[tuple[list, list]]]:  # noqa: ANN001
    """label -> [(x, y) of that label's line in each panel]."""
    out: dict[str, list] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            x, y = line.get_data()
            out.setdefault(line.get_label(), []).append((list(x), list(y)))
    return out


def _has_colour(png: Path, hex_colour: str, at_least: int = 50) -> bool:
    """At least ``at_least`` pixels of the PNG (read back) are close to ``hex_colour``."""
    import matplotlib.image

    rgb = matplotlib.image.imread(png)[..., :3]
    want = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(rgb - want).max(-1) < 0.05).sum()) >= at_least


def test_plot_command_writes_png_from_two_runs(tmp_path, capsys, figures):
    """`wheeler2 plot a b`: one curve per run (labelled by its directory) through that run's
    eval points, in both panels (env steps, wall-clock), written to a PNG that really shows two
    coloured lines."""
    a = fake_run(tmp_path / "runs" / "a-20261122-100000", 0.0)
    b = fake_run(tmp_path / "runs" / "b-20261122-110000", 50.0)
    out = tmp_path / "both.png"
    assert cli.main(["plot", str(a), str(b), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    curves = _curves(figures[-1])
    assert set(curves) == {a.name, b.name}
    steps = [1_000, 2_000, 3_000]
    for run, offset in ((a, 0.0), (b, 50.0)):
        returns = [-1000 + offset + s / 10 for s in steps]
        assert curves[run.name] == [(steps, returns), ([s / 100 for s in steps], returns)]
    import matplotlib.image

    assert is_png(out)
    assert matplotlib.image.imread(out).shape[:2] == (400, 1100)  # 11 x 4 in at 100 dpi
    assert _has_colour(out, "#1f77b4") and _has_colour(out, "#ff7f0e")  # both runs' lines


def test_write_curve_and_plot_by_wall_clock(tmp_path, figures):
    """write_curve draws the run and the threshold line into run/curve.png; x="wall_s" puts
    wall-clock on the first panel; an unknown axis is refused."""
    run = fake_run(tmp_path / "r", 0.0)
    assert plot.write_curve(run, threshold=-200.0) == run / "curve.png"
    assert is_png(run / "curve.png") and _has_colour(run / "curve.png", "#1f77b4")
    curves = _curves(figures[-1])
    assert [y for _, y in curves["threshold"]] == [[-200.0, -200.0]] * 2
    assert curves["r"][0][0] == [1_000, 2_000, 3_000]
    assert is_png(plot.plot_runs([run], tmp_path / "wall.png", x="wall_s"))
    assert _curves(figures[-1])["r"][0][0] == [10.0, 20.0, 30.0]  # wall_s first
    with pytest.raises(ValueError):
        plot.plot_runs([run], tmp_path / "x.png", x="episodes")


def test_plot_of_a_non_run_dir_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no summary.json or metrics.csv"):
        plot.plot_runs([tmp_path], tmp_path / "x.png")


def test_plot_of_a_run_still_going_reads_its_metrics(tmp_path, figures):
    """A run still going has no summary.json (a resumed one, the last session's, which stops
    short): the curve comes from the evals metrics.csv holds so far."""
    from wheeler2.log import RunLog

    live = tmp_path / "live"
    log = RunLog(live, total_steps=10_000, progress=False, tensorboard=False)
    for step, ret in ((1_000, -900.0), (2_000, -700.0)):
        log.eval(step, step / 100, ret, None)
    log.flush()  # the run goes on: no close, no summary
    plot.plot_runs([live], tmp_path / "a.png")
    x, y = _curves(figures[-1])["live"][0]
    assert x == [1_000, 2_000] and y == [-900.0, -700.0]
    stale = fake_run(tmp_path / "stale", 0.0)  # evals to 3,000 in the old summary
    log = RunLog(stale, total_steps=10_000, progress=False, tensorboard=False)
    for step in (1_000, 2_000, 3_000, 4_000):
        log.eval(step, step / 100, -1.0, None)
    log.flush()
    plot.plot_runs([stale], tmp_path / "b.png")
    assert _curves(figures[-1])["stale"][0][0] == [1_000, 2_000, 3_000, 4_000]
    finished = fake_run(tmp_path / "done", 0.0)  # a finished run: its summary, as before
    plot.plot_runs([finished], tmp_path / "c.png")
    assert _curves(figures[-1])["done"][0][1] == [-900.0, -800.0, -700.0]


def test_renamed_key_warns_once_on_stderr(write_config, capsys):
    path = write_config(VALID + "\n[buffer]\nratio = 2\n")
    assert cli.main(["check", str(path), "--set", "buffer.ratio=3"]) == 0
    err = capsys.readouterr().err
    # (VALID's batch_size 256 >= total_steps 100 adds its own warning line: the learner never
    # learns in so short a run.)
    renamed = [line for line in err.splitlines() if "'ratio'" in line]
    assert renamed == [
        f"warning: {path}: [buffer] 'ratio' is deprecated; call it 'updates_per_insert'"
    ]
