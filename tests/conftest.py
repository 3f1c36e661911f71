"""Shared fixtures: a fake algorithm package and a fake task module, written per test.

Config tests resolve algorithms and tasks through these instead of ``agents/`` and ``tasks/``, so
they keep testing the config machinery while the real algorithms change.
"""

from __future__ import annotations

import logging
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ray_tmpdir import ray_tmpdir

from wheeler2.process import set_compute_threads

# The test process computes the way every wheeler2 process does: one torch / BLAS thread. With
# the default (one per core) a small PPO update here took ~100x longer while another process
# kept the second core busy, as CI's parallel members and envs do.
set_compute_threads()

FAKE_ALGO = '''
"""A do-nothing algorithm whose Params cover every annotation kind the config checks."""
from dataclasses import dataclass, field
from typing import Literal

from wheeler2.agent import Agent


@dataclass
class Params:
    gamma: float = 0.99
    learning_starts: int = 100
    hidden: tuple[int, ...] = (64, 64)
    layers: list[int] = field(default_factory=lambda: [32])
    noise: Literal["gaussian", "ou"] = "gaussian"
    clip: float | None = None
    normalize: bool = False
    device: str = "cpu"

    def __post_init__(self):
        # A cross-field rule no field can state, to test the "rejects these parameters" path;
        # real bounds (gamma in [0, 1], ...) are tested on the real algorithms' Params.
        if self.learning_starts < len(self.hidden):
            raise ValueError(f"learning_starts must be >= len(hidden), got {self.learning_starts}")


class Fake(Agent):
    Params = Params


class NotAnAgent:
    pass
'''

FAKE_TASKS = '''
"""Tasks for config tests."""


class Upright:
    pass


class Balance:
    pass


def upright_reward(obs, action, next_obs, achieved_goal, desired_goal, info):
    return 0.0


THRESHOLD = 1.0
'''

# Module names unlikely to clash with anything installed; fixed so sys.modules caching across
# tests is harmless (the contents never change).
ALGO_MODULE = "w2test_fake_algo"
AGENTS_PACKAGE = "w2test_agents"
TASKS_MODULE = "w2test_tasks"
TASKS_PACKAGE = "w2test_taskpkg"


@pytest.fixture
def fake_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Writes the fake modules into a fresh directory on sys.path; returns that directory.

    Also a package ``w2test_agents`` (modules ``fakealgo`` and a broken ``broken``) and a package
    ``w2test_taskpkg`` (module ``pendulum``) that the registry can scan in place of ``agents`` and
    ``tasks``.
    """
    root = tmp_path / "fake_modules"
    root.mkdir()
    (root / f"{ALGO_MODULE}.py").write_text(FAKE_ALGO)
    (root / f"{TASKS_MODULE}.py").write_text(FAKE_TASKS)
    agents = root / AGENTS_PACKAGE
    agents.mkdir()
    (agents / "__init__.py").write_text("")
    (agents / "fakealgo.py").write_text(FAKE_ALGO)
    (agents / "helpers.py").write_text("X = 1\n")
    tasks = root / TASKS_PACKAGE
    tasks.mkdir()
    (tasks / "__init__.py").write_text("")
    (tasks / "pendulum.py").write_text(FAKE_TASKS)
    monkeypatch.syspath_prepend(str(root))
    for name in list(sys.modules):
        if name.startswith("w2test_"):
            monkeypatch.delitem(sys.modules, name)
    return root


@pytest.fixture
def write_config(tmp_path: Path, fake_modules: Path) -> Callable[[str], Path]:
    """Write TOML text (dedented) to a file and return its path."""
    counter = iter(range(1_000_000))

    def write(text: str, name: str | None = None) -> Path:
        path = tmp_path / (name or f"exp{next(counter)}.toml")
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """A short RAY_TMPDIR for one test (see tests/ray_tmpdir.py), removed after it."""
    with ray_tmpdir() as path:
        yield path


@pytest.fixture
def quiet_mlagents() -> Iterator[None]:
    """mlagents-envs at ERROR for one test: the Unity mock announces no C# capabilities, which
    mlagents-envs warns about on every open."""
    logger = logging.getLogger("mlagents_envs")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _restore_sigint() -> Iterator[None]:
    """Each test starts with the SIGINT handler the session had: a run inside the test process
    that stops while Ctrl-C is ignored must not leave it ignored, since every child a later
    test starts inherits that (and a child started with SIGINT ignored never sees Ctrl-C)."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


def _starts_ray(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    name = item.path.name
    return name.startswith("test_ray") or name == "test_backends_agree.py" or "ray" in params


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs ``-n auto --dist loadgroup``), every test that
    starts Ray runs on one worker: two Ray head nodes on one machine contend for the fixed
    ports Ray keeps beside the ones it picks (the client server's 10001), and two Ray starts at
    once on two cores each take their whole start-up timeout."""
    for item in items:
        if _starts_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))
