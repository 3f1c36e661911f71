"""The config dataclasses as their own schema: bounds in field metadata, defaults written once,
the real algorithms' Params bounds, and the env-probing checks of ``wheeler2 check``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from wheeler2 import cli, config
from wheeler2.buffer import HerConfig, ReplayConfig, ReplayError
from wheeler2.config import ConfigError, load
from wheeler2.config.model import CurriculumConfig
from wheeler2.config.reader import Reader
from wheeler2.schema import (
    Mismatch,
    bounded,
    checker,
    choice,
    field_checker,
    setting,
    sizes,
    spec_of,
)

REAL = """
[experiment]
name = "t"
total_steps = 1_000
eval_every = 100

[env]
id = "Pendulum-v1"

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
"""

PPO = REAL.replace('algo = "ddpg"', 'algo = "ppo"')

PARAMS = "[[team]] #1 (target).params"


def error_of(path: Path, overrides: list[str] = ()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(path, overrides)
    return info.value


# -- bounds the runtime relies on, each refused with file, table, key and value ----------------


@pytest.mark.parametrize(
    ("text", "expr", "table", "key", "message"),
    [
        # The real DDPG's Params, not a test fake (issue 19): the bound lives in agents/ddpg.py.
        (REAL, "team.0.params.gamma=1.5", PARAMS, "gamma", "expected a number in [0, 1], got 1.5"),
        (REAL, "team.0.params.gamma=-0.1", PARAMS, "gamma", "in [0, 1], got -0.1"),
        (REAL, "team.0.params.gamma=nan", PARAMS, "gamma", "a finite number in [0, 1], got nan"),
        (REAL, "team.0.params.tau=0", PARAMS, "tau", "expected a number in (0, 1], got 0"),
        (REAL, "team.0.params.tau=1.5", PARAMS, "tau", "in (0, 1], got 1.5"),
        (REAL, "team.0.params.noise_std=-0.1", PARAMS, "noise_std", "a number >= 0, got -0.1"),
        (
            REAL,
            "team.0.params.lr_actor=inf",
            PARAMS,
            "lr_actor",
            "a finite number in (0, 1], got inf",
        ),
        (REAL, "team.0.params.lr_critic=0", PARAMS, "lr_critic", "a number in (0, 1], got 0"),
        (REAL, "team.0.params.hidden=[]", PARAMS, "hidden", "non-empty list of integers > 0"),
        (REAL, "team.0.params.hidden=[64, 0]", PARAMS, "hidden", "integers > 0, got [64, 0]"),
        (REAL, "team.0.params.hidden=[64.5]", PARAMS, "hidden", "integers > 0, got [64.5]"),
        (REAL, 'team.0.params.noise="brown"', PARAMS, "noise", "one of 'gaussian', 'pink'"),
        (PPO, "team.0.params.n_steps=0", PARAMS, "n_steps", "expected an integer >= 1, got 0"),
        (PPO, "team.0.params.batch_size=0", PARAMS, "batch_size", "an integer >= 1, got 0"),
        (PPO, "team.0.params.lr=-inf", PARAMS, "lr", "a finite number in (0, 1], got -inf"),
        (PPO, "team.0.params.gae_lambda=2", PARAMS, "gae_lambda", "in [0, 1], got 2"),
        (REAL, "buffer.alpha=1.5", "[buffer]", "alpha", "expected a number in [0, 1], got 1.5"),
        (REAL, "buffer.beta=-1", "[buffer]", "beta", "expected a number in [0, 1], got -1"),
        (REAL, "buffer.updates_per_insert=inf", "[buffer]", "updates_per_insert", "finite"),
        (REAL, "experiment.eval_every=0", "[experiment]", "eval_every", "integer > 0, got 0"),
        (REAL, "experiment.total_steps=0", "[experiment]", "total_steps", "integer > 0, got 0"),
        (REAL, "experiment.heartbeat_s=0", "[experiment]", "heartbeat_s", "a number >= 4, got 0"),
        (REAL, "experiment.eval_threshold=nan", "[experiment]", "eval_threshold", "finite"),
        (REAL, "task.heads.0.weight=inf", "[[task.heads]] #1", "weight", "a finite number"),
    ],
)
def test_bound_is_refused_naming_file_table_and_key(write_config, text, expr, table, key, message):
    if expr.startswith("task."):
        text += '\n[[task.heads]]\nname = "env"\n'
    path = write_config(text)
    err = error_of(path, [expr])
    assert (err.file, err.table, err.key) == (str(path), table, key)
    assert message in err.message
    assert str(err).startswith(f"{path}: {table} {key}: expected ")


@pytest.mark.parametrize("name", ["../up", "a/b", "/abs/path", "a\\b", "..", " "])
def test_experiment_name_must_be_a_plain_name(write_config, name):
    path = write_config(REAL.replace('name = "t"', f"name = {name!r}".replace("'", '"'), 1))
    if "\\" in name:
        path.write_text(REAL.replace('name = "t"', "name = 'a\\b'", 1))
    err = error_of(path)
    assert (err.table, err.key) == ("[experiment]", "name")
    assert "a plain name without '/', '\\' or '..'" in err.message


def test_name_taken_from_the_file_name_is_checked_too(write_config):
    path = write_config(REAL.replace('name = "t"\n', "", 1), "..sneaky.toml")
    err = error_of(path)
    assert (err.table, err.key) == ("[experiment]", "name")
    assert err.message.endswith('got "..sneaky"')
    assert load(write_config(REAL.replace('name = "t"\n', "", 1), "fine.toml")).experiment.name == (
        "fine"
    )


def test_empty_experiment_name_is_refused(write_config):
    err = error_of(write_config(REAL.replace('name = "t"', 'name = ""', 1)))
    assert (err.table, err.key, err.message) == (
        "[experiment]",
        "name",
        'expected a non-empty string, got ""',
    )


def test_plain_names_pass(write_config):
    cfg = load(write_config(REAL.replace('name = "t"', 'name = "run-1.b_2"', 1)))
    assert cfg.experiment.name == "run-1.b_2"


def test_real_params_keep_did_you_mean(write_config):
    err = error_of(write_config(REAL), ["team.0.params.lr_actr=0.1"])
    assert (err.table, err.key) == (PARAMS, "lr_actr")
    assert "did you mean 'lr_actor'?" in err.message


def _algorithms() -> list:
    """Every module of the agents package with a Params dataclass: a new algorithm file is
    checked without being listed here."""
    import importlib
    import pkgutil

    import wheeler2.agents as agents

    found = []
    for info in pkgutil.iter_modules(agents.__path__):
        module = importlib.import_module(f"agents.{info.name}")
        if dataclasses.is_dataclass(getattr(module, "Params", None)):
            found.append(module)
    assert {"ddpg", "ppo", "a2c", "dqn"} <= {m.__name__.split(".")[1] for m in found}
    return found


def test_every_shipped_algorithm_default_is_within_its_own_bounds():
    for module in _algorithms():
        params = module.Params()
        for f in dataclasses.fields(params):
            field_checker(module.Params, f)(getattr(params, f.name))  # Mismatch if out of bounds


# -- defaults are written once: in the dataclass ----------------------------------------------


def test_reader_takes_defaults_and_keys_from_the_dataclass(write_config, monkeypatch):
    (capacity,) = [f for f in dataclasses.fields(config.BufferConfig) if f.name == "capacity"]
    path = write_config(REAL)
    assert load(path).buffer.capacity == capacity.default == 200_000
    # Changing the default in the dataclass alone changes what a file without the key gets.
    monkeypatch.setattr(capacity, "default", 1234)
    assert load(path).buffer.capacity == 1234


def test_generic_reader_walks_any_dataclass():
    @dataclasses.dataclass(frozen=True)
    class Table:
        need: int = setting(ge=2)
        rate: float = bounded(0.5, gt=0, le=1)
        mode: str = choice("a", ("a", "b"))
        widths: list[int] = sizes(8)

    reader = Reader("f.toml")
    assert reader.read(Table, "[t]", {"need": 2}) == {
        "need": 2,
        "rate": 0.5,
        "mode": "a",
        "widths": [8],
    }
    with pytest.raises(ConfigError) as info:
        reader.read(Table, "[t]", {})
    assert str(info.value) == "f.toml: [t] need: missing required key (an integer >= 2)"
    with pytest.raises(ConfigError) as info:
        reader.read(Table, "[t]", {"need": 2, "mod": "b"})
    assert info.value.message == "unknown key; did you mean 'mode'?"
    with pytest.raises(ConfigError) as info:
        reader.read(Table, "[t]", {"need": 2, "rate": 0})
    assert info.value.message == "expected a number in (0, 1], got 0"


def test_choice_default_must_be_a_choice():
    with pytest.raises(ValueError, match="not one of"):
        choice("c", ("a", "b"))


def test_checker_refuses_nan_and_inf_unless_the_field_allows_inf():
    with pytest.raises(Mismatch):
        checker(float)(float("inf"))
    with pytest.raises(Mismatch):
        checker(float)(float("nan"))
    loose = spec_of(setting(finite=False))
    assert checker(float, loose)(float("inf")) == float("inf")


# -- one HER config, one buffer config --------------------------------------------------------


def test_one_her_config_and_replay_shares_the_buffer_defaults():
    assert config.HerConfig is HerConfig
    replay = {f.name: f for f in dataclasses.fields(ReplayConfig)}
    for f in dataclasses.fields(config.BufferConfig):
        assert replay[f.name].default == f.default, f.name
    assert ReplayConfig().capacity == config.BufferConfig().capacity == 200_000
    assert ReplayConfig().prioritized is config.BufferConfig().prioritized is False


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 1.5}, "alpha: expected a number in [0, 1], got 1.5"),
        ({"capacity": 0}, "capacity: expected an integer > 0, got 0"),
        ({"eps": 0.0}, "eps: expected a number > 0, got 0.0"),
    ],
)
def test_replay_config_refuses_out_of_bounds(kwargs, message):
    with pytest.raises(ReplayError, match="invalid replay config") as info:
        ReplayConfig(**kwargs)
    assert message in str(info.value)


def test_replay_config_wants_a_her_config_not_a_table():
    with pytest.raises(ReplayError, match="her: expected a HerConfig, got a table"):
        ReplayConfig(her={"strategy": "future", "k": 4})
    assert ReplayConfig(her=HerConfig("final", 2)).her.fraction == pytest.approx(2 / 3)


def test_replay_config_still_lets_code_disable_the_gate():
    assert ReplayConfig(updates_per_insert=0).updates_per_insert == 0


def test_every_buffer_key_reaches_the_replay(tmp_path: Path):
    """replay_config once left [buffer] frame_slack out, so image runs silently ran at the
    default: each key the plan does not settle itself must arrive as written."""
    from wheeler2.runtime.plan import learner_plan, needs_of, plan_team
    from wheeler2.runtime.replays import replay_config

    settled = {"batch_size", "beta_steps", "min_size", "her", "chunk", "gate_tolerance"}
    cfg = tmp_path / "b.toml"
    # keep < 1 needs a task that flags rows.
    (tmp_path / "flags.py").write_text(
        "from wheeler2.task import Task\n\nclass Flags(Task):\n"
        "    def worth_keeping(self, obs, action, next_obs, ag, dg, info, reward):\n"
        "        return reward[:, 0] > 0\n"
    )
    cfg.write_text(
        '[experiment]\nname = "b"\ntotal_steps = 1000\neval_every = 500\n'
        '[env]\nid = "CartPole-v1"\n[task]\nspec = "./flags.py:Flags"\n'
        '[buffer]\nframe_slack = 0.25\nkeep = 0.5\nforget = "reservoir"\nforget_keep = 0.3\n'
        'prefetch = true\nalpha = 0.5\n[[team]]\nalgo = "dqn"\nrole = "learner"\n'
    )
    c = load(cfg)
    rc = replay_config(c, needs_of(learner_plan(plan_team(c))))
    for f in dataclasses.fields(c.buffer):
        if f.name not in settled:
            assert getattr(rc, f.name) == getattr(c.buffer, f.name), f.name
    assert rc.frame_slack == 0.25 and rc.forget == "reservoir"


def test_her_config_bounds():
    with pytest.raises(ReplayError, match="k: expected an integer >= 1, got 0"):
        HerConfig(k=0)
    with pytest.raises(ReplayError, match="strategy: expected one of 'future'"):
        HerConfig(strategy="all")
    assert HerConfig().fraction == pytest.approx(0.8)


# -- wheeler2 check: what only the env can tell -----------------------------------------------


def _check(path: Path, capsys, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["check", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_refuses_her_on_an_env_without_goals(write_config, capsys):
    path = write_config(REAL + '\n[buffer]\nher = { strategy = "future", k = 4 }\n')
    load(path)  # the file itself is well formed: only the env can say it has no goals
    code, out, err = _check(path, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: [buffer] her: needs a goal env")
    assert "'Pendulum-v1' has none" in err


def test_check_accepts_her_on_a_goal_env(write_config, capsys):
    pytest.importorskip("wheeler2.envs.bitflip")
    text = REAL.replace("Pendulum-v1", "wheeler2/BitFlip-v0").replace('"ddpg"', '"dqn"')
    path = write_config(text + '\n[buffer]\nher = { strategy = "future", k = 4 }\n')
    code, out, err = _check(path, capsys)
    assert code == 0, err
    assert out.startswith("ok: ")


def test_check_refuses_a_buffer_larger_than_memory(write_config, capsys):
    path = write_config(REAL)
    code, out, err = _check(path, capsys, "--set", "buffer.capacity=1_000_000_000_000")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {path}: [buffer] capacity: 1_000_000_000_000 transitions")
    # Pendulum: 2 x 3 obs + 1 action + 1 reward + 1 logp float32, 2 bools, 4 int64 = 70 bytes
    # a transition, plus 192 bytes of headers.
    assert "transitions of ~70 bytes need 70_000_000_000_192 bytes" in err


def test_buffer_estimate_matches_what_the_storage_allocates(write_config):
    from wheeler2.buffer import Layout
    from wheeler2.buffer.storage import field_specs
    from wheeler2.runtime.probe import buffer_bytes
    from wheeler2.runtime.team import prepare_team

    cfg = load(write_config(REAL), ["buffer.capacity=1000", "buffer.prioritized=true"])
    info = prepare_team(cfg, {}).tables[0].info
    layout = Layout(obs_dim=3, act_dim=1, logp=True)
    specs = field_specs(layout, ReplayConfig(capacity=1000, prioritized=True))
    expected = sum(int(__import__("numpy").prod(s)) * d(0).itemsize for s, d in specs.values())
    assert buffer_bytes(cfg, info) == expected


def test_check_with_env_uses_the_free_memory_it_is_given(write_config):
    from wheeler2.runtime.probe import check_with_env

    cfg = load(write_config(REAL), ["buffer.capacity=1000"])
    check_with_env(cfg, free=lambda: {"RAM": 10**9})
    with pytest.raises(ConfigError) as info:
        check_with_env(cfg, free=lambda: {"/dev/shm": 1000, "RAM": 10**9})
    assert (info.value.table, info.value.key) == ("[buffer]", "capacity")
    assert "free: /dev/shm 1_000 bytes, RAM 1_000_000_000 bytes" in info.value.message


def test_run_refuses_an_out_that_is_a_file(write_config, tmp_path, capsys):
    path = write_config(REAL)
    taken = tmp_path / "taken"
    taken.write_text("x")
    code = cli.main(["run", str(path), "--out", str(taken)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"error: --out {taken}: is an existing file; expected a directory\n"


# -- docs/config.md states the schema exactly --------------------------------------------------


def _doc_tables() -> dict[str, dict[str, str]]:
    """Heading -> {key: "accepts" cell} of every key table in docs/config.md."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text()
    tables: dict[str, dict[str, str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("| `") and heading:
            cells = [c.strip() for c in line.strip("|").split("|")]
            tables.setdefault(heading, {})[cells[0].strip("`")] = cells[1]
    return tables


def _documented() -> list[tuple[str, type, bool]]:
    engine = [
        ("`[experiment]`", config.ExperimentConfig),
        ("`[env]`", config.EnvConfig),
        ("`[task]` (optional)", config.TaskConfig),
        ("`[[task.heads]]`", config.HeadConfig),
        ("`[buffer]`", config.BufferConfig),
        ("`[buffer.her]` (or `her = { ... }`)", config.HerConfig),
        ("`[[team]]`", config.MemberConfig),
        ("`sync` (`[team.sync]` or `sync = { ... }`)", config.SyncConfig),
        ("`[play]` (optional)", config.PlayConfig),
        ("`[curriculum]` (optional)", CurriculumConfig),
    ]
    algos = [
        (f"`{m.__name__.split('.')[1]}` (`agents/{m.__name__.split('.')[1]}.py`)", m.Params)
        for m in _algorithms()
    ]
    return [(h, c, True) for h, c in engine] + [(h, c, False) for h, c in algos]


@pytest.mark.parametrize(
    ("heading", "cls", "engine"),
    _documented(),
    ids=[f"{c.__module__.split('.')[-1]}.{c.__qualname__}" for _, c, _ in _documented()],
)
def test_docs_state_every_key_and_bound(heading, cls, engine):
    from wheeler2.schema import describe

    documented = _doc_tables()[heading]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(documented) == set(fields)
    for name, f in fields.items():
        if name in ("params", "heads"):  # read by their own rules, documented in prose
            continue
        assert documented[name].startswith(describe(cls, f, engine)), name
