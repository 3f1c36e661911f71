"""Network builders shared by the algorithms in ``agents/``.

Every policy is an :class:`MLP` with two sub-modules, ``trunk`` (the hidden layers) and ``head``
(the last linear layer). Each actor declares them as its weight-sync roles (``sync_roles``, role
-> sub-module path) and its action space (``sync_actions``), so an explorer can take a learner's
trunk and keep its own head (``keep = ["head"]``) across algorithm families: DQN's ``DiscreteQ``
keeps its layers at ``net.trunk`` / ``net.head`` (the attribute names its checkpoints hold) and
declares those paths, so its trunk seeds a PPO or A2C ``CategoricalActor`` with the same
``hidden``. Weights are copied by shape: the activations (relu, tanh) may differ.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar

import numpy as np
import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


def activation(name: str) -> type[nn.Module]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        known = list(ACTIVATIONS)
        raise ValueError(f"unknown activation {name!r}, expected one of {known}") from None


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Build networks from ``seed`` without touching the caller's global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def resolve_device(arg: str | torch.device, param: str) -> torch.device:
    """The engine passes ``device`` to the constructor and users may set ``params.device``.

    Whichever is not the default ``"cpu"`` wins, so either way of asking for CUDA works.
    """
    arg = torch.device(arg)
    return arg if arg.type != "cpu" else torch.device(param)


def ortho_init_(module: nn.Module, gain: float) -> None:
    # Orthogonal weights keep activations' scale through tanh layers (SB3 / baselines PPO habit).
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


class MLP(nn.Module):
    """``head(trunk(x))`` with ``trunk`` = [Linear, act] * len(hidden) and ``head`` = Linear."""

    # Weight sync (wheeler2/sync.py): role -> sub-module path, and the action space the output is
    # for (None: not a policy by itself, e.g. a critic's net).
    sync_roles: ClassVar[dict[str, str]] = {"trunk": "trunk", "head": "head"}
    sync_actions: ClassVar[str | None] = None

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, act: str = "relu"):
        super().__init__()
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(in_dim, h), activation(act)()]
            in_dim = h
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


class DeterministicActor(MLP):
    """DDPG's mu(s) = tanh(head(trunk(s))), in [-1, 1]^act_dim."""

    sync_actions = "continuous"

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)))


class NumpyForward:
    """An :class:`MLP`'s forward in numpy, for acting on a few rows at a time on the CPU.

    A member acts on one row per env copy, and at that size torch's per-op dispatch and its
    sgemm for thin matrices dominate: 8 rows through DDPG's 3-400-300-1 actor took ~110 µs in
    torch and ~50 µs here (experiments/bench_collect.py). The arrays are views of the parameters
    themselves, so optimizer steps, weight sync (``copy_``/``lerp_``) and ``load_state_dict``,
    which all write in place, are seen at once; if a parameter's storage is ever replaced, the
    views are rebuilt on the next call.
    """

    _ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]] = {
        nn.ReLU: lambda x: np.maximum(x, 0.0, out=x),
        nn.Tanh: lambda x: np.tanh(x, out=x),
    }

    def __init__(self, net: MLP, squash: bool) -> None:
        self.net = net
        self.squash = squash  # tanh on the output, as DeterministicActor does
        self._ptrs: list[int] = []
        self._layers: list[tuple[np.ndarray, np.ndarray, Callable | None]] = []

    @classmethod
    def of(cls, net: MLP, squash: bool) -> NumpyForward | None:
        """None where it does not apply: parameters off the CPU or not float32, or a layer
        other than Linear / ReLU / Tanh."""
        params = list(net.parameters())
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
            return None
        kinds = [type(m) for m in [*net.trunk, net.head]]
        if any(k is not nn.Linear and k not in cls._ACTIVATIONS for k in kinds):
            return None
        return cls(net, squash)

    def _build(self) -> None:
        layers: list[tuple[np.ndarray, np.ndarray, Callable | None]] = []
        for m in [*self.net.trunk, self.net.head]:
            if isinstance(m, nn.Linear):
                # weight.T is a transposed view: BLAS reads it in place, nothing is copied.
                layers.append((m.weight.detach().numpy().T, m.bias.detach().numpy(), None))
            else:
                w, b, _ = layers[-1]
                layers[-1] = (w, b, self._ACTIVATIONS[type(m)])
        self._layers = layers
        self._ptrs = [p.data_ptr() for p in self.net.parameters()]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if [p.data_ptr() for p in self.net.parameters()] != self._ptrs:
            self._build()
        h = np.asarray(x, np.float32)
        for w, b, act in self._layers:
            h = h @ w
            h += b
            if act is not None:
                h = act(h)
        return np.tanh(h, out=h) if self.squash else h


class GaussianActor(MLP):
    """pi(a|s) = N(head(trunk(s)), exp(log_std)); the std does not depend on the state.

    ``forward`` returns the mean, i.e. the deterministic action (clip it to [-1, 1] to act).
    """

    sync_actions = "continuous"

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int],
        act_dim: int,
        act: str = "tanh",
        log_std_init: float = 0.0,
    ):
        super().__init__(obs_dim, hidden, act_dim, act)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))


class CategoricalActor(MLP):
    """pi(a|s) = softmax(head(trunk(s))); ``forward`` returns the logits."""

    sync_actions = "discrete"


def gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """log N(action; mean, exp(log_std)) summed over action dimensions -> [B]."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (same for every state: the std is state-independent)."""
    return (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)


def build_actor(
    obs_dim: int,
    act_dim: int,
    discrete: bool,
    hidden: Sequence[int],
    act: str = "tanh",
    log_std_init: float = 0.0,
    ortho: bool = True,
) -> GaussianActor | CategoricalActor:
    """The stochastic policy of the on-policy algorithms (PPO, A2C)."""
    if discrete:
        net: GaussianActor | CategoricalActor = CategoricalActor(obs_dim, hidden, act_dim, act)
    else:
        net = GaussianActor(obs_dim, hidden, act_dim, act, log_std_init)
    if ortho:
        ortho_init_(net.trunk, math.sqrt(2))
        # A small last layer starts the policy near uniform / near zero mean (Andrychowicz et al.).
        ortho_init_(net.head, 0.01)
    return net


class VCritic(nn.Module):
    """V(s) -> [B]."""

    def __init__(self, obs_dim: int, hidden: Sequence[int], act: str = "tanh", ortho: bool = True):
        super().__init__()
        self.net = MLP(obs_dim, hidden, 1, act)
        if ortho:
            ortho_init_(self.net.trunk, math.sqrt(2))
            ortho_init_(self.net.head, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)


class QCritic(nn.Module):
    """Q(s, a) for H reward heads -> [B, H].

    ``mode = "separate"``: H independent MLPs (no head's gradient disturbs another's features).
    ``mode = "shared"``: one trunk with an H-wide last layer (cheaper, features shared).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int = 1,
        mode: str = "separate",
        act: str = "relu",
    ):
        super().__init__()
        if mode not in ("separate", "shared"):
            raise ValueError(f"critic mode must be 'separate' or 'shared', got {mode!r}")
        self.mode = mode
        if mode == "shared":
            self.nets = nn.ModuleList([MLP(obs_dim + act_dim, hidden, num_heads, act)])
        else:
            self.nets = nn.ModuleList(
                MLP(obs_dim + act_dim, hidden, 1, act) for _ in range(num_heads)
            )

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        if len(self.nets) == 1:
            return self.nets[0](x)
        return torch.cat([net(x) for net in self.nets], dim=-1)


class DiscreteQ(nn.Module):
    """Q(s, .) over all discrete actions -> [B, num_actions].

    Its layers live at ``net.trunk`` / ``net.head`` (the names in DQN checkpoints); the sync roles
    map them to ``trunk`` / ``head``, so the Q-network seeds a categorical policy of the same
    ``hidden`` (the head's Q values become logits whose argmax is the greedy action).
    """

    sync_roles: ClassVar[dict[str, str]] = {"trunk": "net.trunk", "head": "net.head"}
    sync_actions: ClassVar[str | None] = "discrete"

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int], act: str = "relu"):
        super().__init__()
        self.net = MLP(obs_dim, hidden, num_actions, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


@torch.no_grad()
def polyak_(target: Sequence[torch.Tensor], online: Sequence[torch.Tensor], tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, in one fused call over all tensors."""
    torch._foreach_lerp_(list(target), list(online), tau)


def sample_action(
    actor: GaussianActor | CategoricalActor,
    obs: torch.Tensor,
    explore: bool,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a stochastic actor -> (env action, raw sample, log-prob of the raw sample).

    Continuous: the env gets the sample clipped to [-1, 1], but the log-prob is that of the
    unclipped sample, the one the Gaussian actually produced (clipping is the env's business).
    ``explore = False`` takes the mode (mean / argmax).
    """
    out = actor(obs)
    if isinstance(actor, CategoricalActor):
        logp_all = torch.log_softmax(out, dim=-1)
        if explore:
            raw = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        else:
            raw = out.argmax(-1)
        return raw, raw, logp_all.gather(-1, raw.unsqueeze(-1)).squeeze(-1)
    log_std = actor.log_std.expand_as(out)
    raw = out
    if explore:
        noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        raw = out + log_std.exp() * noise
    return raw.clamp(-1.0, 1.0), raw, gaussian_log_prob(raw, out, log_std)


def evaluate_actions(
    actor: GaussianActor | CategoricalActor, obs: torch.Tensor, raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw | obs) and the policy entropy per state, both [B], with gradients."""
    out = actor(obs)
    if isinstance(actor, CategoricalActor):
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, raw.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy
    log_std = actor.log_std.expand_as(out)
    return gaussian_log_prob(raw, out, log_std), gaussian_entropy(log_std)


class TwinQCritic(nn.Module):
    """Two independent :class:`QCritic` (``q1``, ``q2``), each with one output per reward head,
    for the clipped double Q of TD3 and SAC -> ``[2, B, H]``; ``.min(0).values`` is the
    per-head pessimistic estimate."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        num_heads: int = 1,
        mode: str = "separate",
        act: str = "relu",
    ):
        super().__init__()
        self.q1 = QCritic(obs_dim, act_dim, hidden, num_heads, mode, act)
        self.q2 = QCritic(obs_dim, act_dim, hidden, num_heads, mode, act)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.q1(obs, action), self.q2(obs, action)])


# SAC's bounds on the policy's log std (those of the SAC reference code and SB3).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SquashedGaussianActor(MLP):
    """SAC's pi(a|s): u ~ N(head(trunk(s)), exp(log_std_head(trunk(s)))), a = tanh(u).

    ``trunk`` and ``head`` (the mean) are the weight-sync roles, as in every actor here, so
    ``forward`` is the deterministic mean action tanh(head(trunk(s))), the same computation as
    :class:`DeterministicActor`: an explorer that syncs from SAC gets the mean path (trunk and
    mean head). ``log_std_head`` sits outside the roles; sync matches it by name, so it travels
    between SAC actors and is skipped for a PPO / A2C explorer, which has a ``log_std`` of its own.
    """

    sync_actions = "continuous"

    def __init__(self, obs_dim: int, hidden: Sequence[int], act_dim: int, act: str = "relu"):
        super().__init__(obs_dim, hidden, act_dim, act)
        self.log_std_head = nn.Linear(hidden[-1] if hidden else obs_dim, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)))

    def mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        log_std = self.log_std_head(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.head(h), log_std

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized draw a = tanh(mean + std * eps) and its log-prob log pi(a|s) [B]."""
        mean, log_std = self.mean_log_std(obs)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * eps
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) for u ~ N(mean, exp(log_std)), summed over action dimensions -> [B].

    Change of variables (Haarnoja et al. 2018, appendix C): log pi(a) = log N(u) - sum_i
    log(1 - tanh(u_i)^2), with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), which stays
    finite where tanh(u) rounds to +-1.
    """
    log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return gaussian_log_prob(u, mean, log_std) - log_det.sum(-1)
