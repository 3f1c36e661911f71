"""Every experiment file in cfg/ builds as shipped: it validates, its env probes, its task's heads
fit that env, every member's agent builds and explorer sync checks pass. A renamed key, an env a
`make test` install lacks or a head of the wrong shape fails here, not in a user's first run."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from wheeler2.config import load
from wheeler2.runtime.team import prepare_team

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "cfg").glob("*.toml"))


def test_cfg_directory_is_not_empty() -> None:
    assert {p.name for p in CONFIGS} >= {"default.toml", "pendulum_ddpg.toml", "pendulum_team.toml"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_config_builds(path: Path) -> None:
    logging.getLogger("mlagents_envs").setLevel(logging.ERROR)
    config = load(path)
    setup = prepare_team(config, {})
    assert setup.lead.role == "learner"
    assert len(setup.plans) == sum(int(t.count) for t in config.team)
    assert all(t.info.obs_dim > 0 and t.info.act_dim > 0 for t in setup.tables)
