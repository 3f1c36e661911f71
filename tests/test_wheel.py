"""The built wheel installs one top-level name, ``wheeler2``: the repository's agents/, envs/ and
tasks/ folders live under it (``wheeler2.agents``), so they never collide with a user's own
packages of those names; and the installed copy works on its own, old spec strings included.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"wheeler2": "wheeler2", "agents": "wheeler2/agents", "envs": "wheeler2/envs"}
FOLDERS["tasks"] = "wheeler2/tasks"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy of what the build reads: an in-tree build would reuse the repository's build/
    # folder, whose stale files would hide a package missing from setup.cfg.
    src = out / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # No build isolation: the venv's setuptools builds it, with no index to reach.
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*cmd, "-w", str(out), str(src)], check=True, capture_output=True)
    (built,) = out.glob("wheeler2-*.whl")
    return built


def test_the_wheel_installs_only_the_wheeler2_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"wheeler2"}
    # Every source file of the four folders is in it, at its installed place (a subpackage
    # missing from setup.cfg's list would be left out silently).
    want = {
        f"{FOLDERS[folder]}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    }
    assert want <= set(names), sorted(want - set(names))


def test_the_installed_copy_runs_without_the_repository(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True, capture_output=True)
    # -S: no site module, so neither the editable install nor the repository is on the path;
    # the venv's own packages (torch, gymnasium, ...) are added after the installed copy.
    probe = f"""
import sys
sys.path[:0] = [{str(target)!r}]
sys.path.append({sysconfig.get_paths()["purelib"]!r})
import wheeler2
from wheeler2 import registry
assert wheeler2.__file__.startswith({str(target)!r}), wheeler2.__file__
assert "agents" not in sys.modules and "tasks" not in sys.modules
algos = registry.algorithms()
assert {{"ddpg", "td3", "sac", "dqn", "ppo", "a2c", "pg"}} <= set(algos), sorted(algos)
assert algos["ddpg"].__module__ == "wheeler2.agents.ddpg"
old = registry.resolve_object("tasks.bitflip:BitFlip")
assert old is registry.resolve_object("wheeler2.tasks.bitflip:BitFlip")
assert old.__module__ == "wheeler2.tasks.bitflip"
registry.check_env_id("wheeler2/BitFlip-v0")
print("ok")
"""
    run = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
