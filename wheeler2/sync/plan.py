"""Which of a member's tensors take the learner's values (:class:`SyncPlan`, the one rule for
every transport) and the checks that refuse a sync that cannot work before anything is spawned
(:func:`check_sync`, :func:`check_pulls`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any, cast

import torch
from torch import nn

from .roles import (
    STATS,
    ModuleSet,
    SyncError,
    declared_roles,
    float_entries,
    float_shapes,
    obs_stats,
    publish_view,
    published_modules,
    pulled_modules,
    role_of,
    sync_target,
)


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
        plan_names(float_shapes(publish_view(learner, ())), sync_target(explorer), keep, member)
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
        source, target = float_shapes(offered[name]), float_shapes(module)
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
    if stats is not None and obs_stats(explorer) is None:
        # plan_names' advice (normalize this member too, or keep the input layer) leads
        # nowhere here: no member that copies modules by name normalizes (CEM has no such key,
        # a detached explorer refuses it), and a module taken whole refuses sync.keep.
        raise SyncError(
            f"[[team]] {member}: it copies the learner's {', '.join(wanted)} whole, and the "
            f"learner normalizes its observations (normalize_obs = true) with running "
            f"statistics this member does not apply; set normalize_obs = false in the "
            f"learner's [team.params]"
        )
    if stats is None and obs_stats(explorer) is not None:
        raise SyncError(
            f"[[team]] {member}: it copies the learner's {', '.join(wanted)} whole, which "
            f"reads raw observations (the learner has normalize_obs = false), but this member "
            f"normalizes them; set normalize_obs = false in this member's [team.params]"
        )
    if stats is not None:
        published[STATS] = stats
    plan_names(float_shapes(ModuleSet(None, published)), sync_target(explorer), keep, member)
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
        src = {n: s for n, s in source.items() if role_of(n) == role}
        dst = {n: s for n, s in target.items() if role_of(n) == role}
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


def plan_names(
    source: dict[str, tuple[int, ...]],
    module: nn.Module,
    keep: Sequence[str],
    member: str,
) -> list[str]:
    """The role names to sync from ``source`` into ``module``; SyncError on a bad setup.

    Observation statistics (``obs_norm/``, see :func:`sync_target`) go with the input layers
    (:func:`_input_layers`): taken where one is, never alone; SyncError where only one side
    normalizes and an input layer is taken."""
    inner, stats = _split_stats(module)
    if inner is not module or any(_is_stat(n) for n in source):
        names = plan_names(
            {n: s for n, s in source.items() if not _is_stat(n)}, inner, keep, member
        )
        return names + _plan_stats(source, inner, stats, names, member)
    entries = float_entries(module)
    target = {name: shape for name, (_, shape) in entries.items()}
    roles = list(declared_roles(module))

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
    source_roles = list(dict.fromkeys(role_of(n) for n in source))
    for role in roles:
        if role in source_roles or all(kept(n) for n in target if role_of(n) == role):
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
        elif name in source or role_of(name) in roles:  # a declared role syncs whole
            differing.setdefault(role_of(name), []).append(name)
    for name in source:  # a layer the learner has more of, in a role this member takes
        if name not in target and role_of(name) in roles and not match_keep(name, keep):
            differing.setdefault(role_of(name), []).append(name)
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


def _input_layers(module: nn.Module) -> list[str]:
    """The sync names of the weight matrices of ``module`` that read the observation: the first
    (its first layer) and, in a recurrent memory whose layers read the observation beside the
    core's output (``trunk_reads = "core+obs"``, the recurrent off-policy actors' default), the
    first weight matrix after that core's tensors (the layer fed ``[core(x), x]``)."""
    matrices = [(n, path) for n, (path, s) in float_entries(module).items() if len(s) >= 2]
    names = [n for n, _ in matrices[:1]]
    for at, memory in module.named_modules():
        if getattr(memory, "trunk_reads", None) != "core+obs":
            continue
        inside, core = (f"{at}.", f"{at}.core.") if at else ("", "core.")
        in_core = [i for i, (_, path) in enumerate(matrices) if path.startswith(core)]
        if not in_core:
            continue
        after = [n for n, path in matrices[in_core[-1] + 1 :] if path.startswith(inside)]
        names += after[:1]
    return list(dict.fromkeys(names))


def _plan_stats(
    source: dict[str, tuple[int, ...]],
    inner: nn.Module,
    stats: nn.Module | None,
    synced: Sequence[str],
    member: str,
) -> list[str]:
    """The ``obs_norm/`` names to sync along with ``synced`` (the weights' plan)."""
    # Every taken layer that reads the observation expects the learner's statistics: where a
    # core+obs member keeps its core but takes the layers after it, those read x beside the
    # core's output, and its own statistics would feed them inputs they were not trained on.
    taken = [n for n in _input_layers(inner) if n in synced]
    if not taken:  # it keeps every layer that reads the observation: its own statistics
        return []
    first = taken[0]
    has = [n for n in source if _is_stat(n)]
    # The keep that avoids the statistics keeps every input layer taken, not only the first.
    roles = " and ".join(dict.fromkeys(f'"{role_of(n)}"' for n in taken))
    if has and stats is None:
        raise SyncError(
            f"[[team]] {member}: it takes the learner's input layer ({first}), which expects "
            f"observations normalized by the learner's running statistics (the learner has "
            f"normalize_obs = true), but this member has normalize_obs = false; set "
            f"normalize_obs = true in its [team.params] (it then acts with the learner's "
            f"statistics) if its algorithm has that key, set normalize_obs = false in the "
            f"learner's, or add {roles} to sync.keep"
        )
    if stats is not None and not has:
        raise SyncError(
            f"[[team]] {member}: it takes the learner's input layer ({first}), which expects raw "
            f"observations (the learner has normalize_obs = false), but this member has "
            f"normalize_obs = true; set the same normalize_obs in both members' [team.params] "
            f"or add {roles} to sync.keep"
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
        self.names: tuple[str, ...] = tuple(plan_names(source, module, keep, member))
        self._slots = tensor_slots(module, self.names)
        stats = _split_stats(module)[1]
        if stats is not None and any(_is_stat(n) for n in self.names):
            # The member's normalizer acts with what each pull writes, and folds in nothing.
            cast(Any, stats).follow = True
        # Positions of the weights (blended by alpha) and of the statistics (always copied).
        self._weights = [i for i, n in enumerate(self.names) if not _is_stat(n)]
        self._stats = [i for i, n in enumerate(self.names) if _is_stat(n)]

    def targets(self) -> list[torch.Tensor]:
        return [d[k] for d, k in self._slots]

    def blend(self, targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
        """θ ← α·θ_learner + (1−α)·θ for the weights, in :attr:`names` order; the observation
        statistics copied whatever α. They are not weights to average but the input transform
        the learner's weights expect, and a following normalizer's own never move: blended, they
        would start from the identity (mean 0, inv_std 1), so at α = 0.1 on inputs of scale 100
        nine in ten stayed clipped after ten pulls."""
        if self.alpha == 1.0 or not self._stats:
            blend(targets, sources, self.alpha)
            return
        for at, alpha in ((self._weights, self.alpha), (self._stats, 1.0)):
            blend([targets[i] for i in at], [sources[i] for i in at], alpha)

    @torch.no_grad()
    def apply(self, source: dict[str, torch.Tensor]) -> None:
        """Blend ``source`` (role name -> tensor, :func:`float_state` of the learner's actor)
        into the module; every planned name must be there."""
        targets = self.targets()
        missing = [n for n in self.names if n not in source]
        if missing:
            raise SyncError(f"published weights lack {missing}: learner and plan disagree")
        self.blend(targets, [source[n].to(t.device) for n, t in zip(self.names, targets)])


def float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The float tensors of ``module`` by role name, as detached CPU copies: what a learner
    publishes."""
    state = module.state_dict()
    return {
        name: state[path].detach().to("cpu", copy=True)
        for name, (path, _) in float_entries(module).items()
    }


def source_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Role name -> shape of the float tensors a learner's actor publishes."""
    return float_shapes(module)


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
    trunk = [(n, p) for n, (p, _) in float_entries(explorer_actor).items() if n[:6] == "trunk."]
    if reads[0] != reads[1] and not all(
        match_keep(n, keep) or match_keep(p, keep) for n, p in trunk
    ):
        raise SyncError(
            f"[[team]] {member}: the learner's actor trunk reads {reads[0]!r} and this member's "
            f"reads {reads[1]!r}; their weights do not carry over: give both the same "
            f'trunk_reads (and core) or add "trunk" to sync.keep'
        )
    plan_names(float_shapes(learner_actor), explorer_actor, keep, member)
    _check_kinds(learner_actor, explorer_actor, keep, member, learner_name, settable)


def _layer_kinds(module: nn.Module) -> list[tuple[str, str]]:
    """(path, class name) of each leaf module of ``module``, in order: what a role is built from.
    Functions a ``forward`` applies (DDPG's final ``torch.tanh``) are not modules, so not here."""
    return [(p, type(m).__name__) for p, m in module.named_modules() if not any(m.children())]


def _role_module(module: nn.Module, role: str) -> nn.Module | None:
    """The sub-module that plays ``role`` in ``module``: the declared one, else the sub-module of
    that name (a module without ``sync_roles`` is matched by its own paths), else None."""
    path = declared_roles(module).get(role, role)
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
    entries = float_entries(explorer_actor)
    roles: list[str] = []
    parts: list[str] = []
    firsts: list[tuple[str, str]] = []  # per differing role: (learner's, member's) first kind
    for role in declared_roles(explorer_actor):
        names = [(n, p) for n, (p, _) in entries.items() if role_of(n) == role]
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


def tensor_slots(module: nn.Module, names: Sequence[str]) -> list[tuple[dict, str]]:
    """(owning dict, key) of each parameter/buffer, by role name, so the tensor is looked up
    per call.

    Caching the tensors themselves would go stale when ``module.to()`` replaces buffers (or
    parameters, with ``overwrite_module_params_on_conversion``).
    """
    entries = float_entries(module)
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
