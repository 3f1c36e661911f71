"""``wheeler2/Slow-v0``: any gymnasium env whose every step also waits a fixed time, as a remote
simulator or a real robot does (issues 13 and 17: collection that pays off when env steps are
not free).

```toml
[env]
id = "wheeler2/Slow-v0"
kwargs = { env_id = "Pendulum-v1", step_ms = 2.0 }   # the rest goes to Pendulum-v1
```

The wait is a sleep, so it costs wall-clock but no CPU: the situation where more members on the
same cores collect more steps per second. Spaces, rewards, time limits and seeding are the
wrapped env's own.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium

ENV_ID = "wheeler2/Slow-v0"


class SlowEnv(gymnasium.Wrapper):
    def __init__(self, env_id: str = "Pendulum-v1", step_ms: float = 2.0, **kwargs: Any) -> None:
        if step_ms < 0:
            raise ValueError(f"step_ms must be >= 0, got {step_ms}")
        super().__init__(gymnasium.make(env_id, **kwargs))
        self.step_s = float(step_ms) / 1000.0

    def step(self, action: Any) -> Any:
        # Sleep until the deadline rather than for a fixed time after the step: the env's own
        # compute counts toward the simulated step time, as a remote call's latency would.
        deadline = time.perf_counter() + self.step_s
        out = self.env.step(action)
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return out


def register() -> None:
    """Register ``wheeler2/Slow-v0``; idempotent. No TimeLimit here: the inner env has its own."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="wheeler2.envs.slow:SlowEnv")


register()
