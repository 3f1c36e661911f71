"""HER: relabelled rewards equal the relabel function's for every head, goals come from the
right part of the right episode, n-step returns are folded after relabelling."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig, ReplayError

GAMMA = 0.9


def relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN201
    """Two heads: sparse success and a shaped distance (plus the action, so every argument
    matters)."""
    dist = np.linalg.norm(achieved_goal - desired_goal, axis=-1)
    return np.stack([-(dist > 0.3).astype(np.float32), -dist + action[:, 0]], axis=1)


def _fill(replay: Replay, episodes: int, rng: np.random.Generator) -> dict:
    """Random walks; returns goal bytes -> list of (episode, step, is_last) that achieved it,
    and per episode its list of (pos, next_pos, action, desired, terminated)."""
    w = replay.writer(num_envs=1)
    achieved: dict[bytes, list] = {}
    trajectories = []
    for ep in range(episodes):
        length = int(rng.integers(2, 9))
        desired = rng.normal(size=(1, 2)).astype(np.float32)
        pos = rng.normal(size=(1, 2)).astype(np.float32)
        traj = []
        for t in range(length):
            act = rng.uniform(-1, 1, (1, 1)).astype(np.float32)
            nxt = (pos + rng.normal(scale=0.3, size=(1, 2))).astype(np.float32)
            last = t == length - 1
            term = np.array([last and ep % 2 == 0])
            trunc = np.array([last and ep % 2 == 1])
            reward = relabel(pos, act, nxt, nxt, desired)
            w.add(
                pos,
                act,
                reward,
                nxt,
                term,
                trunc,
                achieved_goal=pos,
                desired_goal=desired,
                next_achieved_goal=nxt,
            )
            achieved.setdefault(nxt.tobytes(), []).append((ep, t, last))
            traj.append((pos[0], nxt[0], act[0], desired[0], bool(term[0])))
            pos = nxt
        trajectories.append(traj)
    w.flush()
    return {"achieved": achieved, "trajectories": trajectories}


def _locate(rec: dict, obs: np.ndarray) -> tuple[int, int]:
    for ep, traj in enumerate(rec["trajectories"]):
        for t, step in enumerate(traj):
            if np.array_equal(step[0], obs):
                return ep, t
    raise AssertionError("sampled an observation that was never inserted")


@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_relabelled_rewards_and_goal_sources(strategy: str) -> None:
    rng = np.random.default_rng(7)
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=512,
        min_size=1,
        updates_per_insert=0,
        her=HerConfig(strategy, k=4),
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=1) as replay:
        rec = _fill(replay, 60, rng)
        b = replay.sample()
        obs, goal = b["obs"][:, :2], b["obs"][:, 2:]
        nxt, goal2 = b["next_obs"][:, :2], b["next_obs"][:, 2:]
        np.testing.assert_array_equal(goal, goal2)
        # Every head of every row is the relabel function's reward for the goal it carries.
        want = relabel(obs, b["action"], nxt, nxt, goal)
        np.testing.assert_allclose(b["reward"], want, rtol=1e-6, atol=1e-6)
        relabelled = 0
        for i in range(obs.shape[0]):
            ep, t = _locate(rec, obs[i])
            original = rec["trajectories"][ep][t][3]
            if np.array_equal(goal[i], original):
                continue
            relabelled += 1
            sources = rec["achieved"][goal[i].tobytes()]
            if strategy == "random":
                continue  # any stored step: found in `achieved` is all there is to check
            same = [(e, s, last) for e, s, last in sources if e == ep]
            assert same, "goal taken from another episode"
            if strategy == "future":
                assert any(s >= t for _, s, _ in same)
            elif strategy == "final":
                assert any(last for _, _, last in same)
        # k = 4: about 4/5 of the batch gets a new goal (stored desired goals are never an
        # achieved position here, so a changed goal is exactly a relabelled row).
        assert 0.7 < relabelled / obs.shape[0] < 0.9


def test_nstep_returns_are_folded_after_relabelling() -> None:
    rng = np.random.default_rng(8)
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=256,
        min_size=1,
        updates_per_insert=0,
        n_step=3,
        her=HerConfig("future", k=4),
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=2) as replay:
        rec = _fill(replay, 40, rng)
        b = replay.sample()
        for i in range(b["obs"].shape[0]):
            ep, t = _locate(rec, b["obs"][i, :2])
            goal = b["obs"][i, 2:]
            traj = rec["trajectories"][ep]
            ret = np.zeros(2)
            k = 0
            for k, (pos, nxt, act, _, _term) in enumerate(traj[t : t + 3], start=1):
                r = relabel(pos[None], act[None], nxt[None], nxt[None], goal[None])[0]
                ret += GAMMA ** (k - 1) * r
            discount = 0.0 if traj[t + k - 1][4] else GAMMA**k
            np.testing.assert_allclose(b["reward"][i], ret, rtol=1e-5, atol=1e-5)
            assert b["discount"][i] == pytest.approx(discount)
            np.testing.assert_array_equal(b["next_obs"][i, :2], traj[t + k - 1][1])


def test_future_window_includes_own_next_goal_and_reaches_episode_end() -> None:
    """``future`` draws the goal uniformly from the next achieved goals of steps t..T-1 of the
    transition's episode: offset 0 (its own next achieved goal, whose relabelled reward is the
    success reward) included, as in SB3's HerReplayBuffer and OpenAI baselines. One-step
    targets bootstrap through a truncated last step (discount gamma), not a terminated one."""
    length, episodes = 8, 6
    cfg = ReplayConfig(
        capacity=1024,
        batch_size=4096,
        min_size=1,
        updates_per_insert=0,
        prioritized=False,
        her=HerConfig("future", k=10_000),  # practically every row relabelled
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=3) as replay:
        w = replay.writer(num_envs=1)
        for ep in range(episodes):
            for t in range(length):
                # obs = (episode, step); the next achieved goal encodes the step it follows.
                obs = np.array([[ep, t]], np.float32)
                nag = np.array([[100 + ep, t]], np.float32)
                last = t == length - 1
                w.add(
                    obs,
                    np.zeros((1, 1), np.float32),
                    np.full((1, 2), -1.0, np.float32),
                    obs + 0.5,
                    np.array([last and ep % 2 == 0]),
                    np.array([last and ep % 2 == 1]),
                    achieved_goal=obs,
                    desired_goal=np.full((1, 2), -7.0, np.float32),
                    next_achieved_goal=nag,
                )
        b = replay.sample()
    ep, t = b["obs"][:, 0].astype(int), b["obs"][:, 1].astype(int)
    goal = b["obs"][:, 2:]
    rel = goal[:, 0] != -7.0
    assert rel.mean() > 0.99
    g_ep, g_t = goal[rel, 0].astype(int) - 100, goal[rel, 1].astype(int)
    np.testing.assert_array_equal(g_ep, ep[rel])  # same episode
    offset = g_t - t[rel]
    assert offset.min() == 0  # the transition's own next achieved goal is drawn
    assert (g_t <= length - 1).all() and (g_t == length - 1).any()
    # Uniform over the length - t candidates: offset 0 has probability 1 / (length - t).
    expected = (1.0 / (length - t[rel])).sum()
    assert abs((offset == 0).sum() - expected) < 4 * np.sqrt(expected)
    # A relabel to the own next goal is a success: reward 0 on the sparse head.
    assert (b["reward"][rel][offset == 0, 0] == 0.0).all()
    last = t == length - 1
    terminated = last & (ep % 2 == 0)
    np.testing.assert_allclose(b["discount"][terminated], 0.0)
    np.testing.assert_allclose(b["discount"][~terminated], GAMMA, rtol=1e-6)
    assert (last & ~terminated).any() and terminated.any()


@pytest.mark.parametrize("on", [False, True])
def test_terminate_on_goal_ends_relabelled_rows_where_the_new_goal_is_reached(on: bool) -> None:
    """With terminate_on_goal a relabelled row's discount is 0 exactly when its next achieved
    goal reaches the new goal (the `reached` function); real rows keep the env's termination.
    Off, every row keeps the stored flag (a relabelled row that reached its goal bootstraps)."""
    rng = np.random.default_rng(9)
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=512,
        min_size=1,
        updates_per_insert=0,
        her=HerConfig("future", k=4, terminate_on_goal=on),
    )

    def reached(achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        return np.linalg.norm(achieved_goal - desired_goal, axis=-1) <= 0.3

    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    kwargs = {"reached": reached} if on else {}
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=3, **kwargs) as replay:
        rec = _fill(replay, 60, rng)
        b = replay.sample()
    goal, nxt = b["obs"][:, 2:], b["next_obs"][:, :2]
    counts = {"relabelled_reached": 0, "relabelled_open": 0, "real": 0}
    for i in range(goal.shape[0]):
        ep, t = _locate(rec, b["obs"][i, :2])
        stored_term = rec["trajectories"][ep][t][4]
        if np.array_equal(goal[i], rec["trajectories"][ep][t][3]):
            counts["real"] += 1
            want = 0.0 if stored_term else GAMMA
        elif on:
            hit = bool(reached(nxt[i : i + 1], goal[i : i + 1])[0])
            counts["relabelled_reached" if hit else "relabelled_open"] += 1
            want = 0.0 if hit else GAMMA
        else:
            counts["relabelled_open"] += 1
            want = 0.0 if stored_term else GAMMA
        assert b["discount"][i] == pytest.approx(want), (i, counts)
    assert counts["real"] > 0 and counts["relabelled_open"] > 0
    if on:  # "future" includes the row's own next goal, so many relabelled rows reach theirs
        assert counts["relabelled_reached"] > 50, counts


def test_terminate_on_goal_needs_a_reached_function_and_one_step() -> None:
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    her = HerConfig("future", k=4, terminate_on_goal=True)
    for cfg, reached in [
        (ReplayConfig(capacity=64, batch_size=8, min_size=1, her=her), None),
        (ReplayConfig(capacity=64, batch_size=8, min_size=1, n_step=3, her=her), np.isfinite),
    ]:
        with pytest.raises(ReplayError, match="terminate_on_goal"):
            Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, reached=reached)


# -- the compiled goal choice (wheeler2/buffer/herjit.py) ---------------------------------------


def _encoded_fill(replay: Replay, episodes: int, length: int, heads: int = 2) -> None:
    """Episode ``ep``, step ``t``: obs (ep, t), next achieved goal (100 + ep, t), stored
    desired goal (-7, -7); every episode is ``length`` steps and ends truncated."""
    w = replay.writer(num_envs=1)
    for ep in range(episodes):
        for t in range(length):
            obs = np.array([[ep, t]], np.float32)
            w.add(
                obs,
                np.zeros((1, 1), np.float32),
                np.full((1, heads), -1.0, np.float32),
                obs + 0.5,
                np.array([False]),
                np.array([t == length - 1]),
                achieved_goal=obs,
                desired_goal=np.full((1, 2), -7.0, np.float32),
                next_achieved_goal=np.array([[100 + ep, t]], np.float32),
            )
    w.flush()


@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
@pytest.mark.parametrize("prioritized", [True, False])
def test_goal_steps_exactly_where_the_strategy_says_across_the_ring_end(
    strategy: str, prioritized: bool
) -> None:
    """A ring of 50 holding episodes of 12 (so episodes straddle the ring's end and the oldest
    one is partly overwritten): each relabelled goal is the next achieved goal of a step that
    is still stored, of the same episode (future: at or after t; final: its last step;
    episode: any of its stored steps), or of any stored step (random); the reward of every row
    is the relabel function's for the goal it carries."""
    capacity, length, episodes = 50, 12, 14  # 168 steps: the ring went round three times
    cfg = ReplayConfig(
        capacity=capacity,
        batch_size=2048,
        min_size=1,
        updates_per_insert=0,
        prioritized=prioritized,
        her=HerConfig(strategy, k=4),
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=11) as replay:
        _encoded_fill(replay, episodes, length)
        parts = [replay.sample() for _ in range(4)]
    b = {key: np.concatenate([p[key] for p in parts]) for key in ("obs", "next_obs", "reward")}
    b["action"] = np.concatenate([p["action"] for p in parts])
    first = episodes * length - capacity  # absolute number of the oldest stored step
    stored = {(n // length, n % length) for n in range(first, episodes * length)}
    ep, t = b["obs"][:, 0].astype(int), b["obs"][:, 1].astype(int)
    goal = b["obs"][:, 2:]
    rel = goal[:, 0] != -7.0
    # Every candidate goal step is stored here (an episode's later steps are newer than it; a
    # cut-off episode start is clamped to the oldest step), so no picked row may be dropped.
    n = rel.shape[0]
    assert abs(rel.sum() - 0.8 * n) < 4 * np.sqrt(n * 0.8 * 0.2)
    g_ep, g_t = goal[rel, 0].astype(int) - 100, goal[rel, 1].astype(int)
    assert all((e, s) in stored for e, s in zip(g_ep, g_t, strict=True))
    if strategy == "random":
        assert len(set(g_ep)) > 3  # from across the ring, not one episode
    else:
        np.testing.assert_array_equal(g_ep, ep[rel])
    if strategy == "future":
        assert (g_t >= t[rel]).all() and (g_t == t[rel]).any()
    elif strategy == "final":
        np.testing.assert_array_equal(g_t, length - 1)
    elif strategy == "episode":
        assert (g_t < t[rel]).any() and (g_t > t[rel]).any()
    # The next achieved goal of a row is (100 + ep, t); next_obs holds (ep, t) + 0.5.
    nag = np.stack([100 + ep, t], axis=1).astype(np.float32)
    want = relabel(b["obs"][:, :2], b["action"], b["next_obs"][:, :2], nag, goal)
    np.testing.assert_allclose(b["reward"][rel], want[rel], rtol=1e-6)
    np.testing.assert_array_equal(b["reward"][~rel], -1.0)  # the stored reward, untouched


@pytest.mark.parametrize("k", [1, 4, 8])
def test_relabel_fraction_is_k_over_k_plus_one(k: int) -> None:
    """Over many rows, the fraction of relabelled goals is k / (k + 1) within 4 standard
    deviations of a binomial draw (every goal step is usable here, so no row is dropped)."""
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=4096,
        min_size=1,
        updates_per_insert=0,
        her=HerConfig("future", k=k),
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=k) as replay:
        _encoded_fill(replay, 300, 10)
        n = rel = 0
        for _ in range(5):
            goal = replay.sample()["obs"][:, 2]
            n += goal.shape[0]
            rel += int((goal != -7.0).sum())
    p = k / (k + 1)
    assert abs(rel - n * p) < 4 * np.sqrt(n * p * (1 - p)), (rel, n, p)


def test_relabel_gets_whole_batches_and_matches_a_vectorized_compute_reward() -> None:
    """The relabel function is called once per sample with all relabelled rows (arrays of
    m rows, no per-row calls), and a goal env's vectorized ``compute_reward`` (here
    gymnasium-robotics' distance threshold) gives the same rewards row by row."""
    calls = []

    def compute_reward(achieved_goal, desired_goal, info):  # noqa: ANN001, ANN202
        d = np.linalg.norm(achieved_goal - desired_goal, axis=-1)
        return -(d > 0.05).astype(np.float32)

    def batched(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN202
        calls.append(obs.shape[0])
        return compute_reward(achieved_goal, desired_goal, None)[:, None]

    cfg = ReplayConfig(
        capacity=4096, batch_size=1024, min_size=1, updates_per_insert=0, her=HerConfig()
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=1, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=batched, seed=5) as replay:
        _encoded_fill(replay, 100, 10, heads=1)
        b = replay.sample()
    assert len(calls) == 1 and 700 < calls[0] < 940
    ep, t = b["obs"][:, 0].astype(int), b["obs"][:, 1].astype(int)
    nag = np.stack([100 + ep, t], axis=1).astype(np.float32)
    rel = b["obs"][:, 2] != -7.0
    for i in np.flatnonzero(rel)[:50]:  # one row at a time, as a per-row reference
        want = compute_reward(nag[i], b["obs"][i, 2:], None)
        assert b["reward"][i, 0] == want
    assert (b["reward"][rel, 0] == 0.0).any() and (b["reward"][rel, 0] == -1.0).any()


def test_a_goal_step_stored_in_slot_0_is_used() -> None:
    """Slot 0 is a slot like any other: an episode whose last step wrapped into slot 0 of the
    ring gets its rows relabelled with that step's goal ("final"), at the usual k / (k + 1)."""
    cfg = ReplayConfig(
        capacity=8,
        batch_size=512,
        min_size=1,
        updates_per_insert=0,
        prioritized=False,
        her=HerConfig("final", k=4),
    )
    layout = Layout(obs_dim=2, act_dim=1, num_heads=2, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=3) as replay:
        # Absolute steps 0-8 in a ring of 8: episode 2 is steps 6-8, and step 8 sits in slot 0.
        _encoded_fill(replay, episodes=3, length=3)
        b = replay.sample()
    ep, goal = b["obs"][:, 0].astype(int), b["obs"][:, 2:]
    rows = ep == 2
    rel = rows & (goal[:, 0] != -7.0)
    assert rows.sum() > 100  # 3 of the 8 stored steps
    assert abs(rel.sum() / rows.sum() - 0.8) < 0.15  # 5 standard deviations at ~190 rows
    np.testing.assert_array_equal(goal[rel], np.tile([102.0, 2.0], (int(rel.sum()), 1)))


def _discrete_her(relabel_fn, n_step: int = 1) -> Replay:  # noqa: ANN001
    """A bit-flipping-like buffer: discrete actions, 2-bit goals, one episode of 4 steps with
    action = step; every row relabelled (k large)."""
    cfg = ReplayConfig(
        capacity=16,
        batch_size=32,
        min_size=1,
        updates_per_insert=0,
        n_step=n_step,
        her=HerConfig("final", k=1000),
    )
    layout = Layout(obs_dim=1, act_dim=4, discrete=True, goal_dim=2)
    replay = Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel_fn)
    w = replay.writer(num_envs=1)
    g = np.zeros((1, 2), np.float32)
    for t in range(4):
        obs = np.full((1, 1), t, np.float32)
        w.add(
            obs,
            np.array([t]),
            np.zeros(1),
            obs + 1,
            np.array([t == 3]),
            np.zeros(1, bool),
            achieved_goal=g,
            desired_goal=g,
            next_achieved_goal=g + t,
        )
    return replay


@pytest.mark.parametrize("n_step", [1, 3])
def test_relabel_gets_discrete_actions_flat(n_step: int) -> None:
    """Discrete actions reach ``relabel`` as a flat int64 [m] array (as a discrete env's
    ``compute_reward`` or a bit-flipping reward expects), the stored action of each row, on
    the one-step path and on the n-step one (every step of the windows)."""
    seen = []

    def fn(obs, action, next_obs, achieved_goal, goal):  # noqa: ANN001, ANN202
        seen.append((obs[:, 0].copy(), action))
        return np.zeros(obs.shape[0], np.float32)

    with _discrete_her(fn, n_step) as replay:
        replay.sample()
    obs, action = seen[0]
    assert action.dtype == np.int64 and action.shape == obs.shape
    np.testing.assert_array_equal(action, obs.astype(np.int64))


def test_relabel_with_the_wrong_number_of_heads_is_refused_by_count() -> None:
    def two_heads(obs, action, next_obs, achieved_goal, goal):  # noqa: ANN001, ANN202
        return np.zeros((obs.shape[0], 2), np.float32)

    with _discrete_her(two_heads) as replay:
        with pytest.raises(ValueError, match="relabel returned 2 reward heads, expected 1"):
            replay.sample()
