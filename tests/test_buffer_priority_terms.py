"""Priority terms (``[buffer] priority_td``, ``priority_novelty``; wheeler2/buffer/priority.py):
the mixed priority is what the sum tree samples by, and the importance weights are those of
that very distribution, checked against P_i and (N P_i)^-beta computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, ReplayError

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
N = 8


def _replay(**keys: float) -> Replay:
    cfg = ReplayConfig(
        capacity=16,
        batch_size=4096,
        prioritized=True,
        alpha=ALPHA,
        beta=BETA,
        eps=EPS,
        min_size=1,
        updates_per_insert=0,
        **keys,
    )
    replay = Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9, seed=4)
    w = replay.writer(num_envs=1)
    for k in range(N):
        obs = np.array([[k, 0.0]], np.float32)
        nxt = np.array([[k + 1.0, 0.0]], np.float32)  # next_obs[0] = k + 1: the novelty below
        w.add(
            obs,
            np.zeros((1, 1), np.float32),
            np.zeros((1, 1)),
            nxt,
            np.array([k == N - 1]),
            np.array([False]),
        )
    w.flush()
    replay.sample(4)  # the sampler's first sync: every row at the max priority
    return replay


def _check_weights_are_those_of(replay: Replay, p_raw: np.ndarray) -> None:
    """Draws a large batch: each row's weight is (N P_j)^-beta / max_k (N P_k)^-beta with
    P = p^alpha / sum p^alpha, and the rows come up with frequencies P."""
    prob = p_raw**ALPHA / (p_raw**ALPHA).sum()
    w_all = (N * prob) ** -BETA
    want = w_all / w_all.max()
    b = replay.sample(4096)
    j = b["index"]
    np.testing.assert_allclose(b["weight"], want[j], rtol=1e-5)
    freq = np.bincount(j, minlength=N) / j.shape[0]
    np.testing.assert_allclose(freq, prob, atol=0.02)


def test_importance_weights_match_the_mixed_distribution_by_hand() -> None:
    with _replay(priority_td=0.7, priority_novelty=0.5) as replay:
        terms = replay._terms
        assert terms is not None
        # A novelty known by hand: the stored next observation's first value (1 .. N). The
        # replay must take it from the rows it stores, as it does the RND's input.
        terms.novelty = lambda next_obs: np.asarray(next_obs[:, 0], np.float64)  # type: ignore[method-assign]
        td = np.array([0.1, -2.0, 0.0, 0.5, 3.0, -0.2, 0.05, 1.0])
        replay.update_priorities(np.arange(N), td)
        novelty = np.arange(1, N + 1, dtype=np.float64)
        mixed = 0.7 * np.abs(td) + 0.5 * novelty + EPS
        _check_weights_are_those_of(replay, mixed)
        # And not those of the TD term alone, which differ for this td.
        td_only = np.abs(td) + EPS
        assert not np.allclose(mixed / mixed.sum(), td_only / td_only.sum(), atol=0.02)


def test_td_only_default_is_unchanged() -> None:
    with _replay() as replay:
        assert replay._terms is None
        td = np.array([0.1, -2.0, 0.0, 0.5, 3.0, -0.2, 0.05, 1.0])
        replay.update_priorities(np.arange(N), td)
        _check_weights_are_those_of(replay, np.abs(td) + EPS)


def test_rnd_novelty_is_the_priority_and_trains_on_what_was_replayed() -> None:
    with _replay(priority_td=0.0, priority_novelty=1.0) as replay:
        terms = replay._terms
        assert terms is not None
        seen: list[np.ndarray] = []
        rnd_novelty = terms.novelty

        def recorded(next_obs: np.ndarray) -> np.ndarray:
            value = rnd_novelty(next_obs)
            seen.append(value)
            return value

        terms.novelty = recorded  # type: ignore[method-assign]
        replay.update_priorities(np.arange(N), np.full(N, 5.0))  # TD has weight 0 here
        (novelty,) = seen
        assert novelty.shape == (N,) and np.isfinite(novelty).all() and novelty.std() > 0
        assert terms._rnd.steps == 1  # the predictor took one step on the replayed batch
        for _ in range(4):  # and one more on every 4th batch after it (priority.TRAIN_EVERY)
            terms.novelty(np.ones((3, 2), np.float32))
        assert terms._rnd.steps == 2
        leaves = replay.sampler.tree.leaves[:N]
        np.testing.assert_allclose(leaves, (novelty + EPS) ** ALPHA, rtol=1e-9)
        _check_weights_are_those_of(replay, novelty + EPS)


def test_novelty_without_priorities_is_refused() -> None:
    cfg = ReplayConfig(capacity=16, min_size=1, priority_novelty=1.0)
    with pytest.raises(ReplayError, match="priority_novelty needs prioritized = true"):
        Replay.create(Layout(obs_dim=2, act_dim=1), cfg, gamma=0.9)


def test_the_novelty_state_survives_a_checkpoint(tmp_path) -> None:
    """What the RND learned (networks, optimizer, running statistics, batch count) comes back
    through a checkpoint file: the restored replay scores the same states as the saved one, and
    a fresh one does not."""
    from wheeler2 import checkpoint as ckpt

    saved = _replay(priority_novelty=1.0)
    for _ in range(6):  # trains the predictor (every TRAIN_EVERY-th batch) and its statistics
        b = saved.sample(4)
        saved.update_priorities(b["index"], np.zeros(4))
    state = saved.priority_state()
    assert state is not None and state["rnd"]["steps"] >= 2
    ckpt.save(tmp_path / "t.pt", {"terms": state})  # tensors and numbers only
    restored, fresh = _replay(priority_novelty=1.0), _replay(priority_novelty=1.0)
    restored.load_priority_state(ckpt.load(tmp_path / "t.pt")["terms"])
    probe = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    want = saved._terms.novelty(probe)  # a call that trains: the next one must match too
    np.testing.assert_allclose(restored._terms.novelty(probe), want, rtol=1e-6)
    assert not np.allclose(fresh._terms.novelty(probe), want, rtol=1e-3)
    assert _replay(priority_td=0.5).priority_state() is None  # nothing to keep without novelty
    for r in (saved, restored, fresh):
        r.close()


def test_a_resumed_run_goes_on_with_its_novelty_predictor(tmp_path) -> None:
    """The sampling learner's checkpoint carries the RND, and a resume takes it back."""
    from wheeler2 import checkpoint as ckpt
    from wheeler2.cli import main
    from wheeler2.runtime.member import PRIORITY_KEY

    path = tmp_path / "n.toml"
    path.write_text(RUN)
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    run_dir = next((tmp_path / "runs").glob("n-*"))
    latest = run_dir / "checkpoints" / "latest.pt"
    payload = ckpt.load(latest)
    terms = payload["members"]["ddpg"][PRIORITY_KEY]
    assert terms["rnd"]["steps"] > 0
    terms["rnd"]["steps"] = 12_345  # a mark only the saved predictor carries
    payload["member_steps"] = {"ddpg": 200}  # rewound to the middle, as if stopped there
    payload["run"].update(env_steps=200, evals=payload["run"]["evals"][:1])
    ckpt.save(latest, payload)
    assert main(["resume", str(run_dir)]) == 0
    after = ckpt.load(latest)["members"]["ddpg"][PRIORITY_KEY]["rnd"]["steps"]
    assert after > 12_345  # the saved predictor went on training


RUN = """
[experiment]
name = "n"
total_steps = 400
eval_every = 200
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
batch_size = 32
prioritized = true
priority_novelty = 0.5

[[team]]
name = "ddpg"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 64
hidden = [16, 16]
"""


def test_novelty_priority_with_sequences_scores_each_start() -> None:
    """With sequence replay a priority belongs to a sequence start: the novelty term is that of
    the start's next observation, and the start's leaf is the mixed priority ** alpha."""
    from wheeler2.buffer.priority import PriorityTerms
    from wheeler2.needs import SequenceConfig

    cfg = ReplayConfig(
        capacity=32, batch_size=4, prioritized=True, alpha=ALPHA, eps=EPS, min_size=1,
        updates_per_insert=0, priority_novelty=2.0,
        sequence=SequenceConfig(length=2, burn_in=0, stride=1),
    )  # fmt: skip
    with Replay.create(Layout(obs_dim=2, act_dim=1, state_dim=1), cfg, gamma=0.9, seed=3) as r:
        w = r.writer(num_envs=1)
        for k in range(10):
            obs = np.array([[k, 1.0]], np.float32)
            w.add(obs, np.zeros((1, 1), np.float32), np.zeros(1), obs + 1, np.array([k == 9]),
                  np.array([False]), state=np.zeros((1, 1), np.float32))  # fmt: skip
        w.flush()
        b = r.sample()
        start = b["index"] % 32
        twin = PriorityTerms(1.0, 2.0, seed=3)  # the same RND, fed the same batches
        want = twin.mix(np.full(4, 0.5), r.storage.gather("next_obs", start))
        r.update_priorities(b["index"], np.full(4, 0.5))
        leaves = r.sampler.tree.leaves[start]
        np.testing.assert_allclose(leaves, (want + EPS) ** ALPHA, rtol=1e-5)
        np.testing.assert_array_equal(
            r.storage.gather("next_obs", start)[:, 0], b["obs"][:, 0, 0] + 1
        )
