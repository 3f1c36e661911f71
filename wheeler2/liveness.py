"""A member is heard from from its first instant: until it has started (and imported what its
first update needs), a thread beside its build sends :class:`Alive` every second with the CPU
seconds its process has used.

That tells a slow start from a hung one. A member importing torch on a loaded machine keeps
sending beats whose CPU time grows, however long the imports take; a stopped process (SIGSTOP,
a debugger) sends nothing; one stuck waiting (a deadlock, an env that never answers) sends beats
whose CPU time stands still. The coordinator judges each its own way
(:meth:`wheeler2.runtime.coordinator.Coordinator._find_failure`).

It imports no torch (nor do the messages), so a member starts the beat before importing
anything heavy.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from wheeler2.process import available_cores
from wheeler2.runtime.messages import Alive, Failed, Finished, Message

BEAT_S = 1.0


class StartBeat:
    """The link a member sends its messages through: beside them, a beat every :data:`BEAT_S`
    until the member has started, passed the team's start line and warmed up (or sent
    ``Failed`` or ``Finished``). Sends are serialized, so a pipe carries whole messages only."""

    def __init__(
        self, send: Callable[[Message], None], member: str, every_s: float = BEAT_S
    ) -> None:
        self._send = send
        self.member = member
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._warming = False
        self._thread = threading.Thread(
            target=self._beat, args=(every_s,), name="wheeler2-start-beat", daemon=True
        )
        self._thread.start()

    def send(self, message: Message) -> None:
        with self._lock:
            self._send(message)
        if isinstance(message, Failed | Finished):
            self.stop()

    def opened(self) -> None:
        """The team's start line has opened: the beat goes on while a thread imports what the
        member's first update needs, ``torch._dynamo`` (every optimizer step imports it: ~1.3 s
        here, many more on a loaded machine), which its start left out
        (:func:`wheeler2.process.defer_dynamo_import`). Not sooner: the import would take CPU
        from the members still building. A member that reaches its first update meanwhile waits
        for the import, heard from all the while; then its own figures are its heartbeat."""
        if self._warming:
            return
        self._warming = True

        def load() -> None:
            try:
                import torch._dynamo  # noqa: F401
            finally:
                self.stop()

        threading.Thread(target=load, name="wheeler2-warm-up", daemon=True).start()

    def stop(self) -> None:
        self._done.set()

    def _beat(self, every_s: float) -> None:
        while not self._done.is_set():
            with self._lock:
                if self._done.is_set():
                    return
                try:
                    self._send(Alive(self.member, time.process_time()))
                except (OSError, EOFError, ValueError):
                    return  # the coordinator is gone, or the link closed: the member learns too
            self._done.wait(every_s)


def starved_hint() -> str:
    """What to add to a "hangs" verdict where this machine runs more than it has cores: a
    member kept off the CPU falls as silent as a hung one, and the fix is a longer heartbeat,
    not a bug hunt. Empty on a machine with cores to spare (or no load average to read)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    cores = available_cores()
    if load <= cores:
        return ""
    return (
        f" (this machine is loaded, load average {load:.1f} on {cores} cores: a member kept "
        "off the CPU is as silent as a hung one; if that is all it was, raise [experiment] "
        "heartbeat_s, or resume with --set experiment.heartbeat_s=120)"
    )
