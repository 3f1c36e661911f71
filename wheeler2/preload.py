"""Where the local backend's member processes come from: a fork server that has already imported
what every member imports (torch, torch's optimizer machinery, the member loop, the built-in
algorithms and gymnasium), so a member is a ``fork`` of it, ready in milliseconds.

Under ``spawn`` each member imported all of that afresh (~3 s of CPU each, measured by
``experiments/startup.py``); the fork server pays it once, and pays it beside the main process:
``wheeler2 run`` starts it before the main process itself imports torch (:func:`start_early`).

A leaf module that imports no torch: the CLI calls it first thing.

``WHEELER2_START_METHOD=spawn`` starts members the old way (the benchmark's other arm, and a
fallback for a platform without fork servers).
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import signal
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wheeler2.errors import UsageError

# What a member imports before its first step, besides every module of the packages below.
# Not torch._dynamo (~1.3 s here, after torch's ~1.5 s): it would put the server's readiness,
# which every member waits for, past the main process's; a member imports it in a thread once
# it has started, heard from meanwhile (wheeler2.liveness, wheeler2.process.defer_dynamo_import).
PRELOAD = [
    "__main__",  # as spawn re-imports it: a user's script registering its envs at top level
    "torch",
    "numpy",
    "gymnasium",
    "wheeler2.runtime.local",
    "wheeler2.runtime.member",
]
# The built-in algorithms, their parts and the env adapters: ~0.05 s together (the adapters
# import their env libraries only when used).
PRELOAD_PACKAGES = ("wheeler2.agents", "wheeler2.agents.parts", "wheeler2.envs")


def preload_modules() -> list[str]:
    """:data:`PRELOAD` and every public module of :data:`PRELOAD_PACKAGES`, found without
    importing them (this module imports no torch)."""
    out = list(PRELOAD)
    for package in PRELOAD_PACKAGES:
        spec = importlib.util.find_spec(package)
        where = spec.submodule_search_locations if spec is not None else None
        out += [package] + [
            f"{package}.{m.name}"
            for m in pkgutil.iter_modules(where or [])
            if not m.name.startswith("_")
        ]
    return out


def start_method() -> str:
    method = os.environ.get("WHEELER2_START_METHOD", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise UsageError(
            f"WHEELER2_START_METHOD={method!r}: expected 'forkserver' (the default) or 'spawn'"
        )
    if method == "forkserver" and sys.platform == "win32":
        return "spawn"
    return method


def member_context() -> Any:
    """The multiprocess context members start from; the fork server is started (once per
    process, as multiprocess keeps it) if :func:`start_early` did not already."""
    import multiprocess as mp

    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        from multiprocess import forkserver

        ctx.set_forkserver_preload(preload_modules())
        # Started with Ctrl-C ignored, which Python keeps across exec and members inherit
        # from the fork: a Ctrl-C at the terminal reaches the whole process group, and the
        # coordinator alone decides how the team stops (a member only sets this itself once
        # it runs).
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: the member ignores it from its first line
            previous = None
        try:
            forkserver.ensure_running()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    return ctx


def start_early(command: str, target: Path, overrides: Sequence[str]) -> None:
    """Start the fork server now, while this process goes on to import torch and build the
    team, when the file is likely to run on the local backend. A guess from the raw TOML: a
    wrong one costs a start that is not used (or a start later, in the backend), never a
    different run."""
    path = target / "config.toml" if command == "resume" else target
    try:
        method = start_method()
    except UsageError:
        return  # the local backend refuses it when it starts the members: one error line
    if _backend_hint(path, overrides) == "local" and method == "forkserver":
        try:
            member_context()
        except OSError:
            pass  # the backend starts it again, and reports what fails then


def _backend_hint(path: Path, overrides: Sequence[str]) -> str | None:
    for item in overrides:
        key, _, value = item.partition("=")
        if key.strip() == "experiment.backend":
            return value.strip().strip("'\"")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return None  # the config reader says what is wrong
    experiment = data.get("experiment")
    backend = experiment.get("backend") if isinstance(experiment, dict) else None
    return backend if isinstance(backend, str) else None  # unset: the default, not local
