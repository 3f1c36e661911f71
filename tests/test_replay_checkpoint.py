"""Serial runs and their checkpoints: ``buffer.checkpoint = true`` puts the replay into
``checkpoints/latest.pt`` and resume restores its contents; resume starts the learner from the
checkpoint's weights (not fresh ones)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from wheeler2 import checkpoint as ckpt
from wheeler2.config import load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.member import EPISODES_KEY, MemberLoop

RUN = """
[experiment]
name = "replay-ckpt"
seed = 0
total_steps = 300
eval_every = 300
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 2_000
batch_size = 16
checkpoint = {checkpoint}

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
"""


@pytest.fixture
def starts(monkeypatch) -> list[dict]:
    """What each member loop holds right after it was built: its agent's state and, for the
    learner, the replay's counters and stored observations."""
    seen: list[dict] = []
    init = MemberLoop.__init__

    def spy(self, config, plan, wiring) -> None:  # noqa: ANN001
        init(self, config, plan, wiring)
        entry = {"name": plan.name, "agent": copy.deepcopy(self.agent.state_dict())}
        if wiring.replay is not None:
            entry["replay_stats"] = wiring.replay.stats()
            entry["replay_obs"] = wiring.replay.storage.arrays["obs"].copy()
        seen.append(entry)

    monkeypatch.setattr(MemberLoop, "__init__", spy)
    return seen


def _run(tmp_path: Path, checkpoint: bool) -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN.format(checkpoint=str(checkpoint).lower()))
    return run_experiment(load(cfg, out=str(tmp_path / "runs")))


def _resume(run_dir: Path) -> None:
    config = load(run_dir / "config.toml", overrides=["experiment.total_steps=400"])
    run_experiment(config, run_dir, resume=True)


def _agent_state(member_state: dict) -> dict:
    """A member's checkpointed state less what the member keeps beside its agent's."""
    return {k: v for k, v in member_state.items() if k != EPISODES_KEY}


def _assert_same(a, b, where: str = "") -> None:  # noqa: ANN001
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_replay_checkpoint_written_and_restored_on_resume(tmp_path: Path, starts) -> None:
    """buffer.checkpoint = true: latest.pt holds the replay (every transition of the 300-step
    run); resume starts with exactly those contents, and the learner with the checkpoint's
    weights and optimizer state."""
    run_dir = _run(tmp_path, checkpoint=True)
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    replay = payload["replay"]
    assert replay["total"] == 300
    saved_obs = replay["arrays"]["obs"].numpy()
    assert np.abs(saved_obs[:300]).sum() > 0 and np.all(saved_obs[300:] == 0)
    saved_agent = _agent_state(payload["members"]["target"])

    starts.clear()
    _resume(run_dir)
    (start,) = starts
    assert start["replay_stats"]["inserts"] == 300 and start["replay_stats"]["size"] == 300
    np.testing.assert_array_equal(start["replay_obs"], saved_obs)
    _assert_same(start["agent"], saved_agent)
    after = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    assert after["replay"]["total"] == 400  # the resumed run kept inserting after the restore


def test_serial_resume_starts_from_the_checkpoint_weights(tmp_path: Path, starts) -> None:
    """Without the replay in the checkpoint, resume still restores the learner: its weights,
    target nets and optimizer moments at start are the checkpoint's, not a fresh init; the
    replay starts empty."""
    run_dir = _run(tmp_path, checkpoint=False)
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    assert payload.get("replay") is None
    fresh = starts[0]["agent"]  # the first run's learner at its start
    saved_agent = _agent_state(payload["members"]["target"])
    assert not torch.equal(fresh["actor"]["head.weight"], saved_agent["actor"]["head.weight"])

    starts.clear()
    _resume(run_dir)
    (start,) = starts
    _assert_same(start["agent"], saved_agent)
    assert start["replay_stats"]["inserts"] == 0


def test_a_member_flushes_its_staged_rows_before_it_reports_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a member's Finished the coordinator may take the final checkpoint's replay at once
    (local and ray, where the member's close runs in its own process): by then every row the
    member staged must be in the table, not only those of its full chunks."""
    from wheeler2.runtime import serial
    from wheeler2.runtime.messages import Finished

    replays = []
    make = serial.make_replay

    def staging(config, table, chunk=None):
        replays.append(make(config, table))  # chunks of 64 rows, as local stages them
        return replays[-1]

    at_finish: list[int] = []
    send = serial._ListLink.send

    def spy(self, message) -> None:
        if isinstance(message, Finished):
            at_finish.append(replays[0].stats()["inserts"])
        send(self, message)

    monkeypatch.setattr(serial, "make_replay", staging)
    monkeypatch.setattr(serial._ListLink, "send", spy)
    run_dir = _run(tmp_path, checkpoint=True)
    # 300 steps: an episode of 200, a chunk of 64, and 36 rows staged at the end.
    assert at_finish == [300]
    assert ckpt.load(run_dir / "checkpoints" / "latest.pt")["replay"]["total"] == 300
