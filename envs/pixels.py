"""Image tasks: MinAtar's games under gymnasium ids, and a tiny built-in one for tests.

Importing this module registers, without importing MinAtar (whose import pulls in matplotlib
and seaborn, about 1.5 s):

* ``MinAtar/<Game>-v1`` (the game's minimal action set) and ``MinAtar/<Game>-v0`` (all six
  actions) for Asterix, Breakout, Freeway, Seaquest and SpaceInvaders (Young & Tian 2019):
  observations are MinAtar's ``(10, 10, channels)`` bool state, which the gymnasium adapter turns
  into channels-first uint8 rows of 0 / 255 (``envs/spaces.py`` ``image_shape``). Sticky actions
  (probability 0.1) and difficulty ramping are MinAtar's defaults (``kwargs`` change them).
  The package is the ``minatar`` extra; the ids are registered only where MinAtar's own are not.
* ``wheeler2/Catch-v0``: a ball falls one row a step from a random column of a ``size`` x
  ``size`` screen, a paddle on the bottom row moves left, stays or moves right; +1 for a
  catch, -1 for a miss, and the episode ends when the ball reaches the bottom row. One uint8
  channel (0 / 255), no dependency: the image tests' task.

Atari needs nothing here: ``import ale_py`` registers the ``ALE/...`` ids, so ``[env] id =
"ale_py:ALE/Pong-v5"`` with gymnasium's ``AtariPreprocessing`` in ``[env] wrappers`` (see
``cfg/atari_pong.toml``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

MINATAR_GAMES = {
    "Asterix": "asterix",
    "Breakout": "breakout",
    "Freeway": "freeway",
    "Seaquest": "seaquest",
    "SpaceInvaders": "space_invaders",
}
CATCH_ID = "wheeler2/Catch-v0"
# MinAtar's episodes end by themselves; a cap keeps an evaluation of a policy that never loses
# finite (Freeway ends at 2,500 steps by its own rule).
MINATAR_MAX_STEPS = 10_000


class MinAtarEnv(gymnasium.Env):
    """One MinAtar game as a gymnasium env: ``(10, 10, channels)`` bool observations, a
    Discrete action over the minimal or the full action set."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(
        self,
        game: str,
        minimal_actions: bool = True,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        render_mode: str | None = None,
    ) -> None:
        from minatar import Environment  # the minatar extra

        self.game = Environment(game, sticky_action_prob, difficulty_ramping)
        self.actions = self.game.minimal_action_set() if minimal_actions else list(range(6))
        self.action_space = spaces.Discrete(len(self.actions))
        shape = tuple(self.game.state_shape())
        self.observation_space = spaces.Box(0, 1, shape, dtype=bool)
        self.render_mode = render_mode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.game.seed(seed)
        # MinAtar's sticky actions repeat its last action, which its reset keeps: the previous
        # episode's would leak into this one's first step (a seeded reset would not repeat).
        self.game.last_action = 0
        self.game.reset()
        return self.game.state(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, done = self.game.act(self.actions[int(action)])
        return self.game.state(), float(reward), bool(done), False, {}

    def render(self) -> np.ndarray:
        """Each channel in a colour of its own (the last one drawn wins), 10 pixels a cell."""
        state = self.game.state()
        hues = np.linspace(0.0, 1.0, state.shape[2], endpoint=False)
        palette = np.stack([_rgb(h) for h in hues])  # [C, 3]
        img = np.zeros((*state.shape[:2], 3), np.uint8)
        for c in range(state.shape[2]):
            img[state[:, :, c]] = palette[c]
        return np.kron(img, np.ones((10, 10, 1), np.uint8))


def _rgb(hue: float) -> np.ndarray:
    """A saturated colour of ``hue`` in [0, 1) as uint8 RGB."""
    k = (np.array([5.0, 3.0, 1.0]) + hue * 6.0) % 6.0
    return (255 * (1.0 - np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0))).astype(np.uint8)


class CatchEnv(gymnasium.Env):
    """Catch a falling ball (module docstring): ``(size, size)`` uint8 frames, 3 actions."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, size: int = 6, render_mode: str | None = None) -> None:
        if size < 3:
            raise ValueError(f"size must be >= 3, got {size}")
        self.size = int(size)
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Box(0, 255, (self.size, self.size), dtype=np.uint8)
        self.render_mode = render_mode
        self.ball = np.zeros(2, np.int64)  # row, column
        self.paddle = 0

    def _frame(self) -> np.ndarray:
        frame = np.zeros((self.size, self.size), np.uint8)
        frame[self.ball[0], self.ball[1]] = 255
        frame[self.size - 1, self.paddle] = 255
        return frame

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.ball[:] = (0, self.np_random.integers(self.size))
        self.paddle = int(self.np_random.integers(self.size))
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.size - 1))
        self.ball[0] += 1
        done = bool(self.ball[0] == self.size - 1)
        reward = 0.0
        if done:
            reward = 1.0 if self.ball[1] == self.paddle else -1.0
        return self._frame(), reward, done, False, {}

    def render(self) -> np.ndarray:
        return np.repeat(self._frame()[:, :, None], 3, axis=2)


def _register() -> None:
    for name, game in MINATAR_GAMES.items():
        for version, minimal in (("v1", True), ("v0", False)):
            env_id = f"MinAtar/{name}-{version}"
            if env_id not in gymnasium.registry:
                gymnasium.register(
                    env_id,
                    entry_point=f"{__name__}:MinAtarEnv",
                    kwargs={"game": game, "minimal_actions": minimal},
                    max_episode_steps=MINATAR_MAX_STEPS,
                )
    if CATCH_ID not in gymnasium.registry:
        gymnasium.register(CATCH_ID, entry_point=f"{__name__}:CatchEnv")


_register()
