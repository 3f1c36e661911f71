"""``extends = "base.toml"``: a file is its base with its own tables merged over it (docs/config.md,
"Extending a file"). Tables merge key by key; a ``[[team]]`` list replaces the base's; a
``[team.NAME]`` table changes the base's member of that name; ``--set`` applies after the merge;
the run directory's config.toml is the merged file, without ``extends``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from wheeler2 import cli
from wheeler2.config import ConfigError, load

BASE = """
[experiment]
name = "base"
total_steps = 200
eval_every = 200
eval_episodes = 1
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 5_000
batch_size = 16
alpha = 0.5

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
gamma = 0.9
hidden = [16]
learning_starts = 50

[[team]]
name = "explorer"
algo = "ddpg"
role = "explorer"
sync = { every = 100 }
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``wheeler2 ARGV`` exits 2 with exactly one ``error:`` line on stderr; that line."""
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    return err.rstrip("\n")


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """top.toml extends sub/mid.toml, which extends ../shared/base.toml."""
    write(tmp_path / "shared" / "base.toml", BASE)
    write(
        tmp_path / "sub" / "mid.toml",
        """
        extends = "../shared/base.toml"

        [buffer]
        batch_size = 32

        [[team]]
        name = "solo"
        algo = "ddpg"
        role = "learner"
        [team.params]
        gamma = 0.8
        hidden = [16]
        learning_starts = 50
        """,
    )
    return write(
        tmp_path / "top.toml",
        """
        extends = "sub/mid.toml"

        [experiment]
        seed = 3

        [team.solo.params]
        tau = 0.01
        """,
    )


def test_a_chain_of_three_files_merges_as_documented(chain: Path) -> None:
    config = load(chain)
    # Tables merge key by key, each file over the one it extends.
    assert config.experiment.seed == 3  # top
    assert config.experiment.total_steps == 200  # base
    assert (config.buffer.capacity, config.buffer.batch_size, config.buffer.alpha) == (
        5_000,
        32,  # mid over base
        0.5,
    )
    # The name a file leaves out is the base's written one; without it, the file's own.
    assert config.experiment.name == "base"
    # mid's [[team]] list replaced base's whole team; top's [team.solo.params] changed one key.
    assert [m.name for m in config.team] == ["solo"]
    assert (config.team[0].params.gamma, config.team[0].params.tau) == (0.8, 0.01)


def test_a_table_over_the_team_changes_the_named_member_only(tmp_path: Path) -> None:
    write(tmp_path / "base.toml", BASE)
    child = write(
        tmp_path / "child.toml",
        """
        extends = "base.toml"
        [team.explorer]
        count = 3
        [team.target.params]
        gamma = 0.5
        """,
    )
    target, explorer = load(child).team
    assert (target.params.gamma, target.params.hidden, target.count) == (0.5, [16], 1)
    assert (explorer.count, explorer.sync.every) == (3, 100)


def test_a_table_naming_no_member_of_the_base_is_refused(tmp_path: Path, capsys) -> None:
    write(tmp_path / "base.toml", BASE)
    child = write(tmp_path / "child.toml", 'extends = "base.toml"\n[team.explorr]\ncount = 2\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line.startswith(f"error: {child}: team.explorr: the base file has no [[team]] entry")
    assert "its entries: target, explorer" in line


def test_a_cycle_is_refused_by_name(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.toml", 'extends = "b.toml"\n')
    b = write(tmp_path / "b.toml", 'extends = "a.toml"\n')
    line = one_error_line(capsys, ["check", str(a)])
    assert line == f"error: {a}: extends: cycle {a} -> {b} -> {a}"
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path / "self.toml", 'extends = "self.toml"\n'))
    assert info.value.message == f"cycle {tmp_path / 'self.toml'} -> {tmp_path / 'self.toml'}"


def test_a_base_that_is_a_folder_is_refused_naming_the_file_and_key(tmp_path: Path, capsys):
    # It named the folder alone, with the OS's "Is a directory".
    (tmp_path / "sub").mkdir()
    child = write(tmp_path / "child.toml", 'extends = "sub"\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line == f'error: {child}: extends: "sub" is a directory ({tmp_path / "sub"}), not a file'


def test_a_missing_base_is_refused_naming_the_file_and_key(tmp_path: Path, capsys) -> None:
    child = write(
        tmp_path / "child.toml", 'extends = "nowhere/base.toml"\n[experiment]\nseed = 1\n'
    )
    line = one_error_line(capsys, ["run", str(child)])
    assert line.startswith(f'error: {child}: extends: no such file "nowhere/base.toml"')
    assert str(tmp_path / "nowhere" / "base.toml") in line
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path / "odd.toml", "extends = 3\n"))
    assert (info.value.key, info.value.message) == (
        "extends",
        "expected the base file's path (relative to this file), got 3",
    )


def test_set_applies_after_the_merge(chain: Path) -> None:
    config = load(chain, ["buffer.batch_size=64", "team.solo.params.tau=0.2", "experiment.seed=9"])
    assert (config.buffer.batch_size, config.team[0].params.tau, config.experiment.seed) == (
        64,
        0.2,
        9,
    )
    assert config.buffer.capacity == 5_000  # what no override touched is still the base's


def test_an_unknown_key_is_reported_in_the_file_that_has_it(tmp_path: Path, capsys) -> None:
    base = write(tmp_path / "base.toml", BASE.replace("alpha = 0.5", "alpah = 0.5"))
    child = write(tmp_path / "child.toml", 'extends = "base.toml"\n[buffer]\nbatch_size = 8\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line == f"error: {base}: [buffer] alpah: unknown key; did you mean 'alpha'?"
    # The child's own mistakes stay the child's, in a table the base also writes.
    child.write_text('extends = "base.toml"\n[buffer]\nbatch_sise = 8\n')
    base.write_text(textwrap.dedent(BASE))
    line = one_error_line(capsys, ["check", str(child)])
    assert line.startswith(f"error: {child}: [buffer] batch_sise: unknown key")
    child.write_text('extend = "base.toml"\n')
    assert "did you mean 'extends'?" in one_error_line(capsys, ["check", str(child)])


def test_a_value_of_the_wrong_type_is_reported_in_the_file_that_wrote_it(
    tmp_path: Path, capsys
) -> None:
    base = write(tmp_path / "base.toml", BASE.replace("alpha = 0.5", 'alpha = "half"'))
    child = write(tmp_path / "kid" / "child.toml", 'extends = "../base.toml"\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line.startswith(f"error: {base}: [buffer] alpha: expected "), line
    # Written over by the child, the value is the child's.
    child.write_text('extends = "../base.toml"\n[buffer]\nalpha = "most"\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line.startswith(f"error: {child}: [buffer] alpha: expected "), line


def test_the_run_saves_the_merged_file_without_extends(chain: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert cli.main(["run", str(chain), "--out", str(runs)]) == 0
    (run_dir,) = runs.iterdir()
    saved = run_dir / "config.toml"
    assert "extends" not in saved.read_text()
    assert load(saved) == load(chain, out=str(runs))


def test_a_refused_flag_value_names_the_flag(chain: Path, tmp_path: Path) -> None:
    """A value written by --set, --seed or --out is the flag's mistake: the file alone (here the
    base, which writes total_steps) would send the user to a line that is fine."""
    expr = "experiment.total_steps=abc"
    with pytest.raises(ConfigError) as info:
        load(chain, [expr])
    assert str(info.value) == (
        f'{chain}: [experiment] total_steps: expected an integer > 0, got "abc" (from --set {expr})'
    )
    with pytest.raises(ConfigError) as info:
        load(chain, ["team.solo.params.gama=0.9"])
    assert str(info.value).endswith("(from --set team.solo.params.gama=0.9)")
    with pytest.raises(ConfigError) as info:
        load(chain, ["experment.seed=1"])
    assert str(info.value).startswith(f"{chain}: experment: unknown key")
    assert str(info.value).endswith("(from --set experment.seed=1)")
    with pytest.raises(ConfigError) as info:
        load(chain, seed=-4)
    assert str(info.value).endswith("got -4 (from --seed)")
    with pytest.raises(ConfigError) as info:
        load(chain, out="")
    assert str(info.value) == (
        f'{chain}: [experiment] out: expected a non-empty string, got "" (from --out)'
    )
    # The file's own mistakes are still the file's alone when flags are given.
    plain = write(tmp_path / "plain.toml", BASE.replace("alpha = 0.5", "alpha = -1.0"))
    with pytest.raises(ConfigError) as info:
        load(plain, ["experiment.seed=1"], seed=2)
    assert str(info.value) == f"{plain}: [buffer] alpha: expected a number in [0, 1], got -1.0"


def test_extends_under_a_table_header_says_where_it_goes(tmp_path: Path, capsys) -> None:
    write(tmp_path / "base.toml", BASE)
    child = write(tmp_path / "child.toml", '[experiment]\nextends = "base.toml"\nseed = 1\n')
    line = one_error_line(capsys, ["check", str(child)])
    assert line.startswith(f"error: {child}: [experiment] extends: extends goes at the top"), line
    child.write_text('[[team]]\nname = "x"\nextends = "base.toml"\n')
    assert f"{child}: [[team]] extends:" in one_error_line(capsys, ["check", str(child)])
