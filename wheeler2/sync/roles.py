"""What a learner publishes and a member pulls, named by role: the tensors of an actor under
the names they sync by (``sync_roles``), and the modules other than the actor that a learner
offers by name (``published_modules``) and an explorer takes (``pulled_modules``). See the
package's docstring for the whole design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

STATS = "obs_norm"  # the module name a learner's input statistics travel under (obs_norm/mean)


class SyncError(ValueError):
    """A team's weight sync cannot work as configured (raised before anything is spawned)."""


# --------------------------------------------------------------------------------------------
# roles: the names tensors are published, matched and reported under


def role_of(name: str) -> str:
    return name.partition(".")[0]


def declared_roles(module: nn.Module) -> dict[str, str]:
    """Role -> sub-module path, from the module's ``sync_roles`` ({} when it declares none)."""
    roles = dict(getattr(module, "sync_roles", None) or {})
    for role, path in roles.items():
        try:
            module.get_submodule(path)
        except AttributeError:
            raise SyncError(
                f"{type(module).__name__}.sync_roles maps {role!r} to {path!r}, which is not a "
                f"sub-module of it"
            ) from None
    return roles


def float_entries(module: nn.Module) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Sync name -> (state_dict path, shape) of each float tensor, in state_dict order.

    A tensor under a role's sub-module is named by the role (a DiscreteQ's ``net.trunk.0.weight``
    is ``trunk.0.weight``); any other tensor (``log_std``, a buffer) keeps its own path.
    """
    if isinstance(module, ModuleSet):
        return module.entries()
    # Longest path first, so a role nested inside another role's sub-module wins.
    roles = sorted(declared_roles(module).items(), key=lambda rp: -len(rp[1]))
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for path, tensor in module.state_dict().items():
        if not torch.is_floating_point(tensor):
            continue
        name = path
        for role, prefix in roles:
            if not prefix:  # the module itself plays the role
                name = f"{role}.{path}"
                break
            if path.startswith(prefix + "."):
                name = role + path[len(prefix) :]
                break
        if name in out:
            raise SyncError(
                f"{type(module).__name__}: {path!r} and {out[name][0]!r} would both sync as "
                f"{name!r}; its sync_roles clash with another attribute"
            )
        out[name] = (path, tuple(tensor.shape))
    return out


def float_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, (_, shape) in float_entries(module).items()}


# --------------------------------------------------------------------------------------------
# modules other than the actor: what a learner publishes and an explorer pulls by name


class ModuleSet(nn.Module):
    """An actor (or none) and named modules, published or pulled as one block.

    The actor's tensors keep the names they sync under alone, so an explorer that takes the
    learner's actor is served by the same block; module ``name``'s tensors are ``name/<path>``.
    The modules are registered, not copied: publishing reads their current weights and pulling
    writes into them.
    """

    def __init__(self, actor: nn.Module | None, modules: dict[str, nn.Module]) -> None:
        super().__init__()
        bad = [name for name in modules if not name or "/" in name or "." in name]
        if bad:
            raise SyncError(f"module names for sync must be plain words, got {bad}")
        self.actor = actor
        self.pulled = nn.ModuleDict(modules)

    def entries(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        out: dict[str, tuple[str, tuple[int, ...]]] = {}
        if self.actor is not None:
            for name, (path, shape) in float_entries(self.actor).items():
                out[name] = (f"actor.{path}", shape)
        for key, module in self.pulled.items():
            for path, tensor in module.state_dict().items():
                if torch.is_floating_point(tensor):
                    out[f"{key}/{path}"] = (f"pulled.{key}.{path}", tuple(tensor.shape))
        return out


def published_modules(agent: Any) -> dict[str, nn.Module]:
    """The modules besides its actor that ``agent``, as a learner, offers to explorers by name
    (its optional ``published_modules()``; none by default)."""
    offer = getattr(agent, "published_modules", None)
    return dict(offer()) if callable(offer) else {}


def pulled_modules(agent: Any) -> dict[str, nn.Module] | None:
    """What ``agent``, as a syncing explorer, takes from its learner instead of the actor:
    name -> its own module (its optional ``pulled_modules()``). None: the actor, as usual."""
    ask = getattr(agent, "pulled_modules", None)
    wanted = ask() if callable(ask) else None
    return None if not wanted else dict(wanted)


def obs_stats(agent: Any) -> nn.Module | None:
    """The buffers ``agent``'s observation normalizer acts with (``agents.normalize.NormStats``),
    or None where it does not normalize (``normalize_obs = false``)."""
    stats = getattr(getattr(agent, "obs_norm", None), "stats", None)
    return stats if isinstance(stats, nn.Module) else None


def publish_view(agent: Any, pulls: Sequence[str]) -> nn.Module:
    """What ``agent``, a table's learner, publishes when its explorers pull ``pulls``: its actor
    alone where they pull nothing else and it does not normalize its observations (the usual
    block), else a :class:`ModuleSet` that holds its observation statistics too (``obs_norm/``),
    since its weights expect inputs normalized by them."""
    names = [name for name in pulls if name != STATS]
    stats = obs_stats(agent)
    if not names and stats is None:
        return agent.actor
    offered = published_modules(agent)
    missing = [name for name in names if name not in offered]
    if missing:
        raise SyncError(f"{type(agent).__name__} publishes no {missing}")
    modules = {name: offered[name] for name in names}
    if stats is not None:
        modules[STATS] = stats
    return ModuleSet(agent.actor, modules)


def sink_pulls(sink: Any) -> tuple[str, ...]:
    """The modules a weight sink's block holds besides the actor (a WeightPublisher knows them
    from its layout; other sinks publish the actor alone)."""
    return tuple(getattr(sink, "pulls", ()))


def pull_target(agent: Any) -> nn.Module:
    """The module an explorer's weight source writes into: its actor, or a :class:`ModuleSet`
    of the modules it pulls by name."""
    wanted = pulled_modules(agent)
    return agent.actor if wanted is None else ModuleSet(None, wanted)


def sync_target(agent: Any) -> nn.Module:
    """What a syncing member's weight source writes into: :func:`pull_target`, with the buffers
    its observation normalizer acts with where it normalizes. The plan (:class:`SyncPlan`) takes
    the learner's statistics into them exactly when it takes the input layer they feed."""
    stats = obs_stats(agent)
    if stats is None:
        return pull_target(agent)
    wanted = pulled_modules(agent)
    return ModuleSet(agent.actor if wanted is None else None, {**(wanted or {}), STATS: stats})
