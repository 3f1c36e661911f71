"""Forgetting (``[buffer] forget``, ``forget_keep``; wheeler2/buffer/forgetting.py): a full ring
keeps what its rule says, carried forward so that validity, the sum tree, n-step links and
HER's episodes stay consistent; the ratio gate counts only new inserts."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig, ReplayError
from wheeler2.buffer.storage import FORGET_CREDIT, MAX_PRIORITY, TOTAL

GAMMA = 0.5
CAP = 64


def _cfg(**keys: object) -> ReplayConfig:
    base: dict[str, object] = {"capacity": CAP, "min_size": 1, "updates_per_insert": 0}
    return ReplayConfig(**(base | keys))  # type: ignore[arg-type]


def _stored(replay: Replay) -> dict[str, np.ndarray]:
    st = replay.storage
    total = int(st.hdr[TOTAL])
    j = np.arange(max(0, total - CAP), total)
    slot = j % CAP
    ok = st.arrays["abs"][slot] == j
    j, slot = j[ok], slot[ok]
    out = {name: st.arrays[name][slot] for name in ("next", "episode", "step", "terminated")}
    out["abs"], out["code"] = j, st.gather("obs", slot)[:, 0].astype(np.int64)
    if "ep_end" in st.arrays:
        out["ep_end"] = st.arrays["ep_end"][slot]
    return out


def _episodes(
    replay: Replay, lengths: list[int], copies: int = 2, chunk_goal: bool = False, between=None
) -> None:  # noqa: ANN001
    """``copies`` copies walking through episodes of ``lengths`` (the same for each copy);
    obs[0] = code = copy * 100_000 + episode * 100 + step, reward = code."""
    w = replay.writer(num_envs=copies)
    ep = [0] * copies
    t = [0] * copies
    for _ in range(sum(lengths)):
        codes = np.array([c * 100_000 + ep[c] * 100 + t[c] for c in range(copies)], np.float32)
        term = np.array([t[c] == lengths[ep[c]] - 1 for c in range(copies)])
        obs = np.stack([codes, codes], axis=1)
        goal = np.zeros((copies, 2), np.float32)
        goals = {"achieved_goal": goal, "desired_goal": goal, "next_achieved_goal": goal}
        w.add(
            obs,
            np.zeros((copies, 1), np.float32),
            codes[:, None],
            obs + 0.5,
            term,
            np.zeros(copies, bool),
            **(goals if chunk_goal else {}),
        )
        for c in range(copies):
            ep[c], t[c] = (ep[c] + 1, 0) if term[c] else (ep[c], t[c] + 1)
        if between is not None:
            between(replay)
    w.flush()


def test_reservoir_keeps_old_data_and_the_gate_counts_new_inserts_only() -> None:
    lengths = [10] * 60  # 1,200 rows through a ring of 64
    fifo, kept = {}, {}
    for rule, out in (("oldest", fifo), ("reservoir", kept)):
        with Replay.create(
            Layout(obs_dim=2, act_dim=1), _cfg(forget=rule, chunk=4), GAMMA, seed=2
        ) as replay:
            _episodes(replay, lengths)
            out.update(_stored(replay), stats=replay.stats())
    # FIFO holds only the last 64 rows; the reservoir also rows older than all of them.
    assert fifo["code"].min() % 100_000 >= 56 * 100
    # A kept row survives each pass of the ring with chance forget_keep, so old data thins
    # out geometrically instead of vanishing at once.
    assert (kept["code"] % 100_000 < fifo["code"].min() % 100_000).sum() >= 8
    assert kept["stats"]["inserts"] == fifo["stats"]["inserts"] == 1200
    assert kept["stats"]["carried"] > 0 and fifo["stats"]["carried"] == 0
    assert int(kept["abs"].shape[0]) == CAP  # still a full ring of distinct valid rows


def test_carried_rows_keep_their_nstep_links() -> None:
    """Returns of every sampled row equal the ones computed by hand from its episode: no
    window follows a link into another row than its real next step, nor stops early."""
    lengths = [7, 5, 9, 6] * 12
    cfg = _cfg(forget="reservoir", forget_keep=0.6, n_step=3, chunk=3, batch_size=2048)
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=3) as replay:
        _episodes(replay, lengths)
        assert replay.stats()["carried"] > 0
        rows = _stored(replay)
        by_abs = dict(zip(rows["abs"].tolist(), rows["code"].tolist()))
        for code, nxt in zip(rows["code"], rows["next"]):
            if nxt >= 0 and int(nxt) in by_abs:
                assert by_abs[int(nxt)] == code + 1  # a link goes to the very next step
        b = replay.sample()
        for code, ret, disc in zip(b["obs"][:, 0].astype(int), b["reward"][:, 0], b["discount"]):
            n, t = lengths[code % 100_000 // 100], code % 100
            # The return folds a prefix of the episode's own next steps (rewards are codes, so
            # any other row would show): all of them up to n-step or the episode end, or fewer
            # where the next step is no longer stored (then it bootstraps from there).
            prefixes = [sum(GAMMA**k * (code + k) for k in range(m)) for m in range(1, 4)]
            m = 1 + next(k for k, p in enumerate(prefixes) if ret == pytest.approx(p))
            assert m <= min(3, n - t)
            assert disc == pytest.approx(0.0 if t + m == n else GAMMA**m)


def test_carried_her_episodes_stay_whole_runs() -> None:
    """Every stored row's HER episode [j - step, ep_end] is one episode with steps 0, 1, ...
    at consecutive numbers, its end stored and terminal: what HER's goal choice relies on."""

    def relabel(obs, action, next_obs, achieved_goal, desired_goal):
        return -np.linalg.norm(achieved_goal - desired_goal, axis=-1, keepdims=True)

    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(2, 9, 150)]
    cfg = _cfg(forget="reservoir", forget_keep=0.5, her=HerConfig("episode", k=4), batch_size=512)
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
    with Replay.create(layout, cfg, GAMMA, relabel=relabel, seed=1) as replay:
        _episodes(replay, lengths, chunk_goal=True)
        assert replay.stats()["carried"] > 0
        rows = _stored(replay)
        index = {int(a): i for i, a in enumerate(rows["abs"])}
        total = int(replay.storage.hdr[TOTAL])
        for i, j in enumerate(rows["abs"]):
            first, end = int(j - rows["step"][i]), int(rows["ep_end"][i])
            assert end in index and rows["terminated"][index[end]]
            for k in range(max(first, total - CAP), end + 1):
                if k in index:  # stored parts of the run: the same episode, step by offset
                    assert rows["episode"][index[k]] == rows["episode"][i]
                    assert rows["step"][index[k]] == k - first
                    assert rows["code"][index[k]] // 100 == rows["code"][i] // 100
        replay.sample()  # HER's goal choice runs over carried episodes without complaint


def test_priority_rule_keeps_high_priority_rows_and_the_tree_stays_consistent() -> None:
    cfg = _cfg(
        forget="priority", forget_keep=0.5, prioritized=True, alpha=1.0, batch_size=32, chunk=4
    )

    def learner(replay: Replay) -> None:
        # The learner looks at what is stored: rows with an even code get a high priority.
        if not replay.can_sample():
            return
        b = replay.sample()
        code = b["obs"][:, 0].astype(np.int64)
        replay.update_priorities(b["index"], np.where(code % 2 == 0, 10.0, 0.01))

    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=5) as replay:
        _episodes(replay, [50] * 20, copies=1, between=learner)
        rows = _stored(replay)
        # Rows older than the last 64 (all FIFO would hold) survive only by being carried.
        old = rows["code"][rows["code"] < 1950 - CAP]
        assert old.shape[0] > 0 and (old % 2 == 0).mean() > 0.8
        replay.sample()  # sync: the tree has seen every insert, carried rows included
        tree = replay.sampler.tree
        leaves = tree.leaves[:CAP]
        # The tree's sums are its leaves' and every stored row has a leaf > 0 ...
        assert tree.total == pytest.approx(leaves.sum())
        assert tree.min == pytest.approx(leaves.min()) and leaves.min() > 0
        # ... and a batch's weights are those of the leaves it was drawn by.
        b = replay.sample(512)
        p = leaves[b["index"] % CAP]
        np.testing.assert_allclose(b["weight"], (p / leaves.min()) ** -cfg.beta, rtol=1e-6)
        assert replay.storage.fhdr[MAX_PRIORITY] >= 10.0


def _sequence_episodes(replay: Replay, lengths: list[int], between=None) -> set[int]:  # noqa: ANN001
    """Two copies through episodes of ``lengths``, obs = state = code (copy * 100_000 +
    episode * 100 + step), in chunks of 3 steps; returns the codes // 100 of the episodes
    still running at the end (their last steps are not written yet)."""
    w = replay.writer(num_envs=2)
    ep, t = [0, 0], [0, 0]
    for _ in range(sum(lengths)):
        codes = np.array([c * 100_000 + ep[c] * 100 + t[c] for c in range(2)], np.float32)
        term = np.array([t[c] == lengths[ep[c]] - 1 for c in range(2)])
        w.add(
            codes[:, None],
            np.zeros((2, 1), np.float32),
            np.ones(2),
            codes[:, None] + 0.5,
            term,
            np.zeros(2, bool),
            state=np.repeat(codes[:, None], 2, axis=1),
        )
        for c in range(2):
            ep[c], t[c] = (ep[c] + 1, 0) if term[c] else (ep[c], t[c] + 1)
        if between is not None:
            between(replay)
    return {c * 1000 + ep[c] for c in range(2) if t[c]}


def _seq_cfg(**keys: object) -> ReplayConfig:
    from wheeler2.needs import SequenceConfig

    seq = SequenceConfig(length=4, burn_in=2, stride=int(keys.pop("stride", 6)))  # type: ignore[call-overload]
    return _cfg(sequence=seq, chunk=3, batch_size=64, **keys)


def _starts(replay: Replay) -> dict[int, tuple[int, int, np.ndarray]]:
    """Every stored sequence start: code -> (its number, its slot, alive of its walk)."""
    from wheeler2.buffer import sequence as sequences

    st, seq = replay.storage, replay.cfg.sequence
    assert seq is not None
    rows = _stored(replay)
    starts = rows["step"] % seq.every == 0
    j = rows["abs"][starts]
    steps = seq.span + replay.cfg.n_step - 1
    slots, alive = sequences.walk(st, j, int(st.hdr[TOTAL]), steps)
    return {
        int(c): (int(a), int(s[0]), al)
        for c, a, s, al in zip(rows["code"][starts], j, slots, alive)
    }


@pytest.mark.parametrize("n_step", [1, 2])
def test_carried_sequences_stay_whole_and_no_row_is_stored_twice(n_step: int) -> None:
    """Sequences that do not overlap (stride = burn-in + length + n - 1), so every start the
    reservoir carries was chosen: each stored start still walks its whole window (or to its
    episode's end), long after FIFO would have dropped it, and no row is stored twice."""
    span = 6 + n_step - 1
    lengths = [13, 8, 17, 10] * 10
    cfg = _seq_cfg(forget="reservoir", forget_keep=0.5, n_step=n_step, stride=span)
    with Replay.create(Layout(obs_dim=1, act_dim=1, state_dim=2), cfg, GAMMA, seed=7) as replay:
        running = _sequence_episodes(replay, lengths)
        assert replay.stats()["carried"] > 0
        rows = _stored(replay)
        assert len(set(rows["code"].tolist())) == rows["code"].shape[0]  # no row twice
        starts = _starts(replay)
        # FIFO would hold the last CAP / 2 steps of each copy.
        ends = np.cumsum(lengths)
        age = [
            ends[-1] - ends[c % 100_000 // 100] + lengths[c % 100_000 // 100] - c % 100
            for c in starts
        ]
        assert sum(a > CAP // 2 for a in age) >= 2  # carried, copy after copy
        for code, (_, _, alive) in starts.items():
            copy, ep, step = code // 100_000, code % 100_000 // 100, code % 100
            if copy * 1000 + ep in running:
                continue  # its last steps are not written yet
            want = min(span, lengths[ep] - step)
            assert alive.sum() == want, (code, alive)


def test_sequences_under_the_priority_rule_keep_their_steps_and_state() -> None:
    """Overlapping sequences, priorities written back while the ring turns: every sampled
    sequence is one episode's consecutive steps, with the state stored at its start, and the
    starts whose originals moved are discarded when drawn, never handed out."""
    cfg = _seq_cfg(forget="priority", forget_keep=0.5, prioritized=True, stride=2)

    def learner(replay: Replay) -> None:
        if replay.can_sample():
            b = replay.sample()
            code = b["obs"][:, 0, 0].astype(np.int64)
            replay.update_priorities(b["index"], np.where(code % 4 == 0, 10.0, 0.01))

    with Replay.create(Layout(obs_dim=1, act_dim=1, state_dim=2), cfg, GAMMA, seed=8) as replay:
        _sequence_episodes(replay, [11, 9, 14] * 12, between=learner)
        assert replay.stats()["carried"] > 0
        rows = _stored(replay)
        assert len(set(rows["code"].tolist())) == rows["code"].shape[0]
        for _ in range(20):
            b = replay.sample()
            for obs, alive, state in zip(b["obs"][:, :, 0], b["alive"], b["state"]):
                k = int(alive.sum())
                np.testing.assert_array_equal(obs[:k], obs[0] + np.arange(k))
                np.testing.assert_array_equal(state, [obs[0], obs[0]])
            assert replay.storage.valid(b["index"], int(replay.storage.hdr[TOTAL])).all()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"forget": "priority"}, 'forget = "priority" needs prioritized = true'),
    ],
)
def test_forgetting_refusals(keys: dict, message: str) -> None:
    with pytest.raises(ReplayError, match=message):
        Replay.create(Layout(obs_dim=2, act_dim=1), _cfg(**keys), GAMMA)


def test_forgetting_refused_with_sequences_and_her_together() -> None:
    from wheeler2.needs import SequenceConfig

    cfg = _cfg(forget="reservoir", sequence=SequenceConfig(length=4), her=HerConfig("future"))
    with pytest.raises(ReplayError, match="with sequences and HER together"):
        Replay.create(Layout(obs_dim=2, act_dim=1, goal_dim=1), cfg, GAMMA, relabel=lambda *a: 0)


def test_forgetting_refused_with_image_stacks() -> None:
    layout = Layout(obs_dim=2 * 4, act_dim=1, frame_shape=(1, 2, 2), stack=2)
    with pytest.raises(
        ReplayError, match="cannot be used with image stacks or with sequences and HER"
    ):
        Replay.create(layout, _cfg(forget="reservoir"), GAMMA)


def test_a_checkpointed_replay_keeps_its_carried_count() -> None:
    """The gate's count of new inserts survives a checkpoint (carried rows stay uncounted)."""
    layout = Layout(obs_dim=2, act_dim=1)
    cfg = _cfg(forget="reservoir", chunk=4, forget_keep=0.3)
    with Replay.create(layout, cfg, GAMMA, seed=2) as replay:
        _episodes(replay, [10] * 30)
        state, stats = replay.state_dict(), replay.stats()
        credit = float(replay.storage.fhdr[FORGET_CREDIT])
    assert stats["carried"] > 0 and credit > 0
    with Replay.create(layout, cfg, GAMMA, seed=2) as again:
        again.load_state_dict(state)
        assert again.stats()["inserts"] == stats["inserts"] == 600
        assert again.stats()["carried"] == stats["carried"]
        # ... and so does the allowance the rule has not spent yet.
        assert float(again.storage.fhdr[FORGET_CREDIT]) == credit


def _carried_share(stats: dict[str, float]) -> float:
    """Carried rows as a share of the rows that left the ring's oldest end (new inserts past
    the first CAP, plus the carried ones): forget_keep is what the rule implies."""
    carried = stats["carried"]
    return carried / (carried + stats["inserts"] - CAP)


@pytest.mark.parametrize(("keep", "floor"), [(0.1, 0.8), (0.3, 0.88)])
def test_reservoir_carries_the_share_forget_keep_implies(keep: float, floor: float) -> None:
    """5-row inserts (one env, 5-step episodes): the allowance per insert, 5 * keep / (1 -
    keep), is below one row at 0.1 and 2.14 at 0.3; the fractions add up over the run
    instead of being dropped each insert (which carried 0 and 22% of the rows). The draws
    are random (pid-seeded): over 20 seeds the share was 0.89-1.0 x keep at 0.1, 0.95-1.0 x
    at 0.3; never above keep, as the credit caps it."""
    cfg = _cfg(forget="reservoir", forget_keep=keep)
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=2) as replay:
        _episodes(replay, [5] * 400, copies=1)
        stats = replay.stats()
    assert stats["inserts"] == 2000
    assert floor * keep <= _carried_share(stats) <= keep + 1e-3


@pytest.mark.parametrize("keep", [0.1, 0.3])
def test_her_episodes_longer_than_one_inserts_allowance_are_carried(keep: float) -> None:
    """HER keeps whole episode remainders; 10-step episodes come one per insert, whose own
    allowance (1 or 4 rows) is shorter than an episode: the credit builds up until one fits
    (per-insert budgets carried only short tails: 0% of the rows at 0.1, 4.5% at 0.3).
    Over 20 seeds the share was 0.79-1.0 x keep."""

    def relabel(obs, action, next_obs, achieved_goal, desired_goal):
        return -np.linalg.norm(achieved_goal - desired_goal, axis=-1, keepdims=True)

    whole: set[int] = set()

    def look(replay: Replay) -> None:
        # Episodes older than the ring's last 64 rows that are stored as a whole 10-step run:
        # carried whole (a per-insert budget of 1 or 4 rows could only carry short tails).
        rows = _stored(replay)
        if not rows["code"].shape[0]:
            return
        episode = rows["code"] // 100
        old = episode < int(rows["code"].max()) // 100 - CAP // 10
        first = (rows["step"] == 0) & (rows["ep_end"] - rows["abs"] == 9) & old
        whole.update(episode[first].tolist())

    cfg = _cfg(forget="reservoir", forget_keep=keep, her=HerConfig("episode", k=4))
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
    with Replay.create(layout, cfg, GAMMA, relabel=relabel, seed=2) as replay:
        _episodes(replay, [10] * 400, copies=1, chunk_goal=True, between=look)
        stats = replay.stats()
    assert stats["inserts"] == 4000
    assert 0.7 * keep <= _carried_share(stats) <= keep + 1e-3
    assert len(whole) >= 5


def test_the_forgetting_credit_is_shared_by_every_producer() -> None:
    """Two producers attached to one ring draw on the one credit in the shared header: their
    5-row inserts together carry exactly the allowance of all the rows they overwrite (every
    row is at the mean priority here, so the rule keeps as many as the credit allows)."""
    keep = 0.1
    cfg = _cfg(forget="priority", forget_keep=keep, prioritized=True)
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=2) as replay:
        other = Replay.attach(replay.handle())
        try:
            for _ in range(200):  # alternate 5-row inserts from the two
                _episodes(replay, [5], copies=1)
                _episodes(other, [5], copies=1)
            stats = other.stats()
            credit = float(replay.storage.fhdr[FORGET_CREDIT])
        finally:
            other.close()
    allowance = keep / (1 - keep) * (stats["inserts"] - CAP)
    assert 0.0 <= credit < 1.0
    assert stats["carried"] + credit == pytest.approx(allowance)
    assert _carried_share(stats) == pytest.approx(keep, abs=2e-3)


def _reservoir_rows(seed: int) -> list[int]:
    """The codes a seeded reservoir keeps, made in whichever process calls it."""
    cfg = _cfg(forget="reservoir", chunk=4)
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=seed) as replay:
        _episodes(replay, [10] * 30)
        return sorted(_stored(replay)["code"].tolist())


def test_the_owner_forgets_reproducibly_from_its_seed_in_any_process() -> None:
    """The same seed keeps the same rows in another process (a serial run repeats itself; the
    stream once mixed in the pid, which made this differ run to run), and another seed not."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply(_reservoir_rows, (4,))
    assert _reservoir_rows(4) == there
    assert _reservoir_rows(5) != there


@pytest.mark.parametrize("unit", ["rows", "her", "sequences"])
def test_the_first_wrap_never_carries_a_slot_that_was_never_written(unit: str) -> None:
    """The insert that first wraps the ring starts while ``total < capacity``: the rows it
    looks at begin below 0, and number -1 maps to the last slot, still unwritten, whose
    ``abs`` is the -1 of an empty slot. Carrying it put a row of zeros (episode id 0, which no
    writer hands out) into the ring as a valid transition. Each unit here has such a first
    wrap (6-row inserts from 60 rows, 5-step episodes from 60), at forget_keep = 0.9."""

    def relabel(obs, action, next_obs, achieved_goal, desired_goal):
        return -np.linalg.norm(achieved_goal - desired_goal, axis=-1, keepdims=True)

    def look(replay: Replay) -> None:
        assert (_stored(replay)["episode"] != 0).all(), "a never-written slot was carried"

    for seed in range(10):
        if unit == "rows":
            cfg = _cfg(forget="reservoir", forget_keep=0.9, chunk=3)
            with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, GAMMA, seed=seed) as replay:
                _episodes(replay, [40, 40], between=look)
                assert replay.stats()["carried"] > 0
        elif unit == "her":
            cfg = _cfg(forget="reservoir", forget_keep=0.9, her=HerConfig("episode", k=4))
            layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
            with Replay.create(layout, cfg, GAMMA, relabel=relabel, seed=seed) as replay:
                _episodes(replay, [5] * 16, copies=1, chunk_goal=True, between=look)
                assert replay.stats()["carried"] > 0
        else:
            cfg = _seq_cfg(forget="reservoir", forget_keep=0.9, stride=1)
            layout = Layout(obs_dim=1, act_dim=1, state_dim=2)
            with Replay.create(layout, cfg, GAMMA, seed=seed) as replay:
                _sequence_episodes(replay, [40, 40], between=look)
                assert replay.stats()["carried"] > 0
