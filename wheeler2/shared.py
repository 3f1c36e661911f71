"""Parameters that several members read and update in place: one shared-memory block per table
whose members share them (A3C's workers, ``agents/a3c.py``; issue 37).

Weight sync (``wheeler2/sync/``) has one writer, the learner, and readers that copy; here
every member writes. An agent offers what it shares through the optional method
``shared_tensors() -> {name: tensor}`` (its parameters and its optimizer's statistics, say);
the backend's owner process creates the block from the table learner's tensors (so a resumed
run starts from the checkpoint), and each sharing member's agent gets views of it through its
``use_shared(tensors, lock)``, after it was built and restored. ``lock()`` is ``flock`` on the
segment, exclusive, released by the kernel if a holder dies::

    block = SharedBlock.create(learner.shared_tensors())    # owner, before members start
    handle = block.handle()                                 # picklable
    share(agent, SharedBlock.attach(handle))                # each member, in its own process
    block.close()                                           # owner: unlinks

Serial and local place their members on one machine, so the block is ordinary shared memory
(``/dev/shm``, named like the weight blocks, so a dead run's block is swept the same way). Ray
may place members on several nodes, where no memory is shared: ``check`` refuses such a team
on ray (``runtime/team.py``) rather than ship gradients through the object store silently.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wheeler2.buffer.shm import Segment

__all__ = ["SharedBlock", "SharedHandle", "share", "shared_tensors"]

_HEADER_BYTES = 64


@dataclass(frozen=True)
class SharedHandle:
    """What a member process needs to attach: the segment's name and the tensors' layout."""

    name: str
    numel: int
    layout: tuple[tuple[str, tuple[int, ...], int], ...]  # (name, shape, offset in floats)


def shared_tensors(agent: Any) -> dict[str, torch.Tensor] | None:
    """What ``agent`` shares with its table's other sharing members (its optional
    ``shared_tensors()``), or None where its algorithm shares nothing."""
    offer = getattr(agent, "shared_tensors", None)
    return dict(offer()) if callable(offer) else None


def shared_signature(agent: Any) -> dict[str, str]:
    """What must match, beyond the tensors' shapes, for two members to share them, by name
    (the agent's optional ``shared_signature()``: e.g. ``{"networks": its layers and
    activations, "lr": its step size}``); empty where it declares nothing."""
    offer = getattr(agent, "shared_signature", None)
    return {k: str(v) for k, v in offer().items()} if callable(offer) else {}


class SharedBlock:
    """Named float32 tensors in one shared-memory segment, and its lock."""

    def __init__(self, handle: SharedHandle, segment: Segment) -> None:
        self._handle = handle
        self.segment = segment
        flat = np.frombuffer(segment.mmap, np.float32, handle.numel, _HEADER_BYTES)
        self._flat = torch.from_numpy(flat)
        self._closed = False

    @classmethod
    def create(cls, tensors: dict[str, torch.Tensor]) -> SharedBlock:
        """A block holding ``tensors``' current values; this process owns (unlinks) it."""
        layout, offset = [], 0
        for name, t in tensors.items():
            layout.append((name, tuple(t.shape), offset))
            offset += t.numel()
        name = f"w2sync_{os.getpid()}_{secrets.token_hex(4)}"
        nbytes = _HEADER_BYTES + 4 * max(offset, 1)
        segment = Segment(name, (nbytes,), np.dtype(np.uint8), create=True)
        block = cls(SharedHandle(name, offset, tuple(layout)), segment)
        with torch.no_grad():
            views = block.tensors()
            for key, t in tensors.items():
                views[key].copy_(t.detach().to("cpu", torch.float32))
        atexit.register(block.close)
        return block

    @classmethod
    def attach(cls, handle: SharedHandle) -> SharedBlock:
        """Open the owner's block (in a member process); never unlinks it."""
        return cls(handle, Segment.attach_bytes(handle.name))

    def __reduce__(self) -> tuple:
        # Sent to a member process: access, not ownership.
        return (SharedBlock.attach, (self._handle,))

    def handle(self) -> SharedHandle:
        return self._handle

    def tensors(self) -> dict[str, torch.Tensor]:
        """Fresh views of the block, by name (a member's own tensor objects, its optimizer's
        keys): writing into them writes for every member."""
        return {
            name: self._flat[offset : offset + _numel(shape)].view(shape)
            for name, shape, offset in self._handle.layout
        }

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive: one member at a time reads-modifies-writes the block."""
        fd = self.segment.lock_fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Detach; in the process that created the block, also unlink it."""
        if self._closed:
            return
        self._closed = True
        self._flat = None  # type: ignore[assignment]
        try:
            self.segment.close()
        finally:
            self.segment.unlink()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)


def share(agent: Any, block: SharedBlock) -> None:
    """Hand ``agent`` the block's views and lock (its ``use_shared``): from here on it reads and
    updates the table's shared tensors instead of its own."""
    agent.use_shared(block.tensors(), block.lock)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
