"""What a member asks of the machine, checked before any network is built: its device and the
size of its networks. ``prepare_team`` (``check`` and every ``run``) calls :func:`check_members`
right after the env probe, so ``device = "gpu"`` or ``hidden = [100000000]`` is one line naming
the member and the key, at once, instead of a traceback or minutes of allocation.

The size check estimates parameters from the layer widths a member's ``Params`` declare
(``hidden``, ``critic_hidden``, ``core``/``core_size``, ``features``/``rbf_centers``) and the
env's observation, action and head sizes, for every algorithm that has ``hidden``; an
algorithm without it is not estimated.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from wheeler2.agent import SpaceInfo
from wheeler2.config import Config, ConfigError
from wheeler2.runtime.plan import MemberPlan, needs_of

# One network of more parameters than this (float32) is refused: 4 GiB is about a billion
# parameters, several hundred times the largest MLP the shipped configs use.
NETWORK_BYTES_MAX = 4 * 2**30
# A member holds each network about this many times over: its weights, a target copy and the
# optimizer's two moments (Adam).
COPIES_PER_NETWORK = 4
FLOAT_BYTES = 4


def check_members(config: Config, plans: Sequence[MemberPlan], space: SpaceInfo) -> None:
    """Refuse a member whose device this machine cannot run or whose networks cannot fit,
    before any agent is built (``plans``: one table's members, ``space``: what they see)."""
    remote = config.experiment.backend == "ray" and bool(config.experiment.ray_address)
    need = 0
    for plan in plans:
        device = str(needs_of(plan).device)
        problem = device_problem(device, here=not remote)
        if problem is not None:
            raise _error(config, plan, _key(plan, "device"), problem)
        nets = network_parameters(params_of_plan(plan), space)
        if not nets:
            continue
        name, largest = max(nets.items(), key=lambda kv: kv[1])
        if largest * FLOAT_BYTES > NETWORK_BYTES_MAX:
            raise _error(
                config,
                plan,
                _key(plan, _width_key(plan, name)),
                f"its {name} would have ~{largest:_} parameters ({_gib(largest * FLOAT_BYTES)} in "
                f"float32), over the {_gib(NETWORK_BYTES_MAX)} one network may take; "
                f"{_widths_text(plan)}",
            )
        if device.startswith("cpu"):
            # The driver builds a learner of its own for the checks as well.
            copies = 2 if plan.role == "learner" else 1
            need += copies * COPIES_PER_NETWORK * FLOAT_BYTES * sum(nets.values())
    ram = None if remote else available_ram()
    if ram is not None and need > ram:
        big = max(plans, key=lambda p: sum(network_parameters(params_of_plan(p), space).values()))
        raise _error(
            config,
            big,
            _key(big, "hidden"),
            f"the team's networks need about {need:_} bytes ({_gib(need)}: each network "
            f"{COPIES_PER_NETWORK} times over, for its weights, a target copy and the optimizer's "
            f"moments) and the machine has {ram:_} bytes ({_gib(ram)}) of RAM available; "
            f"{_widths_text(big)}",
        )


def params_of_plan(plan: MemberPlan) -> Any:
    from wheeler2.config.model import params_of

    return params_of(plan.spec, plan.copy)


def _error(config: Config, plan: MemberPlan, key: str, message: str) -> ConfigError:
    return ConfigError(str(config.path), f"[[team]] {plan.team}", key, message)


def _key(plan: MemberPlan, name: str) -> str:
    """Where a member's param is written: its ``per_copy`` entry, else ``params``."""
    per_copy = plan.spec.per_copy or {}
    return f"per_copy.{name}" if name in per_copy else f"params.{name}"


def _width_key(plan: MemberPlan, net: str) -> str:
    params = params_of_plan(plan)
    if net == "critic" and getattr(params, "critic_hidden", None):
        return "critic_hidden"
    return "hidden"


def _widths_text(plan: MemberPlan) -> str:
    params = params_of_plan(plan)
    parts = [f"hidden = {list(params.hidden)}"]
    if _is_widths(getattr(params, "critic_hidden", None)):
        parts.append(f"critic_hidden = {list(params.critic_hidden)}")
    return "lower " + " or ".join(parts)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _mlp(widths: Sequence[int]) -> int:
    return sum((a + 1) * b for a, b in zip(widths, widths[1:], strict=False))


def _is_widths(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def network_parameters(params: Any, space: SpaceInfo) -> dict[str, int]:
    """Estimated parameters of a member's actor and critic (all heads' critics together), from
    its layer widths and the env's sizes; {} for an algorithm without ``hidden``."""
    hidden: Any = getattr(params, "hidden", None)
    if not _is_widths(hidden):
        return {}
    obs, act, heads = int(space.obs_dim), int(space.act_dim), max(1, len(space.heads))
    first = obs
    if getattr(params, "features", "none") == "rbf":
        first = int(getattr(params, "rbf_centers", obs))
    core = getattr(params, "core", "none")
    core_params, trunk_in = 0, first
    if core in ("gru", "lstm"):
        size = int(getattr(params, "core_size", 0))
        gates = 4 if core == "lstm" else 3
        core_params = gates * (first * size + size * size + 2 * size)
        trunk_in = first + size
    actor = core_params + _mlp([trunk_in, *hidden, act])
    critic_hidden: Any = getattr(params, "critic_hidden", None)
    widths = critic_hidden if _is_widths(critic_hidden) else hidden
    per_head = heads if getattr(params, "critic", "shared") == "separate" else 1
    critic = per_head * (core_params + _mlp([trunk_in + act, *widths, heads]))
    return {"actor": actor, "critic": critic}


def device_problem(device: str, here: bool = True) -> str | None:
    """What is wrong with running a member's networks on ``device``; None when it can.
    ``here``: the member runs on this machine (a Ray cluster's nodes are not checked)."""
    import torch

    available = available_devices()
    listed = ", ".join(f'"{d}"' for d in available)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return f'"{device}" is not a torch device; available here: {listed}'
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        if not here:
            return None
        if torch.version.cuda is None:
            return (
                f'"{device}" needs a CUDA build of torch; this torch ({torch.__version__}) is '
                f"CPU-only; available here: {listed}"
            )
        if not torch.cuda.is_available():
            return (
                f'"{device}": no CUDA device is visible (torch.cuda.is_available() is false); '
                f"available here: {listed}"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            return f'"{device}": this machine has {count} CUDA device(s); available here: {listed}'
        return None
    if dev.type == "mps":
        if not here or "mps" in available:
            return None
        return f'"{device}": no Apple MPS device here; available here: {listed}'
    return (
        f'"{device}": wheeler2 runs networks on "cpu" or "cuda" ("mps" on a Mac); '
        f"available here: {listed}"
    )


def available_devices() -> list[str]:
    """The devices this machine's torch can run networks on."""
    import torch

    out = ["cpu"]
    if torch.version.cuda is not None and torch.cuda.is_available():
        out += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def available_ram() -> int | None:
    """Bytes of RAM available now (MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
