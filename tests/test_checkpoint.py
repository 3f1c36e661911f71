"""Checkpoints: round trips, RNG restore, weights_only safety, atomic writes."""

from __future__ import annotations

import os
import pickle
import random

import numpy as np
import pytest
import torch

from wheeler2 import checkpoint as ckpt


def test_round_trip_tensors_numpy_and_nested_values(tmp_path):
    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i64": np.array([1, -2, 3], dtype=np.int64),
        "u8": np.array([0, 255], dtype=np.uint8),
        "bool": np.array([True, False]),
        "strided": np.arange(10.0)[::3],
    }
    state = {
        "weights": {"w": torch.randn(3, 4), "b": torch.zeros(4)},
        "numpy": ckpt.to_safe(arrays),
        "counters": [1, 2.5, "x", None, (3, 4)],
        "np_scalar": ckpt.to_safe(np.float64(0.25)),
    }
    path = tmp_path / "checkpoints" / ckpt.LATEST
    ckpt.save(path, state)
    loaded = ckpt.load(path)
    assert torch.equal(loaded["weights"]["w"], state["weights"]["w"])
    back = ckpt.from_safe(loaded["numpy"])
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype, name
        np.testing.assert_array_equal(back[name], arr)
    assert loaded["counters"] == [1, 2.5, "x", None, (3, 4)]
    assert loaded["np_scalar"] == 0.25 and type(loaded["np_scalar"]) is float


def test_to_safe_rejects_objects():
    with pytest.raises(TypeError, match="cannot store a object"):
        ckpt.to_safe({"x": object()})
    with pytest.raises(TypeError, match="dtype"):
        ckpt.to_safe(np.array(["a", "b"]))


def test_load_refuses_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"obj": _Custom()}, path)
    with pytest.raises(ckpt.CheckpointError, match="refused") as info:
        ckpt.load(path)
    _assert_one_line_naming(info.value, path)


class _Custom:
    pass


class _RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _assert_one_line_naming(exc: Exception, path) -> None:
    message = str(exc)
    assert "\n" not in message, message
    assert str(path) in message
    assert "weights_only" not in message  # never torch's advice to load it unsafely


def test_load_refuses_a_malicious_pickle_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    for name, write in {
        "zip.pt": lambda p: torch.save({"run": {}, "x": _RunsCode(marker)}, p),
        "raw.pt": lambda p: p.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2)),
    }.items():
        path = tmp_path / name
        write(path)
        with pytest.raises(ckpt.CheckpointError, match="refused") as info:
            ckpt.load(path)
        _assert_one_line_naming(info.value, path)
        assert "system" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["truncated", "empty", "foreign", "missing", "not_a_dict"])
def test_load_refuses_unreadable_files_in_one_line(tmp_path, kind):
    path = tmp_path / "latest.pt"
    if kind == "truncated":
        ckpt.save(path, {"w": torch.randn(64, 64), "n": 1})
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "foreign":
        path.write_text("hello, this is a text file\n")
    elif kind == "not_a_dict":
        torch.save([torch.ones(2)], path)
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load(path)
    _assert_one_line_naming(info.value, path)


def test_numpy_allowance_does_not_let_objects_through(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "old.pt"
    torch.save({"mean": np.array([_RunsCode(marker)], dtype=object)}, path)
    with pytest.raises(ckpt.CheckpointError, match="refused.*ObjectDType") as info:
        ckpt.load(path)
    _assert_one_line_naming(info.value, path)
    assert not marker.exists()


def test_load_reads_numpy_arrays_of_older_checkpoints(tmp_path):
    """normalize_obs runs saved numpy arrays before the fix: they still evaluate and resume."""
    path = tmp_path / "old.pt"
    torch.save({"mean": np.arange(3.0), "count": np.int64(4)}, path)
    loaded = ckpt.load(path)
    np.testing.assert_array_equal(loaded["mean"], np.arange(3.0))


@pytest.mark.parametrize(
    ("value", "where", "what"),
    [
        ({"a": {"b": [1, np.zeros(2)]}}, r"state\.a\.b\[1\]", "numpy.ndarray"),
        ({"n": np.float64(1.0)}, r"state\.n", "numpy.float64"),
        ({"obj": _Custom()}, r"state\.obj", "_Custom"),
        ({"k": {object(): 1}}, r"state\.k", "object"),
    ],
)
def test_save_refuses_values_load_would_refuse(tmp_path, value, where, what):
    path = tmp_path / "latest.pt"
    ckpt.save(path, {"version": 1})
    with pytest.raises(TypeError, match=where) as info:
        ckpt.save(path, value)
    assert what in str(info.value)
    assert ckpt.load(path) == {"version": 1}  # the previous checkpoint is untouched


def test_save_accepts_module_and_optimizer_states(tmp_path):
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    ckpt.save(tmp_path / "c.pt", {"net": net.state_dict(), "opt": opt.state_dict()})
    loaded = ckpt.load(tmp_path / "c.pt")
    assert torch.equal(loaded["net"]["weight"], net.weight.detach())


class _Agent:
    def __init__(self, algo, shape):
        self.algo, self.w = algo, torch.zeros(shape)

    def state_dict(self):
        return {"algo": self.algo, "net": {"w": self.w.clone()}, "steps": 0, "opt": {}}

    def load_state_dict(self, state):
        self.w.copy_(state["net"]["w"])


def test_check_matches_names_the_member_algo_and_shape(tmp_path):
    path = tmp_path / "latest.pt"
    payload = {
        "members": {"a": _Agent("ddpg", (2, 3)).state_dict(), "b": _Agent("ppo", 4).state_dict()}
    }
    ckpt.check_matches(path, payload, {"a": _Agent("ddpg", (2, 3)), "b": _Agent("ppo", 4)}, {})
    ckpt.check_matches(path, payload, {"a": _Agent("ddpg", (2, 3))}, {}, subset=True)
    # A member the checkpoint never heard of starts fresh, unless its state is required.
    grown = {"a": _Agent("ddpg", (2, 3)), "b": _Agent("ppo", 4), "c": _Agent("ppo", 4)}
    ckpt.check_matches(path, payload, grown, {})
    with pytest.raises(ckpt.CheckpointError, match=r"no state for \['c'\]"):
        ckpt.check_matches(path, payload, grown, {}, required=["c"])
    # Names in member_steps count too: a member that reported steps but no state yet.
    with_steps = {**payload, "member_steps": {"a": 5, "b": 5, "x": 9}}
    with pytest.raises(ckpt.CheckpointError, match=r"\['x'\] not in the config"):
        ckpt.check_matches(
            path, with_steps, {"a": _Agent("ddpg", (2, 3)), "b": _Agent("ppo", 4)}, {}
        )

    cases = {
        "renamed": (
            {"a": _Agent("ddpg", (2, 3)), "c": _Agent("ppo", 4)},
            r"'b'\] not in the config",
        ),
        "algo": ({"a": _Agent("ddpg", (2, 3)), "b": _Agent("a2c", 4)}, "saved by algo 'ppo'"),
        "shape": ({"a": _Agent("ddpg", (2, 5)), "b": _Agent("ppo", 4)}, r"a\.net\.w has shape"),
    }
    for agents, match in cases.values():
        with pytest.raises(ckpt.CheckpointError, match=match) as info:
            ckpt.check_matches(path, payload, agents, {})
        _assert_one_line_naming(info.value, path)
    with pytest.raises(ckpt.CheckpointError, match="no member states"):
        ckpt.check_matches(path, {"run": {}}, {"a": _Agent("ddpg", 1)}, {})


def test_rng_state_restores_python_numpy_and_torch(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    path = tmp_path / "rng.pt"
    ckpt.save(path, {"rng": ckpt.rng_state()})

    first = (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    ckpt.set_rng_state(ckpt.load(path)["rng"])
    again = (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())
    assert again == first


def test_generator_state_round_trip(tmp_path):
    gen = np.random.default_rng(5)
    gen.random(7)
    ckpt.save(tmp_path / "g.pt", {"gen": ckpt.generator_state(gen)})
    expected = gen.random(4)
    other = np.random.default_rng(0)
    ckpt.set_generator_state(other, ckpt.load(tmp_path / "g.pt")["gen"])
    np.testing.assert_array_equal(other.random(4), expected)


def test_checkpoint_path_names():
    assert ckpt.checkpoint_path("runs/x", "best").as_posix() == "runs/x/checkpoints/best.pt"
    assert ckpt.checkpoint_path("runs/x").name == "latest.pt"
    with pytest.raises(ValueError):
        ckpt.checkpoint_path("runs/x", "worst")


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_interrupted_save_keeps_previous_checkpoint_and_leaves_no_temp(
    tmp_path, monkeypatch, failure
):
    path = tmp_path / "checkpoints" / ckpt.LATEST
    ckpt.save(path, {"version": 1, "w": torch.ones(3)})
    real_save = torch.save

    def half_written(obj, f):
        real_save(obj, f)
        f.truncate(f.tell() // 2)  # a torn write: half the bytes made it to disk
        raise failure("interrupted mid-write")

    monkeypatch.setattr(ckpt.torch, "save", half_written)
    with pytest.raises(failure):
        ckpt.save(path, {"version": 2, "w": torch.zeros(3)})

    assert ckpt.load(path)["version"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == [ckpt.LATEST]


def test_failed_rename_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"

    def no_replace(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.os, "replace", no_replace)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(path, {"x": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_during_save_is_delivered_after_the_write(tmp_path, monkeypatch, sig):
    """Ctrl-C while torch.save writes: the file is finished and renamed first, then the
    interrupt arrives (before the fix, torch's zip writer turned it into a RuntimeError)."""
    import signal

    signum = getattr(signal, sig)
    path = tmp_path / "checkpoints" / ckpt.LATEST
    real_save = torch.save

    def save_then_signalled(obj, f):
        signal.raise_signal(signum)  # arrives while the zip writer is open
        real_save(obj, f)

    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.torch, "save", save_then_signalled)
    old = signal.signal(signum, raise_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            ckpt.save(path, {"version": 3, "w": torch.arange(4.0)})
        assert signal.getsignal(signum) is raise_interrupt  # the run's handler is back
    finally:
        signal.signal(signum, old)
    loaded = ckpt.load(path)
    assert loaded["version"] == 3 and torch.equal(loaded["w"], torch.arange(4.0))
    assert sorted(p.name for p in path.parent.iterdir()) == [ckpt.LATEST]
