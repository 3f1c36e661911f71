"""Every kind of mistake a user can write is one ``error: FILE: ...`` line and exit 2, from
``check`` and from ``run`` (README, "Command line"): the config itself, the code files it names
(task, reward head, env, algorithm, other_policy) failing to import or raising, the device,
network sizes, and keys each in range but impossible together (wheeler2/config/relations.py).

Table-driven, in-process (``cli.main``) on a tiny Pendulum config: each case writes its files
next to the config and says what the one line must name (the table and key, and for a code
file its path as written and the line)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from wheeler2 import cli, registry
from wheeler2.config import load
from wheeler2.config.relations import RULES
from wheeler2.runtime.resources import NETWORK_BYTES_MAX

ROOT = Path(__file__).resolve().parents[1]

BASE = """
[experiment]
total_steps = 200
eval_every = 100
eval_episodes = 1
progress = false
{experiment}

[env]
id = "{env}"
{env_extra}

[buffer]
capacity = 1_000
batch_size = 16
{buffer}

{task}

[[team]]
name = "target"
algo = "{algo}"
role = "learner"
[team.params]
learning_starts = 50
hidden = [8]
{params}
"""

TASK = """\
import numpy as np
from wheeler2.task import Task, reward_head


class Heads(Task):
    @reward_head(weight=1.0)
    def upright(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return next_obs[:, 0] - 1.0

    @reward_head(weight=0.1)
    def effort(self, obs, action, next_obs, achieved_goal, desired_goal, info):
        return -np.square(action).sum(-1)
"""

ENV = """\
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MyEnv(gym.Env):
    def __init__(self, size=3):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.observation_space = spaces.Box(-1, 1, (size,), np.float32)
        self.action_space = spaces.Box(-1, 1, (1,), np.float32)
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(self.observation_space.shape, np.float32)
        return obs, -float(abs(action[0])), False, self.t >= 20, {}


gym.register("MyEnv-v0", entry_point=MyEnv)
"""

POLICY = """\
import numpy as np


def fn(name, obs):
    return np.zeros(5, np.float32)
"""


@dataclass
class Case:
    """One kind of mistake: the config's parts, the files beside it, and what the line names."""

    name: str
    wants: tuple[str, ...]  # substrings of the one error line, after "error: FILE: "
    files: dict[str, str] = field(default_factory=dict)
    env: str = "Pendulum-v1"
    env_extra: str = ""
    experiment: str = ""
    buffer: str = ""
    task: str = ""
    algo: str = "ddpg"
    params: str = ""
    sets: tuple[str, ...] = ()
    raw: str | None = None  # the whole config text instead of BASE
    excerpt: bool = False  # a TOML syntax error also quotes the line, with a caret under it


def _cuda_mistake() -> str:
    # On a CPU-only torch "cuda" itself is the mistake; with CUDA, a device it does not have.
    return "cuda" if torch.version.cuda is None or not torch.cuda.is_available() else "cuda:99"


CASES = [
    # -- the config file itself
    Case(
        "toml syntax",
        ("line 3, column", "TOML syntax error"),
        raw="[experiment]\nx = 1\ny = \n",
        excerpt=True,
    ),
    Case("unknown key", ("[buffer] capcity", "did you mean 'capacity'"), buffer="capcity = 5"),
    Case(
        "out of bounds",
        ("[buffer] batch_size", "expected an integer > 0"),
        sets=("buffer.batch_size=0",),
    ),
    Case(
        "seed past 2**32",
        ("[experiment] seed", "4_294_967_296"),
        sets=(f"experiment.seed={2**63}",),
    ),
    Case(
        "heartbeat under a report",
        ("[experiment] heartbeat_s", ">= 4"),
        experiment="heartbeat_s = 1.0",
    ),
    Case("bad --set", ("--set", "expected table.key=value"), sets=("buffer",)),
    # -- a task file
    Case(
        "task syntax error",
        ("[task] spec: ./mytask.py line 3: SyntaxError",),
        files={"mytask.py": "import numpy\n\ndef broken(:\n    pass\n"},
        task='[task]\nspec = "./mytask.py:Heads"',
    ),
    Case(
        "task missing import",
        ("[task] spec: ./mytask.py line 2: ModuleNotFoundError: No module named 'nosuch_w2'",),
        files={"mytask.py": "import numpy\nimport nosuch_w2\n"},
        task='[task]\nspec = "./mytask.py:Heads"',
    ),
    Case(
        "task raises at import",
        ("[task] spec: ./mytask.py line 2: ZeroDivisionError",),
        files={"mytask.py": "X = 1\nY = X / 0\n"},
        task='[task]\nspec = "./mytask.py:Heads"',
    ),
    Case(
        "task file missing",
        ("[task] spec", "no file", "nosuch.py"),
        task='[task]\nspec = "./nosuch.py:Heads"',
    ),
    Case(
        "task name missing",
        ("[task] spec", "has no 'Hedas'", "did you mean 'Heads'"),
        files={"mytask.py": TASK},
        task='[task]\nspec = "./mytask.py:Hedas"',
    ),
    Case(
        "task constructor raises",
        ("[task] spec: Heads() raised: RuntimeError: no goal file (at ./mytask.py line 6)",),
        files={
            "mytask.py": "from wheeler2.task import Task\n\n\nclass Heads(Task):\n"
            "    def __init__(self):\n        raise RuntimeError('no goal file')\n"
        },
        task='[task]\nspec = "./mytask.py:Heads"',
    ),
    # -- reward heads
    Case(
        "reward file syntax error",
        ("[[task.heads]] #1 reward: ./heads.py line 1: SyntaxError",),
        files={"heads.py": "def spin(obs action):\n    return 0\n"},
        task='[[task.heads]]\nname = "spin"\nreward = "./heads.py:spin"',
    ),
    Case(
        "reward head raises on the probe",
        (
            "[task] heads",
            "KeyError: 'k' (at ./heads.py line 2)",
        ),
        files={"heads.py": "def spin(obs, action, next_obs, ag, dg, info):\n    return {}['k']\n"},
        task='[[task.heads]]\nname = "spin"\nreward = "./heads.py:spin"',
    ),
    Case(
        "declared heads changed without a task",
        ("[task] heads", "there is no [task] spec"),
        sets=("task.heads.effort.weight=0.01",),
    ),
    Case(
        "declared head misnamed",
        ("[task] heads.efort", "did you mean 'effort'", "upright, effort"),
        files={"mytask.py": TASK},
        task='[task]\nspec = "./mytask.py:Heads"',
        sets=("task.heads.efort.weight=0.01",),
    ),
    # -- an env file
    Case(
        "env file syntax error",
        ("[env] id: ./myenv.py line 1: SyntaxError",),
        files={"myenv.py": "import gymnasium as\n"},
        env="./myenv.py:MyEnv-v0",
    ),
    Case(
        "env file missing import",
        ("[env] id: ./myenv.py line 1: ModuleNotFoundError",),
        files={"myenv.py": "import nosuchmodule_w2\n"},
        env="./myenv.py:MyEnv-v0",
    ),
    Case(
        "env name missing",
        ("[env] id", "unknown environment 'MyEnv-v9'", "MyEnv-v0"),
        files={"myenv.py": ENV},
        env="./myenv.py:MyEnv-v9",
    ),
    Case("env file missing", ("[env] id", "no file"), env="./nosuch.py:MyEnv-v0"),
    Case(
        "env constructor raises",
        ("[env] id: cannot build it: ValueError: size must be >= 1, got 0 (at ./myenv.py line 9)",),
        files={"myenv.py": ENV},
        env="./myenv.py:MyEnv",
        env_extra="kwargs = { size = 0 }",
    ),
    Case(
        "env kwargs wrong",
        ("[env] kwargs: cannot build it", "TypeError", "colour"),
        env_extra="kwargs = { colour = 1 }",
    ),
    # -- other_policy (pettingzoo kwargs): resolved when the file is read, no env built
    Case(
        "other_policy name missing",
        ("[env] kwargs.other_policy", "has no 'nofn'", "did you mean 'fn'"),
        files={"p.py": POLICY},
        env="pettingzoo:mpe2.simple_spread_v3",
        env_extra='kwargs = { continuous_actions = true, other_policy = "./p.py:nofn" }',
    ),
    Case(
        "other_policy file fails",
        ("[env] kwargs.other_policy: ./p.py line 1: SyntaxError",),
        files={"p.py": "def fn(name obs):\n    pass\n"},
        env="pettingzoo:mpe2.simple_spread_v3",
        env_extra='kwargs = { continuous_actions = true, other_policy = "./p.py:fn" }',
    ),
    # -- an algorithm file
    Case(
        "algorithm file syntax error",
        ("[[team]] #1 (target) algo: ./myalgo.py line 1: SyntaxError",),
        files={"myalgo.py": "class Mine(:\n    pass\n"},
        algo="./myalgo.py:Mine",
    ),
    # -- device and sizes
    Case(
        "device typo",
        ('[[team]] target params.device: "gpu" is not a torch device', '"cpu"'),
        params='device = "gpu"',
    ),
    Case(
        "device not here",
        ("[[team]] target params.device", '"cpu"'),
        params=f'device = "{_cuda_mistake()}"',
    ),
    Case(
        "network too large",
        ("[[team]] target params.hidden", "GiB", "lower hidden = [1000000000]"),
        sets=("team.target.params.hidden=[1000000000]",),
    ),
    Case(
        "team networks beyond RAM",
        ("[[team]] target params.hidden", "bytes", "of RAM available"),
        sets=("team.target.params.hidden=[30000, 30000]",),
    ),
]

# One case per error rule of wheeler2/config/relations.py: keys each in range, impossible
# together. The line names the rule's first key and mentions the others.
RELATION_CASES = {
    "stop needs a threshold": Case(
        "",
        ("[experiment] stop_at_threshold", "eval_threshold"),
        experiment="stop_at_threshold = true",
    ),
    "a run covers one vector step": Case(
        "",
        ("[experiment] total_steps", "num_envs = 8"),
        env_extra="num_envs = 8",
        sets=("experiment.total_steps=4",),
    ),
    "a batch fits the replay": Case(
        "", ("[buffer] batch_size", "capacity = 1000"), buffer="", sets=("buffer.batch_size=2000",)
    ),
    "own_share leaves shared rows": Case(
        "", ("[buffer] own_share", "batch_size = 16"), buffer="own_share = 0.99"
    ),
    "a learner's step share holds producers back": Case(
        "",
        ("[[team]] target step_share", "step_share = 0.5", 'backend = "serial"'),
        sets=("team.target.step_share=0.5",),
    ),
    "her needs a replay": Case(
        "",
        ("[buffer] her", "own rollouts"),
        algo="ppo",
        buffer="her = { k = 4 }",
        params="n_steps = 16\nbatch_size = 16",
    ),
    "agents need a multi-agent env": Case(
        "", ("[[team]] target agents", "Pendulum-v1"), sets=('team.target.agents=["a*"]',)
    ),
    "an opening range runs upward": Case(
        "",
        ("[play] random_opening_min", "3 is more than", "random_opening = 2"),
        sets=("play.random_opening=2", "play.random_opening_min=3"),
    ),
    "negamax_random needs negamax": Case(
        "",
        ("[play] negamax_random", "0.3 models", "negamax = true"),
        sets=("play.negamax_random=0.3",),
    ),
}
for _name, _case in RELATION_CASES.items():
    _case.name = f"relation: {_name}"
CASES += list(RELATION_CASES.values())


def _text(case: Case) -> str:
    if case.raw is not None:
        return case.raw
    text = BASE.format(
        experiment=case.experiment,
        env=case.env,
        env_extra=case.env_extra,
        buffer=case.buffer,
        task=case.task,
        algo=case.algo,
        params=case.params,
    )
    if case.algo == "ppo":
        text = text.replace("learning_starts = 50\n", "")
    return text


def _write(tmp_path: Path, case: Case) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).write_text(textwrap.dedent(content))
    path = folder / "exp.toml"
    path.write_text(_text(case))
    return path


def _one_error_line(err: str, path: Path, excerpt: bool = False) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    if excerpt:  # the quoted line and its caret, indented under the error line
        assert len(lines) == 3 and all(line.startswith("    ") for line in lines[1:]), err
        lines = lines[:1]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {path}: "), err
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_kind_of_mistake_is_one_line_from_check_and_run(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, case)
    monkeypatch.chdir(tmp_path)  # not the config's folder: its code paths are its own
    sets = [a for s in case.sets for a in ("--set", s)]
    for command in ("check", "run"):
        out = ["--out", str(tmp_path / "runs")] if command == "run" else []
        code = cli.main([command, str(path), *sets, *out])
        err = capsys.readouterr().err
        assert code == 2, (command, err)
        line = _one_error_line(err, path, case.excerpt)
        for want in case.wants:
            assert want in line, (command, want, line)
    assert not (tmp_path / "runs").exists(), "a refused run writes no run directory"


def test_every_error_rule_of_the_relations_table_has_a_case() -> None:
    errors = {r.name for r in RULES if r.level == "error"}
    assert errors == set(RELATION_CASES), "each relation rule needs a row in RELATION_CASES"
    for rule in RULES:
        assert len(rule.keys) >= 2, rule  # a relation reads two keys or more


def test_warning_rules_let_the_run_go_with_one_warning_line(tmp_path: Path, capsys) -> None:
    case = Case("warm-up", (), sets=("team.target.params.learning_starts=500",))
    path = _write(tmp_path, case)
    assert cli.main(["check", str(path), "--set", case.sets[0]]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"warning: {path}: [[team]] target params.learning_starts"
    ), err
    assert "total_steps = 200" in err[0]


def test_a_ray_placement_on_another_backend_is_one_warning_line(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, Case("placement", ()))
    path.write_text(path.read_text().replace('role = "learner"', 'role = "learner"\nnum_gpus = 1'))
    assert cli.main(["check", str(path), "--set", "experiment.backend=local"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {path}: [[team]] target num_gpus"), err
    assert 'backend = "local" places nothing' in err[0] and 'device = "cpu"' in err[0], err
    assert cli.main(["check", str(path), "--set", "experiment.backend=ray"]) == 0
    assert "warning" not in capsys.readouterr().err


# -- code by path that works ---------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["./myenv.py:MyEnv-v0", "./myenv.py:MyEnv"])
def test_an_env_by_path_runs_registered_or_as_a_class(
    env_id: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    case = Case("env", (), files={"myenv.py": ENV}, env=env_id, env_extra="kwargs = { size = 4 }")
    path = _write(tmp_path, case)
    monkeypatch.chdir(tmp_path)
    config = load(path)
    assert Path(config.env.id.partition(":")[0]).is_absolute(), config.env.id
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    runs = tmp_path / "runs"
    sets = ["--set", "experiment.total_steps=60", "--set", "experiment.eval_every=60"]
    assert cli.main(["run", str(path), *sets, "--out", str(runs)]) == 0, capsys.readouterr().err
    (run,) = runs.iterdir()
    assert "myenv.py" in (run / "config.toml").read_text()


def test_other_policy_by_path_is_resolved_against_the_config(tmp_path: Path, monkeypatch) -> None:
    case = Case(
        "pz",
        (),
        files={"p.py": POLICY},
        env="pettingzoo:mpe2.simple_spread_v3",
        env_extra='kwargs = { continuous_actions = true, other_policy = "./p.py:fn" }',
    )
    path = _write(tmp_path, case)
    monkeypatch.chdir(tmp_path)
    config = load(path)
    spec = config.env.kwargs["other_policy"]
    assert spec == f"{(path.parent / 'p.py').resolve()}:fn"
    from wheeler2.envs.pettingzoo import _resolve_policy

    policy = _resolve_policy(spec)
    assert policy is not None and policy("agent_1", None).shape == (5,)


def test_a_declared_heads_weight_is_overridden_by_name(tmp_path: Path) -> None:
    case = Case("heads", (), files={"mytask.py": TASK}, task='[task]\nspec = "./mytask.py:Heads"')
    path = _write(tmp_path, case)
    config = load(path, ["task.heads.effort.weight=0.01"])
    assert [(h.name, h.weight) for h in config.task.heads] == [("upright", 1.0), ("effort", 0.01)]
    from wheeler2.runtime.heads import make_heads, make_task
    from wheeler2.runtime.parts import make_env

    env = make_env(config, 1, 0)
    try:
        heads = make_heads(config, env, make_task(config))
    finally:
        env.close()
    assert heads.names == ("upright", "effort") and tuple(heads.weights) == (1.0, 0.01)


def test_a_code_error_names_the_users_frame_not_the_engines(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("def f():\n    return {}['x']\n\nf()\n")
    with pytest.raises(registry.CodeError) as err:
        registry.resolve_object(f"{tmp_path / 'deep.py'}:f")
    assert (err.value.line, Path(str(err.value.path)).name) == (2, "deep.py")
    assert err.value.text(tmp_path) == "./deep.py line 2: KeyError: 'x'"


def test_the_size_cap_is_documented() -> None:
    assert NETWORK_BYTES_MAX == 4 * 2**30
    assert "4 GiB" in (ROOT / "docs" / "config.md").read_text()


# -- issue 39 item 7: the small ones ----------------------------------------------------------


@pytest.mark.parametrize("count", ["0", "-3", "ten"])
def test_eval_refuses_an_episode_count_under_one(tmp_path: Path, count: str, capsys) -> None:
    """0 episodes used to mean the file's default, silently."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["eval", str(tmp_path), "--episodes", count])
    assert exited.value.code == 2
    assert "--episodes: expected an integer >= 1" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path: Path, capsys) -> None:
    """Under a file (or read-only, or gone): the key named, exit 2, no run directory."""
    path = _write(tmp_path, Case("out", ()))
    (tmp_path / "afile").write_text("")
    assert cli.main(["run", str(path), "--out", str(tmp_path / "afile" / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: [experiment] out: cannot make")


def test_a_closing_eval_at_the_final_step_replaces_the_last_one(tmp_path: Path) -> None:
    """A learner whose budget is spent evaluates, takes the updates it still owes, and
    evaluates again at the same step: the run keeps one eval there (summary and metrics.csv)."""
    from wheeler2.runtime.evaluation import EvalResult
    from wheeler2.runtime.experiment import Recorder, RunState

    path = _write(tmp_path, Case("rec", ()))
    config = load(path)
    recorder = Recorder(config, tmp_path / "run", RunState())
    for steps, ret in ((100, -900.0), (200, -700.0), (200, -500.0)):
        recorder.record_eval(steps, EvalResult(ret, 0.0, None, [ret]))
    summary = recorder.finish({})
    assert [(e["env_steps"], e["return"]) for e in summary["eval"]] == [
        (100, -900.0),
        (200, -500.0),
    ]
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.reader(f) if r[2:4] == ["eval", "return"]]
    assert [(r[1], float(r[4])) for r in rows] == [("100", -900.0), ("200", -500.0)]


@pytest.mark.parametrize("closing, expected", [(-600.0, None), (-400.0, 200)])
def test_steps_to_threshold_follows_the_closing_eval_that_replaces_the_last_one(
    tmp_path: Path, closing: float, expected: int | None
) -> None:
    """The last regular eval passed the threshold and the closing eval at the same step did
    (or did not): summary.json's steps_to_threshold agrees with its eval list."""
    from wheeler2.runtime.evaluation import EvalResult
    from wheeler2.runtime.experiment import Recorder, RunState

    path = _write(tmp_path, Case("rec", ()))
    config = load(path, ["experiment.eval_threshold=-550"])
    recorder = Recorder(config, tmp_path / "run", RunState())
    for steps, ret in ((100, -900.0), (200, -500.0), (200, closing)):
        recorder.record_eval(steps, EvalResult(ret, 0.0, None, [ret]))
    assert recorder.finish({})["steps_to_threshold"] == expected


def test_the_first_plain_report_shows_no_zero_rate(tmp_path: Path, monkeypatch) -> None:
    from wheeler2 import log as runlog

    clock = iter(np.arange(0.0, 1000.0, 1.0))
    monkeypatch.setattr(runlog.time, "perf_counter", lambda: float(next(clock)))
    log = runlog.RunLog(tmp_path, total_steps=1000, progress=False, tensorboard=False)
    try:
        first = log._plain_line(100, {"target": {"env_steps": 100}}, None)
        assert "(0/s)" not in first and "target: 100" in first, first
        log.progress(100, {"target": {"env_steps": 100}})
        # Calls between two reports see the same steps: they are no measurement of 0/s.
        for _ in range(5):
            log.progress(100, {"target": {"env_steps": 100}})
        log.progress(700, {"target": {"env_steps": 700}})
        rate = log.rate("target")
        assert rate is not None and rate > 50, rate
    finally:
        log.close()


def test_the_last_live_frame_shows_the_last_figures(tmp_path: Path) -> None:
    from wheeler2 import log as runlog

    log = runlog.RunLog(tmp_path, total_steps=100, progress=False, tensorboard=False)
    drawn: list[int] = []
    log._live_enabled = True
    log._live = types.SimpleNamespace(stop=lambda: None)
    log._show_live = lambda total, members, last: drawn.append(total)  # type: ignore[method-assign]
    log.progress(10, {"target": {"env_steps": 10}})
    log.progress(100, {"target": {"env_steps": 100}})  # throttled: within the refresh interval
    log.close()
    assert drawn[-1] == 100, drawn


def test_export_names_the_real_action_shape() -> None:
    from gymnasium import spaces

    box = types.SimpleNamespace(discrete=False, action_space=spaces.Box(-2, 2, (1,), np.float32))
    assert cli._action_kind(box) == "float32 [B, 1] in the env's Box [-2, 2]"
    disc = types.SimpleNamespace(discrete=True, action_space=spaces.Discrete(3))
    assert cli._action_kind(disc) == "int64 [B] in 0..2"
    assert "act_dim" not in cli._action_kind(box)


def test_the_video_renderer_opens_no_display(tmp_path: Path, monkeypatch, capfd) -> None:
    from wheeler2.video import make_render_env

    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    env = make_render_env(load(_write(tmp_path, Case("video", ()))))
    try:
        env.reset(seed=0)
        frame = env.render()
    finally:
        env.close()
    assert frame.ndim == 3 and frame.std() > 0  # real frames, drawn without a window
    assert os.environ["SDL_VIDEODRIVER"] == "dummy"
    assert "XDG_RUNTIME_DIR" not in capfd.readouterr().err


def test_plain_pytest_imports_tests_modules(tmp_path: Path) -> None:
    """``pytest`` run directly (not ``python -m pytest``), from another folder, imports the
    ``tests.*`` helpers (pyproject's pythonpath)."""
    pytest_bin = Path(sys.executable).with_name("pytest")
    res = subprocess.run(
        [
            str(pytest_bin),
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_agents_meet.py"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "No module named 'tests'" not in res.stdout + res.stderr
