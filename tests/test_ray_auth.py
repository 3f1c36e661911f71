"""Ray's token authentication (docs/cluster.md): a two-node cluster on this machine with auth on,
a `wheeler2 run` that joins it with the token, a node and a run without the token refused, and
the warning of a run that joins a cluster with auth off.

Every Ray process here is a subprocess with the auth settings of its own environment: Ray reads
RAY_AUTH_MODE when it is imported, so this test process stays out of it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="backend ray needs the optional extra: pip install .[ray]")

from tests.test_ray import (  # noqa: E402
    RAY_BIN,
    RAY_COMMON,
    ROOT,
    Cluster,
    head_node,
    ray_start,
    write_team,
)
from wheeler2.runtime.ray_backend import auth_warning, local_ray_token  # noqa: E402

WARNING = "warning: joined the Ray cluster at"
# A node or driver that the GCS refuses retries for 20 s by default; 2 tries are enough here.
SHORT_WAIT = {"RAY_gcs_server_port_wait_time_s": "2"}


def no_auth_env(**extra: str) -> dict[str, str]:
    """This environment without any of Ray's auth settings (and so without a token)."""
    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    return dict({k: v for k, v in os.environ.items() if k not in names}, **extra)


# -- the warning and the local token, without a cluster -----------------------------------------


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "ray-head.example:6379", "127.0.0.1:6379"])
@pytest.mark.parametrize("mode", [None, "disabled", "DISABLED"])
def test_joining_without_auth_warns(address: str, mode: str | None) -> None:
    # A loopback address warns as well: Ray 2.60's GCS and raylets listen on every interface
    # (`ss -ltn` shows *:<port> for a head started with --node-ip-address=127.0.0.1).
    env = {} if mode is None else {"RAY_AUTH_MODE": mode}
    line = auth_warning(address, env)
    assert line is not None and line.startswith(f"{WARNING} {address} ")
    assert "RAY_AUTH_MODE=token" in line and "\n" not in line


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "127.0.0.1:6379"])
def test_joining_with_auth_is_silent(address: str) -> None:
    assert auth_warning(address, {"RAY_AUTH_MODE": "token"}) is None
    assert auth_warning(address, {"RAY_AUTH_MODE": " Token "}) is None


def test_local_ray_gets_a_token_of_its_own_only_when_the_user_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env: dict[str, str] = {}
    local_ray_token(env)
    token = env["RAY_AUTH_TOKEN"]
    assert len(token) == 64 and set(token) <= set("0123456789abcdef")  # 256 bits, as Ray's own
    assert not (tmp_path / ".ray").exists(), "nothing written to the home directory"
    local_ray_token(env)
    assert env["RAY_AUTH_TOKEN"] == token, "one token for every Ray this process starts"

    for given in ({"RAY_AUTH_TOKEN_PATH": "/etc/ray-token"}, {"RAY_AUTH_MODE": "disabled"}):
        env = dict(given)
        local_ray_token(env)
        assert env == given
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("a" * 64)
    env = {}
    local_ray_token(env)
    assert env == {}, "the user's ~/.ray/auth_token is Ray's to use"


# -- a two-node cluster with token auth ----------------------------------------------------------


@pytest.fixture(scope="module")
def auth_cluster() -> Iterator[Cluster]:
    """A head (1 CPU) started with a token; ``env`` is the token's environment for drivers
    and for more nodes (the head's end stops them too)."""
    with head_node(secrets.token_hex(32), num_cpus=1) as head:
        yield head


def test_node_without_the_token_is_refused(auth_cluster: Cluster) -> None:
    refused = subprocess.run(
        [RAY_BIN, "start", f"--address={auth_cluster.address}", "--num-cpus=1", *RAY_COMMON],
        env=no_auth_env(RAY_TMPDIR=auth_cluster.tmpdir, **SHORT_WAIT),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    assert "InvalidAuthToken" in refused.stderr, refused.stderr[-3000:]


def run_cli(
    cfg: Path, out: Path, address: str, env: dict[str, str], timeout: float
) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out),
         "--set", f"experiment.ray_address={address}"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


# Slow: the default run has test_ray.py's runs join that module's cluster, which has token
# auth too, with the token in their environment (the killed explorer's run also checks that
# no auth warning is printed); this adds a second node and members placed on both.
@pytest.mark.slow
@pytest.mark.timeout(540)  # a ray team's start on a loaded two-core machine took minutes
def test_run_joins_a_token_cluster_with_the_token(tmp_path: Path, auth_cluster: Cluster) -> None:
    # A second node with the token: a team of three 1-CPU members needs both nodes.
    ray_start(auth_cluster.env, f"--address={auth_cluster.address}", "--num-cpus=2")
    cfg, out = write_team(tmp_path, total=600), tmp_path / "runs"
    code, output = run_cli(cfg, out, auth_cluster.address, auth_cluster.env, 480)
    assert code == 0, output
    assert WARNING not in output, output
    (run,) = (tmp_path / "runs").iterdir()
    placed = json.loads((run / "placement.json").read_text())
    assert len({m["node_id"] for m in placed.values()}) == 2, "both nodes took members"
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 600


@pytest.mark.timeout(240)
def test_run_without_the_token_is_refused(tmp_path: Path, auth_cluster: Cluster) -> None:
    bare = no_auth_env(RAY_TMPDIR=auth_cluster.tmpdir, **SHORT_WAIT)
    cfg, out = write_team(tmp_path, total=600), tmp_path / "runs"
    code, output = run_cli(cfg, out, auth_cluster.address, bare, 180)
    assert code != 0, output
    assert "Failed to connect to Ray cluster" in output, output[-3000:]
    assert "InvalidAuthToken" in output, output[-3000:]
    assert WARNING not in output
