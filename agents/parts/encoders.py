"""Observation encoders: the MLP trunk every network here starts with, and RBF features.

Every policy is an :class:`MLP` with two sub-modules, ``trunk`` (the hidden layers) and ``head``
(the last linear layer). Each actor declares them as its weight-sync roles (``sync_roles``, role
-> sub-module path) and its action space (``sync_actions``), so an explorer can take a learner's
trunk and keep its own head (``keep = ["head"]``) across algorithm families. A role is copied
only into a role built from the same layer kinds, activations included (set ``activation``
alike on both members; ``wheeler2/sync/``). RBF features (:class:`RBFEncoder`) go first in a
trunk (``trunk.0``), so they travel with the trunk role.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from wheeler2.agent import ParamError
from wheeler2.schema import bounded, choice

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


def activation(name: str) -> type[nn.Module]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        known = list(ACTIVATIONS)
        raise ValueError(f"unknown activation {name!r}, expected one of {known}") from None


def ortho_init_(module: nn.Module, gain: float) -> None:
    # Orthogonal weights keep activations' scale through tanh layers (SB3 / baselines PPO habit).
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


class MLP(nn.Module):
    """``head(trunk(x))`` with ``trunk`` = [Linear, act] * len(hidden) and ``head`` = Linear."""

    # Weight sync (wheeler2/sync/): role -> sub-module path, and the action space the output is
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


# -- images --------------------------------------------------------------------------------------

# What an image encoder is built from (``encoder`` in [team.params]); "auto" picks by size.
IMAGE_ENCODERS = ("auto", "nature_cnn", "impala", "small_cnn")
NATURE_MIN_SIDE = 36  # 8x8 stride 4, 4x4 stride 2, 3x3: the smallest image the stack takes


class ImageEncoder(nn.Module):
    """Features of a flat uint8 image row: ``x[..., :in_dim]`` is a channels-first
    ``shape = (C, H, W)`` image, scaled to [0, 1] here (so the replay, the rollouts and the
    exported policy all carry bytes), then the convolutional ``body``; the remaining
    ``passthrough`` columns (a critic's action) follow the features unchanged. Any leading
    shape is kept (``[B, D]``, ``[T, B, D]``).

    It goes first in a trunk (``trunk.0``, :func:`image_features_`), so it travels with the
    ``trunk`` sync role and an explorer takes the learner's convolutions with its trunk."""

    def __init__(self, shape: Sequence[int], body: nn.Module, out_dim: int, passthrough: int = 0):
        super().__init__()
        self.shape = tuple(int(d) for d in shape)
        self.in_dim = math.prod(self.shape)
        self.passthrough = passthrough
        self.out_dim = out_dim + passthrough
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        img = x[..., : self.in_dim].reshape(-1, *self.shape).float() / 255.0
        z = self.body(img).reshape(*lead, -1)
        if self.passthrough:
            return torch.cat([z, x[..., self.in_dim :].float()], dim=-1)
        return z

    def extra_repr(self) -> str:
        return f"shape={self.shape}, passthrough={self.passthrough}"


@dataclass
class ImageParams:
    """The image options of an algorithm's ``Params`` (a base class of them): which encoder
    reads image observations (ignored on flat ones, where only ``"auto"`` is accepted)."""

    # "auto": the Nature CNN for images of at least 36x36, else the IMPALA ResNet;
    # "small_cnn": MinAtar's one convolution (16 3x3 filters), cheap on a CPU.
    encoder: str = choice("auto", IMAGE_ENCODERS)


@dataclass
class AugmentParams(ImageParams):
    """:class:`ImageParams` plus DrQ's augmentation, for the off-policy learners."""

    # "shift": every update trains on randomly shifted images (DrQ); acting never sees it.
    augment: str = choice("none", ("none", "shift"))
    shift_pad: int = bounded(4, ge=1, le=16)  # the shift's largest offset, in pixels


def nature_cnn(shape: Sequence[int]) -> tuple[nn.Module, int]:
    """The convolutions of Mnih et al. (2015)'s network: 32 8x8/4, 64 4x4/2, 64 3x3/1, ReLU
    after each, flattened; (body, width). ``hidden = [512]`` after it is the paper's network."""
    c, h, w = shape
    if min(h, w) < NATURE_MIN_SIDE:
        raise ParamError(
            "encoder",
            f'encoder = "nature_cnn" needs images of at least {NATURE_MIN_SIDE}x'
            f'{NATURE_MIN_SIDE}, this env\'s are {h}x{w}: use encoder = "impala"',
        )
    convs = nn.Sequential(
        nn.Conv2d(c, 32, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
    )
    return convs, _width(convs, shape)


def _width(body: nn.Module, shape: Sequence[int]) -> int:
    """The number of features ``body`` gives for one image of ``shape``."""
    with torch.no_grad():
        return int(body(torch.zeros(1, *shape)).shape[1])


class ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, 3x3 convolutions keeping the channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(
    shape: Sequence[int], channels: Sequence[int] = (16, 32, 32)
) -> tuple[nn.Module, int]:
    """Espeholt et al. (2018)'s small ResNet: per stage a 3x3 convolution, a 3x3 max pool of
    stride 2 and two residual blocks; then ReLU, flattened; (body, width). ``hidden = [256]``
    after it is the paper's network. Any image fits (each pool rounds up), MinAtar's 10x10
    included."""
    c = shape[0]
    layers: list[nn.Module] = []
    for out in channels:
        layers += [
            nn.Conv2d(c, out, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(out),
            ResidualBlock(out),
        ]
        c = out
    convs = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
    return convs, _width(convs, shape)


def small_cnn(shape: Sequence[int], channels: int = 16) -> tuple[nn.Module, int]:
    """MinAtar's network (Young & Tian 2019) without its linear layer: ``channels`` 3x3
    convolutions of stride 1 and ReLU, flattened; with ``hidden = [128]`` after it, the
    paper's DQN network. Cheap enough for 10x10 images on a CPU."""
    c, h, w = shape
    if min(h, w) < 3:
        raise ParamError(
            "encoder", f'encoder = "small_cnn" needs images of at least 3x3, got {h}x{w}'
        )
    body = nn.Sequential(nn.Conv2d(c, channels, 3, stride=1), nn.ReLU(), nn.Flatten())
    return body, _width(body, shape)


def image_encoder(kind: str, shape: Sequence[int], passthrough: int = 0) -> ImageEncoder:
    """An :class:`ImageEncoder` of ``kind`` (:data:`IMAGE_ENCODERS`; ``"auto"``: the Nature
    CNN where the image is large enough for it, else the IMPALA ResNet)."""
    if kind not in IMAGE_ENCODERS:
        raise ParamError(
            "encoder", f"unknown image encoder {kind!r}, expected one of {list(IMAGE_ENCODERS)}"
        )
    if kind == "auto":
        kind = "nature_cnn" if min(shape[1:]) >= NATURE_MIN_SIDE else "impala"
    build = {"nature_cnn": nature_cnn, "impala": impala_cnn, "small_cnn": small_cnn}[kind]
    body, out_dim = build(shape)
    return ImageEncoder(shape, body, out_dim, passthrough)


def image_feature_dim(kind: str, shape: Sequence[int]) -> int:
    """The width of the features :func:`image_encoder` gives (before any passthrough)."""
    return image_encoder(kind, shape).out_dim


def image_features_(module: nn.Module, kind: str, shape: Sequence[int]) -> nn.Module:
    """Give every :class:`MLP` inside ``module`` (an actor, a critic's nets, a DiscreteQ's net,
    a V) an image encoder of its own first in its trunk; each MLP must have been built with
    :func:`image_feature_dim` observation inputs, the rest of its input (a critic's action)
    passed through."""
    width = image_feature_dim(kind, shape)
    for net in [m for m in module.modules() if isinstance(m, MLP)]:
        first = next(m for m in [*net.trunk, net.head] if hasattr(m, "in_features"))
        encoder = image_encoder(kind, shape, first.in_features - width)
        with_features_(net, encoder.to(next(net.parameters()).device))
    return module


def shift_offsets(
    n: int, pad: int, gen: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random crop offsets ``(dx, dy)`` in [0, 2 pad] (:func:`random_shift`)."""
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(device)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(device)
    return dx, dy


def random_shift(
    x: torch.Tensor,
    shape: Sequence[int],
    pad: int,
    gen: torch.Generator,
    offsets: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """DrQ's augmentation (Kostrikov et al. 2021): each image of the flat uint8 rows ``x``
    (``[..., C*H*W]``) padded by ``pad`` pixels, edges repeated, and cropped back at a random
    offset in [0, 2 pad]^2; one offset per row, the same for all its channels (its stacked
    frames move together). ``offsets`` (:func:`shift_offsets`, one per index of ``x``'s first
    axis) instead shares one offset along the other leading axes: a sequence's steps
    ``[B, T, ...]`` move together. Integer shifts keep the bytes exact. Learners apply it to the
    batch they train on, never to what they act or evaluate on."""
    c, h, w = shape
    lead = x.shape[:-1]
    img = x.reshape(-1, c, h, w)
    n = img.shape[0]
    padded = nn.functional.pad(img.float(), (pad, pad, pad, pad), mode="replicate")
    if offsets is None:
        dx, dy = shift_offsets(n, pad, gen, x.device)
    else:
        per = n // offsets[0].shape[0]  # rows of x per offset (steps of a sequence)
        dx, dy = (o.to(x.device).repeat_interleave(per) for o in offsets)
    rows = (dy[:, None] + torch.arange(h, device=x.device)[None, :])[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device)[None, :])[:, None, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chans = torch.arange(c, device=x.device)[None, :, None, None]
    out = padded[batch, chans, rows, cols]
    return out.to(x.dtype).reshape(*lead, -1)
