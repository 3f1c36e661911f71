"""Agents that meet (docs/envs.md): turn-based games with action masks, other tables' agents
driven by their policies (joint play), the self-play pool, head-to-head tallies, and the checks
that refuse a team that cannot meet."""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo", reason="needs pettingzoo")

from wheeler2.envs.pettingzoo import PettingZooVecEnv, make  # noqa: E402

from tests.test_pettingzoo import Relay  # noqa: E402
from wheeler2 import checkpoint as ckpt  # noqa: E402
from wheeler2 import cli  # noqa: E402
from wheeler2.env import GroupStep  # noqa: E402
from wheeler2.env import legal_actions as legal_mask  # noqa: E402
from wheeler2.runtime.evaluation import EvalResult, tally  # noqa: E402
from wheeler2.runtime.opponents import (  # noqa: E402
    POOL_KEY,
    Drivers,
    OpponentPool,
    random_legal_rows,
)

TTT = "classic.tictactoe_v3"


class Recorder:
    """An OtherAgents driver: a fixed policy per group, every recorded step kept."""

    def __init__(self, policies):
        self.policies = policies
        self.steps: list[tuple[str, GroupStep]] = []
        self.ended: list[tuple[int, float]] = []

    def act(self, group, obs):
        return self.policies[group](obs)

    def record(self, group, step):
        # A copy: the adapter may reuse the object once record returns.
        self.steps.append((group, copy.deepcopy(step)))

    def episode_ended(self, copy, outcome):
        self.ended.append((copy, outcome))


def _random_legal(act_dim, seed=0):
    rng = np.random.default_rng(seed)
    return lambda obs: random_legal_rows(obs, act_dim, rng)


def _play(env, steps, seed=0):
    """(obs, action, step) of random legal play, one vector step at a time (a generator: the
    env's own state is that of the step just yielded)."""
    policy = _random_legal(env.info.act_dim, seed)
    obs = env.reset(seed=seed).obs
    for _ in range(steps):
        action = policy(obs)
        st = env.step(action)
        yield obs, action, st
        obs = st.obs


# -- joint play in a Parallel env -------------------------------------------------------------


@pytest.fixture
def relay(monkeypatch):
    """tests/test_pettingzoo.py's Relay under an importable id: walkers w0-w2 and a coach."""
    module = types.ModuleType("relay_meet_v0")
    module.parallel_env = lambda **kw: Relay(**kw)
    monkeypatch.setitem(sys.modules, "relay_meet_v0", module)
    return "relay_meet_v0"


def test_claimed_agents_act_by_their_tables_policy_and_their_steps_are_recorded(relay):
    env = PettingZooVecEnv(relay, {}, 2, 0, agents=["w*"], groups={"coaches": ["coach"]})
    assert list(env.groups) == ["coaches"] and env.groups["coaches"].info.obs_dim == 3
    driver = Recorder({"coaches": lambda obs: np.full(len(obs), 2, np.int64)})
    env.attach_others(driver)
    env.reset(seed=0)
    for _ in range(7):  # past the horizon of 5: the copies reset once
        env.step(np.zeros((env.num_envs, 1), np.float32))
    for env_copy in env.copies:
        assert env_copy.coach_actions and all(a == 2 for a in env_copy.coach_actions)
    assert len(driver.steps) == 7 and all(g == "coaches" for g, _ in driver.steps)
    first = driver.steps[0][1]
    assert first.valid.all()
    np.testing.assert_array_equal(first.obs[:, 0], [0.0, 0.0])  # the coach sees [t, 0, 0]
    np.testing.assert_array_equal(first.final_obs[:, 0], [1.0, 1.0])
    ends = [s for _, s in driver.steps if s.truncated.any()]
    assert len(ends) == 1 and ends[0].truncated.all() and not ends[0].terminated.any()


def test_driven_agents_get_their_tables_team_reward_under_reward_mode_sum(relay):
    # The walkers' own copies give each walker the walkers' sum; driven in the coach's copies,
    # their recorded steps must carry the same reward.
    own = make(relay, {"agents": ["w*"], "reward_mode": "sum"}, 1, 0)
    own.reset(seed=0)
    team = own.step(np.zeros((3, 1), np.float32)).reward
    env = PettingZooVecEnv(
        relay, {}, 1, 0, agents=["coach"], reward_mode="sum", groups={"walkers": ["w*"]}
    )
    driver = Recorder({"walkers": lambda obs: np.zeros((len(obs), 1), np.float32)})
    env.attach_others(driver)
    env.reset(seed=0)
    env.step(np.zeros(1, np.int64))
    np.testing.assert_allclose(driver.steps[0][1].reward, team)
    assert team.tolist() == [6.0, 6.0, 6.0]


def test_without_a_driver_the_claimed_agents_act_at_random(relay):
    env = PettingZooVecEnv(relay, {}, 1, 0, agents=["w*"], groups={"coaches": ["coach"]})
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.zeros((env.num_envs, 1), np.float32))
    assert len(set(env.copies[0].coach_actions)) > 1


# -- turn-based games ---------------------------------------------------------------------------


def test_turn_based_rows_are_the_seat_with_its_mask_and_seats_rotate():
    env = make(TTT, {}, 4, 0)
    assert env.info.action_mask and env.info.obs_dim == 27 and env.num_envs == 4
    first = env.reset(seed=0).obs
    # Copies 0 and 2 move first (empty board); 1 and 3 second (one mark down already).
    assert [env.seat_of(c) for c in range(4)] == ["player_1", "player_2"] * 2
    assert legal_mask(first, 9).sum(axis=1).tolist() == [9, 8, 9, 8]
    seen: dict[int, list[str]] = {c: [env.seat_of(c)] for c in range(4)}
    for _obs, _action, st in _play(env, 60):
        # The mask columns are the env's own mask for the seat, move by move.
        for c in range(4):
            if not (st.terminated[c] or st.truncated[c]):
                raw = env.copies[c].observe(env.seat_of(c))["action_mask"]
                np.testing.assert_array_equal(st.obs[c, -9:], raw)
            else:
                seen[c].append(env.seat_of(c))
    assert all(len(s) >= 3 and s[0] != s[1] and s[0] == s[2] for s in seen.values())


def test_a_seat_transition_runs_turn_to_turn_and_ends_with_the_outcome():
    env = make(TTT, {}, 3, 1)
    outcomes = []
    for obs, _action, st in _play(env, 200, seed=1):
        for c in range(3):
            own_before = obs[c, 0:18:2].sum()  # channel 0: the seat's own marks
            if st.terminated[c]:
                outcome = st.infos[c]["outcome"]
                assert st.reward[c] == outcome and outcome in (-1.0, 0.0, 1.0)
                outcomes.append(outcome)
            else:
                # One move of the seat and one of the opponent in between: two more marks.
                assert st.reward[c] == 0.0
                assert st.final_obs[c, :18].sum() == obs[c, :18].sum() + 2
                assert st.final_obs[c, 0:18:2].sum() == own_before + 1
    assert set(outcomes) == {-1.0, 0.0, 1.0}


def test_an_illegal_move_never_reaches_the_env():
    env = make(TTT, {}, 1, 0)
    obs = env.reset(seed=0).obs
    env.step(np.array([4]))
    taken = int(np.flatnonzero(~legal_mask(env._obs, 9)[0])[0])
    with pytest.raises(ValueError, match="illegal action"):
        env.step(np.array([taken]))
    assert obs.shape == (1, 27)


def test_driven_seats_are_recorded_turn_to_turn_with_their_own_rewards():
    env = make(TTT, {}, 2, 3)
    driver = Recorder({"self": _random_legal(9, 5)})
    env.attach_others(driver)
    results = []
    for _obs, _a, st in _play(env, 120, seed=3):
        for c in range(2):
            if st.terminated[c]:
                results.append(st.infos[c]["outcome"])
    assert len(driver.ended) == len(results) and [o for _, o in driver.ended] == results
    finals = [s for _, s in driver.steps if s.terminated.any()]
    assert len(finals) == len(results)
    # Zero-sum: the driven seat's last reward is the negative of the member's outcome.
    assert sorted(float(s.reward[s.terminated][0]) for s in finals) == sorted(-r for r in results)
    for _, s in driver.steps:
        i = np.flatnonzero(s.valid)
        assert len(i) == 1 and s.obs[i[0], -9:][s.action[i[0]]] == 1.0  # a legal move


def test_random_legal_rows_draws_uniformly_among_legal_actions():
    rng = np.random.default_rng(0)
    obs = np.zeros((30_000, 4), np.float32)
    obs[:, 1], obs[:, 3] = 1.0, 1.0  # actions 0 and 2 of 3 legal
    counts = np.bincount(random_legal_rows(obs, 3, rng), minlength=3)
    assert counts[1] == 0 and abs(counts[0] - counts[2]) < 600


# -- the pool -----------------------------------------------------------------------------------


def _module(value):
    m = torch.nn.Linear(2, 1)
    with torch.no_grad():
        m.weight.fill_(value)
    return m


def test_pool_snapshots_on_schedule_and_keeps_the_newest():
    pool = OpponentPool(size=3, every=10, sampling="uniform", seed=0)
    taken = [pool.maybe_snapshot(_module(u), u) for u in range(0, 60, 5)]
    assert taken == [True, False] * 6
    assert [s.updates for s in pool.snapshots] == [30, 40, 50]
    assert float(pool.snapshots[-1].weights["weight"][0, 0]) == 50.0


def test_pool_sampling_rules():
    latest = OpponentPool(size=4, every=1, sampling="latest", seed=0)
    uniform = OpponentPool(size=4, every=1, sampling="uniform", seed=0)
    by_rate = OpponentPool(size=4, every=1, sampling="win_rate", seed=0)
    for pool in (latest, uniform, by_rate):
        for u in range(3):
            pool.maybe_snapshot(_module(u), u)
    assert {latest.draw() for _ in range(50)} == {-1}
    assert {uniform.draw() for _ in range(300)} == {-1, 0, 1, 2}
    for _ in range(40):  # the table beats snapshots 0 and 1 and the current, loses to 2
        for index, outcome in ((0, 1.0), (1, 1.0), (2, -1.0), (-1, 1.0)):
            by_rate.result(index, outcome)
    draws = np.array([by_rate.draw() for _ in range(500)])
    assert (draws == 2).mean() > 0.9


def test_pool_state_round_trips_weights_records_and_draws():
    pool = OpponentPool(size=4, every=1, sampling="uniform", seed=7)
    for u in range(3):
        pool.maybe_snapshot(_module(u), u)
    pool.result(1, 1.0)
    state = pool.state_dict()
    copy = OpponentPool(size=4, every=1, sampling="uniform", seed=99)
    copy.load_state_dict(state)
    assert [s.wins for s in copy.snapshots] == [0.0, 1.0, 0.0] and copy.next_at == pool.next_at
    assert [copy.draw() for _ in range(20)] == [pool.draw() for _ in range(20)]


def test_pool_state_keeps_the_current_policys_record():
    # "win_rate" weighs the live policy by its record as it weighs the snapshots: a resumed
    # pool must draw as the one that was saved.
    pool = OpponentPool(size=4, every=1, sampling="win_rate", seed=3)
    for u in range(2):
        pool.maybe_snapshot(_module(u), u)
    for _ in range(30):
        pool.result(-1, -1.0)  # the current policy beats the table
        pool.result(0, 1.0)
        pool.result(1, 1.0)
    copy = OpponentPool(size=4, every=1, sampling="win_rate", seed=3)
    copy.load_state_dict(pool.state_dict())
    assert (copy.current.wins, copy.current.games) == (0.0, 30.0)
    assert [copy.draw() for _ in range(50)] == [pool.draw() for _ in range(50)]


class _Actor:
    """The least an agent needs to be snapshotted: an actor (sync.pull_target)."""

    def __init__(self, value):
        self.actor = _module(value)


def test_a_game_against_a_dropped_snapshot_is_scored_to_no_other():
    pool = OpponentPool(size=2, every=1, sampling="uniform", seed=0)
    drivers = Drivers(_Actor(0.0), {}, pool, _Actor(-1.0), copies=3)
    drivers.after_update(0)
    drivers.after_update(1)  # snapshots of updates 0 and 1: the pool is full
    drivers.facing[:] = [0, 1, -1]
    drivers.after_update(2)  # updates 0 goes; 1 and 2 stay, at indices 0 and 1
    assert [s.updates for s in pool.snapshots] == [1, 2]
    assert drivers.facing[1] == 0 and drivers.facing[2] == -1  # still the opponents drawn
    drivers.episode_ended(1, 1.0)  # copy 1 beat the snapshot of updates 1
    drivers.episode_ended(0, -1.0)  # copy 0's opponent left the pool mid-game
    assert [(s.updates, s.wins, s.games) for s in pool.snapshots] == [(1, 1.0, 1.0), (2, 0.0, 0.0)]
    assert pool.current.games == 0.0


def test_a_snapshot_plays_as_the_table_did_with_its_observation_statistics(tmp_path: Path):
    from wheeler2.config import load
    from wheeler2.runtime.opponents import build_drivers
    from wheeler2.runtime.parts import make_agent, make_env, space_info
    from wheeler2.runtime.plan import plan_team
    from wheeler2.task import Head, RewardHeads

    cfg = tmp_path / "ttt.toml"
    cfg.write_text(SELF_PLAY.format(steps=600))
    config = load(cfg, ["team.0.params.normalize_obs=true"])
    plan = plan_team(config)[0]
    env = make_env(config, 2, 0, plan, {})
    space = space_info(env.info, RewardHeads([Head("env", 1.0, None)], None))
    agent = make_agent(config, plan, space, 0)
    drivers = build_drivers(config, plan, env, agent, space, {}, 0)
    assert drivers is not None and drivers.pool is not None
    rng = np.random.default_rng(0)
    dim, act_dim = env.info.obs_dim, env.info.act_dim
    # Statistics far from the fresh normalizer's (mean 0, std 1): most squares taken.
    agent.obs_norm.update((rng.random((256, dim)) < 0.9).astype(np.float32))
    drivers.after_update(0)
    rows = (rng.random((256, dim)) < 0.5).astype(np.float32)
    rows[:, -act_dim:] = 1.0  # every move legal
    live = agent.act(rows, explore=False).action
    snap = drivers.load_snapshot(0).act(rows, explore=False).action
    np.testing.assert_array_equal(snap, live)
    env.close()


SELF_PLAY = """
[experiment]
name = "ttt"
seed = 0
total_steps = {steps}
eval_every = 300
eval_episodes = 4
progress = false

[env]
id = "pettingzoo:classic.tictactoe_v3"
num_envs = 2

[play]
opponents = "uniform"
snapshot_every = 20
pool_size = 50
eval_vs = ["random", "pool"]

[buffer]
capacity = 2_000
batch_size = 16

[[team]]
algo = "dqn"
role = "learner"
agents = ["player_*"]
[team.params]
learning_starts = 50
hidden = [16]
"""


def test_self_play_run_reports_matches_and_its_pool_survives_resume(tmp_path: Path, capsys):
    cfg = tmp_path / "ttt.toml"
    cfg.write_text(SELF_PLAY.format(steps=600))
    out = tmp_path / "runs"
    assert cli.main(["run", str(cfg), "--out", str(out)]) == 0, capsys.readouterr()
    run_dir = next(out.glob("ttt-*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    matches = summary["eval"][-1]["matches"]
    assert {"vs_random/win", "vs_random/win_first", "vs_pool/win", "elo"} <= set(matches)
    assert (
        abs(matches["vs_random/win"] + matches["vs_random/draw"] + matches["vs_random/loss"] - 1)
        < 1e-9
    )
    metrics = (run_dir / "metrics.csv").read_text()
    assert "vs_random/win" in metrics and "elo" in metrics

    latest = run_dir / "checkpoints" / "latest.pt"
    payload = ckpt.load(latest)
    state = payload["members"]["dqn"][POOL_KEY]
    kept = len(state["snapshots"])
    assert kept >= 3
    for snap in state["snapshots"]:  # a mark only the saved pool carries
        snap["wins"] = 12_345.0
    # Rewind the run to the middle, as if it had been stopped there.
    payload["member_steps"] = {"dqn": 300}
    payload["run"].update(env_steps=300, evals=payload["run"]["evals"][:1])
    ckpt.save(latest, payload)
    assert cli.main(["resume", str(run_dir)]) == 0, capsys.readouterr()
    after = ckpt.load(latest)["members"]["dqn"][POOL_KEY]["snapshots"]
    # Every snapshot from before the stop is back (with the mark only the saved pool carried),
    # and the resumed half added its own after them.
    assert sum(s["wins"] >= 12_345.0 for s in after) == kept < len(after)


# -- head-to-head tally -------------------------------------------------------------------------


def test_tally_counts_each_seat_from_the_seat_played():
    class Seats:
        seats = ["player_1", "player_2"]
        possible_agents = ["player_1", "player_2"]

    class Second:  # a table that claims the second seat only
        seats = ["player_2"]
        possible_agents = ["player_1", "player_2"]

    result = EvalResult(0.0, 0.0, None, returns=[1.0, -1.0, 0.0, 1.0, 1.0, 0.0])
    t = tally(Seats(), result)
    assert (t.wins, t.draws, t.losses) == (3, 2, 1)
    fig = t.figures("vs_random")
    # Copies 0, 2, 4 moved first: win, draw, win; copies 1, 3, 5 second: loss, win, draw.
    assert fig["vs_random/win_first"] == pytest.approx(2 / 3)
    assert fig["vs_random/nonloss_second"] == pytest.approx(2 / 3)
    assert fig["vs_random/win"] == pytest.approx(0.5)
    assert set(tally(Second(), result).figures("x")) == {
        "x/win",
        "x/draw",
        "x/loss",
        "x/win_second",
        "x/nonloss_second",
    }


# -- checks -------------------------------------------------------------------------------------

TAG = """
[experiment]
total_steps = 1000
eval_every = 500
backend = "serial"

[env]
id = "pettingzoo:mpe2.simple_tag_v3"
kwargs = {{ continuous_actions = true, max_cycles = 25 }}

[play]
joint = true

[[team]]
name = "predators"
algo = "ddpg"
role = "learner"
agents = {predators}
[team.params]
hidden = [8]

[[team]]
name = "prey"
algo = "ppo"
role = "learner"
table = "prey"
agents = ["agent_*"]
[team.params]
hidden = [8]
{extra}
"""


@pytest.mark.parametrize(
    ("predators", "extra", "needle"),
    [
        ('["adversary_0", "adversary_1"]', "", "'adversary_2' is claimed by no table"),
        (
            '["adversary_0", "adversary_1"]',
            '[[team]]\nname = "x"\nalgo = "ddpg"\nrole = "learner"\ntable = "x"\n'
            'agents = ["adversary_1", "adversary_2"]',
            "'adversary_1' is claimed by tables 'main' and 'x'",
        ),
        ('["adversary_*"]', "normalize_obs = true", "normalize_obs"),
    ],
)
def test_check_refuses_a_team_that_cannot_meet(tmp_path, capsys, predators, extra, needle):
    cfg = tmp_path / "tag.toml"
    cfg.write_text(TAG.format(predators=predators, extra=extra))
    assert cli.main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {cfg}") and needle in err[0]


JOINT = """
[experiment]
name = "joint"
seed = 0
total_steps = 600
eval_every = 600
eval_episodes = 2
backend = "{backend}"
progress = false

[env]
id = "pettingzoo:mpe2.simple_tag_v3"
kwargs = {{ continuous_actions = true, max_cycles = 25 }}
num_envs = 2

[play]
joint = true
pull_every = 50

[buffer]
capacity = 5_000
batch_size = 16

[[team]]
name = "predators"
algo = "ddpg"
role = "learner"
agents = ["adversary_*"]
[team.params]
hidden = [8]
learning_starts = 100

[[team]]
name = "prey"
algo = "ppo"
role = "learner"
table = "prey"
agents = ["agent_*"]
[team.params]
hidden = [8]
n_steps = 25
batch_size = 25
"""


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_joint_run_drives_each_table_in_the_others_copies(tmp_path, capsys, backend):
    cfg = tmp_path / "joint.toml"
    cfg.write_text(JOINT.format(backend=backend))
    assert cli.main(["run", str(cfg), "--out", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    summary = json.loads(next((tmp_path / "runs").glob("joint-*/summary.json")).read_text())
    members = summary["members"]
    # Each member drove the other table's agents with pulled weights (a version was taken).
    assert members["prey"]["driven/main/steps"] > 0
    assert members["predators"]["driven/prey/steps"] > 0
    assert "driven/main/sync_version_lag" in members["prey"]
    # The budget counts each member's own agents only...
    own = members["predators"]["env_steps"]
    assert members["prey"]["env_steps"] + own == 600
    # ... but the predators' replay also took their steps from the prey's copies: at one
    # update per insert, the learner made more updates than its own rows could feed.
    assert members["predators"]["updates"] > own


TWO_TABLES = """
[experiment]
name = "xo"
total_steps = 400
eval_every = 400
eval_episodes = 4
progress = false

[env]
id = "pettingzoo:classic.tictactoe_v3"
num_envs = 2

[play]
joint = true
pull_every = 50
eval_vs = ["random", "tables"]

[buffer]
capacity = 1_000
batch_size = 16

[[team]]
name = "x"
algo = "dqn"
role = "learner"
agents = ["player_1"]
[team.params]
learning_starts = 50
hidden = [8]

[[team]]
name = "o"
algo = "ppo"
role = "learner"
table = "o"
agents = ["player_2"]
[team.params]
hidden = [8]
n_steps = 16
batch_size = 32
"""


def test_two_tables_meet_in_a_turn_based_game_and_are_scored_against_each_other(tmp_path, capsys):
    cfg = tmp_path / "xo.toml"
    cfg.write_text(TWO_TABLES)
    assert cli.main(["run", str(cfg), "--out", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    summary = json.loads(next((tmp_path / "runs").glob("xo-*/summary.json")).read_text())
    x = summary["eval"][-1]["matches"]
    o = summary["tables"]["o"]["eval"][-1]["matches"]
    # X moves first, O second; each learner's eval scored it against the other table (whose
    # weights it pulled, so the two sides need not be the same snapshot pair).
    assert "vs_tables/win_first" in x and "vs_tables/win_second" in o
    for side in (x, o):
        wdl = [side[f"vs_tables/{k}"] for k in ("win", "draw", "loss")]
        assert sum(wdl) == pytest.approx(1.0)
    assert summary["members"]["o"]["driven/main/steps"] > 0


def test_opponent_epsilon_mixes_random_legal_moves_into_self_play():
    from wheeler2.runtime.opponents import Drivers

    class Fixed:  # always the first legal action
        def act(self, obs, explore):
            class Out:
                action = legal_mask(obs, 9).argmax(axis=1)

            return Out()

    obs = np.zeros((4000, 27), np.float32)
    obs[:, 18:] = 1.0
    obs[:, 18] = 0.0  # action 0 illegal: the fixed policy plays 1
    plain = Drivers(Fixed(), {}, None, None, copies=4000, act_dim=9)
    assert set(plain.act("self", obs)) == {1}
    mixed = Drivers(Fixed(), {}, None, None, copies=4000, act_dim=9, epsilon=0.25)
    moves = mixed.act("self", obs)
    assert 0 not in moves  # still legal
    odd = (moves != 1).mean()  # a random legal move differs from 1 in 7 of 8 draws
    assert abs(odd - 0.25 * 7 / 8) < 0.03


def _first_legal(obs):
    return legal_mask(obs, 9).argmax(axis=1)


def test_random_opening_randomizes_only_the_opponents_opening_moves():
    """[play] random_opening = 2: the self-play opponent's move among the game's first two
    plies is random (whichever seat it has), its later moves its policy's."""

    assert all(a == policy for _, a, policy in _opponent_moves(0))
    moves = _opponent_moves(2)
    later = [a == policy for p, a, policy in moves if p >= 2]
    assert len(later) > 100 and all(later)
    early = [a for p, a, _ in moves if p < 2]
    assert len(early) > 50 and len(set(early)) >= 7  # spread over the board


def test_random_opening_min_draws_each_games_opening_length():
    """[play] random_opening = 4, random_opening_min = 1: each game's opening length is drawn
    from 1..4, so the opponent's first move is always random, its move at ply 2 played by its
    policy in the games that drew 1 or 2 (half), and every move from ply 4 on is its policy's.
    With the fixed length 4 the move at ply 2 is always random."""

    def policy_share(moves, ply):
        same = [a == policy for p, a, policy in moves if p == ply]
        assert len(same) > 60
        return float(np.mean(same))

    drawn = _opponent_moves(4, opening_min=1)
    fixed = _opponent_moves(4)
    # A random move among the 7 legal ones at ply 2 matches the policy's 1 time in 7.
    assert policy_share(fixed, 2) < 0.3
    assert 0.4 < policy_share(drawn, 2) < 0.75  # 1/2 + 1/2 * 1/7 expected
    assert policy_share(drawn, 0) < 0.3  # random: 1 in 9
    assert all(a == policy for p, a, policy in drawn if p >= 4)


def test_random_start_plays_the_first_moves_of_both_seats_at_random():
    """[play] random_start = 1: every game's first move is random, whoever's it is: the table
    meets a board with one random mark as second player, and as first player its own first
    mark is already placed (then the opponent answers) when it first acts."""

    def first_boards(start):
        env = make(TTT, {}, 8, 0)
        env.random_start = start
        env.attach_others(Recorder({"self": _first_legal}))
        boards = []  # (seat, own marks, opponent marks, square of the first mark)
        for k in range(25):
            obs = env.reset(seed=k).obs
            for c in range(8):
                own, theirs = obs[c, 0:18:2], obs[c, 1:18:2]
                first = int(np.flatnonzero(own if env.seat_of(c) == "player_1" else theirs)[0])
                boards.append((env.seat_of(c), int(own.sum()), int(theirs.sum()), first))
        return boards

    started = first_boards(1)
    assert {(seat, own, theirs) for seat, own, theirs, _ in started} == {
        ("player_1", 1, 1),
        ("player_2", 0, 1),
    }
    assert len({sq for *_, sq in started}) >= 7  # the first mark spread over the board
    with pytest.raises(IndexError):
        first_boards(0)  # the first player meets an empty board: no first mark to find
    env = make(TTT, {}, 2, 0)
    env.random_start = 9
    env.attach_others(Recorder({"self": _first_legal}))
    with pytest.raises(ValueError, match="random_start = 9: a game ended"):
        env.reset(seed=0)


def _opponent_moves(opening, opening_min=None):
    """(ply, action, the policy's action) of every self-play opponent move over 200 steps of
    8 tic-tac-toe copies whose own table plays the first legal square."""
    env = make(TTT, {}, 8, 0)
    env.random_opening = opening
    env.random_opening_min = opening_min
    env.attach_others(Recorder({"self": _first_legal}))
    moves: list[tuple[int, int, int]] = []
    plain = env._move

    def logged(c, agent, a, row=None):
        moves.append((int(env._plies[c]), a, int(_first_legal(row[None])[0])))
        plain(c, agent, a, row)

    env._move = logged
    obs = env.reset(seed=0).obs
    for _ in range(200):
        obs = env.step(_first_legal(obs)).obs
    return moves


def test_record_opponents_writes_the_pool_moves_but_not_the_random_players():
    from wheeler2.runtime.opponents import RANDOM, Drivers, _Recorder

    class Fixed:
        def act(self, obs, explore):
            return types.SimpleNamespace(action=_first_legal(obs))

    class Writer:
        def __init__(self):
            self.rows: list[tuple[np.ndarray, int, float, bool]] = []

        layout = types.SimpleNamespace(logp=False)

        def add(self, obs, action, reward, next_obs, terminated, truncated, logp, valid):
            for i in np.flatnonzero(valid):
                self.rows.append(
                    (obs[i].copy(), int(action[i]), float(reward[i, 0]), bool(terminated[i]))
                )

        def flush(self):
            pass

    env = make(TTT, {}, 4, 0)
    drivers = Drivers(Fixed(), {}, None, None, copies=4, act_dim=9)
    drivers.facing[:] = [-1, RANDOM, -1, RANDOM]  # copies 1 and 3 face the random player
    writer = Writer()
    drivers.own_recorder = _Recorder(writer)
    seen = Recorder({"self": lambda obs: drivers.act("self", obs)})
    seen.record = lambda group, step: (
        Recorder.record(seen, group, step),
        drivers.record(group, step),
    )
    env.attach_others(seen)
    obs = env.reset(seed=0).obs
    for _ in range(6):  # games of two first-legal players end in 4 seat moves: no reset yet
        obs = env.step(_first_legal(obs)).obs
    driven = [(i, s) for _, s in seen.steps for i in np.flatnonzero(s.valid)]
    # Rows are copy * 2 + seat: copies 0 and 2 (rows 0-1, 4-5) face the policy.
    from_policy = [(i, s) for i, s in driven if i // 2 in (0, 2)]
    assert from_policy and len(writer.rows) == len(from_policy) < len(driven)
    for (obs_row, action, reward, term), (i, s) in zip(writer.rows, from_policy, strict=True):
        np.testing.assert_array_equal(obs_row, s.obs[i])  # the mover's own view
        assert action == s.action[i] and reward == s.reward[i] and term == s.terminated[i]
    assert drivers.figures()["pool/recorded"] == len(writer.rows)
