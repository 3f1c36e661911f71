"""Curriculum stages ([curriculum], wheeler2/runtime/curriculum.py): the coordinator advances the
stage one step per lead eval at the first eval over the bar; every member's training and eval
env copies get ``set_curriculum_stage`` (at build and on each change, through the budget block
or the Ray board); the stage is logged, checkpointed and resumed; ``check`` refuses a curriculum
the run could never follow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wheeler2 import checkpoint as ckpt
from wheeler2 import cli, registry
from wheeler2.config import ConfigError, load
from wheeler2.log import RunLog
from wheeler2.runtime import evaluate_run, evaluation, run_experiment
from wheeler2.runtime.coordinator import prepare
from wheeler2.runtime.curriculum import next_stage
from wheeler2.runtime.evaluation import EvalResult
from wheeler2.runtime.serial import SerialTransport

RUN = """
[experiment]
name = "staged"
seed = 0
total_steps = {total}
eval_every = 100
eval_episodes = 2
backend = "{backend}"
progress = false
out = "{out}"

[env]
id = "{env}"
num_envs = 2
kwargs = {kwargs}

[curriculum]
stages = {stages}
advance_at = {advance_at}

[buffer]
capacity = 2_000
batch_size = 16

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
{explorer}
"""

EXPLORER = """
[[team]]
name = "explorer"
algo = "ddpg"
role = "explorer"
[team.params]
learning_starts = 50
hidden = [8]
"""

STAGED = "wheeler2/StagedReach-v0"


def write(tmp_path: Path, **fields: Any) -> Path:
    values: dict[str, Any] = {
        "total": 300,
        "backend": "serial",
        "out": (tmp_path / "runs").as_posix(),
        "env": STAGED,
        "kwargs": "{ stages = 3 }",
        "stages": 3,
        "advance_at": "[-1e9, -1e9]",  # every eval is over both bars
        "explorer": "",
    }
    values.update(fields)
    path = tmp_path / "staged.toml"
    path.write_text(RUN.format(**values))
    return path


def result(ret: float, **matches: float) -> EvalResult:
    return EvalResult(ret, 0.0, None, [ret], matches=matches or None)


def stages_of(env: Any) -> list[int]:
    return [copy.unwrapped.stage for copy in env.envs]


# -- the decision --------------------------------------------------------------------------------


def test_the_stage_moves_at_the_first_eval_over_its_bar_and_one_stage_per_eval(
    tmp_path: Path,
) -> None:
    config = load(write(tmp_path, advance_at="[-100.0, -50.0]"))
    cur = config.curriculum
    assert cur is not None
    stage, seen = 0, []
    for ret in (-150.0, -100.5, -40.0, -40.0, -40.0, 10.0):
        stage = next_stage(cur, stage, result(ret))
        seen.append(stage)
    # -100.5 misses the first bar; -40 passes both, yet moves one stage; the last stage stays.
    assert seen == [0, 0, 1, 2, 2, 2]
    assert next_stage(cur, 0, result(-100.0)) == 1  # the bar itself is reached
    # An eval that ran at the stage before (in flight while the stage moved) moves nothing.
    assert next_stage(cur, 1, result(10.0), ran_at=0) == 1
    assert next_stage(cur, 1, result(10.0), ran_at=1) == 2


def test_a_head_to_head_metric_reads_the_eval_matches(tmp_path: Path) -> None:
    config = load(
        write(tmp_path, advance_at="[0.6, 0.8]"),
        ['curriculum.metric="vs_random/win"', 'play.eval_vs=["random"]'],
    )
    cur = config.curriculum
    assert cur is not None
    assert next_stage(cur, 0, result(-5.0, **{"vs_random/win": 0.7})) == 1
    assert next_stage(cur, 1, result(9.0, **{"vs_random/win": 0.7})) == 1
    assert next_stage(cur, 1, result(-5.0, **{"vs_random/win": float("nan")})) == 1
    assert next_stage(cur, 1, result(-5.0)) == 1  # not reported at this eval: no move


# -- a serial run: decided, logged, summarized, checkpointed -----------------------------------


def test_a_serial_run_advances_one_stage_per_eval_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = run_experiment(load(write(tmp_path)))
    summary = json.loads((run_dir / "summary.json").read_text())
    # Both bars are met at every eval, yet the first eval moves it to 1 and the second to 2.
    assert summary["curriculum"] == {
        "stage": 2,
        "stages": 3,
        "metric": "eval_return",
        "advanced_at": [100, 200],
    }
    assert [(e["env_steps"], e["stage"]) for e in summary["eval"]] == [(100, 0), (200, 1), (300, 2)]
    rows = [
        line.split(",")
        for line in (run_dir / "metrics.csv").read_text().splitlines()
        if ",curriculum_stage," in line
    ]
    assert [(int(r[1]), r[2], float(r[4])) for r in rows] == [
        (100, "eval", 1.0),
        (200, "eval", 2.0),
        (300, "eval", 2.0),
    ]
    run = ckpt.load(run_dir / "checkpoints" / "latest.pt")["run"]
    assert run["curriculum"] == {"stage": 2, "advanced_at": [100, 200]}
    # `wheeler2 eval` runs the checkpoint's stage, as the run's own evals did.
    seen = []
    original = evaluation.evaluate

    def spy(agent: Any, env: Any, seed: int, heads: Any = None) -> EvalResult:
        seen.append(stages_of(env))
        return original(agent, env, seed, heads)

    monkeypatch.setattr(evaluation, "evaluate", spy)
    evaluate_run(run_dir, which="latest")
    assert seen == [[2, 2]]


def test_the_live_line_shows_the_stage(tmp_path: Path) -> None:
    log = RunLog(tmp_path, total_steps=100, progress=False, tensorboard=False)
    try:
        log.curriculum = "stage 1/2"
        assert "| stage 1/2 |" in log._plain_line(10, {}, -3.0)
        assert "stage 1/2" in str(log._table(10, {}, -3.0).renderables[0])
    finally:
        log.close()


# -- the members' envs -------------------------------------------------------------------------


def test_training_and_eval_copies_start_at_the_run_stage_and_follow_it(tmp_path: Path) -> None:
    config = load(write(tmp_path))
    prepared = prepare(config, tmp_path, resume=False)
    payload = {"run": {"curriculum": {"stage": 2}}}  # a resumed run's
    transport = SerialTransport(config, prepared.setup, payload)
    try:
        transport.start(tmp_path, 100)
        loop = transport.loops["target"]
        assert stages_of(loop.member.env) == [2, 2] and stages_of(loop.eval_env) == [2, 2]
        # Applied before the first reset: the first episodes already have stage 2's target.
        assert [abs(c.unwrapped._target) for c in loop.member.env.envs] == [1.0, 1.0]
        transport.set_stage(1)
        transport.receive(0.0)  # one round: the member's next step
        assert stages_of(loop.member.env) == [1, 1] and stages_of(loop.eval_env) == [1, 1]
    finally:
        transport.close()


def test_the_async_adapter_sets_the_stage_in_each_copy_process(tmp_path: Path) -> None:
    config = load(write(tmp_path), ['env.vector="async"'])
    env = registry.make_env(config.env, 2, 0)
    try:
        env.set_curriculum_stage(1)
        first = env.reset(seed=0)
        assert np.allclose(np.abs(first.obs[:, 1]), 2 / 3)  # stage 1 of 3: the target at 2/3
    finally:
        env.close()


def test_a_resumed_run_continues_at_its_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[tuple[list[int], list[int], float]] = []
    start = SerialTransport.start

    def spy(self: SerialTransport, run_dir: Path, next_eval: int) -> None:
        start(self, run_dir, next_eval)
        loop = self.loops["target"]
        target = abs(loop.member.env.envs[0].unwrapped._target)
        built.append((stages_of(loop.member.env), stages_of(loop.eval_env), target))

    monkeypatch.setattr(SerialTransport, "start", spy)
    path = write(tmp_path, total=150, stages=2, kwargs="{ stages = 2 }", advance_at="[-1e9]")
    run_dir = run_experiment(load(path))
    assert json.loads((run_dir / "summary.json").read_text())["curriculum"]["stage"] == 1
    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace("total_steps = 150", "total_steps = 300"))
    capsys.readouterr()
    assert cli.main(["resume", str(run_dir)]) == 0, capsys.readouterr()
    assert built == [([0, 0], [0, 0], 0.5), ([1, 1], [1, 1], 1.0)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["curriculum"]["stage"] == 1 and summary["curriculum"]["advanced_at"] == [100]
    assert [(e["env_steps"], e["stage"]) for e in summary["eval"]] == [(100, 0), (150, 1)] + [
        (200, 1),
        (300, 1),
    ]


def test_a_local_run_delivers_the_stage_to_a_member_that_is_not_the_lead(
    tmp_path: Path,
) -> None:
    record = tmp_path / "stages.txt"
    path = write(
        tmp_path,
        total=800,
        backend="local",
        env="w2_staged:Recorded-v0",
        kwargs=f'{{ stages = 3, record = "{record.as_posix()}" }}',
        explorer=EXPLORER,
    )
    run_dir = run_experiment(load(path))
    pids = json.loads((run_dir / "members.json").read_text())
    seen: dict[str, list[int]] = {"target": [], "explorer": []}
    names = {str(pid): name for name, pid in pids.items()}
    for line in record.read_text().splitlines():
        pid, stage = line.split()
        if pid in names:
            seen[names[pid]].append(int(stage))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["curriculum"]["stage"] == 2
    explorer = seen["explorer"]
    assert explorer[0] == 0 and explorer[-1] == 2 and explorer == sorted(explorer), explorer


# -- what check refuses --------------------------------------------------------------------------


def check(path: Path, capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[int, str]:
    args = ["check", str(path)]
    for expr in sets:
        args += ["--set", expr]
    code = cli.main(args)
    return code, capsys.readouterr().err


def test_check_refuses_a_curriculum_on_an_env_without_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, env="Pendulum-v1", kwargs="{}")
    code, err = check(path, capsys)
    assert code == 2
    assert err.startswith(f"error: {path}: [curriculum] stages: 3 stages declared, but ")
    assert "'Pendulum-v1' has no set_curriculum_stage(k)" in err and err.count("\n") == 1


def test_check_refuses_more_stages_than_the_env_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(write(tmp_path, kwargs="{ stages = 2 }"), capsys)
    assert code == 2 and "[curriculum] stages: " in err
    assert "refused set_curriculum_stage(2): ValueError: stage 2 is not one" in err


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            ['curriculum.metric="vs_random/win"'],
            "this config runs no head-to-head eval, got 'vs_random/win'",
        ),
        (
            ['curriculum.metric="vs_pool/win"', 'play.eval_vs=["random"]'],
            "'vs_pool/win' needs 'pool' in [play] eval_vs",
        ),
        (
            ['curriculum.metric="vs_random/wins"', 'play.eval_vs=["random"]'],
            "or one of 'vs_random/win' (draw, loss, win_first, ... in place of win), got",
        ),
        (['curriculum.metric="elo"', 'play.eval_vs=["pool"]'], 'add "random" to [play]'),
        # Listed in eval_vs, yet never played: the run would never leave stage 0.
        (
            ['curriculum.metric="vs_tables/win"', 'play.eval_vs=["tables"]'],
            "only with [play] joint = true, so without it no eval reports vs_tables",
        ),
        (
            ['curriculum.metric="vs_pool/win"', 'play.eval_vs=["pool"]'],
            "opponents = 'latest' (and no random_share) keeps no snapshot pool",
        ),
        (
            ['curriculum.metric="vs_random/win"', 'play.eval_vs=["random"]'],
            "only turn-based games report; 'wheeler2/StagedReach-v0' is not one",
        ),
    ],
)
def test_check_refuses_a_metric_no_eval_of_the_config_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], expected: str
) -> None:
    path = write(tmp_path)
    code, err = check(path, capsys, *sets)
    assert code == 2 and err.startswith(f"error: {path}: [curriculum] metric: "), err
    assert expected in err and err.count("\n") == 1


def test_the_shipped_example_checks(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[1] / "cfg" / "curriculum_reach.toml"
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr()


def test_a_metric_error_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    from wheeler2.runtime.team import prepare_team

    config = load(write(tmp_path), ['curriculum.metric="elo"'])
    with pytest.raises(ConfigError) as info:
        prepare_team(config, {})
    assert (info.value.table, info.value.key) == ("[curriculum]", "metric")


def test_the_ray_board_hands_the_stage_out_with_its_claim_replies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray_member = pytest.importorskip("wheeler2.runtime.ray_member", reason="needs ray")
    from types import SimpleNamespace

    class Handle:  # an actor handle whose calls run at once (tests/test_ray_budget.py)
        def __init__(self, obj: Any) -> None:
            self.obj = obj

        def __getattr__(self, name: str) -> SimpleNamespace:
            return SimpleNamespace(remote=getattr(self.obj, name))

    monkeypatch.setattr(ray_member.ray, "get", lambda ref: ref)
    board = Handle(ray_member.Board.__ray_actor_class__(100, {"a": 0}, 1))
    budget = ray_member.BoardBudget(board, "a", 4, 0, stage=1)
    assert budget.stage() == 1  # a resumed run's, before any reply
    board.open.remote()
    board.set_stage.remote(2)
    assert budget.stage() == 1  # no round trip of its own: the next claim brings it
    assert budget.claim(4)
    assert budget.stage() == 2
