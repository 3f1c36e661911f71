"""experiments/meet_games.py keeps one setting per table: a sweep at another budget (or with other
``--set`` overrides) than the rows stored under its name stops before it runs.

Before, ``--game connect_four --seeds 1 --steps 200000`` into the 400k table replaced seed 1's
row with a 200k run and the page still read "Median seat moves 400,000" and "5/5" seeds met."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments import meet_games


def row(seed: int, seat_moves: int, sets: list[str] | None = None) -> dict[str, Any]:
    return {"seed": seed, "seat_moves": seat_moves, "sets": sets or []}


def test_a_sweep_at_another_budget_stops_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = {"game": "connect_four", "rows": [row(s, 400_000) for s in range(5)]}
    (tmp_path / "meet_connect_four.json").write_text(json.dumps(stored))
    ran: list[int] = []

    def run_one(game: str, seed: int, *_: Any) -> dict[str, Any]:
        ran.append(seed)
        raise RuntimeError("stop here: the test checks what happens before a run")

    monkeypatch.setattr(meet_games, "run_one", run_one)
    argv = ["--game", "connect_four", "--seeds", "1", "--results", str(tmp_path)]
    with pytest.raises(SystemExit, match=r"seeds \[0, 1, 2, 3, 4\] of another setting"):
        meet_games.main([*argv, "--steps", "200000"])
    with pytest.raises(SystemExit, match="its own --name"):
        meet_games.main([*argv, "--steps", "400000", "--set", "play.random_share=0.5"])
    assert ran == []
    # The same budget (the config's own: 400,000 seat moves) goes on to run.
    with pytest.raises(RuntimeError, match="stop here"):
        meet_games.main(argv)
    assert ran == [1]


def test_refuse_other_runs_takes_a_vector_steps_overshoot() -> None:
    meet_games.refuse_other_runs([row(0, 150_008), row(1, 150_000)], 150_000, [], "x")
    with pytest.raises(SystemExit, match=r"seeds \[1\]"):
        meet_games.refuse_other_runs([row(0, 150_000), row(1, 100_000)], 150_000, [], "x")
