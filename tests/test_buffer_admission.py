"""Admission (``[buffer] keep``, ``admit``; wheeler2/buffer/admission.py): the rows a task flags
are stored, the rest only with chance ``keep``; a refused row never reaches the ring, and an
admitted episode keeps its links, n-step windows and HER bookkeeping whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wheeler2.buffer import HerConfig, Layout, Replay, ReplayConfig, ReplayError
from wheeler2.buffer.storage import TOTAL
from wheeler2.config import ConfigError, load
from wheeler2.task import Head, RewardHeads, Task

GAMMA = 0.5


def _stored(replay: Replay) -> dict[str, np.ndarray]:
    """Every stored row (slot order, oldest insert first) with its absolute number."""
    st = replay.storage
    total = int(st.hdr[TOTAL])
    j = np.arange(max(0, total - replay.cfg.capacity), total)
    slot = j % replay.cfg.capacity
    return {
        "abs": j,
        "code": st.gather("obs", slot)[:, 0].astype(np.int64),
        "next": st.arrays["next"][slot],
        "episode": st.arrays["episode"][slot],
        "step": st.arrays["step"][slot],
    }


def _write_codes(replay: Replay, lengths: list[list[int]], flagged, **add) -> dict[int, int]:
    """Copies stepping through episodes of the given lengths; obs[0] = a unique code
    (copy * 10_000 + episode * 100 + step), reward = code. ``flagged(copy, ep, step, length)``
    is the task's worth flag. Returns code -> its episode's length."""
    n = len(lengths)
    w = replay.writer(num_envs=n)
    cursor = [(0, 0)] * n  # (episode, step) per copy
    length_of: dict[int, int] = {}
    steps = max(sum(ls) for ls in lengths)
    for _ in range(steps):
        obs = np.zeros((n, 2), np.float32)
        term = np.zeros(n, bool)
        worth = np.zeros(n, bool)
        for c in range(n):
            ep, t = cursor[c]
            if ep >= len(lengths[c]):
                ep, t = len(lengths[c]), 0  # padding episodes of one step, never flagged
                length = 1
            else:
                length = lengths[c][ep]
                worth[c] = flagged(c, ep, t, length)
            code = c * 10_000 + ep * 100 + t
            obs[c] = (code, code)
            length_of[code] = length
            term[c] = t == length - 1
            cursor[c] = (ep + 1, 0) if term[c] else (ep, t + 1)
        w.add(
            obs,
            np.zeros((n, 1), np.float32),
            obs[:, :1],
            obs + 0.5,
            term,
            np.zeros(n, bool),
            worth=worth,
            **add,
        )
    w.flush()
    replay.last_writer = w  # type: ignore[attr-defined]
    return length_of


def test_transition_admission_stores_exactly_the_flagged_rows_and_no_link_crosses_a_hole() -> None:
    cfg = ReplayConfig(
        capacity=4096, min_size=1, updates_per_insert=0, keep=0.0, admit="transition", chunk=4
    )
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA) as replay:
        _write_codes(replay, [[7, 5, 9]] * 3, lambda c, ep, t, n: (t + c) % 3 == 0)
        rows = _stored(replay)
        codes = set(rows["code"].tolist())
        want = {
            c * 10_000 + ep * 100 + t
            for c in range(3)
            for ep, n in enumerate([7, 5, 9])
            for t in range(n)
            if (t + c) % 3 == 0
        }
        assert codes == want  # a refused row stored would be an extra code here
        adm = replay.last_writer.admission  # type: ignore[attr-defined]
        assert adm.admitted == len(want) and adm.refused == 3 * 21 - len(want)
        # Every link goes to the very next step of the same episode, never over a refused one.
        by_abs = dict(zip(rows["abs"].tolist(), rows["code"].tolist()))
        for code, nxt in zip(rows["code"], rows["next"]):
            if nxt >= 0:
                assert by_abs[int(nxt)] == code + 1


def test_transition_admission_keeps_the_declared_fraction() -> None:
    cfg = ReplayConfig(
        capacity=20_000, min_size=1, updates_per_insert=0, keep=0.3, admit="transition"
    )
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA, seed=3) as replay:
        _write_codes(replay, [[50] * 40] * 4, lambda *a: False)
        adm = replay.last_writer.admission  # type: ignore[attr-defined]
        stored = len(_stored(replay)["code"])
        assert stored == adm.admitted and adm.admitted + adm.refused == 4 * 50 * 40
        assert 0.27 < stored / 8000 < 0.33


@pytest.mark.parametrize("chunk", [2, 64])
def test_episode_admission_stores_whole_episodes_with_their_nstep_returns(chunk: int) -> None:
    """An episode with one flagged step is stored whole; n-step returns of its rows are the
    unfiltered ones (no window cut short by a missing step); other episodes leave nothing."""
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=512,
        min_size=1,
        updates_per_insert=0,
        keep=0.0,
        n_step=3,
        chunk=chunk,
    )
    lengths = [[6, 4, 8, 3], [5, 7, 2, 6]]

    def flagged(c: int, ep: int, t: int, n: int) -> bool:
        return ep % 2 == c % 2 and t == n - 1  # the last step of every other episode

    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA) as replay:
        length_of = _write_codes(replay, lengths, flagged)
        rows = _stored(replay)
        want = {
            c * 10_000 + ep * 100 + t
            for c in range(2)
            for ep, n in enumerate(lengths[c])
            if ep % 2 == c % 2
            for t in range(n)
        }
        assert set(rows["code"].tolist()) == want
        adm = replay.last_writer.admission  # type: ignore[attr-defined]
        assert adm.admitted == len(want)
        b = replay.sample()
        for code, ret, disc in zip(b["obs"][:, 0].astype(int), b["reward"][:, 0], b["discount"]):
            t, n = code % 100, length_of[code]
            steps = range(t, min(t + 3, n))
            assert ret == pytest.approx(sum(GAMMA ** (s - t) * (code - t + s) for s in steps))
            assert disc == (0.0 if t + 3 >= n else GAMMA**3)


def test_episode_admission_with_her_keeps_each_episode_end() -> None:
    def relabel(obs, action, next_obs, achieved_goal, desired_goal):  # noqa: ANN001, ANN202
        return -np.linalg.norm(achieved_goal - desired_goal, axis=-1, keepdims=True)

    cfg = ReplayConfig(
        capacity=4096, min_size=1, updates_per_insert=0, keep=0.25, her=HerConfig("future", k=4)
    )
    layout = Layout(obs_dim=2, act_dim=1, goal_dim=2)
    with Replay.create(layout, cfg, gamma=GAMMA, relabel=relabel, seed=5) as replay:
        lengths = [[int(x) for x in np.random.default_rng(c).integers(2, 9, 30)] for c in range(2)]
        goal = np.zeros((2, 2), np.float32)
        _write_codes(
            replay,
            lengths,
            lambda c, ep, t, n: ep % 5 == 0,
            achieved_goal=goal,
            desired_goal=goal,
            next_achieved_goal=goal,
        )
        rows = _stored(replay)
        ep_end = replay.storage.arrays["ep_end"][rows["abs"] % cfg.capacity]
        by_abs = {int(a): i for i, a in enumerate(rows["abs"])}
        episodes = {}
        for i, e in enumerate(rows["episode"]):
            episodes.setdefault(int(e), []).append(i)
        for members in episodes.values():
            codes = rows["code"][members]
            c, ep = codes[0] // 10_000, codes[0] // 100 % 100
            if ep >= len(lengths[c]):
                continue  # the padding after a copy's last episode
            # Whole: every step 0..n-1, and each row's ep_end is the stored last step.
            assert sorted(codes % 100) == list(range(lengths[c][ep]))
            for i in members:
                last = by_abs[int(ep_end[i])]
                assert rows["code"][last] % 100 == lengths[c][ep] - 1
        kept = {(int(x) // 10_000, int(x) // 100 % 100) for x in rows["code"]}
        assert all((c, ep) in kept for c in range(2) for ep in range(0, 30, 5))


def test_transition_admission_is_refused_where_samples_read_across_steps() -> None:
    cfg = ReplayConfig(capacity=64, min_size=1, keep=0.5, admit="transition", n_step=2)
    with pytest.raises(ReplayError, match='admit = "transition" cannot be used with n_step = 2'):
        Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA)


BASE = """
[experiment]
name = "t"
total_steps = 1_000
eval_every = 100

[env]
id = "Pendulum-v1"

[buffer]
{buffer}

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
"""


@pytest.mark.parametrize(
    ("buffer", "key", "message"),
    [
        ("keep = 1.5", "keep", "expected a number in [0, 1], got 1.5"),
        # No [task]: nothing is flagged, so keep would drop rows at random.
        ("keep = 0.5", "keep", "needs a [task] spec whose class defines worth_keeping"),
        ('admit = "rows"', "admit", "one of 'episode', 'transition'"),
        (
            'keep = 0.5\nadmit = "transition"\nn_step = 3',
            "admit",
            'expected "episode" with her or n_step > 1',
        ),
        # Priority terms (tests/test_buffer_priority_terms.py) are [buffer] keys of issue 41 too.
        ("priority_novelty = -1", "priority_novelty", "expected a number >= 0, got -1"),
        ("priority_novelty = 0.5", "priority_novelty", "expected 0 without prioritized = true"),
        ("priority_td = 0.5", "priority_td", "expected 1.0 (the default) without prioritized"),
        ("prioritized = true\npriority_td = 0", "priority_td", "expected a number > 0 while"),
        # And forgetting (tests/test_buffer_forgetting.py).
        ('forget = "newest"', "forget", "one of 'oldest', 'priority', 'reservoir'"),
        ('forget = "priority"', "forget", '"priority" needs prioritized = true'),
        ("forget_keep = 1", "forget_keep", "expected a number in (0, 1), got 1"),
    ],
)
def test_bad_buffer_keys_are_one_error_line(
    tmp_path: Path, buffer: str, key: str, message: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(BASE.format(buffer=buffer))
    with pytest.raises(ConfigError) as info:
        load(path)
    text = str(info.value)
    assert str(path) in text and "[buffer]" in text and key in text and message in text
    assert "\n" not in text


def test_keep_below_one_needs_a_task_that_flags_rows(tmp_path: Path) -> None:
    """A task without worth_keeping flags nothing; keep = 0 once stored no row at all."""
    (tmp_path / "plain.py").write_text(
        "from wheeler2.task import Task\n\nclass Plain(Task):\n    pass\n"
    )
    (tmp_path / "upper.py").write_text(TASK)
    path = tmp_path / "x.toml"
    text = BASE.format(buffer="keep = 0.0").replace("[buffer]", '[task]\nspec = "S"\n\n[buffer]')
    path.write_text(text.replace('"S"', '"./plain.py:Plain"'))
    with pytest.raises(ConfigError, match=r"\[buffer\] keep: got 0, which needs a \[task\]"):
        load(path)
    path.write_text(text.replace('"S"', '"./upper.py:UpperHalf"'))
    assert load(path).buffer.keep == 0.0


class KeepPositive(Task):
    def worth_keeping(self, obs, action, next_obs, achieved_goal, desired_goal, info, reward):  # noqa: ANN001, ANN201, PLR0913
        return reward[:, 0] > 0


def test_worth_keeping_reaches_the_heads_and_is_checked() -> None:
    assert KeepPositive.defines_worth_keeping() and not Task.defines_worth_keeping()
    heads = RewardHeads([Head("env", 1.0, None)], worth_keeping=KeepPositive().worth_keeping)
    obs = np.zeros((3, 2), np.float32)
    reward = np.array([[1.0], [-1.0], [2.0]], np.float32)
    flags = heads.worth(obs, None, obs, None, None, None, reward)
    assert flags is not None and flags.tolist() == [True, False, True]
    assert (
        RewardHeads([Head("env", 1.0, None)]).worth(obs, None, obs, None, None, None, reward)
        is None
    )
    bad = RewardHeads([Head("env", 1.0, None)], worth_keeping=lambda *a: np.ones(2, bool))
    with pytest.raises(ValueError, match="worth_keeping returned shape"):
        bad.worth(obs, None, obs, None, None, None, reward)


TASK = """
import numpy as np
from wheeler2.task import Task


class UpperHalf(Task):
    def worth_keeping(self, obs, action, next_obs, achieved_goal, desired_goal, info, reward):
        return next_obs[:, 0] > 0.0  # the pendulum above the horizontal
"""


def test_a_serial_run_filters_by_the_task_and_reports_the_counts(tmp_path: Path) -> None:
    import csv

    from wheeler2.runtime import run_experiment

    (tmp_path / "upper.py").write_text(TASK)
    text = BASE.format(buffer='keep = 0.0\nadmit = "transition"\nbatch_size = 32')
    text = text.replace("[buffer]", '[task]\nspec = "./upper.py:UpperHalf"\n\n[buffer]')
    text = text.replace("total_steps = 1_000", "total_steps = 400").replace("= 100\n", "= 400\n")
    text += "[team.params]\nlearning_starts = 64\nhidden = [16, 16]\n"
    path = tmp_path / "x.toml"
    path.write_text(text)
    config = load(path, out=str(tmp_path / "runs"))
    run_dir = run_experiment(config)
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["member"] == "target"]
    last: dict[str, float] = {}
    for r in rows:
        last[r["key"]] = float(r["value"])
    # Both kinds of row happen in 400 Pendulum steps (two episodes from random angles); every
    # step the member took is counted once, as stored or refused.
    assert last["replay_admitted"] > 0 and last["replay_refused"] > 0
    assert last["replay_admitted"] + last["replay_refused"] <= 400


def test_episode_admission_with_sequences_cuts_them_from_whole_stored_episodes() -> None:
    """Sequences walk along links: from admitted episodes only, each alive step the next one
    of the same episode, and as long as an unfiltered replay would make them."""
    from wheeler2.buffer import SequenceConfig

    seq = SequenceConfig(length=3, burn_in=0, stride=1)
    cfg = ReplayConfig(
        capacity=4096,
        batch_size=256,
        min_size=1,
        updates_per_insert=0,
        keep=0.0,
        sequence=seq,
        chunk=2,
    )
    lengths = [[6, 4, 8, 3, 5], [5, 7, 2, 6, 4]]
    with Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=GAMMA) as replay:
        length_of = _write_codes(replay, lengths, lambda c, ep, t, n: ep in (1, 3) and t == 0)
        b = replay.sample()
        for codes, alive in zip(b["obs"][:, :, 0].astype(int), b["alive"]):
            first = codes[0]
            assert first % 10_000 // 100 in (1, 3)  # a refused episode gave no sequence
            n, t = length_of[first], first % 100
            assert alive.sum() == min(3, n - t)  # cut by the episode's end only
            np.testing.assert_array_equal(codes[alive], first + np.arange(alive.sum()))
