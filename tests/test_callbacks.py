"""Callbacks from the Python API (issue 38, item 3): hooks on evals, reports and checkpoints in
the coordinator's process on serial and local; early stop by a return value through the normal
stop path (final checkpoint, summary saying why); a raising callback named, nothing left over."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import wheeler2
from wheeler2 import checkpoint as ckpt
from wheeler2.callbacks import Callbacks, Eval, active

CONFIG = """
[experiment]
name = "cb"
total_steps = {total}
eval_every = 400
eval_episodes = 1
backend = "{backend}"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 5000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
hidden = [16, 16]
learning_starts = 100
"""


def config(tmp_path: Path, total: int, backend: str = "serial") -> dict[str, Any]:
    import tomllib

    raw = tomllib.loads(CONFIG.format(total=total, backend=backend))
    raw["experiment"]["out"] = str(tmp_path / "runs")
    return raw


class Recording(wheeler2.Callback):
    """Keeps what each hook got, and the process it ran in."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.run_dir: Path | None = None
        self.evals: list[Eval] = []
        self.reports: list[wheeler2.Report] = []
        self.checkpoints: list[wheeler2.Checkpoint] = []
        self.summary: dict[str, Any] | None = None

    def on_start(self, run_dir: Path) -> None:
        self.pids.add(os.getpid())
        self.run_dir = run_dir

    def on_eval(self, ev: Eval) -> None:
        self.pids.add(os.getpid())
        self.evals.append(ev)

    def on_report(self, rep: wheeler2.Report) -> None:
        self.reports.append(rep)

    def on_checkpoint(self, ck: wheeler2.Checkpoint) -> None:
        assert ck.path.exists()  # called once the file is written
        self.checkpoints.append(ck)

    def on_end(self, summary: dict[str, Any]) -> None:
        self.summary = summary


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_serial_run_hands_each_eval_report_and_checkpoint_to_the_callbacks(tmp_path):
    seen = Recording()
    run_dir = wheeler2.run(config(tmp_path, 800), callbacks=[seen])
    summary = summary_of(run_dir)
    assert seen.pids == {os.getpid()} and seen.run_dir == run_dir
    assert [e.env_steps for e in seen.evals] == [e["env_steps"] for e in summary["eval"]]
    assert [e.env_steps for e in seen.evals] == [400, 800]
    for ev, entry in zip(seen.evals, summary["eval"]):
        assert ev.mean_return == entry["return"] and ev.success is None
        assert ev.member == "target" and ev.table == "main" and ev.lead
        assert len(ev.returns) == 1 and ev.returns[0] == pytest.approx(ev.mean_return)
        assert set(ev.heads or {}) == {"env"}  # per head: q, its discounted return, the error
        assert set(ev.heads["env"]) == {"q", "return", "error"}  # type: ignore[index]
    assert seen.evals[0].best and seen.evals[0].best_return == seen.evals[0].mean_return
    assert seen.evals[1].best_return == summary["best_eval_return"]
    # Reports: the member's figures as the live table and metrics.csv name them.
    mine = [r for r in seen.reports if r.member == "target"]
    last = mine[-1]
    assert last.figures["env_steps"] == 800
    assert {"replay_fill", "updates"} <= set(last.figures)
    # Losses come in the reports of an interval with updates; the closing report can follow
    # the last one with none between (seen under pytest-xdist's load).
    assert any({"critic_loss", "actor_loss"} <= set(r.figures) for r in mine)
    assert 0 < last.figures["replay_fill"] <= 1
    # Checkpoints: latest.pt at each eval, best.pt where it improved, and the final one.
    kinds = {(c.path.name, c.best) for c in seen.checkpoints}
    assert kinds == {("latest.pt", False), ("best.pt", True)}
    assert seen.checkpoints[-1].path == run_dir / "checkpoints" / "latest.pt"
    assert seen.summary is not None and seen.summary["stop"]["by"] == "total_steps"
    assert summary["stop"] == seen.summary["stop"] and not summary["interrupted"]


def test_a_local_run_calls_the_callbacks_in_the_coordinators_process(tmp_path):
    seen = Recording()
    raw = config(tmp_path, 400, backend="local")
    raw["experiment"]["eval_every"] = 200  # two evals, as the serial test's, on half the steps
    run_dir = wheeler2.run(raw, callbacks=[seen])
    members = json.loads((run_dir / "members.json").read_text())
    assert members["target"] != os.getpid()  # the learner ran in a process of its own
    assert seen.pids == {os.getpid()}
    assert [e.env_steps for e in seen.evals] == [200, 400]
    assert [e.mean_return for e in seen.evals] == [e["return"] for e in summary_of(run_dir)["eval"]]
    assert any("critic_loss" in r.figures for r in seen.reports)


class StopAtFirstEval(wheeler2.Callback):
    def on_eval(self, ev: Eval) -> Any:
        return wheeler2.STOP


def stop_at_800(ev: Eval) -> bool:
    return ev.env_steps >= 800


def test_a_stop_asked_for_once_the_budget_is_spent_ends_nothing_early(tmp_path):
    """The closing eval at 800 of 800 asks to stop: the run spent its budget, and its summary
    says so rather than that a callback ended it."""
    run_dir = wheeler2.run(config(tmp_path, 800), callbacks=[stop_at_800])
    summary = summary_of(run_dir)
    assert summary["env_steps"] >= 800 and summary["stop"]["by"] == "total_steps"


@pytest.mark.parametrize(
    ("callback", "name", "steps"),
    [(StopAtFirstEval(), "StopAtFirstEval", 400), (stop_at_800, "stop_at_800", 800)],
)
def test_returning_stop_or_true_ends_the_run_early_with_a_checkpoint(
    tmp_path, callback, name, steps
):
    total = 40_000
    run_dir = wheeler2.run(config(tmp_path, total), callbacks=[callback])
    summary = summary_of(run_dir)
    assert summary["stop"] == {"by": "callback", "reason": name}
    assert not summary["interrupted"]
    # Stopped at the member's next step after the eval, far before the budget.
    assert steps <= summary["env_steps"] < steps + 50 < total
    assert summary["eval"][-1]["env_steps"] == steps
    latest = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    assert latest["run"]["env_steps"] == summary["env_steps"]
    assert (run_dir / "checkpoints" / "best.pt").exists() and (run_dir / "curve.png").exists()


def test_stop_at_threshold_takes_the_same_path_and_says_so(tmp_path):
    raw = config(tmp_path, 40_000)
    raw["experiment"].update(eval_threshold=-1e9, stop_at_threshold=True)
    summary = summary_of(wheeler2.run(raw))
    assert summary["stop"]["by"] == "threshold" and summary["env_steps"] < 450
    assert "passed eval_threshold -1e+09 at 400 env steps" in summary["stop"]["reason"]


class Boom(wheeler2.Callback):
    def on_eval(self, ev: Eval) -> None:
        raise ValueError("boom")


def test_a_raising_callback_is_named_and_the_run_stops_on_the_normal_path(tmp_path):
    def shared_memory() -> set[str]:
        return {p for p in os.listdir("/dev/shm") if p.startswith(f"w2r_{os.getpid()}_")}

    before = shared_memory()
    with pytest.raises(wheeler2.CallbackError, match=r"Boom\.on_eval raised ValueError: boom"):
        wheeler2.run(config(tmp_path, 40_000), callbacks=[Boom()])
    [run_dir] = (tmp_path / "runs").iterdir()
    summary = summary_of(run_dir)
    assert summary["stop"]["by"] == "callback_error" and "Boom.on_eval" in summary["stop"]["reason"]
    assert summary["interrupted"] and summary["env_steps"] < 500
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    assert shared_memory() == before  # the replay's segments are gone with the run


# -- the ready-made callbacks and the dispatch, without a run ----------------------------------


def ev(steps: int, ret: float, lead: bool = True) -> Eval:
    return Eval(steps, 0.0, ret, 0.0, None, (ret,), None, None, "t", "main", lead, False, ret)


def test_stop_at_return_watches_the_lead_learner() -> None:
    stop = wheeler2.StopAtReturn(-200)
    assert stop.on_eval(ev(100, -250.0)) is None
    assert stop.on_eval(ev(200, -150.0, lead=False)) is None  # another table's learner
    answer = stop.on_eval(ev(300, -200.0))
    assert isinstance(answer, wheeler2.Stop) and "reached -200 at 300 env steps" in answer.reason


def test_stop_on_no_improvement_counts_evals_without_a_better_return() -> None:
    stop = wheeler2.StopOnNoImprovement(patience_evals=2, min_delta=1.0)
    answers = [stop.on_eval(ev(s, r)) for s, r in [(1, -10.0), (2, -5.0), (3, -4.5), (3, -4.5)]]
    assert answers == [None, None, None, None]  # -4.5 is within min_delta; step 3 again: no try
    answer = stop.on_eval(ev(4, -9.0))
    assert isinstance(answer, wheeler2.Stop) and "on -5 by more than 1 in 2 evals" in answer.reason
    with pytest.raises(ValueError, match="patience_evals"):
        wheeler2.StopOnNoImprovement(0)


def test_the_dispatch_takes_the_first_stop_and_names_a_bad_answer() -> None:
    calls: list[str] = []

    def first(e: Eval) -> None:
        calls.append("first")

    class Second:
        def on_eval(self, e: Eval) -> Any:
            calls.append("second")
            return wheeler2.Stop("enough")

    callbacks = Callbacks([first, Second(), lambda e: True])
    callbacks.call("on_eval", ev(1, 0.0))
    assert calls == ["first", "second"]
    assert callbacks.stop == {"by": "callback", "reason": "Second: enough"}
    assert callbacks.error is None

    leaving = Callbacks([lambda e: sys.exit(3)])  # the run still ends with its summary
    leaving.call("on_eval", ev(1, 0.0))
    assert leaving.error is not None and "SystemExit" in str(leaving.error)

    odd = Callbacks([lambda e: 1])
    odd.call("on_eval", ev(1, 0.0))
    assert odd.error is not None and "returned 1; expected None or False" in str(odd.error)
    assert odd.stop is not None and odd.stop["by"] == "callback_error"
    with pytest.raises(TypeError, match="has none of on_start"), active([object()]):
        pass


def test_a_best_eval_writes_best_pt_with_the_learners_own_steps_and_leaves_latest_alone(
    tmp_path,
):
    """latest.pt is what a resume goes on from: every member's state with its own steps, from
    one request. A best eval wrote it too, with the learner's state at the eval and the steps of
    the last request (none before the first): a run killed then resumed went back in steps."""

    class Look(wheeler2.Callback):
        def __init__(self) -> None:
            self.seen: list[tuple[str, int, dict]] = []

        def on_checkpoint(self, ck: wheeler2.Checkpoint) -> None:
            saved = ckpt.load(ck.path)
            self.seen.append((ck.path.name, saved["run"]["env_steps"], saved["member_steps"]))

    raw = config(tmp_path, 1200)
    raw["experiment"]["checkpoint_every"] = 100_000  # no scheduled save before the end
    look = Look()
    wheeler2.run(raw, callbacks=[look])
    names = [name for name, _, _ in look.seen]
    assert names[-1] == "latest.pt" and names.count("latest.pt") == 1, names
    bests = [(steps, members) for name, steps, members in look.seen if name == "best.pt"]
    assert bests, look.seen
    for steps, members in bests:  # one learner of one env copy: its steps are the run's
        assert members == {"target": steps}, (steps, members)


class PrintEvals(wheeler2.Callback):
    def on_eval(self, ev: wheeler2.Eval) -> None:
        print(ev.env_steps)


def test_a_callback_class_instead_of_an_instance_is_refused_before_the_run_starts(tmp_path):
    """`callbacks=[PrintEvals]` (no parentheses) called the hooks with the run dir or the eval
    as `self`: the team started, stopped at once on a TypeError about a missing argument, and
    left a run directory and a checkpoint behind."""
    with pytest.raises(TypeError, match=r"PrintEvals is a class; pass an instance of it"):
        with active([PrintEvals]):
            pass
    with pytest.raises(TypeError, match=r"PrintEvals is a class"):
        wheeler2.run(config(tmp_path, 400), callbacks=[PrintEvals])
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written
