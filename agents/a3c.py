"""Asynchronous advantage actor-critic, A3C (Mnih et al., ICML 2016), over A2C's loss.

Each worker is a member of the team (the table's learner and its ``a3c`` explorers) with its
own env copies; every ``n_steps`` vector steps it computes A2C's loss on its own rollout
(``agents/a2c.py``, unchanged: n-step returns, value loss, entropy) and sends the gradient not
to its own parameters but to the one set theta every worker of the table shares, as in the
paper's Algorithm S3::

    theta' <- theta                                  synchronize thread-specific parameters
    play n_steps with theta'; d = grad_theta' L(theta')
    g      <- alpha g + (1 - alpha) d^2              RMSProp's statistics, shared too
    theta  <- theta - lr d / (sqrt(g) + eps)         ("shared RMSProp", the paper's best)

theta and g live in a shared-memory block the engine makes per table (``wheeler2/shared.py``:
``shared_tensors`` says what goes in, ``use_shared`` takes the views); one update holds the
block's lock from the first read of theta to the copy back into theta', so updates interleave
whole rather than Hogwild's element by element: with a few workers the lock is rarely
contended, and every gradient lands on the theta it is applied to. A worker whose update is
running still acts with its theta', as the paper's threads do. One worker alone is A2C with
one process, to the bit (its rollout and RMSprop are A2C's).

Serial and local place every worker on this machine; ray is refused (``check``): its members
may sit on other nodes, where no memory is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from wheeler2.agents import a2c

from wheeler2.agent import SpaceInfo

_SPLIT = 2**20  # the shared update count's low slot wraps here (see shared_tensors)


def _count(slots: torch.Tensor) -> int:
    return int(slots[0]) * _SPLIT + int(slots[1])


def _increment(slots: torch.Tensor) -> None:
    """One more update, under the block's lock."""
    if slots[1] + 1.0 >= _SPLIT:
        slots[0] += 1.0
        slots[1] = 0.0
    else:
        slots[1] += 1.0


class A3C(a2c.A2C):
    Params = a2c.Params  # A2C's keys, as documented there: the losses are A2C's
    algo = "a3c"

    def __init__(
        self, space: SpaceInfo, params: a2c.Params, device: str = "cpu", seed: int = 0
    ) -> None:
        super().__init__(space, params, device, seed)
        self.theta: list[torch.Tensor] | None = None  # the shared parameters, once attached
        self.lock: Callable[[], AbstractContextManager[Any]] | None = None
        self.shared_updates: torch.Tensor | None = None  # updates by every worker, together
        self._restored_count: int | None = None  # that count, from a checkpoint

    # -- what the engine shares --------------------------------------------------------------

    def shared_tensors(self) -> dict[str, torch.Tensor]:
        """theta (policy and critic parameters), RMSProp's g of each, and the count of
        updates every worker applied."""
        out: dict[str, torch.Tensor] = {}
        for i, p in enumerate(self.params_list):
            out[f"theta/{i}"] = p.detach()
            g = self.opt.state.get(p, {}).get("square_avg")
            out[f"g/{i}"] = torch.zeros_like(p) if g is None else g
        # The block is float32, exact for integers only up to 2^24: the count is kept in two
        # slots, [whole multiples of 2^20, the rest], each far from that limit.
        count = self._shared_count()
        out["updates"] = torch.tensor([float(count // _SPLIT), float(count % _SPLIT)])
        return out

    def shared_signature(self) -> str:
        """The networks' layers and activations: workers whose shapes match but whose
        functions differ must not share theta."""
        return repr(self.policy) + repr(self.critic)

    def _shared_count(self) -> int:
        if self.shared_updates is not None:
            return _count(self.shared_updates)
        return self._restored_count if self._restored_count is not None else self.updates

    def use_shared(
        self,
        tensors: dict[str, torch.Tensor],
        lock: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        """Act with a copy of the shared theta and send every update to it."""
        n = len(self.params_list)
        theta = [tensors[f"theta/{i}"].requires_grad_(True) for i in range(n)]
        p = self.params
        shared = torch.optim.RMSprop(theta, lr=p.lr, alpha=0.99, eps=p.rms_prop_eps)
        for i, t in enumerate(theta):  # RMSprop's statistics are the block's, not its own
            shared.state[t] = {"step": torch.zeros(()), "square_avg": tensors[f"g/{i}"]}
        self.theta, self.lock, self.opt = theta, lock, shared
        self.shared_updates = tensors["updates"]
        with lock():
            self._take_theta()

    @torch.no_grad()
    def _take_theta(self) -> None:
        """theta' <- theta."""
        assert self.theta is not None
        for mine, shared in zip(self.params_list, self.theta):
            mine.copy_(shared)

    # -- the step ------------------------------------------------------------------------------

    def worker_grads(
        self, loss: torch.Tensor, params: list[torch.Tensor], max_grad_norm: float
    ) -> list[torch.Tensor]:
        """d = grad L(theta'), its norm clipped to ``max_grad_norm``: A2C's very operations."""
        for p in params:
            p.grad = None
        loss.backward()
        if max_grad_norm > 0:
            nn.utils.clip_grad_norm_(params, max_grad_norm)
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        for p in params:
            p.grad = None
        return grads

    def gradient_step(  # type: ignore[override]
        self, opt: torch.optim.Optimizer, loss: torch.Tensor, params: Any, max_grad_norm: float
    ) -> None:
        if self.theta is None or self.lock is None:  # nothing shared: A2C's own step
            a2c.A2C.gradient_step(opt, loss, params, max_grad_norm)
            return
        grads = self.worker_grads(loss, list(params), max_grad_norm)
        with self.lock():
            for t, g in zip(self.theta, grads):
                t.grad = g
            self.opt.step()  # the shared RMSprop: theta and g in the block
            for t in self.theta:
                t.grad = None
            assert self.shared_updates is not None
            _increment(self.shared_updates)
            self._take_theta()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        # The shared optimizer's statistics are views of the whole block: saved as copies of
        # their own, not as the block's storage under every one of them.
        for slot in state["opt"]["state"].values():
            for key, value in slot.items():
                if isinstance(value, torch.Tensor):
                    slot[key] = value.clone()
        return state | {"shared_updates": self._shared_count()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._restored_count = int(state.get("shared_updates", self.updates))

    def update(self) -> dict[str, float]:
        metrics = super().update()
        if self.shared_updates is not None:
            metrics["shared_updates"] = float(_count(self.shared_updates))
        return metrics
