"""Replay shards as the ray driver and learner use them, without a cluster: the shard's own class
in this process behind a handle whose ``.remote`` calls return its coroutines, ``ray.get`` as
one event loop's runner and ``ray.wait`` as "everything is ready"."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray", reason="backend ray needs the optional extra")

from ray_fakes import Handle, vector_steps  # noqa: E402

from wheeler2.buffer import Layout, ReplayConfig, ray_shard  # noqa: E402
from wheeler2.buffer.ray_shard import ReplayShard, ShardedReplay  # noqa: E402
from wheeler2.runtime import ray_backend  # noqa: E402
from wheeler2.runtime.replays import ReplaySpec  # noqa: E402
from wheeler2.runtime.trainer import Trainer  # noqa: E402


@pytest.fixture
def loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()

    def get(ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [get(r) for r in ref]
        return loop.run_until_complete(ref) if inspect.iscoroutine(ref) else ref

    monkeypatch.setattr(ray_backend.ray, "get", get)
    monkeypatch.setattr(ray_shard.ray, "wait", lambda refs, **kw: (list(refs), []))
    yield loop
    loop.close()


def shard(**cfg_keys: Any) -> Any:
    keys = dict(
        capacity=64, batch_size=64, prioritized=True, alpha=0.6, beta=0.4, eps=1e-6,
        beta_steps=100, updates_per_insert=0, min_size=1,
    )  # fmt: skip
    cfg = ReplayConfig(**(keys | cfg_keys))
    spec = ReplaySpec(Layout(obs_dim=3, act_dim=1), cfg, gamma=0.9, relabel=None, seed=3)
    return ReplayShard.__ray_actor_class__(spec, 0)


def test_a_resumed_learners_updates_carry_per_beta_on_into_its_shards(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # A learner resumed after 200 updates, of a run whose beta anneals over 100: its batches'
    # importance weights are at beta = 1, as a local learner's replay gives them after the same
    # resume (Replay.continue_updates), not back at beta0 = 0.4.
    one = shard()
    run = loop.run_until_complete
    try:
        ray_backend.restore_shards("main", [Handle(one)], None, updates=200)
        run(one.insert("explorer", vector_steps(6), False))
        run(one.flush("explorer"))
        assert run(one.sample(1, 1.0))["n"] == 1  # the sampler learns of the 6 rows
        td = np.array([0.5, -2.0, 0.0, 1.0, 3.0, -0.1])
        run(one.update_priorities([(np.arange(6), td)]))
        batch = run(one.sample(1, 1.0))["batch"]
        p = (np.abs(td) + 1e-6) ** 0.6
        want = (p / p.min())[batch["index"][0]] ** -1.0  # beta = 1
        np.testing.assert_allclose(batch["weight"][0], want, rtol=1e-5)
    finally:
        run(one.close())


def test_the_runs_actors_are_named_in_the_wheeler2_namespace() -> None:
    # docs/cluster.md: reach them with ray.get_actor(name, namespace="wheeler2"), also when the
    # caller's script ran ray.init() itself (its namespace is then an anonymous one).
    transport = object.__new__(ray_backend.RayTransport)
    transport.run_id = "abcd1234"
    assert transport._named("target") == {
        "name": "wheeler2-abcd1234-target",
        "namespace": "wheeler2",
    }


def test_the_learner_takes_every_update_the_shards_owe_not_fifty_a_step(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # The member loop takes Trainer.owed() updates as a step ends (PUBLISH_EVERY = 50 where it
    # cannot say). A learner's own rows are never held by the gate: with 64 copies at one
    # update per insert it owes 64 a step, and at 50 it fell behind for good on Ray.
    one = shard(capacity=1024, batch_size=16, prioritized=False, updates_per_insert=1.0,
                min_size=16, gate_tolerance=4096)  # fmt: skip
    run = loop.run_until_complete
    try:
        run(one.insert("target", vector_steps(216), False))
        run(one.flush("target"))
        layout = Layout(obs_dim=3, act_dim=1)
        replay = ShardedReplay([Handle(one)], layout, 64, "target", 0)
        trainer = Trainer(SimpleNamespace(), replay)
        assert trainer.owed() == 216 - 16 + 1  # the gate's count: 8 batches here, 193 to come
        taken = 0
        while replay.can_sample():
            replay.sample()
            taken += 1
        assert taken == 201
        assert trainer.owed() == ray_shard.LEAST_OWED  # nothing owed: the loop tries as before
        off = ShardedReplay([Handle(shard())], layout, 64, "target", 0)  # updates_per_insert 0
        off.can_sample()
        assert Trainer(SimpleNamespace(), off).owed() is None
        for call in [*replay.in_flight, *off.in_flight]:
            call.close()  # the sample calls left in flight: never awaited here
    finally:
        run(one.close())
