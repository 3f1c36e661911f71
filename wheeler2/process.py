"""Settings of a wheeler2 process: its compute threads, its niceness, and its tie to the
process that started it.

Every process that computes (a member, a replay shard, the serial driver) calls
:func:`set_compute_threads` first; a member in a process of its own also takes its ``nice``.
A leaf module (torch and threadpoolctl only, imported where used), so the buffer's Ray shards
and the runtime both use it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def available_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def set_compute_threads() -> int:
    """One intra-op thread per process, for torch and numpy's BLAS, unless
    ``WHEELER2_TORCH_THREADS`` says otherwise.

    The networks here are small (a 256 x 400 matmul): a second thread gains little and, when the
    other core is busy with an env or another member, each op waits for it. Measured here on a
    loaded 2-core machine: a DDPG update took 15-23 ms with 2 torch threads against ~1 ms with 1,
    and acting through numpy (agents.parts.numpy_forward.NumpyForward) ~430 µs with OpenBLAS's
    default threads against ~120 µs with 1.
    """
    import torch  # here: a member's start-up beat imports this module before torch
    from threadpoolctl import threadpool_limits

    n = max(1, int(os.environ.get("WHEELER2_TORCH_THREADS", "1")))
    torch.set_num_threads(n)
    threadpool_limits(n, user_api="blas")
    return n


_DYNAMO_CACHE = "__dynamo_disable"  # where torch._compile._disable_dynamo keeps what it made


class _UntilDynamo:
    """What torch's cache holds until ``torch._dynamo`` is imported by what needs it (an
    optimizer step, ``torch.compile``, a member's warm-up): the plain method; from then on,
    torch's own ``torch._dynamo.disable(fn, recursive=True)``, made and cached as torch
    would."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dynamo = sys.modules.get("torch._dynamo")
        spec = getattr(dynamo, "__spec__", None)
        if dynamo is None or getattr(spec, "_initializing", False):
            # Not imported, or being imported by a member's warm-up thread (wheeler2.liveness):
            # the plain method, rather than wait for an import that changes nothing outside
            # torch.compile.
            return self.fn(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(self.fn, True, wrapping=False)
        setattr(self.fn, _DYNAMO_CACHE, disabled)
        return disabled(*args, **kwargs)


def defer_dynamo_import() -> None:
    """Let torch optimizers be built, saved and loaded without importing ``torch._dynamo``
    (~1.3 s here) in this process.

    ``Optimizer.add_param_group``, ``state_dict``, ``load_state_dict`` and ``zero_grad`` are
    wrapped by ``torch._disable_dynamo``, whose first call imports dynamo only to mark the
    method as never traced by ``torch.compile``, and caches the marked method on the function.
    Filling that cache with :class:`_UntilDynamo` puts the import off until something needs
    dynamo anyway (every optimizer step imports it): a team's members reach their first step
    without it, and a coordinator that only builds learners to check the team never imports
    it. Nothing changes once it is imported. Idempotent.
    """
    import torch

    for name in dir(torch.optim.Optimizer):
        method = getattr(torch.optim.Optimizer, name, None)
        fn = getattr(method, "__wrapped__", None)
        code = getattr(method, "__code__", None)
        if fn is None or code is None or not code.co_filename.endswith("_compile.py"):
            continue
        if not hasattr(fn, _DYNAMO_CACHE):  # torch's cache, not yet made
            setattr(fn, _DYNAMO_CACHE, _UntilDynamo(fn))


def process_age_s() -> float | None:
    """Seconds since this process started (Linux; None elsewhere). Both clocks are the
    kernel's since boot, to 10 ms."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


# When the command about to start a run began (time.monotonic()), taken by that run.
_command_start: float | None = None


def mark_command_start(at_process_start: bool) -> None:
    """The CLI's, on entry: the run its command starts counts its start-up from here, or
    from the process's start where the process is the command (its interpreter and imports
    are start-up a user waits through)."""
    global _command_start
    age = process_age_s() if at_process_start else None
    _command_start = time.monotonic() - (age or 0.0)


def take_run_start() -> float:
    """When the run now starting began (``time.monotonic()``), for its start-up figure: its
    command's start for a command's first run, else now. Not the process's start: a seed
    after the first of ``--seeds``, run in the same process, or a run from the Python API in
    a long-lived process (a notebook, a test) would count every earlier run as its start-up."""
    global _command_start
    start, _command_start = _command_start, None
    return time.monotonic() if start is None else start


def set_niceness(want: int) -> None:
    """Raise this process's niceness to ``want`` (a member's ``nice``; a process of its own
    only). Never lowers it: that needs privileges, and a process already nicer stays so."""
    now = os.nice(0)
    if want > now:
        os.nice(want - now)


ORPHAN_GRACE_S = 60.0  # an orphan's time to write its last checkpoint before SIGKILL


def stop_with_parent(
    parent: int, what: str, grace_s: float = ORPHAN_GRACE_S, every_s: float = 1.0
) -> threading.Thread:
    """End this process as Ctrl-C would once ``parent`` (the pid that started it) is gone, and
    kill it outright ``grace_s`` later if it has not ended: a run writing its last checkpoint
    ignores a second interrupt, and one that hangs must not outlive the process that would
    have recorded it. Nothing else tells a child that its parent was killed: a sweep's seeds
    are sessions of their own (so a Ctrl-C reaches them once, forwarded), out of reach of the
    terminal's hang-up, and Python offers no parent-death signal; so the child checks, once a
    second, that its parent is still its parent. ``parent`` is passed in rather than read
    here, so a parent that died before this call is noticed too."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        print(f"\n{what}: the process that started this one is gone; stopping", file=sys.stderr)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="wheeler2-parent-watch", daemon=True)
    thread.start()
    return thread
