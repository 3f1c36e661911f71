"""The shared-memory transport of a team's weights: one versioned block per table that the
learner writes (:class:`WeightPublisher`) and its members read (:class:`WeightClient`). The
package's docstring gives the block's layout and why it is locked with ``flock``.
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

import numpy as np
import torch
from torch import nn

from wheeler2.buffer.shm import Segment

from .plan import SyncPlan, tensor_slots
from .roles import SyncError, float_shapes

_HEADER_BYTES = 64  # keeps the data cache-line aligned; slot 0 holds the version


@dataclass(frozen=True)
class WeightHandle:
    """What a process needs to attach to a published actor; small and picklable."""

    name: str
    numel: int
    layout: tuple[tuple[str, tuple[int, ...], int], ...]  # (role name, shape, offset in floats)


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
        for name, shape in float_shapes(template).items():
            layout.append((name, shape, offset))
            offset += _numel(shape)
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
    def pulls(self) -> tuple[str, ...]:
        """The modules the block holds besides the actor (see :class:`ModuleSet`)."""
        names = (name.split("/", 1)[0] for name, _, _ in self._handle.layout if "/" in name)
        return tuple(dict.fromkeys(names))

    @property
    def version(self) -> int:
        """Number of publishes so far (0: nothing published yet)."""
        return self._shared.version

    def _sources(self, module: nn.Module) -> list[torch.Tensor]:
        cached = self._source
        if cached is None or cached[0]() is not module:
            shapes = float_shapes(module)
            if shapes != self._shapes:
                raise SyncError(
                    f"cannot publish {type(module).__name__}: its float tensors "
                    f"{_describe(shapes)} differ from the published layout "
                    f"{_describe(self._shapes)}"
                )
            cached = (weakref.ref(module), tensor_slots(module, self._names))
            self._source = cached
        return [d[k].detach().reshape(-1) for d, k in cached[1]]

    @torch.no_grad()
    def publish(self, module: nn.Module) -> int:
        """Copy ``module``'s weights into the block in one bulk copy; returns the new version."""
        if self._closed:
            raise RuntimeError("publish() on a closed WeightPublisher")
        shared = self._shared
        sources = self._sources(module)
        staging = None  # on the CPU the sources go straight into the block
        if sources[0].device.type != "cpu":
            # Gather on the device first so the lock only covers one device-to-host copy.
            if self._staging is None or self._staging.device != sources[0].device:
                self._staging = torch.empty(
                    self._handle.numel, dtype=torch.float32, device=sources[0].device
                )
            staging = self._staging
            torch.cat(sources, out=staging)
        with self._thread_lock, _Locked(shared.segment.lock_fd(), exclusive=True):
            if staging is None:
                torch.cat(sources, out=shared.flat)
            else:
                shared.flat.copy_(staging)
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
                self.plan.blend(targets, self._views)
            else:
                staging = self._device_staging(device)
                staging[0].copy_(shared.flat)
        if device.type != "cpu":
            self.plan.blend(targets, staging[1])
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
