"""``w2_staged:Recorded-v0``: wheeler2/StagedReach-v0 that also appends one line per stage it is
set to, ``<pid> <stage>``, to the file its ``record`` kwarg names, so a test sees which process
applied which stage (member processes import this module by name: ``tests/`` is on the path
pytest gives them)."""

from __future__ import annotations

import os
from typing import Any

import gymnasium
from wheeler2.envs.staged import MAX_EPISODE_STEPS, StagedReachEnv

ENV_ID = "Recorded-v0"


class RecordedStagedReach(StagedReachEnv):
    def __init__(self, record: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.record = record

    def set_curriculum_stage(self, stage: int) -> None:
        super().set_curriculum_stage(stage)
        with open(self.record, "a", encoding="ascii") as f:
            f.write(f"{os.getpid()} {stage}\n")


if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID,
        entry_point="w2_staged:RecordedStagedReach",
        max_episode_steps=MAX_EPISODE_STEPS,
    )
