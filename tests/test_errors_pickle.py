"""wheeler2's exceptions cross process boundaries whole: a run that fails inside a process pool
(an experiment script's ``--jobs``, a user's ``ProcessPoolExecutor`` or Ray task around
``wheeler2.api.run``) must reach the caller as the same exception, with its fields.

Before, ``MemberFailed``, ``CallbackError`` and ``ParamError`` were rebuilt by calling their
``__init__`` with their message alone: a TypeError on the receiving side, which a process pool
turns into BrokenProcessPool, ending every other run of the pool with it. Seen in
experiments/swimmer_population.py when one seed's learner was reported hung.
"""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from wheeler2.agent import ParamError
from wheeler2.callbacks import CallbackError
from wheeler2.checkpoint import CheckpointError
from wheeler2.config import ConfigError
from wheeler2.errors import UsageError
from wheeler2.registry import CodeError, RegistryError
from wheeler2.runtime.experiment import MemberFailed
from wheeler2.runtime.trainer import NonFiniteError

DETAIL = "Traceback (most recent call last):\n  ...\nRuntimeError: injected fault\n"


def _non_finite() -> NonFiniteError:
    exc = NonFiniteError("critic loss is nan")
    exc.member, exc.env_steps = "target", 1_234
    return exc


ERRORS = [
    MemberFailed("target", DETAIL),
    CallbackError("Stopper", "on_eval", ValueError("bad")),
    ParamError("hidden", "hidden must be a list of positive ints"),
    ConfigError("cfg/x.toml", "[buffer]", "capacity", "expected an integer > 0", 3, 1),
    CodeError("/tmp/mytask.py", 3, "SyntaxError: invalid syntax"),
    RegistryError("unknown algorithm 'dpg'"),
    CheckpointError("latest.pt is not a wheeler2 checkpoint"),
    UsageError("--episodes must be > 0"),
    _non_finite(),
]


@pytest.mark.parametrize("exc", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickles_with_its_message_and_fields(exc: BaseException) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert vars(back) == vars(exc)


def _fail() -> None:
    raise MemberFailed("target", DETAIL)


def test_a_member_failure_in_a_process_pool_reaches_the_caller() -> None:
    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_fail)
        with pytest.raises(MemberFailed) as info:
            future.result(timeout=60)
        assert info.value.member == "target" and info.value.detail == DETAIL
        assert pool.submit(int, "7").result(timeout=60) == 7  # the pool still works
