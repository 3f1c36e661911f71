"""team_vs_solo's best single learner: chosen on seeds of its own, judged on others."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from experiments import team_vs_solo
from experiments.lib import runs


def _run(arm: str, seed: int, steps: int | None) -> dict[str, Any]:
    return {
        "task": "mountaincar", "arm": arm, "seed": seed, "solved": steps is not None,
        "steps_to": steps, "stays": steps is not None, "auc": 1.0,
    }  # fmt: skip


def test_the_selection_ranks_every_noise_on_the_seeds_they_all_ran() -> None:
    # An interrupted selection: pink ran three seeds, OU two so far, faster on both.
    rs = [_run("solo-pink-0.6", s, 40_000) for s in (100, 101, 102)]
    rs += [_run("solo-ou-1", s, 5_000) for s in (100, 101)]
    ranked = team_vs_solo.rank_solos(rs)
    assert [x["arm"] for x in ranked] == ["solo-ou-1", "solo-pink-0.6"]
    assert [x["seeds"] for x in ranked] == [2, 2]
    assert "seeds [100, 101] (selection seeds" in team_vs_solo.select_render(rs, "mountaincar")


def test_an_unfinished_grid_is_not_ranked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing may reach the repository's results, whatever select() does.
    monkeypatch.setattr(team_vs_solo, "RESULTS", tmp_path)
    monkeypatch.setattr(team_vs_solo, "best_solo_file", lambda task: tmp_path / "best.json")
    path = tmp_path / "select.jsonl"
    for arm in team_vs_solo.SOLO_GRID[:-1]:
        runs.append(path, _run(arm, 100, 10_000))
    args = argparse.Namespace(task="mountaincar", runs=str(path), table=True)
    with pytest.raises(SystemExit, match=f"no selection run of {team_vs_solo.SOLO_GRID[-1]}"):
        team_vs_solo.select(args, None)


def test_best_solo_is_refused_on_its_selection_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "best_solo.json"
    runs.save(chosen, {"task": "mountaincar", "arm": "solo-ou-1", "seeds": [100, 101, 102]})
    monkeypatch.setattr(team_vs_solo, "best_solo_file", lambda task: chosen)
    assert team_vs_solo.chosen_solo("mountaincar", [0, 1, 2]) == "solo-ou-1"
    with pytest.raises(SystemExit, match=r"seeds \[101\] cannot report it"):
        team_vs_solo.chosen_solo("mountaincar", [0, 101])

    def no_run(config: Any) -> None:
        raise AssertionError("a run began")

    monkeypatch.setattr(team_vs_solo, "run_config", no_run)
    with pytest.raises(SystemExit, match="cannot report it"):
        team_vs_solo.run_arm("mountaincar", "best-solo", 100, tmp_path, [])
    with pytest.raises(SystemExit, match="cannot report it"):  # before the sweep's first run
        team_vs_solo.main(["--task", "mountaincar", "--arms", "best-solo", "--seeds", "102"])
