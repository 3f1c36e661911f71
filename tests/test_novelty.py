"""The RND novelty head (wheeler2/novelty.py): novelty decays where the member has been, the
bonus is scale-free and seeded, HER calls do not train, the config can name it, and a run with it
scores its evals on the env reward alone."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from wheeler2.envs.gym import GymVecEnv

from wheeler2 import novelty, registry
from wheeler2.agent import ActOut
from wheeler2.needs import AgentNeeds
from wheeler2.novelty import RND
from wheeler2.runtime.evaluation import evaluate
from wheeler2.runtime.heads import head_reward_spec, make_heads, make_task
from wheeler2.runtime.parts import make_env
from wheeler2.task import Head, RewardHeads

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "cfg" / "mountaincar_rnd.toml"


def _step(r: RND, x: np.ndarray) -> np.ndarray:
    """One member call: with an info list, so the predictor trains on ``x``."""
    return r(x, None, x, None, None, [{}] * len(x))


def _visits(seed: int, n: int = 400, batch: int = 8, scale: float = 1.0) -> list[np.ndarray]:
    """Batches of states around one spot (a member circling where it has been)."""
    rng = np.random.default_rng(seed)
    return [scale * rng.normal(0.0, 0.1, (batch, 2)).astype(np.float32) for _ in range(n)]


@pytest.fixture(autouse=True)
def _fresh_module_head():
    # The module-level head keeps its predictor for the process; each test starts from none.
    novelty.rnd.reset()
    yield
    novelty.rnd.reset()


def test_visited_states_lose_their_novelty_and_far_ones_keep_it() -> None:
    r = RND(seed=0)
    here = np.zeros((1, 2), np.float32)
    far = np.full((1, 2), 3.0, np.float32)  # 30 running stds away: clipped to the edge, +5
    for x in _visits(0):
        _step(r, x)
    visited, unvisited = float(r.bonus(here)[0]), float(r.bonus(far)[0])
    assert visited < 0.3 * unvisited, (visited, unvisited)
    # It is the training that makes the difference: an untrained predictor with the same
    # statistics finds the visited spot about as new (the raw errors, before normalization).
    fresh = RND(seed=0)
    fresh._build(2)
    fresh.obs_rms, fresh.bonus_rms = r.obs_rms, r.bonus_rms
    assert fresh.bonus(here)[0] > 3 * visited


def test_bonus_is_scale_free() -> None:
    # The same visits in metres and in centimetres: both normalizations together make the
    # bonus a number of order one that does not care about the env's units.
    small, big = RND(seed=0), RND(seed=0)
    out_small = [_step(small, x) for x in _visits(1, n=200)]
    out_big = [_step(big, x) for x in _visits(1, n=200, scale=100.0)]
    m_small, m_big = np.mean(out_small[50:]), np.mean(out_big[50:])
    assert 0.05 < m_small < 20 and 0.05 < m_big < 20, (m_small, m_big)
    assert 0.5 < m_big / m_small < 2.0
    probe = np.array([[0.05, -0.1], [2.0, 2.0]], np.float32)
    np.testing.assert_allclose(small.bonus(probe), big.bonus(100 * probe), rtol=1e-3)


def test_same_seed_same_bonus_other_seed_other_bonus() -> None:
    a, b, c = RND(seed=3), RND(seed=3), RND(seed=4)
    for x in _visits(2, n=20):
        ya, yb, yc = _step(a, x), _step(b, x), _step(c, x)
    np.testing.assert_array_equal(ya, yb)
    assert not np.allclose(ya, yc)


def test_seeding_leaves_the_global_torch_rng_alone() -> None:
    # The agent draws from the global RNG; adding a head must not change its run.
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _step(RND(seed=9), np.ones((2, 4), np.float32))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("n", [1, 3, 17])
def test_shape_and_finite_from_the_first_call(n: int) -> None:
    r = RND(seed=0, hidden=(16,), out_dim=8)
    rng = np.random.default_rng(n)
    for scale in (1.0, 1e6, 0.0):  # a first row alone, huge values, constant rows
        x = (scale * rng.normal(size=(n, 5))).astype(np.float32)
        out = _step(r, x)
        assert out.shape == (n,) and out.dtype == np.float32
        assert np.all(np.isfinite(out)) and np.all(out >= 0)


def test_her_relabelling_computes_without_training() -> None:
    r = RND(seed=0)
    for x in _visits(3, n=10):
        _step(r, x)
    before = [p.detach().clone() for p in r.predictor.parameters()]
    steps, counts = r.steps, (r.obs_rms.count, r.bonus_rms.count)
    x = np.full((4, 2), 1.5, np.float32)
    first = r(x, None, x, None, None, None)  # info None: HER's relabel call
    again = r(x, None, x, None, None, None)
    np.testing.assert_array_equal(first, again)
    assert r.steps == steps and (r.obs_rms.count, r.bonus_rms.count) == counts
    assert all(torch.equal(p, q) for p, q in zip(before, r.predictor.parameters()))


class _StillAgent:
    """Zero actions and zero head values: what ``evaluate`` needs to score heads per episode."""

    params = SimpleNamespace(gamma=0.9)

    @staticmethod
    def needs(params: Any) -> AgentNeeds:
        return AgentNeeds(gamma=params.gamma)

    def act(self, obs: np.ndarray, explore: bool) -> ActOut:
        return ActOut(action=np.zeros((len(obs), 1), np.float32))

    def head_values(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 2))


def test_evaluation_episodes_do_not_train_the_predictor() -> None:
    # An eval episode is no visit: scoring the heads per episode once took 200 Adam steps and
    # 800 rows into the statistics per eval of 4 Pendulum copies (cfg/mountaincar_rnd.toml: about
    # 80% of the rows the statistics had seen came from evals).
    env = GymVecEnv("Pendulum-v1", {}, 4, 0)
    try:
        heads = RewardHeads([Head("env", 1.0, None), Head("novelty", 0.1, novelty.rnd)])
        r = novelty.rnd.state(env.info.obs_dim)
        _step(r, np.zeros((1, env.info.obs_dim), np.float32))
        before = [p.detach().clone() for p in r.predictor.parameters()]
        counts = (r.steps, r.obs_rms.count, r.bonus_rms.count)
        result = evaluate(_StillAgent(), env, seed=1, heads=heads)  # type: ignore[arg-type]
        assert result.heads is not None and set(result.heads) == {"env", "novelty"}
        assert (r.steps, r.obs_rms.count, r.bonus_rms.count) == counts
        assert all(torch.equal(p, q) for p, q in zip(before, r.predictor.parameters()))
        _step(r, np.zeros((1, env.info.obs_dim), np.float32))  # outside an eval it trains again
        assert r.steps == counts[0] + 1
    finally:
        env.close()


def test_module_head_is_named_by_the_config_and_written_back() -> None:
    head = registry.resolve_object("wheeler2.novelty:rnd")
    assert head is novelty.rnd
    # The run directory's config.toml writes a head back as "module:qualname".
    assert head_reward_spec(Head("novelty", 0.1, head)) == "wheeler2.novelty:rnd"
    # One predictor per observation width in this process.
    assert head.state(2) is head.state(2) and head.state(2) is not head.state(3)


def test_validate_heads_probe_on_mountaincar() -> None:
    from wheeler2.config import load

    config = load(CFG)
    env = make_env(config, 2, 0)
    try:
        heads = make_heads(config, env, make_task(config))  # runs validate_heads
        assert heads.names == ("env", "novelty") and heads.weights == (1.0, 0.1)
        # The probe (a reset and three random steps of two copies, one batch) trained the
        # predictor once, on its six rows; its bonuses were shape [6] and finite, or this raised.
        state = novelty.rnd.state(env.info.obs_dim)
        assert state.steps == 1 and state.obs_rms.count == 6
    finally:
        env.close()


def test_short_serial_run_logs_the_heads_and_scores_evals_on_the_env_reward(tmp_path) -> None:
    from wheeler2 import api
    from wheeler2.config import load
    from wheeler2.runtime import run_experiment

    overrides = [
        "experiment.total_steps=1200",  # one finished 999-step episode for the head figures
        "experiment.eval_every=1200",
        "experiment.eval_episodes=2",
        "team.0.params.learning_starts=256",
        "team.0.params.hidden=[32, 32]",
        "buffer.batch_size=32",
    ]
    config = load(CFG, overrides=overrides, out=str(tmp_path / "runs"))
    run_dir = run_experiment(config)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1200

    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    figures = {r["key"]: float(r["value"]) for r in rows if r["member"] == "target"}
    assert {"episode_return", "episode_return/env", "episode_return/novelty"} <= set(figures)
    assert figures["episode_return/env"] == pytest.approx(figures["episode_return"])
    novelty_return = figures["episode_return/novelty"]
    assert np.isfinite(novelty_return) and novelty_return > 1.0  # ~1 per step, 999 steps

    # The in-run eval of the final actor against an evaluation that sums env rewards only:
    # equal, where adding 0.1 x the bonus (~100 an episode, above) would show.
    final = summary["eval"][-1]["return"]
    alone = api.evaluate(run_dir, checkpoint="latest")
    assert alone["mean_return"] == pytest.approx(final, abs=1e-6)
