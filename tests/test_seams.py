"""Every implementation of a runtime seam satisfies its Protocol (wheeler2/runtime/protocols.py).

Checked twice. Statically: this file is one of mypy's ``files`` (``pyproject.toml``), so
``make lint`` and ``make test`` type-check every assignment in :func:`_every_seam`, which names
each implementation against its Protocol, signatures included. At run time, below: both
replays, the shared-memory one and Ray's sharded one, are ``ReplayTable`` s, and so is what
``Replay.create`` returns, with a ``ReplayWriter`` as its writer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from wheeler2.buffer import Layout, Replay, ReplayConfig, Writer
from wheeler2.runtime import protocols

if TYPE_CHECKING:
    from wheeler2.buffer.ray_shard import RemoteWriter, ShardedReplay
    from wheeler2.liveness import StartBeat
    from wheeler2.runtime.budget import CountingBudget
    from wheeler2.runtime.local import LocalTransport
    from wheeler2.runtime.member import TeeWriter
    from wheeler2.runtime.ray_backend import RayTransport
    from wheeler2.runtime.ray_member import BoardBudget, BoardLink, BoardSink, BoardSource
    from wheeler2.runtime.serial import SerialTransport, _ListLink
    from wheeler2.sync import WeightClient, WeightPublisher


def _every_seam(
    replay: Replay,
    sharded: ShardedReplay,
    writer: Writer,
    remote: RemoteWriter,
    tee: TeeWriter,
    counting: CountingBudget,
    board_budget: BoardBudget,
    list_link: _ListLink,
    start_beat: StartBeat,
    board_link: BoardLink,
    publisher: WeightPublisher,
    board_sink: BoardSink,
    client: WeightClient,
    board_source: BoardSource,
    serial: SerialTransport,
    local: LocalTransport,
    ray: RayTransport,
) -> None:
    """Never called: mypy checks that each value fits the Protocol it is assigned to."""
    tables: list[protocols.ReplayTable] = [replay, sharded]
    writers: list[protocols.ReplayWriter] = [writer, remote, tee]
    budgets: list[protocols.Budget] = [counting, board_budget]
    links: list[protocols.Link] = [list_link, start_beat, board_link]
    sinks: list[protocols.WeightSink] = [publisher, board_sink]
    sources: list[protocols.WeightSource] = [client, board_source]
    backends: list[protocols.Backend] = [serial, local, ray]
    del tables, writers, budgets, links, sinks, sources, backends


def test_both_replays_are_replay_tables() -> None:
    assert issubclass(Replay, protocols.ReplayTable)
    ray_shard = pytest.importorskip("wheeler2.buffer.ray_shard", reason="needs ray")
    assert issubclass(ray_shard.ShardedReplay, protocols.ReplayTable)
    # What only writes is not one: the check is not vacuous.
    assert not issubclass(Writer, protocols.ReplayTable)
    assert not issubclass(ray_shard.RemoteWriter, protocols.ReplayTable)


def test_a_created_replay_and_its_writer_fit_the_protocols() -> None:
    layout = Layout(obs_dim=2, act_dim=1)
    with Replay.create(layout, ReplayConfig(capacity=16, batch_size=2), gamma=0.9) as replay:
        assert isinstance(replay, protocols.ReplayTable)
        writer = replay.writer(num_envs=1)
        assert isinstance(writer, protocols.ReplayWriter)
        assert writer.layout == layout
