"""``wheeler2 run FILE --seeds``: one sweep directory, one run per seed, a sweep.json that says
how each seed ended; a failed seed is recorded and the sweep goes on; Ctrl-C stops it cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from wheeler2 import cli, sweep
from wheeler2.errors import UsageError
from wheeler2.report import find_runs

REPO = Path(__file__).resolve().parent.parent

TINY = """
[experiment]
name = "tiny"
total_steps = {steps}
eval_every = 100
eval_episodes = 2
eval_threshold = 30.0
backend = "serial"
progress = false

[env]
id = "CartPole-v1"

[[team]]
name = "ppo"
algo = "{algo}"
role = "learner"
[team.params]
n_steps = 64
batch_size = 64
n_epochs = 2
"""

# PPO that fails as it is built in the run of experiment seed 1 (an agent's seed is
# AGENT_SEED_BASE plus its member's, the experiment's times MEMBER_SEED_STRIDE plus its index:
# wheeler2/runtime/seeds.py).
FLAKY = """
from wheeler2.agents.ppo import PPO
from wheeler2.runtime.seeds import AGENT_SEED_BASE, MEMBER_SEED_STRIDE


class SeedOneFails(PPO):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if (self.seed - AGENT_SEED_BASE) // MEMBER_SEED_STRIDE == 1:
            raise RuntimeError("seed 1 fails on purpose")
"""


def tiny(tmp_path: Path, steps: int = 300, algo: str = "ppo") -> Path:
    (tmp_path / "flaky.py").write_text(FLAKY)
    path = tmp_path / "tiny.toml"
    path.write_text(textwrap.dedent(TINY.format(steps=steps, algo=algo)))
    return path


def the_sweep(out: Path) -> tuple[Path, dict]:
    (found,) = out.glob("tiny-sweep-*")
    return found, json.loads((found / "sweep.json").read_text())


def statuses(meta: dict) -> dict[int, str]:
    return {e["seed"]: e["status"] for e in meta["seeds"]}


def wheeler2_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "wheeler2", *args]


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


# -- units ---------------------------------------------------------------------------------------


def test_seed_lists() -> None:
    assert sweep.parse_seeds("0-3") == [0, 1, 2, 3]
    assert sweep.parse_seeds("0,3,7") == [0, 3, 7]
    assert sweep.parse_seeds("5, 0-1") == [5, 0, 1]
    for bad in ("a", "3-1", "1,1", "-2", "0-", "1_000", "+3", "\u0663", "0-3,2"):
        with pytest.raises(UsageError, match=re.escape(f"--seeds {bad}")):
            sweep.parse_seeds(bad)
    assert len(sweep.parse_seeds("0-99999")) == 100_000  # no quadratic duplicate check


def test_a_killed_seed_names_its_signal(tmp_path: Path) -> None:
    (tmp_path / sweep.OUTPUT_FILE).write_text("[00:03] steps 1/20,000 | ppo: 1\n")
    line = sweep._error_line(tmp_path, -signal.SIGKILL)
    assert line.startswith("killed by SIGKILL (out of memory?); last output: [00:03]"), line


def test_config_hash_ignores_the_seed_and_where_results_go() -> None:
    base = {"experiment": {"name": "a", "seed": 0, "out": "runs"}, "buffer": {"n_step": 1}}
    other_seed = {
        "experiment": {"name": "a", "seed": 7, "out": "elsewhere"},
        "buffer": {"n_step": 1},
    }
    assert sweep.config_hash(base) == sweep.config_hash(other_seed)
    assert sweep.config_hash(base) != sweep.config_hash({**base, "buffer": {"n_step": 3}})


def test_parallel_as_cores_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "available_cores", lambda: 8)
    member = SimpleNamespace(count=1)
    local = SimpleNamespace(
        experiment=SimpleNamespace(backend="local"),
        team=[member, SimpleNamespace(count=2)],
    )
    serial = SimpleNamespace(experiment=SimpleNamespace(backend="serial"), team=[member])
    assert sweep.parallel_runs(None, local, 10) == 1  # serially by default
    assert sweep.parallel_runs("auto", local, 10) == 2  # 8 cores // 3 members
    assert sweep.parallel_runs("auto", serial, 10) == 8
    assert sweep.parallel_runs("auto", serial, 3) == 3  # never more than the seeds
    assert sweep.parallel_runs("4", serial, 10) == 4
    with pytest.raises(UsageError, match="--parallel 0"):
        sweep.parallel_runs("0", serial, 10)


def test_seed_with_seeds_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tiny(tmp_path)
    assert cli.main(["run", str(path), "--seed", "1", "--seeds", "0-2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --seed and --seeds")
    assert cli.main(["run", str(path), "--parallel", "2"]) == 2
    assert "add --seeds" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# -- sweeps --------------------------------------------------------------------------------------


def test_three_seeds_give_three_runs_and_a_sweep_json(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "runs"
    assert cli.main(["run", str(tiny(tmp_path)), "--seeds", "0-2", "--out", str(out)]) == 0
    found, meta = the_sweep(out)
    assert statuses(meta) == {0: "finished", 1: "finished", 2: "finished"}
    assert meta["status"] == "finished" and meta["eval_threshold"] == 30.0
    for entry in meta["seeds"]:
        run_dir = found / entry["run_dir"]
        assert run_dir.name == f"seed-{entry['seed']}"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert [e["env_steps"] for e in summary["eval"]] == [100, 200, 300]
        assert f"seed = {entry['seed']}" in (run_dir / "config.toml").read_text()
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("sweep: seed ") and " started " in line for line in lines) == 3
    assert sum(line.startswith("sweep: seed ") and " finished in " in line for line in lines) == 3


def test_a_failing_seed_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "runs"
    path = tiny(tmp_path, algo="./flaky.py:SeedOneFails")
    assert cli.main(["run", str(path), "--seeds", "0-2", "--out", str(out)]) == 1
    found, meta = the_sweep(out)
    assert statuses(meta) == {0: "finished", 1: "failed", 2: "finished"}  # seed 2 still ran
    (failed,) = [e for e in meta["seeds"] if e["status"] == "failed"]
    assert "seed 1 fails on purpose" in failed["error"] and "\n" not in failed["error"]
    assert "seed 1 fails on purpose" in (found / "seed-1" / "error.txt").read_text()
    assert (found / "seed-2" / "summary.json").is_file()
    printed = capsys.readouterr().out
    assert "sweep: seed 1 failed in " in printed and "1 failed (seed 1)" in printed


def test_parallel_seeds_run_as_children_and_a_failure_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    path = tiny(tmp_path, algo="./flaky.py:SeedOneFails")
    cmd = wheeler2_command("run", str(path), "--seeds", "0,1", "--parallel", "2", "--out", str(out))
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    found, meta = the_sweep(out)
    assert meta["parallel"] == 2
    assert statuses(meta) == {0: "finished", 1: "failed"}
    assert "seed 1 fails on purpose" in meta["seeds"][1]["error"]
    assert (found / "seed-0" / "summary.json").is_file()
    assert "run directory" in (found / "seed-0" / "output.log").read_text()  # the run's output


def test_parallel_seeds_run_the_config_the_sweep_read_not_the_file_edited_since(
    tmp_path: Path,
) -> None:
    """The file is edited once the sweep has read it (the loader does it, after the last
    seed): every seed still runs what sweep.json records."""
    path = tiny(tmp_path)
    seeds = [0, 1]

    def load_then_edit(file: Path, overrides, **kwargs):  # noqa: ANN001, ANN202
        config = cli._load(file, overrides, **kwargs)
        if kwargs["seed"] == seeds[-1]:
            file.write_text(file.read_text().replace("n_epochs = 2", "n_epochs = 7"))
        return config

    out = tmp_path / "runs"
    assert sweep.run_sweep(path, seeds, [], load_then_edit, str(out), "2") == 0
    found, meta = the_sweep(out)
    assert meta["config"]["team"][0]["params"]["n_epochs"] == 2
    for seed in seeds:
        ran = tomllib.loads((found / f"seed-{seed}" / "config.toml").read_text())
        assert ran["team"][0]["params"]["n_epochs"] == 2
        assert ran["experiment"]["seed"] == seed


# parallel with SIGINT: slow; the default run has the parallel sweep stopped by SIGTERM (the
# same handler and forwarding to each running seed) and the serial sweep stopped by SIGINT.
@pytest.mark.parametrize(
    "parallel, sig",
    [
        ([], signal.SIGINT),
        pytest.param(["--parallel", "2"], signal.SIGINT, marks=pytest.mark.slow),
        (["--parallel", "2"], signal.SIGTERM),
    ],
    ids=["serial", "parallel", "parallel-sigterm"],
)
def test_ctrl_c_stops_the_sweep_cleanly(tmp_path: Path, parallel: list[str], sig: int) -> None:
    """Ctrl-C, or SIGTERM as `timeout` and batch schedulers send it."""
    out = tmp_path / "runs"
    path = tiny(tmp_path, steps=10_000_000)  # runs until interrupted
    cmd = wheeler2_command("run", str(path), "--seeds", "0-2", "--out", str(out), *parallel)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=child_env(),
        # Ctrl-C as a terminal delivers it: to a process that has not inherited it ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    running = 2 if parallel else 1
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:  # until each running seed has logged an eval
            logged = list(out.glob("tiny-sweep-*/seed-*/metrics.csv"))
            if len(logged) == running and all("eval" in p.read_text() for p in logged):
                break
            time.sleep(0.2)
        proc.send_signal(sig)  # to the sweep alone: it stops its children itself
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    found, meta = the_sweep(out)
    assert meta["status"] == "interrupted"
    begun = [e for e in meta["seeds"] if e["started"]]
    assert len(begun) == running and all(e["status"] == "interrupted" for e in begun)
    assert [e["seed"] for e in meta["seeds"] if not e["started"]] == list(range(running, 3))
    for entry in begun:  # each interrupted run wrote its summary as it stopped
        summary = json.loads((found / entry["run_dir"] / "summary.json").read_text())
        assert summary["interrupted"] is True


def seed_processes(sweep_dir: Path) -> list[int]:
    """The pids of ``python -m wheeler2.sweep`` children running seeds into ``sweep_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended while we looked
            continue
        if b"wheeler2.sweep" in argv and any(str(sweep_dir).encode() in a for a in argv):
            found.append(int(proc.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the seed processes in /proc")
def test_seeds_stop_when_the_sweep_process_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    path = tiny(tmp_path, steps=10_000_000)  # runs until stopped
    cmd = wheeler2_command("run", str(path), "--seeds", "0-1", "--parallel", "2", "--out", str(out))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=child_env()
    )
    children: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until both seeds have logged an eval
            logged = list(out.glob("tiny-sweep-*/seed-*/metrics.csv"))
            if len(logged) == 2 and all("eval" in p.read_text() for p in logged):
                break
            time.sleep(0.2)
        found, _ = the_sweep(out)
        children = seed_processes(found)
        assert len(children) == 2
        proc.kill()  # SIGKILL: the sweep can forward nothing
        proc.wait()
        deadline = time.monotonic() + 90
        while seed_processes(found) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert seed_processes(found) == [], "a seed outlived its sweep"
    finally:
        proc.kill()
        for pid in children:  # without the lifeline they would run 10M steps
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for seed in (0, 1):  # each stopped as on Ctrl-C: its summary written
        summary = json.loads((found / f"seed-{seed}" / "summary.json").read_text())
        assert summary["interrupted"] is True
    assert "is gone; stopping" in (found / "seed-0" / sweep.OUTPUT_FILE).read_text()


# -- resuming a sweep ----------------------------------------------------------------------------

# PPO that is stopped as by Ctrl-C at its third update (192 env steps) in the run of experiment
# seed 1, the first time only (W2_STOP_MARK records that it happened).
STOPS_ONCE = """
import os
from pathlib import Path

from wheeler2.agents.ppo import PPO
from wheeler2.runtime.seeds import AGENT_SEED_BASE, MEMBER_SEED_STRIDE


class SeedOneStopsOnce(PPO):
    updates = 0

    def update(self):
        self.updates += 1
        mark = Path(os.environ["W2_STOP_MARK"])
        seed = (self.seed - AGENT_SEED_BASE) // MEMBER_SEED_STRIDE
        if seed == 1 and self.updates == 3 and not mark.exists():
            mark.touch()
            raise KeyboardInterrupt
        return super().update()
"""


def stopped_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A serial sweep of seeds 0-2 stopped in seed 1 (checkpoint at 192 env steps): seed 0
    finished, seed 1 interrupted, seed 2 never begun. Returns its file and directory."""
    (tmp_path / "stops.py").write_text(STOPS_ONCE)
    monkeypatch.setenv("W2_STOP_MARK", str(tmp_path / "stopped"))
    path = tiny(tmp_path, algo="./stops.py:SeedOneStopsOnce")
    out = tmp_path / "runs"
    assert cli.main(["run", str(path), "--seeds", "0-2", "--out", str(out)]) == 130
    found, meta = the_sweep(out)
    assert statuses(meta) == {0: "finished", 1: "interrupted", 2: "interrupted"}
    assert (found / "seed-1" / "checkpoints" / "latest.pt").is_file()
    return path, found


@pytest.mark.parametrize("parallel", [[], ["--parallel", "2"]], ids=["serial", "parallel"])
def test_a_stopped_sweep_resumes_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, parallel
) -> None:
    """Its finished seed is left as it was, its interrupted seed goes on from its checkpoint
    and the seed that never began starts; the sweep then reads as if it had never stopped."""
    _, found = stopped_sweep(tmp_path, monkeypatch)
    before = json.loads((found / "sweep.json").read_text())
    # What a start of seed 2 killed before its first checkpoint would have left: set aside.
    (found / "seed-2").mkdir()
    (found / "seed-2" / "metrics.csv").write_text("an earlier start's row\n")
    seed0 = (found / "seed-0" / "summary.json").read_text()
    capsys.readouterr()
    if parallel:  # the seeds are children: python -m wheeler2.sweep ... --resume
        (found / "seed-1" / sweep.OUTPUT_FILE).write_text("its first session\n")
        cmd = wheeler2_command("resume", str(found), *parallel)
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        printed = done.stdout
        log = (found / "seed-1" / sweep.OUTPUT_FILE).read_text()
        assert log.startswith("its first session\n") and "run directory" in log  # appended
    else:
        assert cli.main(["resume", str(found)]) == 0
        printed = capsys.readouterr().out
    meta = json.loads((found / "sweep.json").read_text())
    assert meta["status"] == "finished"
    assert statuses(meta) == {0: "finished", 1: "finished", 2: "finished"}
    assert (found / "seed-0" / "summary.json").read_text() == seed0  # not run again
    assert "resuming 2 of 3 seeds of tiny (1 from a checkpoint, 1 afresh)" in printed, printed
    assert "sweep: seed 1 resumed from its latest checkpoint" in printed, printed
    assert "sweep: seed 2 started" in printed, printed
    resumed = json.loads((found / "seed-1" / "summary.json").read_text())
    assert resumed["env_steps"] == 300 and not resumed["interrupted"]
    assert [e["env_steps"] for e in resumed["eval"]] == [100, 200, 300]  # its 100 kept
    earlier = {e["seed"]: e["wall_s"] for e in before["seeds"]}
    now = {e["seed"]: e["wall_s"] for e in meta["seeds"]}
    assert now[0] == earlier[0] and now[1] > earlier[1] > 0  # both sessions of seed 1
    fresh = json.loads((found / "seed-2" / "summary.json").read_text())
    assert [e["env_steps"] for e in fresh["eval"]] == [100, 200, 300]
    assert "earlier" not in (found / "seed-2" / "metrics.csv").read_text()
    assert (found / "seed-2.stopped-1" / "metrics.csv").read_text() == "an earlier start's row\n"
    # A start stopped that early has a config.toml and checkpoints/ (empty): it looks like a run.
    (found / "seed-2.stopped-1" / "config.toml").write_text(
        (found / "seed-1/config.toml").read_text()
    )
    (found / "seed-2.stopped-1" / "checkpoints").mkdir()
    assert sorted(r.seed for r in find_runs([tmp_path])) == [0, 1, 2]  # the report's seeds
    # Nothing left to do: said so, and the sweep's exit code stands.
    assert cli.main(["resume", str(found)]) == 0
    assert "nothing to resume" in capsys.readouterr().out


def test_a_sweep_is_not_resumed_into_another_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path, found = stopped_sweep(tmp_path, monkeypatch)
    before = (found / "sweep.json").read_text()
    original = path.read_text()
    capsys.readouterr()
    # The file changed: the seed that never began would run another experiment.
    path.write_text(original.replace("n_epochs = 2", "n_epochs = 7"))
    assert cli.main(["resume", str(found)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: changed since the sweep began"), err
    assert "seed 2 would run another experiment" in err, err
    # --set extends one run, not a sweep; a sweep whose process still runs is not taken over.
    assert cli.main(["resume", str(found), "--set", "experiment.total_steps=600"]) == 2
    assert "a sweep goes on as it began" in capsys.readouterr().err
    meta = json.loads(before)
    (found / "sweep.json").write_text(
        json.dumps({**meta, "status": "running", "pid": os.getppid()})
    )
    assert cli.main(["resume", str(found)]) == 2
    assert f"its sweep is still running (pid {os.getppid()})" in capsys.readouterr().err
    (found / "sweep.json").write_text(before)
    assert cli.main(["resume", str(tmp_path), "--parallel", "2"]) == 2  # not a sweep
    assert "has no sweep.json" in capsys.readouterr().err
    assert (found / "sweep.json").read_text() == before  # refused before anything was written
    path.write_text(original)
    assert cli.main(["resume", str(found)]) == 0
