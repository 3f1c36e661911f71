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

What a worker evaluates and saves is theta, not its theta' (which lags the others' updates):
an eval plays theta as it stood when the eval began (the paper's evaluation thread reads the
shared model the same way), and a checkpoint holds theta, g and the update count read under
the lock at one moment, so a resume rebuilds the block as it was.

Serial and local place every worker on this machine; ray is refused (``check``): its members
may sit on other nodes, where no memory is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
from torch import nn
from wheeler2.agents import a2c

from wheeler2.agent import ActOut, SpaceInfo

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
        self._eval_theta: list[torch.Tensor] | None = None  # theta as the running eval plays it

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

    def shared_signature(self) -> dict[str, object]:
        """What must match in every worker beyond the shapes: the networks' layers and
        activations (one theta, one function), the shared RMSProp's step size and eps (one
        optimizer over one g), and the return the one critic learns (gamma, td_lambda)."""
        p = self.params
        return {
            "networks": repr(self.policy) + repr(self.critic),
            "lr": p.lr,
            "rms_prop_eps": p.rms_prop_eps,
            "gamma": p.gamma,
            "td_lambda": p.td_lambda,
        }

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

    def _theta_now(self) -> list[torch.Tensor]:
        """A copy of theta, read under the lock."""
        assert self.theta is not None and self.lock is not None
        with self.lock():
            return [t.detach().clone() for t in self.theta]

    # -- acting: training with theta', evaluating theta ----------------------------------------

    def begin_eval(self) -> None:
        """An eval begins (the engine's optional hook): it plays theta as it is now for all its
        steps, though other workers go on updating theta meanwhile. Taken here, not at the first
        deterministic act, since two evals may come with no training step between them (the
        closing eval right after the last in-run one) and the second must not replay the
        first's theta."""
        self._eval_theta = None if self.theta is None else self._theta_now()

    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        if explore or self.theta is None:
            self._eval_theta = None  # the next eval reads theta afresh
            return super().act(obs, explore, state)
        if self._eval_theta is None:  # an eval begins: one theta for all its steps
            self._eval_theta = self._theta_now()
        with torch.no_grad():
            mine = [p.detach().clone() for p in self.params_list]
            for p, t in zip(self.params_list, self._eval_theta):
                p.copy_(t)
        try:
            return super().act(obs, explore, state)
        finally:
            with torch.no_grad():
                for p, t in zip(self.params_list, mine):
                    p.copy_(t)

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
                t.grad = g.to(t.device)  # theta is in shared CPU memory, theta' on the device
            self.opt.step()  # the shared RMSprop: theta and g in the block
            for t in self.theta:
                t.grad = None
            assert self.shared_updates is not None
            _increment(self.shared_updates)
            self._take_theta()

    def state_dict(self) -> dict[str, Any]:
        if self.theta is None or self.lock is None:
            return super().state_dict() | {"shared_updates": self._shared_count()}
        # theta, g and the count at one moment of the block, under its lock: theta' lags the
        # other workers' updates, and a resume rebuilds the block from what is saved here.
        with self.lock():
            state = super().state_dict()
            theta = [t.detach().clone() for t in self.theta]
            # The shared optimizer's statistics are views of the whole block: saved as copies
            # of their own, not as the block's storage under every one of them.
            for slot in state["opt"]["state"].values():
                for key, value in slot.items():
                    if isinstance(value, torch.Tensor):
                        slot[key] = value.clone()
            count = self._shared_count()
        names = [("policy", n) for n, _ in self.policy.named_parameters()]
        names += [("critic", n) for n, _ in self.critic.named_parameters()]
        for (module, name), value in zip(names, theta, strict=True):
            state[module][name] = value.to(state[module][name].device)
        return state | {"shared_updates": count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._restored_count = int(state.get("shared_updates", self.updates))

    def update(self) -> dict[str, float]:
        metrics = super().update()
        if self.shared_updates is not None:
            metrics["shared_updates"] = float(_count(self.shared_updates))
        return metrics
