"""Backend ``ray``: a cluster on this machine with token auth (a second node for the placement
test), a killed actor, Ctrl-C, and checkpoints that move between the ray and local backends.
tests/test_ray_auth.py has runs with and without the token.

The cluster each test starts lives in its own temp dir and every process of it carries that dir in
``RAY_TMPDIR``; teardown stops exactly those processes (the worker node too, when a test added
it), never another Ray on the machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ray_fakes import vector_steps
from ray_tmpdir import ray_tmpdir

ray = pytest.importorskip("ray", reason="backend ray needs the optional extra: pip install .[ray]")

from tests.test_agents_meet import JOINT  # noqa: E402
from wheeler2 import checkpoint as ckpt  # noqa: E402
from wheeler2.config import load  # noqa: E402
from wheeler2.runtime import run_experiment  # noqa: E402
from wheeler2.runtime.experiment import MemberFailed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAY_BIN = str(Path(sys.executable).with_name("ray"))

TEAM = """
[experiment]
name = "rayteam"
seed = 1
total_steps = {total}
eval_every = 1_000
eval_episodes = 2
backend = "ray"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 20_000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 200
hidden = [32, 32]

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
count = 2
sync = {{ every = 100, keep = ["actor.head"], alpha = 1.0 }}
[team.params]
hidden = [32, 32]
activation = "relu"
n_steps = 64
batch_size = 32
"""


def write_team(tmp_path: Path, total: int) -> Path:
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(total=total))
    return path


# -- process bookkeeping ----------------------------------------------------------------------


def processes_with_env(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (e.g. ``RAY_TMPDIR=/tmp/x``)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if needle in env:
            found.append(int(entry))
    return found


def stop_processes(marker: str, grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_with_env(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while processes_with_env(marker) and time.monotonic() < deadline:
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Cluster:
    address: str
    tmpdir: str
    env: dict[str, str]  # RAY_TMPDIR and the rest, for `ray start` of another node


RAY_COMMON = ["--disable-usage-stats", "--include-log-monitor=false"]


def ray_start(env: dict[str, str], *args: str) -> None:
    """`ray start` of a node on this machine (a head with ``--head``) with ``env``."""
    if "--head" in args:
        args = (*args, "--include-dashboard=false")
    subprocess.run(
        [RAY_BIN, "start", *args, "--node-ip-address=127.0.0.1", *RAY_COMMON],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def token_env(token: str) -> dict[str, str]:
    """This environment for a node or driver of a cluster with Ray's token authentication
    (docs/cluster.md); RAY_AUTH_TOKEN comes before any token file of this machine's user."""
    return dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)


@contextlib.contextmanager
def driver_token(token: str) -> Iterator[None]:
    """This process as a driver with ``token``, and as it was afterwards.

    Ray reads RAY_AUTH_MODE when it is imported and caches the token it loads, so changing the
    environment is not enough: Ray's own tests refresh both, with this helper."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    before = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    reset_auth_token_state()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reset_auth_token_state()


@contextlib.contextmanager
def head_node(token: str, num_cpus: int) -> Iterator[Cluster]:
    """A head node on this machine with token auth, in its own RAY_TMPDIR; every process of the
    cluster (other nodes started with its ``env`` too) is stopped at the end."""
    with ray_tmpdir() as tmpdir:  # short: Ray's socket paths under it stay below 108 bytes
        marker = f"RAY_TMPDIR={tmpdir}"
        env = dict(token_env(token), RAY_TMPDIR=tmpdir)
        port = free_port()
        try:
            ray_start(env, "--head", f"--port={port}", f"--num-cpus={num_cpus}")
            yield Cluster(f"127.0.0.1:{port}", tmpdir, env)
        finally:
            stop_processes(marker)
            leftover = processes_with_env(marker)
            assert not leftover, f"cluster processes left behind: {leftover}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head node (3 CPUs) on this machine, with token auth; this test process is connected to
    it as a driver. The default tests need one node; ``worker_node`` adds the second for the
    placement test."""
    token = secrets.token_hex(32)
    with driver_token(token), head_node(token, num_cpus=3) as head:
        try:
            ray.init(address=head.address, namespace="wheeler2", log_to_driver=False,
                     logging_level="error")  # fmt: skip
            yield head
        finally:
            if ray.is_initialized():
                ray.shutdown()


@pytest.fixture(scope="module")
def worker_node(cluster: Cluster) -> str:
    """A second node in the cluster (2 CPUs, resource explorer_node = 2); its node id."""
    ray_start(
        cluster.env, f"--address={cluster.address}", "--num-cpus=2",
        '--resources={"explorer_node": 2}',
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    return next(
        n["NodeID"] for n in ray.nodes() if n["Alive"] and "explorer_node" in n["Resources"]
    )


# -- tests --------------------------------------------------------------------------------------


# Two nodes and two shards: slow; the default run drives a ray team in test_faults.py and
# test_backends_agree.py and keeps this cluster's lighter tests below.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_explorers_pinned_to_second_node_with_two_shards(
    tmp_path: Path, cluster: Cluster, worker_node: str
) -> None:
    # The config file's own keys: [buffer] shards and [[team]] resources.
    config = load(
        write_team(tmp_path, total=2_000),
        overrides=[
            f"experiment.ray_address={cluster.address!r}".replace("'", '"'),
            "buffer.shards=2",
            "team.explorer.resources={explorer_node = 1}",
        ],
    )
    assert config.buffer.shards == 2
    assert config.team[1].resources == {"explorer_node": 1.0}
    run = run_experiment(config, tmp_path / "run")
    placed = json.loads((run / "placement.json").read_text())
    assert placed["explorer-0"]["node_id"] == worker_node
    assert placed["explorer-1"]["node_id"] == worker_node
    assert placed["target"]["node_id"] != worker_node
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 2_000
    assert summary["members"]["explorer-0"]["node_id"] == worker_node
    target = summary["members"]["target"]
    # The gate held across both shards: about one update per insert after the warm-up.
    assert target["updates"] > 1_000
    assert 0.9 < target["updates_per_insert"] < 1.1
    assert summary["eval"] and summary["eval"][-1]["env_steps"] == 2_000
    payload = ckpt.load(run / "checkpoints" / "latest.pt")
    assert set(payload["members"]) == {"target", "explorer-0", "explorer-1"}
    assert sum(payload["member_steps"].values()) == 2_000


def test_unplaceable_member_is_named(tmp_path: Path, cluster: Cluster) -> None:
    config = load(write_team(tmp_path, total=1_000))
    team = list(config.team)
    team[1] = dataclasses.replace(team[1], num_gpus=1.0)  # the cluster has no GPU
    config = dataclasses.replace(config, team=tuple(team))
    config = dataclasses.replace(
        config, experiment=dataclasses.replace(config.experiment, ray_address=cluster.address)
    )
    with pytest.raises(MemberFailed) as err:
        run_experiment(config, tmp_path / "run")
    assert err.value.member == "explorer-0"
    assert "GPU" in err.value.detail


def start(cfg: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "wheeler2", "run", str(cfg), "--out", str(out), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env=env, start_new_session=True,
    )  # fmt: skip


# A wait for an event, not a speed bound: a team that never reports fails here. 420 s (under
# the 540 s limit of the tests that wait) because a loaded two-core machine took over 120 s to
# bring up a ray team (experiments/stress_tests.sh, 2026-11-25) and once over 240 s to hear
# from all its members (2026-11-26).
def wait_running(out: Path, proc: subprocess.Popen, timeout: float = 420) -> tuple[Path, dict]:
    """Until every member has reported figures at least once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        runs = list(out.glob("*/placement.json"))
        if runs:
            run = runs[0].parent
            placed = json.loads(runs[0].read_text())
            metrics = run / "metrics.csv"
            rows = metrics.read_text().splitlines()[1:] if metrics.exists() else []
            if {r.split(",")[2] for r in rows} >= set(placed):
                return run, placed
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("members never reported")


@pytest.mark.timeout(540)  # wait_running's wait, and the run's end after it
def test_killed_explorer_actor_stops_team_with_exit_1(tmp_path: Path, cluster: Cluster) -> None:
    out = tmp_path / "runs"
    proc = start(write_team(tmp_path, total=1_000_000), out,
                 "--set", f"experiment.ray_address={cluster.address}")  # fmt: skip
    try:
        run, placed = wait_running(out, proc)
        ray.kill(ray.get_actor(placed["explorer-1"]["actor"], namespace="wheeler2"))
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output
    # Seen as its actor's death, not later as a silent member (an event, not a clock).
    assert "member 'explorer-1' died" in output and "its actor died" in output, output
    # The module's cluster has token auth and the run joined it with the token (RAY_AUTH_MODE
    # and RAY_AUTH_TOKEN in its environment, from `driver_token`): no warning about auth.
    assert "warning: joined the Ray cluster at" not in output, output
    assert "hangs" not in output, output
    assert (run / "checkpoints" / "latest.pt").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True
    # The run's other actors went with it.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            ray.get_actor(placed["target"]["actor"], namespace="wheeler2")
        except ValueError:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the learner's actor outlived the run")


@pytest.mark.slow  # the default run has test_faults.py's Ctrl-C on ray; this adds the resume
@pytest.mark.timeout(600)
def test_sigint_checkpoints_and_resumes_under_local(tmp_path: Path, ray_tmp: str) -> None:
    """A run that starts its own Ray: Ctrl-C -> exit 130, a final checkpoint, no Ray process
    left; the checkpoint then resumes under the local backend."""
    marker = f"RAY_TMPDIR={ray_tmp}"
    env = dict(os.environ, RAY_TMPDIR=ray_tmp)
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "runs"
    proc = start(write_team(tmp_path, total=4_000), out, env=env)
    try:
        run, placed = wait_running(out, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        t0 = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, output
        assert time.monotonic() - t0 < 30
        deadline = time.monotonic() + 15
        while processes_with_env(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_with_env(marker) == [], "ray processes left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_processes(marker)
    payload = ckpt.load(run / "checkpoints" / "latest.pt")
    assert set(payload["members"]) == set(placed)
    stopped_at = payload["run"]["env_steps"]
    assert 0 < stopped_at < 4_000
    assert sum(payload["member_steps"].values()) == stopped_at
    assert json.loads((run / "summary.json").read_text())["interrupted"] is True

    # The same run directory, continued by the local backend.
    cfg = run / "config.toml"
    cfg.write_text(cfg.read_text().replace('backend = "ray"', 'backend = "local"'))
    res = subprocess.run([sys.executable, "-m", "wheeler2", "resume", str(run)],
                         capture_output=True, text=True, timeout=240, cwd=ROOT)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 4_000
    assert summary["interrupted"] is False
    assert summary["eval"][-1]["env_steps"] >= 4_000


# Two runs on two backends: slow; test_resume_runtime.py resumes in the default run.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_local_checkpoint_resumes_under_ray(tmp_path: Path, cluster: Cluster) -> None:
    config = load(write_team(tmp_path, total=600))
    local = dataclasses.replace(
        config, experiment=dataclasses.replace(config.experiment, backend="local")
    )
    run = run_experiment(local, tmp_path / "run")
    before = ckpt.load(run / "checkpoints" / "latest.pt")
    longer = dataclasses.replace(
        config,
        experiment=dataclasses.replace(
            config.experiment, total_steps=1_200, ray_address=cluster.address
        ),
    )
    run_experiment(longer, run, resume=True)
    after = ckpt.load(run / "checkpoints" / "latest.pt")
    assert after["run"]["env_steps"] == 1_200
    for name, steps in before["member_steps"].items():
        assert after["member_steps"][name] >= steps
    # The learner went on from its checkpointed counters and weights rather than from scratch.
    t0, t1 = before["members"]["target"], after["members"]["target"]
    assert t1["updates"] > t0["updates"] > 0
    key = next(iter(t1["actor"]))
    assert not np.allclose(t0["actor"][key].numpy(), t1["actor"][key].numpy())


RECURRENT_TEAM = """
[experiment]
name = "recurrent-ray"
seed = 0
total_steps = 800
eval_every = 400
eval_episodes = 1
backend = "ray"
progress = false

[env]
id = "PendulumNoVel-v1"

[buffer]
capacity = 5_000
batch_size = 8
updates_per_insert = 0.1

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
learning_starts = 200
hidden = [16]
core = "gru"
core_size = 8
trunk_reads = "core"         # the explorer's layout, so it can sync core and trunk
seq_length = 8
seq_burn_in = 4

[[team]]
name = "explorer"
algo = "ppo"
role = "explorer"
sync = { every = 100, keep = ["head"], alpha = 1.0 }
[team.params]
hidden = [16]
activation = "relu"
core = "gru"
core_size = 8
trunk_reads = "core"
n_steps = 16
batch_size = 16
"""


@pytest.mark.timeout(540)  # a ray team's start on a loaded two-core machine took minutes
def test_recurrent_team_samples_sequences_and_syncs_on_ray(
    tmp_path: Path, cluster: Cluster
) -> None:
    """Issue 15 on ray: a GRU TD3 learner samples sequences (stored states, burn-in) from the
    ray replay shard, and a GRU PPO explorer's syncs take the learner's core and trunk."""
    cfg = tmp_path / "team.toml"
    cfg.write_text(RECURRENT_TEAM)
    config = load(cfg, overrides=[f"experiment.ray_address={cluster.address}"])
    run = run_experiment(config, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 800
    explorer = summary["members"]["explorer"]
    assert explorer["sync_version"] >= 1 and explorer["env_steps"] > 0
    assert np.isfinite(explorer["policy_loss"])
    # A recurrent TD3 refuses anything but sequences: its updates came through the shard's
    # sequence sampling.
    learner = summary["members"]["target"]
    assert learner["updates"] > 0


def test_shard_gate_holds_producers_and_serves_learner(tmp_path: Path, cluster: Cluster) -> None:
    from wheeler2.buffer.ray_shard import ReplayShard
    from wheeler2.buffer.shm import wheeler2_entries
    from wheeler2.runtime.replays import replay_spec
    from wheeler2.runtime.team import prepare_team

    config = load(write_team(tmp_path, total=5_000))  # min_size 200, gate tolerance 100
    # The team's one table (table 0, the lead learner's), as run_ray builds its shards.
    spec = replay_spec(config, prepare_team(config, {}).tables[0])
    # Steps without behaviour log-probs, as an off-policy producer sends them.
    spec = dataclasses.replace(spec, layout=dataclasses.replace(spec.layout, logp=False))
    shard = ReplayShard.remote(spec, 0)

    def own() -> set[str]:  # this shard's entries only: other runs may share the machine
        return {e for e in wheeler2_entries() if f"_{pid}_" in e}

    try:
        pid = ray.get(shard.ready.remote())
        assert ray.get(shard.sample.remote(8, 0.0))["n"] == 0, "nothing before min_size"
        for k in range(4):  # 256 inserts: 56 past min_size, within the tolerance
            ray.get(shard.insert.remote("explorer", vector_steps(64, 64 * k), True), timeout=10)
        ray.get(shard.insert.remote("explorer", vector_steps(64, 256), True), timeout=10)
        # 320 inserts: 120 past min_size, more than the tolerance ahead of 0 updates.
        held = shard.insert.remote("explorer", vector_steps(64, 320), True)
        ready, _ = ray.wait([held], timeout=1.5)
        assert not ready, "a producer too far ahead must not be served"
        # The learner's own steps are never held back.
        ray.get(shard.insert.remote("target", vector_steps(64, 1_000), False), timeout=10)
        reply = ray.get(shard.sample.remote(8, 1.0), timeout=10)
        assert reply["n"] == 8 and reply["batch"]["obs"].shape == (8, 32, 3)
        taken = 8
        while not ray.wait([held], timeout=0.2)[0]:
            got = ray.get(shard.sample.remote(8, 0.0))["n"]
            assert got, "the gate let the learner stop while the producer still waited"
            taken += got
        ray.get(held)
        stats = ray.get(shard.stats.remote())
        assert stats["inserts"] == 448 and stats["updates"] == taken
        # The learner may take one update per insert past min_size, no more.
        while ray.get(shard.sample.remote(8, 0.0))["n"]:
            pass
        stats = ray.get(shard.stats.remote())
        assert stats["updates"] == 448 - 200 + 1
        assert len(own()) >= 10, "the shard's segments and semaphores live on this machine"
        ray.get(shard.close.remote(), timeout=10)
        assert not own(), "close() unlinks every segment and semaphore of the shard"
    finally:
        ray.kill(shard)


def test_shard_admission_counts_reach_the_producer_and_its_rnd_is_checkpointed(
    tmp_path: Path, cluster: Cluster
) -> None:
    """On Ray the shard's writer decides admission: the producer's figures still count its
    rows stored and refused. The shard samples, so its checkpointed state carries the RND of
    ``priority_novelty`` and a new shard takes it back."""
    from wheeler2.buffer.ray_shard import TERMS_KEY, RemoteWriter, ReplayShard
    from wheeler2.runtime.replays import replay_spec
    from wheeler2.runtime.team import prepare_team

    config = load(write_team(tmp_path, total=5_000))
    spec = replay_spec(config, prepare_team(config, {}).tables[0])
    cfg = dataclasses.replace(
        spec.cfg, keep=0.0, admit="transition", prioritized=True, priority_novelty=0.5,
        min_size=8, updates_per_insert=0.0,
    )  # fmt: skip
    spec = dataclasses.replace(spec, cfg=cfg, layout=dataclasses.replace(spec.layout, logp=False))
    shards = [ReplayShard.remote(spec, 0), ReplayShard.remote(spec, 0)]
    try:
        writer = RemoteWriter(shards[0], "explorer", 16, True, spec.layout)
        steps = vector_steps(40)
        worth = (np.arange(40) % 4 == 0)[:, None]  # 10 of 40 rows flagged: only they are kept
        for t in range(40):
            writer.add(**{k: v[t] for k, v in steps.items()}, worth=worth[t])
        writer.flush()
        assert writer.admission is not None
        assert writer.admission.figures() == {"replay_admitted": 10.0, "replay_refused": 30.0}
        assert ray.get(shards[0].stats.remote())["inserts"] == 10
        for _ in range(8):  # priorities written back: the RND scores and trains
            reply = ray.get(shards[0].sample.remote(1, 1.0), timeout=10)
            index = reply["batch"]["index"][0]
            ray.get(shards[0].update_priorities.remote([(index, np.zeros(len(index)))]))
        state = ray.get(shards[0].state_dict.remote())
        assert state[TERMS_KEY]["rnd"]["steps"] >= 2
        ray.get(shards[1].load_state_dict.remote(state))
        again = ray.get(shards[1].state_dict.remote())[TERMS_KEY]
        assert again["rnd"]["steps"] == state[TERMS_KEY]["rnd"]["steps"]
        assert again["calls"] == state[TERMS_KEY]["calls"]
    finally:
        for shard in shards:
            ray.get(shard.close.remote(), timeout=10)
            ray.kill(shard)


# The serial/local joint-play team of tests/test_agents_meet.py, on ray; chunk = 8: the prey's
# driven steps reach the predators' shard well before the budget is spent.
JOINT_TABLES = JOINT.format(backend="ray").replace(
    "batch_size = 16\n", "batch_size = 16\nchunk = 8\n", 1
)


# Slow: the default run has joint play on serial and local (tests/test_agents_meet.py: the
# same coordinator and member code) and the ray board's per-table weights, each member sent
# those it pulls (tests/test_ray_budget.py); this is the two together on a cluster.
@pytest.mark.slow
@pytest.mark.timeout(540)  # a ray team's start on a loaded two-core machine took minutes
def test_two_tables_with_joint_play_on_ray(tmp_path: Path, cluster: Cluster) -> None:
    """Issue 36 on ray (tests/test_agents_meet.py has it on serial and local): DDPG predators
    (table main, sharded replay) and PPO prey (table prey, no replay) each drive the other
    table's agents in their copies with that table's weights pulled from the board, and the
    prey's copies feed the predators' shard."""
    pytest.importorskip("pettingzoo", reason="needs pettingzoo")
    cfg = tmp_path / "joint.toml"
    cfg.write_text(JOINT_TABLES)
    config = load(cfg, overrides=[f"experiment.ray_address={cluster.address}"])
    assert config.tables == ("main", "prey")
    run = run_experiment(config, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    # Spent to within a vector step of the predators (3 agents in 2 copies): on ray a member
    # gives back a remainder too small for its own step, which the prey may have stopped asking
    # for by then (serial and local spend it exactly).
    spent = summary["env_steps"]
    assert 600 - 6 < spent <= 600
    tables = summary["tables"]
    assert tables["main"]["learner"] == "predators" and tables["prey"]["learner"] == "prey"
    for table in ("main", "prey"):  # each learner's closing eval, at the end of the budget
        assert 600 - 6 < tables[table]["eval"][-1]["env_steps"] <= 600, table
    members = summary["members"]
    # Each member drove the other table's agents with pulled weights (a version was taken):
    # the prey's 14-wide actor could not take the predators' 16-wide weights, nor the other way
    # round, so each table's weights reached the members of the other.
    assert members["prey"]["driven/main/steps"] > 0
    assert members["predators"]["driven/prey/steps"] > 0
    assert "driven/main/sync_version_lag" in members["prey"]
    # The budget counts each member's own agents only...
    own = members["predators"]["env_steps"]
    assert members["prey"]["env_steps"] + own == spent
    # ... but the predators' shard also took their steps from the prey's copies: at one update
    # per insert, the learner made more updates than its own rows could feed.
    assert members["predators"]["updates"] > own


ERL_TEAM = """
[experiment]
name = "erl-ray"
seed = 0
total_steps = 3_000
eval_every = 1_500
eval_episodes = 1
backend = "ray"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 5_000
batch_size = 16

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
hidden = [16]
learning_starts = 200

[[team]]
name = "pop"
algo = "cem"
role = "explorer"
sync = { every = 200 }
[team.params]
hidden = [16]
pop_size = 2
elites = 1
inject = true
grad_share = 0.5
grad_steps = 5
grad_starts = 200
"""


# Slow: the evolutionary member runs in the default run on serial and local
# (tests/test_cem.py), and the board's actor sync in this file's default tests; this checks
# that ERL's injection and CEM-RL's critic, pulled by name, reach a population through the ray
# board (issue 37).
@pytest.mark.slow
@pytest.mark.timeout(540)
def test_a_population_takes_the_learners_actor_and_critic_through_the_ray_board(
    tmp_path: Path, cluster: Cluster
) -> None:
    cfg = tmp_path / "erl.toml"
    cfg.write_text(ERL_TEAM)
    config = load(cfg, overrides=[f"experiment.ray_address={cluster.address}"])
    run = run_experiment(config, tmp_path / "run")
    pop = json.loads((run / "summary.json").read_text())["members"]["pop"]
    assert pop["sync_version"] >= 1 and pop["generation"] >= 2
    assert "injected_rank" in pop and pop["cemrl_q_gain"] > 0.0
