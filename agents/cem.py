"""An evolutionary member: a population of deterministic actors searched by CEM, with the ERL
and CEM-RL ways of cooperating with a gradient learner (docs/populations.md).

Each generation draws ``pop_size`` actors from a diagonal Gaussian over actor parameters
(``agents/parts/evolution.py`` :class:`SepCEM`), plays each for ``episodes`` episodes (fitness =
mean episode return, the task's heads summed with their weights), and moves the Gaussian
toward the ``elites`` best. Every step any of them takes goes into the team's central replay,
like any member's, so a TD3 / DDPG learner trains on the population's data.

* ``inject = true``, ERL (Khadka & Tumer, NeurIPS 2018): the learner's actor, pulled through the
  ordinary weight sync into this member's ``actor``, replaces the last sample of the next
  generation whenever a new one has arrived; it competes for the elite like any sample, so a
  good RL actor pulls the distribution toward itself. (ERL's population is a genetic
  algorithm; here the same injection feeds CEM, whose state is a mean and a variance.)
* ``grad_share > 0``, CEM-RL (Pourchot & Sigaud, ICLR 2019): that share of each generation's
  samples takes ``grad_steps`` deterministic policy gradient steps on the learner's critic,
  each right before its first episode,

      L(theta_k) = - mean_i  sum_h c_h Q1_h(s_i, mu_theta_k(s_i)),  s_i from this member's
                                                                    last ``states`` observations

  and the stepped actors are what is played and told to CEM. The critic is pulled by name
  (``pulled_modules``: ``"critic"``, and ``"actor"`` too with ``inject``) through the same
  versioned weight block that carries the actor, so it is as fresh as the learner's last
  publish and costs no extra channel; the member never trains it. The states are this
  member's own recent observations, as the detached explorer's (``agents/detached.py``):
  sampling the central replay would spend the learner's ratio-gate credit.

Without either (``role = "learner"``) the population learns alone. Evaluation plays the
distribution's mean, CEM-RL's reported actor, or with ``eval_actor = "champion"`` the best of
the last generation played by fitness (the injected actor included), ERL's champion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from wheeler2.agents.offpolicy import actor_step
from wheeler2.agents.parts import seeded
from wheeler2.agents.parts.evolution import Roster, SepCEM, flat, set_flat
from wheeler2.agents.parts.heads import DeterministicActor, QCritic, TwinQCritic

from wheeler2.agent import ActOut, Agent, SpaceInfo, Transitions
from wheeler2.checkpoint import generator_state, set_generator_state
from wheeler2.schema import bounded, choice, sizes


@dataclass
class Params:
    # Bounds in the fields are checked by the config reader against [team.params].
    pop_size: int = bounded(10, ge=2)  # actors per generation (CEM-RL's 10)
    elites: int = bounded(5, ge=1)  # the best that move the distribution (at most pop_size)
    episodes: int = bounded(1, ge=1)  # episodes per actor; fitness is their mean return
    sigma_init: float = bounded(1e-3, gt=0)  # initial variance of every parameter (CEM-RL's)
    damp: float = bounded(1e-3, ge=0)  # variance added after each update, decaying ...
    damp_limit: float = bounded(1e-5, ge=0)  # ... toward this ...
    damp_tau: float = bounded(0.95, ge=0, le=1)  # ... at this rate per generation
    # Actor layers, and the pulled critic's: the learner's `hidden`, to take its weights.
    hidden: list[int] = sizes(400, 300)
    # ERL: the learner's actor, pulled by sync, joins each generation it is new for.
    inject: bool = False
    # CEM-RL: the share of each generation that climbs the learner's critic before playing.
    grad_share: float = bounded(0.0, ge=0, le=1)
    grad_steps: int = bounded(1000, ge=1)  # gradient steps per stepped actor per generation
    grad_starts: int = bounded(10_000, ge=0)  # this member's env steps before the first
    grad_batch: int = bounded(100, ge=1)  # states per gradient step
    lr_actor: float = bounded(1e-3, gt=0, le=1)  # Adam, fresh for each stepped actor
    max_grad_norm: float = bounded(0.0, ge=0)  # clipping of those steps; 0 = off
    states: int = bounded(100_000, ge=1)  # window of own observations the steps draw from
    # The learner's critic, built alike to take its weights: a twin pair (TD3, SAC) or one
    # (DDPG), with "separate" or "shared" heads (the learner's `critic`).
    critic_pair: bool = True
    critic: str = choice("separate", ("separate", "shared"))
    # What evaluation plays: the distribution's mean (CEM-RL's reported actor) or the last
    # played generation's best by fitness, the injected actor included (ERL's champion).
    eval_actor: str = choice("mean", ("mean", "champion"))


def stepped_count(p: Params) -> int:
    """How many actors of each generation climb the critic (CEM-RL)."""
    return int(round(p.grad_share * p.pop_size))


class CEM(Agent):
    Params = Params
    uses_replay = False  # it learns in observe, from its own episodes; its steps feed the replay

    def __init__(self, space: SpaceInfo, params: Params, device: str = "cpu", seed: int = 0):
        super().__init__(space, params, "cpu", seed)
        p = params
        if space.discrete:
            raise ValueError("cem plays deterministic actors over continuous actions")
        if space.obs_shape:  # its actors are plain MLPs: 0-255 pixels in, unscaled
            raise ValueError(
                "cem's actors are MLPs over flat observations, with no image encoder: on images "
                "use sac, td3 or ddpg"
            )
        if p.elites > p.pop_size:
            raise ValueError(f"elites = {p.elites} must not exceed pop_size = {p.pop_size}")
        obs, act = space.obs_dim, space.act_dim
        self.head_w = torch.tensor(space.head_weights, dtype=torch.float32)
        self.head_w_np = np.asarray(space.head_weights, np.float64)

        def actor() -> DeterministicActor:
            return DeterministicActor(obs, p.hidden, act, "relu")

        with seeded(seed):
            self.mean_net = actor()  # the distribution's mean: what evaluation plays
            self.pop = [actor() for _ in range(p.pop_size)]  # each drawn anew by ask
            self.slot = actor()  # where sync writes the learner's actor (ERL)
            self.champion_net = actor()  # the last generation's best (eval_actor = champion)
        self.champion: torch.Tensor | None = None  # its parameters, once a generation ended
        self.cem = SepCEM(
            flat(self.mean_net),
            p.pop_size,
            p.elites,
            p.sigma_init,
            p.damp,
            p.damp_limit,
            p.damp_tau,
            seed + 1,
        )
        critic_cls = TwinQCritic if p.critic_pair else QCritic
        self.critic = critic_cls(obs, act, p.hidden, space.num_heads, p.critic, "relu")
        self.critic.requires_grad_(False)  # pulled, read, never trained here
        self.rng = np.random.default_rng(seed + 2)
        self.states = np.zeros((p.states, obs), np.float32)
        self.size = self.next = 0
        self.env_steps = 0
        self.generation = 0
        self.injected: torch.Tensor | None = None  # the last actor injected
        self.injected_at: int | None = None  # its index in the generation being played
        self.roster: Roster | None = None  # made at the first act, when the copies are known
        self._saved_roster: dict[str, Any] | None = None  # a checkpoint's, until then
        self.climb: list[int] = []  # CEM-RL: actors of this generation still to step
        self.gains: list[float] = []  # and the rise of mean Q of those stepped
        self.ep_return: np.ndarray | None = None

    # -- what the engine reads -------------------------------------------------------------

    @property
    def actor(self) -> nn.Module:
        # With inject, the sync target; otherwise the mean, which evaluation plays.
        return self.slot if self.params.inject else self.mean_net

    def pulled_modules(self) -> dict[str, nn.Module] | None:
        """CEM-RL takes the learner's critic by name (and its actor with it under inject);
        plain ERL takes the actor the ordinary way (None)."""
        if self.params.grad_share <= 0:
            return None
        return {"critic": self.critic, **({"actor": self.slot} if self.params.inject else {})}

    @staticmethod
    def check_member(
        params: Params, *, role: str, heads: tuple[str, ...], syncs: bool
    ) -> tuple[str, str] | None:
        """(key, problem) when these params cannot run in this role."""
        p = params
        if p.elites > p.pop_size:
            return "elites", f"elites = {p.elites} must not exceed pop_size = {p.pop_size}"
        if p.grad_share > 0 and not stepped_count(p):
            least = 0.5 / p.pop_size
            return "grad_share", (
                f"grad_share = {p.grad_share} of pop_size = {p.pop_size} rounds to no actor: "
                f"nothing would climb the critic; set grad_share above {least:g} (CEM-RL's 0.5) "
                f"or 0"
            )
        takes = [k for k, on in (("inject", p.inject), ("grad_share", p.grad_share > 0)) if on]
        if takes and role == "learner":
            return takes[0], (
                f"{takes[0]} takes from the table's learner, and this member is the learner: "
                f'make it role = "explorer" beside a td3 / ddpg learner, or turn {takes[0]} off'
            )
        if takes and not syncs:
            return "sync", (
                f"{takes[0]} needs the learner's weights: set sync = {{ every = ... }} (its own "
                f"env steps between pulls)"
            )
        if syncs and not takes:
            # The sync target is then `actor`, the distribution's mean itself: every pull would
            # put the learner's actor where evaluation and the filler episodes play the mean.
            return "sync", (
                "a cem member takes nothing from the learner without inject (ERL) or "
                "grad_share (CEM-RL), and a sync would write the learner's actor over the "
                "population's mean: remove sync, or set inject = true or grad_share > 0"
            )
        return None

    # -- acting ----------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: np.ndarray, explore: bool, state: np.ndarray | None = None) -> ActOut:
        x = torch.as_tensor(obs, dtype=torch.float32)
        if not explore:
            return ActOut(self.eval_net()(x).numpy())
        roster = self._roster(len(obs))
        action = np.empty((len(obs), self.space.act_dim), np.float32)
        for k in np.unique(roster.playing):
            rows = roster.playing == k
            net = self.pop[k] if k >= 0 else self.mean_net
            action[rows] = net(x[rows]).numpy()
        return ActOut(action)

    def eval_net(self) -> nn.Module:
        """What evaluation plays: the mean, or the champion once a generation has ended."""
        if self.params.eval_actor == "champion" and self.champion is not None:
            return self.champion_net
        return self.mean_net

    def _roster(self, copies: int) -> Roster:
        if self.roster is None:
            # The first generation is drawn here, not in __init__: by the first act the member
            # has pulled the learner's actor (ERL starts the distribution on it).
            self.roster = Roster(copies, self.params.pop_size, self.params.episodes)
            if self._saved_roster is not None:
                self.roster.load_state_dict(self._saved_roster)
            else:
                self._new_generation()
            self.ep_return = np.zeros(copies, np.float64)
            for i in range(copies):
                self._assign(i)
        return self.roster

    def _assign(self, copy: int) -> None:
        """Copy ``copy`` starts an episode with the next actor; CEM-RL steps an actor on the
        critic right before its first episode, not the whole share at once: the member's
        heartbeat waits for each step of the loop, and one actor's steps take seconds."""
        assert self.roster is not None
        self.roster.assign(copy)
        k = int(self.roster.playing[copy])
        if k in self.climb:
            self.climb.remove(k)
            self.gains.append(self._climb(self.pop[k]))

    def observe(self, step: Transitions) -> dict[str, float] | None:
        roster = self._roster(len(step.obs))
        assert self.ep_return is not None
        self.env_steps += len(step.obs)
        self._remember(step.obs)
        self.ep_return += np.asarray(step.reward, np.float64) @ self.head_w_np
        ended = np.flatnonzero(np.asarray(step.terminated) | np.asarray(step.truncated))
        for i in ended:
            roster.episode_end(int(i), float(self.ep_return[i]))
            self.ep_return[i] = 0.0
        metrics = self._tell() if roster.complete else None
        for i in ended:
            self._assign(int(i))
        return metrics

    def _remember(self, obs: np.ndarray) -> None:
        rows = np.asarray(obs, np.float32)[-len(self.states) :]
        idx = (self.next + np.arange(len(rows))) % len(self.states)
        self.states[idx] = rows
        self.next = int((self.next + len(rows)) % len(self.states))
        self.size = min(len(self.states), self.size + len(rows))

    # -- evolving --------------------------------------------------------------------------

    def _tell(self) -> dict[str, float]:
        """The generation is played: update the distribution, draw the next one."""
        assert self.roster is not None
        fitness = self.roster.fitness()
        samples = torch.stack([flat(net) for net in self.pop])  # as played (stepped ones too)
        order = self.cem.tell(samples, fitness)
        set_flat(self.mean_net, self.cem.mean)
        self.champion = samples[int(order[0])].clone()
        set_flat(self.champion_net, self.champion)
        ranked = fitness[order]
        metrics = {
            "generation": float(self.generation),
            "fitness_best": float(ranked[0]),
            "fitness_elite": float(ranked[: self.params.elites].mean()),
            "fitness_mean": float(fitness.mean()),
            "cem_sigma": self.cem.sigma,
        }
        if self.injected_at is not None:
            # 0: the learner's actor was the generation's best.
            rank = int((order == self.injected_at).nonzero()[0, 0])
            metrics["injected_rank"] = float(rank)
        if self.gains:  # how far the stepped actors climbed the critic, on average
            metrics["cemrl_q_gain"] = float(np.mean(self.gains))
        self._new_generation()
        return metrics

    def _new_generation(self) -> None:
        p = self.params
        pulled = flat(self.slot) if p.inject else None
        if pulled is not None and self.injected is None:
            # The learner's first actor centres the distribution: injected actors far from
            # every sample would otherwise only blow up the variance of the next update.
            self.cem.mean = pulled.double()
            set_flat(self.mean_net, pulled)
        for net, theta in zip(self.pop, self.cem.ask()):
            set_flat(net, theta)
        self.injected_at = None
        if pulled is not None and (self.injected is None or not torch.equal(pulled, self.injected)):
            set_flat(self.pop[-1], pulled)
            self.injected, self.injected_at = pulled, p.pop_size - 1
        # CEM-RL: which actors climb the critic before they play (see _assign).
        stepped = stepped_count(p)
        self.gains = []
        self.climb = []
        if stepped and self.env_steps >= p.grad_starts and self.size >= p.grad_batch:
            self.climb = [k for k in range(stepped) if k != self.injected_at]
        if self.roster is not None:
            self.roster.start()
        self.generation += 1

    def _q(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """sum_h c_h Q1_h(s, a) of the pulled critic, [B]."""
        q1 = getattr(self.critic, "q1", self.critic)
        return (q1(s, a) * self.head_w).sum(-1)

    def _climb(self, net: nn.Module) -> float:
        """``grad_steps`` DPG steps of ``net`` on the critic; the rise of its mean Q."""
        p = self.params
        params = list(net.parameters())
        opt = torch.optim.Adam(params, lr=p.lr_actor)
        probe = torch.as_tensor(self.states[self.rng.integers(0, self.size, p.grad_batch)])
        with torch.no_grad():
            before = float(self._q(probe, net(probe)).mean())
        # Reached from act() (under no_grad) whenever a copy's next actor is one to step.
        with torch.enable_grad():
            for _ in range(p.grad_steps):
                s = torch.as_tensor(self.states[self.rng.integers(0, self.size, p.grad_batch)])
                loss = -self._q(s, net(s)).mean()
                actor_step(loss, opt, params, p.max_grad_norm)
        with torch.no_grad():
            return float(self._q(probe, net(probe)).mean()) - before

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        roster = self.roster.state_dict() if self.roster is not None else self._saved_roster
        return {
            "algo": "cem",
            "cem": self.cem.state_dict(),
            "population": torch.stack([flat(net) for net in self.pop]),
            "roster": roster,
            "generation": self.generation,
            "injected": self.injected,
            "injected_at": self.injected_at,
            "champion": self.champion,
            "climb": list(self.climb),
            "gains": list(self.gains),
            "slot": self.slot.state_dict(),
            "critic": self.critic.state_dict(),
            # The whole window, a fixed shape that resume can check against the config.
            "states": torch.from_numpy(self.states.copy()),
            "size": self.size,
            "next": self.next,
            "env_steps": self.env_steps,
            "streams": {"rng": generator_state(self.rng)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cem.load_state_dict(state["cem"])
        set_flat(self.mean_net, self.cem.mean)
        for net, theta in zip(self.pop, state["population"]):
            set_flat(net, theta)
        self.generation = int(state["generation"])
        self.injected = state["injected"]
        self.injected_at = state["injected_at"]
        # (Checkpoints from before eval_actor have none: the mean is played until a generation
        # ends.)
        self.champion = state.get("champion")
        if self.champion is not None:
            set_flat(self.champion_net, self.champion)
        self.climb = [int(k) for k in state["climb"]]
        self.gains = [float(g) for g in state["gains"]]
        self.slot.load_state_dict(state["slot"])
        self.critic.load_state_dict(state["critic"])
        self.states[...] = state["states"].numpy()
        self.size, self.next = int(state["size"]), int(state["next"])
        self.env_steps = int(state["env_steps"])
        set_generator_state(self.rng, state["streams"]["rng"])
        # The envs restart their episodes: the roster is rebuilt at the next act from this.
        self._saved_roster = state["roster"]
        self.roster = None
