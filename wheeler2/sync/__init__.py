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
whose plan takes an input layer (the first weight matrix; with ``trunk_reads = "core+obs"`` also
the layer after the core, which reads the observation beside the core's output) takes them too,
and from then on acts with them (:func:`sync_target`); one that keeps every input layer keeps its
own statistics. They are copied whatever ``alpha`` (only the weights are blended). Where only
one of the two normalizes and an input layer is taken, the check refuses, naming
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

from .block import WeightClient, WeightHandle, WeightPublisher
from .plan import SyncPlan, blend, check_pulls, check_sync, float_state, match_keep, source_shapes
from .roles import (
    STATS,
    ModuleSet,
    SyncError,
    obs_stats,
    publish_view,
    published_modules,
    pull_target,
    pulled_modules,
    sink_pulls,
    sync_target,
)

__all__ = [
    "STATS",
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
    "obs_stats",
    "publish_view",
    "published_modules",
    "pull_target",
    "pulled_modules",
    "sink_pulls",
    "source_shapes",
    "sync_target",
]
