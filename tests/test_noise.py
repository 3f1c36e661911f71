"""Exploration noise (agents/noise.py): per-step std, colour (autocorrelation and spectrum), one
independent process per env copy, restarts at episode ends, seeding, and DDPG acting with it.

Tolerances: for one copy-dimension, the mean of y^2 / std^2 over its steps has variance at most 2
(an average's variance is at most its terms' largest, and a squared standard normal's is 2),
however correlated the steps are. Over J independent copy-dimensions the estimated std is then
off by a relative standard error of at most 1 / sqrt(2 J); the tests allow 5 of those.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from wheeler2.agents.ddpg import DDPG, Params
from wheeler2.agents.noise import KINDS, colored_std, make_noise

from wheeler2.agent import ActOut, ParamError, SpaceInfo, Transitions

STD = 0.3


def _run(noise, n: int, steps: int) -> np.ndarray:
    """``steps`` samples for n copies: [steps, n, act_dim]."""
    return np.stack([noise(n) for _ in range(steps)])


def _series(x: np.ndarray) -> np.ndarray:
    """[steps, n, act_dim] -> one row per copy-dimension: [n * act_dim, steps]."""
    return x.transpose(1, 2, 0).reshape(-1, x.shape[0])


def _lag1(y: np.ndarray) -> float:
    return float(np.mean(y[:, 1:] * y[:, :-1]) / np.mean(y * y))


def _spectrum_slope(y: np.ndarray) -> float:
    """Slope of log power over log frequency, the periodogram averaged over the rows of y."""
    power = (np.abs(np.fft.rfft(y, axis=-1)) ** 2).mean(0)
    f = np.fft.rfftfreq(y.shape[-1])
    return float(np.polyfit(np.log(f[1:]), np.log(power[1:]), 1)[0])


# -- per-step std ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "beta"),
    [("gaussian", 1.0), ("pink", 1.0), ("colored", 0.0), ("colored", 0.5), ("colored", 2.0)],
)
def test_per_step_std_is_noise_std(kind, beta):
    # A short horizon is where the library's own normalization is furthest off (pink: +7%,
    # red: +14% here), and two sequences per copy cover the cut between them.
    n, act_dim, horizon = 16, 1024, 32
    x = _run(make_noise(kind, STD, act_dim, seed=0, beta=beta, horizon=horizon), n, 2 * horizon)
    tol = 5 / np.sqrt(2 * n * act_dim)  # 2.8%
    assert abs(x.std() / STD - 1) < tol
    assert abs(x.mean()) < 5 * STD / np.sqrt(n * act_dim)  # zero mean, steps taken as one draw
    assert x.dtype == np.float32 and x.shape == (2 * horizon, n, act_dim)


@pytest.mark.parametrize(("beta", "horizon"), [(0.0, 64), (1.0, 2), (1.0, 65), (2.0, 1000)])
def test_colored_std_matches_the_library(beta, horizon):
    import pink

    raw = pink.ColoredNoiseProcess(beta, (8192, horizon), rng=np.random.default_rng(0)).buffer
    assert abs(raw.std() / colored_std(beta, horizon) - 1) < 5 / np.sqrt(2 * 8192)


def test_ou_settles_at_its_stationary_std():
    theta, dt, n, act_dim = 1.0, 0.1, 16, 1024
    noise = make_noise("ou", STD, act_dim, seed=0, theta=theta, dt=dt)
    _run(noise, n, 150)  # (1 - theta dt)^150 < 1e-6 of the start (zero) is left
    x = _run(noise, n, 100)
    # The Euler step x' = (1 - theta dt) x + std sqrt(dt) e settles at this variance.
    expected = STD * np.sqrt(dt / (1 - (1 - theta * dt) ** 2))
    assert abs(x.std() / expected - 1) < 5 / np.sqrt(2 * n * act_dim)


def test_none_is_zeros():
    assert not make_noise("none", STD, 3, seed=0)(4).any()


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="noise must be one of"):
        make_noise("brown", STD, 2, seed=0)


# -- colour ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "beta", "slope"),
    [("gaussian", 1.0, 0.0), ("pink", 1.0, -1.0), ("colored", 2.0, -2.0), ("colored", 0.0, 0.0)],
)
def test_power_spectrum_slope(kind, beta, slope):
    horizon = 256
    x = _run(make_noise(kind, STD, 8, seed=1, beta=beta, horizon=horizon), 32, horizon)
    assert abs(_spectrum_slope(_series(x)) - slope) < 0.3


def test_white_is_uncorrelated_in_time_and_pink_is_not():
    horizon, n, act_dim = 256, 32, 8
    white = _series(_run(make_noise("gaussian", STD, act_dim, seed=2), n, horizon))
    pink = _series(_run(make_noise("pink", STD, act_dim, seed=2, horizon=horizon), n, horizon))
    # White: n * act_dim * (horizon - 1) independent products, a standard error of 1 / sqrt(that).
    assert abs(_lag1(white)) < 5 / np.sqrt(white.size)
    assert _lag1(pink) > 0.5  # ~0.72 at 256 steps


# -- one process per copy, restarted at its episode end -------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "pink", "colored", "ou"])
def test_copies_are_independent(kind):
    n, act_dim, steps = 4, 2048, 64
    x = _run(make_noise(kind, STD, act_dim, seed=3, horizon=steps), n, steps)
    x = x / x.std()
    for a in range(n):
        for b in range(a + 1, n):
            # For each dimension the mean over steps of x_a x_b has variance <= 1 (the terms'),
            # so over act_dim independent dimensions the standard error is <= 1 / sqrt(act_dim).
            assert abs(np.mean(x[:, a] * x[:, b])) < 5 / np.sqrt(act_dim), (a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_reset_restarts_only_the_masked_copies(kind):
    mask = np.array([False, True, False, True])
    kept = ~mask
    twin, noise = (make_noise(kind, STD, 3, seed=4, horizon=16) for _ in range(2))
    np.testing.assert_array_equal(_run(twin, 4, 10), _run(noise, 4, 10))
    noise.reset(mask)
    if kind == "ou":
        assert not noise.state[mask].any() and noise.state[kept].all()
    after, without = _run(noise, 4, 20), _run(twin, 4, 20)  # across the 16-step cut
    np.testing.assert_array_equal(after[:, kept], without[:, kept])
    if kind in ("pink", "colored", "ou"):
        assert (after[:, mask] != without[:, mask]).all()
    else:  # nothing to restart
        np.testing.assert_array_equal(after, without)


def test_pink_reset_starts_a_whole_new_sequence():
    horizon = 16
    noise = make_noise("pink", STD, 2, seed=5, horizon=horizon)
    _run(noise, 2, horizon - 4)
    noise.reset(np.array([True, False]))
    # The restarted copy runs a full sequence; the other one cuts to its next one in 4 steps.
    assert [p.idx for p in noise.procs] == [0, horizon - 4]


def test_reset_of_another_size_is_ignored():
    noise = make_noise("pink", STD, 2, seed=6, horizon=8)
    twin = copy.deepcopy(noise)
    noise(3), twin(3)
    noise.reset(np.array([True, True]))  # not this noise's 3 copies
    np.testing.assert_array_equal(noise(3), twin(3))


# -- seeding --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "pink", "colored", "ou"])
def test_same_seed_same_samples(kind):
    a, b, c = (make_noise(kind, STD, 2, seed=s, horizon=8) for s in (7, 7, 8))
    xa, xb, xc = (_run(z, 3, 20) for z in (a, b, c))
    np.testing.assert_array_equal(xa, xb)
    assert not np.allclose(xa, xc)


# -- DDPG -----------------------------------------------------------------------------------------


def _done(obs: np.ndarray, action: np.ndarray, done: np.ndarray) -> Transitions:
    n = len(obs)
    reward = np.zeros((n, 1), np.float32)
    return Transitions(obs, action, reward, obs, done, np.zeros(n, bool), obs, ActOut(action))


def test_ddpg_acts_with_pink_noise():
    space = SpaceInfo(obs_dim=3, act_dim=2, discrete=False)
    # noise_std 1 so that many noisy actions leave [-1, 1] and get clipped.
    params = Params(hidden=[8], learning_starts=0, noise="pink", noise_std=1.0, noise_horizon=50)
    agent = DDPG(space, params, seed=9)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    explored, clipped = [], 0
    for _ in range(60):  # past the first 50-step cut
        twin = copy.deepcopy(agent.noise)
        greedy = agent.act(obs, explore=False).action
        noisy = agent.act(obs, explore=True).action
        assert noisy.dtype == np.float32 and np.abs(noisy).max() <= 1.0
        np.testing.assert_allclose(noisy, np.clip(greedy + twin(5), -1, 1), atol=1e-6)
        explored.append(noisy)
        clipped += int((np.abs(noisy) == 1.0).sum())
    assert clipped > 0
    # Same seed, same exploration.
    again = DDPG(space, params, seed=9)
    np.testing.assert_array_equal(again.act(obs, explore=True).action, explored[0])
    # An episode end (terminated or truncated) restarts that copy's sequence only.
    done = np.array([False, True, False, False, False])
    agent.observe(_done(obs, noisy, done))
    assert [p.idx for p in agent.noise.procs] == [10, 0, 10, 10, 10]


def test_ou_noise_that_would_diverge_is_refused_naming_ou_theta() -> None:
    # x <- (1 - theta dt) x + ...: with theta dt = 3 the noise was inf, then NaN actions, within
    # ~130 steps, and `wheeler2 check` passed the config.
    with pytest.raises(ParamError, match=r"ou_theta \* ou_dt must be below 2") as err:
        make_noise("ou", 0.1, 1, 0, theta=300.0, dt=0.01)
    assert err.value.key == "ou_theta"
    # Below 2 (overshooting but stable) it stays bounded and is accepted.
    ou = make_noise("ou", 0.1, 1, 0, theta=150.0, dt=0.01)
    xs = np.array([ou(2) for _ in range(500)])
    assert np.isfinite(xs).all() and np.abs(xs).max() < 1.0
