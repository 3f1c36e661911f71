"""A reward head or a loss that turns non-finite stops the run at once: exit 1, one line naming
the member, the head or loss and the env step, and a checkpoint from before the value."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import w2_faults

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli

ROOT = Path(__file__).resolve().parents[1]

RUN = """
[experiment]
name = "finite"
seed = 0
total_steps = 5_000
eval_every = 100
eval_episodes = 1
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"

[task]
[[task.heads]]
name = "env"
[[task.heads]]
name = "bonus"
reward = "w2_faults:{head}"

[buffer]
capacity = 5_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
"""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``wheeler2 run`` of the file above: serial in this process (``cli.main``, what
    ``python -m wheeler2`` calls; a subprocess paid a torch import), local in a subprocess
    whose members import ``w2_faults`` from PYTHONPATH."""

    def call(tmp_path: Path, head: str, backend: str = "serial") -> tuple[Result, Path]:
        cfg = tmp_path / "finite.toml"
        cfg.write_text(RUN.format(head=head, backend=backend))
        args = ["run", str(cfg), "--out", str(tmp_path / "runs")]
        if backend == "serial":
            # The head counts its calls in a module global: start from 0 as a fresh process.
            monkeypatch.setattr(w2_faults, "_reward_calls", 0)
            capfd.readouterr()
            code = cli.main(args)
            out, err = capfd.readouterr()
            res = Result(code, out, err)
        else:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
            done = subprocess.run(
                [sys.executable, "-m", "wheeler2", *args],
                capture_output=True, text=True, timeout=180, env=env, cwd=ROOT,
            )  # fmt: skip
            res = Result(done.returncode, done.stdout, done.stderr)
        return res, next((tmp_path / "runs").glob("finite-*"))

    return call


def _finite(state: object) -> bool:
    if isinstance(state, torch.Tensor):
        return bool(torch.isfinite(state).all()) if state.is_floating_point() else True
    if isinstance(state, dict):
        return all(_finite(v) for v in state.values())
    if isinstance(state, list | tuple):
        return all(_finite(v) for v in state)
    return True


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_a_nan_reward_head_stops_the_run_naming_head_and_step(
    tmp_path: Path, backend: str, run
) -> None:
    res, run_dir = run(tmp_path, "nan_after_300", backend)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "member 'target': non-finite value: reward head 'bonus' is nan at env step" in out, out
    assert "Traceback" not in out, "an expected stop is one line, not a traceback"
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    assert "target" in payload["members"], "the checkpoint holds the learner from before"
    assert _finite(payload["members"]["target"])


def test_an_overflowing_loss_stops_the_run_naming_the_loss(tmp_path: Path, run) -> None:
    res, run_dir = run(tmp_path, "huge")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "non-finite value: loss 'critic_loss" in out, out
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    assert _finite(payload["members"].get("target", {}))
