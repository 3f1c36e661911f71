"""The replay holds exactly what the env did: every transition a serial run stores equals
gymnasium's own step for the stored action, replayed from the run's reset seed, across
terminations (Hopper-v5 falls over often at first), in the random phase and after it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2.config import load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.seeds import MEMBER_SEED_STRIDE

pytest.importorskip("mujoco", reason="Hopper-v5 needs gymnasium[mujoco]")

STEPS = 1_500
RUN = f"""
[experiment]
name = "stored"
seed = 3
total_steps = {STEPS}
eval_every = {STEPS}
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Hopper-v5"

[buffer]
capacity = 5_000
batch_size = 32
prioritized = false
checkpoint = true

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
learning_starts = 500
hidden = [16, 16]
"""


def test_every_stored_transition_is_the_envs_own_step(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN)
    run_dir = run_experiment(load(cfg, out=str(tmp_path / "runs")))
    replay = ckpt.load(run_dir / "checkpoints" / "latest.pt")["replay"]
    assert replay["total"] == STEPS
    a = {k: v.numpy()[:STEPS] for k, v in replay["arrays"].items()}
    env = gym.make("Hopper-v5")
    # The learner is member 0, its one env copy reset with seed * MEMBER_SEED_STRIDE + 0.
    obs, _ = env.reset(seed=3 * MEMBER_SEED_STRIDE)
    episodes = 0
    for t in range(STEPS):
        np.testing.assert_allclose(a["obs"][t], obs, atol=1e-6, err_msg=f"obs {t}")
        obs, r, term, trunc, _ = env.step(a["action"][t])
        np.testing.assert_allclose(a["next_obs"][t], obs, atol=1e-6, err_msg=f"next_obs {t}")
        assert a["reward"][t, 0] == pytest.approx(r, abs=1e-5), t
        assert bool(a["terminated"][t]) == term, t
        assert bool(a["truncated"][t]) == (trunc and not term), t
        if term or trunc:
            episodes += 1
            obs, _ = env.reset()
    assert episodes >= 5  # terminations were crossed, not one long episode
    # Both phases are in: uniform actions first, then the policy's (clipped) noisy ones.
    assert np.all(np.abs(a["action"]) <= 1.0)
