"""Weight sync through shared memory: partial copy, blending, versions, processes, cleanup."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time

import multiprocess
import pytest
import torch
from torch import nn

from wheeler2.sync import (
    SyncError,
    WeightClient,
    WeightPublisher,
    check_sync,
    match_keep,
)


class Actor(nn.Module):
    """The shape of the shared nets: a trunk and a last layer called ``head``."""

    def __init__(
        self,
        obs_dim: int = 5,
        hidden: tuple[int, int] = (16, 12),
        act_dim: int = 3,
        log_std: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.trunk = nn.Sequential(
            nn.Linear(obs_dim, hidden[0]), nn.ReLU(), nn.Linear(hidden[0], hidden[1]), nn.ReLU()
        )
        self.head = nn.Linear(hidden[1], act_dim)
        self.register_buffer("obs_scale", torch.rand(obs_dim))
        if log_std:  # explorer-only tensor, as PPO's
            self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))


def snapshot(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.state_dict().items()}


def shm_exists(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name}")


@pytest.fixture
def pub():
    p = WeightPublisher.create(Actor(seed=1))
    yield p
    p.close()


def test_copies_every_tensor_but_the_kept_ones(pub):
    learner = Actor(seed=1)
    explorer = Actor(log_std=True, seed=2)
    before = snapshot(explorer)
    client = WeightClient.attach(pub.handle(), explorer, keep=["actor.head"], alpha=1.0)
    pub.publish(learner)
    assert client.pull() == 1
    after = explorer.state_dict()
    for name in ("trunk.0.weight", "trunk.0.bias", "trunk.2.weight", "trunk.2.bias", "obs_scale"):
        assert torch.equal(after[name], learner.state_dict()[name]), name
        assert not torch.equal(after[name], before[name]), name
    for name in ("head.weight", "head.bias", "log_std"):  # kept, and explorer-only
        assert torch.equal(after[name], before[name]), name
    assert set(client.synced) == {
        "trunk.0.weight",
        "trunk.0.bias",
        "trunk.2.weight",
        "trunk.2.bias",
        "obs_scale",
    }
    client.close()


@pytest.mark.parametrize("alpha", [0.25, 0.9])
def test_blends_by_alpha(pub, alpha):
    learner = Actor(seed=1)
    explorer = Actor(seed=2)
    before = snapshot(explorer)
    client = WeightClient.attach(pub.handle(), explorer, keep=["head"], alpha=alpha)
    pub.publish(learner)
    client.pull()
    theta_t = learner.state_dict()
    for name, value in explorer.state_dict().items():
        if name.startswith("head."):
            assert torch.equal(value, before[name])
            continue
        expected = alpha * theta_t[name].double() + (1 - alpha) * before[name].double()
        torch.testing.assert_close(value.double(), expected, rtol=1e-6, atol=1e-7)
    # A second pull of the same version must not blend again.
    again = snapshot(explorer)
    assert client.pull() is None
    for name, value in explorer.state_dict().items():
        assert torch.equal(value, again[name])
    client.close()


def test_versions_and_none_when_nothing_new(pub):
    learner = Actor(seed=1)
    client = WeightClient.attach(pub.handle(), Actor(seed=2), keep=["head.*"], alpha=1.0)
    assert pub.version == 0 and client.pull() is None  # nothing published yet
    assert pub.publish(learner) == 1 and pub.version == 1
    assert client.lag() == 1
    assert client.pull() == 1 and client.version == 1
    assert client.pull() is None
    pub.publish(learner)
    pub.publish(learner)
    assert client.lag() == 2 and client.lag(5) == 4
    assert client.pull() == 3  # skips straight to the latest
    assert client.lag() == 0
    client.close()


def _child_pull(handle, published_value):
    explorer = Actor(seed=3)
    client = WeightClient.attach(handle, explorer, keep=["head"], alpha=1.0)
    version = client.pull()
    ok = bool((explorer.trunk[0].weight == published_value).all())
    client.close()
    return version, ok


def _child_publish(pub, value):
    learner = Actor(seed=1)
    with torch.no_grad():
        for p in learner.parameters():
            p.fill_(value)
    version = pub.publish(learner)
    pub.close()  # an attached publisher must not unlink
    return version


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_other_process_sees_updates_and_leaves_segment(pub, method):
    ctx = multiprocess.get_context(method)
    learner = Actor(seed=1)
    with torch.no_grad():
        learner.trunk[0].weight.fill_(0.5)
    pub.publish(learner)
    with ctx.Pool(1) as pool:
        # The explorer process pulls the update published here...
        assert pool.apply(_child_pull, (pickle.loads(pickle.dumps(pub.handle())), 0.5)) == (1, True)
        # ...and a learner process publishes through a pickled publisher.
        assert pool.apply(_child_publish, (pub, 0.25)) == 2
    assert shm_exists(pub.handle().name)  # children detached without unlinking
    client = WeightClient.attach(pub.handle(), Actor(seed=2), keep=["head"], alpha=1.0)
    assert client.pull() == 2
    assert torch.all(client.module.trunk[0].weight == 0.25)
    client.close()


def test_close_leaves_nothing_in_dev_shm():
    pub = WeightPublisher.create(Actor())
    name = pub.handle().name
    client = WeightClient.attach(pub.handle(), Actor(), keep=["head"], alpha=1.0)
    pub.publish(Actor())
    assert shm_exists(name)
    client.close()
    assert shm_exists(name)  # only the owner unlinks
    pub.close()
    pub.close()  # idempotent
    assert not shm_exists(name)


def test_close_on_error_in_owner():
    name = None
    with pytest.raises(KeyError):
        with WeightPublisher.create(Actor()) as pub:
            name = pub.handle().name
            raise KeyError("boom")
    assert name is not None and not shm_exists(name)


OWNER_SCRIPT = """
import signal, sys, time
# A shell's background job starts with SIGINT ignored, and Python then keeps it ignored; the
# test is about what Ctrl-C does, so install Python's own handler whatever we inherited.
signal.signal(signal.SIGINT, signal.default_int_handler)
from torch import nn
from wheeler2.sync import WeightPublisher, WeightClient
m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
pub = WeightPublisher.create(m)
pub.publish(m)
WeightClient.attach(pub.handle(), m, keep=["1"], alpha=1.0).pull()
print(pub.handle().name, flush=True)
if sys.argv[1] == "exit":
    raise SystemExit(3)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["exit", "sigint"])
def test_owner_exit_without_close_unlinks_quietly(tmp_path, how):
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    name = proc.stdout.readline().strip()
    assert name.startswith("w2sync_")
    if how == "sigint":
        assert shm_exists(name)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
    _, err = proc.communicate(timeout=60)
    # An uncaught KeyboardInterrupt ends Python by re-raising SIGINT, after atexit has run.
    assert proc.returncode == (3 if how == "exit" else -signal.SIGINT), err
    assert not shm_exists(name)
    assert "leaked" not in err and "KeyError" not in err, err


def _publish_constants(pub, seconds):
    learner = Actor(hidden=(400, 300))
    count = 0
    deadline = time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < deadline:
            count += 1
            for p in learner.parameters():
                p.fill_(float(count))
            pub.publish(learner)
    return count


def test_pull_never_sees_a_torn_copy():
    # Every publish writes one constant everywhere, so a mix of values means a torn read.
    pub = WeightPublisher.create(Actor(hidden=(400, 300)))
    explorer = Actor(hidden=(400, 300))
    client = WeightClient.attach(pub.handle(), explorer, keep=["obs_scale"], alpha=1.0)
    try:
        with multiprocess.get_context("spawn").Pool(1) as pool:
            job = pool.apply_async(_publish_constants, (pub, 1.5))
            pulls = 0
            while not job.ready():
                if client.pull() is not None:
                    pulls += 1
                    values = torch.cat([p.reshape(-1) for p in explorer.parameters()])
                    assert values.min() == values.max(), "torn copy"
            published = job.get()
        assert pulls >= 3 and published >= 3, (pulls, published)
    finally:
        client.close()
        pub.close()


def test_keep_matching():
    assert match_keep("head.weight", ["head"])
    assert match_keep("head.bias", ["head.*"])
    assert match_keep("head.bias", ["actor.head"])
    assert match_keep("trunk.2.weight", ["trunk.2"])
    assert not match_keep("trunk.0.weight", ["trunk.2"])
    assert not match_keep("header.weight", ["head"])


def test_check_sync_bad_keep_pattern_lists_modules():
    with pytest.raises(SyncError) as err:
        check_sync(Actor(), Actor(log_std=True), ["actor.hed"], "explorer")
    msg = str(err.value)
    assert "[[team]] explorer" in msg and "'actor.hed'" in msg
    assert "trunk.0, trunk.2, head" in msg
    assert isinstance(err.value, ValueError)


def test_check_sync_shape_mismatch_names_tensor():
    with pytest.raises(SyncError) as err:
        check_sync(Actor(hidden=(16, 12)), Actor(hidden=(32, 12)), ["head"], "ppo")
    msg = str(err.value)
    assert "trunk.0.weight" in msg and "[16, 5]" in msg and "[32, 5]" in msg
    assert "hidden sizes" in msg
    # A mismatch confined to a kept layer is fine.
    check_sync(Actor(act_dim=3), Actor(act_dim=4), ["actor.head"], "ppo")


def test_check_sync_nothing_synced():
    class Other(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(5, 3)

    with pytest.raises(SyncError, match="nothing"):
        check_sync(Actor(), Other(), [], "explorer")
    with pytest.raises(SyncError, match="nothing"):
        check_sync(Actor(), Actor(), ["*"], "explorer")


def test_attach_validates_like_check_sync(pub):
    with pytest.raises(SyncError, match="trunk.0.weight"):
        WeightClient.attach(pub.handle(), Actor(hidden=(8, 12)), keep=["head"], alpha=1.0)
    with pytest.raises(SyncError):
        WeightClient.attach(pub.handle(), Actor(), keep=["head"], alpha=0.0)
