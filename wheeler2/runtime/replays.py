"""Each table's replay, settled in the driver: its settings from the config and what its learner
declares (:func:`replay_config`), and :class:`ReplaySpec`, the one set-up every backend creates
(serial and local in the driver, a Ray shard in its actor, a learner's own table in its
process)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from wheeler2.buffer import Layout, Replay, ReplayConfig
from wheeler2.buffer.her import Reached, Relabel
from wheeler2.config import Config
from wheeler2.needs import AgentNeeds
from wheeler2.runtime.plan import needs_of
from wheeler2.runtime.seeds import OWN_SEED_OFFSET, TABLE_SEED_STRIDE, replay_seed
from wheeler2.runtime.team import TableSetup


def own_batch(config: Config) -> int:
    """Rows of each learner batch drawn from its own table (``[buffer] own_share``)."""
    b = config.buffer
    return 0 if b.own_share <= 0 else max(1, round(b.own_share * b.batch_size))


def replay_config(config: Config, needs: AgentNeeds, chunk: int | None = None) -> ReplayConfig:
    """The replay settings of a table whose learner declared ``needs``."""
    b = config.buffer
    min_size = max(int(needs.replay_min_size), int(b.batch_size))
    updates = max(1, int((config.experiment.total_steps - min_size) * b.updates_per_insert))
    her = None if b.her is None else dataclasses.replace(b.her)
    # Every [buffer] key reaches the replay as written (a key left out here would silently run
    # at its default); the ones below are what the run's plan settles.
    keys = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
    return ReplayConfig(
        **keys
        | dict(
            # With own_share, the shared table gives the rest of the batch, the own table its share.
            batch_size=int(b.batch_size) - own_batch(config),
            beta_steps=updates,
            min_size=min_size,
            her=her,
            chunk=int(chunk if chunk is not None else b.chunk),
            # How far producers may run ahead of the learner: enough to absorb a slow update or
            # an eval, small against the run so the measured ratio tracks the target throughout.
            gate_tolerance=max(
                int(b.batch_size), min(2048, int(config.experiment.total_steps) // 50)
            ),
            # A recurrent learner declares its replayed sequences (batch_size counts them).
            sequence=needs.sequence,
        )
    )


@dataclass(frozen=True)
class ReplaySpec:
    """Everything :meth:`Replay.create` takes, settled in the driver; picklable, so a Ray
    shard actor creates its part of the buffer from the very same spec."""

    layout: Layout
    cfg: ReplayConfig
    gamma: float
    relabel: Relabel | None
    seed: int
    reached: Reached | None = None

    def create(self) -> Replay:
        return Replay.create(
            self.layout, self.cfg, self.gamma, self.relabel, self.seed, reached=self.reached
        )


def replay_spec(
    config: Config,
    table: TableSetup,
    chunk: int | None = None,
    shard: int = 0,
    shards: int = 1,
) -> ReplaySpec:
    """A table's replay (or one shard of it): the one place its settings are made, whatever
    the backend."""
    needs = needs_of(table.lead)
    cfg = replay_config(config, needs, chunk=chunk)
    if shards > 1:
        cfg = shard_config(cfg, shards)
    her = config.buffer.her
    return ReplaySpec(
        layout=table.layout(),
        cfg=cfg,
        # A learner without a discount never bootstraps: its replay's discount column is unread.
        gamma=1.0 if needs.gamma is None else float(needs.gamma),
        relabel=table.heads.relabel if her is not None else None,
        seed=replay_seed(config, shard, shards) + TABLE_SEED_STRIDE * table.index,
        reached=table.heads.reached if her is not None and her.terminate_on_goal else None,
    )


def own_replay_spec(
    config: Config, table: TableSetup, chunk: int | None = None
) -> ReplaySpec | None:
    """The private table of a learner with ``[buffer] own_share``: only its own transitions,
    made in its process. The shared table's gate paces the learner, so this one has none.
    Until it holds a share's rows, the learner's batches are the shared part alone."""
    rows = own_batch(config)
    if not rows or not table.uses_replay:
        return None
    spec = replay_spec(config, table, chunk=chunk)
    cfg = dataclasses.replace(
        spec.cfg, batch_size=rows, min_size=rows, updates_per_insert=0.0, gate_tolerance=0
    )
    return dataclasses.replace(spec, cfg=cfg, seed=spec.seed + OWN_SEED_OFFSET)


def make_replay(config: Config, table: TableSetup, chunk: int | None = None) -> Replay:
    """A table's replay, owned (and unlinked at close) by the calling process."""
    return replay_spec(config, table, chunk=chunk).create()


def shard_config(replay_cfg: ReplayConfig, shards: int) -> ReplayConfig:
    """One shard's share of the buffer: capacity, warm-up and gate slack split N ways, so that N
    shards together behave like the one buffer of the local backend."""
    return dataclasses.replace(
        replay_cfg,
        capacity=max(1, replay_cfg.capacity // shards),
        min_size=max(replay_cfg.batch_size, -(-replay_cfg.min_size // shards)),
        gate_tolerance=max(replay_cfg.batch_size, replay_cfg.gate_tolerance // shards),
        beta_steps=None
        if replay_cfg.beta_steps is None
        else max(1, replay_cfg.beta_steps // shards),
    )
