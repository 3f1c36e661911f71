"""Short CLI runs of an off-policy learner (TD3, SAC), shared by their test files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from wheeler2 import cli

RUN = """
[experiment]
name = "{algo}-{name}"
seed = 1
total_steps = {total}
eval_every = {total}
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "{env}"

{task}
[buffer]
capacity = 5_000
batch_size = 32
prioritized = true
n_step = 3
{her}

[[team]]
name = "target"
algo = "{algo}"
role = "learner"
[team.params]
learning_starts = 100
hidden = [16, 16]
normalize_obs = {norm}
"""


def run_text(tmp_path: Path, capsys, text: str) -> tuple[Path, dict]:
    """Run an experiment file's text through ``wheeler2 run``: its run dir and summary."""
    path = tmp_path / "run.toml"
    path.write_text(textwrap.dedent(text))
    out = tmp_path / "runs"
    code = cli.main(["run", str(path), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, json.loads((run / "summary.json").read_text())


def config(algo: str, total: int = 400, team: str = "", **kw) -> str:
    """A solo ``algo`` learner on Pendulum (or ``env``, ``task``, ``her``), plus ``team``."""
    base = dict(name="solo", env="Pendulum-v1", task="", her="", norm="false", total=total)
    return RUN.format(algo=algo, **(base | kw)) + team
