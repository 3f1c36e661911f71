"""The ray board's budget and start line, without a cluster: the board's own class behind a
handle whose ``.remote`` calls run at once, and ``ray.get`` / ``ray.wait`` as identities."""

from __future__ import annotations

from typing import Any

import pytest
from ray_fakes import Handle

ray_member = pytest.importorskip(
    "wheeler2.runtime.ray_member", reason="backend ray needs the optional extra"
)


@pytest.fixture
def board(monkeypatch: pytest.MonkeyPatch) -> Handle:
    monkeypatch.setattr(ray_member.ray, "get", lambda ref: ref)
    monkeypatch.setattr(ray_member.ray, "wait", lambda refs, timeout=None: (refs, []))
    monkeypatch.setattr(ray_member, "GATE_POLL_S", 0.0)  # every opened() asks the board
    return Handle(ray_member.Board.__ray_actor_class__(100, {"a": 0, "b": 0}))


def test_the_board_grants_nothing_before_the_start_line(board: Handle) -> None:
    assert board.claim.remote("a", 30, 0, 0, {})["granted"] == 0
    assert board.gate.remote() == (False, False)
    board.open.remote()
    assert board.claim.remote("a", 30, 0, 0, {})["granted"] == 30
    assert board.gate.remote() == (True, False)


def test_a_claim_answered_before_the_line_does_not_end_the_member(
    board: Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An explorer's first weight pull polls the board while the team is still starting: the
    # board answers that claim with nothing granted, and the answer is still unread (not ready
    # at the poll) when the line opens. Read at the first claim, it must not mean "spent".
    monkeypatch.setattr(ray_member.ray, "wait", lambda refs, timeout=None: ([], refs))
    a = ray_member.BoardBudget(board, "a", 16, 0)
    a.poll()
    assert a.in_flight is not None
    assert not a.opened()
    board.open.remote()
    assert a.opened()
    taken = 0
    while a.claim(4):
        a.settle(4, 4)
        taken += 4
    assert taken == 100  # the whole budget, exactly: nothing lost to the early claim
    assert not a.stopped()


def test_a_stop_reaches_a_member_waiting_at_the_line(board: Handle) -> None:
    b = ray_member.BoardBudget(board, "b", 16, 0)
    assert not b.opened() and not b.stopped()
    board.stop.remote()
    assert not b.opened()
    assert b.stopped()


def test_a_member_at_the_line_asks_the_board_at_most_every_gate_poll(
    board: Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_member, "GATE_POLL_S", 3600.0)
    asked = []
    gate = board.obj.gate
    monkeypatch.setattr(board.obj, "gate", lambda: asked.append(1) or gate())
    a = ray_member.BoardBudget(board, "a", 16, 0)
    assert not a.opened() and not a.opened()
    assert len(asked) == 1
    a.next_gate = 0.0  # the hour is up
    board.open.remote()
    assert a.opened() and a.opened()
    assert len(asked) == 2  # open for good: never asked again


def test_the_board_keeps_weights_per_table_and_sends_each_member_those_it_pulls(
    board: Handle,
) -> None:
    board.set_weights.remote("main", 1, ["main-1"])
    board.set_weights.remote("prey", 1, ["prey-1"])
    board.set_weights.remote("main", 3, ["main-3"])
    board.set_weights.remote("main", 2, ["main-2"])  # late and older: never replaces a newer one
    assert "weights" not in board.claim.remote("a", 0, 0, 0, {})  # a learner pulls nothing
    assert board.claim.remote("a", 0, 0, 0, {"main": 0})["weights"] == {"main": (3, ["main-3"])}
    assert board.claim.remote("a", 0, 0, 0, {"main": 3, "prey": 0})["weights"] == {
        "prey": (1, ["prey-1"])
    }
    # A member keeps each table's newest, and asks for the tables its sources want.
    a = ray_member.BoardBudget(board, "a", 16, 0)
    a.want("prey")
    a.poll()
    assert a.latest("prey") == (1, ["prey-1"]) and a.latest("main") is None


class Plan:
    """A sync plan that records what it was given."""

    names = ("w",)

    def __init__(self) -> None:
        self.applied: list[Any] = []

    def apply(self, weights: Any) -> None:
        self.applied.append(weights)


def test_an_explorers_first_pull_takes_the_learners_weights_at_once(
    board: Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the member is built its source pulls once; a local explorer reads the learner's first
    # weights then. The board's reply to the claim that pull sends is not back yet (never
    # ready at a poll here): the pull must wait for it rather than come back empty, which left
    # the explorer on its own weights for its first sync.every steps.
    monkeypatch.setattr(ray_member.ray, "wait", lambda refs, timeout=None: ([], refs))
    board.set_weights.remote("main", 1, [{"w": 1}])
    a = ray_member.BoardBudget(board, "a", 16, 0)
    plan = Plan()
    source = ray_member.BoardSource(a, plan, "main")
    assert source.pull() == 1
    assert plan.applied == [{"w": 1}]
    assert source.pull() is None  # nothing newer
    # A claim sent before the source asked for the table brings no weights: one more is sent.
    b = ray_member.BoardBudget(board, "b", 16, 0)
    b.poll()  # in flight, without "main"
    other = ray_member.BoardSource(b, Plan(), "main")
    assert other.pull() == 1
    assert not a.stopped() and not a.opened()
