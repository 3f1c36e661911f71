"""agents/parts/memory.py: the recurrent core the policy-state contract is built on (issue 15)."""

from __future__ import annotations

import pytest
import torch
from wheeler2.agents.parts import memory
from wheeler2.agents.parts.memory import RecurrentCore


def make(kind: str, in_dim: int = 3, size: int = 4, seed: int = 0) -> RecurrentCore:
    torch.manual_seed(seed)
    return RecurrentCore(kind, in_dim, size)


@pytest.mark.parametrize("kind,state_dim", [("gru", 4), ("lstm", 8)])
def test_shapes_and_initial_state(kind: str, state_dim: int) -> None:
    core = make(kind)
    assert core.state_dim == state_dim
    s0 = core.initial_state(5, "cpu")
    assert s0.shape == (5, state_dim) and s0.dtype == torch.float32
    assert torch.count_nonzero(s0) == 0
    y, s1 = core.step(torch.randn(5, 3), s0)
    assert y.shape == (5, 4) and s1.shape == (5, state_dim)
    ys, sT = core.sequence(torch.randn(7, 5, 3), s0, torch.zeros(7, 5, dtype=torch.bool))
    assert ys.shape == (7, 5, 4) and sT.shape == (5, state_dim)


def test_gru_step_matches_the_textbook_cell() -> None:
    # The flat state is h itself: one step must be torch's GRUCell with the same weights.
    core = make("gru")
    cell = torch.nn.GRUCell(3, 4)
    with torch.no_grad():
        cell.weight_ih.copy_(core.rnn.weight_ih_l0)
        cell.weight_hh.copy_(core.rnn.weight_hh_l0)
        cell.bias_ih.copy_(core.rnn.bias_ih_l0)
        cell.bias_hh.copy_(core.rnn.bias_hh_l0)
    x, h = torch.randn(2, 3), torch.randn(2, 4)
    y, s = core.step(x, h)
    torch.testing.assert_close(s, cell(x, h))
    torch.testing.assert_close(y, s)


def test_lstm_state_is_h_then_c() -> None:
    core = make("lstm")
    cell = torch.nn.LSTMCell(3, 4)
    with torch.no_grad():
        cell.weight_ih.copy_(core.rnn.weight_ih_l0)
        cell.weight_hh.copy_(core.rnn.weight_hh_l0)
        cell.bias_ih.copy_(core.rnn.bias_ih_l0)
        cell.bias_hh.copy_(core.rnn.bias_hh_l0)
    x, h, c = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    y, s = core.step(x, torch.cat([h, c], dim=1))
    h1, c1 = cell(x, (h, c))
    torch.testing.assert_close(s[:, :4], h1)
    torch.testing.assert_close(s[:, 4:], c1)
    torch.testing.assert_close(y, h1)


def loop_of_steps(
    core: RecurrentCore, x: torch.Tensor, s0: torch.Tensor, starts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    state, ys = s0, []
    for t in range(x.shape[0]):
        state = torch.where(starts[t].unsqueeze(1), torch.zeros_like(state), state)
        y, state = core.step(x[t], state)
        ys.append(y)
    return torch.stack(ys), state


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("stretches", [0, 100])  # the packed path, the stretch-by-stretch path
def test_sequence_equals_a_loop_of_steps(
    kind: str, stretches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "MAX_STRETCHES", stretches)
    core = make(kind)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(11, 4, 3, generator=gen)
    s0 = torch.randn(4, core.state_dim, generator=gen)
    starts = torch.rand(11, 4, generator=gen) < 0.2
    starts[0, 1] = True  # a reset at the very first step, which must discard s0's row
    starts[5, :] = False
    assert starts.any()
    ys, sT = core.sequence(x, s0, starts)
    ys_ref, sT_ref = loop_of_steps(core, x, s0, starts)
    torch.testing.assert_close(ys, ys_ref)
    torch.testing.assert_close(sT, sT_ref)
    # Without any start, the stored state0 is carried through the whole chunk.
    none = torch.zeros(11, 4, dtype=torch.bool)
    torch.testing.assert_close(core.sequence(x, s0, none)[0], loop_of_steps(core, x, s0, none)[0])


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("stretches", [0, 100])
def test_starts_reset_exactly_where_flagged(
    kind: str, stretches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "MAX_STRETCHES", stretches)
    # Row 0 starts an episode at t=4, row 1 at t=2 and t=6, row 2 never: each row must equal its
    # segments run separately, the first from s0 and every later one from zeros.
    core = make(kind)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(9, 3, 3, generator=gen)
    s0 = torch.randn(3, core.state_dim, generator=gen)
    starts = torch.zeros(9, 3, dtype=torch.bool)
    starts[4, 0] = True
    starts[2, 1] = starts[6, 1] = True
    ys, sT = core.sequence(x, s0, starts)
    none = torch.zeros(9, 1, dtype=torch.bool)
    segments = {0: [0, 4, 9], 1: [0, 2, 6, 9], 2: [0, 9]}
    for row, cuts in segments.items():
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            init = s0[row : row + 1] if i == 0 else core.initial_state(1)
            y_seg, s_seg = core.sequence(x[a:b, row : row + 1], init, none[: b - a])
            torch.testing.assert_close(ys[a:b, row], y_seg[:, 0])
        torch.testing.assert_close(sT[row], s_seg[0])
    # The reset really changed something: without it row 1's outputs after t=2 differ.
    ys_noreset, _ = core.sequence(x, s0, torch.zeros_like(starts))
    assert not torch.allclose(ys[2:, 1], ys_noreset[2:, 1])
    torch.testing.assert_close(ys[:, 2], ys_noreset[:, 2])


def test_sequence_backpropagates_to_the_weights_and_state0() -> None:
    core = make("lstm")
    s0 = torch.randn(2, core.state_dim, requires_grad=True)
    starts = torch.zeros(5, 2, dtype=torch.bool)
    starts[3, 0] = True
    ys, _ = core.sequence(torch.randn(5, 2, 3), s0, starts)
    ys.sum().backward()
    assert s0.grad is not None and torch.count_nonzero(s0.grad[1]) > 0
    assert core.rnn.weight_hh_l0.grad is not None


def test_bad_kind_and_starts_shape_are_refused() -> None:
    with pytest.raises(ValueError, match="gru"):
        RecurrentCore("rnn", 3, 4)
    core = make("gru")
    with pytest.raises(ValueError, match="starts"):
        bad = torch.zeros(4, 3, dtype=torch.bool)
        core.sequence(torch.randn(4, 2, 3), core.initial_state(2), bad)


@pytest.mark.parametrize(
    "hidden,trunk_reads,features_dim,reads",
    [
        ([5], "obs", 4, "obs"),  # trunk -> core (PPO's default)
        ([5], "core", 5, "core"),  # core -> trunk (sb3-contrib's order)
        ([5], "core+obs", 5, "core+obs"),  # core, obs beside it, -> trunk
        ([], "core+obs", 4 + 3, "core+obs"),  # core, obs beside it (the off-policy layout)
        ([], "core", 4, "core"),
        ([], "obs", 4, "core"),  # no trunk: the core reads the observation, and after it, the core
    ],
)
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_memory_layouts_step_like_their_sequence(
    kind: str, hidden: list[int], trunk_reads: str, features_dim: int, reads: str
) -> None:
    torch.manual_seed(0)
    mem = memory.RecurrentMemory(3, kind, 4, hidden, "tanh", True, trunk_reads)
    assert mem.features_dim == features_dim and mem.trunk_reads == reads
    assert mem.state_dim == (4 if kind == "gru" else 8)
    # The parts keep their names: trunk.* and core.rnn.* (old checkpoints' keys).
    parts = {k.split(".")[0] for k in mem.state_dict()}
    assert parts == ({"trunk", "core"} if hidden else {"core"})
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 2, 3, generator=gen)
    s0 = torch.randn(2, mem.state_dim, generator=gen)
    starts = torch.zeros(6, 2, dtype=torch.bool)
    starts[3, 1] = True
    ys, sT = mem.sequence(x, s0, starts)
    assert ys.shape == (6, 2, features_dim)
    state, outs = s0, []
    for t in range(6):
        state = torch.where(starts[t].unsqueeze(1), torch.zeros_like(state), state)
        y, state = mem.step(x[t], state)
        outs.append(y)
    torch.testing.assert_close(ys, torch.stack(outs))
    torch.testing.assert_close(sT, state)
    if reads == "core+obs" and not hidden:  # the observation itself beside the core's output
        torch.testing.assert_close(ys[..., 4:], x)


def test_memory_refuses_an_unknown_layout() -> None:
    with pytest.raises(ValueError, match="trunk_reads must be one of"):
        memory.RecurrentMemory(3, "gru", 4, [5], trunk_reads="obs+core")
