"""A population of actors searched by the cross-entropy method, and who evaluates whom.

:class:`SepCEM` is the diagonal-covariance CEM of CEM-RL (Pourchot & Sigaud, ICLR 2019), over
the flat parameter vector theta of an actor. Each generation:

    ask:   x_k = mu + sqrt(Sigma) * eps_k,  eps_k ~ N(0, I),      k = 1 .. P
    tell:  sort by fitness, best first; the e elites x_(1) .. x_(e) with weights
           lambda_i = log((e + 1) / i) / sum_j log((e + 1) / j)   (CMA-ES's weights)
           mu'    = sum_i lambda_i x_(i)
           Sigma' = sum_i lambda_i (x_(i) - mu)^2 + eps            (around the *old* mean)
           eps    <- tau eps + (1 - tau) eps_limit                 (the added noise decays)

Its state is three tensors and a float, so a checkpoint holds it as it is (weights_only).
Why not CMA-ES through the ``cma`` package (docs/populations.md): a full covariance of an
actor of 400-300 units (124,502 parameters on Swimmer) is ~1.5e10 numbers, and the package's
state is a Python object that a ``weights_only`` checkpoint cannot hold without unpickling code
on load.

:class:`Roster` hands individuals to env copies: each copy plays one episode for one
individual at a time; an individual's fitness is its mean return over ``episodes`` episodes.
A copy that finds nobody left to evaluate plays the distribution's mean until its episode
ends (its steps still feed the replay; its return is not anyone's fitness).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["Roster", "SepCEM", "flat", "set_flat"]


def flat(module: nn.Module) -> torch.Tensor:
    """The parameters of ``module`` as one vector (a copy)."""
    return nn.utils.parameters_to_vector(module.parameters()).detach().clone()


@torch.no_grad()
def set_flat(module: nn.Module, theta: torch.Tensor) -> None:
    """Write the vector ``theta`` into ``module``'s parameters, in place."""
    nn.utils.vector_to_parameters(theta.to(next(module.parameters()).dtype), module.parameters())


class SepCEM:
    """Diagonal-covariance CEM over vectors of ``dim`` numbers (see the module docstring)."""

    def __init__(
        self,
        mean: torch.Tensor,
        pop_size: int,
        elites: int,
        sigma_init: float,
        damp: float,
        damp_limit: float,
        damp_tau: float,
        seed: int,
    ) -> None:
        if not 1 <= elites <= pop_size:
            raise ValueError(f"elites must be in [1, pop_size = {pop_size}], got {elites}")
        self.pop_size, self.elites = int(pop_size), int(elites)
        self.mean = mean.detach().clone().double()
        self.var = torch.full_like(self.mean, float(sigma_init))
        self.damp, self.damp_limit, self.damp_tau = float(damp), float(damp_limit), float(damp_tau)
        logs = [math.log((self.elites + 1) / i) for i in range(1, self.elites + 1)]
        w = torch.tensor(logs, dtype=torch.float64)
        self.weights = w / w.sum()
        self.gen = torch.Generator().manual_seed(int(seed))

    def ask(self) -> torch.Tensor:
        """``[P, dim]`` samples of the current distribution (float32)."""
        eps = torch.randn((self.pop_size, len(self.mean)), generator=self.gen, dtype=torch.float64)
        return (self.mean + eps * self.var.sqrt()).float()

    def tell(self, samples: torch.Tensor, fitness: torch.Tensor) -> torch.Tensor:
        """Move the distribution toward the elites of ``samples`` by ``fitness`` (higher is
        better); returns the order, best first."""
        order = torch.argsort(fitness.double(), descending=True, stable=True)
        elite = samples.double()[order[: self.elites]]
        z = elite - self.mean  # deviations from the mean the samples were drawn around
        self.mean = (self.weights[:, None] * elite).sum(0)
        self.var = (self.weights[:, None] * z.pow(2)).sum(0) + self.damp
        self.damp = self.damp_tau * self.damp + (1.0 - self.damp_tau) * self.damp_limit
        return order

    @property
    def sigma(self) -> float:
        """The mean standard deviation over the parameters."""
        return float(self.var.sqrt().mean())

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean.clone(),
            "var": self.var.clone(),
            "damp": self.damp,
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["mean"].shape != self.mean.shape:
            raise ValueError(
                f"the saved CEM mean has {state['mean'].numel()} parameters, this actor "
                f"{self.mean.numel()}"
            )
        self.mean = state["mean"].double().clone()
        self.var = state["var"].double().clone()
        self.damp = float(state["damp"])
        self.gen.set_state(state["gen"])


class Roster:
    """Which individual each of ``copies`` env copies plays (-1: the mean, a filler episode),
    and the fitness gathered so far in this generation."""

    def __init__(self, copies: int, pop_size: int, episodes: int) -> None:
        self.pop_size, self.episodes = int(pop_size), int(episodes)
        self.playing = np.full(copies, -1, np.int64)
        self.pending: deque[int] = deque()
        self.returns = np.zeros(pop_size, np.float64)  # summed over finished episodes
        self.runs = np.zeros(pop_size, np.int64)

    def start(self) -> None:
        """A new generation: everyone to play, nothing gathered yet."""
        self.pending = deque(int(k) for k in range(self.pop_size) for _ in range(self.episodes))
        self.returns[:] = 0.0
        self.runs[:] = 0

    def assign(self, copy: int) -> None:
        """Copy ``copy`` starts an episode: the next individual waiting, else the mean."""
        self.playing[copy] = self.pending.popleft() if self.pending else -1

    def episode_end(self, copy: int, episode_return: float) -> None:
        k = int(self.playing[copy])
        if k >= 0:
            self.returns[k] += episode_return
            self.runs[k] += 1
        self.playing[copy] = -1

    @property
    def complete(self) -> bool:
        return bool((self.runs >= self.episodes).all())

    def fitness(self) -> torch.Tensor:
        """Each individual's mean return over its episodes."""
        return torch.as_tensor(self.returns / np.maximum(self.runs, 1))

    def state_dict(self) -> dict[str, Any]:
        # Episodes in progress are not saved (a resumed member's envs restart theirs): whoever
        # was playing goes back to the front of the queue.
        waiting = [int(k) for k in self.playing if k >= 0] + list(self.pending)
        return {
            "pending": torch.tensor(waiting, dtype=torch.int64),
            "returns": torch.from_numpy(self.returns.copy()),
            "runs": torch.from_numpy(self.runs.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = deque(int(k) for k in state["pending"].tolist())
        self.returns[:] = state["returns"].numpy()
        self.runs[:] = state["runs"].numpy()
        self.playing[:] = -1
