"""Negamax self-play ([play] negamax): one-ply transitions from the turn-based adapter, the
member storing them instead of the turn-to-turn step, DQN's negamax target, and the checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from wheeler2.agents.dqn import negamax_target  # noqa: E402
from wheeler2.envs.pettingzoo import make  # noqa: E402

from tests.test_agents_meet import TTT, Recorder, _play, _random_legal  # noqa: E402
from tests.test_dqn import _batch, _linear_dqn  # noqa: E402
from wheeler2 import cli  # noqa: E402

OWN, OTHER = slice(0, 18, 2), slice(1, 18, 2)  # tic-tac-toe planes: the mover's marks, the other's


def test_negamax_target_by_hand():
    reward = torch.tensor([0.0, 1.0, 0.0])
    discount = torch.tensor([0.9, 0.0, 0.9])
    legal = torch.tensor([[True, True, False], [True, True, True], [False, True, True]])
    target_q = torch.tensor([[0.5, -0.2, 9.0], [3.0, 3.0, 3.0], [7.0, 0.4, -0.6]])
    online = torch.tensor([[0.1, 0.3, 5.0], [0.0, 0.0, 0.0], [9.0, -1.0, 2.0]])
    online = online.masked_fill(~legal, -torch.inf)
    y = negamax_target(reward, discount, online, target_q, legal, 0.25)
    # Row 0: online picks action 1 among {0, 1}: best -0.2; mean over legal (0.5 - 0.2) / 2.
    # Row 1: terminal, y = r. Row 2: online picks 2 among {1, 2}: -0.6; mean (0.4 - 0.6) / 2.
    expected = [
        0.0 - 0.9 * (0.75 * -0.2 + 0.25 * 0.15),
        1.0,
        0.0 - 0.9 * (0.75 * -0.6 + 0.25 * -0.1),
    ]
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    # No random share: the opponent's best reply alone, its value negated (minimax).
    y0 = negamax_target(reward, discount, online, target_q, legal, 0.0)
    np.testing.assert_allclose(y0.numpy(), [0.9 * 0.2, 1.0, 0.9 * 0.6], rtol=1e-6)


def test_dqn_learns_the_negamax_target_where_the_space_says_so():
    agent = _linear_dqn(negamax=0.5, loss="mse")
    out = agent.learn(_batch())
    # As tests/test_dqn.py's batch: online Q(s') -> argmax [0, 1]; target Q(s') = [[5, 4],
    # [3, 13]]: best replies [5, 13], means [4.5, 8]; V = .5 best + .5 mean = [4.75, 10.5];
    # y = r - .5 V = [2 - 2.375, -1 - 5.25]; Q(s, a) = [2, 3] -> td = [2.375, 9.25]
    np.testing.assert_allclose(out.td_error, [2.375, 9.25])


def test_a_ply_runs_from_the_move_to_the_opponents_view():
    env = make(TTT, {}, 4, 2)
    env.plies = True
    kinds = set()
    for obs, action, st in _play(env, 150, seed=2):
        ply = st.ply
        assert ply is not None
        for c in range(4):
            a = int(action[c])
            if ply.terminated[c]:  # the move ended the game: its reward is the outcome
                kinds.add("ended")
                assert st.terminated[c] and ply.reward[c] == st.infos[c]["outcome"]
                continue
            assert ply.reward[c] == 0.0
            # The opponent's view of the position the move left: the planes swap sides, the
            # mover's marks gain the square played, and the mask is the opponent's.
            mine = obs[c, OWN].copy()
            mine[a] = 1.0
            np.testing.assert_array_equal(ply.next_obs[c, OTHER], mine)
            np.testing.assert_array_equal(ply.next_obs[c, OWN], obs[c, OTHER])
            legal = obs[c, 18:].copy()
            legal[a] = 0.0
            np.testing.assert_array_equal(ply.next_obs[c, 18:], legal)
            if st.terminated[c] or st.truncated[c]:  # the opponent's reply ended it
                kinds.add("replied")
                assert ply.truncated[c] and st.infos[c]["outcome"] <= 0.0
            else:
                kinds.add("on")
                assert not ply.truncated[c]
    assert kinds == {"ended", "replied", "on"}


def test_without_negamax_no_ply_is_made():
    env = make(TTT, {}, 2, 0)
    _, _, st = next(_play(env, 1))
    assert st.ply is None


def test_the_tables_own_driven_moves_are_recorded_as_plies_at_once():
    env = make(TTT, {}, 2, 4)
    env.plies = True
    driver = Recorder({"self": _random_legal(9, 7)})
    env.attach_others(driver)
    moves = 0
    for _obs, _a, _st in _play(env, 80, seed=4):
        pass
    for _, s in driver.steps:
        (i,) = np.flatnonzero(s.valid)
        moves += 1
        if s.terminated[i]:
            assert s.reward[i] in (1.0, 0.0)  # only the mover's own move ends its ply
            continue
        assert s.reward[i] == 0.0
        mine = s.obs[i, OWN].copy()
        mine[s.action[i]] = 1.0
        np.testing.assert_array_equal(s.final_obs[i, OTHER], mine)
        np.testing.assert_array_equal(s.final_obs[i, OWN], s.obs[i, OTHER])
    assert moves > 100


SELFPLAY = """
[experiment]
name = "nm"
seed = 0
total_steps = 400
eval_every = 400
eval_episodes = 4
backend = "serial"
progress = false

[env]
id = "{env}"
num_envs = 2

[play]
negamax = true
random_share = 0.5
record_opponents = true

[buffer]
capacity = 2_000
batch_size = 16
n_step = {n_step}

[[team]]
algo = "{algo}"
role = "learner"
{agents}
[team.params]
hidden = [8]
{extra}
"""


@pytest.mark.parametrize(
    ("env", "algo", "n_step", "agents", "needle"),
    [
        (
            "pettingzoo:classic.tictactoe_v3",
            "dqn",
            3,
            'agents = ["player_*"]',
            "expected n_step = 1",
        ),
        (
            "pettingzoo:classic.tictactoe_v3",
            "ppo",
            1,
            'agents = ["player_*"]',
            "'ppo' cannot learn",
        ),
        ("pettingzoo:classic.tictactoe_v3", "dqn", 1, 'agents = ["player_1"]', "not both of"),
        ("CartPole-v1", "dqn", 1, "", "'CartPole-v1' is not a turn-based game"),
    ],
)
def test_check_refuses_negamax_where_it_cannot_hold(
    tmp_path, capsys, env, algo, n_step, agents, needle
):
    cfg = tmp_path / "nm.toml"
    cfg.write_text(SELFPLAY.format(env=env, algo=algo, n_step=n_step, agents=agents, extra=""))
    assert cli.main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {cfg}") and needle in err[0], err


def test_a_negamax_run_stores_plies_in_its_replay(tmp_path, monkeypatch):
    """The member hands the replay the ply, not the turn-to-turn step: every stored next
    observation is the opponent's view (one mark more than the move's, never two)."""
    from wheeler2.runtime import member as member_module

    stored: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    plain_step = member_module.Member.step

    def spy(self):
        add = self.writer.add

        def add_spy(obs, action, reward, next_obs, terminated, truncated, **kw):
            stored.append((obs.copy(), next_obs.copy(), np.asarray(terminated).copy()))
            return add(obs, action, reward, next_obs, terminated, truncated, **kw)

        self.writer.add = add_spy
        try:
            return plain_step(self)
        finally:
            self.writer.add = add

    monkeypatch.setattr(member_module.Member, "step", spy)
    cfg = tmp_path / "nm.toml"
    cfg.write_text(
        SELFPLAY.format(
            env="pettingzoo:classic.tictactoe_v3",
            algo="dqn",
            n_step=1,
            agents='agents = ["player_*"]',
            extra="learning_starts = 50",
        )
    )
    assert cli.main(["run", str(cfg), "--out", str(tmp_path / "runs")]) == 0
    assert stored
    for obs, nxt, term in stored:
        marks = obs[:, :18].sum(1)
        for row in np.flatnonzero(~term):
            assert nxt[row, :18].sum() == marks[row] + 1
            np.testing.assert_array_equal(nxt[row, OWN].sum(), obs[row, OTHER].sum())


@pytest.mark.parametrize(("negamax", "kept"), [(False, [2, 3]), (True, [0, 1, 2, 3])])
def test_negamax_records_the_random_players_moves_too(negamax, kept):
    """A return that follows the random player's moves would value the next ones as random
    play; a negamax ply bootstraps from the best reply whoever moved, so they are kept."""
    from wheeler2.env import GroupStep
    from wheeler2.runtime.opponents import RANDOM, Drivers

    class Own:
        def __init__(self):
            self.rows: list[int] = []

        def add(self, step, valid):
            self.rows.extend(np.flatnonzero(valid).tolist())

    drivers = Drivers(object(), {}, None, None, copies=2, act_dim=9)
    drivers.facing[:] = [RANDOM, -1]  # copy 0 faces the random player, copy 1 the policy
    drivers.own_recorder = own = Own()
    drivers.record_random = negamax
    rows = 4  # two seats per copy
    step = GroupStep(
        obs=np.zeros((rows, 27), np.float32),
        action=np.zeros(rows, np.int64),
        reward=np.zeros(rows, np.float32),
        terminated=np.zeros(rows, bool),
        truncated=np.zeros(rows, bool),
        final_obs=np.zeros((rows, 27), np.float32),
        valid=np.ones(rows, bool),
    )
    drivers.record("self", step)
    assert own.rows == kept
