"""Versioned weight broadcast from a team's learner to its explorers, through shared memory.

The learner's actor is published as one flat float32 block; explorers pull it every
``sync.every`` of their own steps and blend it into their own actor, tensor by tensor, except the
tensors named by ``sync.keep`` (their own last layers)::

    pub = WeightPublisher.create(learner.actor)     # main process, before members are spawned
    handle = pub.handle()                           # picklable; passed to the member processes
    WeightPublisher.attach(handle).publish(actor)   # learner process (or just pickle ``pub``)
    client = WeightClient.attach(handle, explorer.actor, keep=["actor.head"], alpha=1.0)
    client.pull()                                   # explorer process: version pulled, or None
    pub.close()                                     # main process: unlinks the segment

Segment layout: a 64-byte header (int64 version first) then the tensors, packed in
``state_dict()`` order. Consistency comes from ``flock`` on the segment's own file: the writer
holds it exclusively while it copies, readers hold it shared while they read. A kernel lock is
used rather than a seqlock so that the ordering holds on weakly ordered CPUs as well, and it is
released by the kernel if a process dies holding it, so a crashed learner cannot wedge explorers.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np
import torch
from torch import nn

from wheeler2.buffer.shm import Segment

__all__ = [
    "SyncError",
    "SyncPlan",
    "WeightHandle",
    "WeightPublisher",
    "WeightClient",
    "blend",
    "check_sync",
    "float_state",
    "match_keep",
    "source_shapes",
]

_HEADER_BYTES = 64  # keeps the data cache-line aligned; slot 0 holds the version


class SyncError(ValueError):
    """A team's weight sync cannot work as configured (raised before anything is spawned)."""


@dataclass(frozen=True)
class WeightHandle:
    """What a process needs to attach to a published actor; small and picklable."""

    name: str
    numel: int
    layout: tuple[tuple[str, tuple[int, ...], int], ...]  # (name, shape, offset in floats)


# --------------------------------------------------------------------------------------------
# name matching


def _module_of(name: str) -> str:
    return name.rpartition(".")[0] or name


def _pattern_variants(pattern: str) -> tuple[str, ...]:
    # Both the raw pattern and the one without "actor." are tried, so an actor that really has a
    # sub-module called "actor" still matches, while the TOML spelling "actor.head" works too.
    variants = [pattern]
    if pattern.startswith("actor."):
        variants.append(pattern[len("actor.") :])
    return tuple(variants)


def _pattern_matches(pattern: str, name: str) -> bool:
    for p in _pattern_variants(pattern):
        # "head" names a module: it keeps everything under it, as "head.*" would.
        if fnmatchcase(name, p) or fnmatchcase(name, p + ".*"):
            return True
    return False


def match_keep(name: str, keep: Sequence[str]) -> bool:
    """Whether the state_dict entry ``name`` is kept (not synced) under the ``keep`` globs."""
    return any(_pattern_matches(p, name) for p in keep)


def _float_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items() if torch.is_floating_point(v)}


def _plan(
    source: dict[str, tuple[int, ...]],
    target: dict[str, tuple[int, ...]],
    keep: Sequence[str],
    member: str,
) -> list[str]:
    """The names to sync from ``source`` into ``target``; raises SyncError on a bad setup."""
    names = list(target) + [k for k in source if k not in target]
    for pattern in keep:
        if not any(_pattern_matches(pattern, n) for n in names):
            modules = ", ".join(dict.fromkeys(_module_of(n) for n in names))
            raise SyncError(
                f"[[team]] {member}: sync.keep pattern {pattern!r} matches no module of the "
                f"actor; its modules are: {modules}"
            )
    synced = []
    for name, shape in target.items():
        if name not in source or match_keep(name, keep):
            continue
        if source[name] != shape:
            raise SyncError(
                f"[[team]] {member}: sync would copy {name!r} but its shape differs: learner "
                f"{list(source[name])} vs {member} {list(shape)}; the hidden sizes of the synced "
                f"layers must match between the learner's and this member's params (or add the "
                f"layer to sync.keep)"
            )
        synced.append(name)
    if not synced:
        raise SyncError(
            f"[[team]] {member}: sync would copy nothing from the learner's actor (learner: "
            f"{', '.join(source) or 'no float tensors'}; {member}: "
            f"{', '.join(target) or 'no float tensors'}; keep: {list(keep)})"
        )
    return synced


class SyncPlan:
    """Which of a member's actor tensors take the learner's values, and how: the one rule for
    every transport (shared memory here, Ray's object store in ``runtime.ray_member``)."""

    def __init__(
        self,
        source: dict[str, tuple[int, ...]],
        module: nn.Module,
        keep: Sequence[str],
        alpha: float,
        member: str,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise SyncError(f"[[team]] {member}: sync alpha must be in (0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.names: tuple[str, ...] = tuple(_plan(source, _float_shapes(module), keep, member))
        self._slots = _slots(module, self.names)

    def targets(self) -> list[torch.Tensor]:
        return [d[k] for d, k in self._slots]

    @torch.no_grad()
    def apply(self, source: dict[str, torch.Tensor]) -> None:
        """Blend ``source`` (name -> tensor, e.g. :func:`float_state` of the learner's actor)
        into the module; every planned name must be there."""
        targets = self.targets()
        missing = [n for n in self.names if n not in source]
        if missing:
            raise SyncError(f"published weights lack {missing}: learner and plan disagree")
        blend(targets, [source[n].to(t.device) for n, t in zip(self.names, targets)], self.alpha)


def float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The float tensors of ``module`` as detached CPU copies: what a learner publishes."""
    return {
        k: v.detach().to("cpu", copy=True)
        for k, v in module.state_dict().items()
        if torch.is_floating_point(v)
    }


def source_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the float tensors a learner's actor publishes."""
    return _float_shapes(module)


def check_sync(
    learner_actor: nn.Module, explorer_actor: nn.Module, keep: list[str], member: str
) -> None:
    """Fail early, with the member's name, if ``member`` cannot sync from ``learner_actor``.

    Raises :class:`SyncError` when a keep pattern matches nothing, when a synced tensor's shape
    differs between the two actors, or when nothing at all would be synced.
    """
    _plan(_float_shapes(learner_actor), _float_shapes(explorer_actor), keep, member)


# --------------------------------------------------------------------------------------------
# the shared block (a wheeler2.buffer.shm.Segment) and its lock


class _Locked:
    """``with _Locked(fd, exclusive):`` holds flock on ``fd``."""

    __slots__ = ("fd", "op")

    def __init__(self, fd: int, exclusive: bool) -> None:
        self.fd = fd
        self.op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH

    def __enter__(self) -> None:
        fcntl.flock(self.fd, self.op)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


class _Shared:
    """The segment viewed as a version slot and one flat float32 tensor."""

    def __init__(self, segment: Segment, numel: int) -> None:
        self.segment = segment
        self.header = np.frombuffer(segment.mmap, dtype=np.int64, count=8, offset=0)
        self.flat = torch.from_numpy(
            np.frombuffer(segment.mmap, dtype=np.float32, count=numel, offset=_HEADER_BYTES)
        )

    @property
    def version(self) -> int:
        return int(self.header[0])

    def close(self) -> None:
        # Every view of the mapping must be gone before mmap.close() can succeed.
        self.header = None  # type: ignore[assignment]
        self.flat = None  # type: ignore[assignment]
        self.segment.close()


def _slots(module: nn.Module, names: Sequence[str]) -> list[tuple[dict, str]]:
    """(owning dict, key) of each named parameter/buffer, so the tensor is looked up per call.

    Caching the tensors themselves would go stale when ``module.to()`` replaces buffers (or
    parameters, with ``overwrite_module_params_on_conversion``).
    """
    out = []
    for name in names:
        mod_path, _, attr = name.rpartition(".")
        mod = module.get_submodule(mod_path)
        if attr in mod._parameters:
            out.append((mod._parameters, attr))
        elif attr in mod._buffers:
            out.append((mod._buffers, attr))
        else:  # an extra state_dict entry that is not a plain tensor attribute
            raise SyncError(f"cannot sync {name!r}: not a parameter or buffer of the module")
    return out


# --------------------------------------------------------------------------------------------
# learner side


class WeightPublisher:
    """Learner side: publishes its actor's float tensors into one shared block, versioned."""

    def __init__(self, handle: WeightHandle, segment: Segment) -> None:
        self._handle = handle
        self._shared = _Shared(segment, handle.numel)
        self._names = [name for name, _, _ in handle.layout]
        self._shapes = {name: shape for name, shape, _ in handle.layout}
        self._source: tuple[weakref.ref, list[tuple[dict, str]]] | None = None
        self._staging: torch.Tensor | None = None  # for actors not on the CPU
        self._thread_lock = threading.Lock()  # flock does not exclude threads sharing one fd
        self._closed = False

    @classmethod
    def create(cls, template: nn.Module) -> WeightPublisher:
        """Allocate the block for ``template``'s layout. The calling process owns (unlinks) it."""
        layout = []
        offset = 0
        for name, tensor in template.state_dict().items():
            if torch.is_floating_point(tensor):
                layout.append((name, tuple(tensor.shape), offset))
                offset += tensor.numel()
        if not layout:
            raise SyncError(f"{type(template).__name__} has no float tensors to publish")
        name = f"w2sync_{os.getpid()}_{secrets.token_hex(4)}"
        nbytes = _HEADER_BYTES + 4 * max(offset, 1)
        segment = Segment(name, (nbytes,), np.dtype(np.uint8), create=True)
        pub = cls(WeightHandle(name, offset, tuple(layout)), segment)
        # Ctrl-C and uncaught errors unwind through atexit; close() is idempotent.
        atexit.register(pub.close)
        return pub

    @classmethod
    def attach(cls, handle: WeightHandle) -> WeightPublisher:
        """Open an existing block (e.g. in the learner process); never unlinks it."""
        return cls(handle, Segment.attach_bytes(handle.name))

    def __reduce__(self) -> tuple:
        # Sending the publisher to a member process hands over access, not ownership.
        return (WeightPublisher.attach, (self._handle,))

    def handle(self) -> WeightHandle:
        return self._handle

    @property
    def version(self) -> int:
        """Number of publishes so far (0: nothing published yet)."""
        return self._shared.version

    def _sources(self, module: nn.Module) -> list[torch.Tensor]:
        cached = self._source
        if cached is None or cached[0]() is not module:
            shapes = _float_shapes(module)
            if shapes != self._shapes:
                raise SyncError(
                    f"cannot publish {type(module).__name__}: its float tensors "
                    f"{_describe(shapes)} differ from the published layout "
                    f"{_describe(self._shapes)}"
                )
            cached = (weakref.ref(module), _slots(module, self._names))
            self._source = cached
        return [d[k].detach().reshape(-1) for d, k in cached[1]]

    @torch.no_grad()
    def publish(self, module: nn.Module) -> int:
        """Copy ``module``'s weights into the block in one bulk copy; returns the new version."""
        if self._closed:
            raise RuntimeError("publish() on a closed WeightPublisher")
        shared = self._shared
        sources = self._sources(module)
        on_cpu = sources[0].device.type == "cpu"
        if not on_cpu:
            # Gather on the device first so the lock only covers one device-to-host copy.
            if self._staging is None or self._staging.device != sources[0].device:
                self._staging = torch.empty(
                    self._handle.numel, dtype=torch.float32, device=sources[0].device
                )
            torch.cat(sources, out=self._staging)
        with self._thread_lock, _Locked(shared.segment.lock_fd(), exclusive=True):
            if on_cpu:
                torch.cat(sources, out=shared.flat)
            else:
                shared.flat.copy_(self._staging)
            version = int(shared.header[0]) + 1
            shared.header[0] = version
        return version

    def close(self) -> None:
        """Detach; in the process that created the block, also unlink it."""
        if self._closed:
            return
        self._closed = True
        self._source = None
        self._staging = None
        segment = self._shared.segment
        try:
            self._shared.close()
        finally:
            segment.unlink()
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(shapes: dict[str, tuple[int, ...]]) -> str:
    return "{" + ", ".join(f"{k}: {list(v)}" for k, v in shapes.items()) + "}"


# --------------------------------------------------------------------------------------------
# explorer side


class WeightClient:
    """Explorer side: pulls the learner's latest weights into its own actor, in place."""

    def __init__(
        self,
        handle: WeightHandle,
        module: nn.Module,
        keep: Sequence[str],
        alpha: float,
        member: str = "explorer",
    ) -> None:
        source = {name: shape for name, shape, _ in handle.layout}
        offsets = {name: offset for name, _, offset in handle.layout}
        self.plan = SyncPlan(source, module, keep, alpha, member)
        self.module = module
        names = self.plan.names
        self.alpha = self.plan.alpha
        self.synced: tuple[str, ...] = names
        self._spans = [(offsets[n], offsets[n] + _numel(source[n]), source[n]) for n in names]
        self._shared = _Shared(Segment.attach_bytes(handle.name), handle.numel)
        self._views = self._make_views(self._shared.flat)
        self._staging: tuple[torch.Tensor, list[torch.Tensor]] | None = None
        self._pulled = 0

    @classmethod
    def attach(
        cls,
        handle: WeightHandle,
        module: nn.Module,
        keep: list[str],
        alpha: float,
        member: str = "explorer",
    ) -> WeightClient:
        """Attach to the learner's block; ``module`` is updated in place by :meth:`pull`."""
        return cls(handle, module, keep, alpha, member)

    @classmethod
    def factory(
        cls, handle: WeightHandle, keep: Sequence[str], alpha: float, member: str
    ) -> Callable[[nn.Module], WeightClient]:
        """A client maker for a member whose actor is built later (the member loop's source)."""
        return lambda module: cls(handle, module, list(keep), alpha, member)

    def _make_views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [flat[a:b].view(shape) for a, b, shape in self._spans]

    @property
    def version(self) -> int:
        """The version last pulled (0: none yet)."""
        return self._pulled

    @property
    def latest(self) -> int:
        """The version currently published."""
        return self._shared.version

    def lag(self, version_now: int | None = None) -> int:
        """How many publishes behind the pulled weights are (against ``latest`` by default)."""
        now = self.latest if version_now is None else version_now
        return max(0, now - self._pulled)

    @torch.no_grad()
    def pull(self) -> int | None:
        """Blend the latest published weights into the module; the version, or None if stale."""
        shared = self._shared
        # An unlocked peek: an aligned int64 read is atomic, and a stale value only means the
        # update is picked up on the next pull.
        if shared.header[0] == self._pulled:
            return None
        targets = self.plan.targets()
        device = targets[0].device
        with _Locked(shared.segment.lock_fd(), exclusive=False):
            version = int(shared.header[0])
            if version == self._pulled:
                return None
            if device.type == "cpu":
                # Blend straight from the shared block: the lock is held for one pass over it.
                blend(targets, self._views, self.alpha)
            else:
                staging = self._device_staging(device)
                staging[0].copy_(shared.flat)
        if device.type != "cpu":
            blend(targets, staging[1], self.alpha)
        self._pulled = version
        return version

    def _device_staging(self, device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self._staging is None or self._staging[0].device != device:
            flat = torch.empty(self._shared.flat.numel(), dtype=torch.float32, device=device)
            self._staging = (flat, self._make_views(flat))
        return self._staging

    def close(self) -> None:
        """Detach from the block (the learner's owner unlinks it)."""
        if self._shared is None:
            return
        self._views = []
        self._staging = None
        self._shared.close()
        self._shared = None  # type: ignore[assignment]

    def __enter__(self) -> WeightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def blend(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], alpha: float) -> None:
    """θ ← α·θ_source + (1−α)·θ, in place, tensor by tensor (α = 1 copies)."""
    if alpha == 1.0:
        for t, s in zip(targets, sources):
            t.copy_(s)
    else:
        for t, s in zip(targets, sources):
            if t.dtype == s.dtype:
                t.lerp_(s, alpha)
            else:  # rare: a float64 actor; lerp_ wants matching dtypes
                t.mul_(1.0 - alpha).add_(s.to(t.dtype), alpha=alpha)
