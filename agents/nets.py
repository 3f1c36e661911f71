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
        self._linears: list[nn.Linear] = []
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
        self._linears = [m for m in [*self.net.trunk, self.net.head] if isinstance(m, nn.Linear)]
        self._ptrs = self._storage()

    def _storage(self) -> list[int]:
        # Read through the layers' attributes rather than net.parameters(), which walks the
        # module tree on every act (measured under load: ~14 µs here against ~25 µs).
        return [t.data_ptr() for m in self._linears for t in (m.weight, m.bias)]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not self._layers or self._storage() != self._ptrs:
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


def sample_outputs(
    out: torch.Tensor, log_std: torch.Tensor | None, explore: bool, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a policy's outputs ``out`` -> (env action, raw sample, log-prob of the raw
    sample). ``log_std`` None: ``out`` are the logits of a categorical policy; else the means of
    a Gaussian with that log std.

    Continuous: the env gets the sample clipped to [-1, 1], but the log-prob is that of the
    unclipped sample, the one the Gaussian actually produced (clipping is the env's business).
    ``explore = False`` takes the mode (mean / argmax). Feedforward and recurrent actors
    (agents/cores.py) both draw here.
    """
    if log_std is None:
        logp_all = torch.log_softmax(out, dim=-1)
        if explore:
            raw = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        else:
            raw = out.argmax(-1)
        return raw, raw, logp_all.gather(-1, raw.unsqueeze(-1)).squeeze(-1)
    log_std = log_std.expand_as(out)
    raw = out
    if explore:
        noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        raw = out + log_std.exp() * noise
    return raw.clamp(-1.0, 1.0), raw, gaussian_log_prob(raw, out, log_std)


def evaluate_outputs(
    out: torch.Tensor, log_std: torch.Tensor | None, raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw) and the policy entropy under the outputs ``out`` (``log_std`` as in
    :func:`sample_outputs`), both of ``out``'s leading shape, with gradients."""
    if log_std is None:
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, raw.long().unsqueeze(-1)).squeeze(-1)
        return logp, -(logp_all.exp() * logp_all).sum(-1)
    log_std = log_std.expand_as(out)
    return gaussian_log_prob(raw, out, log_std), gaussian_entropy(log_std).expand(out.shape[:-1])


def _log_std(actor: GaussianActor | CategoricalActor) -> torch.Tensor | None:
    return None if isinstance(actor, CategoricalActor) else actor.log_std


def sample_action(
    actor: GaussianActor | CategoricalActor,
    obs: torch.Tensor,
    explore: bool,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw from a stochastic actor at ``obs`` (:func:`sample_outputs`)."""
    return sample_outputs(actor(obs), _log_std(actor), explore, generator)


def evaluate_actions(
    actor: GaussianActor | CategoricalActor, obs: torch.Tensor, raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(raw | obs) and the policy entropy per state, both [B], with gradients."""
    return evaluate_outputs(actor(obs), _log_std(actor), raw)


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


# -- noisy networks (issue 15) ------------------------------------------------------------------


def _scaled_noise(n: int, generator: torch.Generator | None) -> torch.Tensor:
    """f(eps) = sign(eps) sqrt(|eps|), eps ~ N(0, 1): the factorized noise of Fortunato et al."""
    eps = torch.randn(n, generator=generator)
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorized Gaussian parameter noise (NoisyNet, Fortunato et al. 2018):

        y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out)

    with mu ~ U[-1/sqrt(p), 1/sqrt(p)] and sigma = sigma0 / sqrt(p) (p = in_features, the
    paper's sigma0 = 0.5). The means are named ``weight`` and ``bias``, as in ``nn.Linear``, the
    learned noise scales ``weight_sigma`` and ``bias_sigma``; the noise itself (``eps_in``,
    ``eps_out``) is a non-persistent buffer, in no state dict and never synced.

    In training mode the layer uses the noise drawn by the last :meth:`resample` (zero before
    the first); in eval mode (``.eval()``, :func:`noise_off`) the mean weights alone. It is not an
    ``nn.Linear`` on purpose: code that reads ``weight`` of every Linear (``NumpyForward``)
    must not mistake it for one.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features, self.sigma0 = in_features, out_features, sigma0
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight.uniform_(-bound, bound)
        self.bias.uniform_(-bound, bound)
        self.weight_sigma.fill_(self.sigma0 * bound)
        self.bias_sigma.fill_(self.sigma0 * bound)

    @torch.no_grad()
    def resample(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise (on the CPU, from ``generator``: reproducible and device-independent)."""
        self.eps_in.copy_(_scaled_noise(self.in_features, generator))
        self.eps_out.copy_(_scaled_noise(self.out_features, generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = nn.functional.linear(x, self.weight, self.bias)
        if not self.training:
            return mean
        # (sigma_w * eps_out eps_in^T) x = eps_out * (sigma_w (eps_in * x)): no [out, in] matrix
        # of noise is built, one extra thin matmul instead.
        noise = nn.functional.linear(x * self.eps_in, self.weight_sigma) + self.bias_sigma
        return mean + noise * self.eps_out

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, sigma0={self.sigma0}"


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def resample_noise(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """New noise for every :class:`NoisyLinear` of ``module`` (one draw per layer)."""
    for m in noisy_layers(module):
        m.resample(generator)


@contextlib.contextmanager
def noise_off(module: nn.Module) -> Iterator[None]:
    """The mean weights of every NoisyLinear of ``module`` inside the block (eval mode for those
    layers only), their previous mode after it."""
    layers = noisy_layers(module)
    modes = [m.training for m in layers]
    for m in layers:
        m.train(False)
    try:
        yield
    finally:
        for m, mode in zip(layers, modes):
            m.train(mode)


def noisy_head_(net: MLP, sigma0: float = 0.5) -> MLP:
    """Replace ``net.head`` (a Linear) by a :class:`NoisyLinear` of the same shape, in place.

    The head keeps its sync role and its tensor names ``head.weight`` / ``head.bias`` (the
    means), plus ``head.weight_sigma`` / ``head.bias_sigma``: an explorer whose head is noisy
    too takes means and scales together; one with a plain head must keep it
    (``sync.keep = ["head"]``), which ``check_sync`` says by naming ``head.weight_sigma``.
    """
    head = net.head
    if not isinstance(head, nn.Linear):
        raise TypeError(f"noisy_head_: expected an nn.Linear head, got {type(head).__name__}")
    net.head = NoisyLinear(head.in_features, head.out_features, sigma0).to(head.weight.device)
    return net


# -- RBF features (issue 15) --------------------------------------------------------------------


class RBFEncoder(nn.Module):
    """Gaussian radial basis features of the first ``in_dim`` input columns:

        phi_j(x) = exp(-||x - c_j||^2 / (2 w^2)),   j = 1 .. num_centers

    then the remaining ``passthrough`` columns unchanged (a critic's action). The centers are
    drawn once from N(0, I) by a generator seeded with ``seed``, which suits inputs of unit scale
    (``normalize_obs = true``); ``width = 0`` takes w = sqrt(in_dim), for which the expected
    squared distance of a unit-normal input to a center (2 in_dim) gives phi = exp(-1).
    Centers and width are persistent buffers: they are in the state dict (a checkpoint restores
    the very features) and, under the ``trunk`` role, in weight sync (an explorer with the same
    ``rbf_*`` keys takes them with the trunk; one without features is refused by shape).
    """

    def __init__(
        self, in_dim: int, num_centers: int, width: float = 0.0, seed: int = 0, passthrough: int = 0
    ) -> None:
        super().__init__()
        if num_centers < 1:
            raise ValueError(f"RBFEncoder: num_centers must be >= 1, got {num_centers}")
        if width < 0:
            raise ValueError(f"RBFEncoder: width must be >= 0 (0: sqrt(in_dim)), got {width}")
        gen = torch.Generator().manual_seed(int(seed))
        self.in_dim, self.num_centers, self.passthrough = in_dim, num_centers, passthrough
        self.out_dim = num_centers + passthrough
        w = float(width) if width > 0 else math.sqrt(in_dim)
        self.register_buffer("centers", torch.randn(num_centers, in_dim, generator=gen))
        self.register_buffer("width", torch.tensor([w]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x[..., : self.in_dim]
        c = self.centers
        # ||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2: one matmul, no [B, C, D] temporary.
        d2 = (z * z).sum(-1, keepdim=True) - 2.0 * (z @ c.T) + (c * c).sum(-1)
        phi = torch.exp(-d2.clamp_min(0.0) / (2.0 * self.width * self.width))
        if self.passthrough:
            return torch.cat([phi, x[..., self.in_dim :]], dim=-1)
        return phi

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, num_centers={self.num_centers}, "
            f"width={float(self.width):.4g}, passthrough={self.passthrough}"
        )


def with_features_(net: MLP, encoder: nn.Module) -> MLP:
    """Put ``encoder`` before the first layer of ``net``, in place, as ``trunk.0`` (so it travels
    with the trunk role). ``net`` must have been built with ``in_dim = encoder.out_dim``."""
    first = next((m for m in [*net.trunk, net.head] if hasattr(m, "in_features")), None)
    out_dim = getattr(encoder, "out_dim", None)
    if first is not None and out_dim is not None and first.in_features != out_dim:
        raise ValueError(
            f"with_features_: the encoder gives {out_dim} features, the first layer takes "
            f"{first.in_features}"
        )
    net.trunk = nn.Sequential(encoder, *net.trunk)
    return net


def feature_dim(features: str, obs_dim: int, num_centers: int) -> int:
    """The width of the first layer's input for a ``features`` choice (``"none"`` / ``"rbf"``)."""
    return num_centers if features == "rbf" else obs_dim


def rbf_features_(
    module: nn.Module, obs_dim: int, num_centers: int, width: float, seed: int
) -> nn.Module:
    """Give every :class:`MLP` inside ``module`` (an actor, a QCritic's nets, a DiscreteQ's net)
    RBF features of its first ``obs_dim`` inputs, the rest (a critic's action) passed through;
    each MLP must have been built with ``num_centers`` observation inputs. All get the same
    centers (one ``seed``), so actor and critic see the same features."""
    nets = [m for m in module.modules() if isinstance(m, MLP)]
    for net in nets:
        first = next(m for m in [*net.trunk, net.head] if hasattr(m, "in_features"))
        passthrough = first.in_features - num_centers
        encoder = RBFEncoder(obs_dim, num_centers, width, seed, passthrough)
        with_features_(net, encoder.to(next(net.parameters()).device))
    return module


class NumpyLayers:
    """:class:`NumpyForward` for the issue-15 layers too: an :class:`RBFEncoder` first in the
    trunk and :class:`NoisyLinear` layers (their noise as drawn, or the means in eval mode),
    besides Linear / ReLU / Tanh. Views of the module's own parameters and buffers, as there,
    so optimizer steps, sync, ``load_state_dict`` and ``resample`` are seen at once."""

    def __init__(self, net: MLP, squash: bool) -> None:
        self.net = net
        self.squash = squash
        self._ptrs: list[int] = []
        self._steps: list[Callable[[np.ndarray], np.ndarray]] = []

    @classmethod
    def of(cls, net: MLP, squash: bool) -> NumpyLayers | None:
        tensors = [*net.parameters(), *net.buffers()]
        if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
            return None
        mods = [*net.trunk, net.head]
        for i, m in enumerate(mods):
            ok = isinstance(m, nn.Linear | NoisyLinear) or type(m) in NumpyForward._ACTIVATIONS
            if not ok and not (i == 0 and isinstance(m, RBFEncoder)):
                return None
        return cls(net, squash)

    def _tensors(self) -> list[torch.Tensor]:
        return [*self.net.parameters(), *self.net.buffers()]

    def _build(self) -> None:
        def view(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy()

        steps: list[Callable[[np.ndarray], np.ndarray]] = []
        for m in [*self.net.trunk, self.net.head]:
            if isinstance(m, nn.Linear):
                w, b = view(m.weight).T, view(m.bias)
                steps.append(lambda h, w=w, b=b: h @ w + b)
            elif isinstance(m, NoisyLinear):
                w, b = view(m.weight).T, view(m.bias)
                ws, bs = view(m.weight_sigma).T, view(m.bias_sigma)
                ein, eout = view(m.eps_in), view(m.eps_out)

                def noisy(h, m=m, w=w, b=b, ws=ws, bs=bs, ein=ein, eout=eout):  # noqa: ANN001, ANN202
                    out = h @ w + b
                    if m.training:
                        out += ((h * ein) @ ws + bs) * eout
                    return out

                steps.append(noisy)
            elif isinstance(m, RBFEncoder):
                c, width = view(m.centers), view(m.width)

                def rbf(h, m=m, c=c, width=width):  # noqa: ANN001, ANN202
                    z = h[:, : m.in_dim]
                    d2 = (z * z).sum(-1, keepdims=True) - 2.0 * (z @ c.T) + (c * c).sum(-1)
                    phi = np.exp(-np.maximum(d2, 0.0) / (2.0 * width[0] * width[0]))
                    if m.passthrough:
                        return np.concatenate([phi, h[:, m.in_dim :]], axis=-1)
                    return phi

                steps.append(rbf)
            else:
                steps.append(NumpyForward._ACTIVATIONS[type(m)])
        self._steps = steps
        self._ptrs = [t.data_ptr() for t in self._tensors()]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if [t.data_ptr() for t in self._tensors()] != self._ptrs:
            self._build()
        h = np.asarray(x, np.float32)
        for step in self._steps:
            h = step(h)
        return np.tanh(h, out=h) if self.squash else h
