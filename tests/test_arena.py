"""Agents that meet (issue 36.4): reference players, whole-episode play, head-to-head in both
seats, Elo ratings from results, and ``wheeler2 eval RUN --vs RUN2|random``.

The turn-based training adapter is not in yet, so no tictactoe run can be trained here: the
head-to-head path of ``eval --vs`` runs on a hand-written run directory whose tables are the
reference players (``load_tables`` replaced), and the full path, training included, on two
small simple_tag runs (predators and prey, tables of their own).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("pettingzoo.classic")
pytest.importorskip("mpe2")

from wheeler2.envs.arena import (  # noqa: E402
    Contender,
    Game,
    IllegalAction,
    head_to_head,
    mean_interval,
    play,
    versus,
)
from wheeler2.envs.players import (  # noqa: E402
    C4_COLS,
    c4_drop_row,
    connect_four_lookahead,
    random_player,
    tictactoe_perfect,
)

import wheeler2  # noqa: E402
from wheeler2 import api, cli  # noqa: E402
from wheeler2.rating import elo_difference, elo_ratings, expected_score  # noqa: E402

TTT = "pettingzoo:classic.tictactoe_v3"
C4 = "pettingzoo:classic.connect_four_v3"
TAG = "pettingzoo:mpe2.simple_tag_v3"


def lowest_legal(act_dim: int):
    """A deterministic weak player: always the lowest legal action."""

    def policy(rows: np.ndarray) -> np.ndarray:
        return np.argmax(np.asarray(rows)[:, -act_dim:] > 0.5, axis=1).astype(np.int64)

    return policy


def ttt_row(mine: list[int], theirs: list[int]) -> np.ndarray:
    """A tictactoe_v3 masked row: own squares, the opponent's, the empty ones legal."""
    row = np.zeros(27, np.float32)
    for k in mine:
        row[2 * k] = 1.0
    for k in theirs:
        row[2 * k + 1] = 1.0
    for k in set(range(9)) - set(mine) - set(theirs):
        row[18 + k] = 1.0
    return row


# -- players -------------------------------------------------------------------------------------


def test_random_player_is_uniform_over_legal_actions_only() -> None:
    rows = np.zeros((4000, 5), np.float32)
    rows[:, 2:] = [1.0, 0.0, 1.0]  # mask of 3 actions: 0 and 2 legal
    actions = random_player(3, seed=0)(rows)
    assert actions.dtype == np.int64 and set(actions.tolist()) == {0, 2}
    assert abs(np.mean(actions == 0) - 0.5) < 0.05
    free = random_player(4, seed=0, masked=False)(np.zeros((4000, 2), np.float32))
    assert set(free.tolist()) == {0, 1, 2, 3}


def test_perfect_player_takes_the_win_and_blocks() -> None:
    perfect = tictactoe_perfect()
    # Own squares 0 and 1 (a line 0-1-2 open), the opponent's 3 and 4 (threatening 5).
    assert perfect(ttt_row([0, 1], [3, 4])[None])[0] == 2
    # Nothing to win: it must block 5.
    assert perfect(ttt_row([0, 8], [3, 4])[None])[0] == 5
    with pytest.raises(ValueError, match=r"\[N, 27\]"):
        perfect(np.zeros((1, 26), np.float32))


def test_perfect_player_never_loses_to_random_in_either_seat() -> None:
    h = head_to_head(TTT, {}, tictactoe_perfect(), random_player(9, seed=1), 120, seed=0)
    assert h.losses == 0 and h.first.games == h.second.games == 60
    assert h.first.wins > 50 and h.second.wins > 35  # the first seat is the easier one


def test_perfect_player_draws_against_itself() -> None:
    h = head_to_head(TTT, {}, tictactoe_perfect(seed=2), tictactoe_perfect(seed=3), 30, seed=0)
    assert h.draws == 30


def test_connect_four_drop_lands_where_the_env_puts_the_piece() -> None:
    game = Game(C4)
    env = game.env
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    checked = 0
    for name in env.agent_iter():
        raw, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        occupied = raw["observation"].sum(axis=2) > 0
        col = int(rng.choice(np.flatnonzero(raw["action_mask"])))
        row = c4_drop_row(occupied, col)
        env.step(col)
        # Read the board from the mover's side: its own pieces are channel 0.
        after = env.observe(name)["observation"]
        assert after[row, col, 0] == 1 and not occupied[row, col], (row, col)
        checked += 1
    game.close()
    assert checked >= 7


def test_connect_four_lookahead_wins_now_then_blocks() -> None:
    def row(mine: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> np.ndarray:
        board = np.zeros((6, 7, 2), np.float32)
        for r, c in mine:
            board[r, c, 0] = 1
        for r, c in theirs:
            board[r, c, 1] = 1
        mask = (board[0].sum(axis=1) == 0).astype(np.float32)
        return np.concatenate([board.reshape(-1), mask])[None]

    player = connect_four_lookahead(seed=0)
    # Three of ours stacked in column 2 (rows 5, 4, 3): dropping there wins; the opponent's
    # three in a row on the bottom would win at column 6, but winning comes first.
    mine = [(5, 2), (4, 2), (3, 2)]
    theirs = [(5, 3), (5, 4), (5, 5)]
    assert player(row(mine, theirs))[0] == 2
    # Nothing to win: block the bottom row at column 6.
    assert player(row([(5, 2), (4, 2)], theirs))[0] == 6


def test_connect_four_lookahead_beats_random_by_a_wide_margin() -> None:
    h = head_to_head(C4, {}, connect_four_lookahead(seed=0), random_player(C4_COLS, 1), 60, 0)
    assert h.overall.score > 0.9 and h.first.wins > 25 and h.second.wins > 25


# -- the arena -----------------------------------------------------------------------------------


def test_an_illegal_action_is_refused_naming_agent_and_action() -> None:
    always_zero = lambda rows: np.zeros(len(rows), np.int64)  # noqa: E731
    # player_1 takes square 0; player_2 asks for it again.
    with pytest.raises(IllegalAction, match=r"player_2: illegal action 0; its legal actions"):
        play(TTT, {}, {"player_1": always_zero, "player_2": always_zero}, 1, seed=0)
    nine = lambda rows: np.full(len(rows), 9, np.int64)  # noqa: E731
    with pytest.raises(IllegalAction, match=r"player_1: action 9 is outside its space"):
        play(TTT, {}, {"player_1": nine, "player_2": always_zero}, 1, seed=0)
    with pytest.raises(ValueError, match=r"no driver for \['player_2'\]"):
        play(TTT, {}, {"player_1": always_zero}, 1)


def test_seats_alternate_and_results_count_from_a_side() -> None:
    seats_played: list[str] = []

    def recording(seat: str):
        weak = lowest_legal(9)

        def policy(rows: np.ndarray) -> np.ndarray:
            if not seats_played or seats_played[-1] != seat:
                seats_played.append(seat)
            return weak(rows)

        return policy

    a = {"player_1": recording("player_1"), "player_2": recording("player_2")}
    h = head_to_head(TTT, {}, a, tictactoe_perfect(), 6, seed=0)
    assert seats_played == ["player_1", "player_2"] * 3
    assert (h.first.games, h.second.games) == (3, 3) and h.seats == ("player_1", "player_2")
    # The weak player never wins against perfect play: counted from a's side, only losses
    # (and draws); the mirrored match reads the same games from the other side.
    assert h.wins == 0 and h.losses > 0
    mirror = head_to_head(TTT, {}, tictactoe_perfect(), lowest_legal(9), 6, seed=0)
    assert (mirror.wins, mirror.draws, mirror.losses) == (h.losses, h.draws, h.wins)
    # a first in game 0 of one match is b first in game 0 of the other: same game, other side.
    assert mirror.first.wins == h.second.losses and mirror.second.wins == h.first.losses


def test_parallel_play_scales_box_actions_and_offsets_discrete_ones(monkeypatch) -> None:
    received: list[dict] = []

    class TwoStep:
        """A two-agent Parallel API env of two steps: a Box actor and a Discrete(3, start=1)."""

        possible_agents = ["mover", "chooser"]
        box = spaces.Box(np.array([-2, 0], np.float32), np.float32(4))
        spaces_ = {
            "mover": (spaces.Box(-1, 1, (2, 2)), box),
            "chooser": (spaces.Box(0, 1, (3,)), spaces.Discrete(3, start=1)),
        }

        def __init__(self) -> None:
            self.agents: list[str] = []

        def observation_space(self, a):
            return self.spaces_[a][0]

        def action_space(self, a):
            return self.spaces_[a][1]

        def _obs(self):
            return {
                "mover": np.arange(4, dtype=np.float32).reshape(2, 2),
                "chooser": np.full(3, 0.5, np.float32),
            }

        def reset(self, seed=None):
            self.agents, self.t = list(self.possible_agents), 0
            return self._obs(), {}

        def step(self, actions):
            received.append(actions)
            self.t += 1
            done = self.t == 2
            rew = {"mover": 1.0, "chooser": float(actions["chooser"])}
            flags = {a: done for a in self.agents}
            if done:
                self.agents = []
            return self._obs(), rew, flags, dict.fromkeys(flags, False), {}

        def close(self) -> None:
            pass

    module = types.ModuleType("w2test_two_step")
    module.parallel_env = TwoStep  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "w2test_two_step", module)

    seen_rows = []

    def mover(rows: np.ndarray) -> np.ndarray:
        seen_rows.append(rows.copy())
        return np.array([[-1.0, 1.0]], np.float32)

    chooser = lambda rows: np.array([2], np.int64)  # noqa: E731
    totals = play("pettingzoo:w2test_two_step", {}, {"mover": mover, "chooser": chooser}, 2, 0)
    assert totals == [{"mover": 2.0, "chooser": 6.0}] * 2  # discrete 2 reaches the env as 3
    np.testing.assert_array_equal(received[0]["mover"], [-2.0, 4.0])  # [-1, 1] onto the Box
    assert received[0]["chooser"] == 3
    assert seen_rows[0].dtype == np.float32 and seen_rows[0].tolist() == [[0, 1, 2, 3]]

    bad = lambda rows: np.array([[np.nan, 0.0]], np.float32)  # noqa: E731
    with pytest.raises(IllegalAction, match="mover"):
        play("pettingzoo:w2test_two_step", {}, {"mover": bad, "chooser": chooser}, 1, 0)


def test_simple_tag_play_returns_each_agents_total() -> None:
    kwargs = {"continuous_actions": True, "max_cycles": 25, "reward_mode": "row"}
    game = Game(TAG, kwargs)  # reward_mode is the adapter's: it never reaches the env
    drivers = {a: game.random_driver(a, k) for k, a in enumerate(game.agent_names)}
    game.close()
    assert not game.turn_based
    out = play(TAG, kwargs, drivers, 5, seed=0)
    assert len(out) == 5 and all(set(ep) == set(drivers) for ep in out)
    # The prey is penalised for leaving the field and the predators rewarded for catching it,
    # so over a few random episodes some total is not zero.
    assert any(r != 0.0 for ep in out for r in ep.values())


def test_mean_interval() -> None:
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and 1.0 <= lo < 2.5 < hi <= 4.0
    assert mean_interval([2.0, 2.0]) == (2.0, 2.0, 2.0)


class FakeTable:
    def __init__(self, name: str, agents: tuple[str, ...], policy) -> None:
        self.name, self.agents, self.policy = name, agents, policy

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self.policy(rows)


def test_versus_self_play_table_goes_head_to_head_with_elo() -> None:
    mine = Contender("perfect", [FakeTable("selfplay", ("player_*",), tictactoe_perfect())])
    result = versus(TTT, {}, mine, Contender("random"), 20, seed=0)
    h = result.head_to_head
    assert h is not None and h.losses == 0 and h.first.games == h.second.games == 10
    assert result.elo is not None and result.elo > 150
    text = "\n".join(result.lines())
    assert "first (player_1)" in text and "Elo perfect - random: +" in text
    # A run whose tables each take one seat is not self-play: each table against the rest.
    seated = Contender(
        "seated",
        [
            FakeTable("one", ("player_1",), lowest_legal(9)),
            FakeTable("two", ("player_2",), lowest_legal(9)),
        ],
    )
    again = versus(TTT, {}, seated, mine, 4, seed=0)
    assert again.head_to_head is None and [m.table for m in again.matchups] == ["one", "two"]
    assert again.matchups[0].groups[1].label == "perfect:selfplay"
    assert again.matchups[0].groups[0].mean < 0  # the weak seat loses to perfect play
    with pytest.raises(ValueError, match="has no table that plays player_2"):
        versus(
            TTT, {}, mine, Contender("half", [FakeTable("one", ("player_1",), lowest_legal(9))]), 2
        )


def test_a_cooperative_two_agent_env_gets_returns_not_a_head_to_head() -> None:
    """Two agents do not make a game: a table claiming both agents of simple_reference (both
    always rewarded alike, never positive) was scored in wins, draws and losses, every episode
    a "loss", with an Elo figure."""
    idle = Contender("idle", [FakeTable("both", ("agent_*",), lambda rows: np.zeros(len(rows)))])
    result = versus("pettingzoo:mpe2.simple_reference_v3", {"max_cycles": 5}, idle,
                    Contender("random"), 2, seed=0)  # fmt: skip
    assert result.head_to_head is None and result.elo is None
    assert [m.table for m in result.matchups] == ["both"]
    assert "Elo" not in "\n".join(result.lines())


# -- ratings -------------------------------------------------------------------------------------


def test_seventy_five_percent_is_about_191_points() -> None:
    exact = elo_ratings([("a", "b", 75, 0, 25)], prior_draws=0)
    assert exact["a"] - exact["b"] == pytest.approx(400 * np.log10(3), abs=1e-6)
    assert exact["a"] == pytest.approx(-exact["b"])  # no anchor among them: mean 0
    # Draws are half points: 50 wins, 50 draws is 75% too.
    halves = elo_ratings([("a", "b", 50, 50, 0)], prior_draws=0)
    assert halves["a"] - halves["b"] == pytest.approx(exact["a"] - exact["b"])
    # With the weak prior and many games the difference barely moves.
    many = elo_difference(750, 0, 250)
    assert 189 < many < 191 and expected_score(many) == pytest.approx(0.75, abs=1e-3)


def test_ratings_are_symmetric_anchored_and_order_free() -> None:
    cycle = [("a", "b", 6, 2, 6), ("b", "c", 6, 2, 6), ("c", "a", 6, 2, 6)]
    assert all(abs(r) < 1e-6 for r in elo_ratings(cycle).values())
    matches = [("a", "random", 8, 1, 1), ("b", "random", 5, 0, 5), ("a", "b", 3, 1, 2)]
    ratings = elo_ratings(matches)
    assert ratings["random"] == 0.0 and ratings["a"] > ratings["b"] > -50
    shuffled = elo_ratings([(b, a, lost, d, w) for a, b, w, d, lost in reversed(matches)])
    assert shuffled == pytest.approx(ratings)
    assert elo_ratings(matches, anchor="b")["b"] == 0.0


def test_an_undefeated_player_stays_finite_and_rises_with_each_win() -> None:
    sweep = [elo_difference(w, 0, 0) for w in (1, 2, 5, 20, 100)]
    assert all(np.isfinite(sweep)) and sweep == sorted(sweep) and len(set(sweep)) == 5
    assert sweep[0] == pytest.approx(400 * np.log10(3))  # one win and the virtual draw: 75%
    with pytest.raises(ValueError, match="prior_draws > 0"):
        elo_difference(3, 0, 0, prior_draws=0)
    with pytest.raises(ValueError, match="against itself"):
        elo_ratings([("a", "a", 1, 0, 0)])


# -- wheeler2 eval --vs ----------------------------------------------------------------------------

TAG_RUN = """
[experiment]
name = "{name}"
seed = 0
total_steps = 40
eval_every = 40
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "pettingzoo:mpe2.simple_tag_v3"
kwargs = {{ continuous_actions = true, max_cycles = 10 }}

[[team]]
name = "predators"
algo = "ppo"
role = "learner"
agents = ["adversary_*"]
[team.params]
n_steps = 20
batch_size = 20
hidden = [8]

[[team]]
name = "prey"
algo = "ppo"
role = "learner"
table = "prey"
agents = ["agent_*"]
[team.params]
n_steps = 20
batch_size = 20
hidden = [8]
"""


@pytest.fixture(scope="module")
def tag_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("tag")
    (tmp / "tag.toml").write_text(TAG_RUN.format(name="tag"))
    return wheeler2.run(tmp / "tag.toml", out=str(tmp / "runs"))


def test_eval_vs_random_and_vs_a_run_on_simple_tag(tag_run: Path, capsys) -> None:
    tables = api.load_tables(tag_run)
    assert [(t.name, t.table, t.agents) for t in tables] == [
        ("predators", "main", ("adversary_*",)),
        ("prey", "prey", ("agent_*",)),
    ]
    assert cli.main(["eval", str(tag_run), "--vs", "random", "--episodes", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"table predators of {tag_run.name} vs random")
    assert "4 episodes" in out[0] and "(adversary_0, adversary_1, adversary_2)" in out[1]
    assert out[2].lstrip().startswith("random") and out[2].endswith("(agent_0)")
    assert out[3].startswith(f"table prey of {tag_run.name} vs random")

    # Against a run (itself here): its other table drives the agents this table does not.
    assert cli.main(["eval", str(tag_run), "--vs", str(tag_run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].lstrip().startswith(f"{tag_run.name}:prey") and out[2].endswith("(agent_0)")


def test_a_table_best_pt_holds_no_state_for_comes_from_latest(
    tag_run: Path, tmp_path: Path, capsys
) -> None:
    """best.pt is written when the lead's eval is best, with the states the coordinator holds:
    a table that had not reported yet is missing there, and eval --vs failed on it."""
    import shutil

    from wheeler2 import checkpoint as ckpt

    run = tmp_path / tag_run.name
    shutil.copytree(tag_run, run)
    best = run / "checkpoints" / "best.pt"
    payload = ckpt.load(best)
    del payload["members"]["prey"]
    ckpt.save(best, payload)
    tables = {t.table: t for t in api.load_tables(run)}
    assert not tables["main"].from_latest and tables["prey"].from_latest
    latest = ckpt.load(run / "checkpoints" / "latest.pt")["members"]["prey"]
    got = tables["prey"].agent.state_dict()
    assert all(torch.equal(got[k], v) for k, v in latest.items() if isinstance(v, torch.Tensor))
    assert cli.main(["eval", str(run), "--vs", "random", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "note: " in out and "'prey' from latest.pt" in out, out


def test_eval_vs_refuses_other_envs_and_missing_runs(tag_run: Path, tmp_path: Path, capsys):
    other = tmp_path / "spread"
    other.mkdir()
    text = (tag_run / "config.toml").read_text()
    (other / "config.toml").write_text(text.replace("simple_tag_v3", "simple_spread_v3"))
    assert cli.main(["eval", str(tag_run), "--vs", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("error: ")
        and "--vs needs two runs of one env" in err[0]
    )
    assert cli.main(["eval", str(tag_run), "--vs", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert cli.main(["eval", str(tmp_path / "nope"), "--vs", "random"]) == 2


TTT_RUN = """
[experiment]
name = "ttt"
seed = 0
total_steps = 100
eval_every = 50

[env]
id = "pettingzoo:classic.tictactoe_v3"

[[team]]
name = "selfplay"
algo = "dqn"
role = "learner"
agents = ["player_*"]
"""


def test_eval_vs_random_head_to_head_on_a_self_play_run(tmp_path: Path, monkeypatch, capsys):
    run = tmp_path / "ttt-run"
    run.mkdir()
    (run / "config.toml").write_text(TTT_RUN)

    def tables(run_dir, checkpoint="best"):
        assert Path(run_dir) == run and checkpoint == "best"
        return [FakeTable("selfplay", ("player_*",), tictactoe_perfect())]

    monkeypatch.setattr(api, "load_tables", tables)
    assert cli.main(["eval", str(run), "--vs", "random", "--episodes", "10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"ttt-run (table selfplay) vs random, {TTT}: 10 games, 5 first and 5 second")
    words = out[1].split()
    assert words[0] == "overall" and words[1::2][:3] == ["W", "D", "L"]
    assert words[6] == "0"  # perfect play never loses
    assert out[2].lstrip().startswith("first (player_1)")
    assert out[3].lstrip().startswith("second (player_2)")
    assert out[4].startswith("  Elo ttt-run - random: +")
    assert cli.main(["eval", str(run), "--vs", "random", "--video", "x.mp4"]) == 2
    assert "not with --vs" in capsys.readouterr().err
