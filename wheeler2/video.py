"""``wheeler2 eval RUN_DIR --video out.mp4``: episodes of a run's policy as video files.

Each episode is played in a ``gymnasium.make(id, render_mode="rgb_array")`` env inside the
run's ``[env] wrappers`` by :func:`wheeler2.load_policy`, so the video also shows that policy
working on raw observations (under ``[env] stack``, the policy keeps its own stack of frames
or flat observations, as the engine stacks them).
Episode ``i`` resets with the seed the eval env gives copy ``i`` (``eval_reset_seed + i``): the
recorded episodes are the ones ``wheeler2 eval`` scores (not on envpool copies, which draw
their own episodes for a seed: the video then plays gymnasium's env of the same id). One file
per episode, ``out_ep0.mp4``, ``out_ep1.mp4``, ...; each holds the first frame and one frame
per step.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from wheeler2.errors import UsageError

SUFFIXES = (".mp4", ".gif")


@dataclass
class Recording:
    path: Path
    frames: int
    episode_return: float


def episode_paths(out: Path, episodes: int) -> list[Path]:
    return [out.with_name(f"{out.stem}_ep{i}{out.suffix}") for i in range(episodes)]


def older_episodes(out: Path, written: int) -> list[Path]:
    """Files named as episodes of ``out`` past the ``written`` ones: an earlier call's with
    more ``--episodes``, not overwritten by this one (and not removed: they are the user's)."""
    found = []
    for path in out.parent.glob(f"{glob_escape(out.stem)}_ep*{out.suffix}"):
        index = path.name[len(out.stem) + 3 : len(path.name) - len(out.suffix)]
        if index.isdigit() and int(index) >= written and str(int(index)) == index:
            found.append((int(index), path))
    return [path for _, path in sorted(found)]


def check_output(out: Path) -> None:
    if out.suffix.lower() not in SUFFIXES:
        raise UsageError(f"--video {out}: expected a file name ending in .mp4 or .gif")
    if out.suffix.lower() == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401 - imageio writes mp4 through it
        except ImportError:
            raise UsageError(
                "--video .mp4 needs imageio-ffmpeg: pip install 'wheeler2[video]' (or use .gif)"
            ) from None
    try:
        import imageio  # noqa: F401
    except ImportError:
        raise UsageError("--video needs imageio: pip install 'wheeler2[video]'") from None


def make_render_env(config: Any) -> Any:
    """The run's env as one gymnasium env rendering ``rgb_array`` frames, or a UsageError."""
    import gymnasium

    from wheeler2 import registry

    env_id = config.env.id
    prefix, sep, _ = env_id.partition(":")
    if sep and prefix in registry.ENV_ADAPTERS:
        raise UsageError(f"--video: '{env_id}' is not a gymnasium env; expected a gymnasium id")
    registry.import_builtin_envs()
    # rgb_array frames need no window: SDL's dummy video driver keeps pygame-drawn envs (the
    # classic controls) from opening a display and from printing "error: XDG_RUNTIME_DIR is
    # invalid or not set" on a machine without one. A driver the user chose still wins.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        make_id = registry.gymnasium_id(env_id)  # "./myenv.py:MyEnv" as the run built it
        env = gymnasium.make(make_id, render_mode="rgb_array", **dict(config.env.kwargs))
    except Exception as exc:  # noqa: BLE001 - any refusal means: no rgb_array frames here
        raise UsageError(
            f"--video: {env_id} cannot render rgb_array frames ({type(exc).__name__}: {exc})"
        ) from None
    # The run's [env] wrappers, as its copies had them: the policy then sees the observations
    # it was trained on (Atari's AtariPreprocessing frames), while render() draws the env
    # inside them. Through the gymnasium adapter's own function, found by name.
    wrappers = tuple((w.wrapper, dict(w.kwargs)) for w in config.env.wrappers)
    if wrappers:
        env = registry.resolve_object("wheeler2.envs.gym:wrapped")(env, wrappers, env_id)
    modes = env.metadata.get("render_modes") or []
    if "rgb_array" not in modes:
        env.close()
        raise UsageError(
            f"--video: {env_id} renders {', '.join(map(str, modes)) or 'nothing'}; "
            "expected an env with render mode rgb_array"
        )
    return env


def record(
    run_dir: str | Path, out: str | Path, episodes: int | None = None, checkpoint: str = "best"
) -> list[Recording]:
    """Play ``episodes`` (default: ``experiment.eval_episodes``) deterministic episodes of the
    run's learner and write one video per episode next to ``out``."""
    from wheeler2.api import load_policy
    from wheeler2.runtime.seeds import eval_reset_seed

    out = Path(out)
    check_output(out)
    policy = load_policy(run_dir, checkpoint)
    config = policy.loaded.config
    episodes = int(episodes or config.experiment.eval_episodes)
    env = make_render_env(config)
    fps = int(env.metadata.get("render_fps") or 30)
    seed = eval_reset_seed(config)
    out.parent.mkdir(parents=True, exist_ok=True)
    done: list[Recording] = []
    try:
        for i, path in enumerate(episode_paths(out, episodes)):
            obs, _ = env.reset(seed=seed + i)
            policy.reset()  # a new episode: fresh memory and frame stacks
            frames = [env.render()]
            total, over = 0.0, False
            while not over:
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                total += float(reward)
                frames.append(env.render())
                over = terminated or truncated
            _write(path, frames, fps)
            done.append(Recording(path, len(frames), total))
    finally:
        env.close()
    return done


def _write(path: Path, frames: Sequence[np.ndarray], fps: int) -> None:
    """``path`` whole, or left as it was: the video is written in a folder of its own beside
    ``path`` and renamed over it once finished, so a Ctrl-C, a full disk or an encoder error
    never leaves a short file under the episode's name. A folder, not a temp file name: ffmpeg
    picks the container by the file's extension, which the name inside keeps."""
    import imageio.v2 as imageio

    images: list[npt.ArrayLike] = list(frames)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    tmp = staging / path.name
    try:
        if path.suffix.lower() == ".gif":
            # Pillow's GIF writer takes the frame duration in milliseconds; loop forever.
            imageio.mimsave(tmp, images, duration=1000.0 / fps, loop=0)
        else:
            # macro_block_size=2: H.264 (yuv420p) needs even sizes; pad only that far, not to 16.
            imageio.mimsave(tmp, images, fps=fps, macro_block_size=2)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
