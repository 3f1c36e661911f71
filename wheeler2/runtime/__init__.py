"""Backends that run a team, and the entry points the CLI calls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wheeler2.config import Config


def run_experiment(config: Config, run_dir: Path | None = None, resume: bool = False) -> Path:
    """Run (or resume) ``config``; returns the run directory holding every result.

    The directory is claimed at the start and removed again if the run fails before writing
    into it, so a run that fails at start leaves none.
    """
    # Imported here: the package is imported by member processes' first messages, before torch.
    from wheeler2.runtime.experiment import drop_if_empty, new_run_dir

    if resume and run_dir is None:
        raise ValueError("resume needs the run directory")
    _refuse_in_a_starting_child()
    claimed = run_dir is None
    out = Path(config.experiment.out)
    fresh_out = claimed and not out.exists()
    run_dir = new_run_dir(config) if run_dir is None else Path(run_dir)
    try:
        _run_backend(config, run_dir, resume)
    except BaseException:
        if claimed:
            drop_if_empty(run_dir)
        if fresh_out:
            drop_if_empty(out)
        raise
    return run_dir


def _refuse_in_a_starting_child() -> None:
    """A script that starts a run without ``if __name__ == "__main__":`` is imported again by
    every member process the local backend starts (forkserver, like spawn, imports the main
    module), so each member would start a run of its own and die of it in a traceback far from
    the cause. Say the cause, in the member's output, before any run directory is claimed."""
    for name in ("multiprocess", "multiprocessing"):
        mp = sys.modules.get(name)
        if mp is not None and getattr(mp.process.current_process(), "_inheriting", False):
            raise RuntimeError(
                "a wheeler2 run was started while a member process was importing your script: "
                'put the code that starts it under `if __name__ == "__main__":` (members are '
                "started with forkserver, which imports the main module as spawn does)"
            )


def _run_backend(config: Config, run_dir: Path, resume: bool) -> None:
    _sweep_shared_memory()
    backend = config.experiment.backend
    if backend == "serial":
        from wheeler2.runtime.serial import run_serial

        run_serial(config, run_dir, resume)
    elif backend == "local":
        from wheeler2.runtime.local import run_local

        run_local(config, run_dir, resume)
    elif backend == "ray":
        try:
            from wheeler2.runtime.ray_backend import run_ray
        except ModuleNotFoundError as exc:
            if exc.name != "ray":
                raise
            from wheeler2.config import ConfigError

            # Ray is an optional extra: say so, rather than a traceback ending in "No module
            # named 'ray'".
            raise ConfigError(
                config.path,
                "experiment",
                "backend",
                'backend "ray" needs Ray, an optional extra: pip install ".[ray]" '
                '(or "wheeler2[ray]"); backend = "local" runs the team on this machine',
            ) from None

        run_ray(config, run_dir, resume)
    else:  # config validation rejects this first; kept for callers that build configs by hand
        raise ValueError(f"unknown backend {backend!r}: expected serial, local or ray")


def _sweep_shared_memory() -> None:
    """Free the shared memory of earlier runs on this machine whose processes are gone (killed
    with SIGKILL, or Ray actors ended without their teardown), so no crash leaks past a run."""
    from wheeler2.buffer.shm import sweep_stale

    removed, freed = sweep_stale()
    if removed:
        print(
            f"freed {freed / 2**20:.1f} MiB of shared memory left by dead runs "
            f"({removed} {'entry' if removed == 1 else 'entries'} in /dev/shm)",
            flush=True,
        )


def evaluate_run(run_dir: Path, episodes: int | None = None, which: str = "best") -> dict[str, Any]:
    """Evaluate the learner of a finished (or interrupted) run from its checkpoint."""
    from wheeler2.config import load
    from wheeler2.runtime.curriculum import apply_stage, saved_stage
    from wheeler2.runtime.evaluation import evaluate
    from wheeler2.runtime.restore import restore
    from wheeler2.runtime.seeds import eval_reset_seed

    run_dir = Path(run_dir)
    config = load(run_dir / "config.toml")
    episodes = int(episodes or config.experiment.eval_episodes)
    # A missing, unreadable or unsafe file, or one of another team or network shape, is a
    # CheckpointError (one line, exit 2), not a traceback from inside load_state_dict.
    restored = restore(config, run_dir, which, eval_copies=episodes)
    env = restored.env
    assert env is not None  # restore opens it with eval_copies
    try:
        if config.curriculum is not None:  # at the stage the checkpoint's evals ran at
            apply_stage(saved_stage(config, restored.payload), env)
        result = evaluate(restored.learner, env, eval_reset_seed(config))
    finally:
        env.close()
    return {
        "checkpoint": str(restored.path),
        "episodes": episodes,
        "mean_return": result.mean_return,
        "std_return": result.std_return,
        "success": result.success,
        "env_steps": restored.payload["run"]["env_steps"],
    }
