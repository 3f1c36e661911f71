"""A team file that asks for backend ray where Ray is not installed: a config error naming the
key and the extra to install, not a traceback (runs whether or not Ray is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wheeler2.config import ConfigError, load
from wheeler2.runtime import run_experiment

TEAM = """
[experiment]
name = "noray"
total_steps = 100
eval_every = 50
backend = "ray"

[env]
id = "Pendulum-v1"

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
"""


def test_backend_ray_without_ray_names_the_key_and_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "team.toml"
    cfg.write_text(TEAM)
    config = load(cfg, overrides=[f'experiment.out="{tmp_path / "runs"}"'])
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "wheeler2.runtime.ray_backend", raising=False)
    monkeypatch.delitem(sys.modules, "wheeler2.runtime.ray_member", raising=False)
    with pytest.raises(ConfigError) as err:
        run_experiment(config)
    text = str(err.value)
    assert str(cfg) in text and "backend" in text and "pip install" in text and "[ray]" in text
    assert not (tmp_path / "runs").exists()  # nothing left behind
