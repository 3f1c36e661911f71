"""Exploration noise that off-policy actors (DDPG) add to their actions, for N env copies.

Kinds, by how the noise at one step relates to the next:

- ``"gaussian"``: white noise, independent at every step.
- ``"pink"``: 1/f noise (Eberhard et al., ICLR 2023, "Pink noise is all you need"): between
  white and Brownian, so it explores both locally and with slow drifts.
- ``"colored"``: power spectrum 1/f^beta for any beta in [0, 2] (0 white, 1 pink, 2 red).
- ``"ou"``: Ornstein-Uhlenbeck, the original DDPG paper's temporally correlated noise.
- ``"none"``: zeros.

Every kind keeps one independent process per env copy and restarts a copy's process when that
copy's episode ends (``reset(done)``), so a new episode never continues the last one's drift.

``state_dict`` / ``load_state_dict`` carry a process's whole state (its generators, an OU
process's position, a colored sequence and where it is in it) in checkpoint-safe values, so a
resumed agent draws from the streams the uninterrupted one would have drawn from. A resumed
run's envs start new episodes, so the agent restarts every copy's process at its first draw
after the restore (``OffPolicy.explore``), as it would at an episode end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from wheeler2.agent import ParamError
from wheeler2.checkpoint import from_safe, generator_state, set_generator_state, to_safe
from wheeler2.schema import bounded, choice

if TYPE_CHECKING:
    import pink

KINDS = ("gaussian", "pink", "colored", "ou", "none")


@dataclass
class NoiseParams:
    """The action-noise fields of a deterministic actor's ``Params`` (DDPG's, TD3's)."""

    # Exploration noise kind: white, 1/f, 1/f^noise_beta, Ornstein-Uhlenbeck.
    noise: str = choice("gaussian", KINDS)
    noise_std: float = bounded(0.1, ge=0)  # std of the action noise, in [-1, 1] action units
    # Spectrum exponent of "colored" noise: 0 white, 1 pink, 2 red; the paper's range.
    noise_beta: float = bounded(1.0, ge=0, le=2)
    # Steps per "pink" / "colored" sequence: the longest correlation. The paper uses the episode
    # length; 1000 is that of most MuJoCo tasks (set it to the env's own).
    noise_horizon: int = bounded(1000, ge=2)
    ou_theta: float = bounded(0.15, ge=0)  # Ornstein-Uhlenbeck mean reversion rate
    ou_dt: float = bounded(1e-2, gt=0)  # Ornstein-Uhlenbeck time step


class Noise(Protocol):
    def __call__(self, n: int) -> np.ndarray:
        """One step of noise for n env copies: float32 [n, act_dim]."""
        ...

    def reset(self, done: np.ndarray) -> None:
        """Restart the processes of the copies where the bool mask ``done`` [n] is true."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything the next draws depend on, checkpoint-safe."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def make_noise(
    kind: str,
    std: float,
    act_dim: int,
    seed: int,
    *,
    beta: float = 1.0,
    horizon: int = 1000,
    theta: float = 0.15,
    dt: float = 1e-2,
) -> Noise:
    """The noise process ``kind`` (one of ``KINDS``), seeded for reproducible samples."""
    if kind == "gaussian":
        return WhiteNoise(std, act_dim, seed)
    if kind == "pink":
        return ColoredNoise(1.0, std, act_dim, seed, horizon)
    if kind == "colored":
        return ColoredNoise(beta, std, act_dim, seed, horizon)
    if kind == "ou":
        return OUNoise(std, theta, dt, act_dim, seed)
    if kind == "none":
        return NoNoise(act_dim)
    raise ValueError(f"noise must be one of {KINDS}, got {kind!r}")


class WhiteNoise:
    """Independent N(0, std^2) at every step; nothing to restart."""

    def __init__(self, std: float, act_dim: int, seed: int):
        self.std, self.act_dim = std, act_dim
        self.rng = np.random.default_rng(seed)

    def __call__(self, n: int) -> np.ndarray:
        return self.rng.normal(0.0, self.std, (n, self.act_dim)).astype(np.float32)

    def reset(self, done: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"rng": generator_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_generator_state(self.rng, state["rng"])


class NoNoise:
    def __init__(self, act_dim: int):
        self.act_dim = act_dim

    def __call__(self, n: int) -> np.ndarray:
        return np.zeros((n, self.act_dim), np.float32)

    def reset(self, done: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class ColoredNoise:
    """Gaussian noise with power spectrum 1/f^beta, from ``pink.ColoredNoiseProcess``.

    The library draws whole sequences of ``horizon`` steps (a new one when a sequence runs out);
    the paper sets that length to the episode length. Each copy has its own process and its own
    random generator, so restarting one copy (a new sequence at its episode end) leaves the other
    copies' samples exactly as they would have been.
    """

    def __init__(self, beta: float, std: float, act_dim: int, seed: int, horizon: int):
        if horizon < 2:
            raise ValueError(f"noise horizon must be >= 2 steps, got {horizon}")
        self.beta, self.act_dim, self.horizon = beta, act_dim, horizon
        # The library normalizes its sequences without their constant (f = 0) term, so their std
        # is above 1 (pink: ~1.04 at 1000 steps, red: ~1.14); divide it out so that std is the
        # noise's per-step std, as it is for the white noise.
        self.scale = std / colored_std(beta, horizon)
        self.seeds = np.random.SeedSequence(seed)
        self.procs: list[pink.ColoredNoiseProcess] = []

    def __call__(self, n: int) -> np.ndarray:
        if len(self.procs) != n:
            self.procs = [self._process(s) for s in self.seeds.spawn(n)]
        return np.stack([p.sample() for p in self.procs]).astype(np.float32)

    def reset(self, done: np.ndarray) -> None:
        if len(self.procs) != len(done):
            return
        for i in np.flatnonzero(done):
            self.procs[i].reset()  # a new sequence from this copy's own generator

    def state_dict(self) -> dict[str, Any]:
        # Each copy's generator, its current sequence and the index of its next sample.
        procs = [
            {"rng": generator_state(p.rng), "buffer": to_safe(p.buffer), "idx": int(p.idx)}
            for p in self.procs
        ]
        return {"spawned": int(self.seeds.n_children_spawned), "procs": procs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["procs"]
        # The processes as __call__ makes them (the same spawn count), then their saved state.
        before = max(0, int(state["spawned"]) - len(saved))
        self.seeds = np.random.SeedSequence(
            self.seeds.entropy, spawn_key=self.seeds.spawn_key, n_children_spawned=before
        )
        self.procs = [self._process(s) for s in self.seeds.spawn(len(saved))] if saved else []
        for proc, s in zip(self.procs, saved):
            set_generator_state(proc.rng, s["rng"])
            proc.buffer = np.array(from_safe(s["buffer"]), np.float64)
            proc.idx = int(s["idx"])

    def _process(self, seed: np.random.SeedSequence) -> pink.ColoredNoiseProcess:
        # Imported here: the package imports stable_baselines3 and tensorboard (~0.4 s), which
        # every DDPG/TD3 member and config check paid at import for a noise few of them use.
        import pink

        return pink.ColoredNoiseProcess(
            beta=self.beta,
            size=(self.act_dim, self.horizon),
            scale=self.scale,
            rng=np.random.default_rng(seed),
        )


def colored_std(beta: float, horizon: int) -> float:
    """The per-step std of ``pink.powerlaw_psd_gaussian(beta, horizon)`` (pink-noise-rl 2.0.1).

    It draws Fourier coefficient k with std s_k = f_k^(-beta/2) per real and imaginary part
    (f_0 taken as f_1; the constant and, for even lengths, the Nyquist term real with std
    sqrt(2) s_k), so Var y_t = (2 s_0^2 + 4 sum_{0<k<n/2} s_k^2 + 2 s_{n/2}^2) / n^2, and divides
    by a sigma that leaves out the constant term and counts the Nyquist one as s_{n/2}^2 / n^2.
    """
    n = horizon
    f = np.fft.rfftfreq(n)
    f[0] = f[1]
    s2 = f ** (-beta)
    var = 2 * s2[0] + 4 * s2[1:].sum()
    sigma2 = 4 * s2[1:].sum()
    if n % 2 == 0:  # the last term is the (real) Nyquist one
        var -= 2 * s2[-1]
        sigma2 -= 3 * s2[-1]
    return float(np.sqrt(var / sigma2))


class OUNoise:
    """Ornstein-Uhlenbeck noise, dx = -theta x dt + std sqrt(dt) dW from x = 0, as SB3 / rl-zoo
    define it: ``std`` is the diffusion scale, and the per-step std settles at
    std / sqrt(theta (2 - theta dt)) after about 1 / (theta dt) steps."""

    def __init__(self, std: float, theta: float, dt: float, act_dim: int, seed: int):
        if theta * dt >= 2.0:
            # Each step multiplies x by (1 - theta dt): from theta dt = 2 on it grows without
            # bound (to inf, then NaN actions within a few hundred steps).
            raise ParamError(
                "ou_theta",
                f"ou_theta: ou_theta * ou_dt must be below 2 for the Ornstein-Uhlenbeck noise to "
                f"stay bounded (each step multiplies it by 1 - ou_theta * ou_dt), got "
                f"{theta} * {dt} = {theta * dt:g}",
            )
        self.std, self.theta, self.dt, self.act_dim = std, theta, dt, act_dim
        self.rng = np.random.default_rng(seed)
        self.state: np.ndarray | None = None  # [N, act_dim]

    def __call__(self, n: int) -> np.ndarray:
        if self.state is None or len(self.state) != n:
            self.state = np.zeros((n, self.act_dim), np.float32)
        dw = self.rng.normal(0.0, np.sqrt(self.dt), self.state.shape)
        self.state += (-self.theta * self.state * self.dt + self.std * dw).astype(np.float32)
        return self.state.copy()

    def reset(self, done: np.ndarray) -> None:
        if self.state is not None and len(self.state) == len(done):
            self.state[done] = 0.0

    def state_dict(self) -> dict[str, Any]:
        x = None if self.state is None else to_safe(self.state.copy())
        return {"rng": generator_state(self.rng), "x": x}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_generator_state(self.rng, state["rng"])
        x = state["x"]
        self.state = None if x is None else np.array(from_safe(x), np.float32)


def noise_from(params: NoiseParams, act_dim: int, seed: int) -> Noise:
    """The action noise a deterministic actor's ``Params`` asks for (its :class:`NoiseParams`)."""
    p = params
    return make_noise(
        p.noise,
        p.noise_std,
        act_dim,
        seed,
        beta=p.noise_beta,
        horizon=p.noise_horizon,
        theta=p.ou_theta,
        dt=p.ou_dt,
    )
