"""``wheeler2 resume`` and ``eval`` refuse a checkpoint they cannot trust or use: one ``error:``
line on stderr and exit 2, never a traceback, never torch's advice to load with
``weights_only=False``, and never a silent fresh start (a renamed member used to start over, its
env steps lost)."""

from __future__ import annotations

import os
import pickle
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from wheeler2 import cli
from wheeler2.config import dumps_toml

EXPERIMENT = """
[experiment]
name = "safety"
seed = 0
total_steps = 256
eval_every = 256
eval_episodes = 1
backend = "serial"
progress = false
out = "{out}"

[env]
id = "Pendulum-v1"
num_envs = 1

[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 64

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
[team.params]
hidden = [8]
n_steps = 32
batch_size = 16
n_epochs = 1
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short two-member run; each test corrupts its own copy."""
    root = tmp_path_factory.mktemp("safety")
    path = root / "team.toml"
    path.write_text(EXPERIMENT.format(out=(root / "runs").as_posix()))
    assert cli.main(["run", str(path)]) == 0
    (run_dir,) = (root / "runs").iterdir()
    return run_dir


class _RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint carries."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., int], tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _edit_config(run_dir: Path, edit: Callable[[dict], None]) -> None:
    data = tomllib.loads((run_dir / "config.toml").read_text())
    edit(data)
    (run_dir / "config.toml").write_text(dumps_toml(data))


def _member(data: dict, name: str) -> dict:
    return next(m for m in data["team"] if m["name"] == name)


def _truncate(run_dir: Path) -> None:
    path = run_dir / "checkpoints" / "latest.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _foreign(run_dir: Path) -> None:
    (run_dir / "checkpoints" / "latest.pt").write_text("not a checkpoint: some notes\n")


def _malicious(run_dir: Path) -> None:
    # Protocol 2, no frames: the weights_only unpickler reaches the GLOBAL os.system opcode.
    payload = {"run": {}, "members": {}, "x": _RunsCode(run_dir / "pwned")}
    (run_dir / "checkpoints" / "latest.pt").write_bytes(pickle.dumps(payload, protocol=2))


def _malicious_torch_file(run_dir: Path) -> None:
    # The same inside a genuine torch zip file, as torch.save writes it.
    payload = {"run": {}, "members": {}, "x": _RunsCode(run_dir / "pwned")}
    torch.save(payload, run_dir / "checkpoints" / "latest.pt")


def _missing(run_dir: Path) -> None:
    (run_dir / "checkpoints" / "latest.pt").unlink()


def _renamed_explorer(run_dir: Path) -> None:
    _edit_config(run_dir, lambda d: _member(d, "explorer").update(name="scout"))


def _other_algo(run_dir: Path) -> None:
    def edit(d: dict) -> None:
        member = _member(d, "explorer")
        member["algo"], member["params"] = "a2c", {"hidden": [8]}

    _edit_config(run_dir, edit)


def _other_shape(run_dir: Path) -> None:
    _edit_config(run_dir, lambda d: _member(d, "target")["params"].update(hidden=[16]))


CASES = {
    "truncated": (_truncate, "not a readable torch checkpoint"),
    "foreign": (_foreign, "not a readable torch checkpoint"),
    "malicious-pickle": (_malicious, "refused.*system"),
    "malicious-torch-file": (_malicious_torch_file, "refused.*system"),
    "missing": (_missing, "missing"),
    "renamed-explorer": (_renamed_explorer, r"\['explorer'\] not in the config"),
    "other-algo": (_other_algo, "saved by algo 'ppo'"),
    "other-network-shape": (_other_shape, r"target\.actor\..* has shape \[8"),
}


def _assert_refused(capfd: pytest.CaptureFixture[str], rc: int, match: str) -> str:
    import re

    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and re.search(match, lines[0]), lines[0]
    assert "Traceback" not in err and "weights_only" not in err
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_resume_refuses_in_one_line(
    case: str, finished_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    damage, match = CASES[case]
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    damage(run_dir)
    before = (run_dir / "summary.json").read_text()
    capfd.readouterr()
    rc = cli.main(["resume", str(run_dir)])
    line = _assert_refused(capfd, rc, match)
    assert "latest.pt" in line
    assert not (run_dir / "pwned").exists()  # the pickled os.system never ran
    assert (run_dir / "summary.json").read_text() == before  # nothing of the run was touched


@pytest.mark.parametrize("case", ["truncated", "malicious-pickle", "other-network-shape"])
def test_eval_refuses_in_one_line(
    case: str, finished_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    damage, match = CASES[case]
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "checkpoints" / "best.pt").unlink(missing_ok=True)  # eval falls back to latest
    damage(run_dir)
    capfd.readouterr()
    rc = cli.main(["eval", str(run_dir), "--episodes", "1"])
    _assert_refused(capfd, rc, match)
    assert not (run_dir / "pwned").exists()


def test_an_intact_copy_resumes_and_evaluates(finished_run: Path, tmp_path: Path) -> None:
    """The refusals above are about the damage, not the run: an untouched copy goes on."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    _edit_config(run_dir, lambda d: d["experiment"].update(total_steps=384))
    assert cli.main(["resume", str(run_dir)]) == 0
    assert cli.main(["eval", str(run_dir), "--episodes", "1"]) == 0
