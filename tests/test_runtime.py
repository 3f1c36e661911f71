"""End to end through the CLI: a short serial run writes a whole run dir, resumes, evals.

The commands run in this process (``cli.main``, what ``python -m wheeler2`` calls): these tests
are about the commands, not the process boundary, and a subprocess each paid a torch import.
``python -m wheeler2``'s exit codes are tested in test_cli.py, its processes in test_faults.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli as wheeler2_cli

TINY = """
[experiment]
name = "tiny"
seed = 3
total_steps = {total}
eval_every = 200
eval_episodes = 2
eval_threshold = -1e9
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"
num_envs = {num_envs}

[buffer]
capacity = 5_000
batch_size = 32
prioritized = {prioritized}
n_step = {n_step}

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 100
hidden = [32, 32]
"""


def write_cfg(
    tmp_path: Path,
    total: int = 600,
    backend: str = "serial",
    num_envs: int = 1,
    prioritized: bool = False,
    n_step: int = 1,
    extra: str = "",
) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(
        TINY.format(
            total=total,
            backend=backend,
            num_envs=num_envs,
            prioritized=str(prioritized).lower(),
            n_step=n_step,
        )
        + extra
    )
    return path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """``wheeler2 ARGS`` in this process: its exit code and what it printed."""

    def call(*args: str) -> Result:
        capsys.readouterr()
        code = wheeler2_cli.main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return call


def only_run_dir(out: Path) -> Path:
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_serial_run_writes_complete_run_dir_and_resumes(tmp_path: Path, cli) -> None:
    cfg = write_cfg(tmp_path, total=600, prioritized=True, n_step=3)
    out = tmp_path / "runs"
    res = cli("run", str(cfg), "--out", str(out))
    assert res.returncode == 0, res.stderr
    run = only_run_dir(out)
    assert str(run) in res.stdout  # the CLI says where the results went
    for name in (
        "config.toml",
        "metrics.csv",
        "curve.png",
        "summary.json",
        "checkpoints/latest.pt",
        "checkpoints/best.pt",
    ):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*")), "no TensorBoard events"
    summary = json.loads((run / "summary.json").read_text())
    for key in (
        "env_steps",
        "wall_s",
        "best_eval_return",
        "final_eval_return",
        "eval",
        "steps_to_threshold",
        "members",
    ):
        assert key in summary, key
    assert summary["env_steps"] == 600
    assert [e["env_steps"] for e in summary["eval"]] == [200, 400, 600]
    assert summary["steps_to_threshold"] == 200  # threshold -1e9: the first eval passes
    assert summary["members"]["target"]["updates"] > 0
    # The lone member of a serial run owns the process: its CPU seconds are reported.
    target = summary["members"]["target"]
    assert 0 < target["cpu_s"] <= target["wall_s"] * (os.cpu_count() or 1) + 1
    metrics = (run / "metrics.csv").read_text().splitlines()
    assert metrics[0] == "wall_s,env_steps,member,key,value"
    assert any(",target,critic_loss," in line for line in metrics)

    payload = ckpt.load(run / "checkpoints" / "latest.pt")
    assert payload["run"]["env_steps"] == 600
    assert "actor" in str(list(payload["members"]["target"].keys()))

    # Raise the budget in the saved config and resume: the step count and the curve continue.
    text = (run / "config.toml").read_text().replace("total_steps = 600", "total_steps = 800")
    (run / "config.toml").write_text(text)
    res = cli("resume", str(run))
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 800
    assert [e["env_steps"] for e in summary["eval"]] == [200, 400, 600, 800]
    assert summary["wall_s"] > 0

    res = cli("eval", str(run), "--episodes", "3")
    assert res.returncode == 0, res.stderr
    assert "return" in res.stdout


def test_serial_vector_envs_count_every_copy(tmp_path: Path, cli) -> None:
    cfg = write_cfg(tmp_path, total=400, num_envs=4)
    out = tmp_path / "runs"
    res = cli("run", str(cfg), "--out", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((only_run_dir(out) / "summary.json").read_text())
    assert summary["env_steps"] == 400
    assert summary["members"]["target"]["env_steps"] == 400


def test_run_with_bad_config_exits_2_and_writes_nothing(tmp_path: Path, cli) -> None:
    cfg = write_cfg(tmp_path)
    cfg.write_text(cfg.read_text().replace("capacity = 5_000", "capacity = -5"))
    out = tmp_path / "runs"
    res = cli("run", str(cfg), "--out", str(out))
    assert res.returncode == 2
    assert "[buffer] capacity" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_default_config_finishes(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-m", "wheeler2", "run", str(root / "cfg" / "default.toml"),
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
