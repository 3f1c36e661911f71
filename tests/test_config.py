"""Config loading: the typed result, every kind of error and its message, overrides, renames."""

from __future__ import annotations

import dataclasses
import pickle
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheeler2 import config, registry
from wheeler2.config import ConfigDeprecationWarning, ConfigError, load

ALGO = "w2test_fake_algo:Fake"

BASE = f"""
[experiment]
name = "t"
total_steps = 1_000
eval_every = 100

[env]
id = "Pendulum-v1"

[[team]]
name = "target"
algo = "{ALGO}"
role = "learner"
"""

TEAM = f"""
[experiment]
name = "team"
total_steps = 1_000
eval_every = 100
backend = "local"

[env]
id = "Pendulum-v1"
num_envs = 2

[buffer]
capacity = 5_000
prioritized = true
her = {{ strategy = "final", k = 2 }}

[[team]]
name = "target"
algo = "{ALGO}"
role = "learner"
[team.params]
gamma = 1
hidden = [8, 8]

[[team]]
name = "explorer"
algo = "{ALGO}"
role = "explorer"
count = 2
sync = {{ every = 50, keep = ["head"], alpha = 0.5 }}
[team.params]
noise = "ou"
"""


def error_of(path: Path, overrides: list[str] = ()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(path, overrides)
    return info.value


def with_replaced(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


# -- the typed result --------------------------------------------------------------------------


def test_minimal_file_gets_every_default(write_config):
    cfg = load(write_config(BASE))
    assert cfg.experiment == config.ExperimentConfig(
        name="t", total_steps=1_000, eval_every=100, checkpoint_every=100
    )
    assert cfg.experiment.seed == 0 and cfg.experiment.backend == "serial"
    assert cfg.experiment.eval_episodes == 10 and cfg.experiment.progress is True
    assert cfg.env == config.EnvConfig(id="Pendulum-v1", kwargs={}, num_envs=1)
    assert cfg.task.spec is None
    assert cfg.task.heads == (config.HeadConfig(name="env", reward="env", weight=1.0),)
    assert cfg.buffer == config.BufferConfig()
    assert cfg.buffer.capacity == 200_000 and cfg.buffer.her is None
    (member,) = cfg.team
    assert member.name == "target" and member.role == "learner" and member.count == 1
    agent_class = registry.resolve_algo(member.algo)
    assert agent_class.__name__ == "Fake"
    assert member.params == agent_class.Params()
    assert cfg.learner is member and cfg.explorers == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.experiment.seed = 3


def test_team_file_converts_types(write_config):
    cfg = load(write_config(TEAM))
    target, explorer = cfg.team
    assert target.params.gamma == 1.0 and isinstance(target.params.gamma, float)
    assert target.params.hidden == (8, 8)  # a TOML list becomes the declared tuple
    assert explorer.params.noise == "ou"
    assert explorer.sync == config.SyncConfig(every=50, keep=("head",), alpha=0.5)
    assert explorer.count == 2
    assert cfg.buffer.her == config.HerConfig(strategy="final", k=2)
    assert cfg.buffer.prioritized is True
    assert cfg.env.num_envs == 2
    assert cfg.explorers == (explorer,)


def test_task_heads_and_spec_resolve(write_config):
    text = (
        BASE
        + """
[task]
spec = "w2test_tasks:Upright"
[[task.heads]]
name = "env"
[[task.heads]]
name = "upright"
reward = "w2test_tasks:upright_reward"
weight = 2
"""
    )
    cfg = load(write_config(text))
    assert cfg.task.spec == "w2test_tasks:Upright"
    assert [h.name for h in cfg.task.heads] == ["env", "upright"]
    assert cfg.task.heads[1] == config.HeadConfig("upright", "w2test_tasks:upright_reward", 2.0)


def test_to_toml_reads_back_into_an_equal_config(write_config, tmp_path):
    cfg = load(write_config(TEAM))
    again = load(write_config(cfg.to_toml(), "resolved.toml"))
    assert again == cfg


def test_builtin_toml_writer_round_trips(monkeypatch, write_config):
    monkeypatch.setitem(sys.modules, "tomli_w", None)  # import fails -> our own writer
    cfg = load(write_config(TEAM))
    text = cfg.to_toml()
    assert tomllib.loads(text) == cfg.to_dict()
    assert load(write_config(text, "resolved.toml")) == cfg


_scalars = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.text()
)
_keys = st.text(min_size=1, max_size=8)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=5))
def test_builtin_toml_writer_round_trips_any_document(data):
    assert tomllib.loads(config.dumps_toml(data)) == data


def test_builtin_toml_writer_escapes_strings_and_keys():
    data = {"a": {"we ird": 'q"uote\\back\nline', "f": float("inf"), "xs": [1, 2.5, True]}}
    assert tomllib.loads(config.dumps_toml(data)) == data


# -- syntax errors -----------------------------------------------------------------------------


def test_syntax_error_names_file_line_and_column(write_config):
    path = write_config(with_replaced(BASE, "total_steps = 1_000", "total_steps = = 1_000"))
    err = error_of(path)
    assert (err.line, err.column) == (3, 15)
    text = str(err)
    assert text.startswith(f"{path}: line 3, column 15: TOML syntax error: Invalid value")
    assert "total_steps = = 1_000" in text  # the offending line is quoted, with a caret
    assert "\n" + " " * 4 + " " * 14 + "^" in text


def test_syntax_error_at_end_of_document(write_config):
    err = error_of(write_config(BASE + "x = [1, 2\n"))
    assert "Unclosed array" in str(err)
    assert err.line == len(BASE.strip().splitlines()) + 1


def test_config_error_pickles_with_its_fields():
    err = ConfigError("f.toml", "[buffer]", "capacity", "expected x", line=3, column=4)
    again = pickle.loads(pickle.dumps(err))
    assert (again.file, again.table, again.key, again.line, again.column) == (
        "f.toml",
        "[buffer]",
        "capacity",
        3,
        4,
    )
    assert str(again) == str(err)


def test_missing_file_is_a_config_error(tmp_path):
    err = error_of(tmp_path / "nope.toml")
    assert str(err) == f"{tmp_path / 'nope.toml'}: no such file"


# -- unknown keys ------------------------------------------------------------------------------


def test_unknown_key_suggests_the_closest(write_config):
    path = write_config(BASE + "[buffer]\nupdates_per_insrt = 2.0\n")
    err = error_of(path)
    assert (err.file, err.table, err.key) == (str(path), "[buffer]", "updates_per_insrt")
    assert str(err) == (
        f"{path}: [buffer] updates_per_insrt: unknown key; did you mean 'updates_per_insert'?"
    )


def test_unknown_key_without_close_match_lists_valid_keys(write_config):
    err = error_of(write_config(BASE + "[env.kwargs]\n[buffer]\nzzzz = 1\n"))
    assert "valid keys: admit, alpha, batch_size, beta, capacity" in err.message


def test_unknown_param_names_member_table_and_closest_field(write_config):
    path = write_config(TEAM + "gama = 0.9\n")  # lands in the explorer's [team.params]
    err = error_of(path)
    assert err.table == "[[team]] #2 (explorer).params"
    assert err.key == "gama"
    assert "did you mean 'gamma'?" in str(err)


def test_stable_baselines3_names_point_to_wheeler2s():
    from wheeler2.config.reader import Reader

    unknown = Reader("x.toml").unknown_key
    # Among PPO's keys the nearest spelling of learning_rate is clip_range; the key is lr.
    err = unknown("[[team]] #1 (ppo).params", "learning_rate", ["clip_range", "lr", "n_steps"])
    assert err.message == "unknown key; did you mean 'lr'?"
    err = unknown("[[team]] #1 (d).params", "learning_rate", ["lr_actor", "lr_critic", "tau"])
    assert err.message == "unknown key; did you mean 'lr_actor' or 'lr_critic'?"
    err = unknown("[[team]] #1 (d).params", "buffer_size", ["batch_norm", "gamma", "tau"])
    assert err.message == "unknown key; did you mean [buffer] capacity?"
    err = unknown("[buffer]", "buffer_size", ["batch_size", "capacity"])
    assert err.message == "unknown key; did you mean 'capacity'?"


def test_unknown_top_level_table(write_config):
    err = error_of(write_config(BASE + "[bufer]\ncapacity = 10\n"))
    assert err.key == "bufer" and "did you mean 'buffer'?" in err.message


def test_unknown_key_in_her_and_sync(write_config):
    err = error_of(write_config(with_replaced(TEAM, "k = 2", "kk = 2")))
    assert (err.table, err.key) == ("[buffer.her]", "kk")
    assert "did you mean 'k'?" in err.message
    err = error_of(write_config(with_replaced(TEAM, "keep =", "kep =")))
    assert (err.table, err.key) == ("[[team]] #2 (explorer).sync", "kep")


# -- wrong types and ranges --------------------------------------------------------------------


def test_out_of_range_message_is_exact(write_config):
    path = write_config(BASE + "[buffer]\ncapacity = -5\n")
    assert str(error_of(path)) == f"{path}: [buffer] capacity: expected an integer > 0, got -5"


@pytest.mark.parametrize(
    ("table_text", "table", "key", "expected"),
    [
        ('[buffer]\ncapacity = "big"', "[buffer]", "capacity", 'an integer > 0, got "big"'),
        ("[buffer]\ncapacity = 1.5", "[buffer]", "capacity", "an integer > 0, got 1.5"),
        ("[buffer]\nprioritized = 1", "[buffer]", "prioritized", "true or false, got 1"),
        ("[buffer]\nbeta = 1.5", "[buffer]", "beta", "a number in [0, 1], got 1.5"),
        ("[buffer]\nn_step = 0", "[buffer]", "n_step", "an integer >= 1, got 0"),
        (
            "[buffer]\nupdates_per_insert = 0",
            "[buffer]",
            "updates_per_insert",
            "a number in (0, 1000]",
        ),
        ('[buffer]\nher = { strategy = "all" }', "[buffer.her]", "strategy", "one of 'future'"),
        ("[buffer]\nher = 3", "[buffer]", "her", "a table, got 3"),
    ],
)
def test_wrong_type_or_range_in_buffer(write_config, table_text, table, key, expected):
    err = error_of(write_config(BASE + table_text + "\n"))
    assert (err.table, err.key) == (table, key)
    assert f"expected {expected}" in err.message


BIG = 10**400  # TOML integers are 64-bit; tomllib reads any size


@pytest.mark.parametrize(
    ("table_text", "table", "key"),
    [
        (f"[buffer]\ncapacity = {BIG}", "[buffer]", "capacity"),  # an integer key
        (f"[buffer]\nalpha = {BIG}", "[buffer]", "alpha"),  # a number key
        (f"[buffer]\nbeta = -{BIG}", "[buffer]", "beta"),
    ],
)
def test_an_integer_past_64_bits_is_refused_not_overflowed(write_config, table_text, table, key):
    # It passed capacity's range check and overflowed a float later (a traceback, exit 1).
    err = error_of(write_config(BASE + table_text + "\n"))
    assert (err.table, err.key) == (table, key)
    assert "TOML integers are 64-bit" in err.message and "401 digits" in err.message


@pytest.mark.parametrize(
    ("spread", "key", "expected"),
    [
        ('{ base = 0.01, alpha = "x" }', "lr_actor.alpha", 'expected a finite number, got "x"'),
        ('{ base = "x" }', "lr_actor.base", 'expected a number > 0, got "x"'),
        ("{ base = -0.4, alpha = 0.5 }", "lr_actor.base", "expected a number > 0, got -0.4"),
        ("{ base = true }", "lr_actor.base", "expected a number > 0, got true"),
    ],
)
def test_a_per_copy_spread_of_no_number_is_refused(write_config, spread, key, expected):
    # float("x") raised with a traceback; a negative base made a complex learning rate.
    path = write_config(
        BASE + '\n[[team]]\nname = "actor"\nalgo = "ddpg"\nrole = "actor"\ncount = 2\n'
        "sync = { every = 50 }\n"
        f"per_copy = {{ lr_actor = {spread} }}\n"
    )
    err = error_of(path)
    assert (err.table, err.key) == ("[[team]] #2 (actor).per_copy", key)
    assert err.message == expected


def test_a_sequence_stride_past_its_length_is_refused(write_config):
    # Steps between one sequence's trained span and the next start's were never trained.
    from wheeler2.runtime.team import prepare_team

    path = write_config(
        with_replaced(BASE, ALGO, "td3")
        + '[team.params]\ncore = "gru"\nseq_length = 4\nseq_burn_in = 2\nseq_stride = 10\n'
    )
    with pytest.raises(ConfigError) as info:
        prepare_team(load(path), {})  # what check and run build first
    err = info.value
    assert err.key == "seq_stride", str(err)
    assert "seq_stride = 10 is more than seq_length = 4" in err.message


def test_wrong_backend_lists_the_choices(write_config):
    err = error_of(write_config(with_replaced(BASE, 'name = "t"', 'name = "t"\nbackend = "gpu"')))
    assert (err.table, err.key) == ("[experiment]", "backend")
    assert err.message == "expected one of 'serial', 'local', 'ray', got \"gpu\""


def test_num_envs_and_eval_episodes_bounds(write_config):
    err = error_of(
        write_config(with_replaced(BASE, 'id = "Pendulum-v1"', 'id = "Pendulum-v1"\nnum_envs = 0'))
    )
    assert (err.table, err.key, err.message) == (
        "[env]",
        "num_envs",
        "expected an integer >= 1, got 0",
    )


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ('gamma = "high"', 'expected a number, got "high"'),
        ("learning_starts = 1.5", "expected an integer, got 1.5"),
        ('hidden = [8, "x"]', "expected a list of integers"),
        ("hidden = 8", "expected a list of integers, got 8"),
        ('noise = "pink"', 'expected one of "gaussian", "ou"'),
        ("normalize = 1", "expected true or false, got 1"),
        ('clip = "no"', "expected a number"),
    ],
)
def test_param_type_errors(write_config, param, expected):
    err = error_of(write_config(BASE + f"[team.params]\n{param}\n"))
    assert err.table == "[[team]] #1 (target).params"
    assert err.key == param.split(" = ")[0]
    assert expected in err.message


def test_params_post_init_rejection_is_a_config_error(write_config):
    err = error_of(write_config(BASE + "[team.params]\nlearning_starts = 1\n"))
    assert (err.table, err.key) == ("[[team]] #1 (target).params", None)
    assert err.message == (
        f"{ALGO} rejects these parameters: learning_starts must be >= len(hidden), got 1"
    )


def test_gamma_bound_of_a_real_algorithm(write_config):
    # The bound is agents/ddpg.py's own (field metadata), not a test fake's (issue 19).
    pytest.importorskip("wheeler2.agents.ddpg")
    path = write_config(with_replaced(BASE, ALGO, "ddpg") + "[team.params]\ngamma = 2.0\n")
    assert str(error_of(path)) == (
        f"{path}: [[team]] #1 (target).params gamma: expected a number in [0, 1], got 2.0"
    )


def test_sync_alpha_must_be_in_0_1(write_config):
    err = error_of(write_config(with_replaced(TEAM, "alpha = 0.5", "alpha = 0")))
    assert (err.table, err.key) == ("[[team]] #2 (explorer).sync", "alpha")
    assert err.message == "expected a number in (0, 1], got 0"


# -- missing keys ------------------------------------------------------------------------------


def test_missing_required_key(write_config):
    path = write_config(with_replaced(BASE, "total_steps = 1_000\n", ""))
    err = error_of(path)
    assert str(err) == (f"{path}: [experiment] total_steps: missing required key (an integer > 0)")


def test_missing_algo_and_missing_tables(write_config):
    err = error_of(write_config(with_replaced(BASE, f'algo = "{ALGO}"\n', "")))
    assert (err.table, err.key) == ("[[team]] #1 (target)", "algo")
    assert "missing required key" in err.message
    err = error_of(write_config(BASE.split("[[team]]")[0]))
    assert err.key == "team" and "[[team]]" in err.message


# -- names that do not resolve -----------------------------------------------------------------


def test_unknown_algorithm_lists_available(write_config, monkeypatch):
    monkeypatch.setattr(registry, "ALGORITHM_PACKAGE", "w2test_agents")
    err = error_of(write_config(with_replaced(BASE, ALGO, "fakealgoo")))
    assert (err.table, err.key) == ("[[team]] #1 (target)", "algo")
    assert "unknown algorithm 'fakealgoo'" in err.message
    assert "did you mean 'fakealgo'?" in err.message
    assert "available: fakealgo (or 'module:Class' for your own)" in err.message


def test_an_algorithm_in_a_missing_module_lists_the_algorithms(write_config, monkeypatch):
    # The hint was the tasks available.
    monkeypatch.setattr(registry, "ALGORITHM_PACKAGE", "w2test_agents")
    err = error_of(write_config(with_replaced(BASE, ALGO, "nosuchpkg.mod:Agent")))
    assert (err.table, err.key) == ("[[team]] #1 (target)", "algo")
    assert "no module named 'nosuchpkg.mod'" in err.message
    assert "available: fakealgo (or 'module:Class' for your own)" in err.message, err.message
    assert "tasks available" not in err.message


def test_algorithm_by_package_name(write_config, monkeypatch):
    monkeypatch.setattr(registry, "ALGORITHM_PACKAGE", "w2test_agents")
    cfg = load(write_config(with_replaced(BASE, ALGO, "fakealgo")))
    assert registry.resolve_algo(cfg.learner.algo).__module__ == "w2test_agents.fakealgo"
    assert set(registry.algorithms()) == {"fakealgo"}  # helpers.py has no Agent subclass


def test_algorithm_class_that_is_not_an_agent(write_config):
    err = error_of(write_config(with_replaced(BASE, ALGO, "w2test_fake_algo:NotAnAgent")))
    assert err.key == "algo" and "not an Agent subclass" in err.message


def test_unknown_env_lists_close_registered_ids(write_config):
    path = write_config(with_replaced(BASE, "Pendulum-v1", "Pendulm-v1"))
    err = error_of(path)
    assert (err.table, err.key) == ("[env]", "id")
    assert "unknown environment 'Pendulm-v1'" in err.message
    assert "Pendulum-v1" in err.message


@pytest.mark.parametrize("env_id", ["pettingzoo:sisl.multiwalker_v9", "unity:mock"])
def test_adapter_prefixed_env_ids_are_accepted_by_form(write_config, env_id):
    assert load(write_config(with_replaced(BASE, "Pendulum-v1", env_id))).env.id == env_id


@pytest.mark.parametrize("env_id", ["pettingzoo:multiwalker", "unity:", "nosuchpkg:Env-v0"])
def test_malformed_prefixed_env_ids(write_config, env_id):
    err = error_of(write_config(with_replaced(BASE, "Pendulum-v1", env_id)))
    assert (err.table, err.key) == ("[env]", "id")


def test_unknown_task_class_suggests_closest(write_config):
    err = error_of(write_config(BASE + '[task]\nspec = "w2test_tasks:Uprigt"\n'))
    assert (err.table, err.key) == ("[task]", "spec")
    assert "did you mean 'Upright'?" in err.message
    err = error_of(write_config(BASE + '[task]\nspec = "w2test_tasks:upright_reward"\n'))
    assert err.message == "'w2test_tasks:upright_reward' is not a class"


def test_unknown_task_module_lists_tasks(write_config, monkeypatch):
    monkeypatch.setattr(registry, "TASK_PACKAGE", "w2test_taskpkg")
    err = error_of(write_config(BASE + '[task]\nspec = "w2test_taskpkg.pendulm:Upright"\n'))
    assert "no module named 'w2test_taskpkg.pendulm'" in err.message
    assert "w2test_taskpkg.pendulum:Balance, w2test_taskpkg.pendulum:Upright" in err.message


def test_reward_head_must_be_env_or_a_function(write_config):
    err = error_of(
        write_config(BASE + '[[task.heads]]\nname = "a"\nreward = "w2test_tasks:Upright_"\n')
    )
    assert (err.table, err.key) == ("[[task.heads]] #1", "reward")
    err = error_of(write_config(BASE + '[[task.heads]]\nname = "a"\nreward = "upright"\n'))
    assert 'expected "env" or "module:function"' in err.message
    err = error_of(
        write_config(BASE + '[[task.heads]]\nname = "a"\nreward = "w2test_tasks:THRESHOLD"\n')
    )
    assert "is not a function" in err.message


# -- team structure ----------------------------------------------------------------------------


def test_team_without_learner(write_config):
    err = error_of(write_config(with_replaced(BASE, 'role = "learner"', 'role = "explorer"')))
    assert err.key == "team" and "no learner" in err.message


def test_two_learners(write_config):
    second = f'\n[[team]]\nname = "b"\nalgo = "{ALGO}"\nrole = "learner"\n'
    err = error_of(write_config(BASE + second))
    assert "exactly one learner" in err.message
    err = error_of(
        write_config(with_replaced(BASE, 'role = "learner"', 'role = "learner"\ncount = 2'))
    )
    assert "exactly one learner" in err.message


def test_sync_on_learner(write_config):
    err = error_of(write_config(BASE + "sync = { every = 10 }\n"))
    assert (err.table, err.key) == ("[[team]] #1 (target)", "sync")
    assert "learner does not sync" in err.message


def test_duplicate_member_names(write_config):
    text = with_replaced(TEAM, 'name = "explorer"', 'name = "target"')
    err = error_of(write_config(text))
    assert err.key == "name" and "share this name" in err.message


def test_unknown_role(write_config):
    err = error_of(write_config(with_replaced(BASE, 'role = "learner"', 'role = "teacher"')))
    assert err.message == "expected one of 'learner', 'explorer', 'actor', got \"teacher\""


# -- overrides ---------------------------------------------------------------------------------


def test_set_overrides_by_member_name_and_index(write_config):
    path = write_config(TEAM)
    cfg = load(
        path,
        [
            "team.target.params.gamma=0.9",
            "team.1.params.hidden=[4, 4]",
            "buffer.n_step=3",
            "experiment.name=renamed",  # not valid TOML: taken as a string
            "env.kwargs.g=9.81",
        ],
        seed=7,
        out="elsewhere",
    )
    assert cfg.learner.params.gamma == 0.9
    assert cfg.team[1].params.hidden == (4, 4)
    assert cfg.buffer.n_step == 3
    assert cfg.experiment.name == "renamed"
    assert cfg.env.kwargs == {"g": 9.81}
    assert (cfg.experiment.seed, cfg.experiment.out) == (7, "elsewhere")


def test_set_overrides_are_validated(write_config):
    err = error_of(write_config(BASE), ["buffer.capacity=-1"])
    assert (err.table, err.key) == ("[buffer]", "capacity")
    err = error_of(write_config(BASE), ["buffer.batchsize=1"])
    assert "did you mean 'batch_size'?" in err.message


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("buffer.n_step", "expected table.key=value"),
        ("n_step=3", "expected table.key=value"),
        ("team.nobody.params.gamma=0.9", "no [[team]] named 'nobody'; names: target"),
        ("team.5.params.gamma=0.9", "'team' has 1 entries"),
        ("experiment.name.x=1", "'experiment.name' is a value, not a table"),
        # It named 'team.target' the array (the entry's key was missing).
        (
            "team.target=5",
            "'team' is an array of tables and 'team.target' one of its tables; set a key of it "
            "(team.target.KEY=VALUE)",
        ),
    ],
)
def test_bad_set_override(write_config, expr, message):
    err = error_of(write_config(BASE), [expr])
    assert (err.table, err.key) == ("--set", expr)
    assert message in err.message


# -- renamed keys ------------------------------------------------------------------------------


def test_deprecated_alias_works_and_warns(write_config):
    path = write_config(BASE + "[buffer]\nratio = 4\n")
    with pytest.warns(
        ConfigDeprecationWarning, match="'ratio' is deprecated; call it 'updates_per_insert'"
    ):
        cfg = load(path)
    assert cfg.buffer.updates_per_insert == 4.0
    assert "ratio" not in cfg.to_toml()


def test_deprecated_alias_and_new_name_together(write_config):
    err = error_of(write_config(BASE + "[buffer]\nratio = 4\nupdates_per_insert = 2\n"))
    assert (err.table, err.key) == ("[buffer]", "ratio")
    assert "also set" in err.message


@pytest.mark.parametrize(
    "algo,old,value,new",
    [
        ("ppo", "core_first", "true", "core"),
        ("a2c", "core_first", "false", "obs"),
        ("td3", "core_skip", "false", "core"),
        ("dqn", "core_skip", "true", "core+obs"),
    ],
)
def test_retired_layout_switches_read_as_trunk_reads(write_config, algo, old, value, new):
    # core_first (PPO, A2C) and core_skip (the off-policy learners) became one key, trunk_reads:
    # an old file still runs, with one warning naming the new key and value.
    env = "CartPole-v1" if algo in ("ppo", "a2c", "dqn") else "Pendulum-v1"
    text = BASE.replace(f'algo = "{ALGO}"', f'algo = "{algo}"').replace("Pendulum-v1", env)
    path = write_config(text + f'[team.params]\ncore = "gru"\n{old} = {value}\n')
    want = f"'{old} = {value}' is deprecated; call it 'trunk_reads = \"{new}\"'"
    with pytest.warns(ConfigDeprecationWarning, match=re.escape(want)):
        cfg = load(path)
    assert cfg.learner.params.trunk_reads == new
    assert old not in cfg.to_toml()


def test_retired_layout_switch_under_per_copy_reads_per_copy(write_config):
    # Written before trunk_reads: a spread of layouts over the copies of one [[team]] entry.
    text = BASE.replace(f'algo = "{ALGO}"', 'algo = "td3"') + (
        '[team.params]\ncore = "gru"\n\n[[team]]\nname = "actors"\nalgo = "td3"\n'
        'role = "actor"\ncount = 2\nsync = { every = 100 }\n'
        '[team.params]\ncore = "gru"\n[team.per_copy]\n'
    )
    with pytest.warns(ConfigDeprecationWarning, match="'core_skip = false' is deprecated"):
        cfg = load(write_config(text + "core_skip = [true, false]\n"))
    (actors,) = [m for m in cfg.team if m.name == "actors"]
    assert actors.per_copy == {"trunk_reads": ("core+obs", "core")}
    err = error_of(write_config(text + "core_skip = { base = 1, alpha = 2 }\n"))
    assert err.key == "core_skip" and "expected true or false" in err.message


def test_retired_layout_switch_refuses_other_values_and_the_new_key_beside_it(write_config):
    text = BASE.replace(f'algo = "{ALGO}"', 'algo = "ppo"') + "[team.params]\n"
    err = error_of(write_config(text + "core_first = 1\n"))
    assert err.key == "core_first" and "expected true or false, got 1" in err.message
    err = error_of(write_config(text + 'core_first = true\ntrunk_reads = "core"\n'))
    assert err.key == "core_first" and "also set" in err.message


# -- the shipped configs -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default.toml", "pendulum_ddpg.toml"])
def test_shipped_configs_validate(name):
    pytest.importorskip("wheeler2.agents.ddpg")
    cfg = load(Path(__file__).parent.parent / "cfg" / name)
    assert cfg.learner.algo == "ddpg"
    assert cfg.env.id == "Pendulum-v1"


# -- registry: env adapters --------------------------------------------------------------------


def test_make_env_routes_prefixed_ids_to_their_adapter(monkeypatch):
    calls = []
    adapter = type(sys)("wheeler2.envs.unity")
    built = types.SimpleNamespace(info=types.SimpleNamespace(goal_dim=0))

    def make(spec, kwargs, num_envs, seed):
        calls.append((spec, kwargs, num_envs, seed))
        return built

    adapter.make = make
    monkeypatch.setitem(sys.modules, "wheeler2.envs.unity", adapter)
    env = registry.make_env(config.EnvConfig(id="unity:mock", kwargs={"a": 1}), num_envs=3, seed=5)
    assert calls == [("mock", {"a": 1}, 3, 5)] and env is built


def test_make_env_builds_a_gymnasium_vector():
    pytest.importorskip("wheeler2.envs.gym")
    env = registry.make_env(config.EnvConfig(id="Pendulum-v1"), num_envs=2, seed=0)
    try:
        assert env.num_envs == 2
        assert env.info.obs_dim == 3 and env.info.act_dim == 1 and not env.info.discrete
    finally:
        env.close()


def test_builtin_env_ids_are_known_without_importing_them_first(write_config, monkeypatch):
    bitflip = pytest.importorskip("wheeler2.envs.bitflip")
    import gymnasium

    monkeypatch.delitem(sys.modules, "wheeler2.envs.bitflip")
    monkeypatch.delitem(gymnasium.registry, bitflip.ENV_ID)
    cfg = load(write_config(with_replaced(BASE, "Pendulum-v1", "wheeler2/BitFlip-v0")))
    assert cfg.env.id == "wheeler2/BitFlip-v0"
