"""``wheeler2/Slow-v0``: the wrapped env's transitions, each taking at least ``step_ms``."""

from __future__ import annotations

import time

import gymnasium
import numpy as np
import wheeler2.envs.slow  # noqa: F401 - registers the id


def test_slow_env_steps_like_the_inner_env_and_waits_at_least_step_ms() -> None:
    slow = gymnasium.make("wheeler2/Slow-v0", env_id="Pendulum-v1", step_ms=5.0)
    plain = gymnasium.make("Pendulum-v1")
    a, _ = slow.reset(seed=3)
    b, _ = plain.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(20):
        action = rng.uniform(-2, 2, (1,)).astype(np.float32)
        sa, ra, *_ = slow.step(action)
        sb, rb, *_ = plain.step(action)
        np.testing.assert_array_equal(sa, sb)
        assert ra == rb
    # A sleep never ends early: 20 steps of >= 5 ms each (an upper bound would flake under load).
    assert time.perf_counter() - t0 >= 20 * 0.005
    truncated = False
    slow.reset(seed=0)
    steps = 0
    while not truncated:
        _, _, _, truncated, _ = slow.step(np.zeros(1, np.float32))
        steps += 1
    assert steps == 200  # Pendulum's own time limit, through the wrapper
