"""Resume continues (issue 39, item 3): every counter and random stream of an agent and its
trainer survives a checkpoint, ``wheeler2 resume RUN --set experiment.total_steps=N`` extends a
run (only the budget and report keys), and a resumed off-policy learner without its replay says
that it refills before it learns again."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli
from wheeler2.agent import Agent, SpaceInfo, Transitions
from wheeler2.registry import resolve_algo

OBS, ACT, N = 3, 2, 2

# (algorithm, params): every off-policy kind of exploration (action noise processes, NoisyNet,
# epsilon-greedy, policy samples) and the on-policy sampling stream.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("ddpg", {"noise": "gaussian"}),
    ("ddpg", {"noise": "pink", "noise_horizon": 8}),
    ("ddpg", {"noise": "colored", "noise_beta": 2.0, "noise_horizon": 8}),
    ("ddpg", {"noise": "ou"}),
    ("ddpg", {"noisy": True}),
    ("td3", {"noise": "ou"}),
    ("sac", {}),
    ("crossq", {}),
    ("dqn", {"eps_start": 0.5, "eps_end": 0.5}),
    ("dqn", {"noisy": True}),
    ("ppo", {"n_steps": 4, "batch_size": 4}),
    ("a2c", {"n_steps": 4}),
    ("pg", {"n_steps": 4}),
]


def _agent(algo: str, params: dict[str, Any]) -> Agent:
    cls = resolve_algo(algo)
    p = cls.Params(**({"hidden": [8]} | params))
    discrete = bool(getattr(cls, "discrete", False)) or algo == "dqn"
    space = SpaceInfo(OBS, 3 if discrete else ACT, discrete)
    return cls(space, p, "cpu", 7)


def _drive(agent: Agent, rng: np.random.Generator, steps: int) -> None:
    """Act and observe ``steps`` vector steps, ending an episode now and then (noise restarts)."""
    for t in range(steps):
        obs = rng.normal(size=(N, OBS)).astype(np.float32)
        out = agent.act(obs, explore=True)
        done = np.array([t % 5 == 4, False])
        agent.observe(
            Transitions(
                obs=obs,
                action=out.action,
                reward=rng.normal(size=(N, 1)).astype(np.float32),
                next_obs=obs,
                terminated=done,
                truncated=np.zeros(N, bool),
                reset_obs=obs,
                act_out=out,
            )
        )


@pytest.mark.parametrize(("algo", "params"), CASES, ids=[f"{a}-{p}" for a, p in CASES])
def test_a_reloaded_agent_explores_as_the_original_would(
    algo: str, params: dict[str, Any], tmp_path: Path
) -> None:
    # Past the warm-up (learning_starts) so that the policy and its exploration act.
    params = params | ({"learning_starts": 4} if "learning_starts" in _fields(algo) else {})
    original = _agent(algo, params)
    rng = np.random.default_rng(0)
    _drive(original, rng, 9)
    path = tmp_path / "agent.pt"
    ckpt.save(path, {"agent": original.state_dict()})  # through a real, weights_only file
    resumed = _agent(algo, params)
    resumed.load_state_dict(ckpt.load(path)["agent"])
    assert resumed.env_steps == original.env_steps
    noise = getattr(original, "noise", None)
    if noise is not None:  # the resumed run's envs start new episodes: so does the noise
        noise.reset(np.ones(N, bool))
    for _ in range(6):  # several draws: a noise sequence's next samples, a new episode's
        obs = rng.normal(size=(N, OBS)).astype(np.float32)
        want = original.act(obs, explore=True).action
        got = resumed.act(obs, explore=True).action
        np.testing.assert_array_equal(got, want)


def test_the_warm_up_stream_is_restored() -> None:
    original = _agent("ddpg", {"learning_starts": 1_000})
    rng = np.random.default_rng(1)
    _drive(original, rng, 3)  # uniform warm-up actions
    resumed = _agent("ddpg", {"learning_starts": 1_000})
    resumed.load_state_dict(original.state_dict())
    obs = rng.normal(size=(N, OBS)).astype(np.float32)
    np.testing.assert_array_equal(
        resumed.act(obs, explore=True).action, original.act(obs, explore=True).action
    )


def test_a_checkpoint_without_streams_still_loads() -> None:
    original = _agent("td3", {"noise": "ou"})
    state = original.state_dict()
    del state["streams"]  # a checkpoint written before the streams were saved
    fresh = _agent("td3", {"noise": "ou"})
    ckpt.check_matches("x.pt", {"members": {"m": state}}, {"m": fresh}, {"m": "td3"})


def _fields(algo: str) -> set[str]:
    return set(resolve_algo(algo).Params.__dataclass_fields__)


# -- whole runs ---------------------------------------------------------------------------------

RUN = """
[experiment]
name = "cont"
seed = 0
total_steps = {total}
eval_every = 100
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 2_000
batch_size = 16
updates_per_insert = 1.0
checkpoint = {checkpoint}

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
noise = "ou"
"""


def _run(tmp_path: Path, name: str, total: int, checkpoint: bool) -> Path:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(RUN.format(total=total, checkpoint=str(checkpoint).lower()))
    out = tmp_path / name
    assert cli.main(["run", str(cfg), "--out", str(out)]) == 0
    return next(out.glob("cont-*"))


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _updates(run_dir: Path) -> int:
    return int(_summary(run_dir)["members"]["target"]["updates"])


def test_an_extended_run_counts_on_as_an_uninterrupted_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _run(tmp_path, "whole", 400, checkpoint=True)
    part = _run(tmp_path, "part", 200, checkpoint=True)
    before = _updates(part)
    assert before > 0
    capsys.readouterr()
    assert cli.main(["resume", str(part), "--set", "experiment.total_steps=400"]) == 0
    said = capsys.readouterr().out
    assert "refilling" not in said  # the replay came back with the checkpoint
    summary = _summary(part)
    assert summary["env_steps"] == 400 and summary["total_steps"] == 400
    saved = tomllib.loads((part / "config.toml").read_text())
    assert saved["experiment"]["total_steps"] == 400
    # The trainer's count goes on from the checkpoint's (it restarted at 0), and ends where the
    # uninterrupted run's did.
    assert _updates(part) == _updates(whole) > before
    # So does the member's episode count: Pendulum's 200-step episodes end at the save, so
    # the resumed run has finished as many as the whole one (it restarted at 0: 1, not 2).
    assert _summary(part)["members"]["target"]["episodes"] == 2
    assert _summary(whole)["members"]["target"]["episodes"] == 2
    state = ckpt.load(part / "checkpoints" / "latest.pt")["members"]["target"]
    assert state["updates"] == _updates(whole)


def test_resume_without_the_replay_refills_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = _run(tmp_path, "part", 200, checkpoint=False)
    before = _updates(part)
    capsys.readouterr()
    assert cli.main(["resume", str(part), "--set", "experiment.total_steps=300"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "refilling" in ln]
    assert lines == [
        "target: resumed without its replay: refilling 50 transitions before learning "
        "(buffer.checkpoint = true keeps the replay in checkpoints)"
    ]
    # 100 new steps, the first 50 refill (counted from the resume, not from the run's step
    # 0, which the 200 steps before are long past): then one update per insert.
    after = _updates(part)
    assert before < after <= before + 51, (before, after)


def test_per_beta_goes_on_from_the_resumed_learners_updates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the replay in the checkpoint the table's own update count restarts at 0; PER's
    beta schedule goes on from the learner's updates instead of annealing again from its
    start value."""
    from wheeler2.buffer.sampler import PrioritizedSampler

    cfg = tmp_path / "per.toml"
    text = RUN.format(total=200, checkpoint="false")
    cfg.write_text(text.replace("checkpoint = false", "checkpoint = false\nprioritized = true"))
    out = tmp_path / "per"
    assert cli.main(["run", str(cfg), "--out", str(out)]) == 0
    part = next(out.glob("cont-*"))
    before = _updates(part)
    assert before > 0
    seen: list[int] = []
    beta = PrioritizedSampler.beta

    def spy(self: PrioritizedSampler, updates: int) -> float:
        seen.append(updates)
        return beta(self, updates)

    monkeypatch.setattr(PrioritizedSampler, "beta", spy)
    assert cli.main(["resume", str(part), "--set", "experiment.total_steps=300"]) == 0
    assert seen and seen[0] == before + 1, (before, seen[:3])
    assert seen[-1] == _updates(part)


def test_a_resumed_member_starts_new_episodes_not_the_first_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env copies restart at a resume; seeded with the member's seed alone they replayed
    the first session's initial states, episode for episode."""
    from wheeler2.runtime import member as member_mod

    first_obs: list[np.ndarray] = []
    plain = member_mod.Member.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        plain(self, *args, **kwargs)
        first_obs.append(np.array(self._obs, copy=True))

    monkeypatch.setattr(member_mod.Member, "__init__", spy)
    part = _run(tmp_path, "part", 200, checkpoint=False)
    assert cli.main(["resume", str(part), "--set", "experiment.total_steps=300"]) == 0
    assert len(first_obs) == 2
    assert not np.allclose(first_obs[0], first_obs[1]), first_obs


def test_resume_may_watch_the_run_differently() -> None:
    sets = ["experiment.heartbeat_s=120", "experiment.progress=false"]
    assert cli._resume_overrides(sets) == sets


@pytest.mark.parametrize(
    "key",
    ["team.target.params.lr_actor=0.1", "experiment.seed=3", "buffer.capacity=10"],
)
def test_resume_refuses_keys_that_change_the_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(RUN.format(total=100, checkpoint="false"))
    assert cli.main(["resume", str(run_dir), "--set", key]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --set {key.split('=')[0]}:"), err
