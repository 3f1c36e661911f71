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

Roles: tensors are matched by role, not by module path, so one algorithm family can seed
another. An actor declares where its roles live in a class attribute, e.g. DQN's
``DiscreteQ.sync_roles = {"trunk": "net.trunk", "head": "net.head"}``; its ``net.trunk.0.weight``
is then published, matched, kept and reported as ``trunk.0.weight``, the name a PPO actor's
``trunk.0.weight`` has too. A module without ``sync_roles`` is named by its own paths. A role
the explorer declares syncs whole: the learner must have it with the same tensors and shapes,
unless it is kept. Tensors outside every role (PPO's ``log_std``) are matched by name, and
skipped where only one side has them. An optional ``sync_actions = "discrete" | "continuous"``
lets :func:`check_sync` refuse a learner and an explorer built for different action spaces.

Layer kinds are part of the role match: a role the explorer takes must be built from the same
leaf modules in the same order on both sides (Linear, ReLU, Linear, ReLU), since a relu trunk's
weights in a tanh trunk compute something else; so a DQN trunk seeds a PPO trunk of the same
sizes with ``activation = "relu"``, and :func:`check_sync` refuses a tanh one, naming the key.
What a ``forward`` does outside modules (DDPG's tanh on its head; a Q value or a logit there) is
not compared.

Observation statistics (issue 39): a learner that normalizes its observations publishes, with its
actor, the float32 buffers its normalizer acts with (``obs_norm/mean``, ``inv_std``, ``clip``,
``count``: :class:`agents.normalize.NormStats`), in the same block on every backend. A member
whose plan takes the input layer (the first weight matrix) takes them too, and from then on acts
with them (:func:`sync_target`); one that keeps its input layer keeps its own statistics. Where
only one of the two normalizes and the input layer is taken, the check refuses, naming
``normalize_obs``.

Other modules than the actor (issue 14, detached per-head explorers): a learner's agent may offer
named modules through ``published_modules() -> {name: module}`` (DDPG offers ``"critic"``), and
an explorer's agent may ask, through ``pulled_modules() -> {name: its own module}``, to take those
instead of the learner's actor. Both are optional methods of an ``Agent``; the engine reads them
with :func:`published_modules` and :func:`pulled_modules`, never by algorithm name. Only a table
where some explorer pulls a module publishes it (:func:`publish_view`): one :class:`ModuleSet`
holds the learner's actor, whose tensors keep their usual sync names, and each pulled module,
whose tensors are named ``<module>/<path>`` (``critic/nets.1.head.weight``). A table where nobody
pulls one publishes the actor alone, as before, at no extra cost.

Segment layout: a 64-byte header (int64 version first) then the tensors, packed in
``state_dict()`` order under their role names. Consistency comes from ``flock`` on the segment's
own file: the writer holds it exclusively while it copies, readers hold it shared while they
read. A kernel lock is used rather than a seqlock so that the ordering holds on weakly ordered
CPUs as well, and it is released by the kernel if a process dies holding it, so a crashed
learner cannot wedge explorers.
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
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from wheeler2.buffer.shm import Segment

__all__ = [
    "ModuleSet",
    "SyncError",
    "SyncPlan",
    "WeightHandle",
    "WeightPublisher",
    "WeightClient",
    "blend",
    "check_pulls",
    "check_sync",
    "float_state",
    "match_keep",
    "publish_view",
    "published_modules",
    "pull_target",
    "pulled_modules",
    "source_shapes",
    "sync_target",
]

STATS = "obs_norm"  # the module name a learner's input statistics travel under (obs_norm/mean)

_HEADER_BYTES = 64  # keeps the data cache-line aligned; slot 0 holds the version


class SyncError(ValueError):
    """A team's weight sync cannot work as configured (raised before anything is spawned)."""


@dataclass(frozen=True)
class WeightHandle:
    """What a process needs to attach to a published actor; small and picklable."""

    name: str
    numel: int
    layout: tuple[tuple[str, tuple[int, ...], int], ...]  # (role name, shape, offset in floats)


# --------------------------------------------------------------------------------------------
# roles: the names tensors are published, matched and reported under


def _role_of(name: str) -> str:
    return name.partition(".")[0]


def _declared_roles(module: nn.Module) -> dict[str, str]:
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


def _float_entries(module: nn.Module) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Sync name -> (state_dict path, shape) of each float tensor, in state_dict order.

    A tensor under a role's sub-module is named by the role (a DiscreteQ's ``net.trunk.0.weight``
    is ``trunk.0.weight``); any other tensor (``log_std``, a buffer) keeps its own path.
    """
    if isinstance(module, ModuleSet):
        return module.entries()
    # Longest path first, so a role nested inside another role's sub-module wins.
    roles = sorted(_declared_roles(module).items(), key=lambda rp: -len(rp[1]))
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


def _float_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, (_, shape) in _float_entries(module).items()}


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
            for name, (path, shape) in _float_entries(self.actor).items():
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


def check_pulls(
    learner: Any, explorer: Any, keep: list[str], member: str, learner_name: str = "learner"
) -> tuple[str, ...]:
    """Fail early, naming ``member``, if the explorer agent cannot sync from the learner agent.

    Returns the module names the explorer pulls by name (empty: it takes the actor, checked by
    :func:`check_sync`). Raises :class:`SyncError` when the learner's algorithm does not publish
    a module the explorer pulls, the two modules' tensors differ in name or shape, or the two
    normalize observations differently where the explorer takes the input layer
    (``normalize_obs``: a normalizing explorer then acts with the learner's statistics).
    ``learner_name``: the learner's member name, for messages.
    """
    wanted = pulled_modules(explorer)
    if wanted is None:
        settable = (_has_activation_key(learner), _has_activation_key(explorer))
        check_sync(
            learner.actor, explorer.actor, keep, member, f"learner {learner_name!r}", settable
        )
        _plan(_float_shapes(publish_view(learner, ())), sync_target(explorer), keep, member)
        return ()
    offered = published_modules(learner)
    for name, module in wanted.items():
        if name not in offered:
            has = ", ".join(repr(n) for n in offered) or "nothing besides its actor"
            raise SyncError(
                f"[[team]] {member}: it pulls the learner's {name!r}, which the learner "
                f"({type(learner).__name__}) does not publish (it publishes {has}); give the "
                f"table a learner that does"
            )
        source, target = _float_shapes(offered[name]), _float_shapes(module)
        if source != target:
            first = next(n for n in [*source, *target] if source.get(n) != target.get(n))
            a, b = (str(list(s[first])) if first in s else "absent" for s in (source, target))
            raise SyncError(
                f"[[team]] {member}: it copies the learner's {name} whole, and the two differ "
                f"({first}: learner {a} vs {member} {b}); set the same "
                f"hidden sizes and {name} options in both members' [team.params]"
            )
    published = {n: offered[n] for n in wanted}
    stats = obs_stats(learner)
    if stats is not None:
        published[STATS] = stats
    _plan(_float_shapes(ModuleSet(None, published)), sync_target(explorer), keep, member)
    return tuple(wanted)


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
    """Whether the tensor ``name`` (a role name or a path) is kept under the ``keep`` globs."""
    return any(_pattern_matches(p, name) for p in keep)


def _widths(shapes: dict[str, tuple[int, ...]]) -> str | None:
    """``"4->64->64"`` for a stack of Linear layers (``[out, in]`` weights that chain), or None."""
    weights = [s for n, s in shapes.items() if n.endswith("weight") and len(s) == 2]
    if not weights:
        return None
    dims = [weights[0][1]]
    for out, inp in weights:
        if inp != dims[-1]:
            return None
        dims.append(out)
    return "->".join(map(str, dims))


def _shape_error(
    source: dict[str, tuple[int, ...]],
    target: dict[str, tuple[int, ...]],
    differing: dict[str, list[str]],
    member: str,
) -> SyncError:
    def shape(shapes: dict[str, tuple[int, ...]], name: str) -> str:
        return str(list(shapes[name])) if name in shapes else "absent"

    parts = []
    for role, names in differing.items():
        src = {n: s for n, s in source.items() if _role_of(n) == role}
        dst = {n: s for n, s in target.items() if _role_of(n) == role}
        first = names[0]
        detail = f"{first}: learner {shape(source, first)} vs {member} {shape(target, first)}"
        a, b = _widths(src), _widths(dst)
        if a and b:
            detail = f"layers learner {a} vs {member} {b}; {detail}"
        parts.append(f"role {role} ({detail})")
    return SyncError(
        f"[[team]] {member}: sync copies weights by shape and the learner's actor differs from "
        f"this member's in {', '.join(parts)}; set the same hidden sizes (`hidden` in both "
        f"members' [team.params]) or add the role to sync.keep"
    )


def _plan(
    source: dict[str, tuple[int, ...]],
    module: nn.Module,
    keep: Sequence[str],
    member: str,
) -> list[str]:
    """The role names to sync from ``source`` into ``module``; SyncError on a bad setup.

    Observation statistics (``obs_norm/``, see :func:`sync_target`) go with the input layer:
    taken where it is, never alone; SyncError where only one side normalizes and the input
    layer is taken."""
    inner, stats = _split_stats(module)
    if inner is not module or any(_is_stat(n) for n in source):
        names = _plan({n: s for n, s in source.items() if not _is_stat(n)}, inner, keep, member)
        return names + _plan_stats(source, inner, stats, names, member)
    entries = _float_entries(module)
    target = {name: shape for name, (_, shape) in entries.items()}
    roles = list(_declared_roles(module))

    def kept(name: str) -> bool:
        # The module path is matched too, so keep = ["net.head"] written for DQN still works.
        return match_keep(name, keep) or (name in entries and match_keep(entries[name][0], keep))

    names = list(target) + [k for k in source if k not in target]
    paths = [path for path, _ in entries.values()]
    for pattern in keep:
        if not any(_pattern_matches(pattern, n) for n in names + paths):
            modules = ", ".join(dict.fromkeys(_module_of(n) for n in names))
            raise SyncError(
                f"[[team]] {member}: sync.keep pattern {pattern!r} matches no module of the "
                f"actor; its modules are: {modules}"
            )
    source_roles = list(dict.fromkeys(_role_of(n) for n in source))
    for role in roles:
        if role in source_roles or all(kept(n) for n in target if _role_of(n) == role):
            continue
        raise SyncError(
            f"[[team]] {member}: the learner's actor has no role {role!r} (its tensors start "
            f"with: {', '.join(source_roles) or 'nothing'}), which this member's actor "
            f"({type(module).__name__}) would take from it; add {role!r} to sync.keep or give "
            f"the learner's actor a sync_roles entry for it"
        )
    synced = []
    differing: dict[str, list[str]] = {}  # role -> its tensors that differ, in order
    for name, shape in target.items():
        if kept(name):
            continue
        if name in source and source[name] == shape:
            synced.append(name)
        elif name in source or _role_of(name) in roles:  # a declared role syncs whole
            differing.setdefault(_role_of(name), []).append(name)
    for name in source:  # a layer the learner has more of, in a role this member takes
        if name not in target and _role_of(name) in roles and not match_keep(name, keep):
            differing.setdefault(_role_of(name), []).append(name)
    if differing:
        raise _shape_error(source, target, differing, member)
    if not synced:
        raise SyncError(
            f"[[team]] {member}: sync would copy nothing from the learner's actor (learner: "
            f"{', '.join(source) or 'no float tensors'}; {member}: "
            f"{', '.join(target) or 'no float tensors'}; keep: {list(keep)})"
        )
    return synced


def _is_stat(name: str) -> bool:
    return name.startswith(STATS + "/")


def _split_stats(module: nn.Module) -> tuple[nn.Module, nn.Module | None]:
    """(``module`` without its observation statistics, those statistics or None)."""
    if not isinstance(module, ModuleSet) or STATS not in module.pulled:
        return module, None
    others = {k: m for k, m in module.pulled.items() if k != STATS}
    if module.actor is not None and not others:
        return module.actor, module.pulled[STATS]
    return ModuleSet(module.actor, others), module.pulled[STATS]


def _input_layer(module: nn.Module) -> str | None:
    """The sync name of the first weight matrix of ``module`` (its first layer: the one that
    reads the observation); None if it has none."""
    return next((n for n, (_, s) in _float_entries(module).items() if len(s) >= 2), None)


def _plan_stats(
    source: dict[str, tuple[int, ...]],
    inner: nn.Module,
    stats: nn.Module | None,
    synced: Sequence[str],
    member: str,
) -> list[str]:
    """The ``obs_norm/`` names to sync along with ``synced`` (the weights' plan)."""
    first = _input_layer(inner)
    if first is None or first not in synced:  # it keeps its input layer: its own statistics
        return []
    has = [n for n in source if _is_stat(n)]
    role = _role_of(first)
    if has and stats is None:
        raise SyncError(
            f"[[team]] {member}: it takes the learner's input layer ({first}), which expects "
            f"observations normalized by the learner's running statistics (the learner has "
            f"normalize_obs = true), but this member has normalize_obs = false; set "
            f"normalize_obs = true in its [team.params] (it then acts with the learner's "
            f"statistics) if its algorithm has that key, set normalize_obs = false in the "
            f'learner\'s, or add "{role}" to sync.keep'
        )
    if stats is not None and not has:
        raise SyncError(
            f"[[team]] {member}: it takes the learner's input layer ({first}), which expects raw "
            f"observations (the learner has normalize_obs = false), but this member has "
            f"normalize_obs = true; set the same normalize_obs in both members' [team.params] "
            f'or add "{role}" to sync.keep'
        )
    if stats is None:
        return []
    names = [f"{STATS}/{k}" for k, t in stats.state_dict().items() if torch.is_floating_point(t)]
    differ = [
        n for n in names if source.get(n) != tuple(stats.state_dict()[n[len(STATS) + 1 :]].shape)
    ]
    if differ:
        raise SyncError(
            f"[[team]] {member}: the learner's observation statistics ({differ[0]}: "
            f"{source.get(differ[0])}) do not fit this member's observations"
        )
    return names


class SyncPlan:
    """Which of a member's actor tensors take the learner's values, and how: the one rule for
    every transport (shared memory here, Ray's object store in ``runtime.ray_member``).

    ``source`` is the learner's :func:`source_shapes`; :attr:`names` are role names."""

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
        self.names: tuple[str, ...] = tuple(_plan(source, module, keep, member))
        self._slots = _slots(module, self.names)
        stats = _split_stats(module)[1]
        if stats is not None and any(_is_stat(n) for n in self.names):
            # The member's normalizer acts with what each pull writes, and folds in nothing.
            cast(Any, stats).follow = True

    def targets(self) -> list[torch.Tensor]:
        return [d[k] for d, k in self._slots]

    @torch.no_grad()
    def apply(self, source: dict[str, torch.Tensor]) -> None:
        """Blend ``source`` (role name -> tensor, :func:`float_state` of the learner's actor)
        into the module; every planned name must be there."""
        targets = self.targets()
        missing = [n for n in self.names if n not in source]
        if missing:
            raise SyncError(f"published weights lack {missing}: learner and plan disagree")
        blend(targets, [source[n].to(t.device) for n, t in zip(self.names, targets)], self.alpha)


def float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The float tensors of ``module`` by role name, as detached CPU copies: what a learner
    publishes."""
    state = module.state_dict()
    return {
        name: state[path].detach().to("cpu", copy=True)
        for name, (path, _) in _float_entries(module).items()
    }


def source_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Role name -> shape of the float tensors a learner's actor publishes."""
    return _float_shapes(module)


def check_sync(
    learner_actor: nn.Module,
    explorer_actor: nn.Module,
    keep: list[str],
    member: str,
    learner_name: str = "the learner",
    settable: tuple[bool, bool] = (False, True),
) -> None:
    """Fail early, with the member's name, if ``member`` cannot sync from ``learner_actor``.

    Raises :class:`SyncError` when the two actors declare different ``sync_actions`` (discrete
    vs continuous), a keep pattern matches nothing, the learner lacks a role the explorer takes,
    a role's tensors or shapes differ between the two actors, a role it takes is built from other
    layer kinds (its leaf modules' classes: relu vs tanh, a LayerNorm on one side only), or
    nothing at all would be synced. ``learner_name`` names the learner in messages; ``settable``
    says whether the learner's and this member's params have an ``activation`` key, so that a
    differing activation is refused naming the key that fixes it.
    """
    kinds = [getattr(m, "sync_actions", None) for m in (learner_actor, explorer_actor)]
    if None not in kinds and kinds[0] != kinds[1]:
        raise SyncError(
            f"[[team]] {member}: the learner's actor ({type(learner_actor).__name__}) is for "
            f"{kinds[0]} actions but this member's ({type(explorer_actor).__name__}) is for "
            f"{kinds[1]} actions, so no weight carries over; use algorithms for one action space"
        )
    # Same shapes, other inputs: a trunk fed by a recurrent core computes something else than
    # one fed by the observation, so its weights only carry over between like trunks.
    reads = [getattr(m, "trunk_reads", "obs") for m in (learner_actor, explorer_actor)]
    trunk = [(n, p) for n, (p, _) in _float_entries(explorer_actor).items() if n[:6] == "trunk."]
    if reads[0] != reads[1] and not all(
        match_keep(n, keep) or match_keep(p, keep) for n, p in trunk
    ):
        raise SyncError(
            f"[[team]] {member}: the learner's actor trunk reads {reads[0]!r} and this member's "
            f"reads {reads[1]!r}; their weights do not carry over: give both the same "
            f'trunk_reads (and core) or add "trunk" to sync.keep'
        )
    _plan(_float_shapes(learner_actor), explorer_actor, keep, member)
    _check_kinds(learner_actor, explorer_actor, keep, member, learner_name, settable)


def _layer_kinds(module: nn.Module) -> list[tuple[str, str]]:
    """(path, class name) of each leaf module of ``module``, in order: what a role is built from.
    Functions a ``forward`` applies (DDPG's final ``torch.tanh``) are not modules, so not here."""
    return [(p, type(m).__name__) for p, m in module.named_modules() if not any(m.children())]


def _role_module(module: nn.Module, role: str) -> nn.Module | None:
    """The sub-module that plays ``role`` in ``module``: the declared one, else the sub-module of
    that name (a module without ``sync_roles`` is matched by its own paths), else None."""
    path = _declared_roles(module).get(role, role)
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


def _is_activation(kind: str) -> bool:
    cls = getattr(nn, kind, None)
    return isinstance(cls, type) and cls.__module__ == nn.modules.activation.__name__


def _has_activation_key(agent: Any) -> bool:
    return hasattr(getattr(agent, "params", None), "activation")


def _check_kinds(
    learner_actor: nn.Module,
    explorer_actor: nn.Module,
    keep: Sequence[str],
    member: str,
    learner_name: str,
    settable: tuple[bool, bool],
) -> None:
    """SyncError where a role ``member`` takes is built from other layer kinds than the
    learner's: equal shapes, but the copied weights would compute something else (a relu trunk's
    weights in a tanh trunk). A role taken in part is compared whole."""
    entries = _float_entries(explorer_actor)
    roles: list[str] = []
    parts: list[str] = []
    firsts: list[tuple[str, str]] = []  # per differing role: (learner's, member's) first kind
    for role in _declared_roles(explorer_actor):
        names = [(n, p) for n, (p, _) in entries.items() if _role_of(n) == role]
        if all(match_keep(n, keep) or match_keep(p, keep) for n, p in names):
            continue
        source, target = _role_module(learner_actor, role), _role_module(explorer_actor, role)
        if source is None or target is None:
            continue
        a, b = _layer_kinds(source), _layer_kinds(target)
        ka, kb = [k for _, k in a] + ["nothing"], [k for _, k in b] + ["nothing"]
        if ka == kb:
            continue
        i = next(i for i, (x, y) in enumerate(zip(ka, kb)) if x != y)
        at = (a[i:] or b[i:])[0][0]
        roles.append(role)
        firsts.append((ka[i], kb[i]))
        parts.append(
            f"role {role} (layers learner {', '.join(ka[:-1])} vs {member} {', '.join(kb[:-1])}; "
            f"{role}{'.' + at if at else ''}: learner {ka[i]} vs {member} {kb[i]})"
        )
    if not parts:
        return
    named = " and ".join(f'"{role}"' for role in roles)
    (theirs, ours), (learner_can, member_can) = firsts[0], settable
    if not all(_is_activation(x) and _is_activation(y) for x, y in firsts):
        fix = "build both members' layers alike (the same layer options in their [team.params])"
    elif member_can:
        fix = f'set params.activation = "{theirs.lower()}" on {member}'
    elif learner_can:
        fix = f'set params.activation = "{ours.lower()}" on {learner_name}'
    else:
        fix = "their algorithms fix their activations: give this member another algorithm"
    raise SyncError(
        f"[[team]] {member}: sync copies weights only into the same kinds of layers and the actor "
        f"of {learner_name} differs from this member's in {', '.join(parts)}; {fix}, or add "
        f"{named} to sync.keep"
    )


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
    """(owning dict, key) of each parameter/buffer, by role name, so the tensor is looked up
    per call.

    Caching the tensors themselves would go stale when ``module.to()`` replaces buffers (or
    parameters, with ``overwrite_module_params_on_conversion``).
    """
    entries = _float_entries(module)
    out: list[tuple[dict, str]] = []
    for name in names:
        if name not in entries:
            raise SyncError(f"cannot sync {name!r}: {type(module).__name__} has no such tensor")
        mod_path, _, attr = entries[name][0].rpartition(".")
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
        for name, shape in _float_shapes(template).items():
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
